//! The `apptainer` backend: the reference implementation's runtime. The
//! task's `.def` (or one rendered from its steps) is built into a `.sif`
//! once; each session is an instance started with `--containall
//! --writable-tmpfs` (a throwaway writable layer) and a shell over a PTY.

use std::path::{Path, PathBuf};

use super::container::{argv, Engine, EngineBackend, EXCHANGE_INSIDE, SHELL};
use super::local::which;
use super::{Image, SandboxError};
use crate::task::envdef::{render_apptainer, EnvDefinition};
use crate::task::{EnvKind, Task};

/// Apptainer (or Singularity) as a container `Engine`.
pub struct Apptainer {
    bin: PathBuf,
    /// Whether builds run as root (else `--fakeroot`).
    as_root: bool,
}

/// The apptainer backend.
pub type ApptainerBackend = EngineBackend<Apptainer>;

/// Find `apptainer` (or its predecessor `singularity`).
pub fn apptainer_path() -> Option<PathBuf> {
    which("apptainer").or_else(|| which("singularity"))
}

impl EngineBackend<Apptainer> {
    /// A backend caching `.sif` files under `cache_dir/apptainer`.
    pub fn new(cache_dir: &Path) -> Result<Self, SandboxError> {
        let bin = apptainer_path().ok_or_else(|| SandboxError::ToolMissing {
            tool: "apptainer".into(),
            hint: "install Apptainer (https://apptainer.org/docs/admin/main/installation.html; \
                   Ubuntu: `add-apt-repository ppa:apptainer/ppa && apt-get install apptainer`)"
                .into(),
        })?;
        // SAFETY: geteuid has no preconditions. (The root of an operator's
        // owner namespace is not host root.)
        let as_root =
            unsafe { libc::geteuid() } == 0 && crate::sandbox::subids::owner_namespace().is_none();
        Ok(EngineBackend {
            engine: Apptainer { bin, as_root },
            cache: cache_dir.join("apptainer"),
        })
    }
}

impl Engine for Apptainer {
    const NAME: &'static str = "apptainer";

    fn program(&self) -> &Path {
        &self.bin
    }

    fn location(&self, cache: &Path, hash: &str) -> (PathBuf, Option<String>) {
        (cache.join(hash).join("image.sif"), None)
    }

    fn is_built(&self, image: &Image) -> Result<bool, SandboxError> {
        Ok(image.path.exists())
    }

    fn context_dir(&self, cache: &Path, image: &Image) -> PathBuf {
        cache.join(&image.hash).join("ctx")
    }

    fn definition(
        &self,
        task: &Task,
        def: &EnvDefinition,
        image: &Image,
        ctx: &Path,
    ) -> (PathBuf, String) {
        let text = match task.environment_definition() {
            Some((EnvKind::ApptainerDef, text)) => text.to_string(),
            _ => {
                let files: Vec<&str> = task.environment.iter().map(|(p, _)| p.as_str()).collect();
                render_apptainer(def, &image.user, &files)
            }
        };
        (ctx.join("endless.def"), text)
    }

    /// `apptainer build --force <sif> <def>` (with `--fakeroot` when not root).
    fn build_argv(&self, image: &Image, definition: &Path, _ctx: &Path) -> Vec<String> {
        let mut a = argv(&self.bin, &["build", "--force"]);
        if !self.as_root {
            a.push("--fakeroot".into());
        }
        a.push(image.path.display().to_string());
        a.push(definition.display().to_string());
        a
    }

    /// `apptainer instance start --containall --writable-tmpfs ...`: a fresh
    /// throwaway writable layer per session, no host paths but the exchange dir.
    fn start_argv(&self, name: &str, image: &Image, exchange: &Path) -> Vec<String> {
        let mut a = argv(
            &self.bin,
            &[
                "instance",
                "start",
                "--containall",
                "--writable-tmpfs",
                "--cleanenv",
            ],
        );
        a.push("--pwd".into());
        a.push(image.workdir.clone());
        a.push("--bind".into());
        a.push(format!("{}:{EXCHANGE_INSIDE}:ro", exchange.display()));
        if !image.network {
            a.extend(["--net", "--network", "none"].map(String::from));
        }
        a.push(image.path.display().to_string());
        a.push(name.to_string());
        a
    }

    fn shell_argv(&self, name: &str, image: &Image) -> Vec<String> {
        let mut a = argv(&self.bin, &["exec", "--pwd"]);
        a.push(image.workdir.clone());
        a.push(format!("instance://{name}"));
        a.extend(SHELL.iter().map(|s| s.to_string()));
        a
    }

    fn exec_prefix(&self, name: &str) -> Vec<String> {
        let mut a = argv(&self.bin, &["exec", "--cleanenv"]);
        a.push(format!("instance://{name}"));
        a
    }

    fn stop_argv(&self, name: &str) -> Vec<String> {
        argv(&self.bin, &["instance", "stop", name])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Image {
        Image::for_test("apptainer", "h", "/c/i.sif", "t")
    }

    #[test]
    fn commands_are_built_as_the_reference_does() {
        let e = Apptainer {
            bin: "/usr/bin/apptainer".into(),
            as_root: false,
        };
        assert_eq!(
            e.build_argv(
                &image(),
                Path::new("/c/ctx/endless.def"),
                Path::new("/c/ctx")
            )
            .join(" "),
            "/usr/bin/apptainer build --force --fakeroot /c/i.sif /c/ctx/endless.def"
        );
        assert_eq!(
            e.start_argv("endless-1", &image(), Path::new("/c/x")).join(" "),
            "/usr/bin/apptainer instance start --containall --writable-tmpfs --cleanenv --pwd /home/user \
             --bind /c/x:/run/endless-verifier:ro --net --network none /c/i.sif endless-1"
        );
        let mut net = image();
        net.network = true;
        assert!(!e
            .start_argv("e", &net, Path::new("/x"))
            .contains(&"--net".to_string()));
        assert_eq!(
            e.shell_argv("endless-1", &image()).join(" "),
            "/usr/bin/apptainer exec --pwd /home/user instance://endless-1 /bin/bash --noediting --noprofile --norc -i"
        );
        assert_eq!(
            e.exec_prefix("endless-1").join(" "),
            "/usr/bin/apptainer exec --cleanenv instance://endless-1"
        );
        assert_eq!(
            e.stop_argv("endless-1").join(" "),
            "/usr/bin/apptainer instance stop endless-1"
        );
    }
}
