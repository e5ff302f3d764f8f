//! The `oci` backend: podman (preferred) or docker. The task's Dockerfile
//! (or one rendered from its steps) is built once into a tagged image;
//! each session is a fresh `--rm` container (its writable layer is thrown
//! away) with an interactive shell exec'd over a PTY.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::container::{command, session_id, spawn_engine_session, strings, EngineControl};
use super::image::{home_of, image_hash};
use super::local::{which, Limits};
use super::session::{run_with_timeout, Session};
use super::{Backend, Image, SandboxError, SessionOptions};
use crate::task::envdef::{parse_task, render_dockerfile};
use crate::task::{write_tree, EnvKind, Task};

const EXCHANGE_INSIDE: &str = "/run/endless-verifier";

/// The OCI backend.
pub struct OciBackend {
    engine: PathBuf,
    cache: PathBuf,
    limits: Limits,
}

/// Find podman, else docker.
pub fn engine_path() -> Option<PathBuf> {
    which("podman").or_else(|| which("docker"))
}

impl OciBackend {
    /// A backend keeping build contexts under `cache_dir/oci`.
    pub fn new(cache_dir: &Path) -> Result<Self, SandboxError> {
        let engine = engine_path().ok_or_else(|| SandboxError::ToolMissing {
            tool: "podman".into(),
            hint: "install podman (`apt-get install podman`) or docker with a running engine"
                .into(),
        })?;
        let info = command(&[engine.display().to_string(), "info".into()])?;
        let out = run_with_timeout(info, Duration::from_secs(15))?;
        if out.code != Some(0) {
            return Err(SandboxError::Unavailable {
                backend: "oci".into(),
                reason: format!(
                    "`{} info` failed (is the engine running?): {}",
                    engine.display(),
                    out.output.trim().lines().last().unwrap_or("")
                ),
            });
        }
        Ok(Self {
            engine,
            cache: cache_dir.join("oci"),
            limits: Limits::default(),
        })
    }
}

/// The image tag of a task image.
pub fn tag(hash: &str) -> String {
    format!("localhost/endless-task:{}", &hash[..hash.len().min(16)])
}

/// `<engine> build -t <tag> -f <Dockerfile> <context>` (network only when asked).
pub fn build_argv(
    engine: &Path,
    tag: &str,
    dockerfile: &Path,
    ctx: &Path,
    network: bool,
) -> Vec<String> {
    let mut a = vec![
        engine.display().to_string(),
        "build".into(),
        "-t".into(),
        tag.into(),
    ];
    a.push("-f".into());
    a.push(dockerfile.display().to_string());
    if !network {
        a.push("--network=none".into());
    }
    a.push(ctx.display().to_string());
    a
}

/// `<engine> run -d --rm ...`: a throwaway container idling until the shell is exec'd.
pub fn run_argv(
    engine: &Path,
    name: &str,
    image: &Image,
    exchange: &Path,
    limits: &Limits,
) -> Vec<String> {
    let mut a = vec![engine.display().to_string()];
    a.extend(strings(&["run", "-d", "--rm", "--init"]));
    a.push(format!("--name={name}"));
    a.push(format!(
        "--network={}",
        if image.network { "bridge" } else { "none" }
    ));
    a.push(format!("--pids-limit={}", limits.pids));
    a.push(format!("--memory={}", limits.memory_bytes));
    a.push("--cap-drop=ALL".into());
    a.push("--security-opt=no-new-privileges".into());
    a.push(format!(
        "--volume={}:{EXCHANGE_INSIDE}:ro",
        exchange.display()
    ));
    a.push(image.reference.clone().unwrap_or_else(|| tag(&image.hash)));
    a.extend(strings(&["sleep", "infinity"]));
    a
}

/// The interactive shell (run on a PTY) as the agent account.
pub fn shell_argv(engine: &Path, name: &str, image: &Image) -> Vec<String> {
    let mut a = vec![engine.display().to_string()];
    a.extend(strings(&["exec", "-it"]));
    a.push(format!("--user={}", image.user));
    a.push(format!("--workdir={}", image.workdir));
    a.push(format!("--env=HOME={}", image.home));
    a.push(name.into());
    a.extend(strings(&[
        "/bin/bash",
        "--noediting",
        "--noprofile",
        "--norc",
        "-i",
    ]));
    a
}

/// Prefix running a command as root in the container (the verifier).
pub fn exec_root_prefix(engine: &Path, name: &str) -> Vec<String> {
    vec![
        engine.display().to_string(),
        "exec".into(),
        "--user=root".into(),
        name.into(),
    ]
}

/// `<engine> rm -f <name>`.
pub fn stop_argv(engine: &Path, name: &str) -> Vec<String> {
    vec![
        engine.display().to_string(),
        "rm".into(),
        "-f".into(),
        name.into(),
    ]
}

