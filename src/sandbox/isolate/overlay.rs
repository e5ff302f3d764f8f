//! The mount plan, applied in the child between fork and exec: a private
//! mount namespace, an optional tmpfs for the episode layer, idmapped views
//! of host directories, one overlay for the root plus one per system
//! directory, and then the switch into the sandbox's user namespace.
//!
//! Everything is prepared in the parent so that applying it allocates
//! nothing (the child of a multi-threaded process may only make
//! async-signal-safe calls).
//!
//! Overlays are mounted with the new mount API (`fsopen`, `fsconfig`,
//! `fsmount`, `move_mount`), adding lower directories one by one with
//! `lowerdir+` (Linux 6.8): an image stacks its build steps' layers (up to
//! `image::MAX_STEP_LAYERS`), more than `mount(2)`'s one-page option
//! string holds. Where the kernel lacks either, one `mount(2)` call with
//! the same options is made instead (which fails only for stacks too deep
//! for a page).

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use crate::sandbox::fds::{check, make_mounts_private};
use crate::sandbox::SandboxError;

/// One `mount(2)` call, prepared so that applying it allocates nothing.
struct MountCall {
    source: CString,
    target: CString,
    fstype: CString,
    data: CString,
}

/// One overlay, prepared for both ways of mounting it (see the module docs).
struct OverlayCall {
    target: CString,
    /// Lower directories, top first.
    lowers: Vec<CString>,
    upper: CString,
    work: CString,
    /// Extended attributes in the `user.` namespace (rootless).
    userxattr: bool,
    /// The same overlay as one `mount(2)` call.
    legacy: MountCall,
}

/// `fsconfig(2)` commands (`linux/mount.h`; not in the libc crate).
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
/// `fsopen(2)` and `fsmount(2)` flags.
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;

/// A host directory shown with its owners shifted into the sandbox's id
/// range (an idmapped mount), at `target`.
pub struct Idmapped {
    /// The host directory.
    pub source: PathBuf,
    /// Where the shifted view is mounted (in the child's namespace only).
    pub target: PathBuf,
}

/// How the child becomes unprivileged.
pub enum Identity {
    /// Rootless: unshare a user namespace mapping our ids to root.
    Rootless {
        /// Our host uid and gid.
        ids: (u32, u32),
    },
    /// Root on the host: after the mounts, enter this user namespace (whose
    /// root is an unprivileged host id) as its root, showing host
    /// directories through idmapped mounts made with it.
    Mapped {
        /// The namespace (owned by the caller, kept open until spawn returns).
        userns: RawFd,
        /// Idmapped views to create before the overlays.
        idmapped: Vec<Idmapped>,
        /// Directories to give to the namespace's root: (path, host uid, host gid).
        chown: Vec<(PathBuf, u32, u32)>,
    },
}

/// Everything the child does before `exec`, prepared in the parent.
pub struct MountPlan {
    mkdirs: Vec<CString>,
    tmpfs: Option<MountCall>,
    overlays: Vec<OverlayCall>,
    cgroup_procs: Vec<CString>,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    rootless: Option<(CString, CString)>,
    mapped: Option<PreparedMapped>,
    binds: Vec<(CString, CString)>,
    net: Option<super::net::ChildEnds>,
}

struct PreparedMapped {
    userns: RawFd,
    idmapped: Vec<(CString, CString)>,
    chown: Vec<(CString, u32, u32)>,
}

/// One overlay layer stack: where it is mounted and what it is made of.
pub struct Layer {
    /// Mount point (absolute).
    pub target: PathBuf,
    /// Lower directories, top first.
    pub lower: Vec<PathBuf>,
    /// Upper directory.
    pub upper: PathBuf,
    /// Overlay work directory (same filesystem as `upper`).
    pub work: PathBuf,
}

/// What a plan mounts and how the child drops privileges.
pub struct MountSpec<'a> {
    /// The episode tmpfs (mount point, size in bytes), mounted first.
    pub tmpfs: Option<(&'a Path, u64)>,
    /// Directories to create after the tmpfs, in order.
    pub mkdirs: &'a [PathBuf],
    /// Overlays, root first.
    pub layers: &'a [Layer],
    /// `cgroup.procs` files to join.
    pub cgroup_procs: &'a [PathBuf],
    /// Resource limits (when there are no cgroups).
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// How to become unprivileged.
    pub identity: Identity,
    /// Host directories to bind (source, mount point) where bubblewrap can
    /// reach them (see `Layout::stage`).
    pub binds: Vec<(PathBuf, PathBuf)>,
    /// A network namespace of its own, connected by the parent (see `net.rs`).
    pub net: Option<super::net::ChildEnds>,
}

fn cstr(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| SandboxError::Start(format!("path {} contains a NUL byte", path.display())))
}

