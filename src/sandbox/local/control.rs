//! Control of a running local sandbox: stray-process killing, root
//! commands beside the shell (through `nsenter`, as the root of the
//! sandbox's user namespace, never as host root), the verifier, teardown.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::build::evict::Held;
use crate::sandbox::isolate::limits::Cgroups;
use crate::sandbox::isolate::{net, userns};
use crate::sandbox::session::{CommandOutput, SessionControl, VerifierCall};
use crate::sandbox::verifier::plan::VerifierPlan;
use crate::sandbox::verifier::prestart::{Confinement, Prestarted};
use crate::sandbox::verifier::warm::WarmVerifier;
use crate::sandbox::SandboxError;

/// Where the verifier's exchange directory appears inside the sandbox.
pub const EXCHANGE_INSIDE: &str = "/run/endless-verifier";

/// The cgroup, nested in each of the session's, of the verifier started
/// with the session (and of all it starts before verification).
const PRESTARTED_CGROUP: &str = "verifier";

/// A running local sandbox.
pub struct LocalControl {
    /// The session's host directory (holds the exchange directory).
    pub session_dir: PathBuf,
    /// Its cgroups, when available.
    pub cgroups: Option<Cgroups>,
    /// Its rlimits, when it has no cgroups (the pre-started verifier's too).
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// Pid of bubblewrap (our child).
    pub outer: i32,
    /// Pid of the sandbox's init (bubblewrap's child, pid 1 inside).
    pub init: Option<i32>,
    /// The sandbox lives in user namespaces we own (no root on the host).
    pub rootless: bool,
    /// The task user's uid and gid inside (the verifier runs as them).
    pub task_ids: (u32, u32),
    /// The argv prefix of the verifier's trusted Python.
    pub runtime_python: Vec<String>,
    /// The seccomp programs every sandboxed process runs under.
    pub seccomp: Vec<seccompiler::BpfProgram>,
    /// Where the pid of the session's `pasta` is, when it has network access.
    pub pasta_pidfile: Option<PathBuf>,
    /// The backend's pre-warmed verifier (`None`: rootless, or turned off;
    /// the string says why).
    pub warm: Result<std::sync::Arc<WarmVerifier>, String>,
    /// The image's sealed verifier environments on the host (see
    /// `build/verifier_env.rs`): attached for the verifier only, never in the
    /// agent's sessions.
    pub verifier_envs: PathBuf,
    /// The sealed environment's verifier started with the session
    /// (`verifier/prestart.rs`; started in the background), until it runs the tests.
    pub prestarted: Option<std::thread::JoinHandle<Result<Prestarted, SandboxError>>>,
    /// The session's hold on its image and step layers (no eviction takes
    /// them while it lives), released at teardown.
    pub held: Option<Held>,
}

