//! Verification on both paths: a fresh interpreter and the pre-warmed one.

use endless::sandbox::{Session, VerifierPath};
use endless::task::Task;
use endless::verify::{verify_with, TestReport, TestSet, VerifierMode};

/// Whether this process runs as root (the local backend then has a
/// pre-warmed verifier; rootless backends verify cold).
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The verdicts of `which` tests on the session's state, run cold and then
/// pre-warmed: both must agree (test names, outcomes, overall verdict).
/// Returns the pre-warmed report.
pub fn verify_both(s: &mut Session, t: &Task, which: TestSet) -> TestReport {
    let cold = verify_with(s, t, which, VerifierMode::Cold).unwrap();
    let warm = verify_with(s, t, which, VerifierMode::Warm).unwrap();
    assert_eq!(cold.verifier, VerifierPath::Cold(None));
    // A verification the agent made impossible reports the same on both paths.
    let refused = warm
        .tests
        .iter()
        .any(|c| c.name == "endless::verifier_environment");
    if root() && !refused {
        assert_eq!(warm.verifier, VerifierPath::Warm, "{}", warm.output);
    }
    let key = |r: &TestReport| {
        let mut v: Vec<(String, bool)> =
            r.tests.iter().map(|c| (c.name.clone(), c.passed)).collect();
        v.sort();
        (r.passed, v)
    };
    assert_eq!(
        key(&cold),
        key(&warm),
        "cold:\n{}\nwarm:\n{}",
        cold.output,
        warm.output
    );
    warm
}
