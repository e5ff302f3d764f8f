//! The `local` backend: bubblewrap plus kernel overlayfs, composed from the
//! rooms of `sandbox`: isolation (`isolate/`), the verifier (`verifier/`)
//! and its own image building (`build/`). This folder keeps only the
//! [`LocalBackend`] itself (starting sessions), a session's control
//! (`control.rs`) and the build state report (`state.rs`).
//!
//! Layers, bottom to top: the base (the host's system directories and a
//! minimal `/etc`, see `isolate/etc.rs`), the task's image (the cached upper
//! directories its setup steps left, stacked, under the image's own small
//! layer; see `build/image.rs`), and a throwaway episode layer on a tmpfs
//! of its own size that exists only in the session's private mount
//! namespace, so nothing is left behind.
//!
//! Root inside is never root outside. Between fork and exec
//! (`isolate/overlay.rs`) the child, still host root, makes a private mount
//! namespace, mounts the overlays (host directories seen through idmapped
//! mounts) and binds what bubblewrap needs under a directory it can reach
//! (`Layout::stage`); then it enters a fresh user namespace
//! (`isolate/userns.rs`) whose root is an unprivileged host id and runs
//! bubblewrap there, which adds the PID, IPC, UTS, cgroup and network
//! namespaces, drops capabilities and loads the seccomp filter
//! (`isolate/seccomp.rs`). Run unprivileged, the child maps our own ids
//! instead. Tasks with network access get their own namespace wired by
//! `pasta` (`isolate/net.rs`). The verifier runs beside the shell out of
//! the agent's reach (`verifier/`). The attacks this stops are in
//! `tests/attacks.rs`; docs/security.md lists them.
//!
//! May not be used by the rooms it composes, nor by the backend-neutral
//! session and types of `sandbox`.

mod build;
mod control;
mod state;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use seccompiler::BpfProgram;

pub use self::build::evict::{
    disk_bytes, disk_bytes_of, enforce_cap, prune_keep_recent, set_last_use, EvictReport,
    IN_USE_WINDOW,
};
pub use self::build::flatten::apply_layer;
pub use self::build::image::MAX_STEP_LAYERS;
pub use self::build::stepcache::{
    build_record, prune_steps, BuiltStep, StepOutcome, StepPruneReport,
};
pub use self::build::verifier_env::{env_dir, env_name, env_note, env_python, env_site};
pub use crate::sandbox::isolate::bwrap::{bwrap_path, which};
pub use crate::sandbox::isolate::layout::SYSTEM_DIRS;
pub use crate::sandbox::isolate::limits::{cgroups_available, Limits, RLIMITS_ONLY};
pub use crate::sandbox::isolate::net::pasta_path;
pub use crate::sandbox::isolate::seccomp::summary as seccomp_summary;
pub use crate::sandbox::isolate::userns::IdMap;
pub use control::{descendants, EXCHANGE_INSIDE};
pub use state::{BaseImage, BuildState, StepCacheState, StepState};

use self::build::{evict, steps};
use self::control::LocalControl;
use super::pool;
use super::session::{Session, SessionInfo};
use super::{Backend, Image, SandboxError, SessionOptions};
use crate::images::{self, ImageStore, StoredImage};
use crate::sandbox::isolate::bwrap::{self, Bind};
use crate::sandbox::isolate::layout::{self, Layout, VERIFIER_ENVS};
use crate::sandbox::isolate::limits::{self, Cgroups};
use crate::sandbox::isolate::overlay::{Identity, Idmapped, Layer, MountPlan, MountSpec};
use crate::sandbox::isolate::{etc, mask, net, seccomp, userns};
use crate::sandbox::verifier::runtime::{self, Runtime};
use crate::sandbox::verifier::warm;
use crate::task::envdef::EnvDefinition;
use crate::task::Task;

/// Who the sandbox's root is on the host.
#[derive(Debug, Clone, Copy)]
pub enum HostIdentity {
    /// We run as root: sandboxes get user namespaces mapping to this range.
    Mapped(IdMap),
    /// We run unprivileged: our own uid and gid are the sandbox's root.
    Rootless(u32, u32),
}

