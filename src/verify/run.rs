//! Running a task's tests inside a session, beside the agent's shell.
//!
//! The tests are copied into a fresh directory the agent cannot reach (a
//! root-only host directory bound into the sandbox), run as root through
//! the backend (not through the agent's shell, whose functions, aliases and
//! traps the agent controls) with the interpreter by absolute path, a clean
//! environment, isolated Python (`-I`: no `PYTHON*` variables, no user site,
//! no script directory on `sys.path`), no conftest files, no plugin
//! autoloading, no cache, and a fixed rootdir and ini file. The JUnit XML is
//! read from the host side.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::sandbox::{SandboxError, Session};
use crate::task::{write_tree, Task};

use super::junit::parse_junit;

/// The interpreter that runs the tests (inside the sandbox).
pub const PYTHON: &str = "/usr/bin/python3";

/// Which tests to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TestSet {
    /// `verifier.initial_tests`: the environment was built as intended.
    Initial,
    /// `verifier.final_tests` (or `verifier.script`): the task was done.
    Final,
}

/// One test's outcome.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TestCase {
    /// `module::test` (or `module.Class::test`).
    pub name: String,
    /// It passed (or was skipped).
    pub passed: bool,
    /// Failure message and traceback (empty when it passed).
    pub message: String,
}

/// The outcome of a verification run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TestReport {
    /// Per-test outcomes, in run order.
    pub tests: Vec<TestCase>,
    /// All tests passed and at least one ran.
    pub passed: bool,
    /// The raw JUnit XML (empty for custom verifier scripts without one).
    pub junit_xml: String,
    /// The test runner's console output.
    pub output: String,
    /// Wall-clock time of the verification, including pytest's start-up.
    pub duration: Duration,
}

impl TestReport {
    /// Fraction of tests that passed (0 when none ran): the partial reward.
    pub fn fraction_passed(&self) -> f64 {
        if self.tests.is_empty() {
            return 0.0;
        }
        self.tests.iter().filter(|t| t.passed).count() as f64 / self.tests.len() as f64
    }
}

/// Run `which` tests of `task` on the session's current state.
pub fn verify(
    session: &mut Session,
    task: &Task,
    which: TestSet,
) -> Result<TestReport, SandboxError> {
    let start = Instant::now();
    let (host, inside) = session
        .exchange_dir()
        .ok_or_else(|| SandboxError::Verify("this session has no verifier directory".into()))?;
    let mut rnd = [0u8; 8];
    rand::Rng::fill(&mut rand::rng(), &mut rnd);
    let run_id = format!("run-{}", hex::encode(rnd));
    let host_run = host.join(&run_id);
    let inside_run = format!("{inside}/{run_id}");
    std::fs::create_dir_all(&host_run)
        .map_err(SandboxError::io("create verifier directory", &host_run))?;
    std::fs::set_permissions(&host_run, std::fs::Permissions::from_mode(0o700))
        .map_err(SandboxError::io("chmod verifier directory", &host_run))?;
    let result = run_tests(session, task, which, &host_run, &inside_run, start);
    let _ = std::fs::remove_dir_all(&host_run);
    result
}

