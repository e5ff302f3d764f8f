//! One interactive bash on a PTY inside a sandbox, and the exec protocol.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use portable_pty::{MasterPty, PtySize};
use tokio::sync::broadcast;

use super::asciicast::Recorder;
use super::audience::{Audience, LiveSender};
use super::detach::detach_from_terminal;
use super::marker;
use super::streaming::CAPTURE_LIMIT;
use super::{ExecResult, SandboxError, SessionOptions};

/// How long a fresh shell may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an interrupted command gets to stop before it is killed.
const INTERRUPT_GRACE: Duration = Duration::from_millis(1500);
/// How long, once its terminal closed, the sandbox's process gets to end
/// before its exit status is read.
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(1);
/// Capacity of the live broadcast channel (chunks).
const BROADCAST_CAPACITY: usize = 4096;

pub use super::audience::Chunk;

/// Backend-specific control over a running sandbox.
pub trait SessionControl: Send {
    /// Kill every process of the sandbox except its init and the shell
    /// (whose process group is `shell_pgid`); used after a timeout.
    fn kill_strays(&mut self, shell_pgid: Option<i32>);
    /// A command that runs `argv` as root inside the sandbox, in the same
    /// filesystem, process and network namespaces as the shell.
    fn root_command(&mut self, argv: &[String]) -> Result<Command, SandboxError>;
    /// A command that runs the verifier (`call`) beside the shell, where the
    /// agent cannot reach it. Container engines run it like a root command.
    fn verifier_command(&mut self, call: &VerifierCall) -> Result<Command, SandboxError> {
        self.root_command(&verifier_argv(call))
    }
    /// Run the verifier `call` forked from the backend's pre-warmed
    /// interpreter, feeding it `input` on stdin: what it printed and what it
    /// wrote to fd 3. `Ok(Err(why))`: there is none to take it (the caller
    /// then starts [`SessionControl::verifier_command`] afresh).
    fn run_warm_verifier(
        &mut self,
        _call: &VerifierCall,
        _input: &[u8],
        _timeout: Duration,
    ) -> Result<Result<(CommandOutput, Vec<u8>), String>, SandboxError> {
        Ok(Err("this backend has no pre-warmed verifier".into()))
    }
    /// Start the verifier `call` (one in a sealed verifier environment)
    /// now, while the agent works, so that it has imported what it needs
    /// when the tests run ([`SessionControl::run_prestarted_verifier`]).
    /// `Err(why)`: this backend cannot.
    fn prestart_verifier(&mut self, _call: &VerifierCall) -> Result<(), String> {
        Err("this backend does not start verifiers ahead".into())
    }
    /// Run the verifier `call` in the one [`SessionControl::prestart_verifier`]
    /// started for the same call, feeding it `input`: what it printed and
    /// what it wrote to fd 3. `Ok(Err(why))`: there is none to take it (the
    /// caller then starts [`SessionControl::verifier_command`] afresh).
    fn run_prestarted_verifier(
        &mut self,
        _call: &VerifierCall,
        _input: &[u8],
        _timeout: Duration,
    ) -> Result<Result<(CommandOutput, Vec<u8>), String>, SandboxError> {
        Ok(Err("no verifier was started with this session".into()))
    }
    /// The argv prefix that starts the verifier's Python inside the sandbox.
    fn verifier_python(&self) -> Vec<String> {
        vec!["/usr/bin/python3".into()]
    }
    /// Whether [`SessionControl::user_command`] can run as other ids than
    /// the task user's (the sandbox maps them).
    fn runs_other_users(&self) -> bool {
        false
    }
    /// Whether inside ids `uid`:`gid` are mapped in the sandbox, so that
    /// [`SessionControl::user_command`] can run as them.
    fn maps_ids(&self, ids: (u32, u32)) -> bool {
        let _ = ids;
        false
    }
    /// [`SessionControl::verifier_command`] as inside `uid`:`gid` instead
    /// of the task's user, with the same isolation. Backends that cannot
    /// refuse.
    fn user_command(
        &mut self,
        call: &VerifierCall,
        (uid, gid): (u32, u32),
    ) -> Result<Command, SandboxError> {
        let _ = call;
        Err(SandboxError::Verify(format!(
            "this backend runs commands only as the task's user, not as {uid}:{gid}"
        )))
    }
    /// A directory shared with the sandbox for copying files in: the host
    /// path and its path inside the sandbox.
    fn exchange_dir(&self) -> Option<(PathBuf, String)>;
    /// Kill everything and release resources (cgroups, directories).
    fn teardown(&mut self, child: &mut Child);
    /// Which resource limit the sandbox ran into, if one killed something
    /// (e.g. the memory limit's OOM killer).
    fn limit_hit(&self) -> Option<String> {
        None
    }
}

