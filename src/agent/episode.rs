//! The episode loop: ask the policy, run its command, show the observation,
//! until it says done, runs out of turns or time, or something breaks.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::policy::{Policy, PolicyError};
use super::protocol::{self, Action, Protocol};
use super::terminal::{Fault, HumanTurn, Terminal};
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
    /// The protocol's switches and texts (`endless` or `reference`).
    pub protocol: Protocol,
}

impl Default for EpisodeConfig {
    fn default() -> Self {
        Self {
            max_turns: protocol::EVAL_MAX_TURNS,
            command_timeout: Duration::from_secs(60),
            episode_timeout: None,
            protocol: Protocol::endless(),
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
            protocol: Protocol::endless(),
        }
    }

    /// The same limits under `protocol`.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
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
    /// The conversation no longer fits the policy's context window (prompt
    /// plus reply): the turn-exhaustion family, a failure of the agent,
    /// scored; the final tests run.
    ContextExhausted,
    /// The episode's wall-clock limit was reached.
    Timeout,
    /// The agent's shell ended (`exit`, `kill -9 $$`, killed for memory) or
    /// stopped answering: a failure of the agent, scored 0, no tests run.
    ShellDied,
    /// The agent exhausted a limit of its session (its wall clock, memory or
    /// processes): a failure of the agent, scored 0, no tests run.
    ResourceLimit,
    /// Infrastructure the agent did not cause failed (the policy or model
    /// server, the image build, the sandbox start, the verifier): left out
    /// of the pass rate.
    Error,
    /// The process recording the episode died before it ended (`kill -9`
    /// of an evaluation, a crash): an infrastructure outcome, left out of
    /// the pass rate like `error`; running the evaluation again retries it.
    Interrupted,
}

impl EndReason {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Done => "done",
            EndReason::MaxTurns => "max_turns",
            EndReason::ContextExhausted => "context_exhausted",
            EndReason::Timeout => "timeout",
            EndReason::ShellDied => "shell_died",
            EndReason::ResourceLimit => "resource_limit",
            EndReason::Error => "error",
            EndReason::Interrupted => "interrupted",
        }
    }

    /// How an episode ends when its terminal fails with `fault`.
    pub fn from_fault(fault: Fault) -> Self {
        match fault {
            Fault::Infra => EndReason::Error,
            Fault::ShellDied => EndReason::ShellDied,
            Fault::ResourceLimit => EndReason::ResourceLimit,
        }
    }

    /// Whether the episode counts in pass rates and pass@k: everything but
    /// infrastructure outcomes (errors, interruptions) does.
    pub fn is_scored(self) -> bool {
        !matches!(self, EndReason::Error | EndReason::Interrupted)
    }

    /// Whether the final tests can run after the agent stopped: not when
    /// the shell is gone or something already failed.
    pub fn can_verify(self) -> bool {
        matches!(
            self,
            EndReason::Done
                | EndReason::MaxTurns
                | EndReason::ContextExhausted
                | EndReason::Timeout
        )
    }
}

/// What kind of reply a step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// The reply asked to run a command.
    Command,
    /// The reply said `<action>done</action>` (a command in it may run first,
    /// depending on the protocol).
    Done,
    /// The reply held neither a usable command nor done; the agent is told so
    /// and the turn counts.
    Malformed,
    /// A command a human typed while holding the session (a take-over from
    /// the TUI): not a reply of the policy, not a turn, not in the
    /// conversation; its `turn` is the agent turn whose command waited.
    Human,
}

/// One turn: the policy's reply and, for a command, what running it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 1-based turn number.
    pub turn: u32,
    /// What the reply was.
    pub kind: StepKind,
    /// The command run (for `command` steps).
    pub command: Option<String>,
    /// The reasoning inside `<think>`.
    pub think: Option<String>,
    /// The command's real exit status (the `reference` protocol tells the
    /// agent only 0 or 1); `None` when no command ran or it did not finish.
    pub exit_code: Option<i32>,
    /// The command hit the per-command time limit and was interrupted.
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
    /// Tokens of this turn's request and reply.
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

