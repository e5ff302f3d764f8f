//! The pre-warmed verifier: one trusted Python process per backend, with
//! pytest imported and run once, that forks a child per verification.
//!
//! Starting Python and importing pytest costs 0.2-0.5 s, most of an
//! episode's time; a forked child of a warm interpreter starts in a few
//! milliseconds. The zygote lives outside every sandbox, as host root, in a
//! mount namespace of its own where the runtime tree sits at the same path
//! as inside a session (`/run/endless-runtime`, see `runtime.rs`), so every
//! module it imports now or later comes from the same read-only files,
//! before and after a child enters a sandbox. It is started through the
//! runtime's loader exactly like the cold verifier.
//!
//! Per verification we open the session's namespaces and root (as for the
//! cold path, `plan.rs`), make the stdin, output, fd-3 and reply pipes,
//! and send them with a JSON request over a `SOCK_SEQPACKET` socket only we
//! hold the other end of. The zygote forks; the child enters the
//! session's namespaces and root, makes a private mount namespace
//! with a fresh tmpfs for the tests, hides `/etc/ld.so.preload`, forks into
//! the PID namespace, becomes the task's user without capabilities, loads
//! the sandbox's seccomp filter and runs the same code as the cold path
//! (`assets/verifier/verifier.py`). Joining the session's cgroups is the
//! one step done differently: a cgroup v1 move waits for an RCU grace
//! period per controller (5-20 ms here, a third of a warm verification), so
//! we move the test runner by pid while pytest starts, and it waits at the
//! start of collection, before any code of the task runs, until we have. A forked child's memory belongs to the
//! host's user namespace, so no process of the agent may ptrace it.
//!
//! Before it forks, the zygote also does once what every run would repeat
//! ([`WarmHints`]): it builds pytest's configuration (the plugin manager and
//! every default plugin registered) for the plugins the runs block, and
//! rewrites and compiles the test modules of a task once for all its
//! samples; a child uses them only where pytest would build the same.
//!
//! Rootless backends cannot give the zygote a mount namespace of its own and
//! still let it enter the sandbox's user namespace; they use the cold path,
//! and results say so.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use seccompiler::BpfProgram;

use super::plan::VerifierPlan;
use super::runtime::{Runtime, INSIDE};
use crate::sandbox::fds::{check, close_inherited, make_mounts_private, pipe};
use crate::sandbox::session::{spawn_capture, CommandOutput, VERIFIER_PROGRAM};
use crate::sandbox::{SandboxError, WarmHints};

/// The largest request sent to a zygote: one datagram, well inside a unix
/// socket's default send buffer (208 KiB).
const MAX_REQUEST: usize = 128 * 1024;

/// How long the zygote may take to import pytest and warm up.
const START_LIMIT: Duration = Duration::from_secs(60);

enum State {
    Idle,
    Starting,
    Ready(Arc<Zygote>),
    Failed(String),
}

/// A running zygote: its process and our end of its control socket.
struct Zygote {
    ctl: OwnedFd,
    child: Mutex<Child>,
}

