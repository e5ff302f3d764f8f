//! What validating a task found, and the classes of its failures a curator
//! can act on (issue 31; `failure.rs` reads them from the problems).

use std::time::Duration;

use serde::Serialize;

use super::report::TestReport;
use crate::task::Baseline;

/// What validation found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Validation {
    /// The task validated.
    pub task_id: String,
    /// The image built (its hash), if it did.
    pub image: Option<String>,
    /// The initial tests pass on the built environment.
    pub initial_passes: bool,
    /// The final tests fail on the untouched environment.
    pub final_fails_initially: bool,
    /// `None` when the task has no oracle solution.
    pub oracle_passes: Option<bool>,
    /// Human-readable problems; empty when the task is valid.
    pub problems: Vec<String>,
    /// What the user should know though the task is valid: a base image
    /// substituted for the one the task asks for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The classes of the problems, for a curator (see
    /// [`FailureClass`]); empty when the task is valid.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failure_classes: Vec<FailureClass>,
    /// The initial tests' report.
    pub initial: Option<TestReport>,
    /// The final tests' report on the initial state.
    pub final_on_initial: Option<TestReport>,
    /// Which final tests pass on the initial state (from
    /// `final_on_initial`), to be stored in the bundle's
    /// `[provenance.baseline]` for the partial reward.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// The final tests' report after the oracle solution.
    pub oracle: Option<TestReport>,
    /// Wall-clock time of the whole validation.
    pub duration: Duration,
}

impl Validation {
    /// Whether the task passed every check.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One class of validation failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureClass {
    /// The build needed a network host it could not reach.
    BuildNetwork,
    /// The build asked for a package (Debian, PyPI) or image that does not exist.
    BuildPackageNotFound,
    /// The build failed otherwise.
    BuildOther,
    /// A test could not import a module.
    TestsMissingModule,
    /// A test could not find a file.
    TestsMissingFile,
    /// The oracle solution does not make the final tests pass.
    OracleFails,
    /// The final tests pass before anything was done.
    FinalPassesInitially,
    /// The initial tests fail, or the tests could not run, for another reason.
    TestsOther,
}

impl FailureClass {
    /// The class as `tasks validate` prints it and `--json` stores it.
    pub fn key(self) -> &'static str {
        match self {
            FailureClass::BuildNetwork => "build-network",
            FailureClass::BuildPackageNotFound => "build-package-not-found",
            FailureClass::BuildOther => "build-other",
            FailureClass::TestsMissingModule => "tests-missing-module",
            FailureClass::TestsMissingFile => "tests-missing-file",
            FailureClass::OracleFails => "oracle-fails",
            FailureClass::FinalPassesInitially => "final-passes-initially",
            FailureClass::TestsOther => "tests-other",
        }
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}
