"""A SkyRL text environment over `endless serve`, registered as env class "endless".

Importing this module needs `skyrl-gym` (`pip install skyrl-gym`); `endless_env` itself
does not. Rows of `endless tasks export --format skyrl` carry what it reads in
`extra_info`: `task_id`, and optionally `server_url`, `max_turns`, `run`.

The turn limit is the trainer's first: SkyRL's generator puts its own `generator.max_turns`
in `extras["max_turns"]`; then `env_config.max_turns` (SkyRL's `environment.skyrl_gym.endless`
section), then the row's `extra_info.max_turns`, else the task's own (the server decides).
The first prompt is the session's: `init` opens the session and returns the messages the
server built (its protocol and system prompt), not the dataset row's prompt.

The protocol is `env_config.protocol`, else the row's `extra_info.protocol`, else the
server's `--protocol`. Under `tools` the model's text calls the session's functions as
Hermes `<tool_call>{"name": "bash", "arguments": {"command": ...}}</tool_call>` blocks;
`init`'s metadata holds the OpenAI `tools` array (for the chat template); each step's
observations are the session's `tool` messages where the server sends them (calls with ids),
else the calls' output as one `user` turn, as Hermes chat templates show tool responses.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register

from .client import Client

ENV_CLASS = "endless"


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def turn_limit(env_config: Any, extras: Dict[str, Any]) -> Optional[int]:
    """The turn limit: the trainer's (`extras["max_turns"]`, which SkyRL's generator sets from
    `generator.max_turns`), else `env_config.max_turns`, else the row's `extra_info.max_turns`,
    else none (the task's own)."""
    info = extras.get("extra_info") or {}
    for value in (extras.get("max_turns"), _get(env_config, "max_turns"), info.get("max_turns")):
        if value is not None:
            turns = int(value)
            if turns < 1:
                raise ValueError(f"max_turns must be at least 1, not {value!r}")
            return turns
    return None


class EndlessEnv(BaseTextEnv):
    """One episode of an `endless` task, in a sandbox of the node's `endless serve`.

    The server session starts at `init` (SkyRL calls it right before the first generation),
    or at the first `step` when `init` was skipped, so that environments built early (in Ray
    actors, say) hold no sandbox until they are used.
    """

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__()
        extras = extras or {}
        info = extras.get("extra_info") or extras
        self.task_id: str = info["task_id"]
        self.max_turns = turn_limit(env_config, extras)
        self.run: Optional[str] = info.get("run") or _get(env_config, "run")
        self.protocol: Optional[str] = _get(env_config, "protocol") or info.get("protocol")
        url = info.get("server_url") or _get(env_config, "server_url")
        token = _get(env_config, "token")
        self.client = Client(url=url, token=token)
        self.session_id: Optional[str] = None
        self.messages: List[Dict[str, Any]] = []
        self.last_result: Optional[Dict[str, Any]] = None

    def init(self, prompt: List[Dict[str, str]]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
        """Open the session and return its own first messages (system prompt and instruction, as
        the server's protocol writes them); the dataset row's `prompt` is not used. The metadata
        holds the session's id, turn limit, run and sample."""
        self._ensure_session()
        return [dict(m) for m in self.messages], dict(self._opened)

    def _ensure_session(self) -> str:
        if self.session_id is None:
            session = self.client.open(self.task_id, max_turns=self.max_turns, run=self.run, policy="skyrl",
                                       protocol=self.protocol)
            self.session_id = session.id
            self.messages = session.messages
            if self.max_turns is None:
                self.max_turns = session.max_turns
            self._opened = {"session_id": session.id, "max_turns": session.max_turns,
                            "run_id": session.run_id, "sample": session.sample}
            if session.raw.get("tools"):
                self._opened["tools"] = list(session.raw["tools"])
        return self.session_id

    def step(self, action: str) -> BaseTextEnvStepOutput:
        session_id = self._ensure_session()
        r = self.client.step(session_id, action)
        self.turns = r["info"]["turn"]
        if r["done"]:
            self.last_result = r
            self._finish()
        if r["done"]:
            observations = []
        elif r.get("messages") and any(m.get("role") == "tool" for m in r["messages"]):
            # The tools protocol: a `tool` message per call (then the nudge, if any).
            observations = [dict(m) for m in r["messages"]]
        elif r["observation"]:
            observations = [{"role": "user", "content": r["observation"]}]
        else:
            observations = []
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=float(r["reward"]),
            done=bool(r["done"]),
            metadata=r["info"],
            postprocessed_action=None,
        )

    def _finish(self) -> None:
        if self.session_id is not None:
            sid, self.session_id = self.session_id, None
            try:
                self.client.close(sid)
            except Exception:  # the server reaps it after its idle timeout anyway
                pass

    def close(self) -> None:
        self._finish()

    def get_metrics(self) -> Dict[str, Any]:
        info = (self.last_result or {}).get("info", {})
        return {"turns": info.get("turn", 0), "passed": bool(info.get("passed")),
                "end_reason": info.get("end_reason")}


def register_env() -> None:
    """Register `EndlessEnv` under env class "endless" (done on import; idempotent)."""
    try:
        register(id=ENV_CLASS, entry_point="endless_env.skyrl:EndlessEnv")
    except Exception as e:  # already registered
        if "already" not in str(e).lower():
            raise


register_env()
