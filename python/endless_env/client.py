"""A client for the `endless serve` HTTP API (`/v1`), with retries.

Creates wait in the server's queue when it runs all the sessions it may
(`POST /v1/sessions?wait=SECONDS`) and are retried on 429/503 after the server's
`Retry-After`; steps carry an `Idempotency-Key`, so a step retried after a lost
answer gets the first answer and never runs twice. Retries back off exponentially
with jitter. Everything else raises a typed `EndlessError` at once.
`endless_env.aclient.AsyncClient` is the same API over httpx, for asyncio.
"""

from __future__ import annotations

import os
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import quote

import requests

DEFAULT_URL = "http://127.0.0.1:8765"


class EndlessError(RuntimeError):
    """An error answer of the server: `status` is the HTTP status (0: no answer, the
    connection failed or timed out), `message` its `error`, `retry_after` its
    `Retry-After` in seconds (429 and 503)."""

    def __init__(self, status: int, message: str, retry_after: Optional[float] = None):
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class BadRequest(EndlessError):
    """400: the request is malformed; `field` names the field at fault when the server says."""

    def __init__(self, status: int, message: str, retry_after: Optional[float] = None):
        super().__init__(status, message, retry_after)
        self.field = _field_of(message)


class AuthError(EndlessError):
    """401: a missing or wrong token."""


class NotFound(EndlessError):
    """404: no such task or route."""


class SessionGone(NotFound):
    """404 on a session: it never was this token's, or it ended and was deleted or reaped."""


class Conflict(EndlessError):
    """409: the session is busy with another request, or its episode is over."""


class KeyReused(EndlessError):
    """422: an `Idempotency-Key` was sent again with a different request."""


class ServerBusy(EndlessError):
    """429 after every retry: no session place became free in time."""


class ServerUnavailable(EndlessError):
    """503 after every retry: the server is shutting down."""


class ServerError(EndlessError):
    """5xx: the server failed (a sandbox that would not start, say)."""


class Unreachable(EndlessError):
    """No answer after every retry: the connection failed or timed out (`status` 0)."""


_BY_STATUS = {400: BadRequest, 401: AuthError, 404: NotFound, 409: Conflict, 422: KeyReused,
              429: ServerBusy, 503: ServerUnavailable}


def _field_of(message: str) -> Optional[str]:
    """The field a 400 names: `unknown field "x" ...`, `x: ...` or `x must ...`."""
    m = re.search(r'unknown field "([^"]+)"', message)
    if m:
        return m.group(1)
    m = re.match(r"([A-Za-z_][A-Za-z0-9_-]*)(?::| must )", message)
    return m.group(1) if m else None


def error_for(status: int, message: str, retry_after: Optional[float], path: str) -> EndlessError:
    """The typed error of an answer with this status."""
    if status == 404 and path.startswith("/v1/sessions/"):
        return SessionGone(status, message, retry_after)
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else EndlessError)
    return cls(status, message, retry_after)


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


@dataclass
class Retry:
    """When and how long to retry.

    `attempts` tries in all per call; the delay before try n+1 is
    `min(max_backoff, backoff * 2**n)` scaled by a random factor in [0.5, 1] (jitter),
    and at least the server's `Retry-After`. `queue_wait` is how long each create asks to
    wait in the server's queue (0: not at all); `deadline` bounds one call's retries in
    seconds.
    """

    attempts: int = 10
    backoff: float = 0.25
    max_backoff: float = 20.0
    queue_wait: float = 60.0
    deadline: float = 1800.0

    def delay(self, tries: int, retry_after: Optional[float] = None) -> float:
        """Seconds to sleep after `tries` failed tries."""
        d = min(self.max_backoff, self.backoff * (2 ** max(0, tries - 1))) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            d = max(d, retry_after + random.uniform(0.0, min(1.0, retry_after / 2 + 0.1)))
        return d


def retryable(kind: str, err: EndlessError) -> bool:
    """Whether a call of `kind` (`create`, `step`, `read`, `close`) may be sent again after
    `err`: no answer (creates and steps carry a key, so a lost answer is safe), 429 for creates,
    and the gateway answers 502/503/504."""
    if err.status == 0 or err.status in (502, 503, 504):
        return True
    return err.status == 429 and kind == "create"


def open_request(task_id: str, max_turns: Optional[int], seed: Optional[int], run: Optional[str],
                 policy: Optional[str], protocol: Optional[str]) -> Dict[str, Any]:
    """The body of `POST /v1/sessions`."""
    body: Dict[str, Any] = {"task_id": task_id}
    for key, value in (("max_turns", max_turns), ("seed", seed), ("run", run), ("policy", policy),
                       ("protocol", protocol)):
        if value is not None:
            body[key] = value
    return body


def tasks_path(status: Optional[str], category: Optional[str], split: Optional[str]) -> str:
    query = {k: v for k, v in (("status", status), ("category", category), ("split", split)) if v}
    path = "/v1/tasks"
    if query:
        path += "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())
    return path


