"""The SkyRL environment against a real server (skyrl-gym is installed by scripts/test.sh)."""

from endless_env import Client
from conftest import oracle_reply

LOOP = "<think>Look again.</think>\n<command>ls</command>"


def test_endless_env_runs_an_episode_from_the_sessions_own_prompt(server, workspace, task_ids):
    from endless_env.skyrl import EndlessEnv
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    task = task_ids[0]
    extras = {"extra_info": {"task_id": task, "server_url": server.url}, "reward_spec": {"method": "endless"}}
    env = EndlessEnv({"token": server.token}, extras)
    assert isinstance(env, BaseTextEnv)
    assert env.session_id is None  # no sandbox until init
    row_prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    out, meta = env.init(row_prompt)
    # The first prompt is the session's own: the server's system prompt and the instruction,
    # the same messages a client opening this task gets; not the dataset row's.
    c = Client(server.url, server.token)
    other = c.open(task, run="pytest-skyrl-prompt")
    c.close(other.id)
    assert out == other.messages and out != row_prompt
    assert [m["role"] for m in out] == ["system", "user"]
    assert meta["session_id"] == env.session_id and meta["max_turns"] == env.max_turns
    step = env.step(oracle_reply(workspace, task))
    assert step["done"] is False and step["observations"][0]["role"] == "user"
    step = env.step("<think>ok</think><action>done</action>")
    assert step["done"] is True and step["reward"] == 1.0
    assert env.get_metrics()["passed"] is True
    env.close()


def test_the_trainers_max_turns_comes_before_the_tasks(server, task_ids):
    """SkyRL's generator puts `generator.max_turns` in `extras["max_turns"]` and builds the env
    with `skyrl_gym.make(env_class, env_config=..., extras=...)`; here `generator.max_turns=3`
    against a row that says 10."""
    import skyrl_gym
    import endless_env.skyrl  # noqa: F401  (registers)

    extras = {"extra_info": {"task_id": task_ids[1], "server_url": server.url, "max_turns": 10},
              "reward_spec": {"method": "endless"}}
    extras["max_turns"] = 3  # what SkyRLGymGenerator.agent_loop does with generator.max_turns
    env = skyrl_gym.make("endless", env_config={"token": server.token}, extras=extras)
    _, meta = env.init([])
    assert meta["max_turns"] == 3 and env.max_turns == 3
    turns = []
    for _ in range(10):
        step = env.step(LOOP)
        turns.append(step["metadata"]["turn"])
        if step["done"]:
            break
    assert turns == [1, 2, 3] and step["done"] is True
    assert step["metadata"]["end_reason"] == "max_turns"
    env.close()


def test_turn_limits_in_order_trainer_env_config_row_task():
    from endless_env.skyrl import turn_limit

    row = {"extra_info": {"task_id": "t", "max_turns": 10}}
    assert turn_limit({"max_turns": 5}, dict(row, max_turns=3)) == 3
    assert turn_limit({"max_turns": 5}, row) == 5
    assert turn_limit({}, row) == 10
    assert turn_limit(None, {"extra_info": {"task_id": "t"}}) is None


def test_registered_as_env_class_endless(server, task_ids):
    import skyrl_gym
    import endless_env.skyrl  # noqa: F401  (registers)

    env = skyrl_gym.make("endless", env_config={"token": server.token},
                         extras={"extra_info": {"task_id": task_ids[1], "server_url": server.url}})
    assert type(env).__name__ == "EndlessEnv" and env.session_id is None
    env.close()


def test_endless_env_can_choose_the_tools_protocol(server, workspace, task_ids):
    """Issue 49: `env_config.protocol = "tools"`: the session offers its functions, the model's
    Hermes `<tool_call>` text is the action, and each call's output comes back as the
    observation (a `user` turn: Hermes text calls carry no call id for a `tool` message)."""
    import json

    from endless_env.skyrl import EndlessEnv
    from test_tools import oracle_command

    task = task_ids[2]
    extras = {"extra_info": {"task_id": task, "server_url": server.url}, "reward_spec": {"method": "endless"}}
    env = EndlessEnv({"token": server.token, "protocol": "tools"}, extras)
    _, meta = env.init([])
    assert [t["function"]["name"] for t in meta["tools"]] == ["bash", "finish"]
    call = {"name": "bash", "arguments": {"command": oracle_command(workspace, task)}}
    step = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert step["done"] is False
    assert [m["role"] for m in step["observations"]] == ["user"], step["observations"]
    assert step["observations"][0]["content"].endswith("(exit_code=0)")
    step = env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
    assert step["done"] is True and step["reward"] == 1.0
    env.close()