/// The verifier's own program (`assets/verifier/verifier.py`): run with
/// `-c PROGRAM cold` it reads the tests on stdin and runs them once; with
/// `zygote` it is the local backend's pre-warmed verifier; with
/// `prestarted` it is a sealed environment's verifier started with the
/// session (`sandbox/verifier/prestart.rs`).
pub const VERIFIER_PROGRAM: &str = include_str!("../../assets/verifier/verifier.py");

/// One run of the verifier: a trusted program, its environment (nothing
/// else is inherited) and working directory inside the sandbox.
#[derive(Debug, Clone)]
pub struct VerifierCall {
    /// The command (starting with [`SessionControl::verifier_python`], or
    /// a sealed environment's interpreter); its last argument is the
    /// program's mode, `cold`.
    pub argv: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Its working directory inside (falls back to `/`).
    pub cwd: String,
    /// Use the backend's pre-warmed interpreter where it has one (the
    /// verifier's program then runs forked from it instead of `argv`), or,
    /// with `sealed_env`, the verifier started with the session.
    pub warm: bool,
    /// `argv` runs a task's sealed verifier environment: never forked from
    /// the built-in runtime's interpreter, but started with the session
    /// where the backend can ([`Session::prestart_verifier`]).
    pub sealed_env: bool,
    /// What that interpreter may prepare once and reuse (ignored cold).
    pub hints: WarmHints,
    /// The files the tests need (path relative to the private directory,
    /// bytes). A backend that can writes them before the verifier drops its
    /// privileges and makes them read-only, so that nothing a test starts can
    /// plant a module beside them; the program writes those not there yet.
    pub files: Vec<(String, Vec<u8>)>,
}

/// What a pre-warmed verifier may prepare before it forks, once for every
/// verification that asks for the same: nothing here changes a verdict.
#[derive(Debug, Clone, Default)]
pub struct WarmHints {
    /// pytest's plugin-blocking arguments (`-p no:NAME`) of the runs: its
    /// configuration is built once for them.
    pub plugin_args: Vec<String>,
    /// Test modules to rewrite and compile once: path inside, source.
    pub modules: Vec<(String, String)>,
}

/// How a verification ran.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "path", content = "note")]
pub enum VerifierPath {
    /// Forked from the backend's pre-warmed interpreter.
    Warm,
    /// The sealed environment's interpreter, started with the session.
    Prestarted,
    /// A fresh interpreter; the note says why, where warm was asked for.
    Cold(Option<String>),
}

impl VerifierPath {
    /// `warm`, `cold` or `cold (why)`.
    pub fn describe(&self) -> String {
        match self {
            VerifierPath::Warm => "warm".into(),
            VerifierPath::Prestarted => "pre-started".into(),
            VerifierPath::Cold(None) => "cold".into(),
            VerifierPath::Cold(Some(why)) => format!("cold ({why})"),
        }
    }
}

/// What a session runs as and where.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionInfo {
    /// Backend name.
    pub backend: &'static str,
    /// Account of the shell.
    pub user: String,
    /// Working directory the shell starts in.
    pub workdir: String,
    /// Image hash the session started from.
    pub image: String,
    /// What the session's resource limits leave out, said in every result
    /// (`None`: processes, memory and CPU are all limited for the session
    /// as a whole, or the engine limits them).
    pub limits: Option<String>,
}

/// Output of a command run beside the shell (see [`Session::run_as_root`]).
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// stdout and stderr, interleaved as they arrived (lossy UTF-8).
    pub output: String,
    /// Exit code; `None` when killed or timed out.
    pub code: Option<i32>,
    /// The command ran past its timeout and was killed.
    pub timed_out: bool,
}

enum Event {
    Data(Chunk),
    Closed,
}

/// An interactive shell in a sandbox. Dropping it kills every process it started.
pub struct Session {
    master: Box<dyn MasterPty + Send>,
    writer: Box<dyn Write + Send>,
    events: Receiver<Event>,
    live: broadcast::Sender<Chunk>,
    /// What people see: the recording and live viewers.
    audience: Arc<Mutex<Audience>>,
    child: Child,
    control: Box<dyn SessionControl>,
    token: String,
    seq: u64,
    shell_pgid: Option<i32>,
    ended: Option<String>,
    started: Instant,
    wall_clock: Duration,
    watchdog: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    torn_down: bool,
    info: SessionInfo,
}

