"""A small client for the `endless serve` HTTP API (`/v1`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import requests

DEFAULT_URL = "http://127.0.0.1:8765"


class EndlessError(RuntimeError):
    """An error answer of the server: `status` is the HTTP status, `message` its `error`."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


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


@dataclass
class Session:
    """An open session: its id and the prompt (system and user messages)."""

    id: str
    task_id: str
    messages: List[Dict[str, str]]
    max_turns: int
    run_id: str
    sample: int
    raw: Dict[str, Any] = field(default_factory=dict)


class Client:
    """The API of one server.

    `url` defaults to `$ENDLESS_URL` (else `http://127.0.0.1:8765`); `token` to
    `$ENDLESS_TOKEN` or the first token in `$ENDLESS_TOKEN_FILE`.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 600.0):
        self.url = (url or os.environ.get("ENDLESS_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else _default_token()
        self.timeout = timeout
        self._http = requests.Session()

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        resp = self._http.request(method, self.url + path, json=body, headers=headers, timeout=self.timeout)
        if resp.status_code >= 400:
            try:
                message = resp.json().get("error", resp.text)
            except ValueError:
                message = resp.text
            raise EndlessError(resp.status_code, message)
        if resp.headers.get("content-type", "").startswith("application/json"):
            return resp.json()
        return resp.text

    def health(self) -> Dict[str, Any]:
        """`GET /v1/health`."""
        return self._call("GET", "/v1/health")

    def tasks(self, status: Optional[str] = None, category: Optional[str] = None, split: Optional[str] = None) -> List[Dict[str, Any]]:
        """`GET /v1/tasks` with optional filters."""
        query = {k: v for k, v in (("status", status), ("category", category), ("split", split)) if v}
        path = "/v1/tasks"
        if query:
            path += "?" + "&".join(f"{k}={requests.utils.quote(str(v))}" for k, v in query.items())
        return self._call("GET", path)

    def open(self, task_id: str, max_turns: Optional[int] = None, seed: Optional[int] = None,
             run: Optional[str] = None, policy: Optional[str] = None,
             protocol: Optional[str] = None) -> Session:
        """`POST /v1/sessions`: a fresh environment of `task_id` (`protocol`:
        `endless` or `reference`; default the server's `--protocol`)."""
        body: Dict[str, Any] = {"task_id": task_id}
        for key, value in (("max_turns", max_turns), ("seed", seed), ("run", run), ("policy", policy),
                           ("protocol", protocol)):
            if value is not None:
                body[key] = value
        r = self._call("POST", "/v1/sessions", body)
        return Session(id=r["session_id"], task_id=r["task_id"], messages=r["messages"],
                       max_turns=r["max_turns"], run_id=r["run_id"], sample=r["sample"], raw=r)

    def step(self, session_id: str, reply: str) -> Dict[str, Any]:
        """`POST /v1/sessions/{id}/step`: `{observation, done, reward, info}`."""
        return self._call("POST", f"/v1/sessions/{session_id}/step", {"reply": reply})

    def session(self, session_id: str) -> Dict[str, Any]:
        """`GET /v1/sessions/{id}`: one of this token's sessions: `task_id`, `run_id`, `sample`,
        `state` (`starting`, `running`, `finished`), `turns`, and `result` once finished."""
        return self._call("GET", f"/v1/sessions/{session_id}")

    def sessions(self) -> List[Dict[str, Any]]:
        """`GET /v1/sessions`: this token's sessions, oldest first (as `session` gives each)."""
        return self._call("GET", "/v1/sessions")

    def close(self, session_id: str) -> Dict[str, Any]:
        """`DELETE /v1/sessions/{id}`: the final result (a running episode is recorded as interrupted)."""
        return self._call("DELETE", f"/v1/sessions/{session_id}")

    def metrics(self) -> str:
        """`GET /metrics` (Prometheus text)."""
        return self._call("GET", "/metrics")
