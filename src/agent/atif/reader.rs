//! Reading an ATIF document (a Harbor trial's `agent/trajectory.json`, or
//! one endless wrote) and turning it back into endless steps, so that runs
//! made elsewhere show in the inspector, get failure labels and replay as
//! a transcript.

use std::path::Path;

use serde_json::{Map, Value};

use super::schema::{AtifStep, Source, Trajectory};
use super::AtifError;
use crate::agent::episode::{Step, StepKind};
use crate::llm::{ChatMessage, TokenUsage};

/// Tool names that end the episode (Terminus's, the OpenAI tools profile's).
const FINISH_TOOLS: &[&str] = &["mark_task_complete", "finish", "task_complete", "submit"];
/// Argument names that hold the command of a shell tool call.
const COMMAND_ARGS: &[&str] = &["command", "keystrokes", "cmd", "script", "code"];

/// Parse `text` (the contents of `path`) as an ATIF document: every field
/// the spec requires present with its type, a known `schema_version`,
/// `step_id`s 1, 2, 3, ... Errors name the file and the field. The caller
/// reads the file (a Harbor job's beneath the job directory's descriptor:
/// see `workbench::harbor_job`).
pub fn parse_atif(path: &Path, text: &str) -> Result<Trajectory, AtifError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let doc: Trajectory = serde_path_to_error::deserialize(de).map_err(|e| AtifError::Field {
        path: path.to_path_buf(),
        field: e.path().to_string(),
        why: e.inner().to_string(),
    })?;
    let invalid = |field: String, why: String| AtifError::Field {
        path: path.to_path_buf(),
        field,
        why,
    };
    let version_ok = doc
        .schema_version
        .strip_prefix("ATIF-v1.")
        .is_some_and(|n| n.parse::<u32>().is_ok());
    if !version_ok {
        return Err(invalid(
            "schema_version".into(),
            format!("{:?} is not an ATIF-v1.N version", doc.schema_version),
        ));
    }
    for (i, s) in doc.steps.iter().enumerate() {
        if s.step_id != i as u64 + 1 {
            return Err(invalid(
                format!("steps[{i}].step_id"),
                format!("is {}, expected {} (sequential from 1)", s.step_id, i + 1),
            ));
        }
        if s.source != Source::Agent && (s.tool_calls.is_some() || s.metrics.is_some()) {
            return Err(invalid(
                format!("steps[{i}]"),
                "tool_calls and metrics are only valid on agent steps".into(),
            ));
        }
    }
    Ok(doc)
}

/// An ATIF trajectory as endless sees an episode.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedTrajectory {
    /// The conversation: system prompt, instruction, replies, observations.
    pub messages: Vec<ChatMessage>,
    /// One step per agent turn; a user's turns after the instruction as
    /// human steps.
    pub steps: Vec<Step>,
    /// Tokens over all agent steps.
    pub tokens: TokenUsage,
}

/// Turn `doc` into endless steps and messages.
pub fn atif_to_steps(doc: &Trajectory) -> ImportedTrajectory {
    let mut out = ImportedTrajectory {
        messages: Vec::new(),
        steps: Vec::new(),
        tokens: TokenUsage::default(),
    };
    let last_agent = doc.steps.iter().rposition(|s| s.source == Source::Agent);
    let mut seen_user = false;
    let mut turn = 0u32;
    for (i, s) in doc.steps.iter().enumerate() {
        let text = s.message.text();
        match s.source {
            Source::System => {
                if out.messages.is_empty() {
                    out.messages.push(ChatMessage::system(text));
                }
            }
            Source::User if !seen_user => {
                seen_user = true;
                out.messages.push(ChatMessage::user(text));
            }
            Source::User => {
                let extra = s.extra.as_ref();
                let at = int_of(extra, "turn").and_then(|t| u32::try_from(t).ok());
                let mut step = Step::new(at.unwrap_or(turn.max(1)), StepKind::Human);
                step.command = str_of(extra, "command")
                    .or_else(|| text.strip_prefix("$ ").map(str::to_string));
                step.output = observation_text(s);
                step.exit_code = int_of(extra, "exit_code");
                step.reply = text;
                out.steps.push(step);
            }
            Source::Agent => {
                turn += 1;
                let step = agent_step(s, turn, Some(i) == last_agent);
                out.tokens.add(step.tokens);
                out.messages
                    .push(ChatMessage::assistant(step.reply.clone()));
                if !step.output.is_empty() {
                    out.messages.push(ChatMessage::user(step.output.clone()));
                }
                out.steps.push(step);
            }
        }
    }
    out
}

