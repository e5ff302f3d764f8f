"""64 concurrent clients against `endless serve --max-sessions 16`: every episode finishes,
with no error, through the server's wait queue and the clients' retries (threads with the
sync client, then asyncio with the async client)."""

import asyncio
import json
import sqlite3
import threading

import pytest

from endless_env import AsyncClient, Client, Retry
from conftest import Server, endless, oracle_reply

CLIENTS = 64
MAX_SESSIONS = 16
DONE = "<think>Finished.</think>\n<action>done</action>"


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """A server of its own (its own workspace) that runs at most 16 sessions, and its tasks."""
    ws = tmp_path_factory.mktemp("busy")
    endless(ws, "generate", "--offline", "--count", "3", "--seed", "23", "--json")
    tasks = [t["id"] for t in json.loads(endless(ws, "tasks", "list", "--json").stdout)]
    s = Server(ws, "--max-sessions", str(MAX_SESSIONS))
    yield s, tasks
    assert s.stop() == 0, "".join(s.lines)


def recorded(ws, run):
    db = sqlite3.connect(f"file:{ws / 'endless.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT passed FROM episodes WHERE run_id = ?", (f"serve-{run}",)).fetchall()
    finally:
        db.close()


def test_64_threads_finish_every_episode_through_the_queue(busy):
    server, tasks = busy
    replies = {t: oracle_reply(server.ws, t) for t in tasks}
    results, errors = [], []
    peak = {"queued": 0}

    def episode(i):
        try:
            c = Client(server.url, server.token, retry=Retry(queue_wait=120))
            task = tasks[i % len(tasks)]
            s = c.open(task, run="threads", policy="pytest")
            first = c.step(s.id, replies[task])
            last = first if first["done"] else c.step(s.id, DONE)
            c.close(s.id)
            results.append(last)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    def watch(stop):
        c = Client(server.url, server.token)
        while not stop.is_set():
            peak["queued"] = max(peak["queued"], c.health()["queued"])
            stop.wait(0.05)

    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop,))
    watcher.start()
    threads = [threading.Thread(target=episode, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    stop.set()
    watcher.join()
    assert errors == []
    assert len(results) == CLIENTS
    assert all(r["done"] and r["reward"] == 1.0 for r in results), results
    assert peak["queued"] > 0, "the clients never had to wait: the test did not reach the limit"
    assert recorded(server.ws, "threads") == [(1,)] * CLIENTS
    health = Client(server.url, server.token).health()
    assert health["sessions"] == 0 and health["queued"] == 0


def test_64_asyncio_clients_finish_every_episode(busy):
    server, tasks = busy
    replies = {t: oracle_reply(server.ws, t) for t in tasks}

    async def episode(c, i):
        task = tasks[i % len(tasks)]
        s = await c.open(task, run="asyncio", policy="pytest")
        first = await c.step(s.id, replies[task])
        last = first if first["done"] else await c.step(s.id, DONE)
        await c.close(s.id)
        return last

    async def main():
        async with AsyncClient(server.url, server.token, retry=Retry(queue_wait=120)) as c:
            return await asyncio.gather(*(episode(c, i) for i in range(CLIENTS)))

    results = asyncio.run(main())
    assert len(results) == CLIENTS
    assert all(r["done"] and r["reward"] == 1.0 for r in results), results
    assert recorded(server.ws, "asyncio") == [(1,)] * CLIENTS
