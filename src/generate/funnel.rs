//! The generation funnel: how many candidates reached each stage, why the
//! others were rejected, and, apart, those that infrastructure stopped.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The pipeline's stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Stage 1: the task and its privileged truth.
    Task,
    /// Stage 2: the environment and its initial-state tests.
    Environment,
    /// Stage 3: completion tests that fail on the initial state.
    CompletionTests,
    /// Stage 4: pass@n > 0 with the solver.
    Solvability,
    /// Optional last stage (`--audit reject|flag`): the task audit.
    Audit,
}

impl Stage {
    /// All stages in order.
    pub const ALL: [Stage; 5] = [
        Stage::Task,
        Stage::Environment,
        Stage::CompletionTests,
        Stage::Solvability,
        Stage::Audit,
    ];

    /// The funnel row a candidate reaches when it passes this stage.
    pub fn passed_label(self) -> &'static str {
        match self {
            Stage::Task => "parsed",
            Stage::Environment => "environment built",
            Stage::CompletionTests => "completion tests valid",
            Stage::Solvability => "solvable",
            Stage::Audit => "kept by the audit",
        }
    }
}

/// How one candidate ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CandidateOutcome {
    /// Passed every stage and was stored.
    Accepted {
        /// The id of the stored task (`gen-<seed>-<index>`).
        task_id: String,
        /// The audit stage's labels when it ran (`--audit flag` keeps a
        /// task with findings; empty: clean); `None`: not audited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audit: Option<Vec<String>>,
    },
    /// Turned down; the partial bundle is normally kept under `rejected/<candidate>/`.
    Rejected {
        /// The stage that rejected it.
        stage: Stage,
        /// Why, for humans.
        reason: String,
    },
    /// Not finished: infrastructure failed (the model server unreachable,
    /// failing or answering with something that is not the API's, or every
    /// solution episode ended in an infrastructure error). Not a judgement
    /// of the candidate: it is neither journalled nor kept as rejected, and
    /// a resumed run tries it again.
    InfraError {
        /// The stage it was in.
        stage: Stage,
        /// The error, naming the server where there was one.
        error: String,
    },
}

/// Counts per stage and reject reasons per stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Funnel {
    /// Candidates finished (accepted or rejected), including those of a
    /// resumed run; those stopped by infrastructure are not.
    pub sampled: usize,
    /// Candidates that passed each stage.
    pub passed: BTreeMap<Stage, usize>,
    /// Reject reasons per stage, with counts.
    pub rejects: BTreeMap<Stage, BTreeMap<String, usize>>,
    /// Candidates the audit stage decided (kept or rejected).
    #[serde(default)]
    pub audited: usize,
    /// Candidates kept with findings (`--audit flag`), per label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flagged: BTreeMap<String, usize>,
    /// Candidates of this run that infrastructure stopped
    /// ([`CandidateOutcome::InfraError`]): not finished, not rejected.
    #[serde(default)]
    pub infra_errors: usize,
    /// The errors of [`infra_errors`](Self::infra_errors) per stage, with counts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub infra_reasons: BTreeMap<Stage, BTreeMap<String, usize>>,
}

impl Funnel {
    /// Count one finished candidate.
    pub fn record(&mut self, outcome: &CandidateOutcome) {
        if let CandidateOutcome::InfraError { stage, error } = outcome {
            self.infra_errors += 1;
            *self
                .infra_reasons
                .entry(*stage)
                .or_default()
                .entry(reason_class(error))
                .or_default() += 1;
            return;
        }
        self.sampled += 1;
        let reached = match outcome {
            CandidateOutcome::Accepted { audit, .. } => {
                if let Some(labels) = audit {
                    self.audited += 1;
                    for label in labels {
                        *self.flagged.entry(label.clone()).or_default() += 1;
                    }
                }
                Stage::ALL.len()
            }
            CandidateOutcome::Rejected { stage, reason } => {
                if *stage == Stage::Audit {
                    self.audited += 1;
                }
                *self
                    .rejects
                    .entry(*stage)
                    .or_default()
                    .entry(reason_class(reason))
                    .or_default() += 1;
                Stage::ALL.iter().position(|s| s == stage).unwrap_or(0)
            }
            CandidateOutcome::InfraError { .. } => 0,
        };
        for stage in &Stage::ALL[..reached] {
            *self.passed.entry(*stage).or_default() += 1;
        }
    }

    /// Candidates accepted (kept by the last stage they went through).
    pub fn accepted(&self) -> usize {
        self.passed.get(&Stage::Audit).copied().unwrap_or(0)
    }
}

