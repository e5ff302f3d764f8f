//! `time-order`: the final tests on the oracle's end state under a clock
//! a year later, and with their tests in reverse order (see
//! [`super::rewrite`]); a test whose verdict changes against a plain run on
//! the same state is a finding (`time-dependent`, `order-dependent`).

use std::collections::BTreeMap;

use super::lab::{verdicts, Deadline, Lab};
use super::rewrite;
use super::{Check, CheckResult, CheckStatus, Finding};
use crate::sandbox::Session;
use crate::verify::TestReport;

/// The label of a clock finding.
pub const TIME_LABEL: &str = "time-dependent";
/// The label of an order finding.
pub const ORDER_LABEL: &str = "order-dependent";

/// What the check cannot see, said in every result.
pub const LIMITS: &str = "the clock is shifted inside the test process only: a time namespace (CLONE_NEWTIME) offsets CLOCK_MONOTONIC and CLOCK_BOOTTIME, never CLOCK_REALTIME, and faketime is not available, so programs the tests start (`date`, the agent's scripts) still see the real clock; only top-level test functions and classes are reordered";

/// Run the check on the oracle's end state in `session`.
pub(crate) fn run(lab: &Lab<'_>, session: &mut Session, deadline: Deadline) -> CheckResult {
    let check = Check::TimeOrder;
    let (Some(shifted), Some(reversed)) = (
        rewrite::clock_shifted(lab.task),
        rewrite::reversed(lab.task),
    ) else {
        return CheckResult::skipped(
            check,
            "the final tests are a verifier script, not pytest modules that can be rewritten",
        );
    };
    let plain = match lab.verify(session) {
        Ok(r) => r,
        Err(e) => return CheckResult::error(check, e.to_string()),
    };
    let mut findings = Vec::new();
    let variants = [
        (&shifted, TIME_LABEL, "under a clock a year later"),
        (&reversed, ORDER_LABEL, "in reverse order"),
    ];
    for (i, (task, label, how)) in variants.into_iter().enumerate() {
        if deadline.passed() {
            let mut r = CheckResult::new(
                check,
                CheckStatus::OutOfTime {
                    done: format!("{i} of 2 variants run"),
                },
            );
            r.findings = findings;
            r.notes = vec![LIMITS.into()];
            return r;
        }
        match lab.verify_as(session, task) {
            Ok(r) => findings.extend(compare(&plain, &r, label, how)),
            Err(e) => return CheckResult::error(check, format!("the tests {how}: {e}")),
        }
    }
    CheckResult::done(check, findings, vec![LIMITS.into()])
}

/// The finding when a test's verdict differs between `plain` and `varied`.
pub fn compare(plain: &TestReport, varied: &TestReport, label: &str, how: &str) -> Option<Finding> {
    let a: BTreeMap<String, bool> = verdicts(plain);
    let b: BTreeMap<String, bool> = verdicts(varied);
    let mut changed = Vec::new();
    let mut evidence = String::new();
    for (name, before) in &a {
        let after = b.get(name).copied().unwrap_or(false);
        if after != *before {
            changed.push(name.clone());
            let word = |p: bool| if p { "passes" } else { "fails" };
            evidence.push_str(&format!(
                "{name}: {} normally, {} {how}\n",
                word(*before),
                word(after)
            ));
            if let Some(t) = varied.tests.iter().find(|t| &t.name == name && !t.passed) {
                let msg: Vec<&str> = t
                    .message
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .take(6)
                    .collect();
                if !msg.is_empty() {
                    evidence.push_str(&format!("  {}\n", msg.join("\n  ")));
                }
            }
        }
    }
    if changed.is_empty() {
        return None;
    }
    Some(Finding {
        check: Check::TimeOrder,
        label: label.into(),
        summary: format!(
            "{} final test(s) change verdict {how}: {}",
            changed.len(),
            changed.join(", ")
        ),
        tests: changed,
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::VerifierPath;
    use crate::verify::TestCase;

    fn report(cases: &[(&str, bool, &str)]) -> TestReport {
        TestReport {
            tests: cases
                .iter()
                .map(|(n, p, m)| TestCase {
                    name: n.to_string(),
                    passed: *p,
                    message: m.to_string(),
                })
                .collect(),
            passed: cases.iter().all(|c| c.1),
            junit_xml: String::new(),
            output: String::new(),
            duration: std::time::Duration::ZERO,
            verifier: VerifierPath::Warm,
            exit_code: Some(0),
        }
    }

    #[test]
    fn changed_verdicts_are_findings_with_the_message() {
        let plain = report(&[("t::a", true, ""), ("t::b", true, "")]);
        let same = report(&[("t::a", true, ""), ("t::b", true, "")]);
        assert!(compare(&plain, &same, TIME_LABEL, "later").is_none());
        let later = report(&[
            ("t::a", true, ""),
            ("t::b", false, "AssertionError: 2027 != 2026"),
        ]);
        let f = compare(&plain, &later, TIME_LABEL, "under a clock a year later").unwrap();
        assert_eq!(
            (f.label.as_str(), f.tests.clone()),
            (TIME_LABEL, vec!["t::b".to_string()])
        );
        assert!(f
            .evidence
            .contains("passes normally, fails under a clock a year later"));
        assert!(f.evidence.contains("2027 != 2026"), "{}", f.evidence);
    }
}
