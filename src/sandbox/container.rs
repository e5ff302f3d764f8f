//! The container-engine backends (`apptainer`, `oci`) as one implementation:
//! an [`Engine`] says how its CLI builds an image, starts a container, runs
//! a shell in it and stops it; [`EngineBackend`] does the rest the same way
//! for every engine (the image record, the build context and definition,
//! the session directory shared with the verifier, errors, teardown).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::image::{home_of, image_hash};
use super::session::{
    run_with_timeout, verifier_argv, Session, SessionControl, SessionInfo, VerifierCall,
};
use super::{Backend, Image, SandboxError, SessionOptions};
use crate::task::envdef::{parse_task, EnvDefinition};
use crate::task::{write_tree, Task};

/// Where the verifier's exchange directory is bound inside a container.
pub const EXCHANGE_INSIDE: &str = "/run/endless-verifier";

/// How one container engine's command line does each part of a backend's job.
pub trait Engine: Send + Sync {
    /// The backend's name (`apptainer`, `oci`).
    const NAME: &'static str;
    /// The engine's program, for messages.
    fn program(&self) -> &Path;
    /// Where the built image of `hash` lives: its path under `cache` (the
    /// `.sif` file or the build context) and the reference containers are
    /// started from, if the engine names images.
    fn location(&self, cache: &Path, hash: &str) -> (PathBuf, Option<String>);
    /// Whether `image` is already built.
    fn is_built(&self, image: &Image) -> Result<bool, SandboxError>;
    /// Resolve the bases `def` builds on: an identity of them for the
    /// image hash and the note when a substitute serves one (by default the
    /// engine builds on what the definition names, nothing noted).
    fn resolve_bases(&self, def: &EnvDefinition) -> Result<(String, Option<String>), SandboxError> {
        let _ = def;
        Ok((String::new(), None))
    }
    /// Make the bases of `def` available to the engine, returning the
    /// definition `text` building on them (by default unchanged).
    fn provide_bases(&self, def: &EnvDefinition, text: String) -> Result<String, SandboxError> {
        let _ = def;
        Ok(text)
    }
    /// The definition file to build from, given the build context `ctx`:
    /// its path and text (the task's own definition in the engine's format,
    /// or one rendered from its steps).
    fn definition(
        &self,
        task: &Task,
        def: &EnvDefinition,
        image: &Image,
        ctx: &Path,
    ) -> (PathBuf, String);
    /// Where the build runs from: the context for the engine to read.
    fn context_dir(&self, cache: &Path, image: &Image) -> PathBuf;
    /// The build command.
    fn build_argv(&self, image: &Image, definition: &Path, ctx: &Path) -> Vec<String>;
    /// The command that starts container `name` from `image`, idle, with
    /// `exchange` bound at [`EXCHANGE_INSIDE`] (read-only where the engine's verifier only reads it).
    fn start_argv(&self, name: &str, image: &Image, exchange: &Path) -> Vec<String>;
    /// The interactive shell in container `name` as the agent's account (run on a PTY).
    fn shell_argv(&self, name: &str, image: &Image) -> Vec<String>;
    /// The prefix that runs a command as root in container `name` (the verifier).
    fn exec_prefix(&self, name: &str) -> Vec<String>;
    /// The prefix that runs the verifier in container `name`: as root, with
    /// the pipe on file descriptor 3 it reports on (by default [`Engine::exec_prefix`]).
    fn verifier_prefix(&self, name: &str) -> Vec<String> {
        self.exec_prefix(name)
    }
    /// The command that stops and removes container `name`.
    fn stop_argv(&self, name: &str) -> Vec<String>;
}

/// A backend driving a container engine's CLI.
pub struct EngineBackend<E> {
    pub(super) engine: E,
    pub(super) cache: PathBuf,
}