def _default_token() -> Optional[str]:
    token = os.environ.get("ENDLESS_TOKEN")
    if token:
        return token.strip()
    path = os.environ.get("ENDLESS_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    return line.strip()
    return None


def base_url(url: Optional[str]) -> str:
    return (url or os.environ.get("ENDLESS_URL") or DEFAULT_URL).rstrip("/")


def default_token(token: Optional[str]) -> Optional[str]:
    return token if token is not None else _default_token()


def create_path(retry: Retry, wait: Optional[float], timeout: float) -> str:
    """`/v1/sessions?wait=...`: the queue wait asked, kept below the request timeout."""
    w = retry.queue_wait if wait is None else wait
    w = max(0.0, min(w, timeout - 10.0))
    return f"/v1/sessions?wait={w:g}" if w > 0 else "/v1/sessions"


@dataclass
class Session:
    """An open session: its id and the prompt (system and user messages)."""

    id: str
    task_id: str
    messages: List[Dict[str, Any]]
    max_turns: int
    run_id: str
    sample: int
    raw: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_answer(cls, r: Dict[str, Any]) -> "Session":
        return cls(id=r["session_id"], task_id=r["task_id"], messages=r["messages"],
                   max_turns=r["max_turns"], run_id=r["run_id"], sample=r["sample"], raw=r)


def decode(status: int, headers: Mapping[str, str], text: str, parse_json, path: str) -> Any:
    """The answer's JSON (or text), or its typed error."""
    if status >= 400:
        try:
            message = parse_json().get("error", text)
        except ValueError:
            message = text
        raise error_for(status, message, _retry_after(headers.get("retry-after")), path)
    if headers.get("content-type", "").startswith("application/json"):
        return parse_json()
    return text


class Client:
    """The API of one server.

    `url` defaults to `$ENDLESS_URL` (else `http://127.0.0.1:8765`); `token` to
    `$ENDLESS_TOKEN` or the first token in `$ENDLESS_TOKEN_FILE`; `timeout` is per request
    (seconds); `retry` says how to retry (`Retry()` by default; `Retry(attempts=1)`: never).
    One client may be shared by threads.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 600.0,
                 retry: Optional[Retry] = None):
        self.url = base_url(url)
        self.token = default_token(token)
        self.timeout = timeout
        self.retry = retry or Retry()
        self._http = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=64)
        self._http.mount("http://", adapter)
        self._http.mount("https://", adapter)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close_connections()

    def close_connections(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def _once(self, method: str, path: str, body: Optional[Dict[str, Any]], headers: Dict[str, str]) -> Any:
        if self.token:
            headers = dict(headers, Authorization=f"Bearer {self.token}")
        try:
            resp = self._http.request(method, self.url + path, json=body, headers=headers, timeout=self.timeout)
        except requests.RequestException as e:
            raise Unreachable(0, f"{method} {path}: {e}") from e
        return decode(resp.status_code, resp.headers, resp.text, resp.json, path)

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, kind: str = "read",
              headers: Optional[Dict[str, str]] = None) -> Any:
        headers = headers or {}
        deadline = time.monotonic() + self.retry.deadline
        tries = 0
        while True:
            try:
                return self._once(method, path, body, headers)
            except EndlessError as e:
                tries += 1
                pause = self.retry.delay(tries, e.retry_after)
                if (not retryable(kind, e) or tries >= self.retry.attempts
                        or time.monotonic() + pause > deadline):
                    raise
                time.sleep(pause)

    def health(self) -> Dict[str, Any]:
        """`GET /v1/health`."""
        return self._call("GET", "/v1/health")

    def tasks(self, status: Optional[str] = None, category: Optional[str] = None,
              split: Optional[str] = None) -> List[Dict[str, Any]]:
        """`GET /v1/tasks` with optional filters."""
        return self._call("GET", tasks_path(status, category, split))

    def open(self, task_id: str, max_turns: Optional[int] = None, seed: Optional[int] = None,
             run: Optional[str] = None, policy: Optional[str] = None,
             protocol: Optional[str] = None, wait: Optional[float] = None) -> Session:
        """`POST /v1/sessions`: a fresh environment of `task_id` (`protocol`: `endless` or
        `reference`; default the server's `--protocol`). When the server is full it waits in the
        server's queue up to `wait` seconds per try (default `retry.queue_wait`), and retries
        after 429/503 and lost answers; a retry carries the same `Idempotency-Key`, so it never
        opens a second session."""
        body = open_request(task_id, max_turns, seed, run, policy, protocol)
        key = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
        r = self._call("POST", create_path(self.retry, wait, self.timeout), body, kind="create", headers=key)
        return Session.from_answer(r)

    def step(self, session_id: str, reply: str) -> Dict[str, Any]:
        """`POST /v1/sessions/{id}/step`: `{observation, done, reward, info}`. Sent with an
        `Idempotency-Key`: retried after a lost answer, it still runs once."""
        key = {"Idempotency-Key": f"step-{uuid.uuid4()}"}
        return self._call("POST", f"/v1/sessions/{session_id}/step", {"reply": reply}, kind="step", headers=key)

    def session(self, session_id: str) -> Dict[str, Any]:
        """`GET /v1/sessions/{id}`: one of this token's sessions: `task_id`, `run_id`, `sample`,
        `state` (`starting`, `running`, `finished`), `turns`, and `result` once finished."""
        return self._call("GET", f"/v1/sessions/{session_id}")

    def sessions(self) -> List[Dict[str, Any]]:
        """`GET /v1/sessions`: this token's sessions, oldest first (as `session` gives each)."""
        return self._call("GET", "/v1/sessions")

    def close(self, session_id: str) -> Dict[str, Any]:
        """`DELETE /v1/sessions/{id}`: the final result (a running episode is recorded as interrupted)."""
        return self._call("DELETE", f"/v1/sessions/{session_id}", kind="close")

    def metrics(self) -> str:
        """`GET /metrics` (Prometheus text)."""
        return self._call("GET", "/metrics")


__all__: Tuple[str, ...] = (
    "AuthError", "BadRequest", "Client", "Conflict", "EndlessError", "KeyReused", "NotFound", "Retry",
    "ServerBusy", "ServerError", "ServerUnavailable", "Session", "SessionGone", "Unreachable",
)
