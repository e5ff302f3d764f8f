//! Stand-in bases (`endless images stand-ins`), built from Debian's archive
//! and PyPI only: uv's image from its wheel, a `python:3.13-slim-bookworm`
//! stand-in with pip usable without PEP 668, and a task written for both
//! (`COPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /bin/`) that builds and
//! runs on them (pip upgrading itself, `Python.h` where the python images
//! have it), its base note naming the stand-in. The store lives under
//! `target/tmp` (the shared test cache), so only a first run builds.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use endless::images::{build_stand_ins, ImageRef, ImageStore};
use endless::sandbox::local::{image_store_dir, LocalBackend};
use endless::sandbox::{Backend, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};

mod support;
use support::cli::endless;

const T: Duration = Duration::from_secs(60);

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The cache shared by these tests and their reruns.
fn cache() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stand-ins-cache");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn store() -> ImageStore {
    ImageStore::new(&image_store_dir(&cache()))
}

#[test]
fn the_uv_stand_in_holds_uv_and_uvx_from_the_wheel() {
    let store = store();
    let reports = build_stand_ins(
        &store,
        &["ghcr.io/astral-sh/uv:0.8.14".into()],
        "http://deb.debian.org/debian",
        &|_| {},
    )
    .expect("PyPI is reachable and has uv 0.8.14");
    assert_eq!(reports[0].name, "localhost/stand-in/uv:0.8.14");
    let image = store
        .get(&ImageRef::parse("localhost/stand-in/uv:0.8.14").unwrap())
        .unwrap();
    assert_eq!(image.layers.len(), 1);
    let dirs = store
        .layer_dirs(&image, endless::images::LayerOwners::OURS)
        .unwrap();
    let uv = dirs[0].join("uv");
    assert!(dirs[0].join("uvx").is_file());
    let out = Command::new(&uv).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(version.starts_with("uv 0.8.14"), "{version}");
    // The record serves the reference; a second run builds nothing.
    let (stand_in, _) = store
        .stand_in(&ImageRef::parse("ghcr.io/astral-sh/uv:0.8.14").unwrap())
        .unwrap();
    assert_eq!(stand_in.name, "localhost/stand-in/uv:0.8.14");
    let again = build_stand_ins(
        &store,
        &["ghcr.io/astral-sh/uv:0.8.14".into()],
        "http://deb.debian.org/debian",
        &|_| panic!("nothing to build"),
    )
    .unwrap();
    assert!(!again[0].built);
}

#[test]
fn unknown_versions_are_clear_errors_listing_what_exists() {
    let ws = tempfile::tempdir().unwrap();
    for bad in ["python:3.8-slim", "ubuntu:20.04", "alpine:3.20"] {
        let out = endless(ws.path(), &["images", "stand-ins", "--only", bad]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("has no stand-in") && err.contains("python:3.9 to python:3.14"),
            "{bad}: {err}"
        );
    }
}

fn task(dockerfile: &str) -> Task {
    let mut task = Task {
        meta: TaskMeta::default(),
        instruction: "nothing".into(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    task.meta.task.id = "on-stand-ins".into();
    task.environment.insert_text("Dockerfile", dockerfile);
    task
}

#[test]
fn a_python_task_with_uv_copied_in_builds_on_the_stand_ins() {
    if !root() {
        eprintln!("SKIP: builds with pip install need root (pasta networking for builds)");
        return;
    }
    let store = store();
    build_stand_ins(
        &store,
        &[
            "python:3.13-slim-bookworm".into(),
            "ghcr.io/astral-sh/uv:0.8.14".into(),
        ],
        "http://deb.debian.org/debian",
        &|line| eprintln!("{line}"),
    )
    .expect("Debian's archive and PyPI are reachable");
    let settings = endless::config::ImagesConfig {
        pull: endless::config::PullPolicy::Never,
        fallback: endless::config::BaseFallback::Error,
        ..Default::default()
    };
    let backend = LocalBackend::new(&cache()).unwrap().with_images(settings);
    let task = task(
        "FROM python:3.13-slim-bookworm\n\
         COPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /bin/\n\
         RUN pip install --no-cache-dir six==1.16.0\n\
         RUN pip install --no-cache-dir --upgrade 'pip>=25'\n",
    );
    let image = backend
        .prepare(&task)
        .expect("pip installs without --break-system-packages");
    let note = image.base_note.clone().unwrap_or_default();
    assert!(
        note.contains("stand-in localhost/stand-in/python:3.13-slim")
            && note.contains("trixie instead of bookworm"),
        "{note}"
    );
    let mut s = backend.start(&image, &SessionOptions::default()).unwrap();
    let out = s
        .exec(
            "python --version; pip --version | cut -c1-4; uv --version; python -c 'import six; print(six.__version__)'; ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>&1 | grep -c 'No such'; \
             python -c 'import sysconfig, os; print(os.path.isfile(sysconfig.get_paths()[\"include\"] + \"/Python.h\"))'; \
             python -c 'import pip; print(int(pip.__version__.split(\".\")[0]) >= 25)'",
            T,
        )
        .unwrap()
        .output;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("Python 3.13."), "{out}");
    assert_eq!(lines[1], "pip ", "{out}");
    assert!(lines[2].starts_with("uv 0.8.14"), "{out}");
    assert_eq!(lines[3], "1.16.0", "{out}");
    assert_eq!(lines[4], "1", "{out}");
    // The headers (`Python.h`, for `build_ext`) and a pip that upgraded
    // itself (Debian's refuses: `Cannot uninstall pip ... installed by
    // debian`), as in the python images.
    assert_eq!(lines[5], "True", "{out}");
    assert_eq!(lines[6], "True", "{out}");
    s.close();
}
