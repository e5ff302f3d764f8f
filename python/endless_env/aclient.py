"""`AsyncClient`: the API of `endless_env.Client` for asyncio, over httpx.

Same methods, same retries (the server's queue and `Retry-After` for creates,
`Idempotency-Key` for steps, exponential backoff with jitter) and the same typed
errors; each method is a coroutine::

    async with AsyncClient(url, token) as c:
        s = await c.open(task_id)
        r = await c.step(s.id, reply)

Given several servers (`AsyncClient([url1, url2])`) it spreads sessions over them as
`Client` does, and raises `NodeLost` for the sessions of a node that stops answering.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, AsyncIterator, Dict, List, Optional

import httpx

from .client import (CreateRounds, EndlessError, Node, NodeLost, Nodes, Retry, Servers, Session, SessionGone,
                     Tries, Unreachable, create_path, decode, default_token, open_request, retryable, session_of,
                     stream_cut, stream_event, stream_path, tasks_path)


class AsyncClient:
    """The API of one server, or of several, for asyncio (see `endless_env.Client` for the
    arguments).

    Close it with `await client.aclose()` or use it as `async with`.
    """

    def __init__(self, url: Servers = None, token: Optional[str] = None, timeout: float = 600.0,
                 retry: Optional[Retry] = None, max_connections: int = 256):
        self.token = default_token(token)
        self.nodes = Nodes(url, self.token)
        self.url = self.nodes.all[0].url
        self.timeout = timeout
        self.retry = retry or Retry()
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.AsyncClient(timeout=timeout, limits=limits)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def _once(self, method: str, path: str, body: Optional[Dict[str, Any]],
                    headers: Dict[str, str], node: Optional[Node] = None) -> Any:
        node = node or self.nodes.all[0]
        if node.token:
            headers = dict(headers, Authorization=f"Bearer {node.token}")
        try:
            resp = await self._http.request(method, node.url + path, json=body, headers=headers)
        except httpx.HTTPError as e:
            raise Unreachable(0, f"{method} {node.url}{path}: {e!r}") from e
        return decode(resp.status_code, resp.headers, resp.text, resp.json, path)

    async def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, kind: str = "read",
                    headers: Optional[Dict[str, str]] = None, node: Optional[Node] = None,
                    attempts: Optional[int] = None) -> Any:
        if node is None and not self.nodes.single:
            # A session's call made without naming its node (`endless_env.tools` does).
            session_id = session_of(path)
            if session_id:
                return await self._on_node(session_id, method, path, body, kind, headers)
        headers = headers or {}
        tries = Tries(self.retry, kind, attempts)
        while True:
            try:
                return await self._once(method, path, body, headers, node)
            except EndlessError as e:
                await asyncio.sleep(tries.after(e))

    async def _any(self, path: str) -> Any:
        """A read any node may answer: the first that does."""
        if self.nodes.single:
            return await self._call("GET", path)
        err: Optional[EndlessError] = None
        for node in self.nodes.order():
            try:
                return await self._call("GET", path, node=node, attempts=1)
            except EndlessError as e:
                if not retryable("read", e):
                    raise
                self.nodes.down(node)
                err = e
        assert err is not None
        raise err

    async def _on_node(self, session_id: str, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                       kind: str = "read", headers: Optional[Dict[str, str]] = None) -> Any:
        """A call about one session, sent to its node (see `Client`)."""
        if self.nodes.single:
            return await self._call(method, path, body, kind, headers)
        node = self.nodes.node_of(session_id) or await self._locate(session_id)
        try:
            return await self._call(method, path, body, kind, headers, node)
        except Unreachable as e:
            self.nodes.down(node)
            self.nodes.forget(session_id)
            raise NodeLost(node.url, session_id, e) from e
        except SessionGone:
            self.nodes.forget(session_id)
            raise

    async def _locate(self, session_id: str) -> Node:
        for node in self.nodes.all:
            try:
                await self._once("GET", f"/v1/sessions/{session_id}", None, {}, node)
            except (SessionGone, Unreachable):
                continue
            self.nodes.opened(node, session_id)
            return node
        raise SessionGone(404, f"session {session_id} is on none of the nodes "
                               f"{[n.url for n in self.nodes.all]}")

    async def health(self) -> Dict[str, Any]:
        """`GET /v1/health`."""
        return await self._any("/v1/health")

    async def tasks(self, status: Optional[str] = None, category: Optional[str] = None,
                    split: Optional[str] = None) -> List[Dict[str, Any]]:
        """`GET /v1/tasks` with optional filters."""
        return await self._any(tasks_path(status, category, split))

    async def open(self, task_id: str, max_turns: Optional[int] = None, seed: Optional[int] = None,
                   run: Optional[str] = None, policy: Optional[str] = None,
                   protocol: Optional[str] = None, wait: Optional[float] = None) -> Session:
        """`POST /v1/sessions` (see `Client.open`: waits in the queue, retries with one key,
        passes to another node when one is full or silent)."""
        body = open_request(task_id, max_turns, seed, run, policy, protocol)
        key = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
        if self.nodes.single:
            r = await self._call("POST", create_path(self.retry, wait, self.timeout), body, kind="create",
                                 headers=key)
            return Session.from_answer(r)
        rounds = CreateRounds(self.nodes, self.retry, wait, self.timeout)
        while True:
            for node, path in rounds.round():
                try:
                    return rounds.opened(node, await self._once("POST", path, body, key, node))
                except EndlessError as e:
                    rounds.failed(node, e)
            await asyncio.sleep(rounds.pause())

    async def step(self, session_id: str, reply: str) -> Dict[str, Any]:
        """`POST /v1/sessions/{id}/step` with an `Idempotency-Key` (see `Client.step`)."""
        key = {"Idempotency-Key": f"step-{uuid.uuid4()}"}
        return await self._on_node(session_id, "POST", f"/v1/sessions/{session_id}/step", {"reply": reply},
                                   kind="step", headers=key)

    async def session(self, session_id: str) -> Dict[str, Any]:
        """`GET /v1/sessions/{id}`."""
        return await self._on_node(session_id, "GET", f"/v1/sessions/{session_id}")

    async def sessions(self) -> List[Dict[str, Any]]:
        """`GET /v1/sessions`: this token's sessions, oldest first (several nodes: see `Client`)."""
        if self.nodes.single:
            return await self._call("GET", "/v1/sessions")
        out: List[Dict[str, Any]] = []
        for node in self.nodes.all:
            try:
                views = await self._call("GET", "/v1/sessions", node=node, attempts=1)
            except Unreachable:
                self.nodes.down(node)
                continue
            out.extend(dict(v, node=node.url) for v in views)
        return out

    async def stream(self, session_id: str) -> AsyncIterator[Dict[str, Any]]:
        """`GET /v1/sessions/{id}/stream` as an async iterator of the session's events,
        ending after `end` (see `Client.stream`): `async for event in client.stream(id)`."""
        node = self.nodes.node_of(session_id) or await self._locate(session_id)
        path = stream_path(session_id)
        url = node.url + path
        headers = {"Accept": "application/x-ndjson"}
        if node.token:
            headers["Authorization"] = f"Bearer {node.token}"
        try:
            try:
                async with self._http.stream("GET", url, headers=headers) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        decode(resp.status_code, resp.headers, resp.text, resp.json, path)
                    async for line in resp.aiter_lines():
                        event = stream_event(line, url)
                        if event is None:
                            continue
                        yield event
                        if event["type"] == "end":
                            return
            except httpx.HTTPError as e:
                raise Unreachable(0, f"GET {url}: {e!r}") from e
            raise stream_cut(url)
        except Unreachable as e:
            if self.nodes.single:
                raise
            self.nodes.down(node)
            raise NodeLost(node.url, session_id, e) from e

    async def close(self, session_id: str) -> Dict[str, Any]:
        """`DELETE /v1/sessions/{id}`: the final result."""
        r = await self._on_node(session_id, "DELETE", f"/v1/sessions/{session_id}", kind="close")
        self.nodes.forget(session_id)
        return r

    async def metrics(self) -> str:
        """`GET /metrics` (Prometheus text)."""
        return await self._any("/metrics")
