//! Verdicts an agent cannot dodge (issue 46): a failing test that quotes
//! the agent's data still fails the verification (breach 4), and a program
//! a Harbor-style test script runs cannot hand in its own reward (gap:
//! test scripts run as the sandbox's root).

use endless::verify::{verify_with, VerifierMode};

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

/// The test script of a Harbor-style task: it runs the agent's
/// `~/solve.sh` (as the sandbox's root, as Harbor does), then writes the
/// reward from what it finds.
const TEST_SH: &str = "#!/bin/bash\n/home/user/solve.sh\n\
    if [ \"$(cat /home/user/out.txt 2>/dev/null)\" = HELLO ]; then echo 1 > /logs/verifier/reward.txt; \
    else echo 0 > /logs/verifier/reward.txt; fi\n";

/// What the agent's `solve.sh` does, and whether the verification may pass.
const SOLVERS: &[(&str, &str, bool)] = &[
    // Writes the reward itself, then kills the script before it writes its own.
    (
        "kills-the-script",
        "echo 1 > /logs/verifier/reward.txt; kill -9 $PPID",
        false,
    ),
    // Hands in a reward on the verifier's result pipe, then keeps the
    // script from writing one.
    (
        "writes-the-result-pipe",
        "printf 'txt:1\\n' >&3; mkdir /logs/verifier/reward.txt",
        false,
    ),
    // Does the work, leaving a process running: the honest script passes.
    (
        "honest",
        "sleep 300 & echo HELLO > /home/user/out.txt",
        true,
    ),
];

/// Gap of issue 46: a non-root agent's program that the task's test
/// script runs (as the sandbox's root) must not hand in a reward: not by
/// writing the reward file and killing the script, nor by writing to the
/// verifier's result pipe. An honest solution still passes.
#[test]
fn a_program_the_test_script_runs_cannot_forge_its_reward() {
    both(
        "verdicts::a_program_the_test_script_runs_cannot_forge_its_reward",
        |b| {
            let mut t = task("atk-script-reward", "user", "true\n");
            t.tests = FileTree::default();
            t.tests.insert("test.sh", TEST_SH.as_bytes().to_vec(), true);
            t.meta.verifier.final_tests.clear();
            t.meta.verifier.script = Some("test.sh".into());
            for (name, solver, may_pass) in SOLVERS {
                let mut s = session(b, &t);
                run(
                    &mut s,
                    &format!(
                        "cat > ~/solve.sh <<'EOF'\n#!/bin/bash\n{solver}\nEOF\nchmod +x ~/solve.sh && cat ~/solve.sh"
                    ),
                );
                let r = verify_with(&mut s, &t, TestSet::Final, VerifierMode::Cold).unwrap();
                assert_eq!(r.passed, *may_pass, "{name}: {:?}\n{}", r.tests, r.output);
                s.close();
            }
        },
    );
}
