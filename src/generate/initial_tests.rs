//! Stage 2's initial-state tests across repair rounds: fixed once first
//! written, so that a model cannot weaken them until its environment passes.
//! A repair reply replaces them only when it says the error is in the tests
//! (a `<tests_error>` section with the reason); the replacement is recorded.

use serde::Serialize;

use super::reply::{section, ReplyError};

/// The reply section that claims the failure is the tests' fault.
pub const TESTS_ERROR_TAG: &str = "tests_error";
/// The reply section holding the initial-state tests.
pub const TESTS_TAG: &str = "test_initial_state";

/// A replacement of the initial tests, kept in the task's provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestRevision {
    /// The stage-2 attempt (1-based) whose reply replaced the tests.
    pub round: u32,
    /// The model's reason, from `<tests_error>`.
    pub reason: String,
}

/// What a reply did to the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestsDecision {
    /// The reply wrote the first tests.
    FirstWritten,
    /// The reply left the tests alone (sent none, or the same).
    Kept,
    /// The reply sent different tests without `<tests_error>`: ignored.
    ChangeIgnored,
    /// The reply claimed a test error and sent new tests: accepted.
    Revised(TestRevision),
}

/// The initial tests of one candidate.
#[derive(Debug, Clone, Default)]
pub struct InitialTests {
    current: Option<String>,
}

impl InitialTests {
    /// Take the tests from the reply of stage-2 attempt `round`; returns the
    /// tests to judge the environment on and what happened to them.
    pub fn take(&mut self, reply: &str, round: u32) -> Result<(String, TestsDecision), ReplyError> {
        let sent = section(reply, TESTS_TAG);
        let Some(current) = self.current.clone() else {
            let tests = sent?;
            self.current = Some(tests.clone());
            return Ok((tests, TestsDecision::FirstWritten));
        };
        let Ok(sent) = sent else {
            return Ok((current, TestsDecision::Kept));
        };
        if sent == current {
            return Ok((current, TestsDecision::Kept));
        }
        match section(reply, TESTS_ERROR_TAG) {
            Ok(reason) => {
                self.current = Some(sent.clone());
                let reason = reason.trim().to_string();
                Ok((sent, TestsDecision::Revised(TestRevision { round, reason })))
            }
            Err(_) => Ok((current, TestsDecision::ChangeIgnored)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str =
        "<setup>x</setup><test_initial_state>def test_a(): assert ok()</test_initial_state>";
    const WEAK: &str =
        "<setup>y</setup><test_initial_state>def test_a(): pass</test_initial_state>";
    const CLAIM: &str = "<setup>y</setup><tests_error>test_a checks a file the truth never mentions</tests_error><test_initial_state>def test_a(): pass</test_initial_state>";

    #[test]
    fn tests_stay_fixed_unless_a_test_error_is_claimed() {
        let mut t = InitialTests::default();
        assert!(
            t.take("<setup>x</setup>", 1).is_err(),
            "the first tests are required"
        );
        let (first, d) = t.take(A, 1).unwrap();
        assert_eq!(d, TestsDecision::FirstWritten);
        let (kept, d) = t.take(WEAK, 2).unwrap();
        assert_eq!(
            (kept.as_str(), d),
            (first.as_str(), TestsDecision::ChangeIgnored)
        );
        let (kept, d) = t.take("<setup>z</setup>", 2).unwrap();
        assert_eq!((kept.as_str(), d), (first.as_str(), TestsDecision::Kept));
        let (new, d) = t.take(CLAIM, 3).unwrap();
        assert_eq!(new, "def test_a(): pass\n");
        assert_eq!(
            d,
            TestsDecision::Revised(TestRevision {
                round: 3,
                reason: "test_a checks a file the truth never mentions".into()
            })
        );
        // The revision is what later rounds keep.
        assert_eq!(t.take(A, 4).unwrap().0, new);
    }
}
