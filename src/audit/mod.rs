//! The task audit: checks that find weak, flaky, hackable and
//! underspecified tasks automatically, each finding with its evidence.
//!
//! Each [`Check`] is named and runs alone (`endless tasks audit --checks
//! weak-tests`), under its own time budget; a check that runs out of time
//! says so ([`CheckStatus::OutOfTime`]), never passes. A task without an
//! oracle gets only the checks that need none, and the others say why they
//! were skipped. [`audit_task`] runs the checks of one task with a sandbox
//! [`Backend`](crate::sandbox::Backend) and returns an [`AuditReport`]
//! (stored as `tasks/<id>/audit.json` by [`file`], indexed by
//! [`crate::store`]).
//!
//! - [`passes_without_work`]: final tests on the initial state and after a
//!   do-nothing episode.
//! - [`weak_tests`]: mutants of the oracle's end state ([`mutants`],
//!   [`snapshot`]) the final tests still accept.
//! - [`cheap`]: scripted shortcut policies that pass.
//! - [`flaky`]: verdicts that differ between oracle runs and test re-runs.
//! - [`time_order`]: the tests under a clock a year later and in reverse
//!   order ([`rewrite`]).
//! - [`underspecified`]: what the tests require that the instruction never
//!   says (static, [`mentions`]).
//! - [`network`]: the oracle or tests fail offline but pass with network.

pub mod cheap;
pub mod file;
pub mod flaky;
mod index;
mod lab;
pub mod mentions;
pub mod mutants;
pub mod network;
pub mod passes_without_work;
mod report;
pub mod rewrite;
pub mod run;
pub mod snapshot;
pub mod time_order;
pub mod underspecified;
pub mod weak_tests;

use serde::{Deserialize, Serialize};

pub use index::AuditRow;
pub use report::{
    audit_digest, label_named, short_label, AuditReport, CheckResult, CheckStatus, Finding,
    MutationScore, AUDIT_FORMAT, LABELS, SHORT_LABELS,
};
pub use run::{audit_task, AuditOptions};

/// One audit check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// The final tests (or a share of them) pass on the initial state or
    /// after a do-nothing episode.
    PassesWithoutWork,
    /// Mutants of the oracle's end state that the final tests accept.
    WeakTests,
    /// Scripted shortcut policies that pass the final tests.
    CheapSolutions,
    /// Verdicts that differ between oracle runs or test re-runs.
    Flaky,
    /// Verdicts that change under a later clock or the reverse test order.
    TimeOrder,
    /// What the tests require that the instruction never mentions.
    Underspecified,
    /// The oracle or tests fail offline but pass with network.
    NeedsNetwork,
}

impl Check {
    /// Every check, in the order they run (cheapest and most telling first).
    pub const ALL: [Check; 7] = [
        Check::Underspecified,
        Check::PassesWithoutWork,
        Check::CheapSolutions,
        Check::WeakTests,
        Check::Flaky,
        Check::TimeOrder,
        Check::NeedsNetwork,
    ];

    /// The name `--checks` takes and reports show.
    pub fn name(self) -> &'static str {
        match self {
            Check::PassesWithoutWork => "passes-without-work",
            Check::WeakTests => "weak-tests",
            Check::CheapSolutions => "cheap-solutions",
            Check::Flaky => "flaky",
            Check::TimeOrder => "time-order",
            Check::Underspecified => "underspecified",
            Check::NeedsNetwork => "needs-network",
        }
    }

    /// Whether the check needs the task's oracle (`solution/solve.sh`).
    pub fn needs_oracle(self) -> bool {
        matches!(
            self,
            Check::WeakTests | Check::Flaky | Check::TimeOrder | Check::NeedsNetwork
        )
    }

    /// Whether the check runs anything in a sandbox.
    pub fn needs_sandbox(self) -> bool {
        self != Check::Underspecified
    }

    /// The check called `name` (as [`Check::name`] spells it).
    pub fn parse(name: &str) -> Result<Check, AuditError> {
        let name = name.trim();
        Check::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| AuditError::UnknownCheck(name.to_string()))
    }

    /// The checks of a comma-separated list, in run order, each once.
    pub fn parse_list(list: &str) -> Result<Vec<Check>, AuditError> {
        let mut out = Vec::new();
        for name in list.split(',').filter(|n| !n.trim().is_empty()) {
            out.push(Check::parse(name)?);
        }
        if out.is_empty() {
            return Err(AuditError::UnknownCheck(list.to_string()));
        }
        Ok(Check::ALL.into_iter().filter(|c| out.contains(c)).collect())
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the audit refuses or cannot do.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// `--checks` named a check that does not exist.
    #[error("unknown check {0:?} (checks: passes-without-work, weak-tests, cheap-solutions, flaky, time-order, underspecified, needs-network)")]
    UnknownCheck(String),
    /// `--exclude-audit` named a label that does not exist.
    #[error("unknown audit label {0:?} (labels: {labels})", labels = LABELS.join(", "))]
    UnknownLabel(String),
    /// A stored report could not be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file at fault.
        path: std::path::PathBuf,
        /// What is wrong with it (and in which field).
        message: String,
    },
}

/// Check that every label of a comma-separated list is a known finding
/// label ([`LABELS`]); returns them.
pub fn parse_labels(list: &str) -> Result<Vec<String>, AuditError> {
    let mut out = Vec::new();
    for label in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        if !LABELS.contains(&label) {
            return Err(AuditError::UnknownLabel(label.to_string()));
        }
        if !out.iter().any(|l| l == label) {
            out.push(label.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_parse_by_name_in_run_order() {
        assert_eq!(
            Check::parse_list("flaky, weak-tests,flaky").unwrap(),
            vec![Check::WeakTests, Check::Flaky]
        );
        for c in Check::ALL {
            assert_eq!(Check::parse(c.name()).unwrap(), c);
        }
        let e = Check::parse_list("weak,flaky").unwrap_err().to_string();
        assert!(e.contains("\"weak\"") && e.contains("weak-tests"), "{e}");
        assert!(Check::parse_list(" , ").is_err());
    }

    #[test]
    fn labels_have_short_forms_that_name_them_back() {
        for (l, s) in LABELS.iter().zip(SHORT_LABELS) {
            assert_eq!(short_label(l), s);
            assert_eq!(label_named(l), Some(*l));
            assert_eq!(label_named(&format!(" {} ", s.to_uppercase())), Some(*l));
        }
        assert_eq!(label_named("weakish"), None);
        assert_eq!(short_label("other"), "other");
    }

    #[test]
    fn labels_are_checked() {
        assert_eq!(
            parse_labels("flaky,weak-tests,flaky").unwrap(),
            vec!["flaky".to_string(), "weak-tests".to_string()]
        );
        let e = parse_labels("flakey").unwrap_err().to_string();
        assert!(e.contains("flakey") && e.contains("time-dependent"), "{e}");
    }
}
