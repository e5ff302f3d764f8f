//! The rollout engine on the real sandbox: [`Terminal`] for
//! [`Session`](crate::sandbox::Session) and a [`SandboxProvider`] over any
//! [`Backend`](crate::sandbox::Backend).

use std::sync::Arc;
use std::time::Duration;

use super::episode_io::{LiveStream, SandboxProvider, StartOptions, Verification};
use super::result::TestOutcome;
use super::terminal::{Fault, Terminal, TerminalError};
use crate::sandbox::{Backend, ExecResult, SandboxError, Session, SessionOptions};
use crate::task::Task;
use crate::verify::{verify, TestSet};

impl Terminal for Session {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        Session::exec(self, command, timeout).map_err(TerminalError::from)
    }

    fn human_line(&mut self, command: &str) {
        self.record_human_line(command);
    }
}

impl From<SandboxError> for TerminalError {
    fn from(e: SandboxError) -> Self {
        TerminalError {
            fault: fault_of(&e),
            message: e.to_string(),
        }
    }
}

/// Whose doing a sandbox error during an episode was: the shell ending or
/// hanging is the agent's (it ran `exit`, `kill -9 $$`, a trapped busy loop,
/// or filled its memory until the shell was killed); the session's wall
/// clock is a limit the agent used up; anything else is infrastructure,
/// a sandbox killed from outside ([`SandboxError::SandboxKilled`]) too.
fn fault_of(e: &SandboxError) -> Fault {
    match e {
        SandboxError::SessionEnded { .. } | SandboxError::Unresponsive => Fault::ShellDied,
        SandboxError::WallClock(_) | SandboxError::LimitReached { .. } => Fault::ResourceLimit,
        _ => Fault::Infra,
    }
}

/// Starts sandbox sessions from a [`Backend`] and verifies with the task's
/// final tests.
#[derive(Clone)]
pub struct BackendProvider {
    backend: Arc<dyn Backend>,
    /// Options of every session (its `record` is set per episode).
    pub session: SessionOptions,
}

impl BackendProvider {
    /// A provider over `backend` with default session options.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            session: SessionOptions::default(),
        }
    }

    /// The backend sessions start on.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }
}

impl SandboxProvider for BackendProvider {
    type Term = Session;

    fn prepare(&self, task: &Task) -> Result<(), TerminalError> {
        self.backend.prepare(task).map(|_| ()).map_err(|e| {
            TerminalError::infra(format!("cannot build the image of {}: {e}", task.id()))
        })
    }

    fn start(&self, task: &Task, options: &StartOptions) -> Result<Session, TerminalError> {
        let image = self.backend.prepare(task).map_err(|e| {
            TerminalError::infra(format!("cannot build the image of {}: {e}", task.id()))
        })?;
        let mut opts = self.session.clone();
        opts.record = options.record.clone();
        if task.meta.agent.timeout_sec.is_finite() && task.meta.agent.timeout_sec > 0.0 {
            // Leave room for the final tests after the agent's time.
            let limit =
                task.meta.agent.timeout_sec + task.meta.verifier.timeout_sec.max(0.0) + 60.0;
            opts.wall_clock = opts.wall_clock.max(Duration::from_secs_f64(limit));
        }
        let mut session = self.backend.start(&image, &opts).map_err(|e| {
            TerminalError::infra(format!(
                "cannot start a {} session: {e}",
                self.backend.name()
            ))
        })?;
        // A sealed environment's verifier warms up while the agent works.
        crate::verify::prestart(&mut session, task);
        Ok(session)
    }

    fn verify(&self, term: &mut Session, task: &Task) -> Result<Verification, TerminalError> {
        let report = verify(term, task, TestSet::Final)?;
        let mut tests: Vec<TestOutcome> = report
            .tests
            .iter()
            .map(|t| TestOutcome {
                name: t.name.clone(),
                passed: t.passed,
                message: (!t.message.is_empty()).then(|| t.message.clone()),
            })
            .collect();
        if tests.is_empty() {
            // A custom verifier script reports one verdict, not test cases.
            tests.push(TestOutcome {
                name: "verifier".into(),
                passed: report.passed,
                message: (!report.passed).then(|| report.output.chars().take(2000).collect()),
            });
        }
        Ok(Verification {
            tests,
            junit_xml: (!report.junit_xml.is_empty()).then(|| report.junit_xml.clone()),
            verifier: Some(report.verifier.describe()),
            limits: term.info().limits.clone(),
            output: report.output,
        })
    }

    fn stream(&self, term: &Session) -> Option<LiveStream> {
        Some(term.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_or_hung_shell_is_the_agents_fault() {
        let ended = SandboxError::SessionEnded {
            reason: Some("the PTY closed".into()),
            output: String::new(),
        };
        assert_eq!(TerminalError::from(ended).fault, Fault::ShellDied);
        assert_eq!(fault_of(&SandboxError::Unresponsive), Fault::ShellDied);
        assert_eq!(
            fault_of(&SandboxError::WallClock(Duration::from_secs(1))),
            Fault::ResourceLimit
        );
        let oom = SandboxError::LimitReached {
            limit: "memory limit".into(),
            output: String::new(),
        };
        assert_eq!(fault_of(&oom), Fault::ResourceLimit);
    }

    #[test]
    fn infrastructure_errors_are_not() {
        for e in [
            SandboxError::Start("no bwrap".into()),
            SandboxError::Verify("no verifier directory".into()),
            SandboxError::UnknownBackend("x".into()),
            SandboxError::SandboxKilled {
                signal: libc::SIGKILL,
                output: String::new(),
            },
        ] {
            assert_eq!(fault_of(&e), Fault::Infra, "{e}");
        }
    }
}
