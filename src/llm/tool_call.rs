//! The tools a model is offered and the calls it makes, in the OpenAI chat
//! API's wire shape; the message types and both tool conventions
//! ([`super::tools`]) build on these.

use serde::{Deserialize, Deserializer, Serialize};

/// A function a model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The function's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its arguments, as a JSON Schema object.
    pub parameters: serde_json::Value,
}

impl ToolSpec {
    /// The OpenAI `tools` entry: `{"type": "function", "function": {...}}`.
    pub fn openai(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// The OpenAI `tools` array of `tools`.
pub fn openai_tools(tools: &[ToolSpec]) -> serde_json::Value {
    serde_json::Value::Array(tools.iter().map(ToolSpec::openai).collect())
}

/// One call a model made, in the OpenAI wire shape
/// (`{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id its result must name (`tool_call_id`).
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

impl ToolCall {
    /// A call of `name` with `arguments` (a JSON text), named `id`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// The function part of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments as JSON text, as the model wrote them (they may not
    /// be valid JSON). Servers that send an object (Ollama) are accepted:
    /// the object is kept as its JSON text.
    #[serde(default, deserialize_with = "arguments_text")]
    pub arguments: String,
}

fn arguments_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    })
}
