import pytest

from endless_env import Client, EndlessError
from conftest import oracle_reply


def test_health_and_tasks(server, task_ids):
    c = Client(server.url, server.token)
    h = c.health()
    assert h["status"] == "ok" and h["max_sessions"] >= 1
    assert sorted(t["id"] for t in c.tasks()) == sorted(task_ids)


def test_an_oracle_episode_earns_reward_one(server, workspace, task_ids):
    c = Client(server.url, server.token)
    s = c.open(task_ids[0], run="pytest-client")
    assert [m["role"] for m in s.messages] == ["system", "user"]
    r = c.step(s.id, oracle_reply(workspace, task_ids[0]))
    assert r["done"] is False and r["info"]["turn"] == 1
    r = c.step(s.id, "<action>done</action>")
    assert r["done"] is True and r["reward"] == 1.0 and r["info"]["passed"] is True
    final = c.close(s.id)
    assert final["result"]["reward"] == 1.0


def test_errors_are_typed(server, task_ids):
    c = Client(server.url, server.token)
    with pytest.raises(EndlessError) as e:
        c.open("no-such-task")
    assert e.value.status == 404
    with pytest.raises(EndlessError) as e:
        Client(server.url, "wrong").tasks()
    assert e.value.status == 401


def test_sessions_can_be_inspected(server, workspace, task_ids):
    c = Client(server.url, server.token)
    s = c.open(task_ids[1], run="pytest-inspect", policy="pytest")
    view = c.session(s.id)
    assert view["state"] == "running" and view["turns"] == 0 and view["task_id"] == task_ids[1]
    assert view["run_id"] == s.run_id and view["sample"] == s.sample and view["result"] is None
    assert s.id in [v["session_id"] for v in c.sessions()]
    c.step(s.id, "<action>done</action>")
    view = c.session(s.id)
    assert view["state"] == "finished" and view["result"]["done"] is True
    c.close(s.id)
    assert s.id not in [v["session_id"] for v in c.sessions()]
    with pytest.raises(EndlessError) as e:
        c.session(s.id)
    assert e.value.status == 404


def test_unknown_fields_are_refused_by_name(server, task_ids):
    c = Client(server.url, server.token)
    with pytest.raises(EndlessError) as e:
        c._call("POST", "/v1/sessions", {"task_id": task_ids[0], "temprature": 0.7})
    assert e.value.status == 400 and 'unknown field "temprature"' in e.value.message
