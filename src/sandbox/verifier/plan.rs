//! Starting the verifier beside the agent's shell, out of the agent's reach.
//!
//! The verifier must see what the agent left (its files, its running
//! services, its processes), so it joins the sandbox's namespaces. But no
//! agent, not even one running as root inside, may change what the verifier
//! runs or what it reports. Between fork and exec the child:
//!
//! 1. joins the session's cgroups and makes itself non-dumpable (so no agent
//!    process can ptrace it or open its `/proc/PID/{mem,root,fd}`; the
//!    runtime's execute-only loader keeps it so after exec);
//! 2. enters the user namespace we made for the sandbox (where it may join
//!    the others), the sandbox's mount, network, IPC, UTS and PID
//!    namespaces, then the sandbox's innermost user namespace (rootless
//!    bubblewrap nests one), its root, and a private copy of the mount
//!    namespace, in which it mounts a fresh tmpfs on
//!    [`crate::sandbox::local::EXCHANGE_INSIDE`], writes the tests' files there and makes
//!    it read-only (no process the tests start can plant a module beside
//!    them, whatever its user), and hides an `/etc/ld.so.preload` the agent
//!    may have written;
//!    When the task's image has sealed verifier environments
//!    (`local/build/verifier_env.rs`), attaches them read-only at
//!    [`ENVS_INSIDE`] (inside that tmpfs) in this private
//!    mount namespace only: right after entering our user namespace, the
//!    child clones the host's environment directory into a detached mount
//!    (`open_tree(OPEN_TREE_CLONE)` in a mount namespace of its own, from a
//!    descriptor the parent opened), and moves it into place
//!    (`move_mount`) once in the sandbox. The agent's sessions never have
//!    it mounted: nothing in them can list, open or change it;
//! 3. forks once, as `nsenter` does, so that the verifier is a member of the
//!    PID namespace;
//! 4. becomes the task's user, changes to the task's working directory, and
//!    loads the sandbox's seccomp filter. A non-root user keeps no
//!    capability; root keeps Docker's default set (the agent's root shell's,
//!    [`bwrap::BUILD_CAPS`]), which holds only in the sandbox's user
//!    namespace, so that tests run `apt-get`, `su` or `chroot` as they do
//!    under Docker. Rootless sandboxes are the exception: there the
//!    runtime's loader belongs to an id the sandbox maps, which
//!    `CAP_DAC_OVERRIDE` could read, making the verifier dumpable; their
//!    root verifier keeps none.
//!
//! The command it then runs is the runtime's Python (see `runtime.rs`).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use seccompiler::BpfProgram;

use crate::sandbox::fds::{check, private_mount_namespace};
use crate::sandbox::isolate::bwrap;
use crate::sandbox::isolate::overlay::join_cgroups;
use crate::sandbox::isolate::seccomp;
use crate::sandbox::session::PRELOAD_REFUSED;
use crate::sandbox::SandboxError;

/// Where the verifier (and only it) sees its image's verifier environments:
/// inside its private directory ([`crate::sandbox::local::EXCHANGE_INSIDE`]),
/// which the verifier covers with a tmpfs of its own.
pub const ENVS_INSIDE: &str = "/run/endless-verifier/envs";

/// Where Harbor's tests find their folder: a writable copy of the sealed
/// one, made for each verification.
const TESTS_INSIDE: &str = "/tests";

/// The size of the `/tests` tmpfs (the sealed folder is at most 64 MiB; the
/// rest is room for what the tests build there).
const TESTS_TMPFS_MB: u64 = 512;

/// The files of the tests folder (`tests/<rel>` in `files`), as `<rel>`.
fn tests_files(files: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .filter_map(|(rel, bytes)| Some((rel.strip_prefix("tests/")?.to_string(), bytes.clone())))
        .collect()
}

/// The name of a pre-started verifier's scratch directory in its private
/// directory.
const WARM_UP: &str = "warm-up";

