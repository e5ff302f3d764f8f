//! User namespaces for sessions and builds started by root.
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

/// The [`IdMap::source`] of the map inside an owner namespace (ids there
/// are the namespace's, `1` being the range's first host id).
pub const SUBORDINATE: &str = "the operator's subordinate ids";

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
    /// The range for this host: in an owner namespace (an operator with
    /// subordinate ids, see `subids.rs`) its ids `1..=MAPPED_IDS`; else
    /// `ENDLESS_SANDBOX_ID_BASE`, else the first range of at least
    /// `MAPPED_IDS` ids that `/etc/subuid` gives the `endless` or `root`
    /// account (and `/etc/subgid` the same), else `DEFAULT_BASE`.
    pub fn for_host() -> IdMap {
        if owner_namespace().is_some() {
            return IdMap {
                base: 1,
                count: MAPPED_IDS,
                source: SUBORDINATE,
            };
        }
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
            if let Some(base) = subordinate_range(&uids, &[user]) {
                if subordinate_range(&gids, &[user]) == Some(base) {
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

    /// Whether mounts made with this map are host root's (idmapped views of
    /// host directories, overlayfs's `trusted.` attributes): not in an
    /// owner namespace, whose mounts are unprivileged.
    pub fn privileged_mounts(&self) -> bool {
        self.source != SUBORDINATE
    }

    /// The `uid_map` / `gid_map` line.
    pub fn map_line(&self) -> String {
        format!("0 {} {}\n", self.base, self.count)
    }

    /// Create a user namespace with this map; the returned descriptor keeps
    /// it alive. Needs `CAP_SETUID`/`CAP_SETGID` where we run (host root,
    /// or the root of an owner namespace, see `subids.rs`).
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
/// (given the helper's pid); the returned descriptor keeps it alive. A
/// process cannot write a multi-id map for a namespace it created itself.
pub(super) fn new_namespace(
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

/// Namespaces made ahead of time, off the session start's critical path
/// (making one waits for a helper process to be scheduled, which under load
/// costs milliseconds). Each is used once, by one session or build.
pub struct UsernsPool {
    map: IdMap,
    ready: std::sync::Mutex<Vec<OwnedFd>>,
    refilling: std::sync::atomic::AtomicBool,
}

/// How many namespaces the pool keeps ready.
const POOL_SIZE: usize = 4;

impl UsernsPool {
    /// An empty pool for `map` (it fills on first use).
    pub fn new(map: IdMap) -> std::sync::Arc<UsernsPool> {
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
            None => self.map.create_namespace(),
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
                match pool.map.create_namespace() {
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

/// The owner namespace this process runs in: the host ids of its root and
/// of its id 1 (a sandbox's root), read from `/proc/self/uid_map` and
/// `gid_map`; `None` in the host's namespace (or any other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerNamespace {
    /// The operator's uid and gid (this namespace's root).
    pub owner: (u32, u32),
    /// Host uid and gid of this namespace's id 1.
    pub range_start: (u32, u32),
}

/// The owner namespace this process runs in, if it does (read once).
pub fn owner_namespace() -> Option<OwnerNamespace> {
    static FOUND: std::sync::OnceLock<Option<OwnerNamespace>> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let uid = owner_map(&read("/proc/self/uid_map")?)?;
        let gid = owner_map(&read("/proc/self/gid_map")?)?;
        Some(OwnerNamespace {
            owner: (uid.0, gid.0),
            range_start: (uid.1, gid.1),
        })
    })
}

/// `(host id of 0, host id of 1)` of an owner namespace's map: exactly a
/// line `0 OWN 1` and a line `1 START N` with `N >= MAPPED_IDS`.
fn owner_map(text: &str) -> Option<(u32, u32)> {
    let lines: Vec<Vec<u64>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .collect();
    let [a, b] = lines.as_slice() else {
        return None;
    };
    match (a.as_slice(), b.as_slice()) {
        ([0, own, 1], [1, start, n]) if *n >= MAPPED_IDS as u64 => {
            Some((u32::try_from(*own).ok()?, u32::try_from(*start).ok()?))
        }
        _ => None,
    }
}

/// The start of the first range of at least [`MAPPED_IDS`] ids that a
/// `/etc/subuid`-style text gives any of `keys` (a user's name and its uid
/// in decimal, as `newuidmap` matches them). Comments and malformed lines
/// are skipped, as are ranges starting at 0 or running past the last id.
pub fn subordinate_range(text: &str, keys: &[&str]) -> Option<u32> {
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
        assert_eq!(subordinate_range(text, &["root"]), Some(231072));
        assert_eq!(
            subordinate_range(text, &["endless"]),
            None,
            "too small a range"
        );
        assert_eq!(subordinate_range(text, &["bob"]), None);
        assert_eq!(subordinate_range("root:x:65536\n", &["root"]), None);
    }

    #[test]
    fn subordinate_ranges_match_name_or_uid_and_skip_bad_lines() {
        let text = "# ranges\n\n  alice : 100000 : 65536 \nbob:x:y\nbob:1:2:3\n1001:200000:1000\n1001:300000:70000\nzoe:0:65536\nzoe:4294967000:65536\n";
        assert_eq!(subordinate_range(text, &["alice", "1000"]), Some(100000));
        assert_eq!(subordinate_range(text, &["bob", "1001"]), Some(300000));
        assert_eq!(subordinate_range(text, &["zoe"]), None);
        assert_eq!(subordinate_range(text, &["nobody"]), None);
    }

    #[test]
    fn only_an_owner_namespaces_map_is_recognised() {
        assert_eq!(
            owner_map("         0       1001          1\n         1     100000      65536\n"),
            Some((1001, 100000))
        );
        // The host's namespace, a single-id namespace, a short range.
        assert_eq!(owner_map("         0          0 4294967295\n"), None);
        assert_eq!(owner_map("0 1001 1\n"), None);
        assert_eq!(owner_map("0 1001 1\n1 100000 1000\n"), None);
        assert_eq!(owner_map("0 1000000000 65536\n"), None);
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
