//! The model's reply in a step body: `reply` text, or a whole assistant
//! `message` in the OpenAI chat shape (its `tool_calls` are the action of a
//! `tools`-protocol session; a client forwards `choices[0].message` as it
//! came). And the `tools` array a session offers its client's model.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::error::ApiError;
use crate::agent::protocol::Protocol;
use crate::llm::{ChatMessage, ToolCall};

/// Tool calls accepted in one step's message.
pub const MAX_TOOL_CALLS: usize = 64;

/// An assistant message as a step's `message` field. OpenAI's message
/// fields that carry nothing here are accepted and ignored; any other is
/// refused by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepMessage {
    /// `assistant` when given.
    #[serde(default)]
    role: Option<String>,
    /// The text (`null` with tool calls).
    #[serde(default)]
    content: Option<String>,
    /// The calls, in the OpenAI shape.
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, rename = "refusal")]
    _refusal: IgnoredAny,
    #[serde(default, rename = "annotations")]
    _annotations: IgnoredAny,
    #[serde(default, rename = "audio")]
    _audio: IgnoredAny,
    #[serde(default, rename = "function_call")]
    _function_call: IgnoredAny,
    #[serde(default, rename = "reasoning_content")]
    _reasoning_content: IgnoredAny,
    #[serde(default, rename = "name")]
    _name: IgnoredAny,
}

/// The reply of a step body: exactly one of `reply` (text) and `message`.
pub fn reply_message(
    reply: Option<String>,
    message: Option<StepMessage>,
) -> Result<ChatMessage, ApiError> {
    let bad = |m: &str| Err(ApiError::BadRequest(m.to_string()));
    let message = match (reply, message) {
        (Some(text), None) => return Ok(ChatMessage::assistant(text)),
        (None, None) => {
            return bad("the body needs \"reply\" (text) or \"message\" (an assistant message)")
        }
        (Some(_), Some(_)) => return bad("give \"reply\" or \"message\", not both"),
        (None, Some(m)) => m,
    };
    if let Some(role) = message.role.as_deref().filter(|r| *r != "assistant") {
        return bad(&format!(
            "message.role: expected \"assistant\", got {role:?}"
        ));
    }
    let calls = message.tool_calls.unwrap_or_default();
    if calls.len() > MAX_TOOL_CALLS {
        return bad(&format!(
            "message.tool_calls: at most {MAX_TOOL_CALLS} calls in one reply"
        ));
    }
    for (i, call) in calls.iter().enumerate() {
        if call.kind != "function" {
            return bad(&format!(
                "message.tool_calls[{i}].type: expected \"function\", got {:?}",
                call.kind
            ));
        }
        if call.id.is_empty() {
            return bad(&format!("message.tool_calls[{i}].id is empty"));
        }
    }
    Ok(ChatMessage::assistant_calls(
        message.content.unwrap_or_default(),
        calls,
    ))
}

/// What a retried step is compared by: the text of a plain reply, else the
/// whole message as JSON.
pub fn fingerprint_bytes(reply: &ChatMessage) -> Vec<u8> {
    if reply.tool_calls.is_empty() {
        reply.content.as_bytes().to_vec()
    } else {
        serde_json::to_vec(reply).unwrap_or_default()
    }
}

/// The OpenAI `tools` array a session's protocol offers (empty but for
/// the `tools` profile), for the client to pass to its model.
pub fn offered(protocol: &Protocol) -> Vec<serde_json::Value> {
    protocol
        .offered_tools()
        .iter()
        .map(|t| t.openai())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(v: serde_json::Value) -> Result<StepMessage, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn replies_are_text_or_an_assistant_message() {
        assert_eq!(
            reply_message(Some("<command>ls</command>".into()), None).unwrap(),
            ChatMessage::assistant("<command>ls</command>")
        );
        // what an OpenAI SDK's message dump holds
        let m = message(serde_json::json!({
            "role": "assistant", "content": null, "refusal": null, "annotations": [],
            "audio": null, "function_call": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]
        }))
        .unwrap();
        let reply = reply_message(None, Some(m)).unwrap();
        assert_eq!(reply.content, "");
        assert_eq!(reply.tool_calls[0].function.name, "bash");
        assert!(!fingerprint_bytes(&reply).is_empty());
        for (body, expect) in [
            (
                serde_json::json!({"role": "user", "content": "x"}),
                "message.role",
            ),
            (
                serde_json::json!({"tool_calls": [{"id": "", "type": "function", "function": {"name": "bash"}}]}),
                "id is empty",
            ),
            (
                serde_json::json!({"tool_calls": [{"id": "a", "type": "code", "function": {"name": "bash"}}]}),
                ".type",
            ),
        ] {
            let e = reply_message(None, Some(message(body).unwrap())).unwrap_err();
            assert!(e.to_string().contains(expect), "{e}");
        }
        let e = message(serde_json::json!({"content": "x", "tools": []})).unwrap_err();
        assert!(e.to_string().contains("tools"), "{e}");
        assert!(reply_message(None, None).is_err());
        let both = reply_message(
            Some("x".into()),
            Some(message(serde_json::json!({})).unwrap()),
        );
        assert!(both.unwrap_err().to_string().contains("not both"));
    }

    #[test]
    fn only_the_tools_profile_offers_tools() {
        assert!(offered(&Protocol::endless()).is_empty());
        let tools = offered(&Protocol::tools());
        assert_eq!(tools[0]["function"]["name"], "bash");
        assert_eq!(tools[1]["function"]["name"], "finish");
    }
}
