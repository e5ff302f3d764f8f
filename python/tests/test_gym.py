from endless_env import Client
from endless_env.gym import EndlessTextEnv
from conftest import oracle_reply


def test_gym_style_episode(server, workspace, task_ids):
    env = EndlessTextEnv(task_ids[1], Client(server.url, server.token), max_turns=4)
    obs, info = env.reset()
    assert isinstance(obs, str) and obs and info["session_id"]
    obs, reward, terminated, truncated, info = env.step("not a reply")
    assert "could not be parsed" in obs and not terminated
    obs, reward, terminated, truncated, info = env.step(oracle_reply(workspace, task_ids[1]))
    obs, reward, terminated, truncated, info = env.step("<action>done</action>")
    assert terminated and not truncated and reward == 1.0
    assert env.session_id is None


def test_running_out_of_turns_truncates(server, task_ids):
    env = EndlessTextEnv(task_ids[2], Client(server.url, server.token), max_turns=1)
    env.reset()
    obs, reward, terminated, truncated, info = env.step("<command>true</command>")
    assert truncated and not terminated and reward == 0.0 and info["end_reason"] == "max_turns"
