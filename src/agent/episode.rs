//! The episode loop: ask the policy, run its command, show the observation,
//! until it says done, runs out of turns or time, or something breaks.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::policy::Policy;
use super::protocol::{self, Action, CORRECTIVE_MESSAGE, SYSTEM_PROMPT};
use super::terminal::Terminal;
use crate::llm::{ChatMessage, TokenUsage};
use crate::task::Task;

/// Limits of one episode.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeConfig {
    /// Replies the policy may give (malformed ones count).
    pub max_turns: u32,
    /// Limit of one command.
    pub command_timeout: Duration,
    /// Wall-clock limit of the whole episode (`None`: no limit).
    pub episode_timeout: Option<Duration>,
}

impl Default for EpisodeConfig {
    fn default() -> Self {
        Self {
            max_turns: protocol::EVAL_MAX_TURNS,
            command_timeout: Duration::from_secs(60),
            episode_timeout: None,
        }
    }
}

impl EpisodeConfig {
    /// The task's own limits (`[agent] max_turns, timeout_sec`), with an
    /// optional turn-limit override.
    pub fn for_task(task: &Task, max_turns: Option<u32>, command_timeout: Duration) -> Self {
        let secs = task.meta.agent.timeout_sec;
        Self {
            max_turns: max_turns.unwrap_or(task.meta.agent.max_turns).max(1),
            command_timeout,
            episode_timeout: (secs.is_finite() && secs > 0.0)
                .then(|| Duration::from_secs_f64(secs)),
        }
    }
}

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The agent said done.
    Done,
    /// The turn limit was reached.
    MaxTurns,
    /// The episode's wall-clock limit was reached.
    Timeout,
    /// The policy, model server or sandbox failed.
    Error,
}

/// What kind of reply a step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Command,
    Done,
    Malformed,
}

/// One turn: the policy's reply and, for a command, what running it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 1-based turn number.
    pub turn: u32,
    pub kind: StepKind,
    /// The command run (for `command` steps).
    pub command: Option<String>,
    /// The reasoning inside `<think>`.
    pub think: Option<String>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Command output as the sandbox returned it.
    pub output: String,
    /// Why the reply was malformed, or the error that ended the episode here.
    pub error: Option<String>,
    /// The raw assistant reply.
    pub reply: String,
    /// Seconds the policy took to reply.
    pub policy_secs: f64,
    /// Seconds the command took.
    pub exec_secs: f64,
    pub tokens: TokenUsage,
}

impl Step {
    /// Turn `turn` of kind `kind`, with nothing run, said or timed yet.
    pub fn new(turn: u32, kind: StepKind) -> Self {
        Step {
            turn,
            kind,
            command: None,
            think: None,
            exit_code: None,
            timed_out: false,
            output: String::new(),
            error: None,
            reply: String::new(),
            policy_secs: 0.0,
            exec_secs: 0.0,
            tokens: TokenUsage::default(),
        }
    }
}

/// The agent's side of an episode, before verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    pub messages: Vec<ChatMessage>,
    pub steps: Vec<Step>,
    pub end_reason: EndReason,
    /// What failed, when `end_reason` is `error`.
    pub error: Option<String>,
    pub tokens: TokenUsage,
    pub policy_secs: f64,
    pub exec_secs: f64,
    /// Wall-clock seconds of the whole loop.
    pub agent_secs: f64,
}

impl Trajectory {
    /// Turns taken (replies given).
    pub fn turns(&self) -> u32 {
        self.steps.len() as u32
    }
}

