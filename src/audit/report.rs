//! What an audit found: findings with their evidence, each check's status,
//! and the task's report as `audit.json` stores it.

use serde::{Deserialize, Serialize};

use super::Check;

/// Version of the `audit.json` format.
pub const AUDIT_FORMAT: u32 = 1;

/// Every label a finding can carry (what `--exclude-audit` takes and the
/// index stores).
pub const LABELS: [&str; 8] = [
    "passes-without-work",
    "weak-tests",
    "cheap-solution",
    "flaky",
    "time-dependent",
    "order-dependent",
    "underspecified",
    "needs-network",
];

/// The short form of each of [`LABELS`] (same order), for narrow columns.
pub const SHORT_LABELS: [&str; 8] = [
    "no-work",
    "weak",
    "cheap",
    "flaky",
    "time",
    "order",
    "underspec",
    "network",
];

/// The short form of a finding label (the label itself when unknown).
pub fn short_label(label: &str) -> &str {
    LABELS
        .iter()
        .position(|l| *l == label)
        .map_or(label, |i| SHORT_LABELS[i])
}

/// The label `text` names, as stored (`weak-tests`) or in its short form
/// (`weak`), case and surrounding blanks ignored.
pub fn label_named(text: &str) -> Option<&'static str> {
    let t = text.trim().to_lowercase();
    LABELS
        .iter()
        .zip(SHORT_LABELS)
        .find(|(l, s)| **l == t || *s == t)
        .map(|(l, _)| *l)
}