impl HostIdentity {
    /// Host uid and gid of the sandbox's root.
    pub fn root_ids(&self) -> (u32, u32) {
        match self {
            HostIdentity::Mapped(m) => (m.base, m.base),
            HostIdentity::Rootless(uid, gid) => (*uid, *gid),
        }
    }

    /// A short description for `sandbox doctor`.
    pub fn describe(&self) -> String {
        match self {
            HostIdentity::Mapped(m) if !m.privileged_mounts() => {
                let ns = userns::owner_namespace().unwrap_or(userns::OwnerNamespace {
                    owner: (0, 0),
                    range_start: (0, 0),
                });
                format!(
                    "rootless with subordinate ids: a user namespace per session, inside 0..{} = \
                     host {}..{} (your range in /etc/subuid); your own uid {} is not mapped in it",
                    m.count,
                    ns.range_start.0,
                    ns.range_start.0 as u64 + m.count as u64 - 1,
                    ns.owner.0
                )
            }
            HostIdentity::Mapped(m) => format!(
                "user namespace per session: inside 0..{} = host {}..{} (from {})",
                m.count,
                m.base,
                m.base as u64 + m.count as u64 - 1,
                m.source
            ),
            HostIdentity::Rootless(uid, _) => {
                format!("rootless: inside root = host uid {uid} (this user); no other id is mapped")
            }
        }
    }
}

/// A definition's base: the stored image and its unpacked layers (`None`:
/// the host's directories), and the note saying what it substitutes.
type ResolvedBase = (Option<(StoredImage, Vec<PathBuf>)>, Option<String>);

