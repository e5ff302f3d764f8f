//! `endless episodes list` and `episodes import --replace` through the
//! binary, on the Harbor job fixture (issue 49).

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::path::Path;

use support::cli::{endless, json};

#[test]
fn imported_episodes_are_listed_and_a_job_imported_again_replaces_its_run() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-job");
    let job = job.to_str().unwrap();
    json(&endless(
        w,
        &["--create", "episodes", "import", job, "--json"],
    ));
    let listed = json(&endless(w, &["episodes", "list", "--json"]));
    let rows = listed.as_array().unwrap();
    let tasks: Vec<&str> = rows
        .iter()
        .map(|r| r["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["fix-permissions", "hello-world", "hello-world"]);
    assert!(rows
        .iter()
        .all(|r| r["run_id"] == "harbor-harbor-fixture-job"));
    let failed = &rows[0];
    assert_eq!(failed["passed"], false);
    assert!(failed["failure_labels"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l == "loop"));
    // As text: one line an episode, its outcome and labels.
    let text = endless(
        w,
        &["episodes", "list", "--run", "harbor-harbor-fixture-job"],
    );
    assert!(text.status.success());
    let out = String::from_utf8_lossy(&text.stdout);
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(
        out.lines()
            .next()
            .unwrap()
            .starts_with("harbor-harbor-fixture-job  fix-permissions  #0  failed"),
        "{out}"
    );
    assert!(out.contains("loop"), "{out}");
    // Imported again: refused without --replace, replaced with it.
    let again = endless(w, &["episodes", "import", job]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--replace"));
    let report = json(&endless(
        w,
        &["episodes", "import", job, "--replace", "--json"],
    ));
    assert_eq!(
        (report["replaced"].as_bool(), report["episodes"].as_u64()),
        (Some(true), Some(3))
    );
    let listed = json(&endless(w, &["episodes", "list", "--json"]));
    assert_eq!(listed.as_array().unwrap().len(), 3);
}
