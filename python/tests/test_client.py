import http.server
import json
import threading
import time

import pytest

from endless_env import (AuthError, BadRequest, Client, EndlessError, NotFound, Retry, ServerBusy,
                         SessionGone)
from endless_env.client import retryable
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
    assert e.value.status == 404 and isinstance(e.value, NotFound)
    with pytest.raises(AuthError) as e:
        Client(server.url, "wrong").tasks()
    assert e.value.status == 401
    with pytest.raises(BadRequest) as e:
        c.open(task_ids[0], max_turns=0)
    assert e.value.field == "max_turns"
    with pytest.raises(SessionGone):
        c.step("00000000-0000-4000-8000-000000000000", "x")


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
    assert isinstance(e.value, BadRequest) and e.value.field == "temprature"


def test_a_step_sent_twice_with_its_key_runs_once(server, task_ids):
    c = Client(server.url, server.token)
    s = c.open(task_ids[2], run="pytest-keys")
    path = f"/v1/sessions/{s.id}/step"
    body = {"reply": "<command>echo ran >> runs.txt; wc -l < runs.txt</command>"}
    first = c._call("POST", path, body, kind="step", headers={"Idempotency-Key": "same"})
    again = c._call("POST", path, body, kind="step", headers={"Idempotency-Key": "same"})
    assert again == first
    count = c.step(s.id, "<command>echo count=$(wc -l < runs.txt)</command>")
    assert "count=1" in count["observation"], count
    c.close(s.id)


class Flaky(http.server.BaseHTTPRequestHandler):
    """A peer that answers 429 (Retry-After: 1) to the first creates, hangs up on the first
    step, then answers; it keeps every request's Idempotency-Key."""

    seen = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Flaky.seen.append((self.path, self.headers.get("Idempotency-Key"), time.monotonic(), json.loads(body)))
        tries = sum(1 for p, *_ in Flaky.seen if p.split("?")[0] == self.path.split("?")[0])
        if self.path.startswith("/v1/sessions?") and tries <= 2:
            return self.answer(429, {"error": "full"}, {"Retry-After": "1"})
        if self.path.endswith("/step") and tries == 1:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if self.path.startswith("/v1/sessions?"):
            return self.answer(200, {"session_id": "s", "task_id": "t", "messages": [], "max_turns": 3,
                                     "run_id": "r", "sample": 0})
        return self.answer(200, {"observation": "", "done": False, "reward": 0.0, "info": {"turn": 1}})

    def answer(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


def test_creates_and_steps_are_retried_with_one_key():
    peer = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=peer.serve_forever, daemon=True).start()
    try:
        c = Client(f"http://127.0.0.1:{peer.server_port}", "t", timeout=30, retry=Retry(backoff=0.01))
        s = c.open("t", wait=5)
        creates = [x for x in Flaky.seen if x[0].startswith("/v1/sessions?")]
        assert len(creates) == 3 and creates[0][0] == "/v1/sessions?wait=5"
        assert len({k for _, k, *_ in creates}) == 1 and creates[0][1]
        # The server's Retry-After (1 s) is honoured between tries.
        assert all(b[2] - a[2] >= 1.0 for a, b in zip(creates, creates[1:]))
        c.step(s.id, "ls")
        steps = [x for x in Flaky.seen if x[0].endswith("/step")]
        assert len(steps) == 2 and steps[0][1] == steps[1][1] and steps[0][1] != creates[0][1]
        with pytest.raises(ServerBusy) as e:
            Flaky.seen.clear()
            Client(c.url, "t", retry=Retry(attempts=2, backoff=0.01)).open("t")
        assert e.value.retry_after == 1.0 and len(Flaky.seen) == 2
    finally:
        peer.shutdown()


def test_backoff_grows_with_jitter_and_respects_retry_after():
    r = Retry(backoff=1.0, max_backoff=8.0)
    for tries, top in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 8.0)):
        ds = [r.delay(tries) for _ in range(50)]
        assert all(top / 2 <= d <= top for d in ds) and len(set(ds)) > 1
    assert all(5.0 <= r.delay(1, retry_after=5.0) <= 6.0 for _ in range(50))
    busy, gone = EndlessError(429, "full"), EndlessError(404, "gone")
    assert retryable("create", busy) and not retryable("step", busy)
    assert retryable("step", EndlessError(0, "reset")) and not retryable("create", gone)


def test_a_session_is_watched_live_until_its_end(server, workspace, task_ids):
    c = Client(server.url, server.token)
    s = c.open(task_ids[2], run="pytest-stream")
    events, first = [], threading.Event()

    def watch():
        for event in c.stream(s.id):
            events.append(event)
            first.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert first.wait(30), "the stream said nothing"
    c.step(s.id, oracle_reply(workspace, task_ids[2]))
    c.step(s.id, "<action>done</action>")
    watcher.join(60)
    assert not watcher.is_alive(), f"the stream did not end: {events}"
    types = [e["type"] for e in events]
    assert types[0] == "session" and events[0]["session_id"] == s.id, events
    assert types[-1] == "end" and events[-1]["passed"] is True, events
    assert "output" in types and "turn" in types, types
    turns = [e for e in events if e["type"] == "turn"]
    assert turns[0]["turn"] == 1 and turns[0]["exit_code"] == 0, turns
    # A finished session: its view, then its end.
    again = [e["type"] for e in c.stream(s.id)]
    assert again == ["session", "end"], again
    c.close(s.id)
    with pytest.raises(SessionGone):
        list(c.stream(s.id))
    with pytest.raises(AuthError):
        list(Client(server.url, "wrong").stream(s.id))