/// Children of `pid`, from `/proc/*/stat`.
pub fn children_of(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if parent_of(child) == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Without cgroups: SIGKILL, again and again until none is left or `wait`
/// has passed, every process in the PID namespace of `init` but `keep`.
fn kill_pid_namespace_except(init: i32, keep: &[i32], wait: Duration) {
    let ns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let Some(target) = ns(init) else {
        return;
    };
    let until = Instant::now() + wait;
    loop {
        let victims: Vec<i32> = std::fs::read_dir("/proc")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
                    .filter(|p| !keep.contains(p) && ns(*p).as_ref() == Some(&target))
                    .collect()
            })
            .unwrap_or_default();
        if victims.is_empty() || Instant::now() >= until {
            return;
        }
        for pid in victims {
            // SAFETY: kill(2) on a process of this sandbox's PID namespace.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether `pid` exists and is not a zombie.
fn is_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The parent of `pid`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

impl LocalControl {
    fn init_pid(&mut self) -> Option<i32> {
        if self.init.is_none() {
            self.init = children_of(self.outer).first().copied();
        }
        self.init
    }
}

impl LocalControl {
    /// What the verifier's child does to enter the sandbox (both paths).
    /// With `files`, the plan writes them and seals the directory (the
    /// cold path; the pre-warmed verifier does both itself from the payload).
    fn verifier_plan(
        &mut self,
        call: &VerifierCall,
        files: &[(String, Vec<u8>)],
        ids: (u32, u32),
    ) -> Result<VerifierPlan, SandboxError> {
        let init = self
            .init_pid()
            .ok_or_else(|| SandboxError::Verify("the sandbox's init process is gone".into()))?;
        let procs = self
            .cgroups
            .as_ref()
            .map(|c| c.procs_files())
            .unwrap_or_default();
        VerifierPlan::new(
            init,
            &format!("/proc/{}/ns/user", self.outer),
            &procs,
            ids,
            &call.cwd,
            EXCHANGE_INSIDE,
            files,
            !self.rootless,
            self.seccomp.clone(),
            // Cold and pre-started runs use them (the pre-warmed verifier
            // serves the built-in runtime), but the plan is the same for all.
            Some(self.verifier_envs.as_path()),
        )
        .map(|plan| plan.with_root_capabilities(call.root_caps))
    }
}

impl LocalControl {
    /// Stop the verifier started with the session, if any.
    fn stop_prestarted(&mut self) {
        if let Some(Ok(Ok(p))) = self.prestarted.take().map(|h| h.join()) {
            p.stop();
        }
    }

    /// `call` entering the sandbox as the verifier does (see
    /// [`VerifierPlan`]), as inside `ids`, with `files` sealed in its
    /// private directory.
    fn command_as(
        &mut self,
        call: &VerifierCall,
        files: &[(String, Vec<u8>)],
        ids: (u32, u32),
    ) -> Result<Command, SandboxError> {
        let plan = self.verifier_plan(call, files, ids)?;
        let program = call
            .argv
            .first()
            .ok_or_else(|| SandboxError::Verify("empty verifier command".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(&call.argv[1..])
            .env_clear()
            .envs(call.env.iter().map(|(k, v)| (k, v)));
        // SAFETY: VerifierPlan::apply only makes async-signal-safe calls.
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
        Ok(cmd)
    }
}

impl SessionControl for LocalControl {
    fn kill_strays(&mut self, shell_pgid: Option<i32>) {
        let init = self.init_pid();
        let mut keep = vec![self.outer];
        keep.extend(init);
        keep.extend(shell_pgid);
        match (&self.cgroups, init) {
            (Some(cg), _) => cg.kill_except(&keep, Duration::from_secs(2)),
            (None, Some(init)) => kill_pid_namespace_except(init, &keep, Duration::from_secs(2)),
            (None, None) => {}
        }
    }

    fn root_command(&mut self, argv: &[String]) -> Result<Command, SandboxError> {
        let init = self
            .init_pid()
            .ok_or_else(|| SandboxError::Verify("the sandbox's init process is gone".into()))?;
        let mut cmd = Command::new("nsenter");
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .arg(format!("--target={init}"))
            // Rootless: enter the user namespace we created (where we are
            // root and own every namespace below it), not bubblewrap's
            // innermost one, which owns none of the others. As root: the
            // sandbox's own user namespace, as its root (an unprivileged
            // host id).
            .args(if self.rootless {
                vec![
                    format!("--user=/proc/{}/ns/user", self.outer),
                    "--preserve-credentials".into(),
                ]
            } else {
                vec![format!("--user=/proc/{init}/ns/user")]
            })
            .args([
                "--mount", "--pid", "--net", "--ipc", "--uts", "--root", "--wd=/", "--",
            ])
            .args([
                "/usr/bin/setpriv",
                "--bounding-set=-all,+dac_override,+dac_read_search,+fowner,+chown,+kill",
                "--inh-caps=-all",
                "--no-new-privs",
                "--",
            ])
            .args(argv);
        Ok(cmd)
    }

    fn verifier_command(&mut self, call: &VerifierCall) -> Result<Command, SandboxError> {
        self.command_as(call, &call.files, self.task_ids)
    }

    fn run_warm_verifier(
        &mut self,
        call: &VerifierCall,
        input: &[u8],
        timeout: Duration,
    ) -> Result<Result<(CommandOutput, Vec<u8>), String>, SandboxError> {
        let warm = match &self.warm {
            Ok(warm) => std::sync::Arc::clone(warm),
            Err(why) => return Ok(Err(why.clone())),
        };
        let plan = self.verifier_plan(call, &[], self.task_ids)?;
        warm.run(&plan, &call.env, &call.hints, input.to_vec(), timeout)
    }

    fn prestart_verifier(&mut self, call: &VerifierCall) -> Result<(), String> {
        if let Err(why) = &self.warm {
            return Err(why.clone());
        }
        if self.rootless {
            return Err("rootless backends verify cold".into());
        }
        self.stop_prestarted();
        let init = self
            .init_pid()
            .ok_or("the sandbox's init process is gone")?;
        let plan = self
            .verifier_plan(call, &call.files, self.task_ids)
            .map_err(|e| e.to_string())?;
        // Within the session's limits from its first instruction on.
        let procs = match &self.cgroups {
            Some(cg) => cg
                .nested(PRESTARTED_CGROUP)
                .map_err(|e| format!("a cgroup for the verifier: {e}"))?,
            None => Vec::new(),
        };
        let confinement =
            Confinement::new(&procs, self.rlimits.clone()).map_err(|e| e.to_string())?;
        // Off the session's start: spawning it (entering the sandbox in
        // `pre_exec`) takes about as long as the rest of the start.
        let call = call.clone();
        self.prestarted = Some(std::thread::spawn(move || {
            Prestarted::start(plan, &call, init, confinement)
        }));
        Ok(())
    }

    fn run_prestarted_verifier(
        &mut self,
        call: &VerifierCall,
        input: &[u8],
        timeout: Duration,
    ) -> Result<Result<(CommandOutput, Vec<u8>), String>, SandboxError> {
        let started = match self.prestarted.take().map(|h| h.join()) {
            None => return Ok(Err("no verifier was started with this session".into())),
            Some(Err(_)) => return Ok(Err("starting the verifier ahead panicked".into())),
            Some(Ok(Err(e))) => return Ok(Err(e.to_string())),
            Some(Ok(Ok(p))) => p,
        };
        if !started.serves(call) {
            started.stop();
            return Ok(Err(
                "the verifier started with the session was for other tests".into(),
            ));
        }
        started.run(input.to_vec(), timeout)
    }

    fn limit_hit(&self) -> Option<String> {
        let kills = self.cgroups.as_ref()?.oom_kills();
        (kills > 0).then(|| format!("memory limit (the OOM killer killed {kills} process(es))"))
    }

    fn verifier_python(&self) -> Vec<String> {
        self.runtime_python.clone()
    }

    fn runs_other_users(&self) -> bool {
        // Rootless sandboxes map one id only (the task user's).
        !self.rootless
    }

    fn maps_ids(&self, (uid, gid): (u32, u32)) -> bool {
        if self.rootless {
            (uid, gid) == self.task_ids
        } else {
            uid < userns::MAPPED_IDS && gid < userns::MAPPED_IDS
        }
    }

    fn user_command(
        &mut self,
        call: &VerifierCall,
        ids: (u32, u32),
    ) -> Result<Command, SandboxError> {
        if !self.maps_ids(ids) {
            return Err(SandboxError::Verify(if self.rootless {
                format!(
                    "a rootless sandbox maps only the task user's id, not {}:{}",
                    ids.0, ids.1
                )
            } else {
                format!(
                    "{}:{} is outside the ids the sandbox maps (0-{})",
                    ids.0,
                    ids.1,
                    userns::MAPPED_IDS - 1
                )
            }));
        }
        self.command_as(call, &[], ids)
    }

    fn exchange_dir(&self) -> Option<(PathBuf, String)> {
        Some((self.session_dir.join("x"), EXCHANGE_INSIDE.to_string()))
    }

    fn teardown(&mut self, child: &mut Child) {
        self.stop_prestarted();
        // Without cgroups, the sandbox's init tells when its pid namespace is gone.
        let init = if self.cgroups.is_none() {
            self.init_pid()
        } else {
            self.init
        };
        // SAFETY: kill(2) on our own child; the sandbox's init dies with it
        // (--die-with-parent) and takes its whole pid namespace along.
        unsafe {
            libc::kill(self.outer, libc::SIGKILL);
        }
        let _ = child.wait();
        if let Some(cg) = &mut self.cgroups {
            cg.kill_all_and_remove(Duration::from_secs(5));
        } else if let Some(init) = init {
            let until = Instant::now() + Duration::from_secs(5);
            while is_running(init) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if let Some(p) = &self.pasta_pidfile {
            net::stop(p);
        }
        let _ = std::fs::remove_dir_all(&self.session_dir);
        self.held = None;
    }
}