impl Session {
    /// Start `cmd` (which must end in an interactive bash) on a fresh PTY,
    /// type `init` (shell setup; must not print) and wait until the shell answers.
    /// The child inherits no descriptor beyond its terminal and `keep_fds`.
    ///
    /// `control` is made from the child's pid once it runs.
    pub fn spawn_with(
        mut cmd: Command,
        keep_fds: Vec<std::os::fd::RawFd>,
        init: &str,
        opts: &SessionOptions,
        info: SessionInfo,
        control: impl FnOnce(u32) -> Box<dyn SessionControl>,
    ) -> Result<Session, SandboxError> {
        let (cols, rows) = opts.size;
        let pair = portable_pty::native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| SandboxError::Start(format!("open a PTY: {e}")))?;
        let master = pair.master;
        let master_fd = master
            .as_raw_fd()
            .ok_or_else(|| SandboxError::Start("PTY has no file descriptor".into()))?;
        disable_echo(master_fd);
        let tty = master
            .tty_name()
            .ok_or_else(|| SandboxError::Start("PTY has no name".into()))?;
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&tty)
            .map_err(SandboxError::io("open PTY slave", &tty))?;
        drop(pair.slave);
        let stdio = |f: &std::fs::File| -> Result<Stdio, SandboxError> {
            Ok(Stdio::from(
                f.try_clone()
                    .map_err(SandboxError::io("dup PTY slave", &tty))?,
            ))
        };
        cmd.stdin(stdio(&slave)?)
            .stdout(stdio(&slave)?)
            .stderr(stdio(&slave)?);
        // SAFETY: only async-signal-safe calls (fcntl, setsid, ioctl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                super::fds::close_inherited(&keep_fds)?;
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // From the spawner thread: the sandbox dies with its parent thread
        // (`--die-with-parent`), which must live as long as the session.
        let program = cmd.get_program().to_owned();
        let child = super::spawner::spawn(cmd)
            .map_err(|e| SandboxError::Start(format!("spawn {program:?}: {e}")))?;
        drop(slave);
        let control = control(child.id());
        let reader = master
            .try_clone_reader()
            .map_err(|e| SandboxError::Start(format!("PTY reader: {e}")))?;
        let writer = master
            .take_writer()
            .map_err(|e| SandboxError::Start(format!("PTY writer: {e}")))?;
        let (live, _) = broadcast::channel(BROADCAST_CAPACITY);
        let audience = Arc::new(Mutex::new(audience_for(opts, &live)?));
        let (tx, events) = mpsc::channel();
        spawn_reader(reader, tx, audience.clone());
        let watchdog = spawn_watchdog(child.id(), opts.wall_clock);
        let mut token = [0u8; 8];
        rand::Rng::fill(&mut rand::rng(), &mut token);
        let mut session = Session {
            master,
            writer,
            events,
            live,
            audience,
            child,
            control,
            token: hex::encode(token),
            seq: 0,
            shell_pgid: None,
            ended: None,
            started: Instant::now(),
            wall_clock: opts.wall_clock,
            watchdog: Some(watchdog),
            torn_down: false,
            info,
        };
        let tag = format!("{}_ready", session.token);
        let line = format!("{init}\n{}", marker::marker_printf(&tag, "0"));
        session.write_raw(line.as_bytes())?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut got = Collected::default();
        match session.read_until(&marker::marker_prefix(&tag), deadline, &mut got) {
            Ok(Some(_)) => {}
            Ok(None) => {
                session.teardown();
                return Err(SandboxError::Start(format!(
                    "the shell did not answer within {READY_TIMEOUT:?}; output:\n{}",
                    marker::clean_output(&got.kept)
                )));
            }
            Err(_) => {
                let status = session.child.try_wait().ok().flatten();
                session.teardown();
                return Err(SandboxError::Start(format!(
                    "the sandbox exited ({}) before its shell was ready; output:\n{}",
                    status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "killed".into()),
                    marker::clean_output(&got.kept)
                )));
            }
        }
        session.shell_pgid = session.master.process_group_leader();
        Ok(session)
    }

    /// Take over a session started ahead of time (a pre-started sandbox
    /// from a pool) for an episode with `opts`: its wall clock starts now,
    /// its terminal gets `opts.size`, and its recording and live stream are
    /// made afresh with `opts`' file and budget, as [`Session::spawn_with`]
    /// would have made them. Fails when the shell has ended meanwhile.
    pub fn adopt(&mut self, opts: &SessionOptions) -> Result<(), SandboxError> {
        self.drain();
        if !self.is_alive() {
            return Err(SandboxError::SessionEnded {
                reason: self.ended.clone(),
                output: String::new(),
            });
        }
        let (cols, rows) = opts.size;
        let fresh = audience_for(opts, &self.live)?;
        if let Ok(mut audience) = self.audience.lock() {
            *audience = fresh;
        }
        if self.master.get_size().map(|s| (s.cols, s.rows)).ok() != Some((cols, rows)) {
            self.master
                .resize(PtySize {
                    rows,
                    cols,
                    pixel_width: 0,
                    pixel_height: 0,
                })
                .map_err(|e| SandboxError::Start(format!("resize PTY: {e}")))?;
        }
        // The old watchdog ends once it sees its channel closed, without
        // killing anything; the hand-out does not wait for it.
        drop(self.watchdog.take());
        self.watchdog = Some(spawn_watchdog(self.child.id(), opts.wall_clock));
        self.started = Instant::now();
        self.wall_clock = opts.wall_clock;
        Ok(())
    }

    /// What the session runs as and where.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// The pid of the sandbox's outermost process (the backend's child,
    /// not reaped while the session lives). With the local backend,
    /// killing it ends every process of the sandbox.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the shell is still running.
    pub fn is_alive(&mut self) -> bool {
        self.ended.is_none() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Run `cmd` in the shell and wait for it, at most `timeout` (and never
    /// past the session's wall-clock limit). On timeout the command is
    /// interrupted (Ctrl-C), then killed; the session stays usable.
    pub fn exec(&mut self, cmd: &str, timeout: Duration) -> Result<ExecResult, SandboxError> {
        let start = Instant::now();
        self.check_usable()?;
        let left = self.wall_clock.saturating_sub(self.started.elapsed());
        let deadline = start + timeout.min(left);
        self.drain();
        if let Some(fd) = self.master.as_raw_fd() {
            disable_echo(fd);
        }
        self.seq += 1;
        let tag = format!("{}_{}", self.token, self.seq);
        let prefix = marker::marker_prefix(&tag);
        self.show(|a| a.command(cmd));
        self.write_raw(marker::wrap_command(cmd, &tag).as_bytes())?;
        let mut got = Collected::default();
        if let Some(code) = self.read_until(&prefix, deadline, &mut got)? {
            return Ok(finish(got, Some(code), false, start, &prefix));
        }
        // Timed out: interrupt, then kill, and wait for a fresh marker.
        let rtag = format!("{}_{}r", self.token, self.seq);
        let rprefix = marker::marker_prefix(&rtag);
        self.write_raw(b"\x03")?;
        std::thread::sleep(Duration::from_millis(20));
        self.write_raw(marker::marker_printf(&rtag, "130").as_bytes())?;
        if self
            .read_until(&rprefix, Instant::now() + INTERRUPT_GRACE, &mut got)?
            .is_none()
        {
            self.kill_foreground();
            if self
                .read_until(&rprefix, Instant::now() + INTERRUPT_GRACE * 2, &mut got)?
                .is_none()
            {
                self.teardown();
                if self.wall_clock_passed() {
                    return Err(SandboxError::WallClock(self.wall_clock));
                }
                return Err(SandboxError::Unresponsive);
            }
        }
        if self.wall_clock_passed() {
            self.teardown();
            return Err(SandboxError::WallClock(self.wall_clock));
        }
        Ok(finish(got, None, true, start, &prefix))
    }

    /// Subscribe to the raw output stream (for live panes). Works without a
    /// runtime through `try_recv` / `blocking_recv`.
    pub fn subscribe(&self) -> broadcast::Receiver<Chunk> {
        self.live.subscribe()
    }

    /// Type raw bytes into the terminal, as a human at the keyboard would.
    pub fn write_input(&mut self, bytes: &[u8]) -> Result<(), SandboxError> {
        self.show(|a| a.input(bytes));
        self.write_raw(bytes)
    }

    /// Note in the recording a command line a human typed (it then runs
    /// through [`Session::exec`], which echoes every other command after
    /// the agent's prompt): see [`Recorder::command_line`].
    pub fn record_human_line(&self, line: &str) {
        self.show(|a| a.human_line(line));
    }

    /// Tell the session's audience (recording, live viewers) something.
    fn show(&self, f: impl FnOnce(&mut Audience)) {
        if let Ok(mut audience) = self.audience.lock() {
            f(&mut audience);
        }
    }

    /// Resize the terminal.
    pub fn resize(&mut self, cols: u16, rows: u16) -> Result<(), SandboxError> {
        self.master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| SandboxError::Start(format!("resize PTY: {e}")))?;
        self.show(|a| a.resize(cols, rows));
        Ok(())
    }

    /// Run `argv` as root inside the sandbox beside the shell (not through
    /// it), with output captured, killed after `timeout`.
    pub fn run_as_root(
        &mut self,
        argv: &[String],
        timeout: Duration,
    ) -> Result<CommandOutput, SandboxError> {
        self.check_usable()?;
        let cmd = self.control.root_command(argv)?;
        run_with_timeout(cmd, timeout)
    }

    /// Like [`Session::run_as_root`], also returning what the command wrote
    /// to file descriptor 3 (a pipe only this process holds).
    pub fn run_as_root_fd3(
        &mut self,
        argv: &[String],
        timeout: Duration,
    ) -> Result<(CommandOutput, Vec<u8>), SandboxError> {
        self.check_usable()?;
        let cmd = self.control.root_command(argv)?;
        run_capturing(cmd, timeout, true, None, Vec::new())
    }

    /// Run the verifier beside the shell, forked from the backend's
    /// pre-warmed interpreter when `call.warm` asks for it and there is one
    /// (see [`SessionControl::run_warm_verifier`]), else afresh; feeding it
    /// `input` on stdin and returning what it wrote to fd 3 and how it ran.
    pub fn run_verifier(
        &mut self,
        call: &VerifierCall,
        input: Vec<u8>,
        timeout: Duration,
    ) -> Result<(CommandOutput, Vec<u8>, VerifierPath), SandboxError> {
        self.check_usable()?;
        let mut note = None;
        if call.warm && call.sealed_env {
            match self
                .control
                .run_prestarted_verifier(call, &input, timeout)?
            {
                Ok((out, fd3)) => return Ok((out, fd3, VerifierPath::Prestarted)),
                Err(why) => note = Some(why),
            }
        } else if call.warm {
            match self.control.run_warm_verifier(call, &input, timeout)? {
                Ok((out, fd3)) => return Ok((out, fd3, VerifierPath::Warm)),
                Err(why) => note = Some(why),
            }
        }
        let cmd = self.control.verifier_command(call)?;
        let (out, fd3) = run_capturing(cmd, timeout, true, Some(input), Vec::new())?;
        Ok((out, fd3, VerifierPath::Cold(note)))
    }

    /// The argv prefix that starts the verifier's Python inside the sandbox.
    pub fn verifier_python(&self) -> Vec<String> {
        self.control.verifier_python()
    }

    /// Start the verifier `call` (a sealed environment's, see
    /// [`VerifierCall::sealed_env`]) now, so that a later
    /// [`Session::run_verifier`] of the same call finds it ready.
    /// `Err(why)`: it will run cold.
    pub fn prestart_verifier(&mut self, call: &VerifierCall) -> Result<(), String> {
        self.check_usable().map_err(|e| e.to_string())?;
        self.control.prestart_verifier(call)
    }

    /// Run `call` beside the shell, afresh like the verifier's cold path
    /// (as the task's user, or as inside `uid`:`gid` with `as_ids`), with
    /// stdin closed, handing `sink` its output as it comes: stdout and
    /// stderr interleaved, and what it writes to fd 3, each up to
    /// [`CAPTURE_LIMIT`] bytes; killed after `timeout`, or as soon as
    /// `cancel` is set. `started` is called once the command is prepared,
    /// just before it is spawned (an error before it means nothing ran).
    pub fn run_beside_streaming(
        &mut self,
        call: &VerifierCall,
        as_ids: Option<(u32, u32)>,
        timeout: Duration,
        cancel: &std::sync::atomic::AtomicBool,
        started: &mut dyn FnMut(),
        sink: &mut dyn FnMut(super::streaming::Pipe, &[u8]),
    ) -> Result<super::streaming::StreamedExit, SandboxError> {
        self.check_usable()?;
        let cmd = match as_ids {
            None => self.control.verifier_command(call)?,
            Some(ids) => self.control.user_command(call, ids)?,
        };
        started();
        super::streaming::run_streaming(cmd, timeout, cancel, sink)
    }

    /// Whether [`Session::run_beside_streaming`] can run as other users
    /// than the task's.
    pub fn runs_other_users(&self) -> bool {
        self.control.runs_other_users()
    }

    /// Whether the sandbox maps inside ids `uid`:`gid` (a command can run
    /// as them, see [`Session::run_beside_streaming`]).
    pub fn maps_ids(&self, ids: (u32, u32)) -> bool {
        self.control.maps_ids(ids)
    }

    /// The verifier's exchange directory: host path and path inside.
    pub fn exchange_dir(&self) -> Option<(PathBuf, String)> {
        self.control.exchange_dir()
    }

    /// End the session: every process it started is killed and reaped.
    pub fn close(mut self) {
        self.teardown();
    }

    fn check_usable(&mut self) -> Result<(), SandboxError> {
        if self.wall_clock_passed() {
            self.teardown();
            return Err(SandboxError::WallClock(self.wall_clock));
        }
        if let Some(reason) = &self.ended {
            return Err(SandboxError::SessionEnded {
                reason: Some(reason.clone()),
                output: String::new(),
            });
        }
        Ok(())
    }

    fn wall_clock_passed(&self) -> bool {
        self.started.elapsed() >= self.wall_clock
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Result<(), SandboxError> {
        let res = self
            .writer
            .write_all(bytes)
            .and_then(|_| self.writer.flush());
        res.map_err(|e| {
            let reason = format!("PTY write failed: {e}");
            self.ended.get_or_insert_with(|| reason.clone());
            match self.killed_from_outside() {
                Some(signal) => SandboxError::SandboxKilled {
                    signal,
                    output: String::new(),
                },
                None => SandboxError::SessionEnded {
                    reason: Some(reason),
                    output: String::new(),
                },
            }
        })
    }

    fn drain(&mut self) {
        while let Ok(ev) = self.events.try_recv() {
            if let Event::Closed = ev {
                self.ended.get_or_insert_with(|| "the PTY closed".into());
            }
        }
    }

    /// Read until the marker with `prefix` arrives (returns its status),
    /// or `deadline` passes (returns `None`); errors when the shell ends.
    fn read_until(
        &mut self,
        prefix: &[u8],
        deadline: Instant,
        got: &mut Collected,
    ) -> Result<Option<i32>, SandboxError> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let slice = (deadline - now).min(Duration::from_millis(200));
            match self.events.recv_timeout(slice) {
                Ok(Event::Data(chunk)) => {
                    if let Some(code) = got.push(&chunk, prefix) {
                        return Ok(Some(code));
                    }
                }
                Ok(Event::Closed) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.ended_error("the PTY closed", got));
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        return Err(self.ended_error(&format!("the sandbox exited: {status}"), got));
                    }
                }
            }
        }
    }

    fn ended_error(&mut self, reason: &str, got: &Collected) -> SandboxError {
        if self.wall_clock_passed() {
            self.ended
                .get_or_insert_with(|| format!("wall-clock limit of {:?} passed", self.wall_clock));
            self.teardown();
            return SandboxError::WallClock(self.wall_clock);
        }
        // Ask before teardown, which removes the cgroups that know.
        let limit = self.control.limit_hit();
        let killed = match limit {
            Some(_) => None,
            None => self.killed_from_outside(),
        };
        self.ended.get_or_insert_with(|| reason.to_string());
        self.teardown();
        let output = marker::clean_output(&got.kept);
        match (limit, killed) {
            (Some(limit), _) => SandboxError::LimitReached { limit, output },
            (None, Some(signal)) => SandboxError::SandboxKilled { signal, output },
            (None, None) => SandboxError::SessionEnded {
                reason: Some(reason.to_string()),
                output,
            },
        }
    }

    /// The signal that killed the sandbox's own process (our child), if one
    /// did. Nothing inside reaches it (it is outside the sandbox's PID
    /// namespace, and ends with the exit status of what runs inside when
    /// that ends), so such a death is never the agent's doing. Waits a
    /// little for it: its terminal closes as it dies.
    fn killed_from_outside(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let until = Instant::now() + CHILD_EXIT_GRACE;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.signal(),
                Ok(None) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => return None,
            }
        }
    }

    fn kill_foreground(&mut self) {
        if let Some(pgid) = self.master.process_group_leader() {
            if Some(pgid) != self.shell_pgid && pgid > 1 {
                // SAFETY: plain kill(2) on a process group of our own sandbox.
                unsafe {
                    libc::kill(-pgid, libc::SIGKILL);
                }
            }
        }
        self.control.kill_strays(self.shell_pgid);
    }

    fn teardown(&mut self) {
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        self.ended
            .get_or_insert_with(|| "the session was closed".into());
        if let Some((cancel, handle)) = self.watchdog.take() {
            drop(cancel);
            let _ = handle.join();
        }
        self.control.teardown(&mut self.child);
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.show(Audience::flush);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Bytes collected for one command.
#[derive(Default)]
struct Collected {
    kept: Vec<u8>,
    total: usize,
    window: Vec<u8>,
    window_start: usize,
    marker_at: Option<usize>,
}

impl Collected {
    fn push(&mut self, chunk: &[u8], prefix: &[u8]) -> Option<i32> {
        let room = marker::MAX_KEPT_BYTES.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
        self.window.extend_from_slice(chunk);
        self.total += chunk.len();
        if let Some((s, _e, code)) = marker::find_marker(&self.window, prefix, 0) {
            self.marker_at = Some(self.window_start + s);
            return Some(code);
        }
        if self.window.len() > 4096 {
            let cut = self.window.len() - 512;
            self.window.drain(..cut);
            self.window_start += cut;
        }
        None
    }
}

fn finish(
    mut got: Collected,
    code: Option<i32>,
    timed_out: bool,
    start: Instant,
    main_prefix: &[u8],
) -> ExecResult {
    // The output ends where the marker (or, after a timeout, the recovery
    // marker) begins.
    let mut raw_len = got.marker_at.unwrap_or(got.total);
    if timed_out {
        // The command may have finished just as it was interrupted.
        if let Some((at, _, _)) = marker::find_marker(&got.kept, main_prefix, 0) {
            raw_len = raw_len.min(at);
        }
    }
    if raw_len <= got.kept.len() {
        got.kept.truncate(raw_len);
        if got.marker_at.is_some() {
            marker::trim_marker_newline(&mut got.kept);
        }
    }
    let text = marker::clean_output(&got.kept);
    let (output, truncated) = marker::cap_output(text, raw_len);
    ExecResult {
        output,
        exit_code: code,
        timed_out,
        truncated,
        duration: start.elapsed(),
    }
}

/// Put the line discipline in the state the exec protocol needs: no echo
/// (typed commands must not show up in the output), signals on (Ctrl-C
/// interrupts), line mode. Only writes when something changed, e.g. after
/// the agent ran `stty echo` or `stty raw`.
fn disable_echo(fd: i32) {
    // SAFETY: tcgetattr/tcsetattr on a PTY master we own.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut t) == 0 {
            let want = (t.c_lflag & !(libc::ECHO | libc::ECHONL)) | libc::ISIG | libc::ICANON;
            if want != t.c_lflag {
                t.c_lflag = want;
                libc::tcsetattr(fd, libc::TCSANOW, &t);
            }
        }
    }
}