fn check_option_path(path: &Path) -> Result<String, SandboxError> {
    let s = path
        .to_str()
        .ok_or_else(|| SandboxError::Start(format!("path {} is not UTF-8", path.display())))?;
    if s.contains([',', ':', '\\', '\n']) {
        return Err(SandboxError::Start(format!(
            "path {s} cannot be an overlay layer (it contains `,`, `:` or `\\`); choose a cache directory without them"
        )));
    }
    Ok(s.to_string())
}

impl MountPlan {
    /// Prepare `spec`.
    pub fn new(spec: MountSpec) -> Result<MountPlan, SandboxError> {
        // Unprivileged overlays (rootless, or in an owner namespace) keep
        // their attributes in `user.`, as the kernel requires.
        let rootless = matches!(spec.identity, Identity::Rootless { .. })
            || super::userns::owner_namespace().is_some();
        let userxattr = if rootless { ",userxattr" } else { "" };
        let tmpfs = match spec.tmpfs {
            Some((at, size)) => Some(MountCall {
                source: c"tmpfs".to_owned(),
                target: cstr(at)?,
                fstype: c"tmpfs".to_owned(),
                data: CString::new(format!("size={size},mode=0755")).unwrap_or_default(),
            }),
            None => None,
        };
        let mut overlays = Vec::new();
        for layer in spec.layers {
            let lower: Result<Vec<String>, _> =
                layer.lower.iter().map(|p| check_option_path(p)).collect();
            let data = format!(
                "lowerdir={},upperdir={},workdir={}{userxattr}",
                lower?.join(":"),
                check_option_path(&layer.upper)?,
                check_option_path(&layer.work)?
            );
            overlays.push(OverlayCall {
                target: cstr(&layer.target)?,
                lowers: layer
                    .lower
                    .iter()
                    .map(|p| cstr(p))
                    .collect::<Result<_, _>>()?,
                upper: cstr(&layer.upper)?,
                work: cstr(&layer.work)?,
                userxattr: rootless,
                legacy: MountCall {
                    source: c"overlay".to_owned(),
                    target: cstr(&layer.target)?,
                    fstype: c"overlay".to_owned(),
                    data: CString::new(data)
                        .map_err(|_| SandboxError::Start("NUL in overlay options".into()))?,
                },
            });
        }
        let (rootless, mapped) = match spec.identity {
            Identity::Rootless { ids: (uid, gid) } => (
                Some((
                    CString::new(format!("0 {uid} 1")).unwrap_or_default(),
                    CString::new(format!("0 {gid} 1")).unwrap_or_default(),
                )),
                None,
            ),
            Identity::Mapped {
                userns,
                idmapped,
                chown,
            } => (
                None,
                Some(PreparedMapped {
                    userns,
                    idmapped: idmapped
                        .iter()
                        .map(|i| Ok((cstr(&i.source)?, cstr(&i.target)?)))
                        .collect::<Result<_, SandboxError>>()?,
                    chown: chown
                        .iter()
                        .map(|(p, u, g)| Ok((cstr(p)?, *u, *g)))
                        .collect::<Result<_, SandboxError>>()?,
                }),
            ),
        };
        Ok(MountPlan {
            mkdirs: spec
                .mkdirs
                .iter()
                .map(|p| cstr(p))
                .collect::<Result<_, _>>()?,
            tmpfs,
            overlays,
            cgroup_procs: spec
                .cgroup_procs
                .iter()
                .map(|p| cstr(p))
                .collect::<Result<_, _>>()?,
            rlimits: spec.rlimits,
            rootless,
            mapped,
            binds: spec
                .binds
                .iter()
                .map(|(a, b)| Ok((cstr(a)?, cstr(b)?)))
                .collect::<Result<_, SandboxError>>()?,
            net: spec.net,
        })
    }

