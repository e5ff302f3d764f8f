"""The SkyRL environment against a real server (skyrl-gym is installed by scripts/test.sh)."""

from conftest import oracle_reply


def test_endless_env_runs_an_episode_lazily(server, workspace, task_ids):
    from endless_env.skyrl import EndlessEnv
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    task = task_ids[0]
    extras = {"extra_info": {"task_id": task, "server_url": server.url}, "reward_spec": {"method": "endless"}}
    env = EndlessEnv({"token": server.token}, extras)
    assert isinstance(env, BaseTextEnv)
    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    out, meta = env.init(prompt)
    assert out == prompt and env.session_id is None  # no sandbox until the first step
    step = env.step(oracle_reply(workspace, task))
    assert step["done"] is False and step["observations"][0]["role"] == "user"
    step = env.step("<think>ok</think><action>done</action>")
    assert step["done"] is True and step["reward"] == 1.0
    assert env.get_metrics()["passed"] is True
    env.close()


def test_registered_as_env_class_endless(server, task_ids):
    import skyrl_gym
    import endless_env.skyrl  # noqa: F401  (registers)

    env = skyrl_gym.make("endless", env_config={"token": server.token},
                         extras={"extra_info": {"task_id": task_ids[1], "server_url": server.url}})
    assert type(env).__name__ == "EndlessEnv"
    env.close()