/// The thread reading the PTY: every chunk goes to the session's audience
/// (which the exec protocol's markers never reach), then to the session.
/// What a session's output goes to under `opts`: its recording (made
/// afresh, sized as the terminal) and the live stream `live`.
fn audience_for(
    opts: &SessionOptions,
    live: &broadcast::Sender<Chunk>,
) -> Result<Audience, SandboxError> {
    let (cols, rows) = opts.size;
    let recorder = match &opts.record {
        Some(path) => Some(Recorder::create(
            path,
            cols,
            rows,
            opts.max_recording_bytes,
        )?),
        None => None,
    };
    Ok(Audience::new(
        recorder,
        LiveSender::new(live.clone(), opts.max_recording_bytes),
    ))
}

fn spawn_reader(
    mut reader: Box<dyn Read + Send>,
    tx: mpsc::Sender<Event>,
    audience: Arc<Mutex<Audience>>,
) {
    std::thread::Builder::new()
        .name("endless-pty-reader".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let chunk: Chunk = Arc::from(&buf[..n]);
                        if let Ok(mut audience) = audience.lock() {
                            audience.output(&chunk);
                        }
                        if tx.send(Event::Data(chunk)).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            if let Ok(mut audience) = audience.lock() {
                audience.finish();
            }
            let _ = tx.send(Event::Closed);
        })
        .ok();
}

