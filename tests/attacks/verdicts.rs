//! Verdicts an agent cannot dodge (issue 46): a failing test that quotes
//! the agent's data still fails the verification (breach 4).

use super::*;

/// Final tests of which one passes and one fails quoting the agent's
/// `~/out.txt` whole in its assertion message.
const QUOTING_TESTS: &str = r#"import os

def test_passes():
    pass

def test_done():
    with open(os.path.expanduser('~/out.txt')) as f:
        data = f.read()
    assert data.strip() == 'HELLO', data
"#;

/// Breach 4: an agent writes a 12 MB line to the file a failing test
/// quotes, so that the JUnit report reaches the 16 MiB capture limit and
/// the verification became an unscored error (leaving the failure out of
/// the pass rate). It must be a failed verification naming the failed
/// test, for root and non-root agents, on the fresh and the pre-warmed
/// verifier.
#[test]
fn a_huge_line_a_failing_test_quotes_fails_the_verification() {
    both(
        "verdicts::a_huge_line_a_failing_test_quotes_fails_the_verification",
        |b| {
            for user in ["root", "user"] {
                let mut t = task(&format!("atk-huge-line-{user}"), user, "true\n");
                t.tests.insert_text("test_final_state.py", QUOTING_TESTS);
                t.meta.verifier.timeout_sec = 120.0;
                let mut s = session(b, &t);
                run(
                    &mut s,
                    "head -c 12000000 /dev/zero | tr '\\0' A > ~/out.txt; echo >> ~/out.txt; wc -c < ~/out.txt",
                );
                let r = verify_both(&mut s, &t, TestSet::Final);
                let verdicts: Vec<(&str, bool)> = r
                    .tests
                    .iter()
                    .map(|c| (c.name.as_str(), c.passed))
                    .collect();
                assert!(!r.passed, "{user}: passed: {verdicts:?}");
                assert_eq!(
                    verdicts,
                    [
                        ("test_final_state::test_passes", true),
                        ("test_final_state::test_done", false)
                    ],
                    "{user}"
                );
                assert_eq!(r.fraction_passed(), 0.5, "{user}");
                assert!(
                    r.junit_xml.len() < 1 << 20,
                    "{user}: a {} byte report",
                    r.junit_xml.len()
                );
                s.close();
            }
        },
    );
}
