//! The `apptainer` backend: the reference implementation's runtime. The
//! task's `.def` (or one rendered from its steps) is built into a `.sif`
//! once; each session is an instance started with `--containall
//! --writable-tmpfs` (a throwaway writable layer) and a shell over a PTY.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::container::{command, session_id, spawn_engine_session, strings, EngineControl};
use super::image::{home_of, image_hash};
use super::local::which;
use super::session::{run_with_timeout, Session};
use super::{Backend, Image, SandboxError, SessionOptions};
use crate::task::envdef::{parse_task, render_apptainer};
use crate::task::{write_tree, EnvKind, Task};

/// Where the verifier's exchange directory is bound inside.
const EXCHANGE_INSIDE: &str = "/run/endless-verifier";

/// The apptainer backend.
pub struct ApptainerBackend {
    bin: PathBuf,
    cache: PathBuf,
}

/// Find `apptainer` (or its predecessor `singularity`).
pub fn apptainer_path() -> Option<PathBuf> {
    which("apptainer").or_else(|| which("singularity"))
}

impl ApptainerBackend {
    /// A backend caching `.sif` files under `cache_dir/apptainer`.
    pub fn new(cache_dir: &Path) -> Result<Self, SandboxError> {
        let bin = apptainer_path().ok_or_else(|| SandboxError::ToolMissing {
            tool: "apptainer".into(),
            hint: "install Apptainer (https://apptainer.org/docs/admin/main/installation.html; \
                   Ubuntu: `add-apt-repository ppa:apptainer/ppa && apt-get install apptainer`)"
                .into(),
        })?;
        Ok(Self {
            bin,
            cache: cache_dir.join("apptainer"),
        })
    }
}

/// `apptainer build --force <sif> <def>` (with `--fakeroot` when not root).
pub fn build_argv(bin: &Path, sif: &Path, def: &Path, as_root: bool) -> Vec<String> {
    let mut a = vec![bin.display().to_string(), "build".into(), "--force".into()];
    if !as_root {
        a.push("--fakeroot".into());
    }
    a.push(sif.display().to_string());
    a.push(def.display().to_string());
    a
}

/// `apptainer instance start --containall --writable-tmpfs ...`: a fresh
/// throwaway writable layer per session, no host paths but the exchange dir.
pub fn instance_start_argv(
    bin: &Path,
    sif: &Path,
    name: &str,
    exchange: &Path,
    image: &Image,
) -> Vec<String> {
    let mut a = vec![bin.display().to_string()];
    a.extend(strings(&[
        "instance",
        "start",
        "--containall",
        "--writable-tmpfs",
        "--cleanenv",
    ]));
    a.push("--pwd".into());
    a.push(image.workdir.clone());
    a.push("--bind".into());
    a.push(format!("{}:{EXCHANGE_INSIDE}:ro", exchange.display()));
    if !image.network {
        a.extend(strings(&["--net", "--network", "none"]));
    }
    a.push(sif.display().to_string());
    a.push(name.to_string());
    a
}

/// The interactive shell in the instance (run on a PTY).
pub fn shell_argv(bin: &Path, name: &str, image: &Image) -> Vec<String> {
    let mut a = vec![bin.display().to_string()];
    a.extend(strings(&["exec", "--pwd"]));
    a.push(image.workdir.clone());
    a.push(format!("instance://{name}"));
    a.extend(strings(&[
        "/bin/bash",
        "--noediting",
        "--noprofile",
        "--norc",
        "-i",
    ]));
    a
}

/// Prefix running a command in the instance (the verifier).
pub fn exec_prefix(bin: &Path, name: &str) -> Vec<String> {
    vec![
        bin.display().to_string(),
        "exec".into(),
        "--cleanenv".into(),
        format!("instance://{name}"),
    ]
}

/// `apptainer instance stop <name>`.
pub fn stop_argv(bin: &Path, name: &str) -> Vec<String> {
    vec![
        bin.display().to_string(),
        "instance".into(),
        "stop".into(),
        name.into(),
    ]
}

