"""A Gymnasium-style environment over `endless serve`, with text observations and actions.

`reset()` opens a session and returns the task prompt as text; `step(reply)` sends the
model's whole reply and returns `(observation, reward, terminated, truncated, info)`.
It subclasses `gymnasium.Env` when gymnasium is installed; it works without it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .client import Client

try:  # optional
    import gymnasium as _gymnasium

    _Base: Any = _gymnasium.Env
except ImportError:  # pragma: no cover - depends on the environment
    _Base = object


class EndlessTextEnv(_Base):  # type: ignore[misc, valid-type]
    """Episodes of `task_id` on a server; one session at a time."""

    metadata: Dict[str, Any] = {"render_modes": []}

    def __init__(self, task_id: str, client: Optional[Client] = None, max_turns: Optional[int] = None,
                 run: Optional[str] = None):
        self.task_id = task_id
        self.client = client or Client()
        self.max_turns = max_turns
        self.run = run
        self.session_id: Optional[str] = None
        self.messages: List[Dict[str, str]] = []

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None) -> Tuple[str, Dict[str, Any]]:
        """Close any open session and start a fresh one; the observation is the instruction."""
        self.close()
        session = self.client.open(self.task_id, max_turns=self.max_turns, seed=seed, run=self.run, policy="gym")
        self.session_id = session.id
        self.messages = session.messages
        return session.messages[-1]["content"], {"messages": session.messages, "session_id": session.id}

    def step(self, action: str) -> Tuple[str, float, bool, bool, Dict[str, Any]]:
        """Apply the model's reply. `terminated`: the agent said done or the episode failed;
        `truncated`: it ran out of turns or time."""
        if self.session_id is None:
            raise RuntimeError("call reset() first")
        r = self.client.step(self.session_id, action)
        info = dict(r["info"])
        terminated = truncated = False
        if r["done"]:
            truncated = info.get("end_reason") in ("max_turns", "timeout")
            terminated = not truncated
            self.close()
        return r["observation"], float(r["reward"]), terminated, truncated, info

    def close(self) -> None:
        if self.session_id is not None:
            sid, self.session_id = self.session_id, None
            try:
                self.client.close(sid)
            except Exception:
                pass