/// A human took the episode's session over (the TUI's ctrl-t): when, and
/// what they did. Evaluations leave such episodes out of their numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Takeover {
    /// The agent turn whose command waited the first time (1-based).
    pub turn: u32,
    /// Index into `steps` where the human's part begins (the first human
    /// step, or the agent step that waited when the human ran nothing).
    pub step: u32,
    /// When the human first took the session (RFC 3339, UTC).
    pub at: String,
    /// Seconds into the episode the human first took it.
    pub after_secs: f64,
    /// Commands the human ran (the steps of kind `human`).
    pub human_steps: u32,
    /// Seconds the human held the session, over every take-over.
    pub held_secs: f64,
}

/// The agent's side of an episode, before verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The whole conversation: system prompt, task, replies, observations.
    pub messages: Vec<ChatMessage>,
    /// One entry per turn.
    pub steps: Vec<Step>,
    /// Why the loop stopped.
    pub end_reason: EndReason,
    /// What failed, when `end_reason` is `error`, `shell_died` or `resource_limit`.
    pub error: Option<String>,
    /// Tokens the policy used over all turns.
    pub tokens: TokenUsage,
    /// Seconds spent waiting for the policy, summed over turns.
    pub policy_secs: f64,
    /// Seconds spent running commands, summed over turns.
    pub exec_secs: f64,
    /// Wall-clock seconds of the whole loop.
    pub agent_secs: f64,
    /// Set when a human took the session over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<Takeover>,
}

impl Trajectory {
    /// Turns taken (replies given; a human's commands are not turns).
    pub fn turns(&self) -> u32 {
        self.steps
            .iter()
            .filter(|s| s.kind != StepKind::Human)
            .count() as u32
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

/// What one reply did to the episode.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    /// The user message the reply produced: the command's observation, or
    /// the corrective message after a malformed reply; empty when none.
    pub observation: String,
    /// The messages that carry it, as added to the conversation: one user
    /// message, or under the `tools` protocol an answer to each tool call
    /// (`tool` messages, or a user turn of `<tool_response>` blocks).
    pub messages: Vec<ChatMessage>,
    /// The episode is over (the agent said done, a limit was reached, or
    /// its shell failed).
    pub done: bool,
}

/// One episode driven one reply at a time: the single implementation of
/// the agent loop's rules (parsing, observations, turn limit, timeouts, end
/// reasons). [`run_episode`] drives it with a [`Policy`]; `endless serve`
/// drives it with replies that arrive over HTTP.
#[derive(Debug)]
pub struct EpisodeStepper {
    config: EpisodeConfig,
    started: Instant,
    deadline: Option<Instant>,
    trajectory: Trajectory,
    /// Set once the episode has ended.
    ended: bool,
}

impl EpisodeStepper {
    /// Start an episode of `instruction`: the system prompt and the
    /// instruction become the first two messages.
    pub fn start(
        instruction: &str,
        config: &EpisodeConfig,
        observer: &mut dyn EpisodeObserver,
    ) -> Self {
        let started = Instant::now();
        let mut stepper = Self {
            config: config.clone(),
            started,
            deadline: config.episode_timeout.map(|t| started + t),
            trajectory: Trajectory {
                messages: Vec::new(),
                steps: Vec::new(),
                end_reason: EndReason::MaxTurns,
                error: None,
                tokens: TokenUsage::default(),
                policy_secs: 0.0,
                exec_secs: 0.0,
                agent_secs: 0.0,
                takeover: None,
            },
            ended: false,
        };
        for message in protocol::initial_messages(&config.protocol, instruction) {
            stepper.push(message, observer);
        }
        stepper.check_limits();
        stepper
    }

    /// The conversation so far (what the policy answers next).
    pub fn messages(&self) -> &[ChatMessage] {
        &self.trajectory.messages
    }

    /// The functions the protocol offers the policy (`tools` profile).
    pub fn offered_tools(&self) -> Vec<crate::llm::ToolSpec> {
        self.config.protocol.offered_tools()
    }