fn spawn_watchdog(pid: u32, limit: Duration) -> (mpsc::Sender<()>, JoinHandle<()>) {
    let (cancel, wait) = mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
            // The session outlived its wall clock: kill the sandbox. The
            // child is only reaped after this thread was joined, so the pid
            // still names it.
            // SAFETY: plain kill(2).
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    });
    (cancel, handle)
}

/// The error for a spawn that failed: the child's own refusal (the verifier
/// found the agent tampered with what it needs) or a plain start failure.
/// The errno a verifier's child reports when the agent left an
/// `/etc/ld.so.preload` that cannot be hidden (not a regular file).
pub const PRELOAD_REFUSED: i32 = libc::EUCLEAN;

/// Why a verifier refused to start: a path it mounts over was not what
/// it must be ([`PRELOAD_REFUSED`]).
pub const MOUNT_POINT_TAMPERED: &str = "a path the verifier mounts over (/etc/ld.so.preload, /tests or /logs/verifier) is not what it must be (the agent may have planted a file or link there)";

fn spawn_error(cmd: &Command, e: std::io::Error) -> SandboxError {
    if e.raw_os_error() == Some(PRELOAD_REFUSED) {
        return SandboxError::Tampered(MOUNT_POINT_TAMPERED.into());
    }
    SandboxError::Start(format!("spawn {:?}: {e}", cmd.get_program()))
}

