//! The record of one finished episode: what the agent did and what the
//! final tests said. This is what `run --json` prints and what evaluation reads.

use serde::{Deserialize, Serialize};

use super::episode::{EndReason, Step, Takeover, Trajectory};
use super::failure::{classify_failure, failure_labels, FailureMode};
use super::terminal::TerminalError;
use crate::llm::TokenUsage;
use crate::task::Task;

/// One final-state test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestOutcome {
    /// The test's name, as the runner reports it.
    pub name: String,
    /// Whether the test passed.
    pub passed: bool,
    /// The failure message, for a failing test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where an episode's time went, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Starting the sandbox: a fresh environment with its shell ready.
    pub sandbox_start_secs: f64,
    /// The whole agent loop (policy plus commands plus overhead).
    pub agent_secs: f64,
    /// Waiting for the policy's replies (sum over turns).
    pub policy_secs: f64,
    /// Running the agent's commands in the sandbox (sum over turns).
    pub exec_secs: f64,
    /// Running the final tests.
    pub verify_secs: f64,
    /// The whole episode, sandbox start to verification.
    pub total_secs: f64,
}

/// The episode a fork started from, and where (`endless run --fork`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOf {
    /// The parent's run.
    pub run: String,
    /// The parent's task.
    pub task: String,
    /// The parent's sample.
    pub sample: u32,
    /// The parent's policy.
    pub policy: String,
    /// The step (0-based) the fork took over at: the parent's commands
    /// before it were re-run first.
    pub at_step: u32,
    /// How many commands were re-run (this episode's first steps).
    pub replayed: u32,
}

/// Who ran what: identifies an episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeId {
    /// The task's id.
    pub task: String,
    /// The task's category.
    pub category: String,
    /// The task's complexity level, 1 to 6, when it has one.
    pub complexity: Option<u8>,
    /// Which sample of the task this is, from 0.
    pub sample: u32,
    /// The policy spec that ran it (e.g. `openai:MODEL@URL`).
    pub policy: String,
}

impl EpisodeId {
    /// The id of sample `sample` of `task` under `policy`.
    pub fn new(task: &Task, sample: u32, policy: impl Into<String>) -> Self {
        Self {
            task: task.id().to_string(),
            category: task.meta.task.category.clone(),
            complexity: task.meta.task.complexity,
            sample,
            policy: policy.into(),
        }
    }
}

/// A finished episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeResult {
    /// The task's id.
    pub task: String,
    /// The task's category.
    pub category: String,
    /// The task's complexity level, 1 to 6, when it has one.
    pub complexity: Option<u8>,
    /// Which sample of the task this is, from 0.
    pub sample: u32,
    /// The policy spec that ran it (e.g. `openai:MODEL@URL`).
    pub policy: String,
    /// Every final test passed (and the episode did not error, nor did the
    /// agent's shell die).
    pub passed: bool,
    /// Fraction of final tests that passed (the optional partial reward).
    pub reward: f64,
    /// Turns the agent took.
    pub turns: u32,
    /// Why the agent loop stopped.
    pub end_reason: EndReason,
    /// Why it failed (the primary label); `None` when it passed.
    pub failure_mode: Option<FailureMode>,
    /// Every failure label that applies (they overlap, as in the paper: a
    /// loop can also exhaust its turns); the primary is among them; empty
    /// when it passed. Absent in episodes recorded before labels existed:
    /// see [`EpisodeResult::labels`].
    #[serde(default)]
    pub failure_labels: Vec<FailureMode>,
    /// Index into `steps` of the earliest step where it went wrong.
    pub earliest_failing_step: Option<u32>,
    /// The policy, model or sandbox error, or how the agent's shell died,
    /// when there was one.
    pub error: Option<String>,
    /// The final tests' outcomes; empty when they could not be run.
    pub tests: Vec<TestOutcome>,
    /// Every turn: the reply, the command and its observation.
    pub steps: Vec<Step>,
    /// Tokens the policy used over the episode.
    pub tokens: TokenUsage,
    /// Where the episode's time went.
    pub timings: Timings,
    /// How the final tests ran: `warm` (forked from the pre-warmed
    /// verifier), `cold`, or `cold (why)`; absent when they did not run or
    /// the episode was recorded before this existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<String>,
    /// What the sandbox's resource limits left out (rlimits alone: memory
    /// per process, no CPU limit); absent when all were enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// Set when a human took the session over (the TUI's ctrl-t): the
    /// episode is not the policy's own, and evaluations leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_over: Option<Takeover>,
    /// Set for a fork of another episode: its parent and the step it took
    /// over at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOf>,
}

