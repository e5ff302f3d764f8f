//! A sealed verifier environment's verifier, started with the session.
//!
//! The built-in runtime's tests fork from one pre-warmed interpreter per
//! backend (`warm.rs`), which runs as host root outside every sandbox:
//! fine for the runtime, which is ours, but a sealed environment's
//! interpreter, libraries and packages come from the task's image and
//! PyPI, so they only ever run inside the task's sandbox, as its user.
//! Started cold at verification, its Python and pytest (and what they
//! import) cost about three times the rest of a cached episode's start
//! and verification.
//!
//! So we start it when the session starts, exactly as the cold verifier
//! would start (`VerifierPlan::apply_prestarted`: the session's namespaces,
//! its root, a private mount namespace with the sealed tests and the
//! environment, the task's user without capabilities, the sandbox's
//! seccomp filter), minus what the agent could notice while it works:
//! it is not a member of the sandbox's PID namespace yet (no `ps` of the
//! agent lists it; no process of the agent can signal it), and it has made
//! no `/tests` or `/logs/verifier` mount point in the sandbox's file
//! system. It imports pytest, builds its configuration and compiles the
//! test modules, then waits on stdin.
//!
//! What it runs comes from the task (the environment's interpreter, its
//! packages and `.pth` files), so before it execs anything it joins a
//! cgroup of its own nested in the session's ([`Confinement`]): the
//! session's process, memory and CPU limits hold for it and all it starts,
//! and the session's teardown freezes and kills them; without cgroups it
//! gets the session's rlimits.
//!
//! At verification we finish its setup from outside
//! (`VerifierPlan::seal_prestarted`: those mount points, and hiding an
//! `/etc/ld.so.preload` the agent wrote since), move its runner into the
//! session's cgroups and send the payload; it forks the runner into the PID
//! namespace, which runs the tests as the cold path does. It is used once,
//! and only for the call it was started for; when the sandbox's mounts
//! changed since it started (its mount namespace is a copy), or it is
//! gone, the verification runs cold and says why.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::plan::VerifierPlan;
use super::warm::{Gate, Replies};
use crate::sandbox::fds::pipe;
use crate::sandbox::session::{Capturing, CommandOutput, MOUNT_POINT_TAMPERED};
use crate::sandbox::{SandboxError, VerifierCall};

/// The largest hints line sent ahead (inside a pipe's default capacity,
/// so that writing it never waits for the interpreter to start).
const MAX_HINTS: usize = 60 * 1024;

/// What holds a pre-started verifier to the session's limits from before
/// its exec: the `cgroup.procs` files it joins (a cgroup nested in each of
/// the session's), or, for a session without cgroups, its rlimits.
pub struct Confinement {
    procs: Vec<CString>,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
}

impl Confinement {
    /// Join `procs` (`cgroup.procs` files) and set `rlimits`.
    pub fn new(
        procs: &[std::path::PathBuf],
        rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    ) -> Result<Confinement, SandboxError> {
        let procs = procs
            .iter()
            .map(|p| {
                CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| {
                    SandboxError::Verify(format!("a NUL byte in the cgroup path {}", p.display()))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Confinement { procs, rlimits })
    }

    /// Apply it to this process; any failure is an error (the verifier
    /// never runs unconfined).
    ///
    /// # Safety
    /// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
    unsafe fn apply(&self) -> std::io::Result<()> {
        let err = std::io::Error::last_os_error;
        unsafe {
            for procs in &self.procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(err());
                }
                let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
                let e = err();
                libc::close(fd);
                if wrote != 1 {
                    return Err(e);
                }
            }
            for (resource, value) in &self.rlimits {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                if libc::setrlimit(*resource, &lim) < 0 {
                    return Err(err());
                }
            }
        }
        Ok(())
    }
}

/// A verifier started with the session, waiting for its payload.
pub struct Prestarted {
    call: VerifierCall,
    plan: Arc<VerifierPlan>,
    process: Capturing,
    /// Its mount namespace and root, for sealing it at verification.
    ns: OwnedFd,
    root: OwnedFd,
    /// The sandbox's init process and its mount table when we started.
    init: i32,
    mounts: Vec<u8>,
    /// Our ends of its reply pipe (the runner's pid) and of the gate its
    /// runner waits on until it is in the session's cgroups.
    reply: OwnedFd,
    gate: OwnedFd,
}

