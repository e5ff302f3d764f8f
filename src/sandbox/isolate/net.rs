//! Network access for tasks that ask for it (`[environment] network = true`):
//! the session (or build) gets its own network namespace, connected to the
//! outside through user-mode networking (`pasta`, from Debian's `passt`),
//! never the host's namespace.
//!
//! `pasta` runs on the host side with the sandbox's root ids (inside the
//! sandbox's user namespace, so an unprivileged host id), with the gateway
//! not mapped to the host's loopback (`--no-map-gw`) and no port forwarding
//! in either direction: the sandbox reaches the internet as the host sees it,
//! but not the host's `127.0.0.1`, its abstract sockets, or other sessions.
//!
//! The child creates the namespace after switching identity, tells us its pid
//! through a pipe and waits; a thread of ours attaches `pasta` to it and
//! answers, so the sandbox's first command already has the network.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sandbox::SandboxError;

/// How long `pasta` may take to set the namespace up.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(20);

/// Where a session with network finds the host's CA bundle (`ca.crt`).
pub const CA_INSIDE: &str = "/run/endless-ca";
/// The host's CA bundle (Debian's path).
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// For a session with network: a copy of the host's CA bundle in
/// `session_dir/ca/ca.crt` (public certificates only; world-readable), to
/// be bound read-only at [`CA_INSIDE`]; `None` when the host has none. A
/// machine behind a TLS-inspecting proxy trusts that proxy's CA, and the
/// agent's (and the oracle's) `pip`, `curl` and `git` then do too, as in
/// the task's build steps.
pub fn session_ca(session_dir: &Path) -> Result<Option<PathBuf>, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let host = Path::new(HOST_CA_BUNDLE);
    if !host.is_file() {
        return Ok(None);
    }
    let dir = session_dir.join("ca");
    std::fs::create_dir_all(&dir).map_err(SandboxError::io("create the CA directory", &dir))?;
    let copy = dir.join("ca.crt");
    std::fs::copy(host, &copy).map_err(SandboxError::io("copy the host's CA bundle", host))?;
    for (p, mode) in [(&dir, 0o755), (&copy, 0o644)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(SandboxError::io("chmod the CA bundle", p))?;
    }
    Ok(Some(dir))
}

/// The variables that point TLS clients at the bundle of [`session_ca`].
pub fn ca_env() -> Vec<(String, String)> {
    let file = format!("{CA_INSIDE}/ca.crt");
    [
        "SSL_CERT_FILE",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "NODE_EXTRA_CA_CERTS",
    ]
    .into_iter()
    .map(|var| (var.to_string(), file.clone()))
    .collect()
}

/// Path of `pasta`, if installed.
pub fn pasta_path() -> Option<PathBuf> {
    super::bwrap::which("pasta")
        .or_else(|| Some(PathBuf::from("/usr/bin/pasta")).filter(|p| p.exists()))
}

/// The child's ends: where it writes its pid, where it reads the answer.
pub struct ChildEnds {
    /// Write end for the child's pid.
    pub pid: OwnedFd,
    /// Read end for the parent's answer (`y` when the network is up).
    pub go: OwnedFd,
    /// Whether the child must stay dumpable for us to open its namespace:
    /// in an owner namespace, where we are not host root (its identity
    /// switch cleared the flag).
    pub dumpable: bool,
}

/// The parent's ends.
pub struct ParentEnds {
    pid: File,
    go: File,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    crate::sandbox::fds::pipe().map_err(SandboxError::io("create pipe", "pipe"))
}

/// The two pipes of one attachment.
pub fn pipes() -> Result<(ParentEnds, ChildEnds), SandboxError> {
    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    Ok((
        ParentEnds {
            pid: File::from(pid_r),
            go: File::from(go_w),
        },
        ChildEnds {
            pid: pid_w,
            go: go_r,
            dumpable: super::userns::owner_namespace().is_some(),
        },
    ))
}