/// Watches an episode as it happens (to write it to disk, or show it).
pub trait EpisodeObserver {
    /// A message was added to the conversation.
    fn on_message(&mut self, _message: &ChatMessage) {}
    /// A turn finished.
    fn on_step(&mut self, _step: &Step) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl EpisodeObserver for NoObserver {}

/// Run one episode of `instruction` with `policy` on `terminal`.
/// Never panics on policy or terminal failures: they end the episode with
/// [`EndReason::Error`].
pub fn run_episode(
    instruction: &str,
    policy: &mut dyn Policy,
    terminal: &mut dyn Terminal,
    config: &EpisodeConfig,
    observer: &mut dyn EpisodeObserver,
) -> Trajectory {
    let started = Instant::now();
    let deadline = config.episode_timeout.map(|t| started + t);
    let mut t = Trajectory {
        messages: Vec::new(),
        steps: Vec::new(),
        end_reason: EndReason::MaxTurns,
        error: None,
        tokens: TokenUsage::default(),
        policy_secs: 0.0,
        exec_secs: 0.0,
        agent_secs: 0.0,
    };
    let push = |t: &mut Trajectory, m: ChatMessage, observer: &mut dyn EpisodeObserver| {
        observer.on_message(&m);
        t.messages.push(m);
    };
    push(&mut t, ChatMessage::system(SYSTEM_PROMPT), observer);
    push(
        &mut t,
        ChatMessage::user(protocol::initial_user_message(instruction)),
        observer,
    );

    for turn in 1..=config.max_turns {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            t.end_reason = EndReason::Timeout;
            break;
        }
        let asked = Instant::now();
        let reply = match policy.act(&t.messages) {
            Ok(r) => r,
            Err(e) => {
                t.policy_secs += asked.elapsed().as_secs_f64();
                t.end_reason = EndReason::Error;
                t.error = Some(format!("policy failed at turn {turn}: {e}"));
                break;
            }
        };
        let policy_secs = asked.elapsed().as_secs_f64();
        t.policy_secs += policy_secs;
        t.tokens.add(reply.usage);
        push(&mut t, ChatMessage::assistant(reply.text.clone()), observer);
        let parsed = protocol::parse_reply(&reply.text);
        let mut step = Step {
            think: parsed.think,
            reply: reply.text,
            policy_secs,
            tokens: reply.usage,
            ..Step::new(turn, StepKind::Malformed)
        };
        match parsed.action {
            Action::Done => {
                step.kind = StepKind::Done;
                observer.on_step(&step);
                t.steps.push(step);
                t.end_reason = EndReason::Done;
                break;
            }
            Action::Malformed(reason) => {
                step.error = Some(reason);
                observer.on_step(&step);
                t.steps.push(step);
                push(&mut t, ChatMessage::user(CORRECTIVE_MESSAGE), observer);
            }
            Action::Command(cmd) => {
                step.kind = StepKind::Command;
                let mut timeout = config.command_timeout;
                let mut cut_by_deadline = false;
                if let Some(d) = deadline {
                    let left = d.saturating_duration_since(Instant::now());
                    if left < timeout {
                        timeout = left.max(Duration::from_millis(10));
                        cut_by_deadline = true;
                    }
                }
                let ran = Instant::now();
                let result = terminal.exec(&cmd, timeout);
                step.exec_secs = ran.elapsed().as_secs_f64();
                t.exec_secs += step.exec_secs;
                step.command = Some(cmd);
                match result {
                    Ok(r) => {
                        let observation = protocol::format_observation(&r, timeout.as_secs_f64());
                        step.exit_code = r.exit_code;
                        step.timed_out = r.timed_out;
                        step.output =
                            protocol::truncate_output(&r.output, protocol::MAX_OBSERVATION_CHARS);
                        observer.on_step(&step);
                        t.steps.push(step);
                        push(&mut t, ChatMessage::user(observation), observer);
                        if r.timed_out && cut_by_deadline {
                            t.end_reason = EndReason::Timeout;
                            break;
                        }
                    }
                    Err(e) => {
                        step.error = Some(e.to_string());
                        observer.on_step(&step);
                        t.steps.push(step);
                        t.end_reason = EndReason::Error;
                        t.error = Some(format!("the shell failed at turn {turn}: {e}"));
                        break;
                    }
                }
            }
        }
    }
    t.agent_secs = started.elapsed().as_secs_f64();
    t
}