/// Everything the verifier's child needs, opened and prepared in the parent.
pub struct VerifierPlan {
    cgroup_procs: Vec<CString>,
    userns: OwnedFd,
    inner_userns: Option<OwnedFd>,
    ns: Vec<(OwnedFd, libc::c_int)>,
    pidns: OwnedFd,
    root: OwnedFd,
    private_dir: CString,
    tmpfs_data: CString,
    /// The options of the tests' `/logs/verifier` tmpfs.
    logs_data: CString,
    /// A pre-started verifier's scratch directory for its warm-up run
    /// (inside the private directory, on a tmpfs of its own), and that
    /// tmpfs's options.
    warm_up: CString,
    warm_up_data: CString,
    cwd: CString,
    uid: u32,
    gid: u32,
    set_groups: bool,
    /// The capabilities the verifier keeps (a bit mask; see the module's
    /// step 4): Docker's default set for root outside rootless sandboxes,
    /// else none.
    caps: u64,
    seccomp: Vec<BpfProgram>,
    sealed: SealedFiles,
    /// `<private_dir>/tests`, when the sealed files hold a tests folder: a
    /// copy of it is also at `/tests` (in the verifier's mount namespace
    /// only), where Harbor's tests read their files.
    tests_dir: Option<CString>,
    /// That copy: the tests folder's files at their paths under `/tests`,
    /// written into a fresh tmpfs of this verification's (writable by the
    /// tests, as Harbor's `/tests` is: tests build extensions there), and
    /// that tmpfs's options.
    tests_copy: SealedFiles,
    tests_data: CString,
    /// The image's verifier environments on the host (a directory opened
    /// `O_PATH`), and where they appear for the verifier.
    envs: Option<(OwnedFd, CString)>,
}

/// The tests' files as the child writes them into its private tmpfs
/// before it drops its privileges: directories (parents first), then files.
#[derive(Default)]
struct SealedFiles {
    dirs: Vec<CString>,
    files: Vec<(CString, Vec<u8>, libc::mode_t)>,
}

impl SealedFiles {
    /// `files` (paths relative to `private_dir`) at their paths inside.
    fn new(private_dir: &str, files: &[(String, Vec<u8>)]) -> Result<SealedFiles, SandboxError> {
        let mut dirs = std::collections::BTreeSet::new();
        let mut sealed = SealedFiles::default();
        for (rel, bytes) in files {
            let path = std::path::Path::new(rel);
            let plain = path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !plain || rel.is_empty() {
                return Err(SandboxError::Verify(format!(
                    "test file path `{rel}` is not a plain relative path"
                )));
            }
            let mut parent = path.parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                dirs.insert(p.to_path_buf());
                parent = p.parent();
            }
            // `bin/`: the verifier's own commands (e.g. the sealed
            // environment's `python3` for test scripts), executable.
            let mode = if rel.starts_with("bin/") {
                0o755
            } else {
                0o644
            };
            sealed.files.push((
                inside(private_dir, &path.to_string_lossy())?,
                bytes.clone(),
                mode,
            ));
        }
        // A BTreeSet of paths orders every parent before its children.
        for d in dirs {
            sealed.dirs.push(inside(private_dir, &d.to_string_lossy())?);
        }
        Ok(sealed)
    }

    /// Write everything (the directory is fresh: nothing may exist yet).
    ///
    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    unsafe fn write(&self) -> io::Result<()> {
        unsafe {
            for d in &self.dirs {
                check(libc::mkdir(d.as_ptr(), 0o755))?;
            }
            for (path, bytes, mode) in &self.files {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    *mode as libc::c_uint,
                );
                check(fd)?;
                let mut rest: &[u8] = bytes;
                while !rest.is_empty() {
                    let n = libc::write(fd, rest.as_ptr().cast(), rest.len());
                    if n < 0 {
                        if *libc::__errno_location() == libc::EINTR {
                            continue;
                        }
                        let e = io::Error::last_os_error();
                        libc::close(fd);
                        return Err(e);
                    }
                    rest = &rest[n as usize..];
                }
                check(libc::close(fd))?;
            }
            Ok(())
        }
    }
}