/// What an audit depends on: the task's tests and environment (its
/// [`crate::task::baseline_digest`]), its instruction and its oracle. A
/// report whose digest no longer matches the task is stale.
pub fn audit_digest(task: &crate::task::Task) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"endless-audit-v1\0");
    h.update(crate::task::baseline_digest(task).as_bytes());
    h.update(b"\0");
    h.update(task.instruction.as_bytes());
    h.update([task.meta.environment.network as u8]);
    for (path, entry) in task.solution.iter() {
        h.update((path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update((entry.bytes.len() as u64).to_le_bytes());
        h.update(&entry.bytes);
    }
    hex::encode(h.finalize())
}

/// One thing wrong with a task, with what shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// The check that found it.
    pub check: Check,
    /// Its label (one of [`LABELS`]).
    pub label: String,
    /// One line for people.
    pub summary: String,
    /// The final tests concerned (names as the verifier reports them).
    #[serde(default)]
    pub tests: Vec<String>,
    /// What shows it: a mutant's diff, a shortcut's transcript, the test
    /// line, the verdicts of each run.
    #[serde(default)]
    pub evidence: String,
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum CheckStatus {
    /// It ran to the end and found nothing.
    Ok,
    /// It ran to the end and found something (see the findings).
    Finding,
    /// It did not run, and why (no oracle, the sandbox cannot, ...).
    Skipped {
        /// Why not.
        why: String,
    },
    /// Its time budget ran out before it finished: never a pass (findings
    /// made before are kept).
    OutOfTime {
        /// How far it got.
        done: String,
    },
    /// The sandbox failed (not the task): the check says nothing.
    Error {
        /// What failed.
        message: String,
    },
}

impl CheckStatus {
    /// A short word for tables: `ok`, `finding`, `skipped`, `out-of-time`, `error`.
    pub fn word(&self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Finding => "finding",
            CheckStatus::Skipped { .. } => "skipped",
            CheckStatus::OutOfTime { .. } => "out-of-time",
            CheckStatus::Error { .. } => "error",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check.
    pub check: Check,
    /// How it ended.
    #[serde(flatten)]
    pub status: CheckStatus,
    /// Seconds it took (its share of the oracle run it needed included).
    pub seconds: f64,
    /// What it found.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// What it could not see, or what it saw that is not a finding.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl CheckResult {
    /// A check that ended with `status`, nothing found.
    pub fn new(check: Check, status: CheckStatus) -> CheckResult {
        CheckResult {
            check,
            status,
            seconds: 0.0,
            findings: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// A check that ran to the end: `Finding` when it found something.
    pub fn done(check: Check, findings: Vec<Finding>, notes: Vec<String>) -> CheckResult {
        let status = if findings.is_empty() {
            CheckStatus::Ok
        } else {
            CheckStatus::Finding
        };
        CheckResult {
            check,
            status,
            seconds: 0.0,
            findings,
            notes,
        }
    }

    /// A check skipped for `why`.
    pub fn skipped(check: Check, why: impl Into<String>) -> CheckResult {
        CheckResult::new(check, CheckStatus::Skipped { why: why.into() })
    }

    /// A check the sandbox failed.
    pub fn error(check: Check, message: impl Into<String>) -> CheckResult {
        CheckResult::new(
            check,
            CheckStatus::Error {
                message: message.into(),
            },
        )
    }
}

/// Mutants of the oracle's end state the final tests rejected, of all run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutationScore {
    /// Mutants the tests rejected.
    pub killed: u32,
    /// Mutants run.
    pub total: u32,
}

impl MutationScore {
    /// killed / total (1 when there was nothing to mutate).
    pub fn ratio(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            f64::from(self.killed) / f64::from(self.total)
        }
    }
}

/// A task's audit, as `tasks/<id>/audit.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditReport {
    /// [`AUDIT_FORMAT`].
    pub format: u32,
    /// The task audited.
    pub task_id: String,
    /// [`audit_digest`] of the task audited: a report whose digest no
    /// longer matches is stale.
    pub digest: String,
    /// When (RFC 3339, UTC).
    pub audited_at: String,
    /// Wall-clock seconds of the whole audit.
    pub seconds: f64,
    /// Whether the task has an oracle (`solution/solve.sh`).
    pub has_oracle: bool,
    /// One result per check run, in run order.
    pub checks: Vec<CheckResult>,
    /// The weak-tests check's mutation score, when it ran.
    #[serde(default)]
    pub mutation: Option<MutationScore>,
}

impl AuditReport {
    /// Every finding, check by check.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.checks.iter().flat_map(|c| c.findings.iter())
    }

    /// The distinct labels of the findings, in [`LABELS`] order.
    pub fn labels(&self) -> Vec<String> {
        LABELS
            .iter()
            .filter(|l| self.findings().any(|f| f.label == **l))
            .map(|l| l.to_string())
            .collect()
    }

    /// Whether every check ran to the end (none out of time or failed).
    pub fn complete(&self) -> bool {
        self.checks.iter().all(|c| {
            !matches!(
                c.status,
                CheckStatus::OutOfTime { .. } | CheckStatus::Error { .. }
            )
        })
    }

    /// The result of `check`, if it ran.
    pub fn check(&self, check: Check) -> Option<&CheckResult> {
        self.checks.iter().find(|c| c.check == check)
    }

    /// Whether this report covers `checks` for `task` as it is now.
    pub fn covers(&self, task: &crate::task::Task, checks: &[Check]) -> bool {
        self.digest == audit_digest(task)
            && self.complete()
            && checks.iter().all(|c| self.check(*c).is_some())
    }

    /// One line: labels or `clean`, check statuses that are not ok, the
    /// mutation score.
    pub fn summary(&self) -> String {
        let labels = self.labels();
        let mut line = if labels.is_empty() {
            "clean".to_string()
        } else {
            labels.join(", ")
        };
        for c in &self.checks {
            match &c.status {
                CheckStatus::Ok | CheckStatus::Finding => {}
                CheckStatus::Skipped { .. } => line.push_str(&format!("; {} skipped", c.check)),
                CheckStatus::OutOfTime { .. } => {
                    line.push_str(&format!("; {} OUT OF TIME", c.check))
                }
                CheckStatus::Error { message } => {
                    line.push_str(&format!("; {} error: {message}", c.check))
                }
            }
        }
        if let Some(m) = self.mutation {
            line.push_str(&format!("; mutation score {}/{}", m.killed, m.total));
        }
        line.push_str(&format!(" ({:.1}s)", self.seconds));
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(check: Check, label: &str) -> Finding {
        Finding {
            check,
            label: label.into(),
            summary: "s".into(),
            tests: vec![],
            evidence: String::new(),
        }
    }

    fn report(checks: Vec<CheckResult>) -> AuditReport {
        AuditReport {
            format: AUDIT_FORMAT,
            task_id: "t".into(),
            digest: "d".into(),
            audited_at: "2026-01-01T00:00:00Z".into(),
            seconds: 1.0,
            has_oracle: true,
            checks,
            mutation: Some(MutationScore {
                killed: 3,
                total: 4,
            }),
        }
    }

    #[test]
    fn labels_summary_and_completeness() {
        let r = report(vec![
            CheckResult::done(
                Check::Flaky,
                vec![
                    finding(Check::Flaky, "flaky"),
                    finding(Check::Flaky, "flaky"),
                ],
                vec![],
            ),
            CheckResult::done(
                Check::WeakTests,
                vec![finding(Check::WeakTests, "weak-tests")],
                vec![],
            ),
            CheckResult::skipped(Check::NeedsNetwork, "no pasta"),
        ]);
        assert_eq!(r.labels(), vec!["weak-tests", "flaky"]);
        assert!(r.complete());
        let s = r.summary();
        assert!(
            s.starts_with("weak-tests, flaky; needs-network skipped"),
            "{s}"
        );
        assert!(s.contains("mutation score 3/4"), "{s}");
        let mut late = r.clone();
        late.checks.push(CheckResult::new(
            Check::TimeOrder,
            CheckStatus::OutOfTime {
                done: "1 of 2".into(),
            },
        ));
        assert!(!late.complete());
        assert!(late.summary().contains("time-order OUT OF TIME"));
    }

    #[test]
    fn reports_round_trip_through_json() {
        let r = report(vec![
            CheckResult::skipped(Check::Flaky, "no oracle"),
            CheckResult::new(
                Check::TimeOrder,
                CheckStatus::OutOfTime { done: "x".into() },
            ),
        ]);
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"status\":\"out-of-time\""), "{json}");
        let back: AuditReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
    }
}
