"""The `tools` protocol through the Python client: a session offers `bash` and `finish`, takes the
model's assistant message with its `tool_calls`, and answers with `tool` messages."""

import json

import pytest
from openai.types.chat import ChatCompletionMessage

from endless_env import BadRequest, Client
from endless_env.tools import ToolSession, assistant_message, step_message


def oracle_command(ws, task_id):
    script = (ws / "tasks" / task_id / "solution" / "solve.sh").read_text()
    delim = "ENDLESS_SOLVE_EOF"
    while any(line.strip() == delim for line in script.splitlines()):
        delim += "_"
    return f"bash <<'{delim}'\n{script.rstrip(chr(10))}\n{delim}"


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_an_oracle_through_tool_calls_earns_reward_one(server, workspace, task_ids):
    c = Client(server.url, server.token)
    s = ToolSession.open(c, task_ids[0], run="pytest-tools")
    assert [t["function"]["name"] for t in s.request()["tools"]] == ["bash", "finish"]
    # What an OpenAI SDK returns, as it returns it.
    reply = ChatCompletionMessage.model_validate({
        "role": "assistant", "content": None, "refusal": None,
        "tool_calls": [call("call_a", "bash", {"command": oracle_command(workspace, task_ids[0])}),
                       call("call_b", "bash", {"command": "echo second"})],
    })
    r = s.step(reply)
    assert r["done"] is False and r["info"]["turn"] == 1
    answers = r["messages"]
    assert [(m["role"], m["tool_call_id"]) for m in answers] == [("tool", "call_a"), ("tool", "call_b")]
    assert answers[0]["content"].endswith("(exit_code=0)") and "Not run" in answers[1]["content"]
    # The conversation is ready for the next request: the calls, then their answers.
    roles = [m["role"] for m in s.request()["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assert s.messages[2]["tool_calls"][0]["id"] == "call_a"
    r = s.step({"role": "assistant", "content": "Done.", "tool_calls": [call("call_c", "finish", {})]})
    assert s.done and s.reward == 1.0 and r["info"]["passed"] is True
    with pytest.raises(RuntimeError):
        s.step({"content": "more"})
    assert s.close()["result"]["reward"] == 1.0


def test_bad_calls_are_answered_and_bad_messages_refused(server, task_ids):
    c = Client(server.url, server.token)
    s = ToolSession.open(c, task_ids[1], run="pytest-tools")
    r = s.step({"tool_calls": [{"id": "x1", "type": "function",
                                "function": {"name": "python", "arguments": "{}"}}]})
    assert r["done"] is False
    assert r["messages"][0]["tool_call_id"] == "x1" and "unknown function" in r["messages"][0]["content"]
    assert r["messages"][-1]["role"] == "user" and r["observation"] == r["messages"][-1]["content"]
    # No call at all: a malformed turn answered by a user message.
    r = s.step({"content": "I think I am done"})
    assert [m["role"] for m in r["messages"]] == ["user"] and r["info"]["turn"] == 2
    # A call without an id is refused before it reaches the episode.
    with pytest.raises(BadRequest) as e:
        step_message(c, s.id, {"tool_calls": [{"id": "", "type": "function", "function": {"name": "finish"}}]})
    assert "id is empty" in str(e.value)
    s.close()


def test_messages_are_kept_to_what_the_server_reads():
    m = assistant_message(ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": "hi", "refusal": None, "annotations": []}))
    assert m == {"role": "assistant", "content": "hi"}
    assert assistant_message({"tool_calls": [], "extra": 1}) == {"tool_calls": [], "role": "assistant",
                                                                 "content": ""}
    with pytest.raises(TypeError):
        assistant_message("plain text")


def test_a_session_without_tools_is_refused(server, task_ids):
    c = Client(server.url, server.token)
    plain = c.open(task_ids[2], run="pytest-tools")
    try:
        with pytest.raises(ValueError):
            ToolSession(c, plain)
    finally:
        c.close(plain.id)
