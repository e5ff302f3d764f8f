//! The record of one finished episode: what the agent did and what the
//! final tests said. This is what `run --json` prints and what evaluation reads.

use serde::{Deserialize, Serialize};

use super::episode::{EndReason, Step, Trajectory};
use crate::eval::{classify_failure, FailureMode};
use crate::llm::TokenUsage;
use crate::task::Task;

/// One final-state test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestOutcome {
    pub name: String,
    pub passed: bool,
    /// The failure message, for a failing test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where an episode's time went, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub sandbox_start_secs: f64,
    /// The whole agent loop (policy plus commands plus overhead).
    pub agent_secs: f64,
    pub policy_secs: f64,
    pub exec_secs: f64,
    pub verify_secs: f64,
    pub total_secs: f64,
}

/// Who ran what: identifies an episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeId {
    pub task: String,
    pub category: String,
    pub complexity: Option<u8>,
    pub sample: u32,
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
    pub task: String,
    pub category: String,
    pub complexity: Option<u8>,
    pub sample: u32,
    pub policy: String,
    /// Every final test passed (and the episode did not error).
    pub passed: bool,
    /// Fraction of final tests that passed (the optional partial reward).
    pub reward: f64,
    pub turns: u32,
    pub end_reason: EndReason,
    /// Why it failed; `None` when it passed.
    pub failure_mode: Option<FailureMode>,
    /// Index into `steps` of the earliest step where it went wrong.
    pub earliest_failing_step: Option<u32>,
    /// The policy, model or sandbox error, when there was one.
    pub error: Option<String>,
    pub tests: Vec<TestOutcome>,
    pub steps: Vec<Step>,
    pub tokens: TokenUsage,
    pub timings: Timings,
}

impl EpisodeResult {
    /// Combine the agent's trajectory with the verification outcome
    /// (`Err` when the tests could not be run).
    pub fn new(
        id: EpisodeId,
        trajectory: &Trajectory,
        verification: Result<Vec<TestOutcome>, String>,
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
                end_reason = EndReason::Error;
                Vec::new()
            }
        };
        let n_passed = tests.iter().filter(|t| t.passed).count();
        let reward = if tests.is_empty() {
            0.0
        } else {
            n_passed as f64 / tests.len() as f64
        };
        let passed = end_reason != EndReason::Error && !tests.is_empty() && n_passed == tests.len();
        let (failure_mode, earliest_failing_step) = if passed {
            (None, None)
        } else {
            let (mode, step) = classify_failure(&trajectory.steps, end_reason);
            (Some(mode), step)
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
            earliest_failing_step,
            error,
            tests,
            steps: trajectory.steps.clone(),
            tokens: trajectory.tokens,
            timings,
        }
    }

    /// A result for an episode that could not even start (policy or sandbox
    /// failed before the first turn).
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
            earliest_failing_step: None,
            error: Some(error),
            tests: Vec::new(),
            steps: Vec::new(),
            tokens: TokenUsage::default(),
            timings,
        }
    }
}
