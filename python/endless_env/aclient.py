"""`AsyncClient`: the API of `endless_env.Client` for asyncio, over httpx.

Same methods, same retries (the server's queue and `Retry-After` for creates,
`Idempotency-Key` for steps, exponential backoff with jitter) and the same typed
errors; each method is a coroutine::

    async with AsyncClient(url, token) as c:
        s = await c.open(task_id)
        r = await c.step(s.id, reply)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Dict, List, Optional

import httpx

from .client import (EndlessError, Retry, Session, Unreachable, base_url, create_path, decode,
                     default_token, open_request, retryable, tasks_path)


class AsyncClient:
    """The API of one server, for asyncio (see `endless_env.Client` for the arguments).

    Close it with `await client.aclose()` or use it as `async with`.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 600.0,
                 retry: Optional[Retry] = None, max_connections: int = 256):
        self.url = base_url(url)
        self.token = default_token(token)
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
                    headers: Dict[str, str]) -> Any:
        if self.token:
            headers = dict(headers, Authorization=f"Bearer {self.token}")
        try:
            resp = await self._http.request(method, self.url + path, json=body, headers=headers)
        except httpx.HTTPError as e:
            raise Unreachable(0, f"{method} {path}: {e!r}") from e
        return decode(resp.status_code, resp.headers, resp.text, resp.json, path)

    async def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, kind: str = "read",
                    headers: Optional[Dict[str, str]] = None) -> Any:
        headers = headers or {}
        deadline = time.monotonic() + self.retry.deadline
        tries = 0
        while True:
            try:
                return await self._once(method, path, body, headers)
            except EndlessError as e:
                tries += 1
                pause = self.retry.delay(tries, e.retry_after)
                if (not retryable(kind, e) or tries >= self.retry.attempts
                        or time.monotonic() + pause > deadline):
                    raise
                await asyncio.sleep(pause)

    async def health(self) -> Dict[str, Any]:
        """`GET /v1/health`."""
        return await self._call("GET", "/v1/health")

    async def tasks(self, status: Optional[str] = None, category: Optional[str] = None,
                    split: Optional[str] = None) -> List[Dict[str, Any]]:
        """`GET /v1/tasks` with optional filters."""
        return await self._call("GET", tasks_path(status, category, split))

    async def open(self, task_id: str, max_turns: Optional[int] = None, seed: Optional[int] = None,
                   run: Optional[str] = None, policy: Optional[str] = None,
                   protocol: Optional[str] = None, wait: Optional[float] = None) -> Session:
        """`POST /v1/sessions` (see `Client.open`: waits in the queue, retries with one key)."""
        body = open_request(task_id, max_turns, seed, run, policy, protocol)
        key = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
        r = await self._call("POST", create_path(self.retry, wait, self.timeout), body, kind="create",
                             headers=key)
        return Session.from_answer(r)

    async def step(self, session_id: str, reply: str) -> Dict[str, Any]:
        """`POST /v1/sessions/{id}/step` with an `Idempotency-Key` (see `Client.step`)."""
        key = {"Idempotency-Key": f"step-{uuid.uuid4()}"}
        return await self._call("POST", f"/v1/sessions/{session_id}/step", {"reply": reply}, kind="step",
                                headers=key)

    async def session(self, session_id: str) -> Dict[str, Any]:
        """`GET /v1/sessions/{id}`."""
        return await self._call("GET", f"/v1/sessions/{session_id}")

    async def sessions(self) -> List[Dict[str, Any]]:
        """`GET /v1/sessions`: this token's sessions, oldest first."""
        return await self._call("GET", "/v1/sessions")

    async def close(self, session_id: str) -> Dict[str, Any]:
        """`DELETE /v1/sessions/{id}`: the final result."""
        return await self._call("DELETE", f"/v1/sessions/{session_id}", kind="close")

    async def metrics(self) -> str:
        """`GET /metrics` (Prometheus text)."""
        return await self._call("GET", "/metrics")
