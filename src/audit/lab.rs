//! What every sandbox check does: start a session from the task's image
//! (offline, or with network), play an episode of scripted commands (the
//! oracle, a shortcut, nothing), run the final tests, and keep to a time
//! budget.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::agent::policy::{oracle_command, ScriptedPolicy};
use crate::agent::{run_episode, EpisodeConfig, NoObserver, Trajectory};
use crate::sandbox::{Backend, Image, SandboxError, Session, SessionOptions};
use crate::task::Task;
use crate::verify::{verify, TestReport, TestSet};

/// The longest one scripted command may run (shortcuts are quick; the
/// oracle gets the task's own agent timeout).
const SHORTCUT_TIMEOUT: Duration = Duration::from_secs(60);

/// A task's built image and how its sessions start.
pub(crate) struct Lab<'a> {
    /// The backend the image was built with.
    pub backend: &'a dyn Backend,
    /// The task audited.
    pub task: &'a Task,
    /// Its image.
    pub image: Image,
    /// Options of every session.
    pub opts: SessionOptions,
}

/// A time budget: checks stop at the first step that starts after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    start: Instant,
    budget: Duration,
}

impl Deadline {
    /// A budget of `budget` from now.
    pub fn new(budget: Duration) -> Deadline {
        Deadline {
            start: Instant::now(),
            budget,
        }
    }

    /// Whether the budget is spent.
    pub fn passed(&self) -> bool {
        self.start.elapsed() >= self.budget
    }
}

/// An episode played and the final tests' report after it.
pub(crate) struct Played {
    /// The session, as the episode left it (and the tests after it).
    pub session: Session,
    /// What the commands did.
    pub trajectory: Trajectory,
    /// The final tests after it.
    pub report: TestReport,
}

impl<'a> Lab<'a> {
    /// The lab of `task` built as `image` on `backend`; sessions live long
    /// enough for `checks` budgets of `budget` each.
    pub fn new(backend: &'a dyn Backend, task: &'a Task, image: Image, budget: Duration) -> Self {
        let agent = task.meta.agent.timeout_sec.clamp(1.0, 86_400.0);
        let verifier = task.meta.verifier.timeout_sec.clamp(1.0, 86_400.0);
        let wall = Duration::from_secs_f64(agent + verifier * 4.0 + 120.0) + budget * 4;
        Lab {
            backend,
            task,
            image,
            opts: SessionOptions {
                wall_clock: wall,
                ..SessionOptions::default()
            },
        }
    }

    /// A fresh session from the initial state, offline unless the task
    /// asks for network.
    pub fn fresh(&self) -> Result<Session, SandboxError> {
        self.backend.start(&self.image, &self.opts)
    }

    /// A fresh session with network access on or off, whatever the task
    /// asks for (same image: the network is a property of the session).
    pub fn fresh_with_network(&self, network: bool) -> Result<Session, SandboxError> {
        let image = Image {
            network,
            ..self.image.clone()
        };
        self.backend.start(&image, &self.opts)
    }

    /// The final tests on `session`'s current state.
    pub fn verify(&self, session: &mut Session) -> Result<TestReport, SandboxError> {
        verify(session, self.task, TestSet::Final)
    }

    /// Final tests on the state of `session` with tests rewritten as
    /// `task` has them.
    pub fn verify_as(
        &self,
        session: &mut Session,
        task: &Task,
    ) -> Result<TestReport, SandboxError> {
        verify(session, task, TestSet::Final)
    }

    /// Play `commands` as an episode on `session` (each command limited to
    /// `timeout`), then run the final tests.
    pub fn play_on(
        &self,
        mut session: Session,
        commands: Vec<String>,
        timeout: Duration,
    ) -> Result<Played, SandboxError> {
        let mut policy = ScriptedPolicy::new(commands.clone());
        let mut config = EpisodeConfig::for_task(self.task, None, timeout);
        config.max_turns = (commands.len() as u32 + 1).max(config.max_turns);
        let trajectory = run_episode(
            &self.task.instruction,
            &mut policy,
            &mut session,
            &config,
            &mut NoObserver,
        );
        if !trajectory.end_reason.can_verify() {
            return Err(SandboxError::Verify(format!(
                "the episode ended with {}: {}",
                trajectory.end_reason.as_str(),
                trajectory.error.as_deref().unwrap_or("")
            )));
        }
        let report = self.verify(&mut session)?;
        Ok(Played {
            session,
            trajectory,
            report,
        })
    }