/// `private_dir/rel` as a C string.
fn inside(private_dir: &str, rel: &str) -> Result<CString, SandboxError> {
    CString::new(format!("{private_dir}/{rel}"))
        .map_err(|_| SandboxError::Verify(format!("NUL byte in test file path `{rel}`")))
}

fn open_ns(path: &str) -> Result<OwnedFd, SandboxError> {
    File::open(path)
        .map(OwnedFd::from)
        .map_err(SandboxError::io("open a sandbox namespace", path))
}

impl VerifierPlan {
    /// Prepare a verifier for the sandbox whose init is `init`, entering
    /// first the user namespace at `userns_path` (the one we made), running as
    /// inside `uid`:`gid` in `cwd`, with a private tmpfs at `private_dir`
    /// that holds `files` (relative paths) and is then made read-only.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        init: i32,
        userns_path: &str,
        cgroup_procs: &[std::path::PathBuf],
        (uid, gid): (u32, u32),
        cwd: &str,
        private_dir: &str,
        files: &[(String, Vec<u8>)],
        set_groups: bool,
        seccomp: Vec<BpfProgram>,
        envs: Option<&std::path::Path>,
    ) -> Result<VerifierPlan, SandboxError> {
        let p = |what: &str| format!("/proc/{init}/{what}");
        let envs = match envs.filter(|d| d.is_dir()) {
            Some(dir) => Some((
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
                    .open(dir)
                    .map(OwnedFd::from)
                    .map_err(SandboxError::io("open the verifier environments", dir))?,
                CString::new(ENVS_INSIDE).expect("no NUL"),
            )),
            None => None,
        };
        let ns = [
            ("ns/net", libc::CLONE_NEWNET),
            ("ns/ipc", libc::CLONE_NEWIPC),
            ("ns/uts", libc::CLONE_NEWUTS),
            ("ns/mnt", libc::CLONE_NEWNS),
        ]
        .iter()
        .map(|(f, t)| Ok((open_ns(&p(f))?, *t)))
        .collect::<Result<Vec<_>, SandboxError>>()?;
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(p("root"))
            .map(OwnedFd::from)
            .map_err(SandboxError::io("open the sandbox's root", p("root")))?;
        let c = |s: &str| {
            CString::new(s).map_err(|_| SandboxError::Verify(format!("NUL byte in `{s}`")))
        };
        Ok(VerifierPlan {
            cgroup_procs: cgroup_procs
                .iter()
                .map(|p| c(&p.to_string_lossy()))
                .collect::<Result<_, _>>()?,
            userns: open_ns(userns_path)?,
            inner_userns: {
                let ino = |p: &str| {
                    std::fs::metadata(p)
                        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                        .ok()
                };
                let inner = p("ns/user");
                if ino(&inner) != ino(userns_path) {
                    Some(open_ns(&inner)?)
                } else {
                    None
                }
            },
            ns,
            pidns: open_ns(&p("ns/pid"))?,
            root,
            private_dir: c(private_dir)?,
            tmpfs_data: c(&format!("size=64m,mode=0700,uid={uid},gid={gid}"))?,
            logs_data: c(&format!("size=64m,mode=0755,uid={uid},gid={gid}"))?,
            warm_up: c(&format!("{private_dir}/{WARM_UP}"))?,
            warm_up_data: c(&format!("size=8m,mode=0700,uid={uid},gid={gid}"))?,
            cwd: c(cwd)?,
            uid,
            gid,
            set_groups,
            caps: if uid == 0 && set_groups {
                bwrap::build_caps_mask()
            } else {
                0
            },
            seccomp,
            sealed: SealedFiles::new(private_dir, files)?,
            tests_dir: if files.iter().any(|(rel, _)| rel.starts_with("tests/")) {
                Some(c(&format!("{private_dir}/tests"))?)
            } else {
                None
            },
            tests_copy: SealedFiles::new(TESTS_INSIDE, &tests_files(files))?,
            tests_data: c(&format!(
                "size={TESTS_TMPFS_MB}m,mode=0755,uid={uid},gid={gid}"
            ))?,
            envs,
        })
    }

    /// A pre-started verifier's scratch directory inside (see
    /// [`VerifierPlan::apply_prestarted`]).
    pub fn warm_up_dir(&self) -> String {
        self.warm_up.to_string_lossy().into_owned()
    }

    /// The `cgroup.procs` files of the session (the pre-warmed verifier's
    /// test runner is moved into them by pid, see `warm.rs`).
    pub fn cgroup_procs(&self) -> &[CString] {
        &self.cgroup_procs
    }

    /// The plan as a request to the pre-warmed verifier (`warm.rs`): its
    /// settings, with each descriptor named by its index in the returned
    /// list, which must travel with the request. Joining the session's
    /// cgroups is not in it: the caller moves the test runner there.
    pub fn warm_request(&self) -> (serde_json::Map<String, serde_json::Value>, Vec<RawFd>) {
        let mut fds = Vec::new();
        let mut req = serde_json::Map::new();
        let mut pass = |name: &str, fd: RawFd, req: &mut serde_json::Map<String, _>| {
            req.insert(name.to_string(), fds.len().into());
            fds.push(fd);
        };
        pass("fd_userns", self.userns.as_raw_fd(), &mut req);
        if let Some(inner) = &self.inner_userns {
            pass("fd_inner_userns", inner.as_raw_fd(), &mut req);
        }
        for (fd, kind) in &self.ns {
            let name = match *kind {
                libc::CLONE_NEWNET => "fd_net",
                libc::CLONE_NEWIPC => "fd_ipc",
                libc::CLONE_NEWUTS => "fd_uts",
                _ => "fd_mnt",
            };
            pass(name, fd.as_raw_fd(), &mut req);
        }
        pass("fd_pid", self.pidns.as_raw_fd(), &mut req);
        pass("fd_root", self.root.as_raw_fd(), &mut req);
        let text = |c: &CString| c.to_string_lossy().into_owned();
        req.insert("private_dir".into(), text(&self.private_dir).into());
        req.insert("tmpfs_data".into(), text(&self.tmpfs_data).into());
        req.insert("logs_data".into(), text(&self.logs_data).into());
        req.insert("tests_data".into(), text(&self.tests_data).into());
        req.insert("cwd".into(), text(&self.cwd).into());
        req.insert("uid".into(), self.uid.into());
        req.insert("gid".into(), self.gid.into());
        req.insert("set_groups".into(), self.set_groups.into());
        req.insert("caps".into(), self.caps.into());
        (req, fds)
    }

    /// Apply the plan (see the module docs).
    ///
    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    pub unsafe fn apply(&self) -> io::Result<()> {
        unsafe { self.apply_as(false) }
    }

    /// Apply the plan for a verifier started with the session
    /// (`prestart.rs`): all of it but what the agent could notice while it
    /// works, which [`VerifierPlan::seal_prestarted`] does at verification:
    /// joining the session's cgroups (the caller moves it there then), the
    /// `/tests` and `/logs/verifier` mount points made in the sandbox's
    /// file system, and the fork into its PID namespace (the program forks
    /// the runner there, so no `ps` of the agent lists the waiting verifier).
    ///
    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    pub unsafe fn apply_prestarted(&self) -> io::Result<()> {
        unsafe { self.apply_as(true) }
    }

    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    unsafe fn apply_as(&self, prestart: bool) -> io::Result<()> {
        unsafe {
            // A session of its own before the fork below, so that the
            // verifier itself is in it (and dies with its process group).
            crate::sandbox::detach::leave_terminal()?;
            if !prestart {
                join_cgroups(&self.cgroup_procs);
            }
            check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
            check(libc::setns(self.userns.as_raw_fd(), libc::CLONE_NEWUSER))?;
            // Before leaving the host's mount namespace (where the
            // environments' directory is), with our user namespace's rights.
            let envs_tree = match &self.envs {
                Some((dir, _)) => Some(clone_read_only(dir.as_raw_fd())?),
                None => None,
            };
            // The mount namespace first: joining it resets our root, and a
            // chrooted process may not change user namespaces.
            for kind in [
                libc::CLONE_NEWNS,
                libc::CLONE_NEWNET,
                libc::CLONE_NEWIPC,
                libc::CLONE_NEWUTS,
            ] {
                for (fd, k) in &self.ns {
                    if *k == kind {
                        check(libc::setns(fd.as_raw_fd(), kind))?;
                    }
                }
            }
            check(libc::setns(self.pidns.as_raw_fd(), libc::CLONE_NEWPID))?;
            if let Some(inner) = &self.inner_userns {
                check(libc::setns(inner.as_raw_fd(), libc::CLONE_NEWUSER))?;
            }
            check(libc::fchdir(self.root.as_raw_fd()))?;
            check(libc::chroot(c".".as_ptr()))?;
            private_mount_namespace()?;
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.private_dir.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                self.tmpfs_data.as_ptr().cast(),
            ))?;
            if !prestart {
                self.make_mount_points()?;
            }
            // Files are made as the task's user (an id every namespace
            // here maps; host root is not mapped in the sandbox's). Only the
            // file-system ids change: CAP_SYS_ADMIN stays for the remount.
            libc::setfsgid(self.gid);
            libc::setfsuid(self.uid);
            self.sealed.write()?;
            if let Some((_, at)) = &self.envs {
                check(libc::mkdir(at.as_ptr(), 0o755))?;
            }
            if prestart {
                check(libc::mkdir(self.warm_up.as_ptr(), 0o700))?;
            }
            remount_read_only(&self.private_dir)?;
            if prestart {
                // Writable (the rest is read-only now): where the program
                // runs pytest once before the tests are due.
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    self.warm_up.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    self.warm_up_data.as_ptr().cast(),
                ))?;
            } else {
                self.mount_tests()?;
            }
            if let (Some(tree), Some((_, at))) = (envs_tree, &self.envs) {
                let rc = libc::syscall(
                    libc::SYS_move_mount,
                    tree,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    at.as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH as libc::c_uint,
                );
                let e = io::Error::last_os_error();
                libc::close(tree);
                if rc < 0 {
                    return Err(e);
                }
            }
            hide_preload()?;
            if !prestart {
                become_member_of_pid_namespace()?;
            }
            if self.set_groups {
                check(libc::setgroups(0, std::ptr::null()))?;
            }
            check(libc::setresgid(self.gid, self.gid, self.gid))?;
            check(libc::setresuid(self.uid, self.uid, self.uid))?;
            keep_only_capabilities(self.caps)?;
            if libc::chdir(self.cwd.as_ptr()) < 0 {
                check(libc::chdir(c"/".as_ptr()))?;
            }
            seccomp::load(&self.seccomp)
        }
    }

    /// The `/tests` and `/logs/verifier` mount points (made in the
    /// sandbox's file system when missing), and Harbor's `/logs/verifier/`
    /// (reward.txt, reward.json, ctrf.json) on them: a fresh tmpfs of the
    /// verifier's, writable by the tests, that the agent neither sees nor
    /// pre-fills. With the sandbox's root's file-system rights.
    ///
    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    unsafe fn make_mount_points(&self) -> io::Result<()> {
        if self.tests_dir.is_none() {
            return Ok(());
        }
        unsafe {
            tests_mount_point()?;
            logs_mount_point()?;
            check(libc::mount(
                c"tmpfs".as_ptr(),
                c"/logs/verifier".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                self.logs_data.as_ptr().cast(),
            ))
        }
    }

    /// A copy of the sealed tests folder at `/tests`, on a fresh tmpfs that
    /// the tests may write to (what they write is gone with the
    /// verification; the test modules pytest runs stay in the read-only
    /// private directory). Called with the task's user's file-system ids.
    ///
    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    unsafe fn mount_tests(&self) -> io::Result<()> {
        if self.tests_dir.is_none() {
            return Ok(());
        }
        unsafe {
            check(libc::mount(
                c"tmpfs".as_ptr(),
                c"/tests".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                self.tests_data.as_ptr().cast(),
            ))?;
            self.tests_copy.write()
        }
    }

    /// What [`VerifierPlan::apply_prestarted`] left for the verification,
    /// done in the mount namespace of the pre-started verifier (host pid
    /// `pid`, opened as `ns` and its root as `root`): the `/tests` and
    /// `/logs/verifier` mounts, and hiding an `/etc/ld.so.preload` the
    /// agent wrote since. Runs in a child forked for it, which entered the
    /// plan's user namespace as the cold verifier does; its exit status
    /// is 0 or the errno of the step that failed.
    pub fn seal_prestarted(&self, ns: &OwnedFd, root: &OwnedFd) -> io::Result<()> {
        // SAFETY: the child makes only async-signal-safe calls (the same as
        // `apply`'s, on values prepared before the fork) and `_exit`s.
        unsafe {
            let pid = libc::fork();
            if pid < 0 {
                return Err(io::Error::last_os_error());
            }
            if pid == 0 {
                let step = || -> io::Result<()> {
                    check(libc::setns(self.userns.as_raw_fd(), libc::CLONE_NEWUSER))?;
                    check(libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS))?;
                    check(libc::fchdir(root.as_raw_fd()))?;
                    check(libc::chroot(c".".as_ptr()))?;
                    self.make_mount_points()?;
                    // The copy's files belong to the task's user.
                    libc::setfsgid(self.gid);
                    libc::setfsuid(self.uid);
                    self.mount_tests()?;
                    hide_preload()
                };
                let code = match step() {
                    Ok(()) => 0,
                    Err(e) => e.raw_os_error().unwrap_or(libc::EIO).clamp(1, 255),
                };
                libc::_exit(code);
            }
            let status = wait_for(pid)?;
            match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
                (true, 0) => Ok(()),
                (true, errno) => Err(io::Error::from_raw_os_error(errno)),
                _ => Err(io::Error::other("the sealing child was killed")),
            }
        }
    }
}