    /// Apply the plan in the current process.
    ///
    /// # Safety
    /// Meant for `pre_exec`: uses only async-signal-safe system calls and
    /// allocates nothing.
    pub unsafe fn apply(&self) -> io::Result<()> {
        unsafe {
            join_cgroups(&self.cgroup_procs);
            for (resource, value) in &self.rlimits {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                libc::setrlimit(*resource, &lim);
            }
            if let Some((uid_map, gid_map)) = &self.rootless {
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                write_file(c"/proc/self/setgroups", c"deny")?;
                write_file(c"/proc/self/uid_map", uid_map)?;
                write_file(c"/proc/self/gid_map", gid_map)?;
            } else {
                check(libc::unshare(libc::CLONE_NEWNS))?;
            }
            make_mounts_private()?;
            if let Some(t) = &self.tmpfs {
                check(mount(t, libc::MS_NOSUID | libc::MS_NODEV))?;
            }
            for dir in &self.mkdirs {
                let rc = libc::mkdir(dir.as_ptr(), 0o755);
                if rc < 0 && *libc::__errno_location() != libc::EEXIST {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(m) = &self.mapped {
                for (path, uid, gid) in &m.chown {
                    check(libc::lchown(path.as_ptr(), *uid, *gid))?;
                }
                for (source, target) in &m.idmapped {
                    idmapped_mount(source, target, m.userns)?;
                }
            }
            for o in &self.overlays {
                mount_overlay(o)?;
            }
            for (source, target) in &self.binds {
                check(libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            if let Some(m) = &self.mapped {
                super::userns::enter_as_root(m.userns)?;
            }
            if let Some(net) = &self.net {
                super::net::child_side(net)?;
            }
            Ok(())
        }
    }
}

/// Join the cgroups whose `cgroup.procs` files are given (best effort).
///
/// # Safety
/// Async-signal-safe.
pub unsafe fn join_cgroups(procs: &[CString]) {
    unsafe {
        for procs in procs {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
    }
}

/// Mount a view of `source` at `target` whose owners are shifted by the id
/// map of `userns`.
unsafe fn idmapped_mount(source: &CString, target: &CString, userns: RawFd) -> io::Result<()> {
    unsafe {
        let tree = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC) as libc::c_uint,
        ) as libc::c_int;
        if tree < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut attr: libc::mount_attr = std::mem::zeroed();
        attr.attr_set = libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_RDONLY;
        attr.userns_fd = userns as u64;
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        );
        if rc < 0 {
            let e = io::Error::last_os_error();
            libc::close(tree);
            return Err(e);
        }
        let rc = libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH as libc::c_uint,
        );
        let e = io::Error::last_os_error();
        libc::close(tree);
        if rc < 0 {
            return Err(e);
        }
        Ok(())
    }
}

/// Mount the overlay `o` (see the module docs).
///
/// # Safety
/// Async-signal-safe.
unsafe fn mount_overlay(o: &OverlayCall) -> io::Result<()> {
    unsafe {
        let fs =
            libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), FSOPEN_CLOEXEC) as libc::c_int;
        if fs < 0 {
            // No new mount API here.
            return check(mount(&o.legacy, 0));
        }
        let result = configure_overlay(fs, o);
        let result = match result {
            Ok(()) => attach(fs, &o.target),
            Err(Some(e)) => Err(e),
            // No `lowerdir+` here.
            Err(None) => check(mount(&o.legacy, 0)),
        };
        libc::close(fs);
        result
    }
}

/// Set the options of overlay `o` on the file system context `fs`.
/// `Err(None)`: the kernel does not know `lowerdir+`.
///
/// # Safety
/// Async-signal-safe.
unsafe fn configure_overlay(fs: libc::c_int, o: &OverlayCall) -> Result<(), Option<io::Error>> {
    unsafe {
        let set = |key: &std::ffi::CStr, value: Option<&CString>| -> io::Result<()> {
            let (cmd, v) = match value {
                Some(v) => (FSCONFIG_SET_STRING, v.as_ptr()),
                None => (FSCONFIG_SET_FLAG, std::ptr::null()),
            };
            let rc = libc::syscall(libc::SYS_fsconfig, fs, cmd, key.as_ptr(), v, 0);
            check(rc as libc::c_int)
        };
        for (i, lower) in o.lowers.iter().enumerate() {
            if let Err(e) = set(c"lowerdir+", Some(lower)) {
                return Err((i > 0 || e.raw_os_error() != Some(libc::EINVAL)).then_some(e));
            }
        }
        set(c"upperdir", Some(&o.upper)).map_err(Some)?;
        set(c"workdir", Some(&o.work)).map_err(Some)?;
        if o.userxattr {
            set(c"userxattr", None).map_err(Some)?;
        }
        Ok(())
    }
}

/// Create the file system configured on `fs` and mount it at `target`.
///
/// # Safety
/// Async-signal-safe.
unsafe fn attach(fs: libc::c_int, target: &CString) -> io::Result<()> {
    unsafe {
        let rc = libc::syscall(
            libc::SYS_fsconfig,
            fs,
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        );
        check(rc as libc::c_int)?;
        let mnt = libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0) as libc::c_int;
        if mnt < 0 {
            return Err(io::Error::last_os_error());
        }
        let rc = libc::syscall(
            libc::SYS_move_mount,
            mnt,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH as libc::c_uint,
        );
        let e = io::Error::last_os_error();
        libc::close(mnt);
        if rc < 0 {
            return Err(e);
        }
        Ok(())
    }
}

unsafe fn write_file(path: &std::ffi::CStr, content: &std::ffi::CStr) -> io::Result<()> {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let bytes = content.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
        Ok(())
    }
}

unsafe fn mount(m: &MountCall, flags: libc::c_ulong) -> libc::c_int {
    unsafe {
        libc::mount(
            m.source.as_ptr(),
            m.target.as_ptr(),
            m.fstype.as_ptr(),
            flags,
            m.data.as_ptr().cast(),
        )
    }
}
