//! Running one build step: its script, as root of a user namespace, in an
//! overlay whose lower layers are the cached layers of the steps before it
//! (and what of them was merged, see `image.rs`) over the base, and whose
//! upper directories become the step's layer.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::steps;
use crate::fsutil::UntrustedDir;
use crate::sandbox::isolate::bwrap::{self, Bind, Caps, Spec};
use crate::sandbox::isolate::layout;
use crate::sandbox::isolate::limits::{self, Cgroups};
use crate::sandbox::isolate::overlay::{Layer, MountPlan, MountSpec};
use crate::sandbox::isolate::{net, seccomp};
use crate::sandbox::local::{HostIdentity, LocalBackend};
use crate::sandbox::session::{run_capturing, CommandOutput};
use crate::sandbox::SandboxError;

/// One step to run.
pub struct StepRun<'a> {
    /// The step's script (see `steps::step_script`).
    pub script: String,
    /// A step file to place beside it (`name`, `content`).
    pub file: Option<(String, String)>,
    /// The build context to show at [`steps::CTX`].
    pub ctx: &'a Path,
    /// Whether the context is a copy this step may write to.
    pub ctx_writable: bool,
    /// Where the step's scripts are placed (a fresh directory).
    pub steps_dir: PathBuf,
    /// What of the earlier steps was merged: one directory per part
    /// (`root`, `sys/<dir>`), in [`StepRun::parts`] order.
    pub merged: &'a Path,
    /// The earlier steps' layers stacked over `merged`, bottom first.
    pub steps: &'a [PathBuf],
    /// The overlay parts: `root`, then `sys/<dir>` for each host system
    /// directory (host base only).
    pub parts: &'a [String],
    /// The base image's layers, top first (`None`: the host's directories).
    pub base_layers: Option<&'a [PathBuf]>,
    /// The new layer: upper directories go to `<layer>/<part>`.
    pub layer: &'a Path,
    /// The earlier stage a `COPY --from` step copies from.
    pub from: Option<FromStage<'a>>,
    /// Whether the step gets the network.
    pub network: bool,
    /// How long it may run.
    pub timeout: Duration,
}

/// An earlier stage's file system, shown read-only at [`steps::FROM`].
pub struct FromStage<'a> {
    /// What of its steps was merged (one directory per part).
    pub merged: &'a Path,
    /// Its steps' layers stacked over `merged`, bottom first.
    pub steps: &'a [PathBuf],
    /// Its overlay parts.
    pub parts: &'a [String],
    /// Its base image's layers (`None`: the host's directories).
    pub base_layers: Option<&'a [PathBuf]>,
    /// A fresh directory for the throwaway upper layer over it.
    pub scratch: &'a Path,
}

/// The overlays of a stack: for each part, the step layers (`steps`,
/// bottom first) over the merge over the base, with upper and work
/// directories under `upper_dir` (`<upper_dir>/<part>`,
/// `<upper_dir>/work/<part>`), mounted at `target` (parts `sys/<d>` at
/// `target/<d>`).
fn stack(
    backend: &LocalBackend,
    target: &Path,
    (merged, steps): (&Path, &[PathBuf]),
    parts: &[String],
    base_layers: Option<&[PathBuf]>,
    upper_dir: &Path,
) -> Result<Vec<Layer>, SandboxError> {
    let mut layers = Vec::new();
    for part in parts {
        let upper = upper_dir.join(part);
        let work = upper_dir.join("work").join(part);
        for d in [&upper, &work] {
            // trusted: the build's fresh upper and work directories
            std::fs::create_dir_all(d).map_err(SandboxError::io("create build directory", d))?;
        }
        let mut lower = super::stepcache::layer_parts(steps, part);
        lower.push(merged.join(part));
        let (at, lower) = match part.strip_prefix("sys/") {
            Some(d) => {
                lower.extend(backend.base_dirs(d)?);
                (target.join(d), lower)
            }
            None => {
                match base_layers {
                    Some(dirs) => lower.extend(dirs.iter().cloned()),
                    None => lower.push(backend.layout.skeleton()),
                }
                (target.to_path_buf(), lower)
            }
        };
        layers.push(Layer {
            target: at,
            lower,
            upper,
            work,
        });
    }
    Ok(layers)
}