impl Drop for Zygote {
    fn drop(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The backend's pre-warmed verifier, started on first use in the
/// background (see the module docs).
pub struct WarmVerifier {
    runtime: Runtime,
    seccomp: Vec<BpfProgram>,
    log: PathBuf,
    /// Where its warm-up run's scratch directory goes (`<pid>-warm-up-*`).
    scratch: PathBuf,
    state: Mutex<State>,
    changed: Condvar,
}

impl WarmVerifier {
    /// A verifier that will run `runtime`'s Python under `seccomp`, logging
    /// the zygote's own errors to `log`, its warm-up run in a directory
    /// under `scratch` named after this process (so that one left by a
    /// process that ended during the warm-up is removed as stale, see
    /// `Layout::remove_stale`). Starts nothing yet.
    pub fn new(
        runtime: Runtime,
        seccomp: Vec<BpfProgram>,
        log: PathBuf,
        scratch: PathBuf,
    ) -> Arc<WarmVerifier> {
        Arc::new(WarmVerifier {
            runtime,
            seccomp,
            log,
            scratch,
            state: Mutex::new(State::Idle),
            changed: Condvar::new(),
        })
    }

    /// Start the zygote in the background unless it runs or is starting
    /// (called when a session starts, so it warms up while the agent works).
    pub fn start(self: &Arc<Self>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if !matches!(*state, State::Idle) {
            return;
        }
        *state = State::Starting;
        drop(state);
        let me = Arc::clone(self);
        std::thread::spawn(move || {
            let outcome = spawn(&me.runtime, &me.seccomp, &me.log, &me.scratch);
            if let Ok(mut state) = me.state.lock() {
                *state = match outcome {
                    Ok(z) => State::Ready(Arc::new(z)),
                    Err(why) => {
                        tracing::warn!(%why, "the pre-warmed verifier did not start; verifying cold");
                        State::Failed(why)
                    }
                };
            }
            me.changed.notify_all();
        });
    }

    /// The running zygote, waiting for one that is starting; `Err` says why
    /// there is none.
    fn zygote(self: &Arc<Self>) -> Result<Arc<Zygote>, String> {
        self.start();
        let state = self.state.lock().map_err(|_| "poisoned".to_string())?;
        let (state, _) = self
            .changed
            .wait_timeout_while(state, START_LIMIT, |s| matches!(s, State::Starting))
            .map_err(|_| "poisoned".to_string())?;
        match &*state {
            State::Ready(z) => Ok(Arc::clone(z)),
            State::Failed(why) => Err(why.clone()),
            State::Idle | State::Starting => {
                Err("the pre-warmed verifier is still starting".into())
            }
        }
    }

    /// The zygote's host pid, while one runs.
    pub fn pid(&self) -> Option<u32> {
        match &*self.state.lock().ok()? {
            State::Ready(z) => z.child.lock().ok().map(|c| c.id()),
            _ => None,
        }
    }

    /// Forget a zygote that stopped answering; the next call starts another.
    fn retire(&self, dead: &Arc<Zygote>) {
        if let Ok(mut state) = self.state.lock() {
            if matches!(&*state, State::Ready(z) if Arc::ptr_eq(z, dead)) {
                *state = State::Idle;
            }
        }
    }

    /// Run one verification planned by `plan` with `env`, feeding `input`
    /// on stdin; what it printed and what it wrote to fd 3. `Ok(None)`: no
    /// zygote could take it (the reason), so the caller runs it cold.
    pub fn run(
        self: &Arc<Self>,
        plan: &VerifierPlan,
        env: &[(String, String)],
        hints: &WarmHints,
        input: Vec<u8>,
        timeout: Duration,
    ) -> Result<Result<(CommandOutput, Vec<u8>), String>, SandboxError> {
        let zygote = match self.zygote() {
            Ok(z) => z,
            Err(why) => return Ok(Err(why)),
        };
        let io = |what: &'static str| SandboxError::io(what, "pipe");
        let (stdin_r, stdin_w) = pipe().map_err(io("create verifier pipe"))?;
        let (out_r, out_w) = pipe().map_err(io("create verifier pipe"))?;
        let (fd3_r, fd3_w) = pipe().map_err(io("create verifier pipe"))?;
        let (reply_r, reply_w) = pipe().map_err(io("create verifier pipe"))?;
        let (gate_r, gate_w) = pipe().map_err(io("create verifier pipe"))?;
        let (mut request, mut fds) = plan.warm_request();
        let mut pass = |name: &str, fd: RawFd| {
            request.insert(name.into(), fds.len().into());
            fds.push(fd);
        };
        pass("fd_stdin", stdin_r.as_raw_fd());
        pass("fd_out", out_w.as_raw_fd());
        pass("fd_fd3", fd3_w.as_raw_fd());
        pass("fd_reply", reply_w.as_raw_fd());
        pass("fd_gate", gate_r.as_raw_fd());
        request.insert("env".into(), serde_json::json!(env));
        request.insert("prebuild".into(), serde_json::json!(hints.plugin_args));
        let modules: serde_json::Map<_, _> = hints
            .modules
            .iter()
            .map(|(path, source)| (path.clone(), source.clone().into()))
            .collect();
        request.insert("compile".into(), modules.into());
        let full = serde_json::Value::Object(request);
        let mut body = full.to_string();
        // One datagram: modules that would not fit are compiled by pytest.
        if let (true, serde_json::Value::Object(mut small)) = (body.len() > MAX_REQUEST, full) {
            small.remove("compile");
            body = serde_json::Value::Object(small).to_string();
        }
        if let Err(e) = send_with_fds(zygote.ctl.as_raw_fd(), body.as_bytes(), &fds) {
            self.retire(&zygote);
            return Ok(Err(format!(
                "the pre-warmed verifier stopped answering: {e}"
            )));
        }
        drop((stdin_r, out_w, fd3_w, reply_w, gate_r));
        let feeder = std::thread::spawn(move || {
            let _ = File::from(stdin_w).write_all(&input);
        });
        let output = spawn_capture(File::from(out_r));
        let side = spawn_capture(File::from(fd3_r));
        let mut reply = Replies::new(reply_r);
        let deadline = Instant::now() + timeout;
        let gate = Gate {
            cgroup_procs: plan.cgroup_procs(),
            pipe: File::from(gate_w),
        };
        let outcome = wait_for_exit(&mut reply, gate, deadline);
        let out = output.join().unwrap_or_default();
        let _ = feeder.join();
        let side = side.join().unwrap_or_default();
        let (code, timed_out) = match outcome {
            Exit::Code(code) => (Some(code), false),
            Exit::TimedOut => (None, true),
            Exit::Refused { what, errno } => {
                return Err(refusal(&what, errno));
            }
            Exit::Lost(why) => {
                self.retire(&zygote);
                return Ok(Err(why));
            }
        };
        Ok(Ok((
            CommandOutput {
                output: String::from_utf8_lossy(&out).into_owned(),
                code,
                timed_out,
            },
            side,
        )))
    }
}

/// What a refused step of entering the sandbox means.
fn refusal(what: &str, errno: i32) -> SandboxError {
    if what == "preload" {
        return SandboxError::Tampered(
            "/etc/ld.so.preload is not a regular file, so it cannot be hidden from the verifier"
                .into(),
        );
    }
    if errno == 0 {
        return SandboxError::Start(format!("pre-warmed verifier: {what}"));
    }
    SandboxError::Start(format!(
        "pre-warmed verifier: {what} failed: {}",
        std::io::Error::from_raw_os_error(errno)
    ))
}

/// How a verification's child ended.
enum Exit {
    Code(i32),
    TimedOut,
    Refused { what: String, errno: i32 },
    Lost(String),
}

/// What lets the test runner start: the session's cgroups it must join,
/// and the pipe it waits on before collecting the tests.
pub(super) struct Gate<'a> {
    pub(super) cgroup_procs: &'a [CString],
    pub(super) pipe: File,
}

impl Gate<'_> {
    /// Move the runner (host pid `runner`) into the session's cgroups, then
    /// let it go on; its children are born there.
    pub(super) fn open(mut self, runner: i32) -> Result<(), String> {
        let started = Instant::now();
        for procs in self.cgroup_procs {
            let path = Path::new(std::ffi::OsStr::from_bytes(procs.as_bytes()));
            std::fs::write(path, runner.to_string())
                .map_err(|e| format!("moving the verifier into {}: {e}", path.display()))?;
        }
        tracing::debug!(
            cgroups = self.cgroup_procs.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "moved the verifier's runner into the session's cgroups"
        );
        self.pipe
            .write_all(b"1")
            .map_err(|e| format!("the verifier's runner is gone: {e}"))
    }
}