/// Group similar reasons: the first line, with numbers and quoted text elided.
fn reason_class(reason: &str) -> String {
    let first = reason.lines().next().unwrap_or("").trim();
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in first.chars().take(100) {
        match (quote, c) {
            (None, '"' | '`') => {
                quote = Some(c);
                out.push_str("\"…\"");
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    out
}

impl fmt::Display for Funnel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |n: usize| {
            if self.sampled == 0 {
                0.0
            } else {
                100.0 * n as f64 / self.sampled as f64
            }
        };
        writeln!(f, "{:<26} {:>6} {:>7}", "stage", "count", "share")?;
        writeln!(f, "{:<26} {:>6} {:>6.1}%", "sampled", self.sampled, 100.0)?;
        for stage in Stage::ALL {
            if stage == Stage::Audit && self.audited == 0 {
                continue;
            }
            let n = self.passed.get(&stage).copied().unwrap_or(0);
            writeln!(
                f,
                "{:<26} {:>6} {:>6.1}%",
                format!("-> {}", stage.passed_label()),
                n,
                pct(n)
            )?;
        }
        if !self.flagged.is_empty() {
            writeln!(f, "kept with audit findings, by label:")?;
            for (label, n) in &self.flagged {
                writeln!(f, "  {n:>4}  {label}")?;
            }
        }
        for (stage, reasons) in &self.rejects {
            writeln!(f, "rejected at {stage:?}:")?;
            let mut sorted: Vec<_> = reasons.iter().collect();
            sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (reason, n) in sorted {
                writeln!(f, "  {n:>4}  {reason}")?;
            }
        }
        if self.infra_errors > 0 {
            writeln!(
                f,
                "not finished: {} infrastructure errors (not rejections; the same command tries them again):",
                self.infra_errors
            )?;
            for (stage, reasons) in &self.infra_reasons {
                let mut sorted: Vec<_> = reasons.iter().collect();
                sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                for (reason, n) in sorted {
                    writeln!(f, "  {n:>4}  at {stage:?}: {reason}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_stage_and_groups_reasons() {
        let mut f = Funnel::default();
        f.record(&CandidateOutcome::Accepted {
            task_id: "a".into(),
            audit: None,
        });
        f.record(&CandidateOutcome::Rejected {
            stage: Stage::Task,
            reason: "the reply has no <truth> section".into(),
        });
        f.record(&CandidateOutcome::Rejected {
            stage: Stage::CompletionTests,
            reason: "final tests pass on the initial state".into(),
        });
        f.record(&CandidateOutcome::Rejected {
            stage: Stage::Environment,
            reason: "setup failed: step `cp \"x\"`\nlog".into(),
        });
        f.record(&CandidateOutcome::Rejected {
            stage: Stage::Environment,
            reason: "setup failed: step `cp \"y\"`".into(),
        });
        assert_eq!(f.sampled, 5);
        assert_eq!(f.passed[&Stage::Task], 4);
        assert_eq!(f.passed[&Stage::Environment], 2);
        assert_eq!(f.passed[&Stage::CompletionTests], 1);
        assert_eq!(f.accepted(), 1);
        assert_eq!(f.rejects[&Stage::Environment].len(), 1, "{:?}", f.rejects);
        let table = f.to_string();
        assert!(
            table.contains("-> solvable") && table.contains("20.0%"),
            "{table}"
        );
        assert!(!table.contains("audit"), "no audit stage ran: {table}");
    }

    #[test]
    fn infrastructure_errors_are_counted_apart_from_rejections() {
        let mut f = Funnel::default();
        f.record(&CandidateOutcome::Accepted {
            task_id: "a".into(),
            audit: None,
        });
        f.record(&CandidateOutcome::Rejected {
            stage: Stage::Task,
            reason: "the reply has no <truth> section".into(),
        });
        for _ in 0..2 {
            f.record(&CandidateOutcome::InfraError {
                stage: Stage::Environment,
                error: "model server at http://h/v1/chat/completions answered HTTP 503 after 4 attempt(s): {\"error\":\"busy\"}".into(),
            });
        }
        assert_eq!((f.sampled, f.infra_errors, f.accepted()), (2, 2, 1));
        assert_eq!(f.passed[&Stage::Task], 1, "{f:?}");
        assert_eq!(
            f.rejects.len(),
            1,
            "only the real rejection: {:?}",
            f.rejects
        );
        assert_eq!(
            f.infra_reasons[&Stage::Environment].values().sum::<usize>(),
            2
        );
        let table = f.to_string();
        assert!(
            table.contains("50.0%"),
            "shares are of finished candidates: {table}"
        );
        assert!(
            table.contains("not finished: 2 infrastructure errors")
                && table.contains("2  at Environment: model server at http://h/v1/chat/completions answered HTTP 503"),
            "{table}"
        );
        assert!(!table.contains("rejected at Environment"), "{table}");
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["infra_errors"], 2);
        // Funnels recorded before infrastructure errors were told apart still read.
        let old: Funnel =
            serde_json::from_str(r#"{"sampled":1,"passed":{},"rejects":{}}"#).unwrap();
        assert_eq!(old.infra_errors, 0);
    }

    #[test]
    fn the_audit_stage_counts_kept_flagged_and_rejected_candidates() {
        let mut f = Funnel::default();
        f.record(&CandidateOutcome::Accepted {
            task_id: "a".into(),
            audit: Some(vec!["cheap-solution".into()]),
        });
        f.record(&CandidateOutcome::Accepted {
            task_id: "b".into(),
            audit: Some(Vec::new()),
        });
        f.record(&CandidateOutcome::Rejected {
            stage: Stage::Audit,
            reason: "audit findings: weak-tests\nthe final tests accept a mutant".into(),
        });
        assert_eq!(f.audited, 3);
        assert_eq!(f.passed[&Stage::Solvability], 3);
        assert_eq!(f.accepted(), 2);
        assert_eq!(f.flagged["cheap-solution"], 1);
        assert_eq!(f.rejects[&Stage::Audit]["audit findings: weak-tests"], 1);
        let table = f.to_string();
        assert!(table.contains("-> kept by the audit"), "{table}");
        assert!(table.contains("rejected at Audit:"), "{table}");
        assert!(table.contains("1  cheap-solution"), "{table}");
        // Journals written before the audit stage existed still read.
        let old: CandidateOutcome =
            serde_json::from_str(r#"{"outcome":"accepted","task_id":"t"}"#).unwrap();
        assert_eq!(
            old,
            CandidateOutcome::Accepted {
                task_id: "t".into(),
                audit: None
            }
        );
    }
}