impl Prestarted {
    /// Start `call` (its last argument, the mode, `cold`) as planned by
    /// `plan` for the sandbox whose init is `init`, held by `confinement`.
    pub fn start(
        plan: VerifierPlan,
        call: &VerifierCall,
        init: i32,
        confinement: Confinement,
    ) -> Result<Prestarted, SandboxError> {
        let bad =
            |why: &str| SandboxError::Verify(format!("cannot start the verifier ahead: {why}"));
        let (program, args) = call
            .argv
            .split_first()
            .ok_or_else(|| bad("empty command"))?;
        let Some((_, args)) = args
            .split_last()
            .filter(|(mode, _)| mode.as_str() == "cold")
        else {
            return Err(bad("the command does not end in the program's mode"));
        };
        let mounts = read_mounts(init)?;
        let plan = Arc::new(plan);
        let mut cmd = Command::new(program);
        cmd.args(args)
            .arg("prestarted")
            .env_clear()
            .envs(call.env.iter().map(|(k, v)| (k, v)));
        let io = |e| SandboxError::io("create the verifier's pipes", "pipe")(e);
        let (reply, reply_w) = pipe().and_then(|(r, w)| Ok((r, high(w)?))).map_err(io)?;
        let (gate_r, gate) = pipe().and_then(|(r, w)| Ok((high(r)?, w))).map_err(io)?;
        let keep = vec![reply_w.as_raw_fd(), gate_r.as_raw_fd()];
        let applied = Arc::clone(&plan);
        // SAFETY: Confinement::apply and VerifierPlan::apply_prestarted
        // only make async-signal-safe calls.
        unsafe {
            cmd.pre_exec(move || {
                confinement.apply()?;
                applied.apply_prestarted()
            });
        }
        let mut process = Capturing::spawn(cmd, true, true, keep.clone())?;
        drop((reply_w, gate_r));
        let pid = process.pid();
        // setns(2) takes no O_PATH descriptor; fchdir(2) does.
        let open = |what: &str, flags: i32| -> Result<OwnedFd, SandboxError> {
            let path = format!("/proc/{pid}/{what}");
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags | libc::O_CLOEXEC)
                .open(&path)
                .map(OwnedFd::from)
                .map_err(SandboxError::io("open the pre-started verifier's", path))
        };
        let (ns, root) = match (open("ns/mnt", 0), open("root", libc::O_PATH)) {
            (Ok(ns), Ok(root)) => (ns, root),
            (Err(e), _) | (_, Err(e)) => {
                process.kill();
                return Err(e);
            }
        };
        let mut hints = serde_json::json!({
            "cwd": call.cwd,
            "scratch": plan.warm_up_dir(),
            "fd_reply": keep[0],
            "fd_gate": keep[1],
            "prebuild": call.hints.plugin_args,
            "compile": call
                .hints
                .modules
                .iter()
                .map(|(path, source)| (path.clone(), serde_json::Value::from(source.clone())))
                .collect::<serde_json::Map<_, _>>(),
        });
        if hints.to_string().len() > MAX_HINTS {
            hints["compile"] = serde_json::json!({});
        }
        if let Err(e) = process.feed(format!("{hints}\n").as_bytes()) {
            process.kill();
            return Err(SandboxError::io(
                "send the pre-started verifier its hints",
                "pipe",
            )(e));
        }
        Ok(Prestarted {
            call: call.clone(),
            plan,
            process,
            ns,
            root,
            init,
            mounts,
            reply,
            gate,
        })
    }

    /// Whether it was started for `call` (the same command, environment,
    /// working directory and test files).
    pub fn serves(&self, call: &VerifierCall) -> bool {
        self.call.argv == call.argv
            && self.call.env == call.env
            && self.call.cwd == call.cwd
            && self.call.files == call.files
    }

    /// Run the tests of `input` (see the module docs). `Ok(Err(why))`: it
    /// cannot (the caller verifies cold); `Err(Tampered)`: a path it mounts
    /// over is not what it must be, as for the cold verifier.
    pub fn run(
        mut self,
        input: Vec<u8>,
        timeout: Duration,
    ) -> Result<Result<(CommandOutput, Vec<u8>), String>, SandboxError> {
        if self.process.exited() {
            let (out, _) = self.process.finish(None, Duration::from_secs(1))?;
            let said = out.output.trim();
            return Ok(Err(format!(
                "the pre-started verifier exited before the tests{}",
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {}", tail(said))
                }
            )));
        }
        if read_mounts(self.init).ok().as_deref() != Some(&self.mounts[..]) {
            self.process.kill();
            return Ok(Err(
                "the sandbox's mounts changed since the verifier was started".into(),
            ));
        }
        if let Err(e) = self.plan.seal_prestarted(&self.ns, &self.root) {
            self.process.kill();
            if e.raw_os_error() == Some(crate::sandbox::session::PRELOAD_REFUSED) {
                return Err(SandboxError::Tampered(MOUNT_POINT_TAMPERED.into()));
            }
            return Ok(Err(format!("sealing the pre-started verifier failed: {e}")));
        }
        // Its runner starts pytest while we move it into the session's
        // cgroups; it runs no code of the task before the gate opens.
        let deadline = Instant::now() + timeout;
        self.process.send(Some(input));
        let mut replies = Replies::new(self.reply);
        if let Some(Ok(v)) = replies.next(deadline) {
            if let Some(runner) = v.get("runner").and_then(|r| r.as_i64()) {
                let gate = Gate {
                    cgroup_procs: self.plan.cgroup_procs(),
                    pipe: File::from(self.gate),
                };
                if let Err(why) = gate.open(runner as i32) {
                    self.process.kill();
                    return Ok(Err(why));
                }
            }
        }
        // Else it is gone or late: its exit (or the deadline) tells.
        let left = deadline.saturating_duration_since(Instant::now());
        self.process.finish(None, left).map(Ok)
    }

    /// Stop it unused.
    pub fn stop(self) {
        self.process.kill();
    }
}

/// The sandbox's mount table (its init's), to tell whether it changed.
fn read_mounts(init: i32) -> Result<Vec<u8>, SandboxError> {
    let path = format!("/proc/{init}/mountinfo");
    std::fs::read(&path).map_err(SandboxError::io("read the sandbox's mounts", path))
}

/// The end of a long message.
fn tail(s: &str) -> &str {
    let mut at = s.len().saturating_sub(500);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

/// `fd` moved to a number of 10 or more (close-on-exec), clear of the
/// descriptors the spawned command gets at fixed numbers (0-3).
fn high(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: fcntl on a descriptor we own; the new one is ours alone.
    unsafe {
        let new = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10);
        if new < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(new))
    }
}