/// Read the child's pid, move its test runner into the session's cgroups
/// and open the gate, then wait for its exit (or kill its process group at
/// the deadline).
fn wait_for_exit(reply: &mut Replies, gate: Gate<'_>, deadline: Instant) -> Exit {
    let pid = match reply.next(deadline) {
        Some(Ok(v)) => match v.get("pid").and_then(|p| p.as_i64()) {
            Some(pid) if pid > 1 => pid as i32,
            _ => return Exit::Lost(format!("unexpected first reply {v}")),
        },
        Some(Err(why)) => return Exit::Lost(why),
        None => return Exit::Lost("the pre-warmed verifier did not fork in time".into()),
    };
    let kill = || {
        // SAFETY: kill(2) on the process group the child made itself leader
        // of; it lives until this group is killed or it kills it itself.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    };
    let mut next = reply.next(deadline);
    if let Some(Ok(v)) = &next {
        if let Some(runner) = v.get("runner").and_then(|r| r.as_i64()) {
            if let Err(why) = gate.open(runner as i32) {
                kill();
                return Exit::Refused {
                    what: why,
                    errno: 0,
                };
            }
            next = reply.next(deadline);
        }
    }
    match next {
        Some(Ok(v)) => {
            if let Some(code) = v.get("exit").and_then(|c| c.as_i64()) {
                Exit::Code(code as i32)
            } else if let Some(what) = v.get("refused").and_then(|w| w.as_str()) {
                kill();
                Exit::Refused {
                    what: what.to_string(),
                    errno: v.get("errno").and_then(|e| e.as_i64()).unwrap_or(0) as i32,
                }
            } else {
                kill();
                Exit::Lost(format!("unexpected reply {v}"))
            }
        }
        // The child died without a word: killed with its group (memory
        // limit, teardown); report it like a killed cold verifier.
        Some(Err(_)) => {
            kill();
            Exit::Code(137)
        }
        None => {
            kill();
            Exit::TimedOut
        }
    }
}

/// JSON lines from the child's reply pipe.
pub(super) struct Replies {
    file: File,
    buf: Vec<u8>,
}

impl Replies {
    pub(super) fn new(fd: OwnedFd) -> Replies {
        Replies {
            file: File::from(fd),
            buf: Vec::new(),
        }
    }

    /// The next line as JSON; `None` at the deadline; `Err` when the pipe
    /// closed or the line is not JSON.
    pub(super) fn next(&mut self, deadline: Instant) -> Option<Result<serde_json::Value, String>> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                return Some(
                    serde_json::from_slice(&line)
                        .map_err(|e| format!("unreadable reply from the verifier: {e}")),
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut poll = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut poll, 1, ms) };
            if rc == 0 {
                continue;
            }
            if rc < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Some(Err("poll on the verifier's reply failed".into()));
            }
            let mut chunk = [0u8; 4096];
            match self.file.read(&mut chunk) {
                Ok(0) => return Some(Err("the verifier's child exited without a word".into())),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Some(Err(format!("reading the verifier's reply: {e}"))),
            }
        }
    }
}