impl EpisodeResult {
    /// Combine the agent's trajectory with the verification outcome
    /// (`Err` when the tests could not be run: an infrastructure error, or
    /// a failure of the agent when its shell died under the verifier).
    pub fn new(
        id: EpisodeId,
        trajectory: &Trajectory,
        verification: Result<Vec<TestOutcome>, TerminalError>,
        mut timings: Timings,
    ) -> Self {
        timings.agent_secs = trajectory.agent_secs;
        timings.policy_secs = trajectory.policy_secs;
        timings.exec_secs = trajectory.exec_secs;
        let mut end_reason = trajectory.end_reason;
        let mut error = trajectory.error.clone();
        let tests = match verification {
            Ok(tests) => tests,
            Err(e) => {
                if error.is_none() {
                    error = Some(format!("verification failed: {e}"));
                }
                end_reason = EndReason::from_fault(e.fault);
                Vec::new()
            }
        };
        let n_passed = tests.iter().filter(|t| t.passed).count();
        let reward = if tests.is_empty() {
            0.0
        } else {
            n_passed as f64 / tests.len() as f64
        };
        let passed = end_reason.can_verify() && !tests.is_empty() && n_passed == tests.len();
        let (failure_mode, earliest_failing_step) = if passed {
            (None, None)
        } else {
            let (mode, step) = classify_failure(&trajectory.steps, end_reason);
            (Some(mode), step)
        };
        let failure_labels = if passed {
            Vec::new()
        } else {
            failure_labels(&trajectory.steps, end_reason)
        };
        Self {
            task: id.task,
            category: id.category,
            complexity: id.complexity,
            sample: id.sample,
            policy: id.policy,
            passed,
            reward,
            turns: trajectory.turns(),
            end_reason,
            failure_mode,
            failure_labels,
            earliest_failing_step,
            error,
            tests,
            steps: trajectory.steps.clone(),
            tokens: trajectory.tokens,
            timings,
            verifier: None,
            limits: None,
            taken_over: trajectory.takeover.clone(),
            forked_from: None,
        }
    }

    /// A result for an episode that could not even start (policy or sandbox
    /// failed before the first turn): an infrastructure error.
    pub fn failed_to_start(id: EpisodeId, error: String, timings: Timings) -> Self {
        Self {
            task: id.task,
            category: id.category,
            complexity: id.complexity,
            sample: id.sample,
            policy: id.policy,
            passed: false,
            reward: 0.0,
            turns: 0,
            end_reason: EndReason::Error,
            failure_mode: Some(FailureMode::Error),
            failure_labels: vec![FailureMode::Error],
            earliest_failing_step: None,
            error: Some(error),
            tests: Vec::new(),
            steps: Vec::new(),
            tokens: TokenUsage::default(),
            timings,
            verifier: None,
            limits: None,
            taken_over: None,
            forked_from: None,
        }
    }
}

