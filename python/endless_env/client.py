"""A client for the `endless serve` HTTP API (`/v1`), with retries.

Creates wait in the server's queue when it runs all the sessions it may
(`POST /v1/sessions?wait=SECONDS`) and are retried on 429/503 after the server's
`Retry-After`; steps carry an `Idempotency-Key`, so a step retried after a lost
answer gets the first answer and never runs twice. Retries back off exponentially
with jitter. Everything else raises a typed `EndlessError` at once.
`endless_env.aclient.AsyncClient` is the same API over httpx, for asyncio.

Given several servers (`Client([url1, url2, ...])`, or the nodes of an
`endless_env.pool.ServePool`), a client spreads its sessions over them: each create
goes to the node with the fewest of this client's sessions open (round robin among
equals), and to the next one when a node is full (429), shutting down (503) or does
not answer; every later call of a session goes to its node. A node that stops
answering loses only its own sessions: their calls raise `NodeLost`.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
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


class NodeLost(Unreachable):
    """The node of a session stopped answering (after every retry): the session is lost
    with it; sessions on the client's other nodes go on. `node` is the node's URL and
    `session_id` the session's id."""

    def __init__(self, node: str, session_id: str, cause: EndlessError):
        super().__init__(0, f"node {node} is lost, and session {session_id} with it: {cause.message}")
        self.node = node
        self.session_id = session_id


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


class Tries:
    """The retries of one call, shared by `Client` and `AsyncClient` (which only sleep
    and send): after each failure, `after(err)` is the pause before the next try, or
    raises `err` when the call may not be tried again (not retryable, out of tries, or
    past the deadline)."""

    def __init__(self, retry: "Retry", kind: str, attempts: Optional[int] = None):
        self.retry = retry
        self.kind = kind
        self.attempts = attempts or retry.attempts
        self.deadline = time.monotonic() + retry.deadline
        self.tries = 0

    def after(self, err: EndlessError) -> float:
        """The pause after `err`; raises `err` when there is no next try."""
        self.tries += 1
        pause = self.retry.delay(self.tries, err.retry_after)
        if (not retryable(self.kind, err) or self.tries >= self.attempts
                or time.monotonic() + pause > self.deadline):
            raise err
        return pause


class CreateRounds:
    """A create over several nodes, shared by `Client` and `AsyncClient`: each round
    tries the nodes best first (`round()`: each node and the path to post to; only the
    last one waits in its server's queue); a full, draining or silent node passes it to
    the next (`failed`); after a round where every node refused, `pause()` says how long
    to wait before the next round (or raises the last error)."""

    def __init__(self, nodes: "Nodes", retry: "Retry", wait: Optional[float], timeout: float):
        self.nodes = nodes
        self.tries = Tries(retry, "create")
        self.wait = wait
        self.timeout = timeout
        self.err: Optional[EndlessError] = None

    def round(self) -> List[Tuple["Node", str]]:
        """The nodes to try this round, with their create paths."""
        order = self.nodes.order()
        last = len(order) - 1
        return [(node, create_path(self.tries.retry, self.wait if i == last else 0.0, self.timeout))
                for i, node in enumerate(order)]

    def failed(self, node: "Node", err: EndlessError) -> None:
        """`node` refused or did not answer: go on with the next (raises `err` when a
        create may not be sent again)."""
        if not retryable("create", err):
            raise err
        if err.status == 0:
            self.nodes.down(node)
        self.err = err

    def opened(self, node: "Node", answer: Dict[str, Any]) -> "Session":
        """`node` opened the session."""
        s = Session.from_answer(answer)
        self.nodes.opened(node, s.id)
        return s

    def pause(self) -> float:
        """Every node refused this round: the pause before the next (or the last error)."""
        assert self.err is not None
        return self.tries.after(self.err)


def stream_path(session_id: str) -> str:
    """`/v1/sessions/{id}/stream`."""
    return f"/v1/sessions/{quote(session_id, safe='')}/stream"


