//! The `local` backend: bubblewrap plus kernel overlayfs.
//!
//! Layers, bottom to top: the host's system directories (read-only lower
//! layers), the task's image (the upper directories left by running its
//! setup once), and a throwaway episode layer on a tmpfs that exists only in
//! the session's private mount namespace, so nothing is left behind.

mod bwrap;
mod control;
mod image;
mod layout;
mod limits;
mod overlay;
mod steps;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use bwrap::{bwrap_path, which};
pub use control::EXCHANGE_INSIDE;
pub use layout::SYSTEM_DIRS;
pub use limits::{cgroups_available, Limits};

use self::control::LocalControl;
use self::layout::Layout;
use self::limits::Cgroups;
use self::overlay::{Layer, MountPlan};
use super::session::{Session, SessionInfo};
use super::{Backend, Image, SandboxError, SessionOptions};
use crate::task::Task;

/// The local backend (see the module docs).
pub struct LocalBackend {
    layout: Layout,
    bwrap: PathBuf,
    limits: Limits,
    cgroups: bool,
    allow_network: bool,
    build_timeout: Duration,
    /// Rootless mode: our uid and gid, mapped to root in a user namespace.
    rootless: Option<(u32, u32)>,
}

/// Why unprivileged user namespaces are unusable here, if they are.
pub fn userns_problem() -> Option<String> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some(
            "user namespaces are disabled; enable them: `sysctl -w user.max_user_namespaces=15000`"
                .into(),
        );
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(
            "unprivileged user namespaces are disabled; enable them: `sysctl -w kernel.unprivileged_userns_clone=1`"
                .into(),
        );
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces; allow them: \
             `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or add an AppArmor profile for bwrap)"
                .into(),
        );
    }
    None
}

impl LocalBackend {
    /// A backend caching images under `cache_dir/local`. Fails when
    /// bubblewrap or util-linux is missing, or (not running as root) when
    /// unprivileged user namespaces are disabled.
    pub fn new(cache_dir: &Path) -> Result<LocalBackend, SandboxError> {
        let bwrap = bwrap_path().ok_or_else(|| SandboxError::ToolMissing {
            tool: "bwrap".into(),
            hint: "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`)"
                .into(),
        })?;
        // SAFETY: geteuid/getuid/getgid have no preconditions.
        let rootless = unsafe { (libc::geteuid() != 0).then(|| (libc::getuid(), libc::getgid())) };
        if rootless.is_some() {
            if let Some(problem) = userns_problem() {
                return Err(SandboxError::Unavailable {
                    backend: "local".into(),
                    reason: format!("not running as root, and {problem}"),
                });
            }
        }
        for tool in ["nsenter", "setpriv"] {
            if which(tool).is_none() && !Path::new("/usr/bin").join(tool).exists() {
                return Err(SandboxError::ToolMissing {
                    tool: tool.into(),
                    hint: "install util-linux".into(),
                });
            }
        }
        let allow_network = !matches!(
            std::env::var("ENDLESS_SANDBOX_NETWORK").as_deref(),
            Ok("deny") | Ok("0") | Ok("false")
        );
        let layout = Layout::new(cache_dir);
        layout.remove_stale();
        limits::remove_stale_cgroups();
        Ok(LocalBackend {
            layout,
            bwrap,
            limits: Limits::default(),
            cgroups: cgroups_available(),
            allow_network,
            build_timeout: Duration::from_secs(1800),
            rootless,
        })
    }

    /// Use these resource limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Allow or deny tasks that ask for network access.
    pub fn with_network_allowed(mut self, allow: bool) -> Self {
        self.allow_network = allow;
        self
    }

    /// Use rlimits even where cgroups are available (for tests).
    pub fn without_cgroups(mut self) -> Self {
        self.cgroups = false;
        self
    }

    /// Limit the time an image build may take.
    pub fn with_build_timeout(mut self, limit: Duration) -> Self {
        self.build_timeout = limit;
        self
    }

    /// Whether this backend runs without root (in user namespaces).
    pub fn is_rootless(&self) -> bool {
        self.rootless.is_some()
    }

    /// Whether sessions are limited through cgroups (else rlimits).
    pub fn uses_cgroups(&self) -> bool {
        self.cgroups
    }

    fn start_session(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        if image.backend != "local" {
            return Err(SandboxError::WrongBackend {
                image: image.backend.clone(),
                backend: "local".into(),
            });
        }
        let layout = &self.layout;
        layout.ensure()?;
        let mut rnd = [0u8; 8];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let sid = format!("{}-{}", std::process::id(), hex::encode(rnd));
        let session_dir = layout.sessions().join(&sid);
        let exchange = session_dir.join("x");
        std::fs::create_dir_all(&exchange)
            .map_err(SandboxError::io("create session directory", &exchange))?;
        for d in [&session_dir, &exchange] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                .map_err(SandboxError::io("chmod session directory", d))?;
        }
        let cgroups = if self.cgroups {
            Cgroups::create(&sid, &self.limits)
        } else {
            None
        };
        let (procs, rlimits) = match &cgroups {
            Some(cg) => (cg.procs_files(), Vec::new()),
            None => (Vec::new(), limits::fallback_rlimits(&self.limits)),
        };
        let scratch = layout.scratch();
        let mut mkdirs = vec![scratch.join("u"), scratch.join("w")];
        let mut layers = vec![Layer {
            target: layout.merged(),
            lower: vec![image.path.join("root"), layout.skeleton()],
            upper: scratch.join("u/root"),
            work: scratch.join("w/root"),
        }];
        mkdirs.push(scratch.join("u/root"));
        mkdirs.push(scratch.join("w/root"));
        for d in &layout.system_dirs {
            mkdirs.push(scratch.join("u").join(d));
            mkdirs.push(scratch.join("w").join(d));
            layers.push(Layer {
                target: layout.merged().join(d),
                lower: vec![image.path.join("sys").join(d), PathBuf::from("/").join(d)],
                upper: scratch.join("u").join(d),
                work: scratch.join("w").join(d),
            });
        }
        let plan = MountPlan::new(
            Some((&scratch, self.limits.disk_bytes)),
            &mkdirs,
            &layers,
            &procs,
            rlimits,
            self.rootless,
        )?;
        let (argv, caps) = bwrap::shell_argv(image.uid, image.gid, self.rootless.is_some());
        let merged = layout.merged();
        let spec = bwrap::Spec {
            root: &merged,
            network: image.network && self.allow_network,
            binds: vec![(exchange.clone(), EXCHANGE_INSIDE.into(), true)],
            env: bwrap::agent_env(&image.user, &image.home),
            caps,
            chdir: "/",
            argv,
            user_ns: self.rootless.map(|_| (image.uid, image.gid)),
        };
        let mut cmd = Command::new(&self.bwrap);
        cmd.args(bwrap::args(&spec)).env_clear();
        // SAFETY: MountPlan::apply only makes async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
        let init = format!(
            "HISTSIZE=0; set +o history; PS2=''; PROMPT_COMMAND=''; \
             if [ -r /.endless/env.sh ]; then . /.endless/env.sh >/dev/null 2>&1; fi; \
             cd -- {} 2>/dev/null || cd",
            steps::sq(&image.workdir)
        );
        let control = LocalControl {
            session_dir: session_dir.clone(),
            cgroups,
            outer: 0,
            init: None,
            rootless: self.rootless.is_some(),
        };
        let info = SessionInfo {
            backend: "local",
            user: image.user.clone(),
            workdir: image.workdir.clone(),
            image: image.hash.clone(),
        };
        let result = Session::spawn_with(cmd, &init, opts, info, move |pid| {
            let mut c = control;
            c.outer = pid as i32;
            Box::new(c)
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&session_dir);
        }
        result
    }
}

impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn prepare(&self, task: &Task) -> Result<Image, SandboxError> {
        self.build_image(task)
    }

    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        self.start_session(image, opts)
    }
}