impl Backend for ApptainerBackend {
    fn name(&self) -> &'static str {
        "apptainer"
    }

    fn prepare(&self, task: &Task) -> Result<Image, SandboxError> {
        let def = parse_task(task)?;
        let hash = image_hash(task, "apptainer", "");
        let dir = self.cache.join(&hash);
        let sif = dir.join("image.sif");
        let user = task.meta.agent.user.clone();
        let image = Image {
            backend: "apptainer".into(),
            hash: hash.clone(),
            path: sif.clone(),
            reference: None,
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
        if sif.exists() {
            return Ok(image);
        }
        let ctx = dir.join("ctx");
        write_tree(&ctx, &task.environment)?;
        let def_path = ctx.join("endless.def");
        let text = match task.environment_definition() {
            Some((EnvKind::ApptainerDef, text)) => text.to_string(),
            _ => {
                let files: Vec<&str> = task.environment.iter().map(|(p, _)| p.as_str()).collect();
                render_apptainer(&def, &image.user, &files)
            }
        };
        std::fs::write(&def_path, text).map_err(SandboxError::io("write definition", &def_path))?;
        // SAFETY: geteuid has no preconditions.
        let as_root = unsafe { libc::geteuid() } == 0;
        let mut cmd = command(&build_argv(&self.bin, &sif, &def_path, as_root))?;
        cmd.current_dir(&ctx);
        let out = run_with_timeout(cmd, Duration::from_secs(3600))?;
        if out.code != Some(0) {
            return Err(SandboxError::SetupStep {
                index: 0,
                step: format!("apptainer build of {}", def_path.display()),
                code: out.code,
                output: out.output,
            });
        }
        Ok(image)
    }

    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        if image.backend != "apptainer" {
            return Err(SandboxError::WrongBackend {
                image: image.backend.clone(),
                backend: "apptainer".into(),
            });
        }
        let name = format!("endless-{}", session_id());
        let session_dir = self.cache.join("sessions").join(&name);
        let exchange = session_dir.join("x");
        std::fs::create_dir_all(&exchange)
            .map_err(SandboxError::io("create session directory", &exchange))?;
        let start = command(&instance_start_argv(
            &self.bin,
            &image.path,
            &name,
            &exchange,
            image,
        ))?;
        let out = run_with_timeout(start, Duration::from_secs(120))?;
        if out.code != Some(0) {
            let _ = std::fs::remove_dir_all(&session_dir);
            return Err(SandboxError::Start(format!(
                "apptainer instance start failed:\n{}",
                out.output
            )));
        }
        let control = EngineControl {
            root_prefix: exec_prefix(&self.bin, &name),
            stop: stop_argv(&self.bin, &name),
            exchange: (exchange, EXCHANGE_INSIDE.into()),
            session_dir,
        };
        spawn_engine_session(
            "apptainer",
            &shell_argv(&self.bin, &name, image),
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
            backend: "apptainer".into(),
            hash: "h".into(),
            path: "/c/image.sif".into(),
            reference: None,
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
    fn commands_are_built_as_the_reference_does() {
        let bin = Path::new("/usr/bin/apptainer");
        assert_eq!(
            build_argv(
                bin,
                Path::new("/c/i.sif"),
                Path::new("/c/ctx/endless.def"),
                false
            )
            .join(" "),
            "/usr/bin/apptainer build --force --fakeroot /c/i.sif /c/ctx/endless.def"
        );
        let start = instance_start_argv(
            bin,
            Path::new("/c/i.sif"),
            "endless-1",
            Path::new("/c/x"),
            &image(),
        )
        .join(" ");
        assert_eq!(
            start,
            "/usr/bin/apptainer instance start --containall --writable-tmpfs --cleanenv --pwd /home/user \
             --bind /c/x:/run/endless-verifier:ro --net --network none /c/i.sif endless-1"
        );
        let mut net = image();
        net.network = true;
        assert!(
            !instance_start_argv(bin, Path::new("/c/i.sif"), "e", Path::new("/x"), &net)
                .contains(&"--net".to_string())
        );
        assert_eq!(
            shell_argv(bin, "endless-1", &image()).join(" "),
            "/usr/bin/apptainer exec --pwd /home/user instance://endless-1 /bin/bash --noediting --noprofile --norc -i"
        );
        assert_eq!(
            stop_argv(bin, "endless-1").join(" "),
            "/usr/bin/apptainer instance stop endless-1"
        );
    }
}
