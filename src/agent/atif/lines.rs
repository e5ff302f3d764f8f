//! What an episode's trajectory file (`<n>.jsonl`) holds for its ATIF
//! document: the conversation, when the episode started and each step was
//! recorded, and the functions the policy was offered.

use std::path::Path;

use crate::llm::ChatMessage;

/// What an episode's trajectory file (`<n>.jsonl`) recorded for its ATIF
/// document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordedLines {
    /// The conversation (its `message` lines), tool calls included.
    pub messages: Vec<ChatMessage>,
    /// When the episode started (the `start` line's `at`).
    pub started_at: Option<String>,
    /// When the episode ended (the `end` line's `at`).
    pub ended_at: Option<String>,
    /// When each step was recorded (the `step` lines' `at`, in order).
    pub step_times: Vec<Option<String>>,
    /// The functions the protocol offered the policy, as OpenAI `tools`
    /// entries (the `start` line's `tools`; empty under the text profiles).
    pub tools: Vec<serde_json::Value>,
}

/// Read what `trajectory` recorded; empty when the file is missing, and
/// lines that are not JSON are skipped (a line cut short by a crash).
pub fn read_recorded(trajectory: &Path) -> RecordedLines {
    let mut out = RecordedLines::default();
    let Ok(text) = std::fs::read_to_string(trajectory) else {
        return out;
    };
    let at = |v: &serde_json::Value| v.get("at").and_then(|t| t.as_str()).map(str::to_string);
    for v in text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        match v.get("type").and_then(|t| t.as_str()) {
            Some("start") => {
                out.started_at = at(&v);
                if let Some(tools) = v.get("tools").and_then(|t| t.as_array()) {
                    out.tools = tools.clone();
                }
            }
            Some("message") => {
                if let Some(m) = v
                    .get("message")
                    .and_then(|m| serde_json::from_value(m.clone()).ok())
                {
                    out.messages.push(m);
                }
            }
            Some("step") => out.step_times.push(at(&v)),
            Some("end") => out.ended_at = at(&v),
            _ => {}
        }
    }
    out
}