fn str_of(extra: Option<&Map<String, Value>>, key: &str) -> Option<String> {
    extra?.get(key)?.as_str().map(str::to_string)
}

fn int_of(extra: Option<&Map<String, Value>>, key: &str) -> Option<i32> {
    extra?
        .get(key)?
        .as_i64()
        .and_then(|n| i32::try_from(n).ok())
}

/// The observation's text: its results' contents, one after another.
fn observation_text(s: &AtifStep) -> String {
    s.observation
        .as_ref()
        .map(|o| {
            o.results
                .iter()
                .filter_map(|r| r.content.as_ref().map(|c| c.text()))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The exit code an observation result recorded (endless writes it).
fn observed_exit(s: &AtifStep) -> Option<i32> {
    s.observation
        .as_ref()?
        .results
        .iter()
        .find_map(|r| int_of(r.extra.as_ref(), "exit_code"))
}

/// One agent turn. Its kind: what endless recorded (`extra.kind`), else a
/// finishing tool call (or a last turn without one) is done, else a command.
fn agent_step(s: &AtifStep, turn: u32, is_last: bool) -> Step {
    let extra = s.extra.as_ref();
    let calls = s.tool_calls.as_deref().unwrap_or_default();
    let commands: Vec<String> = calls
        .iter()
        .filter(|c| !FINISH_TOOLS.contains(&c.function_name.as_str()))
        .map(|c| {
            COMMAND_ARGS
                .iter()
                .find_map(|k| c.arguments.get(*k).and_then(Value::as_str))
                .map(|cmd| cmd.trim_end().to_string())
                .unwrap_or_else(|| {
                    format!(
                        "{}({})",
                        c.function_name,
                        Value::Object(c.arguments.clone())
                    )
                })
        })
        .collect();
    let finishes = calls
        .iter()
        .any(|c| FINISH_TOOLS.contains(&c.function_name.as_str()));
    let recorded = extra
        .and_then(|e| e.get("kind"))
        .and_then(|k| serde_json::from_value::<StepKind>(k.clone()).ok());
    let kind = recorded.unwrap_or(if finishes || (commands.is_empty() && is_last) {
        StepKind::Done
    } else {
        StepKind::Command
    });
    let mut step = Step::new(turn, kind);
    step.reply = s.message.text();
    // Another harness's message is the agent's prose around its tool
    // calls: shown as its reasoning (endless's own replies carry theirs).
    let prose = (recorded.is_none() && !step.reply.trim().is_empty()).then(|| step.reply.clone());
    step.think = s
        .reasoning_content
        .clone()
        .or_else(|| str_of(extra, "think"))
        .or(prose);
    step.command = (!commands.is_empty()).then(|| commands.join("\n"));
    step.output = observation_text(s);
    step.exit_code = observed_exit(s).or_else(|| int_of(extra, "exit_code"));
    step.timed_out = extra
        .and_then(|e| e.get("timed_out"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    step.error = str_of(extra, "error");
    if let Some(m) = &s.metrics {
        step.tokens = TokenUsage {
            prompt_tokens: m.prompt_tokens.unwrap_or(0),
            completion_tokens: m.completion_tokens.unwrap_or(0),
        };
    }
    let secs = |k: &str| extra.and_then(|e| e.get(k)).and_then(Value::as_f64);
    step.policy_secs = secs("policy_secs").unwrap_or(0.0);
    step.exec_secs = secs("exec_secs").unwrap_or(0.0);
    if kind == StepKind::Malformed {
        // What the agent was told is the observation; nothing ran.
        let told = std::mem::take(&mut step.output);
        step.error = step.error.or(Some(told));
    }
    step
}
