//! Issue 52's "what a curator sees", through the real `endless` binary:
//! each task of `tests/fixtures/harbor-blockers` fails validation on a
//! different first blocker, and `tasks validate --json` names it (the
//! host a test script or a build step could not reach, the stand-in and
//! what it lacks), the stored verdict keeps it, and `tasks validate
//! --stored` groups the invalid tasks by it.
//!
//! `ubuntu:24.04` is served by a stand-in: a Debian bookworm base
//! registered under the stand-in's name. The workspace's cache lives under
//! `target/tmp`, so a rerun builds only what failed.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::{Path, PathBuf};

mod support;
use support::cli::endless;
use support::registry::debian_base_tar;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The kept workspace (see [`support::caches::workspace`]).
fn workspace() -> PathBuf {
    support::caches::workspace("validate-blockers-ws", "")
}

/// Register the Debian base as the stand-in for `ubuntu:24.04`.
fn stand_in_for_ubuntu(ws: &Path) {
    let store = endless::images::ImageStore::new(&endless::sandbox::local::image_store_dir(
        &ws.join(".cache/endless/sandbox"),
    ));
    let ubuntu = endless::images::ImageRef::parse("ubuntu:24.04").unwrap();
    if store.stand_in(&ubuntu).is_some() {
        return;
    }
    let stand_in = endless::images::stand_in_for(&ubuntu).unwrap().unwrap();
    endless::images::register_rootfs(&store, &stand_in.name, &debian_base_tar()).unwrap();
    store.record_stand_in(&stand_in).unwrap();
}

#[test]
fn each_failing_task_names_its_first_blocker() {
    if !root() {
        eprintln!("SKIP: building images and running sessions needs root");
        return;
    }
    let ws = workspace();
    stand_in_for_ubuntu(&ws);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-blockers");
    let out = endless(&ws, &["tasks", "import", corpus.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = endless(&ws, &["tasks", "validate", "--all", "--json"]);
    assert!(!out.status.success());
    let verdicts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let blocker = |id: &str| {
        let v = verdicts
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {verdicts:#}"));
        assert_eq!(v["ok"], false, "{v:#}");
        (v["validation"]["blocker"].clone(), v.to_string())
    };
    // test.sh fetches a file; the task has no network.
    let (b, v) = blocker("tests-need-host");
    assert_eq!(b["class"], "tests-network", "{v}");
    assert_eq!(b["host"], "deb.debian.org", "{v}");
    assert!(
        b["line"].as_str().unwrap().contains("deb.debian.org"),
        "{v}"
    );
    // A build step downloads from a host that never resolves.
    let (b, v) = blocker("build-needs-host");
    assert_eq!(b["class"], "build-network", "{v}");
    assert_eq!(b["host"], "unreachable.endless.invalid", "{v}");
    // An Ubuntu version pin on the Debian stand-in.
    let (b, v) = blocker("ubuntu-pin");
    assert_eq!(b["class"], "stand-in-difference", "{v}");
    assert_eq!(b["stand_in"], "localhost/stand-in/debian:trixie", "{v}");
    assert_eq!(
        b["difference"], "version r-base-core=4.3.3-2build2 is not in its archive",
        "{v}"
    );
    assert!(b.get("host").is_none(), "{v}");

    // The stored verdicts keep them: `--stored` groups the tasks by class.
    let out = endless(&ws, &["tasks", "validate", "--all", "--stored"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "        tests-need-host: first blocker: tests-network: deb.debian.org cannot be reached",
        "invalid tasks by first blocker:",
        "  build-network: 1 task\n    build-needs-host: unreachable.endless.invalid cannot be reached",
        "  stand-in-difference: 1 task\n    ubuntu-pin: stand-in localhost/stand-in/debian:trixie: version r-base-core=4.3.3-2build2 is not in its archive",
        "  tests-network: 1 task\n    tests-need-host: deb.debian.org cannot be reached",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in:\n{stdout}");
    }
}