impl LocalBackend {
    /// Run `run`'s script (see the module docs); the caller checks its status.
    pub(super) fn run_step(&self, run: &StepRun) -> Result<CommandOutput, SandboxError> {
        let layout = &self.layout;
        let io = |what: &str, p: &Path| SandboxError::io(what.to_string(), p.to_path_buf());
        // trusted: this step's fresh scripts directory, not yet shown to any step
        std::fs::create_dir_all(&run.steps_dir)
            .map_err(io("create build directory", &run.steps_dir))?;
        let mut layers = stack(
            self,
            &layout.merged(),
            (run.merged, run.steps),
            run.parts,
            run.base_layers,
            run.layer,
        )?;
        let mut from_host_base = false;
        if let Some(from) = &run.from {
            from_host_base = from.base_layers.is_none();
            layers.extend(stack(
                self,
                &layout.staged("from"),
                (from.merged, from.steps),
                from.parts,
                from.base_layers,
                from.scratch,
            )?);
        }
        let uppers: Vec<PathBuf> = layers.iter().map(|l| l.upper.clone()).collect();
        let mut env = vec![
            ("PATH".to_string(), bwrap::SANDBOX_PATH.to_string()),
            ("HOME".into(), "/root".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("DEBIAN_FRONTEND".into(), "noninteractive".into()),
        ];
        if run.network {
            env.extend(host_ca_env(&run.steps_dir)?);
        }
        let script = run.steps_dir.join("step.sh");
        // trusted: this step's fresh scripts directory, not yet shown to any step
        std::fs::write(&script, &run.script).map_err(io("write build script", &script))?;
        if let Some((name, content)) = &run.file {
            let p = run.steps_dir.join(name);
            // trusted: this step's fresh scripts directory, not yet shown to any step
            std::fs::write(&p, content).map_err(io("write step script", &p))?;
        }
        // The build's root owns the scripts and a writable context copy as
        // an unprivileged host id (the shared context was given to it once).
        if let HostIdentity::Mapped(_) = self.identity {
            let mut dirs = vec![run.steps_dir.as_path()];
            if run.ctx_writable {
                dirs.push(run.ctx);
            }
            for dir in dirs {
                self.give_to_build_root(dir)?;
            }
        }
        // Steps run under the same limits as sessions (a runaway setup
        // must not take the host down either).
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let run_id = format!("{}-build-{}", std::process::id(), hex::encode(rnd));
        let mut cgroups = if self.cgroups {
            Cgroups::create(&run_id, &self.limits)
        } else {
            None
        };
        let (procs, rlimits) = match &cgroups {
            Some(cg) => (cg.procs_files(), Vec::new()),
            None => (Vec::new(), limits::fallback_rlimits(&self.limits)),
        };
        let userns = self.new_userns()?;
        let (net_parent, net_child, pidfile) = self.net_setup(run.network, &run_id)?;
        // Host directories are shown (idmapped) when a stack uses them.
        let host_base = run.base_layers.is_none() || from_host_base;
        let plan = MountPlan::new(MountSpec {
            tmpfs: None,
            mkdirs: &[],
            layers: &layers,
            cgroup_procs: &procs,
            rlimits,
            identity: self.child_identity(&userns, &uppers, host_base)?,
            binds: vec![
                (run.ctx.to_path_buf(), layout.staged("ctx")),
                (run.steps_dir.clone(), layout.staged("steps")),
            ],
            net: net_child,
        })?;
        let seccomp = seccomp::program_files(&self.seccomp)?;
        let keep = seccomp.iter().map(|f| f.as_raw_fd()).collect();
        let mut binds = vec![
            Bind {
                source: layout.staged("ctx"),
                inside: steps::CTX.into(),
                read_only: !run.ctx_writable,
            },
            Bind {
                source: layout.staged("steps"),
                inside: steps::STEPS.into(),
                read_only: true,
            },
        ];
        if run.from.is_some() {
            binds.push(Bind {
                source: layout.staged("from"),
                inside: steps::FROM.into(),
                read_only: true,
            });
        }
        let spec = Spec {
            root: layout.merged(),
            network: run.network,
            binds,
            env,
            caps: Caps::Only(bwrap::BUILD_CAPS.to_vec()),
            seccomp: seccomp.iter().map(|f| f.as_raw_fd()).collect(),
            chdir: "/".into(),
            argv: vec!["/bin/bash".into(), format!("{}/step.sh", steps::STEPS)],
            user_ns: None,
        };
        let mut cmd = Command::new(&self.bwrap);
        cmd.args(bwrap::args(&spec)).env_clear();
        // SAFETY: MountPlan::apply only makes async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
        let attach = net_parent.map(|ends| {
            let ns = userns.as_ref().and_then(|u| u.try_clone().ok());
            net::attach_in_background(ends, ns, pidfile.clone().unwrap_or_default())
        });
        let mut out = run_capturing(cmd, run.timeout, false, None, keep).map(|(o, _)| o);
        if let Some(Ok(Err(e))) = attach.map(|t| t.join()) {
            out = Err(e);
        }
        if let Some(p) = &pidfile {
            net::stop(p);
        }
        drop((userns, seccomp));
        if let Some(cg) = &mut cgroups {
            cg.kill_all_and_remove(Duration::from_secs(5));
        }
        // What only the run needed: the overlay's work directories and the
        // mount points bubblewrap made for the context and scripts.
        layout::remove_tree(&run.layer.join("work"));
        // The layer is the step's output: a link it left on the way is
        // never followed.
        if let Ok(root) = UntrustedDir::open(&run.layer.join("root")) {
            for d in [
                "run/endless-build/ctx",
                "run/endless-build/steps",
                "run/endless-build/from",
                "run/endless-build",
            ] {
                let _ = root.remove_empty_dir(Path::new(d));
            }
        }
        out
    }
}

impl LocalBackend {
    /// Give the files under `dir` (written by us as host root) to the
    /// sandbox's ids, keeping their owners relative to its root (mapped
    /// mode; rootless builds own them already).
    pub(super) fn give_to_build_root(&self, dir: &Path) -> Result<(), SandboxError> {
        let HostIdentity::Mapped(m) = self.identity else {
            return Ok(());
        };
        for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
            let p = entry.path();
            let meta =
                // trusted: files endless just wrote, before any step ran
                std::fs::symlink_metadata(p).map_err(SandboxError::io("stat build file", p))?;
            // trusted: files endless just wrote, before any step ran
            std::os::unix::fs::lchown(p, Some(m.host(meta.uid())), Some(m.host(meta.gid())))
                .map_err(SandboxError::io("chown build file", p))?;
        }
        Ok(())
    }
}

/// The host's CA bundle, offered to a build that has the network: a machine
/// behind a TLS-inspecting proxy trusts that proxy's CA, and `pip`, `curl`,
/// `git` and `npm` in the build then do too (as `docker build` users set up
/// by hand). The bundle is copied next to the build script (public
/// certificates only) and named by the usual variables; apt over plain HTTP
/// needs none.
fn host_ca_env(steps_dir: &Path) -> Result<Vec<(String, String)>, SandboxError> {
    const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
    let host = Path::new(HOST_BUNDLE);
    if !host.is_file() {
        return Ok(Vec::new());
    }
    let copy = steps_dir.join("host-ca.crt");
    // trusted: the host's CA bundle, into our fresh scripts directory
    std::fs::copy(host, &copy).map_err(SandboxError::io("copy the host's CA bundle", host))?;
    let inside = format!("{}/host-ca.crt", steps::STEPS);
    Ok([
        "SSL_CERT_FILE",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "NODE_EXTRA_CA_CERTS",
    ]
    .into_iter()
    .map(|var| (var.to_string(), inside.clone()))
    .collect())
}
