"""Tool-calling agents on `endless serve` (the `tools` protocol).

A session opened with `protocol="tools"` offers the model two functions, `bash({"command": ...})`
and `finish()`, as an OpenAI `tools` array (`session.raw["tools"]`). A step takes the model's
assistant message with its `tool_calls` and answers with `messages`: one `tool` message per
call id, ready to append to the conversation.

    from endless_env import Client
    from endless_env.tools import ToolSession

    s = ToolSession.open(Client(url, token), task_id)
    while not s.done:
        reply = openai_client.chat.completions.create(model=m, **s.request())
        s.step(reply.choices[0].message)
    print(s.reward)

`step_message` / `astep_message` are the single steps for the sync and async clients.
"""

import uuid
from typing import Any, Dict, List, Optional

#: The fields of an assistant message the server reads; OpenAI's others are dropped.
MESSAGE_FIELDS = ("role", "content", "tool_calls")


def assistant_message(message: Any) -> Dict[str, Any]:
    """`message` as a step's `message` field: a dict, or an OpenAI SDK message object (anything
    with `model_dump`), kept to `role`, `content` and `tool_calls` (`role` defaults to
    `assistant`). Raises `TypeError` for anything else."""
    if hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    if not isinstance(message, dict):
        raise TypeError(f"an assistant message must be a dict or an OpenAI message object, "
                        f"not {type(message).__name__}")
    out = {k: message[k] for k in MESSAGE_FIELDS if message.get(k) is not None}
    out.setdefault("role", "assistant")
    out.setdefault("content", "")
    return out


def _step_body(message: Any) -> Dict[str, Any]:
    return {"message": assistant_message(message)}


def _key() -> Dict[str, str]:
    return {"Idempotency-Key": f"step-{uuid.uuid4()}"}


def step_message(client, session_id: str, message: Any) -> Dict[str, Any]:
    """`POST /v1/sessions/{id}/step` with an assistant message (its `tool_calls` are the action):
    `{observation, messages, done, reward, info}`. Sent with an `Idempotency-Key`, retried like
    `Client.step`."""
    return client._call("POST", f"/v1/sessions/{session_id}/step", _step_body(message), kind="step",
                        headers=_key())


async def astep_message(client, session_id: str, message: Any) -> Dict[str, Any]:
    """`step_message` for the async client (`AsyncClient`)."""
    return await client._call("POST", f"/v1/sessions/{session_id}/step", _step_body(message),
                              kind="step", headers=_key())


class ToolSession:
    """A `tools`-protocol session and its conversation as the model sees it: the prompt, each
    assistant message with its calls, and the `tool` messages that answer them."""

    def __init__(self, client, session):
        self.client = client
        self.session = session
        self.messages: List[Dict[str, Any]] = list(session.messages)
        self.tools: List[Dict[str, Any]] = list(session.raw.get("tools") or [])
        if not self.tools:
            raise ValueError(f"session {session.id} offers no tools: open it with protocol=\"tools\"")
        self.done = False
        self.reward = 0.0
        self.last: Optional[Dict[str, Any]] = None

    @classmethod
    def open(cls, client, task_id: str, **kwargs) -> "ToolSession":
        """Open a session of `task_id` under the `tools` protocol (other arguments as `Client.open`)."""
        kwargs["protocol"] = "tools"
        return cls(client, client.open(task_id, **kwargs))

    @property
    def id(self) -> str:
        return self.session.id

    def request(self) -> Dict[str, Any]:
        """The `messages` and `tools` to pass to an OpenAI-compatible chat completion."""
        return {"messages": list(self.messages), "tools": list(self.tools)}

    def step(self, message: Any) -> Dict[str, Any]:
        """Send the model's assistant message; the conversation gains it and the step's answers."""
        if self.done:
            raise RuntimeError(f"session {self.id}: the episode is over")
        sent = assistant_message(message)
        answer = step_message(self.client, self.id, sent)
        self.messages.append(sent)
        self.messages.extend(answer.get("messages") or [])
        self.done = bool(answer["done"])
        self.reward = float(answer["reward"])
        self.last = answer
        return answer

    def close(self) -> Dict[str, Any]:
        """`DELETE` the session: its final result."""
        return self.client.close(self.id)
