//! User namespaces for sessions and builds started by root, or by a user
//! with subordinate ids ([`SubIds`]).
//!
//! Root inside a sandbox must never be root outside. When `endless` runs as
//! root, every session and every image build gets its own user namespace in
//! which ids `0..count` map to the unprivileged host ids `base..base+count`
//! (a subordinate range, see [`IdMap::for_host`]). Capabilities held inside
//! such a namespace grant nothing over host objects, and host files whose
//! owners are not mapped (everything owned by host root) are out of reach.
//!
//! A process cannot write a multi-id map for a namespace it created itself,
//! so the namespace is made by a short-lived forked helper whose maps we,
//! still host root, write; we keep a file descriptor to the namespace and
//! let the helper go. The sandbox's child enters it with
//! `setns` after doing its (host-privileged) mounts.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::sandbox::fds::check;
use crate::sandbox::SandboxError;

/// Ids mapped into each namespace (enough for every account of a Debian image).
pub const MAPPED_IDS: u32 = 65_536;

/// The first host id of the default range, used when `/etc/subuid` names none
/// for the `endless` or `root` account: far above real accounts and the
/// ranges `useradd` hands out (100000 upwards in steps of 65536).
pub const DEFAULT_BASE: u32 = 1_000_000_000;

/// How inside ids map to host ids: inside `0..count` is host `base..base+count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct IdMap {
    /// Host id of inside id 0.
    pub base: u32,
    /// Number of ids mapped.
    pub count: u32,
    /// Where the range came from (`/etc/subuid` or the default).
    #[serde(skip)]
    pub source: &'static str,
}

impl IdMap {
    /// The range for this host: `ENDLESS_SANDBOX_ID_BASE`, else the first
    /// range of at least `MAPPED_IDS` ids that `/etc/subuid` gives the
    /// `endless` or `root` account (and `/etc/subgid` the same), else
    /// `DEFAULT_BASE`.
    pub fn for_host() -> IdMap {
        if let Some(base) = std::env::var("ENDLESS_SANDBOX_ID_BASE")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|b| *b > 0 && b.checked_add(MAPPED_IDS).is_some())
        {
            return IdMap {
                base,
                count: MAPPED_IDS,
                source: "ENDLESS_SANDBOX_ID_BASE",
            };
        }
        let uids = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
        let gids = std::fs::read_to_string("/etc/subgid").unwrap_or_default();
        for user in ["endless", "root"] {
            if let Some(base) = subordinate_start(&uids, user) {
                if subordinate_start(&gids, user) == Some(base) {
                    return IdMap {
                        base,
                        count: MAPPED_IDS,
                        source: "/etc/subuid",
                    };
                }
            }
        }
        IdMap {
            base: DEFAULT_BASE,
            count: MAPPED_IDS,
            source: "default",
        }
    }

    /// The host id of inside id `id` (ids past the range stay as they are,
    /// which only happens for unmapped ids).
    pub fn host(&self, id: u32) -> u32 {
        if id < self.count {
            self.base + id
        } else {
            id
        }
    }

    /// The `uid_map` / `gid_map` line.
    pub fn map_line(&self) -> String {
        format!("0 {} {}\n", self.base, self.count)
    }

    /// Create a user namespace with this map; the returned descriptor keeps
    /// it alive. Needs root (`CAP_SETUID`/`CAP_SETGID` on the host).
    pub fn create_namespace(&self) -> Result<OwnedFd, SandboxError> {
        new_namespace(|pid| {
            for file in ["uid_map", "gid_map"] {
                let path = format!("/proc/{pid}/{file}");
                std::fs::write(&path, self.map_line().as_bytes())
                    .map_err(SandboxError::io("write the user namespace's id map", &path))?;
            }
            Ok(())
        })
    }
}

/// A user namespace made by a forked helper whose maps `write_maps` writes
/// (given the helper's pid); the returned descriptor keeps it alive.
fn new_namespace(
    write_maps: impl FnOnce(i32) -> Result<(), SandboxError>,
) -> Result<OwnedFd, SandboxError> {
    let (ready_r, ready_w) = pipe()?;
    // SAFETY: the child only makes async-signal-safe calls (unshare,
    // write, pause, _exit) before it is killed.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SandboxError::Start(format!(
            "fork the user-namespace helper: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        // SAFETY: see above; this process never returns.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER) < 0 {
                libc::_exit(1);
            }
            libc::write(ready_w.as_raw_fd(), b"x".as_ptr().cast(), 1);
            loop {
                libc::pause();
            }
        }
    }
    drop(ready_w);
    let result = (|| {
        let mut byte = [0u8; 1];
        let mut ready = File::from(ready_r);
        if std::io::Read::read(&mut ready, &mut byte).unwrap_or(0) != 1 {
            return Err(SandboxError::Start(
                "the user-namespace helper could not create a namespace".into(),
            ));
        }
        write_maps(pid)?;
        let ns = format!("/proc/{pid}/ns/user");
        let file = File::open(&ns).map_err(SandboxError::io("open user namespace", &ns))?;
        Ok(OwnedFd::from(file))
    })();
    // SAFETY: kill and reap the helper we forked.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    result
}

