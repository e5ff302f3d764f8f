//! Building a task's image layer: run its setup steps once, as root, in an
//! overlay whose upper directories become the image.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::bwrap::{self, Bind, Caps, Spec};
use super::limits::{self, Cgroups};
use super::overlay::{Layer, MountPlan, MountSpec};
use super::{seccomp, steps};
use super::{HostIdentity, LocalBackend};
use crate::images::StoredImage;
use crate::sandbox::image::{home_of, image_hash, Image};
use crate::sandbox::session::run_capturing;
use crate::sandbox::SandboxError;
use crate::task::envdef::parse_task;
use crate::task::{write_tree, Task};

const IMAGE_META: &str = "image.json";

impl LocalBackend {
    /// Build (or find in the cache) the image of `task`.
    pub(super) fn build_image(&self, task: &Task) -> Result<Image, SandboxError> {
        if task.meta.environment.network && !self.allow_network {
            return Err(SandboxError::NetworkNotAllowed {
                task: task.id().to_string(),
            });
        }
        let def = parse_task(task)?;
        let layout = &self.layout;
        layout.ensure()?;
        let (base, base_note) = self.resolve_base(&def)?;
        let base_id = match &base {
            Some((stored, _)) => format!("{}|image:{}", self.base_id(), stored.manifest_digest),
            None => self.base_id(),
        };
        let hash = image_hash(task, "local", &base_id);
        let dir = layout.images().join(&hash);
        if let Some(image) = load_meta(&dir) {
            return Ok(image);
        }
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let build = layout.images().join(format!(
            ".build-{}-{hash}-{}",
            std::process::id(),
            hex::encode(rnd)
        ));
        let result = self.build_into(task, &def, base.as_ref(), base_note, &hash, &build);
        let image = match result {
            Ok(image) => image,
            Err(e) => {
                super::layout::remove_tree(&build);
                return Err(e);
            }
        };
        if std::fs::rename(&build, &dir).is_err() {
            // Another build of the same hash finished first; use it.
            super::layout::remove_tree(&build);
        }
        Ok(load_meta(&dir).unwrap_or(image))
    }