/// A thread reading `file` to its end, keeping the first
/// [`CAPTURE_LIMIT`] bytes (the rest is read and dropped, so the writer
/// never blocks).
pub fn spawn_capture(mut file: std::fs::File) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 16384];
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 {
                break;
            }
            if out.len() < CAPTURE_LIMIT {
                out.extend_from_slice(&buf[..n]);
            }
        }
        out
    })
}

/// A close-on-exec pipe as files: (read end, write end).
fn pipe() -> Result<(std::fs::File, std::fs::File), SandboxError> {
    let (r, w) = super::fds::pipe().map_err(SandboxError::io("create pipe", "pipe"))?;
    Ok((std::fs::File::from(r), std::fs::File::from(w)))
}

/// The verifier's `call` as one command line: its environment and working
/// directory set by `env -i -C`, then its program.
pub fn verifier_argv(call: &VerifierCall) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "/usr/bin/env".into(),
        "-i".into(),
        "-C".into(),
        call.cwd.clone(),
    ];
    argv.extend(call.env.iter().map(|(k, v)| format!("{k}={v}")));
    argv.extend(call.argv.iter().cloned());
    argv
}

/// Run `cmd` with stdout and stderr captured (interleaved) in a session of
/// its own (so without the operator's controlling terminal: `/dev/tty`
/// cannot be opened, and nothing it starts can type into the terminal);
/// kill its process group after `timeout`.
pub fn run_with_timeout(cmd: Command, timeout: Duration) -> Result<CommandOutput, SandboxError> {
    run_capturing(cmd, timeout, false, None, Vec::new()).map(|(out, _)| out)
}