/// A close-on-exec `SOCK_SEQPACKET` socket pair.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two fresh descriptors that we then own.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both are valid and owned by nobody else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// Send one message with `fds` attached (`SCM_RIGHTS`).
fn send_with_fds(sock: RawFd, body: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    // u64 words keep the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8).max(1)];
    let mut iov = libc::iovec {
        iov_base: body.as_ptr() as *mut libc::c_void,
        iov_len: body.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds one header with room for `fds`.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    loop {
        // SAFETY: msg points at live buffers for the duration of the call.
        let rc = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if rc >= 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one message (no descriptors) within `limit`.
fn recv_within(sock: RawFd, limit: Duration) -> Result<Vec<u8>, String> {
    let mut poll = libc::pollfd {
        fd: sock,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut poll, 1, ms) } <= 0 {
        return Err(format!("no answer within {limit:?}"));
    }
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: buf is writable for its length.
    let n = unsafe { libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n <= 0 {
        return Err("it exited".into());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The mounts of the zygote's own namespace: a tmpfs on `/run` holding the
/// runtime at [`INSIDE`], as every session sees it.
struct ZygoteMounts {
    run: CString,
    inside: CString,
    runtime_dir: CString,
    binds: Vec<(CString, CString)>,
}

impl ZygoteMounts {
    fn new(runtime: &Runtime) -> Result<ZygoteMounts, String> {
        let c = |s: &str| CString::new(s).map_err(|_| format!("NUL byte in {s:?}"));
        let run = Path::new(INSIDE)
            .parent()
            .and_then(|p| p.to_str())
            .ok_or("the runtime's path has no parent")?;
        Ok(ZygoteMounts {
            run: c(run)?,
            inside: c(INSIDE)?,
            runtime_dir: c(&runtime.dir.to_string_lossy())?,
            binds: runtime
                .host_binds()
                .iter()
                .map(|(host, inside)| Ok((c(&host.to_string_lossy())?, c(inside)?)))
                .collect::<Result<_, String>>()?,
        })
    }

    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    unsafe fn apply(&self) -> std::io::Result<()> {
        let none = std::ptr::null();
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            make_mounts_private()?;
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.run.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0755,size=1m".as_ptr().cast(),
            ))?;
            check(libc::mkdir(self.inside.as_ptr(), 0o755))?;
            check(libc::mount(
                self.runtime_dir.as_ptr(),
                self.inside.as_ptr(),
                none,
                libc::MS_BIND,
                none.cast(),
            ))?;
            for (host, inside) in &self.binds {
                check(libc::mount(
                    host.as_ptr(),
                    inside.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    none.cast(),
                ))?;
                check(libc::mount(
                    none,
                    inside.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                    none.cast(),
                ))?;
            }
        }
        Ok(())
    }
}

/// Start a zygote: its namespace, the interpreter, the hello (seccomp
/// programs, a scratch directory for the warm-up run), the ready answer.
fn spawn(
    runtime: &Runtime,
    seccomp: &[BpfProgram],
    log: &Path,
    scratch_dir: &Path,
) -> Result<Zygote, String> {
    let started = Instant::now();
    let (ours, theirs) = seqpacket_pair().map_err(|e| format!("socketpair: {e}"))?;
    let mounts = ZygoteMounts::new(runtime)?;
    // Not under the tmpfs the zygote mounts on `/run`, where it could not see it.
    let temp = std::env::temp_dir();
    let hidden = Path::new(INSIDE)
        .parent()
        .is_some_and(|run| scratch_dir.starts_with(run));
    let scratch_dir = if hidden { temp.as_path() } else { scratch_dir };
    // trusted: the private cache's own sessions directory
    std::fs::create_dir_all(scratch_dir).map_err(|e| format!("scratch directory: {e}"))?;
    let scratch = tempfile::Builder::new()
        .prefix(&format!("{}-warm-up-", std::process::id()))
        .tempdir_in(scratch_dir)
        .map_err(|e| format!("scratch directory: {e}"))?;
    let stderr = File::create(log)
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let (program, args) = runtime
        .python
        .split_first()
        .ok_or("the runtime has no interpreter")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .args(["-I", "-S", "-B", "-c", VERIFIER_PROGRAM, "zygote"])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let raw = theirs.as_raw_fd();
    // SAFETY: setsid, ZygoteMounts::apply, dup2, fcntl and close_inherited
    // are async-signal-safe and allocate nothing.
    unsafe {
        cmd.pre_exec(move || {
            // A session of its own: no verification it forks (nor what a
            // test starts) has the operator's terminal.
            check(libc::setsid())?;
            mounts.apply()?;
            if raw == 3 {
                check(libc::fcntl(3, libc::F_SETFD, 0))?;
            } else {
                check(libc::dup2(raw, 3))?;
            }
            close_inherited(&[3])
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("start {program}: {e}"))?;
    drop(theirs);
    let hello = serde_json::json!({
        "seccomp": seccomp.iter().map(|p| hex::encode(crate::sandbox::isolate::seccomp::bytes(p))).collect::<Vec<_>>(),
        "scratch": scratch.path(),
    })
    .to_string();
    let answer = send_with_fds(ours.as_raw_fd(), hello.as_bytes(), &[])
        .map_err(|e| e.to_string())
        .and_then(|_| recv_within(ours.as_raw_fd(), START_LIMIT));
    let ready = answer.and_then(|bytes| {
        serde_json::from_slice::<serde_json::Value>(&bytes).map_err(|e| e.to_string())
    });
    match ready {
        Ok(v) if v.get("ready").and_then(|r| r.as_bool()) == Some(true) => {
            tracing::debug!(
                python = %v["python"], pytest = %v["pytest"],
                secs = started.elapsed().as_secs_f64(),
                "pre-warmed verifier ready"
            );
            Ok(Zygote {
                ctl: ours,
                child: Mutex::new(child),
            })
        }
        other => {
            let _ = child.kill();
            let _ = child.wait();
            let why = match other {
                Ok(v) => v
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("it refused")
                    .to_string(),
                Err(e) => e,
            };
            Err(format!(
                "the pre-warmed verifier did not start: {why} (see {})",
                log.display()
            ))
        }
    }
}