impl<E: Engine> Backend for EngineBackend<E> {
    fn name(&self) -> &'static str {
        E::NAME
    }

    fn prepare(&self, task: &Task) -> Result<Image, SandboxError> {
        let def = parse_task(task)?;
        let (base_id, base_note) = self.engine.resolve_bases(&def)?;
        let hash = image_hash(task, E::NAME, &base_id);
        let (path, reference) = self.engine.location(&self.cache, &hash);
        let user = task.meta.agent.user.clone();
        let image = Image {
            backend: E::NAME.into(),
            hash,
            path,
            reference,
            task_id: task.id().to_string(),
            home: home_of(&user),
            uid: if user == "root" { 0 } else { 1000 },
            gid: if user == "root" { 0 } else { 1000 },
            user,
            workdir: task.meta.environment.workdir.clone(),
            network: task.meta.environment.network,
            cpu_millis: None,
            memory_mb: None,
            storage_mb: None,
            base: None,
            base_layers: Vec::new(),
            step_layers: Default::default(),
            base_note: base_note.clone(),
        };
        if self.engine.is_built(&image)? {
            return Ok(image);
        }
        let ctx = self.engine.context_dir(&self.cache, &image);
        write_tree(&ctx, &task.environment)?;
        let (def_path, text) = self.engine.definition(task, &def, &image, &ctx);
        let text = self.engine.provide_bases(&def, text)?;
        std::fs::write(&def_path, text)
            .map_err(SandboxError::io("write the image definition", &def_path))?;
        let mut cmd = command(&self.engine.build_argv(&image, &def_path, &ctx))?;
        cmd.current_dir(&ctx);
        let out = run_with_timeout(cmd, Duration::from_secs(3600))?;
        if out.code != Some(0) {
            return Err(SandboxError::SetupStep {
                index: 0,
                step: format!(
                    "{} build of {}",
                    self.engine.program().display(),
                    def_path.display()
                ),
                code: out.code,
                output: out.output,
                base_note,
            });
        }
        Ok(image)
    }

    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        if image.backend != E::NAME {
            return Err(SandboxError::WrongBackend {
                image: image.backend.clone(),
                backend: E::NAME.into(),
            });
        }
        let name = format!("endless-{}", session_id());
        let session_dir = self.cache.join("sessions").join(&name);
        let exchange = session_dir.join("x");
        std::fs::create_dir_all(&exchange)
            .map_err(SandboxError::io("create session directory", &exchange))?;
        // The verifier writes the tests there (as root); the agent's account may not look.
        std::fs::set_permissions(
            &exchange,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(SandboxError::io("restrict session directory", &exchange))?;
        let start = command(&self.engine.start_argv(&name, image, &exchange))?;
        let out = run_with_timeout(start, Duration::from_secs(120))?;
        if out.code != Some(0) {
            let _ = std::fs::remove_dir_all(&session_dir);
            return Err(SandboxError::Start(format!(
                "{} could not start a container:\n{}",
                self.engine.program().display(),
                out.output
            )));
        }
        let control = EngineControl {
            root_prefix: self.engine.exec_prefix(&name),
            verifier_prefix: self.engine.verifier_prefix(&name),
            stop: self.engine.stop_argv(&name),
            exchange: (exchange, EXCHANGE_INSIDE.into()),
            session_dir,
        };
        let info = SessionInfo {
            backend: E::NAME,
            user: image.user.clone(),
            workdir: image.workdir.clone(),
            image: image.hash.clone(),
            limits: None,
        };
        let shell = command(&self.engine.shell_argv(&name, image))?;
        let init = "HISTSIZE=0; set +o history; PS1=''; PS2=''; PROMPT_COMMAND=''";
        Session::spawn_with(shell, Vec::new(), init, opts, info, move |_| {
            Box::new(control)
        })
    }
}

/// Control of a session whose shell runs in a container managed by an engine CLI.
struct EngineControl {
    /// Command prefix that runs a command as root in the container.
    root_prefix: Vec<String>,
    /// Command prefix that runs the verifier (root, fd 3 kept).
    verifier_prefix: Vec<String>,
    /// Command that stops and removes the container.
    stop: Vec<String>,
    /// Host directory bound into the container for the verifier, and its inside path.
    exchange: (PathBuf, String),
    /// Host directory of the session (removed at teardown).
    session_dir: PathBuf,
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

    fn verifier_command(&mut self, call: &VerifierCall) -> Result<Command, SandboxError> {
        let mut full = self.verifier_prefix.clone();
        full.extend(verifier_argv(call));
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

/// A `Command` from an argv.
pub fn command(argv: &[String]) -> Result<Command, SandboxError> {
    let (bin, rest) = argv
        .split_first()
        .ok_or_else(|| SandboxError::Start("empty command".into()))?;
    let mut cmd = Command::new(bin);
    cmd.args(rest);
    Ok(cmd)
}

/// A random session id.
fn session_id() -> String {
    let mut rnd = [0u8; 6];
    rand::Rng::fill(&mut rand::rng(), &mut rnd);
    hex::encode(rnd)
}

/// `program` followed by `args`, as strings.
pub fn argv(program: &Path, args: &[&str]) -> Vec<String> {
    std::iter::once(program.display().to_string())
        .chain(args.iter().map(|s| s.to_string()))
        .collect()
}

/// The shell every engine runs on the PTY: bash without line editing,
/// profile or rc files.
pub const SHELL: &[&str] = &["/bin/bash", "--noediting", "--noprofile", "--norc", "-i"];
