//! Tool calls in the two shapes models use: the OpenAI chat API's
//! structured `tools` / `tool_calls` / `tool` messages, and the Hermes text
//! convention of local models (functions described in the system prompt
//! inside `<tools></tools>`, calls written as `<tool_call>{...}</tool_call>`,
//! results given back as `<tool_response>...</tool_response>` in a user
//! turn; the convention of the Qwen2.5 / Hermes chat templates).
//!
//! This module knows the shapes, not what the tools do: the agent's own
//! tools and the rules of a turn live in `agent::tool_calls`. The types of
//! tools and calls are in `tool_call.rs`, the message type in `message.rs`.

use super::message::{ChatMessage, Role};
use super::tool_call::{FunctionCall, ToolSpec};

/// The system-prompt section that describes `tools` the Hermes way (the
/// words of the Qwen2.5 chat template), appended to a system prompt.
pub fn hermes_tools_prompt(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        s.push('\n');
        s.push_str(&tool.openai().to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// A call written as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
pub fn render_hermes_call(call: &FunctionCall) -> String {
    // Arguments that are JSON are shown as JSON, others as a string.
    let arguments = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
    let body = serde_json::json!({"name": call.name, "arguments": arguments});
    format!("<tool_call>\n{body}\n</tool_call>")
}

/// An assistant message as text: its content, then its calls in Hermes form.
pub fn render_assistant_text(message: &ChatMessage) -> String {
    let mut text = message.content.trim_end().to_string();
    for call in &message.tool_calls {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&render_hermes_call(&call.function));
    }
    text
}

/// A tool's result as a Hermes `<tool_response>` block.
pub fn tool_response(content: &str) -> String {
    format!("<tool_response>\n{content}\n</tool_response>")
}

/// Every `<tool_call>` block of `text`, in order: the call, or why it
/// cannot be read (its body is not a JSON object with a string `name`; an
/// unclosed last tag). `arguments` may be an object or a JSON-encoded
/// string; missing, it is `{}`.
pub fn parse_hermes_calls(text: &str) -> Vec<Result<FunctionCall, String>> {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find(OPEN) {
        let body_start = from + rel + OPEN.len();
        let Some(end) = text[body_start..].find(CLOSE) else {
            found.push(Err("a <tool_call> tag is not closed".to_string()));
            break;
        };
        found.push(hermes_body(text[body_start..body_start + end].trim()));
        from = body_start + end + CLOSE.len();
    }
    found
}

fn hermes_body(body: &str) -> Result<FunctionCall, String> {
    let value: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| format!("a <tool_call> body is not valid JSON ({e})"))?;
    let name = value
        .get("name")
        .and_then(|n| n.as_str())
        .ok_or("a <tool_call> body has no string \"name\"")?;
    let arguments = match value.get("arguments") {
        None | Some(serde_json::Value::Null) => "{}".to_string(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Ok(FunctionCall {
        name: name.to_string(),
        arguments,
    })
}

/// `messages` for a model that reads only text: `tools` (if any) described
/// in the system prompt the Hermes way, an assistant's structured calls
/// written as `<tool_call>` blocks after its content, and each run of
/// `tool` messages merged into one user turn of `<tool_response>` blocks.
/// Without tools and tool messages the conversation is unchanged.
pub fn as_text_conversation(messages: &[ChatMessage], tools: &[ToolSpec]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    if !tools.is_empty() {
        let section = hermes_tools_prompt(tools);
        match messages.first() {
            Some(m) if m.role == Role::System => {
                out.push(ChatMessage::system(format!(
                    "{}\n\n{section}",
                    m.content.trim_end()
                )));
            }
            _ => out.push(ChatMessage::system(section)),
        }
    }
    let skip =
        usize::from(!out.is_empty() && messages.first().is_some_and(|m| m.role == Role::System));
    let mut previous_tool = false;
    for m in &messages[skip..] {
        match m.role {
            Role::Tool => {
                let block = tool_response(&m.content);
                match out.last_mut() {
                    Some(last) if previous_tool => {
                        last.content.push('\n');
                        last.content.push_str(&block);
                    }
                    _ => out.push(ChatMessage::user(block)),
                }
                previous_tool = true;
                continue;
            }
            Role::Assistant => out.push(ChatMessage::assistant(render_assistant_text(m))),
            Role::System => out.push(ChatMessage::system(m.content.clone())),
            Role::User => out.push(ChatMessage::user(m.content.clone())),
        }
        previous_tool = false;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn bash() -> ToolSpec {
        ToolSpec {
            name: "bash".into(),
            description: "Run a command.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }
    }

    #[test]
    fn calls_read_both_argument_forms_and_write_the_openai_shape() {
        let text = r#"{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}"#;
        let call: ToolCall = serde_json::from_str(text).unwrap();
        assert_eq!(call, ToolCall::new("c1", "bash", r#"{"command": "ls"}"#));
        let ollama =
            r#"{"id": "c2", "function": {"name": "bash", "arguments": {"command": "ls"}}}"#;
        let call: ToolCall = serde_json::from_str(ollama).unwrap();
        assert_eq!(call.function.arguments, r#"{"command":"ls"}"#);
        assert_eq!(call.kind, "function");
        let v = serde_json::to_value(&call).unwrap();
        assert_eq!(v["type"], "function");
        assert_eq!(v["function"]["name"], "bash");
        assert!(v["function"]["arguments"].is_string());
    }

    #[test]
    fn hermes_calls_are_parsed_in_order_with_their_errors() {
        let text = "<think>x</think>\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"echo <a>\"}}\n</tool_call>\
                    <tool_call>{\"name\": \"finish\"}</tool_call><tool_call>{oops}</tool_call>\
                    <tool_call>{\"arguments\": {}}</tool_call><tool_call>{\"name\": \"bash\"";
        let calls = parse_hermes_calls(text);
        assert_eq!(calls.len(), 5);
        let first = calls[0].as_ref().unwrap();
        assert_eq!(first.name, "bash");
        let args: serde_json::Value = serde_json::from_str(&first.arguments).unwrap();
        assert_eq!(args["command"], "echo <a>");
        assert_eq!(calls[1].as_ref().unwrap().arguments, "{}");
        assert!(calls[2].as_ref().unwrap_err().contains("not valid JSON"));
        assert!(calls[3].as_ref().unwrap_err().contains("\"name\""));
        assert!(calls[4].as_ref().unwrap_err().contains("not closed"));
        assert!(parse_hermes_calls("no calls here").is_empty());
        // A rendered call reads back as itself.
        let call = FunctionCall {
            name: "bash".into(),
            arguments: r#"{"command":"ls -la"}"#.into(),
        };
        assert_eq!(
            parse_hermes_calls(&render_hermes_call(&call)),
            vec![Ok(call)]
        );
    }

    #[test]
    fn text_conversations_describe_tools_and_flatten_calls() {
        let messages = vec![
            ChatMessage::system("Be useful."),
            ChatMessage::user("task"),
            ChatMessage {
                tool_calls: vec![
                    ToolCall::new("a", "bash", r#"{"command":"ls"}"#),
                    ToolCall::new("b", "bash", r#"{"command":"pwd"}"#),
                ],
                ..ChatMessage::assistant("<think>look</think>")
            },
            ChatMessage::tool("a", "file.txt"),
            ChatMessage::tool("b", "not run"),
            ChatMessage::user("next"),
        ];
        let text = as_text_conversation(&messages, &[bash()]);
        assert_eq!(text.len(), 5);
        assert!(text[0].content.starts_with("Be useful.\n\n# Tools"));
        assert!(text[0].content.contains("<tools>\n{\"function\":"));
        assert!(text[2]
            .content
            .starts_with("<think>look</think>\n<tool_call>\n"));
        assert_eq!(parse_hermes_calls(&text[2].content).len(), 2);
        assert_eq!(
            (text[3].role, text[3].content.as_str()),
            (
                Role::User,
                "<tool_response>\nfile.txt\n</tool_response>\n<tool_response>\nnot run\n</tool_response>"
            )
        );
        assert_eq!(text[4].content, "next");
        assert!(text
            .iter()
            .all(|m| m.tool_calls.is_empty() && m.tool_call_id.is_none()));
        // Without tools a plain conversation is left as it is.
        let plain = vec![ChatMessage::system("s"), ChatMessage::user("u")];
        assert_eq!(as_text_conversation(&plain, &[]), plain);
        assert_eq!(
            as_text_conversation(&plain[1..], &[bash()])[0].role,
            Role::System
        );
    }
}