def stream_event(line: Union[str, bytes], url: str) -> Optional[Dict[str, Any]]:
    """One line of a session's stream as its event (`None`: a blank line); an `Unreachable`
    naming the URL when it is not a JSON object with a `type`."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError as e:
        raise Unreachable(0, f"GET {url}: a stream line is not JSON ({e}): {line[:200]!r}") from e
    if not isinstance(event, dict) or "type" not in event:
        raise Unreachable(0, f"GET {url}: a stream line has no type: {line[:200]!r}")
    return event


def stream_cut(url: str) -> "Unreachable":
    """The error of a stream that ended before its `end` event."""
    return Unreachable(0, f"GET {url}: the stream ended before the session's end event "
                          f"(the server stopped, or the connection was cut); nothing is replayed, "
                          f"so watch again to see what happens from then on")


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


def session_of(path: str) -> Optional[str]:
    """The session id of a `/v1/sessions/{id}...` path."""
    m = re.match(r"/v1/sessions/([^/?]+)", path)
    return m.group(1) if m else None


@dataclass(frozen=True)
class Node:
    """One server of several: its base URL and its token (`None`: the client's token)."""

    url: str
    token: Optional[str] = None


Servers = Union[None, str, Node, Sequence[Union[str, Node]]]

# How long a node that did not answer is tried only after the others, seconds.
DOWN_SECONDS = 30.0


class Nodes:
    """The servers of a client and where its sessions are: which node a new session
    should go to (the one with the fewest of this client's sessions open, round robin
    among equals; nodes that did not answer lately last) and which node an open
    session is on. Bookkeeping only (no I/O), shared by `Client` and `AsyncClient`;
    thread-safe."""

    def __init__(self, servers: Servers, token: Optional[str]):
        if servers is None or isinstance(servers, (str, Node)):
            servers = [servers]  # type: ignore[list-item]
        nodes: List[Node] = []
        for s in servers:  # type: ignore[union-attr]
            n = s if isinstance(s, Node) else Node(base_url(s))
            nodes.append(Node(n.url.rstrip("/"), n.token if n.token is not None else token))
        if not nodes:
            raise ValueError("url: no server given (an empty list)")
        urls = [n.url for n in nodes]
        if len(set(urls)) != len(urls):
            raise ValueError(f"url: a server is named twice in {urls}")
        self.all = nodes
        self._lock = threading.Lock()
        self._load = {n.url: 0 for n in nodes}
        self._down_until = {n.url: 0.0 for n in nodes}
        self._where: Dict[str, Node] = {}
        self._turn = 0

    @property
    def single(self) -> bool:
        """One server: the client behaves as it always did."""
        return len(self.all) == 1

    def order(self) -> List[Node]:
        """The nodes to try a create on, best first."""
        with self._lock:
            self._turn += 1
            now = time.monotonic()
            k = len(self.all)
            ranked = sorted(range(k), key=lambda i: (self._down_until[self.all[i].url] > now,
                                                     self._load[self.all[i].url], (i - self._turn) % k))
            return [self.all[i] for i in ranked]

    def opened(self, node: Node, session_id: str) -> None:
        """A session was opened on `node`."""
        with self._lock:
            if self._where.get(session_id) is None:
                self._load[node.url] += 1
            self._where[session_id] = node
            self._down_until[node.url] = 0.0

    def forget(self, session_id: str) -> None:
        """A session was closed, or lost."""
        with self._lock:
            node = self._where.pop(session_id, None)
            if node is not None:
                self._load[node.url] = max(0, self._load[node.url] - 1)

    def node_of(self, session_id: str) -> Optional[Node]:
        """The node of a session this client opened (or found); with one server, that one."""
        if self.single:
            return self.all[0]
        with self._lock:
            return self._where.get(session_id)

    def down(self, node: Node) -> None:
        """`node` did not answer: try it after the others for a while."""
        with self._lock:
            self._down_until[node.url] = time.monotonic() + DOWN_SECONDS

    def load(self) -> Dict[str, int]:
        """Sessions of this client open per node URL."""
        with self._lock:
            return dict(self._load)


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
    """The API of one server, or of several.

    `url` defaults to `$ENDLESS_URL` (else `http://127.0.0.1:8765`); `token` to
    `$ENDLESS_TOKEN` or the first token in `$ENDLESS_TOKEN_FILE`; `timeout` is per request
    (seconds); `retry` says how to retry (`Retry()` by default; `Retry(attempts=1)`: never).
    One client may be shared by threads.

    `url` may also be a list of servers (URLs, or `Node`s with their own tokens): sessions
    are then spread over them (see the module's documentation); `tasks`, `health` and
    `metrics` ask the first node that answers, `sessions` every node.
    """

    def __init__(self, url: Servers = None, token: Optional[str] = None, timeout: float = 600.0,
                 retry: Optional[Retry] = None):
        self.token = default_token(token)
        self.nodes = Nodes(url, self.token)
        self.url = self.nodes.all[0].url
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

    def _once(self, method: str, path: str, body: Optional[Dict[str, Any]], headers: Dict[str, str],
              node: Optional[Node] = None) -> Any:
        node = node or self.nodes.all[0]
        if node.token:
            headers = dict(headers, Authorization=f"Bearer {node.token}")
        try:
            resp = self._http.request(method, node.url + path, json=body, headers=headers, timeout=self.timeout)
        except requests.RequestException as e:
            raise Unreachable(0, f"{method} {node.url}{path}: {e}") from e
        return decode(resp.status_code, resp.headers, resp.text, resp.json, path)

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, kind: str = "read",
              headers: Optional[Dict[str, str]] = None, node: Optional[Node] = None,
              attempts: Optional[int] = None) -> Any:
        if node is None and not self.nodes.single:
            # A session's call made without naming its node (`endless_env.tools` does).
            session_id = session_of(path)
            if session_id:
                return self._on_node(session_id, method, path, body, kind, headers)
        headers = headers or {}
        tries = Tries(self.retry, kind, attempts)
        while True:
            try:
                return self._once(method, path, body, headers, node)
            except EndlessError as e:
                time.sleep(tries.after(e))

    def _any(self, path: str) -> Any:
        """A read any node may answer: the first that does."""
        if self.nodes.single:
            return self._call("GET", path)
        err: Optional[EndlessError] = None
        for node in self.nodes.order():
            try:
                return self._call("GET", path, node=node, attempts=1)
            except EndlessError as e:
                if not retryable("read", e):
                    raise
                self.nodes.down(node)
                err = e
        assert err is not None
        raise err

    def _on_node(self, session_id: str, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                 kind: str = "read", headers: Optional[Dict[str, str]] = None) -> Any:
        """A call about one session, sent to its node: `NodeLost` when that node does not answer."""
        if self.nodes.single:
            return self._call(method, path, body, kind, headers)
        node = self.nodes.node_of(session_id) or self._locate(session_id)
        try:
            return self._call(method, path, body, kind, headers, node)
        except Unreachable as e:
            self.nodes.down(node)
            self.nodes.forget(session_id)
            raise NodeLost(node.url, session_id, e) from e
        except SessionGone:
            self.nodes.forget(session_id)
            raise

    def _locate(self, session_id: str) -> Node:
        """The node of a session this client did not open: the one that knows it."""
        for node in self.nodes.all:
            try:
                self._once("GET", f"/v1/sessions/{session_id}", None, {}, node)
            except (SessionGone, Unreachable):
                continue
            self.nodes.opened(node, session_id)
            return node
        raise SessionGone(404, f"session {session_id} is on none of the nodes "
                               f"{[n.url for n in self.nodes.all]}")

    def health(self) -> Dict[str, Any]:
        """`GET /v1/health`."""
        return self._any("/v1/health")

    def tasks(self, status: Optional[str] = None, category: Optional[str] = None,
              split: Optional[str] = None) -> List[Dict[str, Any]]:
        """`GET /v1/tasks` with optional filters."""
        return self._any(tasks_path(status, category, split))

    def open(self, task_id: str, max_turns: Optional[int] = None, seed: Optional[int] = None,
             run: Optional[str] = None, policy: Optional[str] = None,
             protocol: Optional[str] = None, wait: Optional[float] = None) -> Session:
        """`POST /v1/sessions`: a fresh environment of `task_id` (`protocol`: `endless` or
        `reference`; default the server's `--protocol`). When the server is full it waits in the
        server's queue up to `wait` seconds per try (default `retry.queue_wait`), and retries
        after 429/503 and lost answers; a retry carries the same `Idempotency-Key`, so it never
        opens a second session. With several nodes, a full or silent node passes the create to
        the next; only the last one of a round waits in its queue."""
        body = open_request(task_id, max_turns, seed, run, policy, protocol)
        key = {"Idempotency-Key": f"create-{uuid.uuid4()}"}
        if self.nodes.single:
            r = self._call("POST", create_path(self.retry, wait, self.timeout), body, kind="create", headers=key)
            return Session.from_answer(r)
        rounds = CreateRounds(self.nodes, self.retry, wait, self.timeout)
        while True:
            for node, path in rounds.round():
                try:
                    return rounds.opened(node, self._once("POST", path, body, key, node))
                except EndlessError as e:
                    rounds.failed(node, e)
            time.sleep(rounds.pause())

    def step(self, session_id: str, reply: str) -> Dict[str, Any]:
        """`POST /v1/sessions/{id}/step`: `{observation, done, reward, info}`. Sent with an
        `Idempotency-Key`: retried after a lost answer, it still runs once."""
        key = {"Idempotency-Key": f"step-{uuid.uuid4()}"}
        return self._on_node(session_id, "POST", f"/v1/sessions/{session_id}/step", {"reply": reply},
                             kind="step", headers=key)

    def session(self, session_id: str) -> Dict[str, Any]:
        """`GET /v1/sessions/{id}`: one of this token's sessions: `task_id`, `run_id`, `sample`,
        `state` (`starting`, `running`, `finished`), `turns`, and `result` once finished."""
        return self._on_node(session_id, "GET", f"/v1/sessions/{session_id}")

    def sessions(self) -> List[Dict[str, Any]]:
        """`GET /v1/sessions`: this token's sessions, oldest first (as `session` gives each).
        With several nodes: those of every node that answers, each with its `node` URL."""
        if self.nodes.single:
            return self._call("GET", "/v1/sessions")
        out: List[Dict[str, Any]] = []
        for node in self.nodes.all:
            try:
                views = self._call("GET", "/v1/sessions", node=node, attempts=1)
            except Unreachable:
                self.nodes.down(node)
                continue
            out.extend(dict(v, node=node.url) for v in views)
        return out

    def stream(self, session_id: str) -> Iterator[Dict[str, Any]]:
        """`GET /v1/sessions/{id}/stream`: the session's events as they happen, each a dict
        with its `type`: `session` first, then `output` (`data`), `turn`, `lagged`, `ping`,
        and `end` last, after which the iterator ends. Not retried and not resumed (the
        server replays nothing): a connection cut before `end` raises `Unreachable`
        (`NodeLost` with several nodes), a session that is not this token's `SessionGone`.
        Closing the iterator early (`break`) closes the connection."""
        node = self.nodes.node_of(session_id) or self._locate(session_id)
        path = stream_path(session_id)
        url = node.url + path
        headers = {"Accept": "application/x-ndjson"}
        if node.token:
            headers["Authorization"] = f"Bearer {node.token}"
        try:
            try:
                resp = self._http.get(url, headers=headers, stream=True, timeout=self.timeout)
            except requests.RequestException as e:
                raise Unreachable(0, f"GET {url}: {e}") from e
            with resp:
                if resp.status_code >= 400:
                    decode(resp.status_code, resp.headers, resp.text, resp.json, path)
                try:
                    for line in resp.iter_lines():
                        event = stream_event(line, url)
                        if event is None:
                            continue
                        yield event
                        if event["type"] == "end":
                            return
                except requests.RequestException as e:
                    raise Unreachable(0, f"GET {url}: {e}") from e
                raise stream_cut(url)
        except Unreachable as e:
            if self.nodes.single:
                raise
            self.nodes.down(node)
            raise NodeLost(node.url, session_id, e) from e

    def close(self, session_id: str) -> Dict[str, Any]:
        """`DELETE /v1/sessions/{id}`: the final result (a running episode is recorded as interrupted)."""
        r = self._on_node(session_id, "DELETE", f"/v1/sessions/{session_id}", kind="close")
        self.nodes.forget(session_id)
        return r

    def metrics(self) -> str:
        """`GET /metrics` (Prometheus text; with several nodes, the first that answers)."""
        return self._any("/metrics")


__all__: Tuple[str, ...] = (
    "AuthError", "BadRequest", "Client", "Conflict", "EndlessError", "KeyReused", "Node", "NodeLost",
    "NotFound", "Retry", "ServerBusy", "ServerError", "ServerUnavailable", "Session", "SessionGone",
    "Unreachable", "Tries", "CreateRounds",
)