/// The local backend (see the module docs). Its clones share everything
/// but the pool (the pool's own starts use one).
#[derive(Clone)]
pub struct LocalBackend {
    layout: Layout,
    bwrap: PathBuf,
    limits: Limits,
    cgroups: bool,
    allow_network: bool,
    build_timeout: Duration,
    identity: HostIdentity,
    etc: PathBuf,
    runtime: Runtime,
    seccomp: Vec<BpfProgram>,
    images: ImageStore,
    /// Turns a definition's `FROM` into a base (aliases, pulls, fallback).
    resolver: std::sync::Arc<images::Resolver>,
    /// User namespaces made ahead of time (mapped mode).
    userns_pool: Option<std::sync::Arc<userns::UsernsPool>>,
    /// The pre-warmed verifier, or why verifications run cold.
    warm: Result<std::sync::Arc<warm::WarmVerifier>, String>,
    /// The mask of private host files (mapped mode, see `isolate/mask.rs`), made
    /// when a host directory is first shown.
    mask: std::sync::Arc<std::sync::OnceLock<Result<Option<PathBuf>, String>>>,
    /// Pre-started sandboxes (`[sandbox] pool`), when there is a pool.
    pool: Option<std::sync::Arc<pool::Pool<Session>>>,
    /// This backend's live sessions, pooled ones included (see [`pool::Ticket`]).
    live: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// This process's scan of the host's system directories for private
/// entries (see `isolate/mask.rs`): started in the background by the first mapped
/// backend, awaited when a host directory is first shown.
static HOST_SCAN: std::sync::OnceLock<mask::Hidden> = std::sync::OnceLock::new();

/// Scan the host's `dirs` for private entries (see `isolate/mask.rs`), saying how
/// long it took.
fn scan_host(dirs: &[String]) -> mask::Hidden {
    let t0 = std::time::Instant::now();
    let hidden = mask::scan(Path::new("/"), dirs);
    tracing::debug!(
        hidden = hidden.len(),
        secs = t0.elapsed().as_secs_f64(),
        "scanned the host's system directories for private entries"
    );
    hidden
}

/// The system directories the mask covers (`/etc` is a copy of its own).
fn masked_dirs(layout: &Layout) -> Vec<String> {
    layout
        .system_dirs
        .iter()
        .filter(|d| *d != "etc")
        .cloned()
        .collect()
}

/// Where the image store of a backend caching under `cache_dir` lives
/// (`endless images` uses the same).
pub fn image_store_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join("images")
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
        let identity = if userns::running_as_root() {
            HostIdentity::Mapped(IdMap::for_host())
        } else {
            if let Some(problem) = userns_problem() {
                return Err(SandboxError::Unavailable {
                    backend: "local".into(),
                    reason: format!("not running as root, and {problem}"),
                });
            }
            // SAFETY: getuid/getgid have no preconditions.
            unsafe { HostIdentity::Rootless(libc::getuid(), libc::getgid()) }
        };
        for tool in ["nsenter", "setpriv"] {
            if which(tool).is_none() && !Path::new("/usr/bin").join(tool).exists() {
                return Err(SandboxError::ToolMissing {
                    tool: tool.into(),
                    hint: "install util-linux".into(),
                });
            }
        }
        super::seal_inherited();
        let allow_network = !matches!(
            std::env::var("ENDLESS_SANDBOX_NETWORK").as_deref(),
            Ok("deny") | Ok("0") | Ok("false")
        );
        let owner = match identity {
            HostIdentity::Mapped(_) => Some(identity.root_ids()),
            HostIdentity::Rootless(..) => None,
        };
        let layout = Layout::new(cache_dir, owner);
        layout.remove_stale();
        limits::remove_stale_cgroups();
        let map = match identity {
            HostIdentity::Mapped(m) => Some(m),
            HostIdentity::Rootless(..) => None,
        };
        let host_etc = Path::new("/etc");
        let etc = layout.etc(&etc::fingerprint(host_etc, map));
        if !etc.is_dir() {
            let mut rnd = [0u8; 6];
            rand::Rng::fill(&mut rand::rng(), &mut rnd);
            let tmp =
                etc.with_extension(format!("tmp-{}-{}", std::process::id(), hex::encode(rnd)));
            layout::remove_tree(&tmp);
            etc::build(host_etc, &tmp, map)?;
            if std::fs::rename(&tmp, &etc).is_err() {
                layout::remove_tree(&tmp); // another process made it first
            }
        }
        // The verifier must not be able to read the loader copy (see verifier/runtime.rs).
        let loader_owner = match identity {
            HostIdentity::Mapped(_) => (0, 0),
            HostIdentity::Rootless(uid, gid) => (uid, gid),
        };
        let runtime = Runtime::prepare(&layout.runtime(), loader_owner)?;
        let seccomp = seccomp::programs()?;
        let warm = match identity {
            _ if matches!(std::env::var("ENDLESS_VERIFIER").as_deref(), Ok("cold")) => {
                Err("ENDLESS_VERIFIER=cold".to_string())
            }
            HostIdentity::Mapped(_) => Ok(warm::WarmVerifier::new(
                runtime.clone(),
                seccomp.clone(),
                layout.runtime().with_file_name("verifier-zygote.log"),
                layout.sessions(),
            )),
            HostIdentity::Rootless(..) => Err("rootless backends verify cold".to_string()),
        };
        if matches!(identity, HostIdentity::Mapped(m) if m.privileged_mounts()) {
            let dirs = masked_dirs(&layout);
            std::thread::spawn(move || {
                HOST_SCAN.get_or_init(|| scan_host(&dirs));
            });
        }
        Ok(LocalBackend {
            layout,
            bwrap,
            limits: Limits::default(),
            cgroups: cgroups_available(),
            allow_network,
            build_timeout: Duration::from_secs(1800),
            identity,
            etc,
            runtime,
            seccomp,
            images: ImageStore::new(&image_store_dir(cache_dir)),
            resolver: Default::default(),
            userns_pool: map.map(userns::UsernsPool::new),
            warm,
            mask: Default::default(),
            pool: None,
            live: Default::default(),
        })
    }

    /// Resolve base images with the `[images]` settings (aliases, mirrors,
    /// pulls, fallback) instead of the defaults.
    pub fn with_images(mut self, settings: crate::config::ImagesConfig) -> Self {
        self.resolver = std::sync::Arc::new(images::Resolver::new(settings));
        self
    }

    /// Keep sandboxes started ahead for the images asked for (see
    /// [`pool`]); a size of 0 turns the pool off. Call after the other
    /// settings: the pool starts its sandboxes with them.
    pub fn with_pool(mut self, settings: pool::PoolSettings) -> Self {
        if let Some(old) = self.pool.take() {
            old.shut();
        }
        if settings.size > 0 {
            let starter = self.clone();
            let start: pool::Starter<Session> = std::sync::Arc::new(move |image: &Image| {
                starter.start_session(image, &SessionOptions::default())
            });
            self.pool = Some(pool::Pool::new(settings, start, self.live.clone()));
        }
        self
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

    /// Verify with a fresh interpreter every time (no pre-warmed verifier).
    pub fn with_cold_verifier(mut self) -> Self {
        self.warm = Err("turned off for this backend".into());
        self
    }

    /// The pre-warmed verifier's host pid, once it runs (it starts with the
    /// first session).
    pub fn verifier_pid(&self) -> Option<u32> {
        self.warm.as_ref().ok().and_then(|w| w.pid())
    }

    /// Whether this backend runs without root (in user namespaces).
    pub fn is_rootless(&self) -> bool {
        matches!(self.identity, HostIdentity::Rootless(..))
    }

    /// Whose ids the files of unpacked image layers get.
    pub fn layer_owners(&self) -> images::LayerOwners {
        images::LayerOwners {
            base: match self.identity {
                HostIdentity::Mapped(m) => Some(m.base),
                HostIdentity::Rootless(..) => None,
            },
            user_xattrs: self.user_xattrs(),
        }
    }

    /// Whether its mounts are unprivileged (rootless, or in the owner
    /// namespace of subordinate ids): overlayfs keeps its attributes under
    /// `user.` instead of `trusted.`.
    pub fn user_xattrs(&self) -> bool {
        match self.identity {
            HostIdentity::Mapped(m) => !m.privileged_mounts(),
            HostIdentity::Rootless(..) => true,
        }
    }

    /// Who the sandbox's root is on the host.
    pub fn identity(&self) -> HostIdentity {
        self.identity
    }

    /// A fingerprint of the base layer (host directories, minimal `/etc`,
    /// id mapping), part of every image hash.
    fn base_id(&self) -> String {
        let ids = match self.identity {
            HostIdentity::Mapped(m) => format!("userns:{}", m.base),
            HostIdentity::Rootless(..) => "rootless".into(),
        };
        let etc = self
            .etc
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        // `merge:stack`: images that copied their step layers (or merged
        // them by hard links, a link count of 2 that gzip refuses) are not
        // reused; images now stack the cached layers (see `build/image.rs`).
        // `mask`: nor are images built before private host files were
        // masked (a root build step could have copied them in).
        format!(
            "{}|{ids}|etc:{}|merge:stack|mask",
            self.layout.base_id(),
            etc.unwrap_or_default()
        )
    }

    /// The lower layers under the image for system directory `d`: the
    /// minimal `/etc`, or the host directory (through its idmapped view
    /// when sandboxes run in mapped user namespaces, under the mask of what
    /// no unprivileged host user could read).
    fn base_dirs(&self, d: &str) -> Result<Vec<PathBuf>, SandboxError> {
        if d == "etc" {
            return Ok(vec![self.etc.clone()]);
        }
        let map = match self.identity {
            HostIdentity::Mapped(map) if map.privileged_mounts() => map,
            _ => return Ok(vec![PathBuf::from("/").join(d)]),
        };
        let mask = self
            .mask
            .get_or_init(|| {
                let hidden = HOST_SCAN.get_or_init(|| scan_host(&masked_dirs(&self.layout)));
                mask::materialize(&self.layout.root.join("masks"), hidden, &map)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| SandboxError::Start(format!("mask of private host files: {e}")))?;
        let mut dirs: Vec<PathBuf> = mask
            .iter()
            .map(|m| m.join(d))
            .filter(|p| p.is_dir())
            .collect();
        dirs.push(self.layout.idmapped().join(d));
        Ok(dirs)
    }

    /// The privilege drop of a child (session or build): the mapped user
    /// namespace with idmapped host directories, or the rootless mapping.
    /// `uppers` are the directories the namespace's root must own.
    /// `host_base`: the base is the host's directories (else an image,
    /// whose layers are already owned by the sandbox's ids).
    fn child_identity(
        &self,
        userns: &Option<OwnedFd>,
        uppers: &[PathBuf],
        host_base: bool,
    ) -> Result<Identity, SandboxError> {
        match (self.identity, userns) {
            (HostIdentity::Mapped(m), Some(ns)) => Ok(Identity::Mapped {
                userns: ns.as_raw_fd(),
                idmapped: self
                    .layout
                    .system_dirs
                    .iter()
                    .filter(|d| host_base && m.privileged_mounts() && *d != "etc")
                    .map(|d| Idmapped {
                        source: PathBuf::from("/").join(d),
                        target: self.layout.idmapped().join(d),
                    })
                    .collect(),
                chown: uppers.iter().map(|p| (p.clone(), m.base, m.base)).collect(),
            }),
            (HostIdentity::Mapped(_), None) => Err(SandboxError::Start(
                "internal: a mapped sandbox needs its user namespace".into(),
            )),
            (HostIdentity::Rootless(uid, gid), _) => Ok(Identity::Rootless { ids: (uid, gid) }),
        }
    }

    /// The base a definition asks for (see [`images::Resolver`]): a stored
    /// or pulled image and its layers, unpacked for this backend's ids, or
    /// the host's directories; with a note when it is a substitute. A pull
    /// reports to `progress`.
    fn resolve_base(
        &self,
        def: &EnvDefinition,
        progress: images::ProgressFn<'_>,
    ) -> Result<ResolvedBase, SandboxError> {
        let base = self
            .resolver
            .resolve_reporting(&self.images, def.base.as_deref(), progress)?;
        let note = base.note().map(str::to_owned);
        let images::Base::Image { image: stored, .. } = base else {
            return Ok((None, note));
        };
        let dirs = self.images.layer_dirs(&stored, self.layer_owners())?;
        Ok((Some((stored, dirs)), note))
    }

    /// A new user namespace for one child (mapped mode only).
    fn new_userns(&self) -> Result<Option<OwnedFd>, SandboxError> {
        match &self.userns_pool {
            Some(pool) => pool.take().map(Some),
            None => Ok(None),
        }
    }

    /// Whether image builds get the network (as `docker build` does, so
    /// `apt-get install` and `pip install` work) although the task's
    /// sessions stay offline: as root (or with subordinate ids where `/dev/net/tun`
    /// is open to all), with pasta installed, unless
    /// `ENDLESS_SANDBOX_NETWORK=deny`. Rootless builds stay offline (user-mode
    /// networking needs `/dev/net/tun`), unless the task itself has network.
    pub fn build_network(&self) -> bool {
        self.allow_network
            && matches!(self.identity, HostIdentity::Mapped(_))
            && net::pasta_path().is_some()
            && net::tun_usable()
    }

    /// Whether sessions are limited through cgroups (else rlimits).
    pub fn uses_cgroups(&self) -> bool {
        self.cgroups
    }

    /// The host pids of the pooled sandboxes' outermost processes (`None`:
    /// no pool).
    pub fn pooled_pids(&self) -> Option<Vec<u32>> {
        self.pool.as_ref().map(|p| p.pids())
    }

    /// A sandbox of `image` from the pool if one is ready (made ready for
    /// `opts`), else a fresh one.
    fn start_pooled(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        if let Some(pool) = &self.pool {
            if image.backend == "local" {
                if let Some(mut session) = pool.take(image) {
                    if session.adopt(opts).is_ok() {
                        return Ok(session);
                    }
                    session.close();
                }
            }
        }
        self.start_session(image, opts)
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
        // Held for the session's whole life: no eviction takes its layers.
        let held = evict::hold(image)?;
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
        // The sandbox's root copies files in from here (solutions, scripts).
        let (root_uid, root_gid) = self.identity.root_ids();
        std::os::unix::fs::chown(&exchange, Some(root_uid), Some(root_gid))
            .map_err(SandboxError::io("chown session directory", &exchange))?;
        let mut limits = self.limits.clone();
        if let Some(millis) = image.cpu_millis {
            // More than the host's cores gives nothing but a larger quota.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            limits.cpus = (f64::from(millis) / 1000.0).min(cores as f64);
        }
        if let Some(mb) = image.memory_mb {
            limits.memory_bytes = limits.memory_bytes.min(mb.saturating_mul(1 << 20));
        }
        limits.disk_bytes = limits::layer_bytes(
            image.storage_mb,
            limits.disk_bytes,
            self.resolver.settings().session_storage_cap_mb(),
        );
        let cgroups = if self.cgroups {
            Cgroups::create(&sid, &limits)
        } else {
            None
        };
        let (procs, rlimits) = match &cgroups {
            Some(cg) => (cg.procs_files(), Vec::new()),
            None => (Vec::new(), limits::fallback_rlimits(&limits)),
        };
        let scratch = layout.scratch();
        let mut mkdirs = vec![scratch.join("u"), scratch.join("w")];
        let mut uppers = vec![scratch.join("u/root")];
        let host_base = image.base_layers.is_empty();
        // The image's own layer, its steps' layers, the base.
        let mut lower = vec![image.path.join("root")];
        lower.extend(image.step_lowers("root").iter().cloned());
        if host_base {
            lower.push(layout.skeleton());
        } else {
            lower.extend(image.base_layers.iter().cloned());
        }
        let mut layers = vec![Layer {
            target: layout.merged(),
            lower,
            upper: scratch.join("u/root"),
            work: scratch.join("w/root"),
        }];
        mkdirs.push(scratch.join("u/root"));
        mkdirs.push(scratch.join("w/root"));
        for d in layout.system_dirs.iter().filter(|_| host_base) {
            mkdirs.push(scratch.join("u").join(d));
            mkdirs.push(scratch.join("w").join(d));
            uppers.push(scratch.join("u").join(d));
            layers.push(Layer {
                target: layout.merged().join(d),
                lower: std::iter::once(image.path.join("sys").join(d))
                    .chain(image.step_lowers(&format!("sys/{d}")).iter().cloned())
                    .chain(self.base_dirs(d)?)
                    .collect(),
                upper: scratch.join("u").join(d),
                work: scratch.join("w").join(d),
            });
        }
        let userns = self.new_userns()?;
        let network = image.network && self.allow_network;
        let (net_parent, net_child, pidfile) = self.net_setup(network, &sid)?;
        let (staged_x, staged_rt) = (layout.staged("x"), layout.staged("rt"));
        let mut host_binds = vec![
            (exchange.clone(), staged_x.clone()),
            (self.runtime.dir.clone(), staged_rt.clone()),
        ];
        // With network, the host's CA bundle too, as build steps get it.
        let ca = match network {
            true => net::session_ca(&session_dir)?,
            false => None,
        };
        if let Some(dir) = &ca {
            host_binds.push((dir.clone(), layout.staged("ca")));
        }
        let plan = MountPlan::new(MountSpec {
            tmpfs: Some((&scratch, limits.disk_bytes)),
            mkdirs: &mkdirs,
            layers: &layers,
            cgroup_procs: &procs,
            rlimits: rlimits.clone(),
            identity: self.child_identity(&userns, &uppers, image.base_layers.is_empty())?,
            binds: host_binds,
            net: net_child,
        })?;
        let seccomp = seccomp::program_files(&self.seccomp)?;
        let keep: Vec<RawFd> = seccomp.iter().map(|f| f.as_raw_fd()).collect();
        let mut binds = vec![
            Bind {
                source: staged_x,
                inside: EXCHANGE_INSIDE.into(),
                read_only: true,
            },
            Bind {
                source: staged_rt,
                inside: runtime::INSIDE.into(),
                read_only: true,
            },
        ];
        for (host, inside) in self.runtime.host_binds() {
            binds.push(Bind {
                source: host,
                inside,
                read_only: true,
            });
        }
        let mut env = bwrap::agent_env(&image.user, &image.home);
        if ca.is_some() {
            binds.push(Bind {
                source: layout.staged("ca"),
                inside: net::CA_INSIDE.into(),
                read_only: true,
            });
            env.extend(net::ca_env());
        }
        let rootless = self.is_rootless();
        let (argv, caps) = bwrap::shell_argv(image.uid, image.gid, rootless);
        let spec = bwrap::Spec {
            root: layout.merged(),
            network,
            binds,
            env,
            caps,
            seccomp: seccomp.iter().map(|f| f.as_raw_fd()).collect(),
            chdir: "/".into(),
            argv,
            user_ns: rootless.then_some((image.uid, image.gid)),
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
            rlimits,
            outer: 0,
            init: None,
            rootless,
            task_ids: (image.uid, image.gid),
            runtime_python: self.runtime.python.clone(),
            seccomp: self.seccomp.clone(),
            pasta_pidfile: pidfile.clone(),
            warm: self.warm.clone(),
            // Attached for the verifier only (`verifier/plan.rs`), never here.
            verifier_envs: image.path.join(VERIFIER_ENVS),
            prestarted: None,
            held: Some(held),
            live: Some(pool::Ticket::new(&self.live)),
        };
        if let Ok(warm) = &self.warm {
            warm.start();
        }
        let info = SessionInfo {
            backend: "local",
            user: image.user.clone(),
            workdir: image.workdir.clone(),
            image: image.hash.clone(),
            limits: match &control.cgroups {
                Some(cg) => cg.gaps(),
                None => Some(limits::RLIMITS_ONLY.to_string()),
            },
        };
        let attach = net_parent.map(|ends| {
            let ns = userns.as_ref().and_then(|u| u.try_clone().ok());
            net::attach_in_background(ends, ns, pidfile.clone().unwrap_or_default())
        });
        let mut result = Session::spawn_with(cmd, keep, &init, opts, info, move |pid| {
            let mut c = control;
            c.outer = pid as i32;
            Box::new(c)
        });
        if let Some(Ok(Err(e))) = attach.map(|t| t.join()) {
            result = Err(e);
        }
        // The children hold what they need; ours close now.
        drop((userns, seccomp));
        if result.is_err() {
            if let Some(p) = &pidfile {
                net::stop(p);
            }
            let _ = std::fs::remove_dir_all(&session_dir);
        }
        result
    }

    /// For a child with network access: the pipes to connect its namespace
    /// and where `pasta`'s pid goes (named after `id`, in a directory that
    /// the sandbox's root, which `pasta` runs as, can reach and write).
    #[allow(clippy::type_complexity)]
    fn net_setup(
        &self,
        network: bool,
        id: &str,
    ) -> Result<
        (
            Option<net::ParentEnds>,
            Option<net::ChildEnds>,
            Option<PathBuf>,
        ),
        SandboxError,
    > {
        if !network {
            return Ok((None, None, None));
        }
        if net::pasta_path().is_none() {
            return Err(SandboxError::ToolMissing {
                tool: "pasta".into(),
                hint: "tasks with network = true get their own network namespace through user-mode networking: install passt (Debian/Ubuntu: `apt-get install passt`), or run them offline with --offline".into(),
            });
        }
        if !net::tun_usable() {
            return Err(SandboxError::Unavailable {
                backend: "local".into(),
                reason:
                    "the task asks for network, which pasta gives a sandbox started without root \
                         only when /dev/net/tun is open to all (here it is not: as root, \
                         `chmod 0666 /dev/net/tun`), or run its sessions offline with --offline"
                        .into(),
            });
        }
        let net_dir = self.layout.staged("pasta");
        std::fs::create_dir_all(&net_dir)
            .map_err(SandboxError::io("create directory", &net_dir))?;
        let (uid, gid) = self.identity.root_ids();
        std::os::unix::fs::chown(&net_dir, Some(uid), Some(gid))
            .map_err(SandboxError::io("chown directory", &net_dir))?;
        let (parent, child) = net::pipes()?;
        Ok((
            Some(parent),
            Some(child),
            Some(net_dir.join(format!("{id}.pid"))),
        ))
    }
}

impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn prepare(&self, task: &Task) -> Result<Image, SandboxError> {
        self.build_image(task, &images::no_progress)
    }

    fn prepare_reporting(
        &self,
        task: &Task,
        progress: images::ProgressFn<'_>,
    ) -> Result<Image, SandboxError> {
        self.build_image(task, progress)
    }

    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError> {
        self.start_pooled(image, opts)
    }

    fn pool_stats(&self) -> Option<pool::PoolStats> {
        self.pool.as_ref().map(|p| p.stats())
    }

    fn limit_sessions(&self, n: usize) {
        if let Some(p) = &self.pool {
            p.set_limit(n);
        }
    }
}

impl Drop for LocalBackend {
    fn drop(&mut self) {
        if let Some(p) = self.pool.take() {
            p.shut();
        }
    }
}
