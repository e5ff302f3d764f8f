//! An endless episode as an ATIF document: the system prompt and the
//! task's instruction, then one agent step per turn (its reply, its
//! reasoning, its command as a `bash` tool call, the command's output as
//! the observation, the turn's tokens, when it was recorded), a human's
//! commands (a take-over) as user steps, a fork's replayed commands marked
//! as copied context, and the verdict (passed, reward, tests, failure
//! labels) in the final metrics. Under the `tools` protocol a reply's
//! OpenAI `tool_calls` are its ATIF tool calls, ids and all, each answered
//! by its `tool` message, and every function offered is listed.

use serde_json::{json, Map, Value};

use super::lines::RecordedLines;
use super::schema::{
    Agent, AtifStep, Content, FinalMetrics, Metrics, Observation, ObservationResult, Source,
    ToolCall, Trajectory, SCHEMA_VERSION,
};
use super::tokens::TurnTokens;
use crate::agent::episode::{Step, StepKind};
use crate::agent::result::EpisodeResult;
use crate::agent::tool_calls::{BASH, BASH_ALIAS};
use crate::llm::tools::render_assistant_text;
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
    /// What its trajectory file recorded: the conversation (system
    /// prompt, task, replies with their tool calls, observations), when
    /// the episode started and each step was recorded, the functions
    /// offered; empty when there is none.
    pub recorded: &'a RecordedLines,
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
    let recorded = src.recorded;
    let first = |role: Role| recorded.messages.iter().find(|m| m.role == role);
    for (source, role) in [(Source::System, Role::System), (Source::User, Role::User)] {
        if let Some(m) = first(role) {
            let mut step = plain(source, &m.content);
            step.timestamp = recorded.started_at.clone();
            steps.push(step);
        }
    }
    let replayed = r.forked_from.as_ref().map_or(0, |f| f.replayed as usize);
    let mut generations = src.tokens.iter();
    // Each step's time, when the file recorded one line per step.
    let times = (recorded.step_times.len() == r.steps.len()).then_some(&recorded.step_times);
    let mut replies = Replies {
        messages: &recorded.messages,
        next: 0,
    };
    for (i, s) in r.steps.iter().enumerate() {
        let copied = i < replayed;
        let mut step = if s.kind == StepKind::Human {
            human_step(s)
        } else {
            let calls = replies.find(&s.reply);
            if copied {
                agent_step(s, Some(false), None, calls)
            } else {
                agent_step(s, uses_model, generations.next(), calls)
            }
        };
        if copied {
            step.is_copied_context = Some(true);
        }
        step.timestamp = times.and_then(|t| t[i].clone());
        steps.push(step);
    }
    if let Some(error) = &r.error {
        let mut step = plain(
            Source::System,
            &format!("the episode ended ({}): {error}", r.end_reason.as_str()),
        );
        step.extra = Some(obj(json!({"end_reason": r.end_reason, "error": error})));
        step.timestamp = recorded.ended_at.clone();
        steps.push(step);
    }
    if steps.is_empty() {
        // ATIF wants at least one step (Harbor's `Trajectory` refuses
        // none): an agent that did nothing, such as Harbor's `nop`.
        let mut step = plain(
            Source::System,
            &format!(
                "the episode recorded no turn (it ended: {})",
                r.end_reason.as_str()
            ),
        );
        step.extra = Some(obj(json!({"end_reason": r.end_reason})));
        step.timestamp = recorded.ended_at.clone();
        steps.push(step);
    }
    for (i, step) in steps.iter_mut().enumerate() {
        step.step_id = i as u64 + 1;
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
            tool_definitions: Some(if recorded.tools.is_empty() {
                vec![bash_tool_definition()]
            } else {
                recorded.tools.clone()
            }),
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

/// The assistant messages of a conversation, matched to the steps in
/// order.
struct Replies<'m> {
    messages: &'m [ChatMessage],
    /// Where the next reply is looked for.
    next: usize,
}

/// A reply that made OpenAI tool calls, and the `tool` messages that
/// answered them.
struct CallingReply<'m> {
    message: &'m ChatMessage,
    answers: Vec<&'m ChatMessage>,
}

impl<'m> Replies<'m> {
    /// The next assistant message whose text is the step's `reply` (as
    /// steps record it: its content, then its calls as Hermes text), when
    /// it made OpenAI tool calls; `None` for a plain reply or one the
    /// conversation does not hold.
    fn find(&mut self, reply: &str) -> Option<CallingReply<'m>> {
        let rest = self.messages.get(self.next..)?;
        let at = rest.iter().position(|m| {
            m.role == Role::Assistant
                && if m.tool_calls.is_empty() {
                    m.content == reply
                } else {
                    render_assistant_text(m) == reply
                }
        })?;
        self.next += at + 1;
        let message = &rest[at];
        if message.tool_calls.is_empty() {
            return None;
        }
        let answers = rest[at + 1..]
            .iter()
            .take_while(|m| m.role != Role::Assistant)
            .filter(|m| m.role == Role::Tool)
            .collect();
        Some(CallingReply { message, answers })
    }
}

/// One reply of the policy and what it did. `uses_model`: `Some(false)`
/// marks a deterministic step (no metrics, no reasoning field); `tokens`:
/// the reply's exact tokens, when recorded; `calls`: the reply's OpenAI
/// tool calls and their answers (the `tools` protocol).
fn agent_step(
    s: &Step,
    uses_model: Option<bool>,
    tokens: Option<&TurnTokens>,
    calls: Option<CallingReply<'_>>,
) -> AtifStep {
    let mut step = plain(Source::Agent, &s.reply);
    let mut extra = step_extra(s);
    let mut results = Vec::new();
    if let Some(reply) = calls {
        step.message = Content::Text(reply.message.content.clone());
        let mut ran = s.command.is_some();
        let mut atif_calls = Vec::new();
        for c in &reply.message.tool_calls {
            let (arguments, raw) = match serde_json::from_str::<Value>(&c.function.arguments) {
                Ok(Value::Object(m)) => (m, None),
                _ => (Map::new(), Some(c.function.arguments.clone())),
            };
            atif_calls.push(ToolCall {
                tool_call_id: c.id.clone(),
                function_name: c.function.name.clone(),
                arguments,
                extra: raw.map(|a| obj(json!({ "raw_arguments": a }))),
            });
            let answer = reply
                .answers
                .iter()
                .find(|m| m.tool_call_id.as_deref() == Some(c.id.as_str()));
            if let Some(answer) = answer {
                // The first shell call is the command that ran.
                let this_ran = ran && matches!(c.function.name.as_str(), BASH | BASH_ALIAS);
                ran &= !this_ran;
                results.push(ObservationResult {
                    source_call_id: Some(c.id.clone()),
                    content: Some(Content::Text(answer.content.clone())),
                    extra: this_ran.then(|| {
                        obj(json!({"exit_code": s.exit_code, "timed_out": s.timed_out, "output": s.output}))
                    }),
                });
            }
        }
        step.tool_calls = Some(atif_calls);
    } else if let Some(command) = &s.command {
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
