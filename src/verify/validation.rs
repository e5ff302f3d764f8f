//! What validating a task found, the classes of its failures a curator
//! can act on (issue 31; `failure.rs` reads them from the problems), and
//! the first of them that stopped the task, with what it names (issue 52).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::report::TestReport;
use crate::task::Baseline;

/// How much of a failed oracle's output a [`Validation`] keeps.
pub const ORACLE_OUTPUT_CHARS: usize = 4000;

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
    /// The earliest problem that stopped the task, with its class and what
    /// it names; `None` when the task is valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocker: Option<Blocker>,
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
    /// The end of what the oracle's `solve.sh` printed (at most
    /// [`ORACLE_OUTPUT_CHARS`] characters), when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle_output: Option<String>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureClass {
    /// The build needed a network host it could not reach.
    BuildNetwork,
    /// The tests (their test script) or the oracle solution needed a
    /// network host they could not reach.
    TestsNetwork,
    /// The image is served by a stand-in that differs from the image the
    /// task was written for in what failed (a package or version missing
    /// from its archive, ...).
    StandInDifference,
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
            FailureClass::TestsNetwork => "tests-network",
            FailureClass::StandInDifference => "stand-in-difference",
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

/// The first problem that stopped a task: its class, the host it could not
/// reach or the stand-in difference it met (when the output names one),
/// and the line of output that shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    /// Its class.
    pub class: FailureClass,
    /// The host that could not be reached (network classes, when named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The stand-in serving the image (`stand-in-difference`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_in: Option<String>,
    /// What differs between the stand-in and the image the task was
    /// written for (`stand-in-difference`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difference: Option<String>,
    /// The line of output that shows it, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

impl Blocker {
    /// What it names, in a few words (`github.com cannot be reached`,
    /// `stand-in localhost/stand-in/debian:trixie: package x is not in its
    /// archive`), else the line that shows it, else nothing.
    pub fn detail(&self) -> String {
        match (&self.host, &self.stand_in, &self.difference) {
            (Some(host), _, _) => format!("{host} cannot be reached"),
            (None, Some(name), Some(what)) => format!("stand-in {name}: {what}"),
            _ => self.line.clone().unwrap_or_default(),
        }
    }

    /// `class: detail`, or the class alone when there is no detail.
    pub fn label(&self) -> String {
        match self.detail() {
            d if d.is_empty() => self.class.key().to_string(),
            d => format!("{}: {d}", self.class.key()),
        }
    }
}
