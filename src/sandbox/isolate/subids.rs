//! Subordinate ids for an operator who is not root (what podman and
//! `apptainer --fakeroot` use on HPC sites).
//!
//! A user with a range in `/etc/subuid` and `/etc/subgid` gets, at the
//! start of `endless`, an *owner namespace*: a user namespace in which
//! inside id 0 is the user's own id and inside ids `1..=65536` are the
//! first 65,536 ids of the range (written by the setuid helpers `newuidmap`
//! and `newgidmap`, as `podman unshare` does). `endless` runs in it as its
//! root, so the backend works exactly as it does for host root
//! ([`super::userns`]): every sandbox gets a user namespace of its own,
//! made inside the owner namespace, that maps inside `0..65536` to the
//! range only. The operator's own id is not mapped in a sandbox, just as
//! host root is not for a root operator, so a sandbox's root cannot reach
//! the operator's files (the cache, the verifier, the workspace) beyond
//! what their mode gives everyone. A sandbox's id `k` is host id
//! `range start + k`.
//!
//! What differs from a root operator: mounts are unprivileged (overlayfs
//! with `userxattr`, no idmapped views of host directories, which show
//! host-owned files as `nobody` instead), and cgroups are used only where
//! delegated. Files made through the range belong to range ids on the host,
//! not to the operator: `endless sandbox unshare -- rm -rf DIR` removes them
//! outside `endless` (as `podman unshare` does).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::userns::{self, subordinate_range, MAPPED_IDS};
pub use super::userns::{owner_namespace, OwnerNamespace};
use crate::sandbox::SandboxError;

/// The subordinate ids of the calling user, as [`enter_owner_namespace`]
/// maps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubIds {
    /// The operator's uid (the owner namespace's root).
    pub uid: u32,
    /// The operator's gid.
    pub gid: u32,
    /// Host uid of a sandbox's root (owner-namespace uid 1).
    pub uid_start: u32,
    /// Host gid of a sandbox's root group.
    pub gid_start: u32,
}

/// Where the setuid map writers are looked for (besides `PATH`).
const MAP_TOOLS_DIRS: [&str; 2] = ["/usr/bin", "/bin"];

/// `ENDLESS_SUBIDS=off` keeps a user with a range in the single-id mode.
const SWITCH: &str = "ENDLESS_SUBIDS";

/// The path of `newuidmap` or `newgidmap`, if installed.
pub fn map_tool(name: &str) -> Option<PathBuf> {
    MAP_TOOLS_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .or_else(|| super::bwrap::which(name))
}

impl SubIds {
    /// The calling user's subordinate ids, or why there are none: no range
    /// of at least [`MAPPED_IDS`] ids in `/etc/subuid` and `/etc/subgid`
    /// (by name or uid, as `newuidmap` matches), or no `newuidmap`.
    pub fn for_caller() -> Result<SubIds, String> {
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let name = user_name(uid);
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let uid_text = uid.to_string();
        let mut keys = vec![uid_text.as_str()];
        if let Some(n) = &name {
            keys.push(n);
        }
        let who = name.clone().unwrap_or_else(|| uid.to_string());
        let (Some(uid_start), Some(gid_start)) = (
            subordinate_range(&read("/etc/subuid"), &keys),
            subordinate_range(&read("/etc/subgid"), &keys),
        ) else {
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

    /// A user namespace mapping inside 0 to the caller and `1..=MAPPED_IDS`
    /// to the range, written by `newuidmap` and `newgidmap` (which leave
    /// `setgroups` allowed: `apt-get` drops to `_apt` with it).
    fn create_namespace(&self) -> Result<OwnedFd, SandboxError> {
        userns::new_namespace(|pid| {
            for (tool, own, start) in [
                ("newuidmap", self.uid, self.uid_start),
                ("newgidmap", self.gid, self.gid_start),
            ] {
                let path = map_tool(tool).ok_or_else(|| SandboxError::ToolMissing {
                    tool: tool.into(),
                    hint: "install uidmap (Debian/Ubuntu: `apt-get install uidmap`)".into(),
                })?;
                let out = std::process::Command::new(&path)
                    .arg(pid.to_string())
                    .args([0, own, 1, 1, start, MAPPED_IDS].map(|n| n.to_string()))
                    .env_clear()
                    .output()
                    .map_err(SandboxError::io("run", &path))?;
                if !out.status.success() {
                    return Err(SandboxError::Start(format!(
                        "{tool} refused the range: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
            }
            Ok(())
        })
    }
}

/// Why this process did not enter an owner namespace (for `sandbox
/// doctor`), set by [`enter_owner_namespace`].
static NOT_ENTERED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Why this process runs without subordinate ids (`None`: it has them, or
/// runs as host root).
pub fn why_single_id() -> Option<String> {
    if owner_namespace().is_some() || userns::running_as_root() {
        return None;
    }
    Some(
        NOT_ENTERED
            .get()
            .cloned()
            .unwrap_or_else(|| match SubIds::for_caller() {
                Ok(_) => "this process did not enter its subordinate ids".into(),
                Err(why) => why,
            }),
    )
}

/// For an operator who is not root and has a range: move this process into
/// its owner namespace (see the module docs). Must run before any thread
/// starts (`setns` refuses a process with several); does nothing as root
/// (which an owner namespace's root is too) or with `ENDLESS_SUBIDS=off`. A failure
/// leaves the process as it was (single-id rootless), with the reason kept
/// for `sandbox doctor`.
pub fn enter_owner_namespace() {
    // Not `owner_namespace()`: it is read once, and must be after this.
    if userns::running_as_root() {
        return;
    }
    let why = match std::env::var(SWITCH).as_deref() {
        Ok("off" | "0" | "false") => Err(format!("{SWITCH}=off")),
        _ => SubIds::for_caller().and_then(|ids| enter(&ids)),
    };
    if let Err(why) = why {
        let _ = NOT_ENTERED.set(why);
    }
}

fn enter(ids: &SubIds) -> Result<(), String> {
    let ns = ids.create_namespace().map_err(|e| e.to_string())?;
    // SAFETY: setns has no memory-safety preconditions; it fails (EINVAL)
    // in a process with several threads, which leaves it unchanged.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER) } < 0 {
        return Err(format!(
            "enter the subordinate ids' namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// How an administrator grants the calling user a range.
pub fn grant_hint() -> String {
    let uid = match owner_namespace() {
        Some(ns) => ns.owner.0,
        // SAFETY: getuid has no preconditions.
        None => unsafe { libc::getuid() },
    };
    let user = user_name(uid).unwrap_or_else(|| uid.to_string());
    format!("usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}")
}

/// What fails in a rootless sandbox without subordinate ids, and how an
/// administrator grants them (for `sandbox doctor` and build errors).
pub fn single_id_limits() -> String {
    format!(
        "a rootless sandbox without subordinate ids maps only your own id: `chown` to other ids, \
         `apt-get` (which drops to `_apt` with setgroups) and task users other than root fail \
         (\"Invalid argument\"); an administrator grants a range with `{}` \
         (and installs `uidmap` for newuidmap/newgidmap)",
        grant_hint()
    )
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