    /// Whether the episode is over.
    pub fn is_done(&self) -> bool {
        self.ended
    }

    /// Turns taken so far.
    pub fn turns(&self) -> u32 {
        self.trajectory.turns()
    }

    /// How the episode ended (meaningful once [`is_done`](Self::is_done)).
    pub fn end_reason(&self) -> EndReason {
        self.trajectory.end_reason
    }

    fn push(&mut self, message: ChatMessage, observer: &mut dyn EpisodeObserver) {
        observer.on_message(&message);
        self.trajectory.messages.push(message);
    }

    fn end(&mut self, reason: EndReason, error: Option<String>) {
        self.trajectory.end_reason = reason;
        if error.is_some() {
            self.trajectory.error = error;
        }
        self.ended = true;
    }

    /// Before asking for another reply: out of turns, or out of time?
    fn check_limits(&mut self) {
        if self.ended {
            return;
        }
        if self.turns() >= self.config.max_turns {
            self.end(EndReason::MaxTurns, None);
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.end(EndReason::Timeout, None);
        }
    }

    /// The policy could not answer: the episode ends as an
    /// infrastructure error, or as `context_exhausted` when the
    /// conversation no longer fits the model's context (the agent's failure).
    pub fn policy_failed(&mut self, error: &PolicyError, policy_secs: f64) {
        if self.ended {
            return;
        }
        self.trajectory.policy_secs += policy_secs;
        let turn = self.turns() + 1;
        let (end, what) = match error {
            PolicyError::ContextExhausted { .. } => (EndReason::ContextExhausted, "context full"),
            _ => (EndReason::Error, "policy failed"),
        };
        self.end(end, Some(format!("{what} at turn {turn}: {error}")));
    }

    /// End the episode from outside (a server shutting down, a client gone):
    /// an infrastructure error, unscored; no-op once it has ended.
    pub fn interrupt(&mut self, why: &str) {
        if !self.ended {
            self.end(EndReason::Error, Some(format!("interrupted: {why}")));
        }
    }

    /// Apply the policy's reply `text` (which cost `usage` and took
    /// `policy_secs`): parse it under the episode's [`Protocol`], run its
    /// command on `terminal`, and add the observation. A reply with a
    /// command and a done action after it (`endless` profile) runs the
    /// command, adds its observation, then ends the episode as done; under
    /// the `reference` profile such a reply ends it without running
    /// anything. A step after the end changes nothing and says done.
    pub fn step(
        &mut self,
        text: &str,
        usage: TokenUsage,
        policy_secs: f64,
        terminal: &mut dyn Terminal,
        observer: &mut dyn EpisodeObserver,
    ) -> StepOutcome {
        let reply = ChatMessage::assistant(text);
        self.step_message(reply, usage, policy_secs, terminal, observer)
    }