    fn build_into(
        &self,
        task: &Task,
        def: &crate::task::envdef::EnvDefinition,
        base: Option<&(StoredImage, Vec<PathBuf>)>,
        base_note: Option<String>,
        hash: &str,
        build: &Path,
    ) -> Result<Image, SandboxError> {
        let layout = &self.layout;
        let io = |what: &str, p: &Path| SandboxError::io(what.to_string(), p.to_path_buf());
        let user = task.meta.agent.user.clone();
        let home = home_of(&user);
        let workdir = task.meta.environment.workdir.clone();
        let root_up = build.join("root");
        let mut mkdir = vec![
            root_up.clone(),
            build.join("work/root"),
            build.join("ctx"),
            build.join("steps"),
        ];
        let host_base = base.is_none();
        for d in layout.system_dirs.iter().filter(|_| host_base) {
            mkdir.push(build.join("sys").join(d));
            mkdir.push(build.join("work").join(d));
        }
        for d in &mkdir {
            std::fs::create_dir_all(d).map_err(io("create build directory", d))?;
        }
        std::fs::set_permissions(&root_up, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod build directory", &root_up))?;
        write_tree(&build.join("ctx"), &task.environment)?;
        let (script, files) = steps::build_script(def, &user, &home, &workdir, self.is_rootless());
        // The image's own environment (PATH, LANG, ...) comes first.
        let image_env = base
            .map(|(stored, _)| image_env_exports(&stored.config))
            .unwrap_or_default();
        let script = format!("{image_env}{script}");
        std::fs::write(build.join("steps/build.sh"), script)
            .map_err(io("write build script", build))?;
        for (name, content) in files {
            let p = build.join("steps").join(name);
            std::fs::write(&p, content).map_err(io("write step script", &p))?;
        }
        let lower = match base {
            Some((_, dirs)) => dirs.clone(),
            None => vec![layout.skeleton()],
        };
        let mut layers = vec![Layer {
            target: layout.merged(),
            lower,
            upper: root_up.clone(),
            work: build.join("work/root"),
        }];
        let mut uppers = vec![root_up.clone()];
        for d in layout.system_dirs.iter().filter(|_| host_base) {
            uppers.push(build.join("sys").join(d));
            layers.push(Layer {
                target: layout.merged().join(d),
                lower: vec![self.base_dir(d)],
                upper: build.join("sys").join(d),
                work: build.join("work").join(d),
            });
        }
        // The build's root reads the context and steps as an unprivileged host id.
        if let HostIdentity::Mapped(m) = self.identity {
            for dir in [build.join("ctx"), build.join("steps")] {
                for entry in walkdir::WalkDir::new(&dir).into_iter().flatten() {
                    let p = entry.path();
                    let meta = std::fs::symlink_metadata(p).map_err(io("stat build file", p))?;
                    std::os::unix::fs::lchown(
                        p,
                        Some(m.host(meta.uid())),
                        Some(m.host(meta.gid())),
                    )
                    .map_err(io("chown build file", p))?;
                }
            }
        }
        // The setup runs under the same limits as sessions (a runaway setup
        // must not take the host down either).
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let cg_name = format!("{}-build-{}", std::process::id(), hex::encode(rnd));
        let mut cgroups = if self.cgroups {
            Cgroups::create(&cg_name, &self.limits)
        } else {
            None
        };
        let (procs, rlimits) = match &cgroups {
            Some(cg) => (cg.procs_files(), Vec::new()),
            None => (Vec::new(), limits::fallback_rlimits(&self.limits)),
        };
        let userns = self.new_userns()?;
        let network = task.meta.environment.network || self.build_network();
        let build_id = build.file_name().map(|n| n.to_string_lossy().into_owned());
        let (net_parent, net_child, pidfile) =
            self.net_setup(network, &build_id.unwrap_or_default())?;
        let plan = MountPlan::new(MountSpec {
            tmpfs: None,
            mkdirs: &[],
            layers: &layers,
            cgroup_procs: &procs,
            rlimits,
            identity: self.child_identity(&userns, &uppers, host_base)?,
            binds: vec![
                (build.join("ctx"), layout.staged("ctx")),
                (build.join("steps"), layout.staged("steps")),
            ],
            net: net_child,
        })?;
        let mut env = vec![
            ("PATH".to_string(), bwrap::SANDBOX_PATH.to_string()),
            ("HOME".into(), "/root".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("DEBIAN_FRONTEND".into(), "noninteractive".into()),
        ];
        if network {
            env.extend(host_ca_env(&build.join("steps"))?);
        }
        let seccomp = seccomp::program_files(&self.seccomp)?;
        let keep = seccomp.iter().map(|f| f.as_raw_fd()).collect();
        let spec = Spec {
            root: layout.merged(),
            network,
            binds: vec![
                Bind {
                    source: layout.staged("ctx"),
                    inside: steps::CTX.into(),
                    read_only: true,
                },
                Bind {
                    source: layout.staged("steps"),
                    inside: steps::STEPS.into(),
                    read_only: true,
                },
            ],
            env,
            caps: Caps::Only(bwrap::BUILD_CAPS.to_vec()),
            seccomp: seccomp.iter().map(|f| f.as_raw_fd()).collect(),
            chdir: "/".into(),
            argv: vec!["/bin/bash".into(), format!("{}/build.sh", steps::STEPS)],
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
            super::net::attach_in_background(ends, ns, pidfile.clone().unwrap_or_default())
        });
        let mut out = run_capturing(cmd, self.build_timeout, false, None, keep).map(|(o, _)| o);
        if let Some(Ok(Err(e))) = attach.map(|t| t.join()) {
            out = Err(e);
        }
        if let Some(p) = &pidfile {
            super::net::stop(p);
        }
        drop((userns, seccomp));
        if let Some(cg) = &mut cgroups {
            cg.kill_all_and_remove(Duration::from_secs(5));
        }
        let out = out?;
        if out.code != Some(0) {
            return Err(step_error(
                def,
                &out.output,
                out.code,
                out.timed_out,
                self.build_timeout,
            ));
        }
        let (uid, gid) = if user == "root" {
            (0, 0)
        } else {
            steps::user_ids(&out.output).unwrap_or((1000, 1000))
        };
        // Remove what only the build needed.
        for p in [build.join("work"), build.join("ctx"), build.join("steps")] {
            super::layout::remove_tree(&p);
        }
        let _ = std::fs::remove_dir(root_up.join("run/endless-build/ctx"));
        let _ = std::fs::remove_dir(root_up.join("run/endless-build/steps"));
        let _ = std::fs::remove_dir(root_up.join("run/endless-build"));
        let env_dir = root_up.join(".endless");
        std::fs::create_dir_all(&env_dir).map_err(io("create", &env_dir))?;
        std::fs::write(
            env_dir.join("env.sh"),
            format!("{image_env}{}", steps::env_file(def)),
        )
        .map_err(io("write env.sh", &env_dir))?;
        let image = Image {
            backend: "local".into(),
            hash: hash.to_string(),
            path: layout.images().join(hash),
            reference: None,
            task_id: task.id().to_string(),
            user,
            uid,
            gid,
            home,
            workdir,
            network: task.meta.environment.network,
            cpu_millis: task_cpu_millis(task),
            base: base.map(|(stored, _)| stored.reference.clone()),
            base_layers: base.map(|(_, dirs)| dirs.clone()).unwrap_or_default(),
            base_note,
        };
        let meta =
            serde_json::to_vec_pretty(&image).map_err(|e| SandboxError::Start(e.to_string()))?;
        std::fs::write(build.join(IMAGE_META), meta).map_err(io("write image metadata", build))?;
        Ok(image)
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

fn step_error(
    def: &crate::task::envdef::EnvDefinition,
    output: &str,
    code: Option<i32>,
    timed_out: bool,
    limit: Duration,
) -> SandboxError {
    let describe = |n: usize| -> String {
        if n == 0 {
            "create the agent account".into()
        } else if n > def.steps.len() {
            "finish the image (workdir, home ownership)".into()
        } else {
            steps::describe(&def.steps[n - 1])
        }
    };
    if let Some((n, code, text)) = steps::failed_step(output) {
        return SandboxError::SetupStep {
            index: n,
            step: describe(n),
            code,
            output: text,
        };
    }
    let (n, text) = steps::last_step(output).unwrap_or((0, output.to_string()));
    let text = steps::without_markers(&text);
    SandboxError::SetupStep {
        index: n,
        step: if timed_out {
            format!("{} (timed out after {limit:?})", describe(n))
        } else {
            describe(n)
        },
        code,
        output: text,
    }
}

/// `export` lines for an image config's `KEY=value` environment entries.
fn image_env_exports(config: &crate::images::ImageConfig) -> String {
    config
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| format!("export {k}={}\n", steps::sq(v)))
        .collect()
}

/// The task's `[environment] cpus` (Harbor's key) in thousandths of a
/// core, when it is a positive number.
fn task_cpu_millis(task: &Task) -> Option<u32> {
    let v = task.meta.environment.extra.get("cpus")?;
    let n = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
    (n > 0.0 && n.is_finite()).then(|| (n * 1000.0).clamp(10.0, 1e6) as u32)
}

fn load_meta(dir: &Path) -> Option<Image> {
    let bytes = std::fs::read(dir.join(IMAGE_META)).ok()?;
    let mut image: Image = serde_json::from_slice(&bytes).ok()?;
    image.path = dir.to_path_buf();
    Some(image)
}