/// The subordinate ids of an operator who is not root (podman's rootless
/// mapping): inside id 0 is the operator's own uid and gid, inside ids
/// `1..=MAPPED_IDS` are the first [`MAPPED_IDS`] ids of the operator's
/// ranges in `/etc/subuid` and `/etc/subgid`. The setuid helpers
/// `newuidmap` and `newgidmap` (Debian package `uidmap`) write the maps,
/// and leave `setgroups` allowed (`apt-get` drops to `_apt` with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubIds {
    /// The operator's uid (inside root).
    pub uid: u32,
    /// The operator's gid (inside root's group).
    pub gid: u32,
    /// Host uid of inside uid 1.
    pub uid_start: u32,
    /// Host gid of inside gid 1.
    pub gid_start: u32,
}

/// Where the setuid map writers are looked for (besides `PATH`).
const MAP_TOOLS_DIRS: [&str; 2] = ["/usr/bin", "/bin"];

/// The path of `newuidmap` or `newgidmap`, if installed.
pub fn map_tool(name: &str) -> Option<std::path::PathBuf> {
    MAP_TOOLS_DIRS
        .iter()
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
        .or_else(|| super::bwrap::which(name))
}

/// How an administrator grants the calling user the range that [`SubIds`]
/// needs.
pub fn grant_hint() -> String {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let user = user_name(uid).unwrap_or_else(|| uid.to_string());
    format!("usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}")
}

impl SubIds {
    /// The calling user's subordinate ids, or why there are none: no range
    /// of at least [`MAPPED_IDS`] ids in `/etc/subuid` and `/etc/subgid`
    /// (by name or uid), or no `newuidmap`/`newgidmap`.
    pub fn for_caller() -> Result<SubIds, String> {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let name = user_name(uid);
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let keys = [name.clone().unwrap_or_default(), uid.to_string()];
        let keys: Vec<&str> = keys
            .iter()
            .map(String::as_str)
            .filter(|k| !k.is_empty())
            .collect();
        let who = name.unwrap_or_else(|| uid.to_string());
        let uid_start = subordinate_range(&read("/etc/subuid"), &keys);
        let gid_start = subordinate_range(&read("/etc/subgid"), &keys);
        let (Some(uid_start), Some(gid_start)) = (uid_start, gid_start) else {
            return Err(format!(
                "user {who} has no range of {MAPPED_IDS} ids in both /etc/subuid and /etc/subgid"
            ));
        };
        for tool in ["newuidmap", "newgidmap"] {
            if map_tool(tool).is_none() {
                return Err(format!(
                    "`{tool}` is not installed (Debian/Ubuntu: `apt-get install uidmap`)"
                ));
            }
        }
        Ok(SubIds {
            uid,
            gid,
            uid_start,
            gid_start,
        })
    }

