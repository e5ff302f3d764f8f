//! `flaky`: the oracle's episode repeated in fresh sandboxes, and the
//! final tests re-run on one end state; a test whose verdict differs
//! between runs is a finding naming it, with every run's verdict.

use std::collections::BTreeMap;

use super::lab::{verdicts, Deadline, Lab};
use super::{Check, CheckResult, CheckStatus, Finding};
use crate::sandbox::Session;
use crate::verify::TestReport;

/// The label of its findings.
pub const LABEL: &str = "flaky";

/// Run the check: `first` is the shared oracle run (its session and
/// report); `runs` oracle runs in all, and `runs` re-runs of the tests on
/// the first run's end state.
pub(crate) fn run(
    lab: &Lab<'_>,
    session: &mut Session,
    first: &TestReport,
    runs: u32,
    deadline: Deadline,
) -> CheckResult {
    let check = Check::Flaky;
    let mut seen: Vec<(String, BTreeMap<String, bool>)> =
        vec![("oracle run 1".into(), verdicts(first))];
    let planned = 2 * runs.max(1) as usize;
    let out_of_time = |seen: &Vec<(String, BTreeMap<String, bool>)>| {
        let mut r = CheckResult::new(
            check,
            CheckStatus::OutOfTime {
                done: format!("{} of {planned} runs", seen.len()),
            },
        );
        r.findings = judge(seen).into_iter().collect();
        r
    };
    for k in 1..=runs.max(1) {
        if deadline.passed() {
            return out_of_time(&seen);
        }
        match lab.verify(session) {
            Ok(r) => seen.push((format!("re-run {k} on run 1's end state"), verdicts(&r))),
            Err(e) => return CheckResult::error(check, format!("re-running the tests: {e}")),
        }
    }
    for k in 2..=runs.max(1) {
        if deadline.passed() {
            return out_of_time(&seen);
        }
        match lab.oracle() {
            Some(Ok(played)) => {
                seen.push((format!("oracle run {k}"), verdicts(&played.report)));
                played.session.close();
            }
            Some(Err(e)) => return CheckResult::error(check, format!("oracle run {k}: {e}")),
            None => return CheckResult::skipped(check, "the task has no oracle"),
        }
    }
    CheckResult::done(check, judge(&seen).into_iter().collect(), Vec::new())
}

/// The finding, if any test's verdict differs between `runs`.
pub fn judge(runs: &[(String, BTreeMap<String, bool>)]) -> Option<Finding> {
    let mut all: Vec<&String> = runs.iter().flat_map(|(_, v)| v.keys()).collect();
    all.sort();
    all.dedup();
    let verdict = |v: &BTreeMap<String, bool>, t: &str| v.get(t).copied().unwrap_or(false);
    let flaky: Vec<String> = all
        .into_iter()
        .filter(|t| {
            let first = verdict(&runs[0].1, t);
            runs.iter().any(|(_, v)| verdict(v, t) != first)
        })
        .cloned()
        .collect();
    if flaky.is_empty() {
        return None;
    }
    let mut evidence = String::new();
    for t in &flaky {
        let passed = runs.iter().filter(|(_, v)| verdict(v, t)).count();
        evidence.push_str(&format!(
            "{t}: passed {passed} of {}\n",
            crate::plural::count(runs.len(), "run")
        ));
        for (name, v) in runs {
            let word = match v.get(t.as_str()) {
                Some(true) => "pass",
                Some(false) => "FAIL",
                None => "missing",
            };
            evidence.push_str(&format!("  {name}: {word}\n"));
        }
    }
    Some(Finding {
        check: Check::Flaky,
        label: LABEL.into(),
        summary: format!(
            "{} final test(s) give different verdicts on the same work: {}",
            flaky.len(),
            flaky.join(", ")
        ),
        tests: flaky,
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, v: &[(&str, bool)]) -> (String, BTreeMap<String, bool>) {
        (
            name.into(),
            v.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
        )
    }

    #[test]
    fn differing_verdicts_name_the_tests() {
        let steady = [
            run("a", &[("t1", true), ("t2", true)]),
            run("b", &[("t1", true), ("t2", true)]),
        ];
        assert!(judge(&steady).is_none());
        let f = judge(&[
            run("a", &[("t1", true), ("t2", true)]),
            run("b", &[("t1", true), ("t2", false)]),
            run("c", &[("t1", true)]),
        ])
        .unwrap();
        assert_eq!(f.tests, vec!["t2"]);
        assert!(
            f.evidence.contains("t2: passed 1 of 3 runs"),
            "{}",
            f.evidence
        );
        assert!(f.evidence.contains("c: missing"), "{}", f.evidence);
    }
}
