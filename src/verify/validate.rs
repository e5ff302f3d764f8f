//! Task validation: the environment builds, the initial tests pass, the
//! final tests fail on the untouched initial state, and the oracle solution
//! (if any) makes the final tests pass.

use std::time::{Duration, Instant};

use super::failure::{classify, first_blocker};
use super::report::TestReport;
use super::run::{verify, verify_initial_and_final, TestSet, VerifierMode};
use super::validation::{Validation, ORACLE_OUTPUT_CHARS};
use crate::sandbox::{Backend, SandboxError, Session, SessionOptions};
use crate::task::{write_tree, Baseline, Task};

fn failing(report: &TestReport) -> String {
    let names: Vec<&str> = report
        .tests
        .iter()
        .filter(|t| !t.passed)
        .map(|t| t.name.as_str())
        .collect();
    if names.is_empty() {
        let tail: String = report
            .output
            .chars()
            .rev()
            .take(600)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("no test results; output ends with:\n{tail}")
    } else {
        format!("failing: {}", names.join(", "))
    }
}

/// Validate `task` on `backend`. Build and test failures are reported in the
/// result; only infrastructure failures are errors.
pub fn validate_task(backend: &dyn Backend, task: &Task) -> Result<Validation, SandboxError> {
    validate_task_reporting(backend, task, &crate::images::no_progress)
}

/// [`validate_task`], reporting the image's pull and build to `progress`.
pub fn validate_task_reporting(
    backend: &dyn Backend,
    task: &Task,
    progress: crate::images::ProgressFn<'_>,
) -> Result<Validation, SandboxError> {
    let start = Instant::now();
    let mut v = Validation {
        task_id: task.id().to_string(),
        image: None,
        initial_passes: false,
        final_fails_initially: false,
        oracle_passes: None,
        problems: Vec::new(),
        notes: Vec::new(),
        failure_classes: Vec::new(),
        blocker: None,
        initial: None,
        final_on_initial: None,
        baseline: None,
        oracle: None,
        oracle_output: None,
        duration: Duration::ZERO,
    };
    let image = match backend.prepare_reporting(task, progress) {
        Ok(image) => image,
        Err(
            e @ (SandboxError::SetupStep { .. }
            | SandboxError::Definition(_)
            | SandboxError::Image(_)
            | SandboxError::NetworkNotAllowed { .. }),
        ) => {
            // The base it stood on (a stand-in) may be what failed.
            if let SandboxError::SetupStep {
                base_note: Some(note),
                ..
            } = &e
            {
                v.notes.push(format!("base image: {note}"));
            }
            v.problems
                .push(format!("the environment did not build: {e}"));
            v.failure_classes = classify(&v);
            v.blocker = first_blocker(&v);
            v.duration = start.elapsed();
            return Ok(v);
        }
        Err(e) => return Err(e),
    };
    v.image = Some(image.hash.clone());
    if let Some(note) = &image.base_note {
        v.notes.push(format!("base image: {note}"));
    }
    if image.backend == "local" {
        let file = std::path::Path::new("task.toml");
        if let Ok(spec) =
            crate::task::formats::VerifierEnvSpec::from_section(&task.meta.verifier, file)
        {
            if let Some(note) = crate::sandbox::local::env_note(&image.path, &spec) {
                v.notes.push(format!("verifier environment: {note}"));
            }
        }
    }
    if task.meta.verifier.agent_packages {
        v.notes.push(super::TRUSTS_AGENT_PACKAGES.into());
    }
    let wall = Duration::from_secs_f64(
        task.meta.agent.timeout_sec.clamp(1.0, 86_400.0)
            + task.meta.verifier.timeout_sec.clamp(1.0, 86_400.0) * 2.0
            + 60.0,
    );
    let opts = SessionOptions {
        wall_clock: wall,
        ..SessionOptions::default()
    };
    let mut session = backend.start(&image, &opts)?;
    // Foreign tasks (Harbor, Terminal-Bench) often ship no initial-state
    // tests: there is then nothing to check before the agent starts.
    // Both sets on the initial state, in one pytest run where they can be.
    let (initial, final_on_initial) = if task.meta.verifier.initial_tests.is_empty() {
        v.initial_passes = true;
        (None, verify(&mut session, task, TestSet::Final))
    } else {
        match verify_initial_and_final(&mut session, task, VerifierMode::default()) {
            Ok((i, f)) => (Some(Ok(i)), Ok(f)),
            Err(e) => {
                let again = SandboxError::Verify(e.to_string());
                (Some(Err(e)), Err(again))
            }
        }
    };
    match initial {
        None => {}
        Some(Ok(r)) => {
            v.initial_passes = r.passed;
            if !r.passed {
                v.problems.push(format!(
                    "initial tests fail on the initial state ({})",
                    failing(&r)
                ));
            }
            v.initial = Some(r);
        }
        Some(Err(e)) => v.problems.push(format!("initial tests could not run: {e}")),
    }
    match final_on_initial {
        Ok(r) => {
            v.final_fails_initially = !r.passed;
            if r.passed {
                v.problems
                    .push("final tests already pass on the initial state".into());
            }
            v.baseline = Some(Baseline::from_verdicts(task, r.verdicts()));
            v.final_on_initial = Some(r);
        }
        Err(e) => v.problems.push(format!("final tests could not run: {e}")),
    }
    session.close();
    if task.solve_script().is_some() {
        let mut session = backend.start(&image, &opts)?;
        super::prestart(&mut session, task);
        let mut solved = String::new();
        match run_oracle(&mut session, task).and_then(|out| {
            solved = out;
            verify(&mut session, task, TestSet::Final)
        }) {
            Ok(r) => {
                v.oracle_passes = Some(r.passed);
                if !r.passed {
                    v.oracle_output =
                        Some(tail(&solved, ORACLE_OUTPUT_CHARS)).filter(|t| !t.is_empty());
                    v.problems.push(format!(
                        "the oracle solution does not pass the final tests ({})",
                        failing(&r)
                    ));
                }
                v.oracle = Some(r);
            }
            Err(e) => {
                v.oracle_passes = Some(false);
                v.problems
                    .push(format!("the oracle solution could not run: {e}"));
            }
        }
        session.close();
    }
    v.failure_classes = classify(&v);
    v.blocker = first_blocker(&v);
    v.duration = start.elapsed();
    Ok(v)
}

