//! Issue 31's sealed verifier environment, through the real `endless`
//! binary: the Harbor tasks of `tests/fixtures/harbor-verifier` (Terminal-
//! Bench 2's `test.sh` shapes: `uvx -p 3.13 -w numpy==... pytest`, tests
//! reading `/tests/<file>`, a test.sh-only reward in `reward.json`) import
//! with their test dependencies in `[verifier]`, and `tasks validate` passes
//! them: their tests import numpy and PyYAML from an environment built from
//! Debian and PyPI, never from the image (which has neither). A second
//! validation takes the environments from the cache. A test.sh line the
//! parser cannot read fails the import, naming the file and the line.
//!
//! The workspace's cache lives under `target/tmp` (like the Debian base), so
//! a rerun downloads nothing.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::{Path, PathBuf};
use std::time::Instant;

mod support;
use support::cli::{endless, json};
use support::registry::debian_base_tar;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The kept workspace (see [`support::caches::workspace`]), with the
/// Harbor images served by the Debian base.
fn workspace() -> PathBuf {
    support::caches::workspace(
        "verifier-env-ws",
        "\n[images.aliases]\n\"ubuntu:24.04\" = \"local/debian:bookworm\"\n\
         \"python:3.13-slim-bookworm\" = \"local/debian:bookworm\"\n",
    )
}

/// The fixtures that must fail validation, each with the one class
/// `tasks validate` must report (`validation.failure_classes`).
const CLASSES: &[(&str, &str)] = &[
    ("class-build-network", "build-network"),
    ("class-package-not-found", "build-package-not-found"),
    ("class-missing-module", "tests-missing-module"),
    ("class-missing-file", "tests-missing-file"),
    ("class-oracle-fails", "oracle-fails"),
    ("class-passes-initially", "final-passes-initially"),
];