impl EpisodeResult {
    /// The failure labels: the recorded ones, or, for an episode recorded
    /// before labels existed, derived from its steps and end reason (with
    /// its recorded primary mode among them). Empty for a pass.
    pub fn labels(&self) -> Vec<FailureMode> {
        if self.passed {
            return Vec::new();
        }
        if !self.failure_labels.is_empty() {
            return self.failure_labels.clone();
        }
        let mut labels = failure_labels(&self.steps, self.end_reason);
        if let Some(primary) = self.failure_mode {
            if !labels.contains(&primary) {
                labels.push(primary);
                labels.sort();
            }
        }
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{EndReason, Step, StepKind};

    fn id() -> EpisodeId {
        EpisodeId {
            task: "t".into(),
            category: "c".into(),
            complexity: None,
            sample: 0,
            policy: "p".into(),
        }
    }

    fn trajectory(end_reason: EndReason) -> Trajectory {
        Trajectory {
            messages: Vec::new(),
            steps: vec![Step::new(1, StepKind::Command)],
            end_reason,
            error: None,
            tokens: TokenUsage::default(),
            policy_secs: 0.0,
            exec_secs: 0.0,
            agent_secs: 0.0,
            takeover: None,
        }
    }

    fn passing() -> Vec<TestOutcome> {
        vec![TestOutcome {
            name: "t".into(),
            passed: true,
            message: None,
        }]
    }

    #[test]
    fn a_dead_shell_is_a_failure_never_a_pass() {
        let r = EpisodeResult::new(
            id(),
            &trajectory(EndReason::ShellDied),
            Ok(passing()),
            Timings::default(),
        );
        assert!(!r.passed);
        assert_eq!(r.failure_mode, Some(FailureMode::ShellDied));
        let r = EpisodeResult::new(
            id(),
            &trajectory(EndReason::ResourceLimit),
            Ok(Vec::new()),
            Timings::default(),
        );
        assert_eq!(
            (r.passed, r.reward, r.failure_mode),
            (false, 0.0, Some(FailureMode::ResourceLimit))
        );
    }

    #[test]
    fn a_verifier_error_is_classified_by_its_fault() {
        let died = EpisodeResult::new(
            id(),
            &trajectory(EndReason::Done),
            Err(TerminalError::shell_died("the PTY closed")),
            Timings::default(),
        );
        assert_eq!(died.end_reason, EndReason::ShellDied);
        assert!(died
            .error
            .unwrap_or_default()
            .contains("verification failed"));
        let infra = EpisodeResult::new(
            id(),
            &trajectory(EndReason::Done),
            Err(TerminalError::infra("no verifier directory")),
            Timings::default(),
        );
        assert_eq!(
            (infra.end_reason, infra.failure_mode),
            (EndReason::Error, Some(FailureMode::Error))
        );
        let ok = EpisodeResult::new(
            id(),
            &trajectory(EndReason::Done),
            Ok(passing()),
            Timings::default(),
        );
        assert!(ok.passed && ok.failure_mode.is_none());
        assert!(ok.failure_labels.is_empty() && ok.labels().is_empty());
    }

    #[test]
    fn labels_are_recorded_in_json_and_derived_for_old_records() {
        let mut t = trajectory(EndReason::MaxTurns);
        t.steps = (0..3)
            .map(|i| Step {
                command: Some("ls".into()),
                exit_code: Some(0),
                ..Step::new(i, StepKind::Command)
            })
            .collect();
        let r = EpisodeResult::new(id(), &t, Ok(Vec::new()), Timings::default());
        assert_eq!(r.failure_mode, Some(FailureMode::Loop));
        assert_eq!(
            r.failure_labels,
            vec![FailureMode::Loop, FailureMode::TurnExhaustion]
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["failure_mode"], "loop");
        assert_eq!(
            v["failure_labels"],
            serde_json::json!(["loop", "turn_exhaustion"])
        );
        // A record without labels (written before they existed) still
        // reads, and its labels are derived.
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("failure_labels");
        let back: EpisodeResult = serde_json::from_value(old).unwrap();
        assert!(back.failure_labels.is_empty());
        assert_eq!(back.labels(), r.failure_labels);
    }
}