    /// Play `commands` in a fresh session (see [`Lab::play_on`]).
    pub fn play(&self, commands: Vec<String>) -> Result<Played, SandboxError> {
        self.play_on(self.fresh()?, commands, SHORTCUT_TIMEOUT)
    }

    /// The oracle's episode on `session` (`solve.sh` in the agent's shell,
    /// as the `oracle` policy plays it), then the final tests. `None`: the
    /// task has no oracle.
    pub fn oracle_on(&self, session: Session) -> Option<Result<Played, SandboxError>> {
        let script = self.task.solve_script()?;
        let timeout =
            Duration::from_secs_f64(self.task.meta.agent.timeout_sec.clamp(1.0, 86_400.0));
        Some(self.play_on(session, vec![oracle_command(script)], timeout))
    }

    /// The oracle in a fresh session (see [`Lab::oracle_on`]).
    pub fn oracle(&self) -> Option<Result<Played, SandboxError>> {
        self.task.solve_script()?;
        match self.fresh() {
            Ok(s) => self.oracle_on(s),
            Err(e) => Some(Err(e)),
        }
    }
}

/// Run `script` with `/bin/sh` as the sandbox's root beside the shell (in
/// `/`); an exit status other than 0 is an error with its output.
pub(crate) fn root_sh(session: &mut Session, script: &str) -> Result<String, SandboxError> {
    let argv = vec![
        "/usr/bin/env".to_string(),
        "-C".into(),
        "/".into(),
        "/bin/sh".into(),
        "-c".into(),
        script.to_string(),
    ];
    let out = session.run_as_root(&argv, Duration::from_secs(60))?;
    if out.code != Some(0) {
        return Err(SandboxError::Verify(format!(
            "`{}` failed: {}",
            cut(script, 120),
            cut(out.output.trim(), 300)
        )));
    }
    Ok(out.output)
}

/// The verdicts of a report, by test name (a verifier script's single
/// `verifier` verdict when it reports no cases).
pub(crate) fn verdicts(report: &TestReport) -> BTreeMap<String, bool> {
    report
        .verdicts()
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect()
}

/// The names of the tests that passed (or failed, `passed = false`).
pub(crate) fn names(report: &TestReport, passed: bool) -> Vec<String> {
    report
        .verdicts()
        .into_iter()
        .filter(|(_, p)| *p == passed)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// The failing tests of a report with their first message line, or the
/// end of the output when it has no cases: evidence.
pub(crate) fn failures(report: &TestReport) -> String {
    let lines: Vec<String> = report
        .tests
        .iter()
        .filter(|t| !t.passed)
        .map(|t| {
            let first = t
                .message
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            format!("FAILED {}: {}", t.name, cut(first, 200))
        })
        .collect();
    if lines.is_empty() && !report.passed {
        return format!(
            "no test results; output ends with:\n{}",
            tail(&report.output, 600)
        );
    }
    lines.join("\n")
}

/// The transcript of an episode: each command, its exit status and the
/// start of its output.
pub(crate) fn transcript(t: &Trajectory) -> String {
    let mut out = String::new();
    for s in &t.steps {
        let Some(cmd) = &s.command else { continue };
        out.push_str(&format!("$ {cmd}\n"));
        let output = s.output.trim_end();
        if !output.is_empty() {
            out.push_str(&cut(output, 400));
            out.push('\n');
        }
        match s.exit_code {
            Some(0) => {}
            Some(c) => out.push_str(&format!("[exit {c}]\n")),
            None => out.push_str("[did not finish]\n"),
        }
    }
    out
}

/// `s` cut to `n` characters, with an ellipsis when cut.
pub(crate) fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n).collect();
    out.push('…');
    out
}

/// The last `n` characters of `s`.
pub(crate) fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_and_tail_count_characters() {
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(cut("hi", 2), "hi");
        assert_eq!(tail("héllo", 3), "llo");
    }

    #[test]
    fn a_deadline_passes() {
        assert!(Deadline::new(Duration::ZERO).passed());
        assert!(!Deadline::new(Duration::from_secs(60)).passed());
    }
}