    /// [`step`](Self::step) with a whole assistant message: under the
    /// `tools` protocol its `tool_calls` are the reply's action, and the
    /// message is kept in the conversation with them.
    pub fn step_message(
        &mut self,
        reply: ChatMessage,
        usage: TokenUsage,
        policy_secs: f64,
        terminal: &mut dyn Terminal,
        observer: &mut dyn EpisodeObserver,
    ) -> StepOutcome {
        if self.ended {
            return StepOutcome {
                observation: String::new(),
                messages: Vec::new(),
                done: true,
            };
        }
        let turn = self.turns() + 1;
        let t = &mut self.trajectory;
        t.policy_secs += policy_secs;
        t.tokens.add(usage);
        let parsed = self.config.protocol.parse_message(&reply);
        let text = self.config.protocol.reply_text(&reply);
        self.push(reply, observer);
        let mut step = Step {
            think: parsed.think.clone(),
            reply: text,
            policy_secs,
            tokens: usage,
            ..Step::new(turn, StepKind::Malformed)
        };
        let mut observation = String::new();
        let then_done = matches!(parsed.action, Action::CommandThenDone(_));
        let mut answers = Vec::new();
        match parsed.action.clone() {
            Action::Done => {
                step.kind = StepKind::Done;
                observer.on_step(&step);
                self.trajectory.steps.push(step);
                self.end(EndReason::Done, None);
            }
            Action::Malformed(reason) => {
                step.error = Some(reason);
                observer.on_step(&step);
                self.trajectory.steps.push(step);
                observation = self.config.protocol.corrective_message.clone();
                answers = self
                    .config
                    .protocol
                    .observation_messages(&parsed, &observation);
            }
            Action::Command(cmd) | Action::CommandThenDone(cmd) => {
                step.kind = StepKind::Command;
                let mut timeout = self.config.command_timeout;
                let mut cut_by_deadline = false;
                if let Some(d) = self.deadline {
                    let left = d.saturating_duration_since(Instant::now());
                    if left < timeout {
                        timeout = left.max(Duration::from_millis(10));
                        cut_by_deadline = true;
                    }
                }
                let ran = Instant::now();
                let result = terminal.exec(&cmd, timeout);
                let human = terminal.take_human();
                let held = human.as_ref().map_or(0.0, |h| h.held_secs);
                step.exec_secs = (ran.elapsed().as_secs_f64() - held).max(0.0);
                self.trajectory.exec_secs += step.exec_secs;
                if let Some(h) = human {
                    self.record_human(turn, h, observer);
                }
                step.command = Some(cmd);
                match result {
                    Ok(r) => {
                        let protocol = &self.config.protocol;
                        observation = protocol.format_observation(&r, timeout.as_secs_f64());
                        step.exit_code = r.exit_code;
                        step.timed_out = r.timed_out;
                        step.output =
                            protocol.truncate_output(&r.output, protocol::MAX_OBSERVATION_CHARS);
                        observer.on_step(&step);
                        self.trajectory.steps.push(step);
                        answers = protocol.observation_messages(&parsed, &observation);
                        if r.timed_out && cut_by_deadline {
                            self.end(EndReason::Timeout, None);
                        } else if then_done {
                            self.end(EndReason::Done, None);
                        }
                    }
                    Err(e) => {
                        step.error = Some(e.to_string());
                        observer.on_step(&step);
                        self.trajectory.steps.push(step);
                        self.end(
                            EndReason::from_fault(e.fault),
                            Some(format!("the shell failed at turn {turn}: {e}")),
                        );
                    }
                }
            }
        }
        for message in &answers {
            self.push(message.clone(), observer);
        }
        self.check_limits();
        StepOutcome {
            observation,
            messages: answers,
            done: self.ended,
        }
    }

    /// Add what a human did while holding the session during turn `turn`
    /// (before the agent's command ran) as steps of kind `human`, and mark
    /// the episode as taken over.
    fn record_human(&mut self, turn: u32, human: HumanTurn, observer: &mut dyn EpisodeObserver) {
        let at_step = self.trajectory.steps.len() as u32;
        let after_secs = human
            .taken
            .saturating_duration_since(self.started)
            .as_secs_f64();
        let t = self.trajectory.takeover.get_or_insert_with(|| Takeover {
            turn,
            step: at_step,
            at: human
                .taken_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            after_secs,
            human_steps: 0,
            held_secs: 0.0,
        });
        t.human_steps += human.commands.len() as u32;
        t.held_secs += human.held_secs;
        let protocol = &self.config.protocol;
        for c in human.commands {
            let mut step = Step {
                command: Some(c.command),
                exec_secs: c.secs,
                ..Step::new(turn, StepKind::Human)
            };
            match c.result {
                Ok(r) => {
                    step.exit_code = r.exit_code;
                    step.timed_out = r.timed_out;
                    step.output =
                        protocol.truncate_output(&r.output, protocol::MAX_OBSERVATION_CHARS);
                }
                Err(e) => step.error = Some(e.to_string()),
            }
            observer.on_step(&step);
            self.trajectory.steps.push(step);
        }
    }

