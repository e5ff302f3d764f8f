//! An endless episode as an ATIF document: the system prompt and the
//! task's instruction, then one agent step per turn (its reply, its
//! reasoning, its command as a `bash` tool call, the command's output as
//! the observation, the turn's tokens), a human's commands (a take-over)
//! as user steps, a fork's replayed commands marked as copied context,
//! and the verdict (passed, reward, tests, failure labels) in the final
//! metrics.

use serde_json::{json, Map, Value};

use super::schema::{
    Agent, AtifStep, Content, FinalMetrics, Metrics, Observation, ObservationResult, Source,
    ToolCall, Trajectory, SCHEMA_VERSION,
};
use super::tokens::TurnTokens;
use crate::agent::episode::{Step, StepKind};
use crate::agent::result::EpisodeResult;
use crate::llm::{ChatMessage, Role};

/// The one tool endless's agents act through.
pub const BASH_TOOL: &str = "bash";

/// What one episode's document is made of.
#[derive(Debug, Clone, Copy)]
pub struct EpisodeSource<'a> {
    /// The run the episode belongs to (its directory under `runs/`).
    pub run: &'a str,
    /// The finished episode.
    pub result: &'a EpisodeResult,
    /// The conversation from its trajectory file (system prompt, task,
    /// replies, observations); empty when there is none.
    pub messages: &'a [ChatMessage],
    /// The exact tokens of each of the policy's replies, in order, when a
    /// local policy recorded them (`<n>.tokens.jsonl`); empty otherwise.
    pub tokens: &'a [TurnTokens],
}

/// Whether a policy spec names a model (`Some(true)`), a deterministic
/// policy that calls none (`Some(false)`: oracle, scripts, replays, a
/// human), or cannot tell (`None`: a client of `endless serve`).
pub fn policy_uses_model(policy: &str) -> Option<bool> {
    let kind = policy.split(':').next().unwrap_or(policy);
    match kind {
        "openai" | "local" | "train" => Some(true),
        "oracle" | "script" | "replay" | "human" | "fork" => Some(false),
        _ => None,
    }
}

/// The model a policy spec names (`openai:MODEL@URL`, `local:MODEL`).
pub fn model_name(policy: &str) -> Option<String> {
    let (kind, rest) = policy.split_once(':')?;
    match kind {
        "openai" => Some(rest.split('@').next().unwrap_or(rest).to_string()),
        "local" => Some(rest.to_string()),
        _ => None,
    }
    .filter(|m| !m.is_empty())
}

/// The OpenAI-style definition of the `bash` tool.
fn bash_tool_definition() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": BASH_TOOL,
            "description": "Run one shell command in the task's sandbox and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command."}},
                "required": ["command"],
            },
        },
    })
}

/// Build the ATIF document of one episode.
pub fn episode_to_atif(src: EpisodeSource<'_>) -> Trajectory {
    let r = src.result;
    let uses_model = policy_uses_model(&r.policy);
    let mut steps: Vec<AtifStep> = Vec::new();
    let mut push = |mut step: AtifStep| {
        step.step_id = steps.len() as u64 + 1;
        steps.push(step);
    };
    let first = |role: Role| src.messages.iter().find(|m| m.role == role);
    if let Some(system) = first(Role::System) {
        push(plain(Source::System, &system.content));
    }
    if let Some(task) = first(Role::User) {
        push(plain(Source::User, &task.content));
    }
    let replayed = r.forked_from.as_ref().map_or(0, |f| f.replayed as usize);
    let mut generations = src.tokens.iter();
    for (i, s) in r.steps.iter().enumerate() {
        let copied = i < replayed;
        let mut step = if s.kind == StepKind::Human {
            human_step(s)
        } else if copied {
            agent_step(s, Some(false), None)
        } else {
            agent_step(s, uses_model, generations.next())
        };
        if copied {
            step.is_copied_context = Some(true);
        }
        push(step);
    }
    if let Some(error) = &r.error {
        let mut step = plain(
            Source::System,
            &format!("the episode ended ({}): {error}", r.end_reason.as_str()),
        );
        step.extra = Some(obj(json!({"end_reason": r.end_reason, "error": error})));
        push(step);
    }
    let counted = uses_model != Some(false);
    let final_metrics = FinalMetrics {
        total_prompt_tokens: counted.then_some(r.tokens.prompt_tokens),
        total_completion_tokens: counted.then_some(r.tokens.completion_tokens),
        total_steps: Some(steps.len() as u64),
        extra: Some(obj(json!({
            "passed": r.passed,
            "reward": r.reward,
            "turns": r.turns,
            "end_reason": r.end_reason,
            "failure_mode": r.failure_mode,
            "failure_labels": r.labels(),
            "earliest_failing_step": r.earliest_failing_step,
            "error": r.error,
            "tests": r.tests,
            "timings": r.timings,
            "verifier": r.verifier,
        }))),
        ..FinalMetrics::default()
    };
    Trajectory {
        schema_version: SCHEMA_VERSION.to_string(),
        session_id: Some(format!("{}/{}/{}", src.run, r.task, r.sample)),
        trajectory_id: None,
        agent: Agent {
            name: "endless".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            model_name: model_name(&r.policy),
            tool_definitions: Some(vec![bash_tool_definition()]),
            extra: Some(obj(json!({"policy": r.policy}))),
        },
        steps,
        notes: None,
        final_metrics: Some(final_metrics),
        extra: Some(obj(json!({
            "run": src.run,
            "task": r.task,
            "category": r.category,
            "complexity": r.complexity,
            "sample": r.sample,
            "policy": r.policy,
            "taken_over": r.taken_over,
            "forked_from": r.forked_from,
        }))),
    }
}

