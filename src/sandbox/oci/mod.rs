//! The `oci` backend: podman (preferred) or docker. The task's Dockerfile
//! (or one rendered from its steps) is built once into a tagged image, on
//! bases taken from the same sources as the `local` backend's ([`bases`]),
//! never pulled by the engine itself; each session is a fresh `--rm`
//! container (its writable layer is thrown away) with an interactive shell
//! exec'd over a PTY. [`cli`] finds how the engine runs on this machine.

pub mod bases;
pub mod cli;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::container::{command, Engine, EngineBackend, EXCHANGE_INSIDE, SHELL};
use super::local::{image_store_dir, which, Limits};
use super::session::run_with_timeout;
use super::{Image, SandboxError};
use crate::config::ImagesConfig;
use crate::images::{ImageStore, Resolver};
use crate::task::envdef::{render_dockerfile, EnvDefinition};
use crate::task::{EnvKind, Task};
use cli::Cli;

/// podman or docker as a container `Engine`.
pub struct Oci {
    cli: Cli,
    limits: Limits,
    /// The image store the `local` backend builds from, shared.
    store: ImageStore,
    resolver: Resolver,
    /// Where base images are laid out for the engine to load.
    scratch: PathBuf,
}

/// The OCI backend.
pub type OciBackend = EngineBackend<Oci>;

/// Find podman, else docker.
pub fn engine_path() -> Option<PathBuf> {
    which("podman").or_else(|| which("docker"))
}

impl EngineBackend<Oci> {
    /// A backend keeping build contexts under `cache_dir/oci`, resolving
    /// bases with the default `[images]` settings.
    pub fn new(cache_dir: &Path) -> Result<Self, SandboxError> {
        Self::with_images(cache_dir, &ImagesConfig::default())
    }

    /// A backend resolving bases with the `[images]` settings `images`
    /// (aliases, pulls, mirrors) from the store under `cache_dir`.
    pub fn with_images(cache_dir: &Path, images: &ImagesConfig) -> Result<Self, SandboxError> {
        let engine = engine_path().ok_or_else(|| SandboxError::ToolMissing {
            tool: "podman".into(),
            hint: "install podman (`apt-get install podman runc`) or docker with a running engine"
                .into(),
        })?;
        let info = command(&Cli::plain(&engine).argv(&["info"]))?;
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
        let cache = cache_dir.join("oci");
        std::fs::create_dir_all(&cache)
            .map_err(SandboxError::io("create the oci cache", &cache))?;
        Ok(EngineBackend {
            engine: Oci {
                cli: Cli::probe(&engine, &cache)?,
                limits: Limits::default(),
                store: ImageStore::new(&image_store_dir(cache_dir)),
                resolver: Resolver::new(images.clone()),
                scratch: cache.join("bases"),
            },
            cache,
        })
    }

    /// What endless changed from the engine's defaults to run it here, and why.
    pub fn adjustments(&self) -> &[String] {
        &self.engine.cli.adjustments
    }
}

/// The image tag of a task image.
pub fn tag(hash: &str) -> String {
    format!("localhost/endless-task:{}", &hash[..hash.len().min(16)])
}

impl Engine for Oci {
    const NAME: &'static str = "oci";

    fn program(&self) -> &Path {
        self.cli.program()
    }

    fn resolve_bases(&self, def: &EnvDefinition) -> Result<(String, Option<String>), SandboxError> {
        let found = bases::resolve(&self.cli, &self.store, &self.resolver, def)?;
        let id = found
            .iter()
            .map(|b| b.id.as_str())
            .collect::<Vec<_>>()
            .join("|");
        let notes: Vec<String> = found.into_iter().filter_map(|b| b.note).collect();
        Ok((id, (!notes.is_empty()).then(|| notes.join("; "))))
    }

    fn provide_bases(&self, def: &EnvDefinition, text: String) -> Result<String, SandboxError> {
        let found = bases::resolve(&self.cli, &self.store, &self.resolver, def)?;
        std::fs::create_dir_all(&self.scratch).map_err(SandboxError::io(
            "create the base scratch directory",
            &self.scratch,
        ))?;
        bases::load(&self.cli, &self.store, &found, &self.scratch)?;
        Ok(bases::rewrite_from(&text, &found))
    }

    fn location(&self, cache: &Path, hash: &str) -> (PathBuf, Option<String>) {
        (cache.join(hash), Some(tag(hash)))
    }

    fn is_built(&self, image: &Image) -> Result<bool, SandboxError> {
        let inspect = command(&self.cli.argv(&["image", "inspect", &tag(&image.hash)]))?;
        Ok(run_with_timeout(inspect, Duration::from_secs(30))?.code == Some(0))
    }

    fn context_dir(&self, _cache: &Path, image: &Image) -> PathBuf {
        image.path.clone()
    }