/// Make the mount at `path` read-only (and `nosuid`, `nodev`).
///
/// # Safety
/// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
unsafe fn remount_read_only(path: &std::ffi::CStr) -> io::Result<()> {
    unsafe {
        check(libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ))
    }
}

/// A detached, read-only (recursively, and `nosuid`, `nodev`) copy of the
/// directory `dir` (opened `O_PATH` in the host's mount namespace): made
/// in a mount namespace of our own, copied from the host's, where the
/// user namespace just entered may clone mounts. Returns its descriptor.
///
/// # Safety
/// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
unsafe fn clone_read_only(dir: RawFd) -> io::Result<libc::c_int> {
    unsafe {
        // The working directory follows into the new namespace's copy of
        // its mount, which the clone below must be taken from.
        check(libc::fchdir(dir))?;
        check(libc::unshare(libc::CLONE_NEWNS))?;
        let tree = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c".".as_ptr(),
            (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as u32)
                as libc::c_uint,
        ) as libc::c_int;
        if tree < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut attr: libc::mount_attr = std::mem::zeroed();
        attr.attr_set = libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        );
        if rc < 0 {
            let e = io::Error::last_os_error();
            libc::close(tree);
            return Err(e);
        }
        Ok(tree)
    }
}

/// Make sure `/tests` is a directory the tests folder can be bound on:
/// made (empty, in the sandbox's file system) when missing; anything else
/// than a directory there (a link the agent planted) is refused like an
/// unhideable `/etc/ld.so.preload`.
unsafe fn tests_mount_point() -> io::Result<()> {
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::lstat(c"/tests".as_ptr(), &mut st) < 0 {
            if *libc::__errno_location() != libc::ENOENT {
                return Err(io::Error::last_os_error());
            }
            return check(libc::mkdir(c"/tests".as_ptr(), 0o755));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(PRELOAD_REFUSED));
        }
        Ok(())
    }
}

