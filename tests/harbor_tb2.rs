//! Issue 52's defects, through the real `endless` binary: each task of
//! `tests/fixtures/harbor-tb2` is the smallest Harbor task reproducing one
//! Terminal-Bench 2 failure (a `/tests` the tests write into, a solution
//! shipping more files than `solve.sh`, a session writing more than 1 GiB,
//! an `ARG` default used by a later `RUN`, a namespace-only `setuptools` in
//! the image the verifier environment is built from, a test script running
//! pytest twice), and
//! `tasks validate --all` passes every one of them: their oracles pass and
//! their final tests fail on the initial state.
//!
//! The workspace's cache lives under `target/tmp` (like the Debian base), so
//! a rerun builds nothing.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::{Path, PathBuf};

mod support;
use support::cli::endless;
use support::registry::debian_base_tar;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The tasks of the corpus, each with the defect of issue 52 it reproduces.
const TASKS: &[(&str, u32)] = &[
    ("tests-writable", 6),
    ("solution-files", 7),
    ("storage-size", 8),
    ("arg-in-run", 9),
    ("setuptools-namespace", 10),
    ("two-pytest-runs", 4),
];

/// A workspace under `target/tmp` whose cache survives between runs;
/// everything else is fresh.
fn workspace() -> PathBuf {
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join("harbor-tb2-ws");
    std::fs::create_dir_all(&ws).unwrap();
    for entry in std::fs::read_dir(&ws).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name().is_some_and(|n| n == ".cache") {
            continue;
        }
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    std::fs::write(
        ws.join("endless.toml"),
        "[images]\npull = \"never\"\nfallback = \"error\"\n\n\
         [images.aliases]\n\"ubuntu:24.04\" = \"local/debian:bookworm\"\n\
         \"python:3.13-slim-bookworm\" = \"local/debian:bookworm\"\n",
    )
    .unwrap();
    ws
}

#[test]
fn terminal_bench_2_shapes_validate() {
    if !root() {
        eprintln!("SKIP: building images and verifier environments (apt-get, pip) needs root");
        return;
    }
    let ws = workspace();
    let store = endless::images::ImageStore::new(&endless::sandbox::local::image_store_dir(
        &ws.join(".cache/endless/sandbox"),
    ));
    if store.list().is_empty() {
        endless::images::register_rootfs(&store, "local/debian:bookworm", &debian_base_tar())
            .unwrap();
    }
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-tb2");
    let out = endless(&ws, &["tasks", "import", corpus.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = endless(&ws, &["tasks", "validate", "--all", "--json"]);
    let verdicts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let verdicts = verdicts.as_array().unwrap();
    assert_eq!(verdicts.len(), TASKS.len(), "{verdicts:#?}");
    let mut failed = Vec::new();
    for (task, defect) in TASKS {
        let v = verdicts
            .iter()
            .find(|v| v["id"] == *task)
            .unwrap_or_else(|| panic!("{task}: {verdicts:#?}"));
        let valid = v["ok"] == true
            && v["validation"]["oracle_passes"] == true
            && v["validation"]["final_fails_initially"] == true;
        if !valid {
            failed.push(format!("{task} (defect {defect}): {v:#}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
