//! Structural validation of a task: every problem, with file and field.

use super::{is_valid_id, Problem, Task};

/// Check `task` for structural problems (not behaviour: see `verify`).
pub fn validate(task: &Task) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut problem = |file: &str, field: Option<&str>, message: String| {
        out.push(Problem {
            file: file.into(),
            field: field.map(str::to_owned),
            message,
        })
    };
    let meta = &task.meta;
    if !is_valid_id(&meta.task.id) {
        problem(
            "task.toml",
            Some("task.id"),
            format!("{:?} is not a valid id", meta.task.id),
        );
    }
    if let Some(c) = meta.task.complexity {
        if !(1..=6).contains(&c) {
            problem(
                "task.toml",
                Some("task.complexity"),
                format!("{c} is outside 1..=6"),
            );
        }
    }
    if meta.agent.max_turns == 0 {
        problem(
            "task.toml",
            Some("agent.max_turns"),
            "must be at least 1".into(),
        );
    }
    if meta.agent.timeout_sec.is_nan() || meta.agent.timeout_sec <= 0.0 {
        problem(
            "task.toml",
            Some("agent.timeout_sec"),
            "must be positive".into(),
        );
    }
    if meta.verifier.timeout_sec.is_nan() || meta.verifier.timeout_sec <= 0.0 {
        problem(
            "task.toml",
            Some("verifier.timeout_sec"),
            "must be positive".into(),
        );
    }
    if !meta.environment.workdir.starts_with('/') {
        problem(
            "task.toml",
            Some("environment.workdir"),
            "must be an absolute path".into(),
        );
    }
    if task.instruction.trim().is_empty() {
        problem("instruction.md", None, "is empty".into());
    }
    match &meta.verifier.script {
        Some(script) => {
            if !task.tests.contains(script) {
                problem(
                    "task.toml",
                    Some("verifier.script"),
                    format!("tests/{script} does not exist"),
                );
            }
        }
        None => {
            if meta.verifier.final_tests.is_empty() {
                problem(
                    "task.toml",
                    Some("verifier.final_tests"),
                    "names no test file".into(),
                );
            }
        }
    }
    for (field, files) in [
        ("verifier.final_tests", &meta.verifier.final_tests),
        ("verifier.initial_tests", &meta.verifier.initial_tests),
    ] {
        for f in files {
            match task.tests.0.get(f) {
                None => problem(
                    "task.toml",
                    Some(field),
                    format!("tests/{f} does not exist"),
                ),
                Some(entry) if std::str::from_utf8(&entry.bytes).is_err() => {
                    problem(&format!("tests/{f}"), None, "is not valid UTF-8".into())
                }
                Some(_) => {}
            }
        }
    }
    if task.environment_definition().is_none() && !task.environment.is_empty() {
        problem(
            "environment",
            None,
            "has files but no setup.sh, container.def or Dockerfile".into(),
        );
    }
    out
}
