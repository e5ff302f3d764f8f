//! A throwaway non-root account, with or without a subordinate id range in
//! `/etc/subuid` and `/etc/subgid`, for tests of rootless sandboxes: made
//! with `useradd` (as root; the tests skip with a printed reason otherwise),
//! removed with `userdel` when dropped, and commands run as it through
//! `setpriv` with a home of its own.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How many ids the range holds (what a rootless sandbox maps besides root).
pub const RANGE: u32 = 65_536;

/// A throwaway account (see the module docs).
pub struct RangeUser {
    /// Its name.
    pub name: String,
    /// Its uid and gid.
    pub ids: (u32, u32),
    /// The first host uid (and gid) of its range, if it has one.
    pub range_start: Option<u32>,
    /// Its home (where its caches and workspaces go).
    pub home: PathBuf,
    /// Holds the home and a copy of the binary it runs.
    dir: tempfile::TempDir,
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// `useradd` and `usermod` lock the account files; tests of one binary
/// take turns, and a lock held by another binary is waited for.
fn run_locked(mut make: impl FnMut() -> Command) -> Result<(), String> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut last = String::new();
    for _ in 0..40 {
        match run(&mut make()) {
            Ok(()) => return Ok(()),
            Err(e) if e.contains("lock") => {
                last = e;
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

impl RangeUser {
    /// A new account, with a range of [`RANGE`] ids when `with_range`;
    /// `None` (after printing why) where the test cannot make one.
    pub fn create(with_range: bool) -> Option<RangeUser> {
        if !root() {
            eprintln!("SKIP: making a throwaway user with a subordinate range needs root");
            return None;
        }
        for tool in ["useradd", "usermod", "userdel", "setpriv", "newuidmap"] {
            let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
                .iter()
                .any(|d| Path::new(d).join(tool).is_file());
            if !found {
                eprintln!("SKIP: `{tool}` is not installed (scripts/setup.sh installs it)");
                return None;
            }
        }
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("endl{}x{n}", std::process::id());
        let dir = tempfile::Builder::new()
            .prefix("endless-range-user-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = dir.path().join("home");
        run_locked(|| {
            let mut c = Command::new("useradd");
            // No range from login.defs: the test decides.
            c.args(["-M", "-U", "-s", "/bin/bash", "-K", "SUB_UID_COUNT=0"])
                .args(["-K", "SUB_GID_COUNT=0", "-d"])
                .arg(&home)
                .arg(&name);
            c
        })
        .unwrap();
        let ids = (id_of(&name, "-u"), id_of(&name, "-g"));
        let mut user = RangeUser {
            name,
            ids,
            range_start: None,
            home,
            dir,
        };
        // Its temporary files (a sandbox stage, `$TMPDIR/endless-mnt-<uid>`)
        // go with its home.
        for dir in [user.home.clone(), user.home.join("tmp")] {
            std::fs::create_dir(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(ids.0), Some(ids.1)).unwrap();
        }
        if with_range {
            // `usermod --add-subuids` refuses to start the files.
            for file in ["/etc/subuid", "/etc/subgid"] {
                if !Path::new(file).exists() {
                    std::fs::write(file, "").unwrap();
                    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
                }
            }
            // Far above real accounts, the ranges `useradd` hands out and
            // the root operator's default (1e9): one slot per uid.
            let start = 1_200_000_000 + (ids.0 % 16_384) * RANGE;
            let range = format!("{start}-{}", start + RANGE - 1);
            run_locked(|| {
                let mut c = Command::new("usermod");
                c.args(["--add-subuids", &range, "--add-subgids", &range])
                    .arg(&user.name);
                c
            })
            .unwrap();
            user.range_start = Some(start);
        }
        Some(user)
    }

    /// `program args...` as this user (no capabilities, no other groups),
    /// with only `PATH`, `HOME`, `USER` and `TMPDIR` (in its home) set and
    /// its home as working directory.
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.ids.0))
            .arg(format!("--regid={}", self.ids.1))
            .args(["--clear-groups", "--inh-caps=-all", "--"])
            .arg(program)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("TMPDIR", self.home.join("tmp"))
            .current_dir(&self.home);
        cmd
    }

    /// A copy of `exe` this user may run (the original may be under a
    /// directory only root can enter).
    pub fn readable_copy(&self, exe: &Path) -> PathBuf {
        let copy = self.dir.path().join(exe.file_name().unwrap());
        if !copy.exists() {
            super::nobody::runnable_copy(exe, &copy);
        }
        copy
    }

    /// The host uid of id `inside` of its sandboxes (with a range: the
    /// range's id `inside`; without, the user for root).
    pub fn host_uid(&self, inside: u32) -> u32 {
        match (inside, self.range_start) {
            (id, Some(start)) => start + id,
            (0, None) => self.ids.0,
            (id, None) => id,
        }
    }
}

fn id_of(name: &str, flag: &str) -> u32 {
    let out = Command::new("id").args([flag, name]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

impl Drop for RangeUser {
    fn drop(&mut self) {
        // What its runs left behind goes first (a verifier still warming up
        // would write into the home after it is removed; podman, which
        // `sandbox doctor` asks, keeps a pause process), or `userdel`
        // refuses a user in use. `userdel` drops its lines of /etc/subuid
        // and /etc/subgid too; its sandboxes' files (owned by range ids) go
        // with the tempdir, removed as root after this.
        let uid = self.ids.0.to_string();
        for _ in 0..50 {
            let _ = Command::new("pkill").args(["-KILL", "-U", &uid]).status();
            let alive = Command::new("pgrep").args(["-U", &uid]).output();
            if alive.is_ok_and(|o| o.stdout.is_empty()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let deleted = run_locked(|| {
            let mut c = Command::new("userdel");
            c.arg(&self.name);
            c
        });
        if let Err(e) = deleted {
            eprintln!("userdel {}: {e}", self.name);
        }
    }
}

/// Re-run test `name` of this test binary as a throwaway user with a
/// range (the third identity of the attack suite, beside root and uid
/// 65534), with `inner` set in its environment; check that it ran and
/// passed. Prints a SKIP line where no such user can be made. One at a
/// time, as [`super::nobody::rerun`], all as one user made on first use
/// (so its image cache is shared, as uid 65534's is), removed with what its
/// sandboxes left (owned by range ids) when the test binary exits.
pub fn rerun(name: &str, inner: &str) {
    static SHARED: std::sync::Mutex<Option<RangeUser>> = std::sync::Mutex::new(None);
    extern "C" fn remove_shared() {
        let user = SHARED.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(user);
    }
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if shared.is_none() {
        let Some(user) = RangeUser::create(true) else {
            return;
        };
        *shared = Some(user);
        // SAFETY: registers a plain function, run once at exit.
        unsafe { libc::atexit(remove_shared) };
    }
    let Some(user) = shared.as_ref() else {
        return;
    };
    let exe = user.readable_copy(&std::env::current_exe().unwrap());
    let out = user
        .command(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(inner, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "as {} (with a range):\n{text}",
        user.name
    );
    assert!(
        text.contains("1 passed"),
        "as {} (with a range), the test did not run:\n{text}",
        user.name
    );
    assert!(
        text.contains("sandbox identity: rootless with subordinate ids"),
        "as {} (with a range), sandboxes did not use the range:\n{text}",
        user.name
    );
}