    fn definition(
        &self,
        task: &Task,
        def: &EnvDefinition,
        image: &Image,
        ctx: &Path,
    ) -> (PathBuf, String) {
        let text = match task.environment_definition() {
            Some((EnvKind::Dockerfile, text)) => text.to_string(),
            _ => render_dockerfile(def, &image.user, &image.workdir),
        };
        (ctx.join("Dockerfile.endless"), text)
    }

    /// `<engine> build --pull=never -t <tag> -f <Dockerfile> <context>`
    /// (the bases are the engine's already; network only when asked).
    fn build_argv(&self, image: &Image, definition: &Path, ctx: &Path) -> Vec<String> {
        let mut a = self
            .cli
            .argv(&["build", "--pull=never", "-t", &tag(&image.hash), "-f"]);
        a.push(definition.display().to_string());
        if !image.network {
            a.push("--network=none".into());
        }
        a.push(ctx.display().to_string());
        a
    }

    /// `<engine> run -d --rm ...`: a throwaway container idling until the shell is exec'd.
    fn start_argv(&self, name: &str, image: &Image, exchange: &Path) -> Vec<String> {
        let mut a = self.cli.argv(&["run", "-d", "--rm", "--init"]);
        a.push(format!("--name={name}"));
        a.push(format!(
            "--network={}",
            if image.network { "bridge" } else { "none" }
        ));
        a.push(format!("--pids-limit={}", self.limits.pids));
        a.push(format!("--memory={}", self.limits.memory_bytes));
        a.push("--cap-drop=ALL".into());
        a.push("--security-opt=no-new-privileges".into());
        a.push(format!(
            "--volume={}:{EXCHANGE_INSIDE}:rw",
            exchange.display()
        ));
        a.push(image.reference.clone().unwrap_or_else(|| tag(&image.hash)));
        a.extend(["sleep", "infinity"].map(String::from));
        a
    }

    /// `exec -it` gives the shell a terminal of the engine's, whose echo is
    /// turned off (as the session's own is) before bash starts.
    fn shell_argv(&self, name: &str, image: &Image) -> Vec<String> {
        let mut a = self.cli.argv(&["exec", "-it"]);
        a.push(format!("--user={}", image.user));
        a.push(format!("--workdir={}", image.workdir));
        a.push(format!("--env=HOME={}", image.home));
        a.push(name.into());
        a.extend(["/bin/sh", "-c"].map(String::from));
        a.push(format!("stty -echo 2>/dev/null; exec {}", SHELL.join(" ")));
        a
    }

    fn exec_prefix(&self, name: &str) -> Vec<String> {
        self.cli.argv(&["exec", "-i", "--user=root", name])
    }

    /// podman hands the verifier's fd 3 on (`--preserve-fds=1`); docker cannot.
    fn verifier_prefix(&self, name: &str) -> Vec<String> {
        if self.cli.is_podman() {
            self.cli
                .argv(&["exec", "-i", "--preserve-fds=1", "--user=root", name])
        } else {
            self.exec_prefix(name)
        }
    }

    fn stop_argv(&self, name: &str) -> Vec<String> {
        self.cli.argv(&["rm", "-f", name])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Image {
        Image {
            reference: Some(tag("0123456789abcdef0123")),
            ..Image::for_test("oci", "0123456789abcdef0123", "/c/h", "t")
        }
    }

    #[test]
    fn commands_isolate_and_limit() {
        let e = Oci {
            cli: Cli::plain(Path::new("/usr/bin/podman")),
            limits: Limits::default(),
            store: ImageStore::new(Path::new("/nonexistent")),
            resolver: Resolver::default(),
            scratch: "/c/bases".into(),
        };
        assert_eq!(
            e.build_argv(&image(), Path::new("/c/D"), Path::new("/c")).join(" "),
            "/usr/bin/podman build --pull=never -t localhost/endless-task:0123456789abcdef -f /c/D --network=none /c"
        );
        assert_eq!(
            e.start_argv("endless-1", &image(), Path::new("/c/x")).join(" "),
            "/usr/bin/podman run -d --rm --init --name=endless-1 --network=none --pids-limit=512 \
             --memory=4294967296 --cap-drop=ALL --security-opt=no-new-privileges \
             --volume=/c/x:/run/endless-verifier:rw localhost/endless-task:0123456789abcdef sleep infinity"
        );
        assert_eq!(
            e.shell_argv("endless-1", &image()).join(" "),
            "/usr/bin/podman exec -it --user=user --workdir=/home/user --env=HOME=/home/user endless-1 \
             /bin/sh -c stty -echo 2>/dev/null; exec /bin/bash --noediting --noprofile --norc -i"
        );
        assert_eq!(
            e.exec_prefix("n").join(" "),
            "/usr/bin/podman exec -i --user=root n"
        );
        assert_eq!(e.stop_argv("n").join(" "), "/usr/bin/podman rm -f n");
    }
}