    /// The finished trajectory (an episode stopped before its end counts
    /// as having reached its turn limit).
    pub fn finish(mut self) -> Trajectory {
        self.trajectory.agent_secs = self.started.elapsed().as_secs_f64();
        self.trajectory
    }
}

/// Run one episode of `instruction` with `policy` on `terminal`.
/// Never panics on policy or terminal failures: they end the episode with
/// [`EndReason::Error`], or, when the agent's shell died or ran out of its
/// limits, [`EndReason::ShellDied`] / [`EndReason::ResourceLimit`].
pub fn run_episode(
    instruction: &str,
    policy: &mut dyn Policy,
    terminal: &mut dyn Terminal,
    config: &EpisodeConfig,
    observer: &mut dyn EpisodeObserver,
) -> Trajectory {
    let mut episode = EpisodeStepper::start(instruction, config, observer);
    while !episode.is_done() {
        let asked = Instant::now();
        let tools = episode.offered_tools();
        match super::policy::ask(policy, episode.messages(), &tools) {
            Ok(reply) => {
                let secs = asked.elapsed().as_secs_f64();
                episode.step_message(reply.message(), reply.usage, secs, terminal, observer);
            }
            Err(e) => episode.policy_failed(&e, asked.elapsed().as_secs_f64()),
        }
    }
    episode.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::policy::ScriptedPolicy;
    use crate::agent::TerminalError;
    use crate::sandbox::ExecResult;

    /// Answers `ok` until the command `die`, then fails the way `fail` says.
    struct Dying(fn() -> TerminalError);

    impl Terminal for Dying {
        fn exec(&mut self, command: &str, _: Duration) -> Result<ExecResult, TerminalError> {
            if command == "die" {
                return Err((self.0)());
            }
            Ok(ExecResult {
                output: "ok".into(),
                exit_code: Some(0),
                timed_out: false,
                truncated: false,
                duration: Duration::ZERO,
            })
        }
    }

    fn end_of(fail: fn() -> TerminalError) -> Trajectory {
        let mut policy = ScriptedPolicy::new(vec!["ls".into(), "die".into(), "ls".into()]);
        run_episode(
            "task",
            &mut policy,
            &mut Dying(fail),
            &EpisodeConfig::default(),
            &mut NoObserver,
        )
    }

    #[test]
    fn the_terminals_fault_decides_the_end() {
        let t = end_of(|| TerminalError::shell_died("the PTY closed"));
        assert_eq!((t.end_reason, t.turns()), (EndReason::ShellDied, 2));
        assert!(t.error.as_deref().unwrap_or("").contains("the PTY closed"));
        let t = end_of(|| TerminalError::resource_limit("wall clock"));
        assert_eq!(t.end_reason, EndReason::ResourceLimit);
        let t = end_of(|| TerminalError::infra("sandbox gone"));
        assert_eq!(t.end_reason, EndReason::Error);
    }

    /// Replies `ls` once, then finds its context full.
    struct FillsUp(u32);

    impl Policy for FillsUp {
        fn act(&mut self, _: &[ChatMessage]) -> Result<crate::agent::PolicyReply, PolicyError> {
            self.0 += 1;
            if self.0 > 1 {
                return Err(PolicyError::ContextExhausted {
                    used: 2129,
                    window: 2048,
                });
            }
            Ok(crate::agent::PolicyReply {
                text: "<command>ls</command>".into(),
                usage: TokenUsage::default(),
                tool_calls: Vec::new(),
            })
        }
    }

    #[test]
    fn a_full_context_ends_the_episode_as_context_exhausted_not_an_error() {
        let t = run_episode(
            "task",
            &mut FillsUp(0),
            &mut Recorder::default(),
            &EpisodeConfig::default(),
            &mut NoObserver,
        );
        assert_eq!((t.end_reason, t.turns()), (EndReason::ContextExhausted, 1));
        assert!(t.end_reason.is_scored() && t.end_reason.can_verify());
        let why = t.error.as_deref().unwrap_or("");
        assert!(
            why.contains("context full at turn 2") && why.contains("2048"),
            "{why}"
        );
    }

    #[test]
    fn only_infrastructure_errors_go_unscored() {
        use EndReason::*;
        for e in [Done, MaxTurns, Timeout, ShellDied, ResourceLimit] {
            assert!(e.is_scored(), "{e:?}");
        }
        assert!(!Error.is_scored() && !Interrupted.is_scored());
        assert!(!ShellDied.can_verify() && !ResourceLimit.can_verify() && !Error.can_verify());
        assert!(!Interrupted.can_verify());
        for e in [
            Done,
            MaxTurns,
            ContextExhausted,
            Timeout,
            ShellDied,
            ResourceLimit,
            Error,
            Interrupted,
        ] {
            assert_eq!(
                serde_json::to_value(e).unwrap(),
                serde_json::json!(e.as_str())
            );
        }
    }

    /// Runs commands by name: `fail` exits 3 with output `boom`; every
    /// command it ran is kept.
    #[derive(Default)]
    struct Recorder(Vec<String>);

    impl Terminal for Recorder {
        fn exec(&mut self, command: &str, _: Duration) -> Result<ExecResult, TerminalError> {
            self.0.push(command.to_string());
            let failed = command == "fail";
            Ok(ExecResult {
                output: if failed { "boom".into() } else { "ok".into() },
                exit_code: Some(if failed { 3 } else { 0 }),
                timed_out: false,
                truncated: false,
                duration: Duration::ZERO,
            })
        }
    }

    /// Play `replies` (raw model text) under `protocol`: the trajectory and
    /// the commands that ran.
    fn play(protocol: &Protocol, replies: &[&str]) -> (Trajectory, Vec<String>) {
        let config = EpisodeConfig::default().with_protocol(protocol.clone());
        let mut term = Recorder::default();
        let mut episode = EpisodeStepper::start("task", &config, &mut NoObserver);
        for reply in replies {
            if episode.is_done() {
                break;
            }
            episode.step(
                reply,
                TokenUsage::default(),
                0.0,
                &mut term,
                &mut NoObserver,
            );
        }
        (episode.finish(), term.0)
    }

    #[test]
    fn done_with_a_command_under_each_profile() {
        let replies = [
            "<command>touch x</command><action>done</action>",
            "<command>ls</command>",
        ];
        let (t, ran) = play(&Protocol::endless(), &replies);
        assert_eq!(ran, vec!["touch x"]);
        assert_eq!((t.end_reason, t.turns()), (EndReason::Done, 1));
        assert_eq!(t.steps[0].kind, StepKind::Command);
        // the observation of the command is still in the conversation
        assert!(t
            .messages
            .last()
            .is_some_and(|m| m.content.contains("(exit_code=0)")));
        let (t, ran) = play(&Protocol::reference(), &replies);
        assert!(ran.is_empty());
        assert_eq!((t.end_reason, t.turns()), (EndReason::Done, 1));
        assert_eq!(t.steps[0].kind, StepKind::Done);
    }

    #[test]
    fn two_commands_under_each_profile() {
        let replies = [
            "<command>echo a</command><command>echo b</command>",
            "<action>done</action>",
        ];
        for (protocol, expect) in [
            (Protocol::endless(), "echo b"),
            (Protocol::reference(), "echo b"),
            (
                Protocol::reference().with_command_tag(protocol::CommandTag::First),
                "echo a",
            ),
        ] {
            let (t, ran) = play(&protocol, &replies);
            assert_eq!(ran, vec![expect], "{}", protocol.describe());
            assert_eq!(t.end_reason, EndReason::Done);
        }
    }

    #[test]
    fn a_failing_command_and_a_malformed_reply_under_each_profile() {
        let replies = [
            "<command>fail</command>",
            "what now?",
            "<action>done</action>",
        ];
        let (t, _) = play(&Protocol::endless(), &replies);
        assert_eq!(t.messages[0].content, protocol::SYSTEM_PROMPT);
        assert_eq!(
            t.messages[3].content,
            "Command failed. Output: boom\n\n(exit_code=3)"
        );
        assert_eq!(t.messages[5].content, protocol::CORRECTIVE_MESSAGE);
        assert_eq!(t.steps[0].exit_code, Some(3));
        let (t, _) = play(&Protocol::reference(), &replies);
        assert_eq!(
            t.messages[3].content,
            "Command failed. Output: boom\n\n(exit_code=1)"
        );
        assert_eq!(
            t.messages[5].content,
            protocol::REFERENCE_CORRECTIVE_MESSAGE
        );
        // the step keeps the real code for reports
        assert_eq!(t.steps[0].exit_code, Some(3));
        assert_eq!(t.end_reason, EndReason::Done);
    }

    /// A terminal a human takes over before the agent's second command:
    /// they run `fix` (exit 0) and `oops` (exit 2) and hold it 5 s.
    #[derive(Default)]
    struct TakenOver {
        execs: u32,
        human: Option<crate::agent::HumanTurn>,
    }

    impl Terminal for TakenOver {
        fn exec(&mut self, _: &str, _: Duration) -> Result<ExecResult, TerminalError> {
            self.execs += 1;
            if self.execs == 2 {
                let ran = |command: &str, code| crate::agent::HumanCommand {
                    command: command.into(),
                    result: Ok(ExecResult {
                        output: format!("{command} ran"),
                        exit_code: Some(code),
                        timed_out: false,
                        truncated: false,
                        duration: Duration::ZERO,
                    }),
                    secs: 0.5,
                };
                self.human = Some(crate::agent::HumanTurn {
                    taken_at: chrono::Utc::now(),
                    taken: Instant::now(),
                    held_secs: 5.0,
                    commands: vec![ran("fix", 0), ran("oops", 2)],
                });
            }
            Ok(ExecResult {
                output: "ok".into(),
                exit_code: Some(0),
                timed_out: false,
                truncated: false,
                duration: Duration::ZERO,
            })
        }
        fn take_human(&mut self) -> Option<crate::agent::HumanTurn> {
            self.human.take()
        }
    }

    #[test]
    fn a_humans_commands_become_human_steps_and_mark_the_takeover() {
        let mut policy = ScriptedPolicy::new(vec!["ls".into(), "cat a".into()]);
        let mut term = TakenOver::default();
        let mut seen = Vec::new();
        struct Seen<'a>(&'a mut Vec<StepKind>);
        impl EpisodeObserver for Seen<'_> {
            fn on_step(&mut self, step: &Step) {
                self.0.push(step.kind);
            }
        }
        let t = run_episode(
            "task",
            &mut policy,
            &mut term,
            &EpisodeConfig::default(),
            &mut Seen(&mut seen),
        );
        use StepKind::*;
        let kinds: Vec<StepKind> = t.steps.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, [Command, Human, Human, Command, Done]);
        assert_eq!(seen, kinds, "the observer sees the human steps too");
        // The human's commands are no turns of the agent's.
        assert_eq!(t.turns(), 3);
        let (fix, oops) = (&t.steps[1], &t.steps[2]);
        assert_eq!(fix.command.as_deref(), Some("fix"));
        assert_eq!((fix.turn, fix.exit_code), (2, Some(0)));
        assert_eq!(
            (oops.output.as_str(), oops.exit_code),
            ("oops ran", Some(2))
        );
        assert!(fix.reply.is_empty());
        // Nor is their output in the conversation: the agent saw only its own.
        assert!(!t.messages.iter().any(|m| m.content.contains("oops ran")));
        let to = t.takeover.clone().unwrap();
        assert_eq!((to.turn, to.step, to.human_steps), (2, 1, 2));
        assert_eq!(to.held_secs, 5.0);
        assert!(to.at.ends_with('Z'), "{}", to.at);
        // The time the human held the session is not the agent's.
        assert!(t.steps[3].exec_secs < 1.0);
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["steps"][1]["kind"], "human");
        assert_eq!(v["takeover"]["human_steps"], 2);
        // A trajectory nobody took over says nothing about take-overs.
        let plain = end_of(|| TerminalError::infra("x"));
        assert!(plain.takeover.is_none());
        assert!(serde_json::to_value(&plain)
            .unwrap()
            .get("takeover")
            .is_none());
    }
}
