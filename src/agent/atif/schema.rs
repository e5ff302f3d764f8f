//! The ATIF document (Agent Trajectory Interchange Format, Harbor's RFC
//! 0001, `ATIF-v1.0` to `ATIF-v1.8`) as serde types: the fields endless
//! writes and reads, named and nested as the spec (and PyPI `atif`'s
//! pydantic models) has them. Absent optional fields are left out.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The version endless writes.
pub const SCHEMA_VERSION: &str = "ATIF-v1.8";

/// The root document (`Trajectory`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// `ATIF-v1.N`.
    pub schema_version: String,
    /// Run-scoped identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Per-document identifier (v1.7+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory_id: Option<String>,
    /// The agent system that produced it.
    pub agent: Agent,
    /// Every turn, in order, `step_id` from 1.
    pub steps: Vec<AtifStep>,
    /// Notes on format discrepancies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Aggregate metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_metrics: Option<FinalMetrics>,
    /// Custom root-level metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// The agent system (`AgentSchema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Its name (`endless`, `terminus-2`, ...).
    pub name: String,
    /// Its version.
    pub version: String,
    /// The default model of the trajectory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// OpenAI-style tool definitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_definitions: Option<Vec<Value>>,
    /// Custom agent configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// Who a step came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A system prompt or an infrastructure event.
    System,
    /// The user (the task's instruction; a human at the terminal).
    User,
    /// One agent turn.
    Agent,
}

/// A message or observation content: text, or multimodal parts (v1.6+).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// `ContentPart` objects (`{"type": "text", "text": ...}`, images, audio).
    Parts(Vec<Value>),
}

impl Content {
    /// The text of it (the `text` parts joined by newlines; media are named).
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .map(|p| match p.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_string(),
                    None => format!(
                        "[{}]",
                        p.get("type").and_then(Value::as_str).unwrap_or("part")
                    ),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One turn (`StepObject`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AtifStep {
    /// From 1, in order.
    pub step_id: u64,
    /// ISO 8601 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Who it came from.
    pub source: Source,
    /// The model of this step (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// The dialogue message.
    pub message: Content,
    /// Explicit reasoning (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The actions of this turn (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// What the environment answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    /// LLM metrics (agent steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    /// Custom step-level metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
    /// LLM inferences of this step: 0 marks a deterministic (non-LLM) agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_call_count: Option<u64>,
    /// Copied from a prior trajectory for context (a fork's replayed
    /// commands): not to be trained on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_copied_context: Option<bool>,
}

/// One tool invocation (`ToolCallSchema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Matched by an observation result's `source_call_id`.
    pub tool_call_id: String,
    /// The tool (`bash` for endless's commands).
    pub function_name: String,
    /// Its arguments (`{"command": ...}`).
    pub arguments: Map<String, Value>,
    /// Custom metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// Environment feedback after a step (`ObservationSchema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// One entry per tool call or event.
    pub results: Vec<ObservationResult>,
}

/// One observation (`ObservationResultSchema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationResult {
    /// The tool call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_call_id: Option<String>,
    /// The output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Custom metadata (endless: `exit_code`, `timed_out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// Per-step LLM metrics (`MetricsSchema`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Input tokens of the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Cached part of `prompt_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Cost in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The prompt's token ids (v1.4+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// The completion's token ids (v1.3+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u32>>,
    /// Log-probability of each completion token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f64>>,
    /// Provider-specific metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// Aggregate metrics (`FinalMetricsSchema`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalMetrics {
    /// Sum of `prompt_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_prompt_tokens: Option<u64>,
    /// Sum of `completion_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_completion_tokens: Option<u64>,
    /// Sum of `cached_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cached_tokens: Option<u64>,
    /// Total cost in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    /// Step count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<u64>,
    /// Custom aggregates (endless: the verdict, reward, tests, labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}
