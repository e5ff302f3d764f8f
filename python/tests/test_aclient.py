"""The async client (httpx) against a real server: the same API and typed errors as the
sync one."""

import asyncio

import pytest

from endless_env import AsyncClient, AuthError, BadRequest, SessionGone
from conftest import oracle_reply


def run(coro):
    return asyncio.run(coro)


def test_an_oracle_episode_over_the_async_client(server, workspace, task_ids):
    async def main():
        async with AsyncClient(server.url, server.token) as c:
            assert (await c.health())["status"] == "ok"
            assert sorted(t["id"] for t in await c.tasks()) == sorted(task_ids)
            s = await c.open(task_ids[0], run="pytest-async")
            assert [m["role"] for m in s.messages] == ["system", "user"]
            assert s.id in [v["session_id"] for v in await c.sessions()]
            r = await c.step(s.id, oracle_reply(workspace, task_ids[0]))
            assert r["done"] is False and r["info"]["turn"] == 1
            r = await c.step(s.id, "<action>done</action>")
            assert r["done"] is True and r["reward"] == 1.0
            assert (await c.session(s.id))["state"] == "finished"
            final = await c.close(s.id)
            assert final["result"]["reward"] == 1.0
            assert "endless_serve" in await c.metrics()

    run(main())


def test_async_errors_are_typed(server, task_ids):
    async def main():
        async with AsyncClient(server.url, server.token) as c:
            with pytest.raises(BadRequest) as e:
                await c.open(task_ids[0], policy="")
            assert e.value.status == 400 and e.value.field == "policy"
            with pytest.raises(SessionGone):
                await c.step("00000000-0000-4000-8000-000000000000", "x")
        async with AsyncClient(server.url, "wrong") as c:
            with pytest.raises(AuthError):
                await c.tasks()

    run(main())


def test_a_session_is_watched_live_over_the_async_client(server, workspace, task_ids):
    async def main():
        async with AsyncClient(server.url, server.token) as c:
            s = await c.open(task_ids[1], run="pytest-async-stream")
            events, first = [], asyncio.Event()

            async def watch():
                async for event in c.stream(s.id):
                    events.append(event)
                    first.set()

            watcher = asyncio.create_task(watch())
            await asyncio.wait_for(first.wait(), 30)
            await c.step(s.id, oracle_reply(workspace, task_ids[1]))
            await c.step(s.id, "<action>done</action>")
            await asyncio.wait_for(watcher, 60)
            types = [e["type"] for e in events]
            assert types[0] == "session" and types[-1] == "end", types
            assert events[-1]["passed"] is True and "turn" in types, events
            await c.close(s.id)
            with pytest.raises(SessionGone):
                async for _ in c.stream(s.id):
                    pass

    run(main())