/// The verdicts `tasks validate --json` printed (it fails: some fixtures
/// are meant to be invalid).
fn verdicts(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The `[verifier]` section of the imported task `id`.
fn verifier_of(ws: &Path, id: &str) -> serde_json::Value {
    json(&endless(ws, &["tasks", "show", id, "--json"]))["verifier"].clone()
}

#[test]
fn harbor_tests_run_in_a_sealed_environment_built_from_debian_and_pypi() {
    if !root() {
        eprintln!("SKIP: building verifier environments (apt-get, pip) needs root (a mapped user namespace with pasta)");
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
    // `uv-copy` copies uv from its image: the stand-in serves it (built from
    // the PyPI wheel once; later runs find it in the cache).
    let out = endless(
        &ws,
        &[
            "images",
            "stand-ins",
            "--only",
            "ghcr.io/astral-sh/uv:0.8.14",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Import: test.sh becomes the final tests plus what they import.
    let out = endless(
        &ws,
        &[
            "tasks",
            "import",
            fixtures("harbor-verifier").to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let numpy = verifier_of(&ws, "numpy-stats");
    assert_eq!(numpy["python"].as_str(), Some("3.13"), "{numpy:#}");
    let packages: Vec<&str> = numpy["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        packages,
        ["numpy==2.3.3", "pytest==8.4.1", "pytest-json-ctrf==0.3.5"]
    );
    assert_eq!(numpy["final_tests"][0].as_str(), Some("test_outputs.py"));
    // Its pytest options are kept for the verifier's pytest (ctrf's report
    // then needs its plugin, loaded from the environment).
    assert_eq!(
        numpy["pytest_args"],
        serde_json::json!(["--ctrf", "/logs/verifier/ctrf.json"]),
        "{numpy:#}"
    );
    let script = verifier_of(&ws, "reward-json");
    assert_eq!(script["script"].as_str(), Some("test.sh"), "{script:#}");
    assert!(script.get("packages").is_none(), "{script:#}");
    // A test.sh computing its reward with numpy: still a script, with
    // numpy in its environment (the image has neither Python nor numpy).
    let sealed_script = verifier_of(&ws, "script-numpy");
    assert_eq!(
        sealed_script["script"].as_str(),
        Some("test.sh"),
        "{sealed_script:#}"
    );
    assert_eq!(
        sealed_script["packages"][0].as_str(),
        Some("numpy==2.3.3"),
        "{sealed_script:#}"
    );

    // Validate twice: the oracles pass, the final tests fail initially.
    let t0 = Instant::now();
    let first = verdicts(&endless(&ws, &["tasks", "validate", "--all", "--json"]));
    let cold = t0.elapsed();
    let t1 = Instant::now();
    let second = verdicts(&endless(&ws, &["tasks", "validate", "--all", "--json"]));
    let warm = t1.elapsed();
    eprintln!("validation: first {cold:.1?}, second {warm:.1?}");
    for verdicts in [&first, &second] {
        let verdicts = verdicts.as_array().unwrap();
        assert_eq!(verdicts.len(), 8 + CLASSES.len(), "{verdicts:#?}");
        for v in verdicts {
            let id = v["id"].as_str().unwrap();
            if let Some((_, class)) = CLASSES.iter().find(|(t, _)| *t == id) {
                // Each failing task is reported as its class.
                assert_eq!(v["ok"], false, "{v:#}");
                assert_eq!(
                    v["validation"]["failure_classes"],
                    serde_json::json!([class]),
                    "{id}: {v:#}"
                );
                continue;
            }
            assert_eq!(v["ok"], true, "{v:#}");
            assert_eq!(v["validation"]["oracle_passes"], true, "{v:#}");
            assert_eq!(v["validation"]["final_fails_initially"], true, "{v:#}");
            assert!(v["validation"].get("failure_classes").is_none(), "{v:#}");
        }
    }
    // Harbor's network rules: `allow_internet = true` (also the default)
    // gives the oracle PyPI; `--offline` takes it away, and the oracle that
    // pip-installs fails (the task still runs: it is not refused): it
    // needed the network, which its first blocker says (pip names no
    // host, so none is named).
    let shown = json(&endless(
        &ws,
        &["tasks", "show", "oracle-pip-install", "--json"],
    ));
    assert_eq!(
        shown["environment"]["settings"]["network"], true,
        "{shown:#}"
    );
    let offline = verdicts(&endless(
        &ws,
        &[
            "tasks",
            "validate",
            "oracle-pip-install",
            "--offline",
            "--json",
        ],
    ));
    let v = &offline[0];
    assert_eq!(v["ok"], false, "{v:#}");
    assert_eq!(v["validation"]["oracle_passes"], false, "{v:#}");
    assert_eq!(
        v["validation"]["failure_classes"],
        serde_json::json!(["tests-network"]),
        "{v:#}"
    );
    let blocker = &v["validation"]["blocker"];
    assert_eq!(blocker["class"], "tests-network", "{v:#}");
    assert!(blocker.get("host").is_none(), "{v:#}");
    assert!(
        blocker["line"]
            .as_str()
            .is_some_and(|l| l.contains("name resolution")),
        "{v:#}"
    );
    // The table names the class too.
    let out = endless(&ws, &["tasks", "validate", "class-oracle-fails"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("invalid class-oracle-fails [oracle-fails]:"),
        "{stdout}"
    );
    let by_id = |id: &str| {
        first
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["validation"]["task_id"] == id)
            .unwrap_or_else(|| panic!("{id}: {first:#}"))
            .clone()
    };
    // The tests ran in the environment: numpy came from it, and the
    // asked-for Python 3.13 is served by bookworm's 3.11, with a note.
    let numpy = by_id("numpy-stats");
    let oracle = &numpy["validation"]["oracle"];
    let names: Vec<&str> = oracle["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with("test_stats_match_numpy")),
        "{oracle:#}"
    );
    let notes = numpy["validation"]["notes"].to_string();
    assert!(
        notes.contains("verifier environment") && notes.contains("Python 3.13"),
        "{notes}"
    );
    assert!(
        oracle["output"]
            .as_str()
            .unwrap()
            .contains("asked for Python 3.13"),
        "{oracle:#}"
    );
    // The script ran with the environment's python3 first on PATH.
    let script = by_id("script-numpy");
    assert!(
        script["validation"]["oracle"]["verifier"]
            .to_string()
            .contains("sealed verifier environment"),
        "{script:#}"
    );

    // The environment lives beside its image, built once.
    let image = numpy["validation"]["image"].as_str().unwrap();
    let envs = ws
        .join(".cache/endless/sandbox/local/images")
        .join(image)
        .join("verifier-envs");
    let built: Vec<_> = std::fs::read_dir(&envs)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(built.len(), 1, "{envs:?}");
    assert!(
        built[0].path().join("site/numpy").is_dir(),
        "{:?}",
        built[0].path()
    );
    assert!(
        warm < cold || cold.as_secs() < 30,
        "the second validation builds nothing: {warm:?} vs {cold:?}"
    );

    // A line the parser cannot read: the import names the file and the line.
    let out = endless(
        &ws,
        &[
            "tasks",
            "import",
            fixtures("harbor-verifier-refused").to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tests/test.sh") && stderr.contains("line 3") && stderr.contains("-r"),
        "{stderr}"
    );
    // A pytest option that would change the verdict: refused at import,
    // with the file and the line.
    let out = endless(
        &ws,
        &[
            "tasks",
            "import",
            fixtures("harbor-verifier-refused-options")
                .to_str()
                .unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tests/test.sh")
            && stderr.contains("line 4")
            && stderr.contains("`-p` is refused"),
        "{stderr}"
    );
}