/// A JSON object's map (`json!` of an object literal always is one).
fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A step with only a message.
fn plain(source: Source, message: &str) -> AtifStep {
    AtifStep {
        step_id: 0,
        timestamp: None,
        source,
        model_name: None,
        message: Content::Text(message.to_string()),
        reasoning_content: None,
        tool_calls: None,
        observation: None,
        metrics: None,
        extra: None,
        llm_call_count: None,
        is_copied_context: None,
    }
}

/// What endless knows of a step beyond ATIF's fields.
fn step_extra(s: &Step) -> Map<String, Value> {
    let mut m = obj(json!({
        "turn": s.turn,
        "kind": s.kind,
        "exit_code": s.exit_code,
        "timed_out": s.timed_out,
        "policy_secs": s.policy_secs,
        "exec_secs": s.exec_secs,
    }));
    if let Some(e) = &s.error {
        m.insert("error".into(), json!(e));
    }
    m
}

/// The command's output as an observation result.
fn output_result(s: &Step, call: Option<String>) -> ObservationResult {
    ObservationResult {
        source_call_id: call,
        content: Some(Content::Text(s.output.clone())),
        extra: Some(obj(
            json!({"exit_code": s.exit_code, "timed_out": s.timed_out}),
        )),
    }
}

/// A human's command at the terminal (a take-over): a user step.
fn human_step(s: &Step) -> AtifStep {
    let command = s.command.clone().unwrap_or_default();
    let mut step = plain(Source::User, &format!("$ {command}"));
    step.observation = Some(Observation {
        results: vec![output_result(s, None)],
    });
    let mut extra = step_extra(s);
    extra.insert("command".into(), json!(command));
    step.extra = Some(extra);
    step
}

/// One reply of the policy and what it did. `uses_model`: `Some(false)`
/// marks a deterministic step (no metrics, no reasoning field); `tokens`:
/// the reply's exact tokens, when recorded.
fn agent_step(s: &Step, uses_model: Option<bool>, tokens: Option<&TurnTokens>) -> AtifStep {
    let mut step = plain(Source::Agent, &s.reply);
    let mut extra = step_extra(s);
    let mut results = Vec::new();
    if let Some(command) = &s.command {
        let id = format!("call_{}", s.turn);
        step.tool_calls = Some(vec![ToolCall {
            tool_call_id: id.clone(),
            function_name: BASH_TOOL.into(),
            arguments: obj(json!({ "command": command })),
            extra: None,
        }]);
        results.push(output_result(s, Some(id)));
    } else if let Some(error) = &s.error {
        // A malformed reply: what the agent was told.
        results.push(ObservationResult {
            source_call_id: None,
            content: Some(Content::Text(error.clone())),
            extra: None,
        });
    }
    if !results.is_empty() {
        step.observation = Some(Observation { results });
    }
    if uses_model == Some(false) {
        step.llm_call_count = Some(0);
        if let Some(think) = &s.think {
            extra.insert("think".into(), json!(think));
        }
    } else {
        step.reasoning_content = s.think.clone();
        let t = s.tokens;
        if t.prompt_tokens > 0
            || t.completion_tokens > 0
            || uses_model == Some(true)
            || tokens.is_some()
        {
            step.metrics = Some(Metrics {
                prompt_tokens: Some(t.prompt_tokens),
                completion_tokens: Some(t.completion_tokens),
                prompt_token_ids: tokens.map(|t| t.prompt_token_ids.clone()),
                completion_token_ids: tokens.map(|t| t.completion_token_ids.clone()),
                logprobs: tokens.map(|t| t.logprobs.clone()),
                ..Metrics::default()
            });
            step.llm_call_count = Some(1);
        }
    }
    step.extra = Some(extra);
    step
}
