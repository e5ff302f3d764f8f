//! Shared pieces of the container-engine backends (`apptainer`, `oci`):
//! a session control that execs through the engine and stops the container.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use super::session::{run_with_timeout, Session, SessionControl, SessionInfo};
use super::{Image, SandboxError, SessionOptions};

/// Control of a session whose shell runs in a container managed by an engine CLI.
pub struct EngineControl {
    /// Command prefix that runs a command as root in the container.
    pub root_prefix: Vec<String>,
    /// Command that stops and removes the container.
    pub stop: Vec<String>,
    /// Host directory bound into the container for the verifier, and its inside path.
    pub exchange: (PathBuf, String),
    /// Host directory of the session (removed at teardown).
    pub session_dir: PathBuf,
}

/// A `Command` from an argv.
pub fn command(argv: &[String]) -> Result<Command, SandboxError> {
    let (bin, rest) = argv
        .split_first()
        .ok_or_else(|| SandboxError::Start("empty command".into()))?;
    let mut cmd = Command::new(bin);
    cmd.args(rest);
    Ok(cmd)
}

impl SessionControl for EngineControl {
    fn kill_strays(&mut self, _shell_pgid: Option<i32>) {
        // The engine owns the container's processes; the foreground group
        // was already killed through the PTY.
    }

    fn root_command(&mut self, argv: &[String]) -> Result<Command, SandboxError> {
        let mut full = self.root_prefix.clone();
        full.extend(argv.iter().cloned());
        command(&full)
    }

    fn exchange_dir(&self) -> Option<(PathBuf, String)> {
        Some(self.exchange.clone())
    }

    fn teardown(&mut self, child: &mut Child) {
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(cmd) = command(&self.stop) {
            let _ = run_with_timeout(cmd, Duration::from_secs(30));
        }
        let _ = std::fs::remove_dir_all(&self.session_dir);
    }
}

/// A random session id.
pub fn session_id() -> String {
    let mut rnd = [0u8; 6];
    rand::Rng::fill(&mut rand::rng(), &mut rnd);
    hex::encode(rnd)
}

/// Strings from string slices.
pub fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Start the interactive shell of a container session (`shell` is the
/// engine's exec argv) with `control` tearing the container down.
pub fn spawn_engine_session(
    backend: &'static str,
    shell: &[String],
    image: &Image,
    opts: &SessionOptions,
    control: EngineControl,
) -> Result<Session, SandboxError> {
    let info = SessionInfo {
        backend,
        user: image.user.clone(),
        workdir: image.workdir.clone(),
        image: image.hash.clone(),
    };
    let init = "HISTSIZE=0; set +o history; PS1=''; PS2=''; PROMPT_COMMAND=''";
    Session::spawn_with(command(shell)?, Vec::new(), init, opts, info, move |_| {
        Box::new(control)
    })
}
