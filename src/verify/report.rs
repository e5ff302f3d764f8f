//! What a verification run reports: each test's outcome and the run's.

use std::time::Duration;

use crate::sandbox::VerifierPath;

/// One test's outcome.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TestCase {
    /// `module::test` (or `module.Class::test`).
    pub name: String,
    /// It passed (or was skipped).
    pub passed: bool,
    /// Failure message and traceback (empty when it passed).
    pub message: String,
}

/// The outcome of a verification run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TestReport {
    /// Per-test outcomes, in run order.
    pub tests: Vec<TestCase>,
    /// All tests passed and at least one ran.
    pub passed: bool,
    /// The raw JUnit XML (empty for custom verifier scripts without one).
    pub junit_xml: String,
    /// The test runner's console output.
    pub output: String,
    /// Wall-clock time of the verification, including pytest's start-up.
    pub duration: Duration,
    /// How the verifier ran (pre-warmed or cold, and why cold).
    pub verifier: VerifierPath,
    /// The test runner's exit code (`None`: killed, timed out, or none ran).
    #[serde(skip)]
    pub exit_code: Option<i32>,
}

impl TestReport {
    /// Fraction of tests that passed (0 when none ran): the partial reward.
    pub fn fraction_passed(&self) -> f64 {
        if self.tests.is_empty() {
            return 0.0;
        }
        self.tests.iter().filter(|t| t.passed).count() as f64 / self.tests.len() as f64
    }

    /// The verdicts an episode's verification reports, `(name, passed)`:
    /// one per test case, or a single `verifier` verdict when the runner
    /// reported no cases (a custom verifier script), as the agent's
    /// sandbox provider does.
    pub fn verdicts(&self) -> Vec<(&str, bool)> {
        if self.tests.is_empty() {
            return vec![("verifier", self.passed)];
        }
        self.tests
            .iter()
            .map(|t| (t.name.as_str(), t.passed))
            .collect()
    }
}