    /// The `newuidmap` and `newgidmap` arguments after the pid.
    fn map_args(&self) -> [(&'static str, [String; 6]); 2] {
        let args = |own: u32, start: u32| [0, own, 1, 1, start, MAPPED_IDS].map(|n| n.to_string());
        [
            ("newuidmap", args(self.uid, self.uid_start)),
            ("newgidmap", args(self.gid, self.gid_start)),
        ]
    }

    /// The host uid of inside uid `id` (ids past the range stay as they are).
    pub fn host_uid(&self, id: u32) -> u32 {
        match id {
            0 => self.uid,
            1..=MAPPED_IDS => self.uid_start + (id - 1),
            _ => id,
        }
    }

    /// Create a user namespace with this map (through `newuidmap` and
    /// `newgidmap`); the returned descriptor keeps it alive.
    pub fn create_namespace(&self) -> Result<OwnedFd, SandboxError> {
        new_namespace(|pid| {
            for (tool, args) in self.map_args() {
                let path = map_tool(tool).ok_or_else(|| SandboxError::ToolMissing {
                    tool: tool.into(),
                    hint: "install uidmap (Debian/Ubuntu: `apt-get install uidmap`)".into(),
                })?;
                let out = std::process::Command::new(&path)
                    .arg(pid.to_string())
                    .args(args)
                    .env_clear()
                    .output()
                    .map_err(SandboxError::io("run", &path))?;
                if !out.status.success() {
                    return Err(SandboxError::Start(format!(
                        "{tool} refused the subordinate ids of /etc/sub{}id: {}",
                        if tool == "newuidmap" { "u" } else { "g" },
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
            }
            Ok(())
        })
    }

    /// Run `argv` as the root of a fresh user namespace with this map
    /// (capabilities over every id of the range, none over the host's):
    /// for trees holding directories owned by range ids, which the
    /// operator cannot read, change or empty on the host.
    pub fn run_as_root(&self, argv: &[&std::ffi::OsStr]) -> Result<(), SandboxError> {
        let ns = self.create_namespace()?;
        let fd = ns.as_raw_fd();
        let mut cmd = std::process::Command::new(argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        // SAFETY: enter_as_root makes only async-signal-safe calls.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || enter_as_root(fd));
        }
        let what = argv[0].to_string_lossy().into_owned();
        let out = cmd
            .output()
            .map_err(SandboxError::io("run in the user namespace", &what))?;
        drop(ns);
        match out.status.success() {
            true => Ok(()),
            false => Err(SandboxError::Start(format!(
                "{} (as the sandbox's root): {}",
                argv.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }
}

/// The subordinate ids this process's sandboxes use, once a backend chose
/// them (see [`remove_with_range`]).
static IN_USE: std::sync::OnceLock<SubIds> = std::sync::OnceLock::new();

/// Note that this process's sandboxes map `ids` (a process has one caller,
/// so one mapping).
pub fn use_subordinate(ids: SubIds) {
    let _ = IN_USE.set(ids);
}

/// The subordinate ids in use in this process, if a backend chose them.
pub fn subordinate_in_use() -> Option<SubIds> {
    IN_USE.get().copied()
}

/// Remove `path` as the root of a namespace with the subordinate ids in
/// use, if any (`false`: none are, or that failed).
pub fn remove_with_range(path: &std::path::Path) -> bool {
    let Some(ids) = IN_USE.get() else {
        return false;
    };
    let os = std::ffi::OsStr::new;
    let argv = [os("rm"), os("-rf"), os("--"), path.as_os_str()];
    match ids.run_as_root(&argv) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("{e}");
            false
        }
    }
}

/// The name of the account with `uid`, if it has one.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: the buffers outlive the call; getpwuid_r is thread-safe.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: pw_name points into buf, NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// Which map a pooled namespace gets.
#[derive(Debug, Clone, Copy)]
pub enum Maps {
    /// Written by us as host root.
    Root(IdMap),
    /// Written by `newuidmap`/`newgidmap` for an operator who is not root.
    Subordinate(SubIds),
}

impl Maps {
    fn create(&self) -> Result<OwnedFd, SandboxError> {
        match self {
            Maps::Root(m) => m.create_namespace(),
            Maps::Subordinate(s) => s.create_namespace(),
        }
    }
}

/// Namespaces made ahead of time, off the session start's critical path
/// (making one waits for a helper process to be scheduled, which under load
/// costs milliseconds). Each is used once, by one session or build.
pub struct UsernsPool {
    map: Maps,
    ready: std::sync::Mutex<Vec<OwnedFd>>,
    refilling: std::sync::atomic::AtomicBool,
}

/// How many namespaces the pool keeps ready.
const POOL_SIZE: usize = 4;

impl UsernsPool {
    /// An empty pool for `map` (it fills on first use).
    pub fn new(map: Maps) -> std::sync::Arc<UsernsPool> {
        std::sync::Arc::new(UsernsPool {
            map,
            ready: std::sync::Mutex::new(Vec::new()),
            refilling: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A fresh namespace: one made ahead of time, else one made now.
    pub fn take(self: &std::sync::Arc<Self>) -> Result<OwnedFd, SandboxError> {
        let ready = self.ready.lock().ok().and_then(|mut r| r.pop());
        self.refill_in_background();
        match ready {
            Some(fd) => Ok(fd),
            None => self.map.create(),
        }
    }

    fn refill_in_background(self: &std::sync::Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let pool = self.clone();
        std::thread::spawn(move || {
            loop {
                let have = pool.ready.lock().map(|r| r.len()).unwrap_or(POOL_SIZE);
                if have >= POOL_SIZE {
                    break;
                }
                match pool.map.create() {
                    Ok(fd) => {
                        if let Ok(mut r) = pool.ready.lock() {
                            r.push(fd);
                        }
                    }
                    Err(_) => break,
                }
            }
            pool.refilling.store(false, Ordering::Release);
        });
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    crate::sandbox::fds::pipe().map_err(SandboxError::io("create pipe", "pipe"))
}

/// The start of `user`'s first subordinate range of at least [`MAPPED_IDS`]
/// ids in a `/etc/subuid`-style text.
fn subordinate_start(text: &str, user: &str) -> Option<u32> {
    subordinate_range(text, &[user])
}

/// The start of the first range of at least [`MAPPED_IDS`] ids that a
/// `/etc/subuid`-style text gives any of `keys` (a user's name and its uid
/// in decimal, as `newuidmap` matches them). Blank lines, comments and
/// malformed lines are skipped, as are ranges starting at 0 or running
/// past the last id.
fn subordinate_range(text: &str, keys: &[&str]) -> Option<u32> {
    text.lines().find_map(|line| {
        let line = line.trim();
        if line.starts_with('#') {
            return None;
        }
        let mut parts = line.split(':');
        let (name, start, count) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let start: u32 = start.trim().parse().ok()?;
        let count: u32 = count.trim().parse().ok()?;
        (keys.contains(&name.trim())
            && count >= MAPPED_IDS
            && start > 0
            && start.checked_add(MAPPED_IDS).is_some())
        .then_some(start)
    })
}

/// Whether this process runs as host root.
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Enter user namespace `userns` and become its root (a process that was
/// host root keeps no privilege over the host).
///
/// # Safety
/// Async-signal-safe.
pub unsafe fn enter_as_root(userns: RawFd) -> io::Result<()> {
    unsafe {
        check(libc::setns(userns, libc::CLONE_NEWUSER))?;
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(0, 0, 0))?;
        check(libc::setresuid(0, 0, 0))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subordinate_ranges_are_read_per_user() {
        let text = "alice:100000:65536\nroot:231072:65536\nendless:300000:1000\n";
        assert_eq!(subordinate_start(text, "root"), Some(231072));
        assert_eq!(
            subordinate_start(text, "endless"),
            None,
            "too small a range"
        );
        assert_eq!(subordinate_start(text, "bob"), None);
        assert_eq!(subordinate_start("root:x:65536\n", "root"), None);
    }

    #[test]
    fn subordinate_ranges_match_name_or_uid_and_skip_bad_lines() {
        let text = "# ranges\n\n  alice : 100000 : 65536 \nbob:x:y\nbob:1:2:3\n1001:200000:1000\n1001:300000:70000\nzoe:0:65536\nzoe:4294967000:65536\n";
        assert_eq!(subordinate_range(text, &["alice", "1000"]), Some(100000));
        assert_eq!(
            subordinate_range(text, &["bob", "1001"]),
            Some(300000),
            "by uid, the first range that is large enough"
        );
        assert_eq!(
            subordinate_range(text, &["zoe"]),
            None,
            "0 and overflowing ranges"
        );
        assert_eq!(subordinate_range(text, &["carol", "1002"]), None);
    }

    #[test]
    fn subordinate_ids_map_root_to_the_caller_and_the_rest_to_the_range() {
        let s = SubIds {
            uid: 1001,
            gid: 1002,
            uid_start: 100000,
            gid_start: 200000,
        };
        assert_eq!(s.host_uid(0), 1001);
        assert_eq!(s.host_uid(1), 100000);
        assert_eq!(s.host_uid(1000), 100999);
        assert_eq!(s.host_uid(MAPPED_IDS), 100000 + MAPPED_IDS - 1);
        let [(u, uargs), (g, gargs)] = s.map_args();
        assert_eq!((u, g), ("newuidmap", "newgidmap"));
        assert_eq!(uargs.join(" "), "0 1001 1 1 100000 65536");
        assert_eq!(gargs.join(" "), "0 1002 1 1 200000 65536");
    }

    #[test]
    fn ids_map_into_the_range() {
        let m = IdMap {
            base: 1_000_000_000,
            count: MAPPED_IDS,
            source: "default",
        };
        assert_eq!(m.host(0), 1_000_000_000);
        assert_eq!(m.host(1000), 1_000_001_000);
        assert_eq!(m.map_line(), "0 1000000000 65536\n");
    }
}