impl Backend for OciBackend {
    fn name(&self) -> &'static str {
        "oci"
    }

    fn prepare(&self, task: &Task) -> Result<Image, SandboxError> {
        let def = parse_task(task)?;
        let hash = image_hash(task, "oci", "");
        let user = task.meta.agent.user.clone();
        let image = Image {
            backend: "oci".into(),
            hash: hash.clone(),
            path: self.cache.join(&hash),
            reference: Some(tag(&hash)),
            task_id: task.id().to_string(),
            home: home_of(&user),
            uid: if user == "root" { 0 } else { 1000 },
            gid: if user == "root" { 0 } else { 1000 },
            user,
            workdir: task.meta.environment.workdir.clone(),
            network: task.meta.environment.network,
            cpu_millis: None,
            base: None,
            base_layers: Vec::new(),
        };
        let exists = command(&[
            self.engine.display().to_string(),
            "image".into(),
            "inspect".into(),
            tag(&hash),
        ])?;
        if run_with_timeout(exists, Duration::from_secs(30))?.code == Some(0) {
            return Ok(image);
        }
        let ctx = &image.path;
        write_tree(ctx, &task.environment)?;
        let dockerfile = ctx.join("Dockerfile.endless");
        let text = match task.environment_definition() {
            Some((EnvKind::Dockerfile, text)) => text.to_string(),
            _ => render_dockerfile(&def, &image.user, &image.workdir),
        };
        std::fs::write(&dockerfile, text)
            .map_err(SandboxError::io("write Dockerfile", &dockerfile))?;
        let cmd = command(&build_argv(
            &self.engine,
            &tag(&hash),
            &dockerfile,
            ctx,
            image.network,
        ))?;
        let out = run_with_timeout(cmd, Duration::from_secs(3600))?;
        if out.code != Some(0) {
            return Err(SandboxError::SetupStep {
                index: 0,
                step: format!(
                    "{} build of {}",
                    self.engine.display(),
                    dockerfile.display()
                ),
                code: out.code,
                output: out.output,
            });
        }
        Ok(image)
    }

    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        if image.backend != "oci" {
            return Err(SandboxError::WrongBackend {
                image: image.backend.clone(),
                backend: "oci".into(),
            });
        }
        let name = format!("endless-{}", session_id());
        let session_dir = self.cache.join("sessions").join(&name);
        let exchange = session_dir.join("x");
        std::fs::create_dir_all(&exchange)
            .map_err(SandboxError::io("create session directory", &exchange))?;
        let run = command(&run_argv(
            &self.engine,
            &name,
            image,
            &exchange,
            &self.limits,
        ))?;
        let out = run_with_timeout(run, Duration::from_secs(120))?;
        if out.code != Some(0) {
            let _ = std::fs::remove_dir_all(&session_dir);
            return Err(SandboxError::Start(format!(
                "{} run failed:\n{}",
                self.engine.display(),
                out.output
            )));
        }
        let control = EngineControl {
            root_prefix: exec_root_prefix(&self.engine, &name),
            stop: stop_argv(&self.engine, &name),
            exchange: (exchange, EXCHANGE_INSIDE.into()),
            session_dir,
        };
        spawn_engine_session(
            "oci",
            &shell_argv(&self.engine, &name, image),
            image,
            opts,
            control,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Image {
        Image {
            backend: "oci".into(),
            hash: "0123456789abcdef0123".into(),
            path: "/c/h".into(),
            reference: Some(tag("0123456789abcdef0123")),
            task_id: "t".into(),
            user: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            workdir: "/home/user".into(),
            network: false,
            cpu_millis: None,
            base: None,
            base_layers: Vec::new(),
        }
    }

    #[test]
    fn commands_isolate_and_limit() {
        let e = Path::new("/usr/bin/podman");
        assert_eq!(
            build_argv(
                e,
                "localhost/endless-task:x",
                Path::new("/c/D"),
                Path::new("/c"),
                false
            )
            .join(" "),
            "/usr/bin/podman build -t localhost/endless-task:x -f /c/D --network=none /c"
        );
        let run = run_argv(
            e,
            "endless-1",
            &image(),
            Path::new("/c/x"),
            &Limits::default(),
        )
        .join(" ");
        assert_eq!(
            run,
            "/usr/bin/podman run -d --rm --init --name=endless-1 --network=none --pids-limit=512 \
             --memory=4294967296 --cap-drop=ALL --security-opt=no-new-privileges \
             --volume=/c/x:/run/endless-verifier:ro localhost/endless-task:0123456789abcdef sleep infinity"
        );
        assert_eq!(
            shell_argv(e, "endless-1", &image()).join(" "),
            "/usr/bin/podman exec -it --user=user --workdir=/home/user --env=HOME=/home/user endless-1 \
             /bin/bash --noediting --noprofile --norc -i"
        );
        assert_eq!(
            exec_root_prefix(e, "n").join(" "),
            "/usr/bin/podman exec --user=root n"
        );
        assert_eq!(stop_argv(e, "n").join(" "), "/usr/bin/podman rm -f n");
    }
}