/// Make sure `/logs/verifier` is a directory a tmpfs can be mounted on
/// (made when missing, as `/tests` is); a link or another file there is
/// refused like an unhideable `/etc/ld.so.preload`.
unsafe fn logs_mount_point() -> io::Result<()> {
    unsafe {
        for dir in [c"/logs", c"/logs/verifier"] {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::lstat(dir.as_ptr(), &mut st) < 0 {
                if *libc::__errno_location() != libc::ENOENT {
                    return Err(io::Error::last_os_error());
                }
                check(libc::mkdir(dir.as_ptr(), 0o755))?;
            } else if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(io::Error::from_raw_os_error(PRELOAD_REFUSED));
            }
        }
        Ok(())
    }
}

/// Bind `/dev/null` over `/etc/ld.so.preload` when the agent left one (the
/// dynamic loader reads it in every process); refuse when it is something
/// a bind cannot cover.
unsafe fn hide_preload() -> io::Result<()> {
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::lstat(c"/etc/ld.so.preload".as_ptr(), &mut st) < 0 {
            return Ok(());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::from_raw_os_error(PRELOAD_REFUSED));
        }
        check(libc::mount(
            c"/dev/null".as_ptr(),
            c"/etc/ld.so.preload".as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ))
    }
}

/// Fork once so that the child is in the PID namespace entered with
/// `setns`; the parent waits and exits with the child's status.
unsafe fn become_member_of_pid_namespace() -> io::Result<()> {
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            return Ok(());
        }
        // Hold nothing the caller waits on (std's exec-error pipe, the output
        // pipes): only the child's copies may keep them open.
        libc::syscall(
            libc::SYS_close_range,
            0 as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        );
        let Ok(status) = wait_for(pid) else {
            libc::_exit(125);
        };
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(128 + libc::WTERMSIG(status));
    }
}