/// Like [`run_with_timeout`]; with `fd3`, the command also gets a pipe on
/// file descriptor 3 whose content is returned (capped at 16 MiB). The
/// verifier writes its results there, so no file the agent could touch
/// is involved. `input`, when given, is fed to its stdin. The command
/// inherits no other descriptor than `keep`.
pub fn run_capturing(
    cmd: Command,
    timeout: Duration,
    fd3: bool,
    input: Option<Vec<u8>>,
    keep: Vec<std::os::fd::RawFd>,
) -> Result<(CommandOutput, Vec<u8>), SandboxError> {
    let fed = input.is_some();
    Capturing::spawn(cmd, fd3, fed, keep)?.finish(input, timeout)
}

/// A command spawned with its output (and fd 3) being collected, waiting
/// to be fed and waited for ([`Capturing::finish`]).
pub struct Capturing {
    child: Child,
    stdin: Option<std::fs::File>,
    output: JoinHandle<Vec<u8>>,
    side: Option<JoinHandle<Vec<u8>>>,
    feeder: Option<JoinHandle<()>>,
}

impl Capturing {
    /// Spawn `cmd` in a session of its own (see [`detach_from_terminal`])
    /// with stdout and stderr on one collected pipe, with fd 3 on another
    /// when `fd3`, and its stdin a pipe when `stdin` (else `/dev/null`).
    /// It inherits no other descriptor than `keep`.
    pub fn spawn(
        mut cmd: Command,
        fd3: bool,
        stdin: bool,
        keep: Vec<std::os::fd::RawFd>,
    ) -> Result<Capturing, SandboxError> {
        let (reader, writer) = pipe()?;
        let writer2 = writer
            .try_clone()
            .map_err(SandboxError::io("dup pipe", "pipe"))?;
        let stdin = if stdin {
            let (r, w) = pipe()?;
            cmd.stdin(Stdio::from(r));
            Some(w)
        } else {
            cmd.stdin(Stdio::null());
            None
        };
        cmd.stdout(writer).stderr(writer2);
        detach_from_terminal(&mut cmd);
        let mut side = None;
        if fd3 {
            let (r3, w3) = pipe()?;
            let raw = std::os::fd::AsRawFd::as_raw_fd(&w3);
            // SAFETY: dup2/fcntl are async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    super::fds::close_inherited(&keep)?;
                    if raw == 3 {
                        if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    } else if libc::dup2(raw, 3) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            side = Some((r3, w3));
        } else {
            // SAFETY: fcntl is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || super::fds::close_inherited(&keep));
            }
        }
        let child = cmd.spawn().map_err(|e| spawn_error(&cmd, e))?;
        drop(cmd);
        let side = side.map(|(r3, w3)| {
            drop(w3);
            spawn_capture(r3)
        });
        Ok(Capturing {
            child,
            stdin,
            output: spawn_capture(reader),
            side,
            feeder: None,
        })
    }

    /// The process's pid (on the host).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited (or cannot be waited for).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Write `bytes` to its stdin now (it stays open), failing when it has
    /// no stdin or no longer reads it.
    pub fn feed(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.stdin {
            Some(w) => w.write_all(bytes),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Feed it `input` in the background, then close its stdin (at once,
    /// when it has none to feed).
    pub fn send(&mut self, input: Option<Vec<u8>>) {
        self.feeder = self.stdin.take().map(|mut w| {
            std::thread::spawn(move || {
                if let Some(bytes) = input {
                    let _ = w.write_all(&bytes);
                }
            })
        });
    }

    /// Feed it `input` (then close its stdin; nothing more where it was
    /// sent already), wait for it to exit (killing its process group after
    /// `timeout`), kill what is left of the group, and return what it
    /// printed and wrote to fd 3.
    pub fn finish(
        mut self,
        input: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(CommandOutput, Vec<u8>), SandboxError> {
        if self.stdin.is_some() {
            self.send(input);
        }
        let feeder = self.feeder.take();
        let pid = self.child.id() as i32;
        let deadline = Instant::now() + timeout;
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    // SAFETY: kill(2) on the process group we created.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                    let _ = self.child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        // Kill leftovers of the group so the pipe closes.
        // SAFETY: as above.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let out = self.output.join().unwrap_or_default();
        if let Some(f) = feeder {
            let _ = f.join();
        }
        let side = self
            .side
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        Ok((
            CommandOutput {
                output: String::from_utf8_lossy(&out).into_owned(),
                code: status.and_then(|s| s.code()),
                timed_out,
            },
            side,
        ))
    }

    /// Kill its process group and reap it, unused.
    pub fn kill(mut self) {
        // SAFETY: kill(2) on the process group we created.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_captured_command_has_no_controlling_terminal() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "ps -o tty= -p $$; ps -o sid= -p $$; echo $$"]);
        let out = super::run_with_timeout(cmd, std::time::Duration::from_secs(10)).unwrap();
        let lines: Vec<&str> = out.output.lines().map(str::trim).collect();
        assert_eq!(lines[0], "?", "no terminal: {lines:?}");
        assert_eq!(lines[1], lines[2], "its own session: {lines:?}");
    }

    #[test]
    fn session_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<super::Session>();
    }
}
