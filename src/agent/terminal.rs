//! The shell the episode loop talks to.

use std::time::{Duration, Instant};

use crate::sandbox::ExecResult;

/// Whose doing a terminal failure was. Decides whether the episode is an
/// infrastructure error (left out of the pass rate) or a failure of the
/// agent (counted, with reward 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Infrastructure the agent did not cause: the image could not be
    /// built, the sandbox could not start, the verifier could not run.
    Infra,
    /// The agent's shell ended (`exit`, `kill -9 $$`) or stopped answering
    /// even after an interrupt and a kill.
    ShellDied,
    /// The session ran out of a limit the agent exhausted (wall clock,
    /// memory, processes).
    ResourceLimit,
}

/// A shell failure that ends the episode (not a failing command: those are
/// ordinary [`ExecResult`]s with a non-zero exit code).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TerminalError {
    /// Whose doing it was.
    pub fault: Fault,
    /// What happened.
    pub message: String,
}

impl TerminalError {
    /// A failure of the infrastructure, not of the agent.
    pub fn infra(message: impl Into<String>) -> Self {
        Self {
            fault: Fault::Infra,
            message: message.into(),
        }
    }

    /// The agent's shell died or stopped answering.
    pub fn shell_died(message: impl Into<String>) -> Self {
        Self {
            fault: Fault::ShellDied,
            message: message.into(),
        }
    }

    /// The agent exhausted a limit of its session.
    pub fn resource_limit(message: impl Into<String>) -> Self {
        Self {
            fault: Fault::ResourceLimit,
            message: message.into(),
        }
    }
}

/// One command a human ran while holding the session (a take-over).
#[derive(Debug, Clone)]
pub struct HumanCommand {
    /// The command line as typed.
    pub command: String,
    /// What running it gave, or the shell failure it ran into.
    pub result: Result<ExecResult, TerminalError>,
    /// Seconds it took.
    pub secs: f64,
}

/// What a human did while holding the session, before the agent's command
/// ran: when they took it, for how long, and the commands they ran.
#[derive(Debug, Clone)]
pub struct HumanTurn {
    /// When the human took the session (wall clock).
    pub taken_at: chrono::DateTime<chrono::Utc>,
    /// The same moment on the monotonic clock (for seconds into the episode).
    pub taken: Instant,
    /// Seconds the human held the session (the agent's command waited).
    pub held_secs: f64,
    /// The commands, in the order they ran.
    pub commands: Vec<HumanCommand>,
}

/// Something that runs shell commands one at a time, keeping state between
/// them (working directory, environment, files).
pub trait Terminal {
    /// Run `command`, interrupting it after `timeout`.
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError>;

    /// What a human did in the session during the last [`exec`](Self::exec)
    /// (before the command ran), if a human held it; taken once. Terminals
    /// nobody can take over have nothing to report.
    fn take_human(&mut self) -> Option<HumanTurn> {
        None
    }

    /// A human typed `command` while holding the session; it runs next
    /// (through [`exec`](Self::exec)). Terminals that record what people
    /// see note it (a sandbox session's asciicast); others ignore it.
    fn human_line(&mut self, _command: &str) {}
}

impl<T: Terminal + ?Sized> Terminal for &mut T {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        (**self).exec(command, timeout)
    }
    fn take_human(&mut self) -> Option<HumanTurn> {
        (**self).take_human()
    }
    fn human_line(&mut self, command: &str) {
        (**self).human_line(command)
    }
}

impl<T: Terminal + ?Sized> Terminal for Box<T> {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        (**self).exec(command, timeout)
    }
    fn take_human(&mut self) -> Option<HumanTurn> {
        (**self).take_human()
    }
    fn human_line(&mut self, command: &str) {
        (**self).human_line(command)
    }
}