/// In the child, after its identity switch: a new network namespace, then
/// wait until the parent has connected it.
///
/// # Safety
/// Meant for `pre_exec`: only async-signal-safe calls.
pub unsafe fn child_side(ends: &ChildEnds) -> std::io::Result<()> {
    let (pid_fd, go_fd) = (ends.pid.as_raw_fd(), ends.go.as_raw_fd());
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if ends.dumpable && libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let pid = libc::getpid().to_ne_bytes();
        if libc::write(pid_fd, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
        let mut answer = [0u8; 1];
        loop {
            let n = libc::read(go_fd, answer.as_mut_ptr().cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n == 1 && answer[0] == b'y' {
                return Ok(());
            }
            return Err(std::io::Error::from_raw_os_error(libc::ENETUNREACH));
        }
    }
}

/// Attach `pasta` to the child's namespace from a thread, once the child
/// says it is ready. `userns` (as root: the sandbox's user namespace) is
/// where `pasta` runs as root; `pidfile` receives its pid (the caller kills
/// it at teardown). The thread's result says whether it worked.
pub fn attach_in_background(
    ends: ParentEnds,
    userns: Option<OwnedFd>,
    pidfile: PathBuf,
) -> JoinHandle<Result<(), SandboxError>> {
    std::thread::spawn(move || {
        let ParentEnds { mut pid, mut go } = ends;
        let result = attach(&mut pid, userns, &pidfile);
        let _ = go.write_all(if result.is_ok() { b"y" } else { b"n" });
        result
    })
}

fn attach(
    pid_pipe: &mut File,
    userns: Option<OwnedFd>,
    pidfile: &Path,
) -> Result<(), SandboxError> {
    let mut buf = [0u8; 4];
    let mut poll = libc::pollfd {
        fd: pid_pipe.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one descriptor we own.
    let ready = unsafe { libc::poll(&mut poll, 1, ATTACH_TIMEOUT.as_millis() as i32) };
    if ready <= 0 || pid_pipe.read_exact(&mut buf).is_err() {
        return Err(SandboxError::Start(
            "the sandbox did not create its network namespace".into(),
        ));
    }
    let child = i32::from_ne_bytes(buf);
    let ns_path = format!("/proc/{child}/ns/net");
    let netns =
        File::open(&ns_path).map_err(SandboxError::io("open the network namespace", &ns_path))?;
    let pasta = pasta_path().ok_or_else(|| SandboxError::ToolMissing {
        tool: "pasta".into(),
        hint: "tasks with network = true need user-mode networking: install passt (Debian/Ubuntu: `apt-get install passt`), or run them offline with --offline".into(),
    })?;
    let fd = netns.as_raw_fd();
    let mut cmd = Command::new(pasta);
    cmd.args([
        "--config-net",
        "--no-map-gw",
        "-t",
        "none",
        "-u",
        "none",
        "-T",
        "none",
        "-U",
        "none",
        "-q",
        "-P",
    ])
    .arg(pidfile)
    // In the sandbox's user namespace we are its root; stay so (an
    // unprivileged id on the host) rather than switch to its `nobody`.
    .args(if userns.is_some() {
        vec!["--runas", "0:0"]
    } else {
        Vec::new()
    })
    .arg("--netns")
    .arg(format!("/proc/self/fd/{fd}"))
    .env_clear()
    .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let userns_fd = userns.as_ref().map(|u| u.as_raw_fd());
    // Only host root can make a device node (in an owner namespace pasta
    // opens the host's, which must then be open to all).
    let own_tun = super::userns::owner_namespace().is_none();
    // SAFETY: unshare, mount, mknod, setns, setgroups, setres[ug]id and fcntl
    // are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            crate::sandbox::fds::close_inherited(&[fd])?;
            if let Some(ns) = userns_fd {
                if own_tun {
                    private_tun_device()?;
                }
                super::userns::enter_as_root(ns)?;
            }
            Ok(())
        });
    }
    let out = cmd
        .output()
        .map_err(|e| SandboxError::Start(format!("start pasta: {e}")))?;
    if !out.status.success() {
        return Err(SandboxError::Start(format!(
            "pasta could not connect the sandbox's network ({}): {}; the task asks for network (`--offline` runs its sessions without)",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Give this process (about to drop to the sandbox's unprivileged root) its
/// own `/dev/net/tun` that it may open: a fresh node on a private tmpfs,
/// whatever the host's node's mode (often 0600). Opening the device grants
/// nothing by itself; creating an interface needs `CAP_NET_ADMIN` in the
/// sandbox's own network namespace.
///
/// # Safety
/// Async-signal-safe.
unsafe fn private_tun_device() -> std::io::Result<()> {
    unsafe {
        use crate::sandbox::fds::{check, private_mount_namespace};
        private_mount_namespace()?;
        check(libc::mount(
            c"tmpfs".as_ptr(),
            c"/dev/net".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"mode=0755,size=16k".as_ptr().cast(),
        ))?;
        check(libc::mknod(
            c"/dev/net/tun".as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(10, 200),
        ))?;
        check(libc::chmod(c"/dev/net/tun".as_ptr(), 0o666))
    }
}

/// Whether `pasta` can give a sandbox network here: as host root always
/// (it makes its own `/dev/net/tun`), otherwise only when the host's
/// `/dev/net/tun` is open to everyone (as on Debian; some containers make it
/// root's alone).
pub fn tun_usable() -> bool {
    use std::os::unix::fs::PermissionsExt;
    super::userns::owner_namespace().is_none() && super::userns::running_as_root()
        || std::fs::metadata("/dev/net/tun").is_ok_and(|m| m.permissions().mode() & 0o006 == 0o006)
}

/// Stop the `pasta` whose pid is in `pidfile`, if any, and remove the file.
pub fn stop(pidfile: &Path) {
    if let Some(pid) = std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|p| *p > 1)
    {
        // SAFETY: kill(2) on the pasta we started.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    let _ = std::fs::remove_file(pidfile);
}
