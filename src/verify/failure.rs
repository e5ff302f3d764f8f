//! Why a task did not validate, in classes a curator can act on (issue 31):
//! the build could not reach a host, or a package does not exist, or failed
//! otherwise; the tests miss a module or a file; the oracle fails; the final
//! tests already pass on the initial state. [`classify`] reads them from a
//! [`Validation`]'s problems and test reports; the classes themselves are
//! part of what validation found (`validation.rs`).

use super::report::TestReport;
use super::validation::{FailureClass, Validation};

/// What the build's output says when a host could not be reached.
const NETWORK: &[&str] = &[
    "could not resolve host",
    "temporary failure in name resolution",
    "temporary failure resolving",
    "could not resolve",
    "name or service not known",
    "network is unreachable",
    "failed to establish a new connection",
    "connection refused",
    "connection timed out",
    "could not connect to",
    "no route to host",
    "failed to fetch",
    "network access is not allowed",
    "does not allow network",
];

/// What it says when a package or image does not exist.
const NOT_FOUND: &[&str] = &[
    "unable to locate package",
    "has no installation candidate",
    "no matching distribution found",
    "could not find a version that satisfies",
    "no solution found when resolving",
    "manifest unknown",
    "package not found",
    "was not found in the package registry",
];

/// The failure classes of `v`, sorted, without repeats (empty when valid).
pub fn classify(v: &Validation) -> Vec<FailureClass> {
    let mut out = Vec::new();
    for p in &v.problems {
        let low = p.to_ascii_lowercase();
        if low.starts_with("the environment did not build") {
            out.push(if NETWORK.iter().any(|s| low.contains(s)) {
                FailureClass::BuildNetwork
            } else if NOT_FOUND.iter().any(|s| low.contains(s)) {
                FailureClass::BuildPackageNotFound
            } else {
                FailureClass::BuildOther
            });
        } else if low.starts_with("final tests already pass") {
            out.push(FailureClass::FinalPassesInitially);
        } else if low.starts_with("the oracle solution") {
            out.push(missing(v.oracle.as_ref(), &low).unwrap_or(FailureClass::OracleFails));
        } else if low.starts_with("initial tests") {
            out.push(missing(v.initial.as_ref(), &low).unwrap_or(FailureClass::TestsOther));
        } else if low.starts_with("final tests could not run") {
            out.push(
                missing(v.final_on_initial.as_ref(), &low).unwrap_or(FailureClass::TestsOther),
            );
        } else {
            out.push(FailureClass::TestsOther);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A missing module or file in `report` (its messages and output) or in
/// the problem's text `low`.
fn missing(report: Option<&TestReport>, low: &str) -> Option<FailureClass> {
    let mut text = low.to_string();
    if let Some(r) = report {
        for t in r.tests.iter().filter(|t| !t.passed) {
            text.push('\n');
            text.push_str(&t.message);
        }
        text.push('\n');
        text.push_str(&r.output);
    }
    if text.contains("ModuleNotFoundError") || text.contains("No module named") {
        return Some(FailureClass::TestsMissingModule);
    }
    if text.contains("FileNotFoundError") || text.contains("No such file or directory") {
        return Some(FailureClass::TestsMissingFile);
    }
    let low = text.to_ascii_lowercase();
    if low.contains("modulenotfounderror") || low.contains("no module named") {
        return Some(FailureClass::TestsMissingModule);
    }
    if low.contains("filenotfounderror") || low.contains("no such file or directory") {
        return Some(FailureClass::TestsMissingFile);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::VerifierPath;
    use crate::verify::TestCase;
    use std::time::Duration;

    fn validation(problems: &[&str]) -> Validation {
        Validation {
            task_id: "t".into(),
            image: None,
            initial_passes: true,
            final_fails_initially: true,
            oracle_passes: None,
            problems: problems.iter().map(|s| s.to_string()).collect(),
            notes: Vec::new(),
            failure_classes: Vec::new(),
            initial: None,
            final_on_initial: None,
            baseline: None,
            oracle: None,
            duration: Duration::ZERO,
        }
    }

    fn report(message: &str, output: &str) -> TestReport {
        TestReport {
            tests: vec![TestCase {
                name: "test_outputs::test_a".into(),
                passed: false,
                message: message.into(),
            }],
            passed: false,
            junit_xml: String::new(),
            output: output.into(),
            duration: Duration::ZERO,
            verifier: VerifierPath::Warm,
            exit_code: Some(1),
        }
    }

    #[test]
    fn build_failures_are_sorted_by_cause() {
        let v = validation(&["the environment did not build: step 3 (RUN curl -fsSL https://example.invalid/x | sh) failed: curl: (6) Could not resolve host: example.invalid"]);
        assert_eq!(classify(&v), vec![FailureClass::BuildNetwork]);
        let v = validation(&[
            "the environment did not build: step 2 failed: E: Unable to locate package nosuchpkg",
        ]);
        assert_eq!(classify(&v), vec![FailureClass::BuildPackageNotFound]);
        let v = validation(&[
            "the environment did not build: ERROR: No matching distribution found for nosuch==1.0",
        ]);
        assert_eq!(classify(&v), vec![FailureClass::BuildPackageNotFound]);
        let v = validation(&["the environment did not build: step 4 failed: exit code 2"]);
        assert_eq!(classify(&v), vec![FailureClass::BuildOther]);
    }

    #[test]
    fn test_failures_name_what_is_missing() {
        let mut v = validation(&[
            "the oracle solution does not pass the final tests (failing: test_outputs::test_a)",
        ]);
        v.oracle = Some(report(
            "E   ModuleNotFoundError: No module named 'rdflib'",
            "",
        ));
        assert_eq!(classify(&v), vec![FailureClass::TestsMissingModule]);
        v.oracle = Some(report(
            "FileNotFoundError: [Errno 2] No such file or directory: '/tests/data.json'",
            "",
        ));
        assert_eq!(classify(&v), vec![FailureClass::TestsMissingFile]);
        v.oracle = Some(report("assert 3 == 4", ""));
        assert_eq!(classify(&v), vec![FailureClass::OracleFails]);
        let v = validation(&["final tests already pass on the initial state"]);
        assert_eq!(classify(&v), vec![FailureClass::FinalPassesInitially]);
        assert!(classify(&validation(&[])).is_empty());
        assert_eq!(
            serde_json::to_value(FailureClass::BuildPackageNotFound).unwrap(),
            serde_json::json!("build-package-not-found")
        );
    }
}
