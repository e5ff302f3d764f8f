//! The overlay mount plan, applied in the child between fork and exec:
//! a private mount namespace, an optional tmpfs for the episode layer, and
//! one overlay for the root plus one per host system directory.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use crate::sandbox::SandboxError;

/// One `mount(2)` call, prepared so that applying it allocates nothing.
struct MountCall {
    source: CString,
    target: CString,
    fstype: CString,
    data: CString,
}

/// Everything the child does before `exec`, prepared in the parent.
pub struct MountPlan {
    /// Directories to create (after the tmpfs is mounted), in order.
    mkdirs: Vec<CString>,
    /// The episode tmpfs, if any.
    tmpfs: Option<MountCall>,
    /// Overlays, root first.
    overlays: Vec<MountCall>,
    /// `cgroup.procs` files to join.
    cgroup_procs: Vec<CString>,
    /// Resource limits to set (fallback when there are no cgroups).
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// For rootless use: the contents of `uid_map` and `gid_map` of a new
    /// user namespace (our ids mapped to root).
    userns: Option<(CString, CString)>,
}

/// One overlay layer stack: where it is mounted and what it is made of.
pub struct Layer {
    /// Mount point (absolute).
    pub target: PathBuf,
    /// Lower directories, top first.
    pub lower: Vec<PathBuf>,
    /// Upper and work directories.
    pub upper: PathBuf,
    pub work: PathBuf,
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
    /// A plan mounting `layers`; when `tmpfs` is given, it is mounted first
    /// (at `tmpfs.0`, size `tmpfs.1` bytes) and `mkdirs` are created in it.
    pub fn new(
        tmpfs: Option<(&Path, u64)>,
        mkdirs: &[PathBuf],
        layers: &[Layer],
        cgroup_procs: &[PathBuf],
        rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
        userns: Option<(u32, u32)>,
    ) -> Result<MountPlan, SandboxError> {
        let userxattr = if userns.is_some() { ",userxattr" } else { "" };
        let tmpfs = match tmpfs {
            Some((at, size)) => Some(MountCall {
                source: c"tmpfs".to_owned(),
                target: cstr(at)?,
                fstype: c"tmpfs".to_owned(),
                data: CString::new(format!("size={size},mode=0700")).unwrap_or_default(),
            }),
            None => None,
        };
        let mut overlays = Vec::new();
        for layer in layers {
            let lower: Result<Vec<String>, _> =
                layer.lower.iter().map(|p| check_option_path(p)).collect();
            let data = format!(
                "lowerdir={},upperdir={},workdir={}{userxattr}",
                lower?.join(":"),
                check_option_path(&layer.upper)?,
                check_option_path(&layer.work)?
            );
            overlays.push(MountCall {
                source: c"overlay".to_owned(),
                target: cstr(&layer.target)?,
                fstype: c"overlay".to_owned(),
                data: CString::new(data)
                    .map_err(|_| SandboxError::Start("NUL in overlay options".into()))?,
            });
        }
        Ok(MountPlan {
            mkdirs: mkdirs.iter().map(|p| cstr(p)).collect::<Result<_, _>>()?,
            tmpfs,
            overlays,
            cgroup_procs: cgroup_procs
                .iter()
                .map(|p| cstr(p))
                .collect::<Result<_, _>>()?,
            rlimits,
            userns: userns.map(|(uid, gid)| {
                (
                    CString::new(format!("0 {uid} 1")).unwrap_or_default(),
                    CString::new(format!("0 {gid} 1")).unwrap_or_default(),
                )
            }),
        })
    }

    /// Apply the plan in the current process.
    ///
    /// # Safety
    /// Meant for `pre_exec`: uses only async-signal-safe system calls and
    /// allocates nothing.
    pub unsafe fn apply(&self) -> io::Result<()> {
        fn check(rc: libc::c_int) -> io::Result<()> {
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
        for procs in &self.cgroup_procs {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
        for (resource, value) in &self.rlimits {
            let lim = libc::rlimit {
                rlim_cur: *value,
                rlim_max: *value,
            };
            libc::setrlimit(*resource, &lim);
        }
        if let Some((uid_map, gid_map)) = &self.userns {
            check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
            write_file(c"/proc/self/setgroups", c"deny")?;
            write_file(c"/proc/self/uid_map", uid_map)?;
            write_file(c"/proc/self/gid_map", gid_map)?;
        } else {
            check(libc::unshare(libc::CLONE_NEWNS))?;
        }
        check(libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        if let Some(t) = &self.tmpfs {
            check(mount(t, libc::MS_NOSUID | libc::MS_NODEV))?;
        }
        for dir in &self.mkdirs {
            let rc = libc::mkdir(dir.as_ptr(), 0o755);
            if rc < 0 && *libc::__errno_location() != libc::EEXIST {
                return Err(io::Error::last_os_error());
            }
        }
        for o in &self.overlays {
            check(mount(o, 0))?;
        }
        Ok(())
    }
}

unsafe fn write_file(path: &std::ffi::CStr, content: &std::ffi::CStr) -> io::Result<()> {
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

unsafe fn mount(m: &MountCall, flags: libc::c_ulong) -> libc::c_int {
    libc::mount(
        m.source.as_ptr(),
        m.target.as_ptr(),
        m.fstype.as_ptr(),
        flags,
        m.data.as_ptr().cast(),
    )
}
