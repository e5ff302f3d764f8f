//! Issue 52's defects, through the real `endless` binary: each task of
//! `tests/fixtures/harbor-tb2` is the smallest Harbor task reproducing one
//! Terminal-Bench 2 failure (a `/tests` the tests write into, a solution
//! shipping more files than `solve.sh`, a session writing more than 1 GiB,
//! an `ARG` default used by a later `RUN`, a namespace-only `setuptools` in
//! the image the verifier environment is built from, a test script running
//! pytest twice, a test script that needs Docker's root capabilities), and
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
    ("root-capabilities", 1),
    ("agent-packages", 3),
];

/// The kept workspace (see [`support::caches::workspace`]), with the
/// Harbor images served by the Debian base.
fn workspace() -> PathBuf {
    support::caches::workspace(
        "harbor-tb2-ws",
        "\n[images.aliases]\n\"ubuntu:24.04\" = \"local/debian:bookworm\"\n\
         \"python:3.13-slim-bookworm\" = \"local/debian:bookworm\"\n",
    )
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

/// Defect 5: an image a task only copies from (`COPY --from=` uv's image) is
/// one of the task's images, so `images stand-ins` builds its stand-in and
/// `images list` names the task beside it. (uv's image stands for itself
/// here, aliased to a stored one-file image: no network.)
#[test]
fn an_image_used_only_in_copy_from_is_one_of_the_tasks_images() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join("endless.toml"),
        "[images]\npull = \"never\"\nfallback = \"error\"\n\n\
         [images.aliases]\n\"ghcr.io/astral-sh/uv:0.8.14\" = \"local/uv:0.8.14\"\n",
    )
    .unwrap();
    let rootfs = tmp.path().join("uv.tar");
    let mut tar = tar::Builder::new(std::fs::File::create(&rootfs).unwrap());
    let mut header = tar::Header::new_gnu();
    header.set_size(3);
    header.set_mode(0o755);
    header.set_cksum();
    tar.append_data(&mut header, "uv", &b"uv\n"[..]).unwrap();
    tar.finish().unwrap();
    drop(tar);
    let store = endless::images::ImageStore::new(&endless::sandbox::local::image_store_dir(
        &ws.join(".cache/endless/sandbox"),
    ));
    endless::images::register_rootfs(&store, "local/uv:0.8.14", &rootfs).unwrap();
    let task = tmp.path().join("corpus/copies-uv");
    for (path, text) in [
        ("instruction.md", "Nothing."),
        (
            "environment/Dockerfile",
            "FROM debian:bookworm\nCOPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /bin/\n",
        ),
        (
            "tests/test.sh",
            "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
        ),
        ("solution/solve.sh", "#!/bin/bash\ntrue\n"),
        ("task.toml", "version = \"1.0\"\n"),
    ] {
        std::fs::create_dir_all(task.join(path).parent().unwrap()).unwrap();
        std::fs::write(task.join(path), text).unwrap();
    }
    let out = endless(
        &ws,
        &[
            "tasks",
            "import",
            tmp.path().join("corpus").to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = endless(&ws, &["images", "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let uv = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["reference"] == "docker.io/local/uv:0.8.14")
        .unwrap_or_else(|| panic!("{rows:#}"));
    assert_eq!(uv["tasks"], serde_json::json!(["copies-uv"]), "{rows:#}");
}
