//! `passes-without-work`: the final tests on the untouched initial state,
//! and after a do-nothing episode (the agent says done at once). Every
//! test passing, or at least `share` of them, is a finding naming them; a
//! smaller share is a note (the partial reward already discounts those
//! tests through the task's baseline).

use super::lab::{names, Deadline, Lab};
use super::{Check, CheckResult, CheckStatus, Finding};

/// The label of its findings.
pub const LABEL: &str = "passes-without-work";

/// Run the check in `session` (a session still in the initial state; a
/// fresh one when `None`); `share` is the fraction of final tests passing
/// that makes a finding (1.0: only all of them).
pub(crate) fn run(
    lab: &Lab<'_>,
    session: Option<crate::sandbox::Session>,
    share: f64,
    deadline: Deadline,
) -> CheckResult {
    let check = Check::PassesWithoutWork;
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    let mut session = match session.map_or_else(|| lab.fresh(), Ok) {
        Ok(s) => s,
        Err(e) => return CheckResult::error(check, e.to_string()),
    };
    let initial = match lab.verify(&mut session) {
        Ok(r) => r,
        Err(e) => return CheckResult::error(check, format!("the final tests could not run: {e}")),
    };
    judge(
        "the initial state",
        &initial,
        share,
        &mut findings,
        &mut notes,
    );
    if deadline.passed() {
        let mut r = CheckResult::new(
            check,
            CheckStatus::OutOfTime {
                done: "the initial state was tested; the do-nothing episode was not played".into(),
            },
        );
        r.findings = findings;
        r.notes = notes;
        return r;
    }
    // The do-nothing episode: the policy says done before any command.
    match lab.play_on(session, Vec::new(), std::time::Duration::from_secs(60)) {
        Ok(played) => {
            let before = names(&initial, true);
            let after = names(&played.report, true);
            if after != before {
                judge(
                    "a do-nothing episode",
                    &played.report,
                    share,
                    &mut findings,
                    &mut notes,
                );
            }
            played.session.close();
        }
        Err(e) => return CheckResult::error(check, format!("the do-nothing episode failed: {e}")),
    }
    CheckResult::done(check, findings, notes)
}

/// A finding or a note for the tests of `report` that pass on `state`.
fn judge(
    state: &str,
    report: &crate::verify::TestReport,
    share: f64,
    findings: &mut Vec<Finding>,
    notes: &mut Vec<String>,
) {
    let passing = names(report, true);
    let total = report.verdicts().len();
    if passing.is_empty() {
        return;
    }
    let all = report.passed;
    let fraction = passing.len() as f64 / total.max(1) as f64;
    let what = format!(
        "{} of {total} final tests pass on {state}{}",
        passing.len(),
        if all {
            " (the task is passed without any work)"
        } else {
            ""
        }
    );
    if all || fraction >= share {
        findings.push(Finding {
            check: Check::PassesWithoutWork,
            label: LABEL.into(),
            summary: what,
            tests: passing.clone(),
            evidence: format!("passing on {state}:\n{}", passing.join("\n")),
        });
    } else {
        notes.push(format!("{what}: {}", passing.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::VerifierPath;
    use crate::verify::{TestCase, TestReport};

    fn report(cases: &[(&str, bool)]) -> TestReport {
        TestReport {
            tests: cases
                .iter()
                .map(|(n, p)| TestCase {
                    name: n.to_string(),
                    passed: *p,
                    message: String::new(),
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
    fn a_share_at_or_over_the_threshold_is_a_finding_below_a_note() {
        let (mut f, mut n) = (Vec::new(), Vec::new());
        judge(
            "s",
            &report(&[("a", true), ("b", false)]),
            0.5,
            &mut f,
            &mut n,
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].tests, vec!["a"]);
        judge(
            "s",
            &report(&[("a", true), ("b", false), ("c", false)]),
            0.5,
            &mut f,
            &mut n,
        );
        assert_eq!((f.len(), n.len()), (1, 1));
        assert!(n[0].starts_with("1 of 3 final tests pass on s: a"), "{n:?}");
        judge("s", &report(&[("a", true)]), 1.0, &mut f, &mut n);
        assert_eq!(f.len(), 2);
        assert!(f[1].summary.contains("without any work"));
        judge("s", &report(&[("a", false)]), 0.0, &mut f, &mut n);
        assert_eq!((f.len(), n.len()), (2, 1), "nothing passing says nothing");
    }
}