fn clean_env(cwd: &str) -> Vec<String> {
    let mut argv: Vec<String> = ["/usr/bin/env", "-i", "-C", cwd]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend(
        [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME=/root",
            "LANG=C.UTF-8",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1",
            "PYTEST_ADDOPTS=",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    argv
}

fn run_tests(
    session: &mut Session,
    task: &Task,
    which: TestSet,
    host_run: &std::path::Path,
    inside_run: &str,
    start: Instant,
) -> Result<TestReport, SandboxError> {
    write_tree(&host_run.join("tests"), &task.tests)?;
    let timeout = Duration::from_secs_f64(task.meta.verifier.timeout_sec.clamp(1.0, 86_400.0));
    if let (TestSet::Final, Some(script)) = (which, &task.meta.verifier.script) {
        return run_script(session, task, script, inside_run, timeout, start);
    }
    let files = match which {
        TestSet::Initial => &task.meta.verifier.initial_tests,
        TestSet::Final => &task.meta.verifier.final_tests,
    };
    if files.is_empty() {
        return Err(SandboxError::Verify(format!(
            "task.toml: [verifier] lists no {which:?} tests"
        )));
    }
    for f in files {
        if !task.tests.contains(f) {
            return Err(SandboxError::Verify(format!(
                "tests/{f} is listed in task.toml [verifier] but missing from the bundle"
            )));
        }
    }
    let ini = host_run.join("pytest.ini");
    std::fs::write(&ini, "[pytest]\n").map_err(SandboxError::io("write pytest.ini", &ini))?;
    let mut argv = clean_env(inside_run);
    argv.extend(
        [
            PYTHON,
            "-I",
            "-B",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--noconftest",
            "--color=no",
            "-q",
            "-rA",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    argv.push(format!("--rootdir={inside_run}/tests"));
    argv.push(format!("-c={inside_run}/pytest.ini"));
    // The JUnit XML goes to a pipe only the verifier holds, never to a file.
    argv.push("--junitxml=/dev/fd/3".to_string());
    argv.extend(files.iter().map(|f| format!("{inside_run}/tests/{f}")));
    let (out, junit) = session.run_as_root_fd3(&argv, timeout)?;
    let junit_xml = String::from_utf8_lossy(&junit).into_owned();
    let tests = if junit_xml.is_empty() {
        Vec::new()
    } else {
        parse_junit(&junit_xml)?
    };
    let mut output = out.output;
    if out.timed_out {
        output.push_str(&format!("\n[verifier timed out after {timeout:?}]"));
    }
    let passed = out.code == Some(0) && !tests.is_empty() && tests.iter().all(|t| t.passed);
    Ok(TestReport {
        tests,
        passed,
        junit_xml,
        output,
        duration: start.elapsed(),
    })
}

fn run_script(
    session: &mut Session,
    task: &Task,
    script: &str,
    inside_run: &str,
    timeout: Duration,
    start: Instant,
) -> Result<TestReport, SandboxError> {
    if !task.tests.contains(script) {
        return Err(SandboxError::Verify(format!(
            "tests/{script} is named by task.toml [verifier] script but missing from the bundle"
        )));
    }
    let q = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let body = format!(
        "rm -rf /logs/verifier /tests && mkdir -p /logs/verifier && cp -a {run}/tests /tests && cd /tests && \
         bash /tests/{script}; st=$?; \
         if [ -f /logs/verifier/reward.txt ] && [ ! -L /logs/verifier/reward.txt ]; then head -c 64 /logs/verifier/reward.txt >&3; fi; \
         rm -rf /tests; exit $st",
        run = q(inside_run),
        script = q(script).trim_matches('\'')
    );
    let mut argv = clean_env(inside_run);
    argv.extend(["/bin/bash".to_string(), "-c".to_string(), body]);
    let (out, reward) = session.run_as_root_fd3(&argv, timeout)?;
    let reward = String::from_utf8_lossy(&reward).into_owned();
    let passed = reward
        .trim()
        .parse::<f64>()
        .map(|r| r >= 1.0)
        .unwrap_or(false);
    let junit_xml = String::new();
    let message = if reward.is_empty() {
        "the verifier script wrote no /logs/verifier/reward.txt".to_string()
    } else {
        format!("reward: {}", reward.trim())
    };
    let mut output = out.output;
    if out.timed_out {
        output.push_str(&format!("\n[verifier timed out after {timeout:?}]"));
    }
    Ok(TestReport {
        tests: vec![TestCase {
            name: script.to_string(),
            passed,
            message: if passed { String::new() } else { message },
        }],
        passed,
        junit_xml,
        output,
        duration: start.elapsed(),
    })
}