/// The last `n` characters of `text`.
fn tail(text: &str, n: usize) -> String {
    let skip = text.chars().count().saturating_sub(n);
    text.chars().skip(skip).collect()
}

/// Where the oracle finds the task's whole solution directory (Harbor's
/// path: solutions copy their other files from there), in the oracle's
/// session only.
pub(crate) const SOLUTION_INSIDE: &str = "/solution";

/// The shell command (as root) that copies the solution from `exchange`
/// (the session's exchange directory inside) into [`SOLUTION_INSIDE`]
/// (merged with what may be there, as Harbor's upload does), owned by
/// `user`.
fn copy_solution_command(exchange: &str, user: &str) -> String {
    format!(
        "mkdir -p {SOLUTION_INSIDE} && cp -a {exchange}/solution/. {SOLUTION_INSIDE}/ && \
         {{ chown -R {user}: {SOLUTION_INSIDE} 2>/dev/null || chmod -R a+rwX {SOLUTION_INSIDE}; }}"
    )
}

/// Copy `solution/` into the sandbox at [`SOLUTION_INSIDE`] and run its
/// `solve.sh` in the agent's shell; returns what it printed.
pub(crate) fn run_oracle(session: &mut Session, task: &Task) -> Result<String, SandboxError> {
    let (host, inside) = session
        .exchange_dir()
        .ok_or_else(|| SandboxError::Verify("this session has no exchange directory".into()))?;
    let host_sol = host.join("solution");
    write_tree(&host_sol, &task.solution)?;
    let user = session.info().user.clone();
    let copy = copy_solution_command(&inside, &user);
    // (Rootless sandboxes cannot chown; there the copy already belongs to the agent.)
    let out = session.run_as_root(
        &[
            "/usr/bin/env".into(),
            "-C".into(),
            "/".into(),
            "/bin/sh".into(),
            "-c".into(),
            copy,
        ],
        Duration::from_secs(60),
    )?;
    let _ = std::fs::remove_dir_all(&host_sol);
    if out.code != Some(0) {
        return Err(SandboxError::Verify(format!(
            "copying the solution failed: {}",
            out.output
        )));
    }
    let timeout = Duration::from_secs_f64(task.meta.agent.timeout_sec.clamp(1.0, 86_400.0));
    let r = session.exec(&format!("bash {SOLUTION_INSIDE}/solve.sh"), timeout)?;
    if r.timed_out {
        return Err(SandboxError::Verify(format!(
            "solve.sh timed out after {timeout:?}"
        )));
    }
    Ok(r.output)
}

#[cfg(test)]
mod solution_tests {
    use super::*;

    #[test]
    fn the_oracle_gets_its_whole_solution_directory_at_solution() {
        let cmd = copy_solution_command("/run/endless/x", "agent");
        assert!(
            cmd.starts_with("mkdir -p /solution && cp -a /run/endless/x/solution/. /solution/ &&"),
            "{cmd}"
        );
        assert!(cmd.contains("chown -R agent: /solution"), "{cmd}");
    }
}
