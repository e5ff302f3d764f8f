//! How endless calls the engine: its program, and for podman what a trial
//! container showed it needs on this machine. Podman's defaults fail on
//! some hosts (crun: "cgroups in hybrid mode not supported"; the default
//! ulimits: "error setting rlimit ... operation not permitted"); endless
//! starts one throwaway container from the host's root (read-only, through
//! an overlay) and, when it fails for one of those reasons, runs podman with
//! `--runtime runc` or with a containers.conf of `default_ulimits = []`,
//! then tries again. `ENDLESS_OCI_RUNTIME` names the runtime outright.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::container::command;
use super::super::local::which;
use super::super::session::run_with_timeout;
use super::super::SandboxError;

/// The environment variable naming the OCI runtime podman runs containers with.
pub const RUNTIME_VAR: &str = "ENDLESS_OCI_RUNTIME";

/// The containers.conf endless points podman at when the default ulimits fail.
const NO_ULIMITS: &str =
    "# Written by endless: podman's default ulimits cannot be set on this host.\n\
[containers]\ndefault_ulimits = []\n";

/// The engine's command line: the words every call starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cli {
    program: PathBuf,
    /// `env CONTAINERS_CONF=...` and global options around the program.
    prefix: Vec<String>,
    /// What was changed from the engine's defaults, and why (for messages).
    pub adjustments: Vec<String>,
}

impl Cli {
    /// The engine as installed, with nothing adjusted.
    pub fn plain(program: &Path) -> Cli {
        Cli {
            program: program.to_path_buf(),
            prefix: vec![program.display().to_string()],
            adjustments: Vec::new(),
        }
    }

    /// The engine's program.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The command line of `args`.
    pub fn argv(&self, args: &[&str]) -> Vec<String> {
        self.prefix
            .iter()
            .cloned()
            .chain(args.iter().map(|s| s.to_string()))
            .collect()
    }

    /// Whether the engine is podman (docker lacks what some calls need).
    pub fn is_podman(&self) -> bool {
        self.program
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("podman"))
    }

    fn with_runtime(&self, runtime: &str, why: String) -> Cli {
        let mut c = self.clone();
        c.prefix
            .insert(c.prefix.len(), format!("--runtime={runtime}"));
        c.adjustments.push(why);
        c
    }

    fn with_conf(&self, conf: &Path) -> Cli {
        let mut c = self.clone();
        let mut prefix = vec![
            "/usr/bin/env".to_string(),
            format!("CONTAINERS_CONF={}", conf.display()),
        ];
        prefix.extend(c.prefix);
        c.prefix = prefix;
        c.adjustments.push(
            "podman's default ulimits cannot be set here: CONTAINERS_CONF names a \
             containers.conf of `default_ulimits = []`"
                .into(),
        );
        c
    }

    /// The engine as this machine runs it: `ENDLESS_OCI_RUNTIME` applied,
    /// then (podman) a trial container, adjusted and retried on the known
    /// failures; an engine that still cannot start one is unavailable,
    /// with the engine's own words. `dir` holds the containers.conf.
    pub fn probe(program: &Path, dir: &Path) -> Result<Cli, SandboxError> {
        let mut cli = Cli::plain(program);
        if let Some(runtime) = std::env::var(RUNTIME_VAR).ok().filter(|r| !r.is_empty()) {
            if !cli.is_podman() {
                return Err(unavailable(format!(
                    "{RUNTIME_VAR}={runtime} is set, but only podman takes a runtime \
                     on its command line ({} does not)",
                    program.display()
                )));
            }
            cli = cli.with_runtime(&runtime, format!("{RUNTIME_VAR}={runtime}"));
        }
        if !cli.is_podman() {
            return Ok(cli);
        }
        for _ in 0..3 {
            let out = trial(&cli)?;
            if out.code == Some(0) {
                return Ok(cli);
            }
            let said = out.output.trim();
            let next = if said.contains("rlimit") && !cli.prefix[0].ends_with("/env") {
                let conf = dir.join("containers.conf");
                crate::fsutil::write_atomic(&conf, NO_ULIMITS.as_bytes())
                    .map_err(SandboxError::io("write podman's containers.conf", &conf))?;
                Some(cli.with_conf(&conf))
            } else if said.contains("cgroups in hybrid mode")
                && !cli.prefix.iter().any(|a| a.starts_with("--runtime="))
            {
                which("runc").map(|runc| {
                    cli.with_runtime(
                        &runc.display().to_string(),
                        "crun cannot run on this host's hybrid cgroups".into(),
                    )
                })
            } else {
                None
            };
            match next {
                Some(adjusted) => cli = adjusted,
                None => return Err(cannot_run(&cli, said)),
            }
        }
        Err(cannot_run(&cli, "it kept failing after the adjustments"))
    }
}

/// `podman run --rm --rootfs /:O true`: the host's root under a throwaway
/// overlay, no network, nothing written to the host.
fn trial(cli: &Cli) -> Result<super::super::session::CommandOutput, SandboxError> {
    let cmd = command(&cli.argv(&["run", "--rm", "--network=none", "--rootfs", "/:O", "true"]))?;
    run_with_timeout(cmd, Duration::from_secs(60))
}

fn unavailable(reason: String) -> SandboxError {
    SandboxError::Unavailable {
        backend: "oci".into(),
        reason,
    }
}

fn cannot_run(cli: &Cli, said: &str) -> SandboxError {
    let last = said.lines().last().unwrap_or("").trim();
    let tried = if cli.adjustments.is_empty() {
        String::new()
    } else {
        format!(" (with {})", cli.adjustments.join("; "))
    };
    unavailable(format!(
        "{} cannot start a container here{tried}: {last}; see docs/images.md \
         \"Container engines\" ({RUNTIME_VAR} names the runtime, e.g. runc)",
        cli.program.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjustments_wrap_the_program() {
        let c = Cli::plain(Path::new("/usr/bin/podman"))
            .with_runtime("/usr/sbin/runc", "r".into())
            .with_conf(Path::new("/c/containers.conf"));
        assert_eq!(
            c.argv(&["info"]).join(" "),
            "/usr/bin/env CONTAINERS_CONF=/c/containers.conf /usr/bin/podman --runtime=/usr/sbin/runc info"
        );
        assert_eq!(c.program(), Path::new("/usr/bin/podman"));
        assert_eq!(c.adjustments.len(), 2);
    }

    /// A "podman" script at `dir/podman` running `body`.
    fn fake_podman(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let fake = dir.join("podman");
        std::fs::write(&fake, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        fake
    }

    #[test]
    fn an_engine_that_cannot_run_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let fake = fake_podman(
            dir.path(),
            "echo 'Error: OCI runtime error: crun: cannot set limits' >&2\nexit 126\n",
        );
        let err = Cli::probe(&fake, dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("cannot start a container here")
                && err.contains("crun: cannot set limits"),
            "{err}"
        );
    }

    #[test]
    fn failing_default_ulimits_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let fake = fake_podman(
            dir.path(),
            "[ -n \"$CONTAINERS_CONF\" ] && exit 0\n\
             echo 'error setting rlimit type 7: operation not permitted' >&2\nexit 126\n",
        );
        let cli = Cli::probe(&fake, dir.path()).unwrap();
        let conf = dir.path().join("containers.conf");
        assert_eq!(
            cli.argv(&["info"])[1],
            format!("CONTAINERS_CONF={}", conf.display())
        );
        assert!(std::fs::read_to_string(conf)
            .unwrap()
            .contains("default_ulimits = []"));
    }
}
