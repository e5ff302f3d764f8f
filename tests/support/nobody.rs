//! Running a test again as uid 65534 (nobody), for the rootless paths of
//! the sandbox: the test binary is copied where that user can run it and
//! re-executed through `setpriv` with one test selected.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

/// The uid (and gid) the inner run has.
pub const NOBODY: u32 = 65_534;

/// Re-run test `name` of this test binary as uid 65534, with `inner` set in
/// its environment (so it knows it is the inner run), and check that it ran
/// and passed; prints a SKIP line where user namespaces are unavailable to
/// that user. One at a time: without writable cgroups the rootless sandbox
/// falls back to rlimits, which count every process of the user (a fork
/// bomb in one run would starve another).
pub fn rerun(name: &str, inner: &str) {
    rerun_between(name, inner, || {}, || {});
}

/// [`rerun`], with `before` run ahead of it and `after` once it is over
/// (also when it fails), while no other rerun can start: for a change of
/// the host (such as cgroups handed to uid 65534) that only this run may see.
pub fn rerun_between(name: &str, inner: &str, before: impl FnOnce(), after: impl FnOnce()) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    before();
    let outcome = std::panic::catch_unwind(|| rerun_now(name, inner));
    after();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

fn rerun_now(name: &str, inner: &str) {
    let dir = tempfile::Builder::new()
        .prefix("endless-nobody-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("test-binary");
    runnable_copy(&std::env::current_exe().unwrap(), &exe);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    let probe = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "unshare",
            "-U",
            "true",
        ])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("SKIP as uid 65534: unprivileged user namespaces are not available here");
        return;
    }
    let run = || {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
            ])
            .arg(&exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &home)
            .env(inner, "1")
            .current_dir(&home)
            .output()
            .unwrap()
    };
    // A child forked by another test's thread while the copy was open for
    // writing holds it until that child execs (sandbox set-up can take a
    // while): the exec then fails with ETXTBSY. Try again shortly.
    let mut out = run();
    for _ in 0..20 {
        if !String::from_utf8_lossy(&out.stderr).contains("Text file busy") {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        out = run();
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "as uid 65534:\n{text}");
    assert!(
        text.contains("1 passed"),
        "as uid 65534, the test did not run:\n{text}"
    );
}

/// Put `exe` at `to` for another user to run: a hard link where both are on
/// one file system (nothing of ours holds it open for writing, which would
/// make a child forked meanwhile by another thread fail to run it with
/// "Text file busy"), else a copy made by `cp`, for the same reason.
pub fn runnable_copy(exe: &std::path::Path, to: &std::path::Path) {
    if std::fs::hard_link(exe, to).is_err() {
        let status = Command::new("cp").arg(exe).arg(to).status().unwrap();
        assert!(status.success(), "cp {} {}", exe.display(), to.display());
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}