/// Wait for child `pid` (through `EINTR`): its wait status. Only
/// `waitpid`, no allocation: usable between fork and exec.
fn wait_for(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child, writing into `status`.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if rc < 0 && e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Keep only the capabilities of the bit mask `keep`. With none kept,
/// every capability is dropped (for uid 0 too, and for good:
/// `SECBIT_NOROOT` keeps exec from granting them back). Else (root) the
/// bounding set is cut to `keep` as well, so that what root execs gets
/// `keep` and no more, as under Docker.
unsafe fn keep_only_capabilities(keep: u64) -> io::Result<()> {
    unsafe {
        if keep != 0 {
            for cap in 0..64 {
                if keep & 1 << cap != 0 {
                    continue;
                }
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                    // Past the kernel's last capability.
                    if *libc::__errno_location() == libc::EINVAL {
                        break;
                    }
                    return Err(io::Error::last_os_error());
                }
            }
        } else if libc::getuid() == 0 {
            let bits = libc::SECBIT_NOROOT
                | libc::SECBIT_NOROOT_LOCKED
                | libc::SECBIT_NO_SETUID_FIXUP
                | libc::SECBIT_NO_SETUID_FIXUP_LOCKED;
            check(libc::prctl(
                libc::PR_SET_SECUREBITS,
                bits as libc::c_ulong,
                0,
                0,
                0,
            ))?;
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            Data {
                effective: keep as u32,
                permitted: keep as u32,
                inheritable: 0,
            },
            Data {
                effective: (keep >> 32) as u32,
                permitted: (keep >> 32) as u32,
                inheritable: 0,
            },
        ];
        let rc = libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr());
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tests_folder_is_copied_to_tests_at_its_paths() {
        let files = vec![
            ("tests/test.sh".to_string(), b"echo".to_vec()),
            ("tests/data/a.txt".to_string(), b"a".to_vec()),
            ("bin/python3".to_string(), b"py".to_vec()),
        ];
        let copy = SealedFiles::new(TESTS_INSIDE, &tests_files(&files)).unwrap();
        let dirs: Vec<_> = copy.dirs.iter().map(|d| d.to_str().unwrap()).collect();
        assert_eq!(dirs, ["/tests/data"]);
        let written: Vec<_> = copy
            .files
            .iter()
            .map(|(p, bytes, mode)| (p.to_str().unwrap(), bytes.as_slice(), *mode))
            .collect();
        assert_eq!(
            written,
            [
                ("/tests/test.sh", &b"echo"[..], 0o644),
                ("/tests/data/a.txt", &b"a"[..], 0o644)
            ]
        );
    }
}
