//! On-disk layout of the local backend's cache, and the base layer.
//!
//! The cache's root (`<cache>/local`), its built images and its step cache
//! are mode 0700: they hold the sandboxes' files (owned by the sandbox's
//! host ids), which no other host user may reach. Sandboxes reach them
//! through overlay and bind mounts made by the operator (as root,
//! bubblewrap's own bind sources live under [`Layout::stage`], outside the
//! cache).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::sandbox::SandboxError;

/// A built image's metadata file, in its directory (its presence marks a
/// finished build).
pub const IMAGE_META: &str = "image.json";

/// The directory of an image holding its verifier environments.
pub const VERIFIER_ENVS: &str = "verifier-envs";

/// Host system directories offered to the sandbox read-only (through an
/// overlay, so writes stay in the episode layer).
pub const SYSTEM_DIRS: &[&str] = &[
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc",
];

/// Empty directories of the base skeleton, with their modes.
const SKELETON_DIRS: &[(&str, u32)] = &[
    ("home", 0o755),
    ("root", 0o700),
    ("tmp", 0o1777),
    ("var", 0o755),
    ("var/tmp", 0o1777),
    ("var/log", 0o755),
    ("run", 0o755),
    ("opt", 0o755),
    ("srv", 0o755),
    ("mnt", 0o755),
    ("proc", 0o555),
    ("dev", 0o755),
    ("sys", 0o555),
];

/// Paths of the local backend's cache.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<cache>/local`.
    pub root: PathBuf,
    /// Host uid and gid of the sandbox's root, owner of the base layer's
    /// directories (`None`: our own ids, rootless).
    pub owner: Option<(u32, u32)>,
    /// Mount points, used in private mount namespaces only. bubblewrap runs
    /// as the sandbox's root and resolves its bind sources by path, so they
    /// must be reachable by an unprivileged id: as root this is
    /// `/run/endless-mnt` (the cache may sit under `/root`, mode 0700); in
    /// an owner namespace (subordinate ids), `$TMPDIR/endless-mnt-<uid>`,
    /// which must be ours.
    pub stage: PathBuf,
    /// Host directories overlaid at `/<name>`.
    pub system_dirs: Vec<String>,
    /// Host system entries that are symlinks (`/bin -> usr/bin`), recreated in the skeleton.
    pub symlinks: Vec<(String, PathBuf)>,
}

impl Layout {
    /// Inspect the host and name the cache paths under `cache_dir`; base
    /// directories are owned by `owner` (host ids of the sandbox's root).
    pub fn new(cache_dir: &Path, owner: Option<(u32, u32)>) -> Layout {
        let mut system_dirs = Vec::new();
        let mut symlinks = Vec::new();
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            // trusted: the host's own top-level entries
            match std::fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => {
                    // trusted: the host's own top-level entries
                    if let Ok(target) = std::fs::read_link(&host) {
                        symlinks.push((name.to_string(), target));
                    }
                }
                Ok(m) if m.is_dir() => system_dirs.push(name.to_string()),
                _ => {}
            }
        }
        let owner_ns = super::userns::owner_namespace();
        let stage = if let (Some(_), Some(ns)) = (owner, owner_ns) {
            std::env::temp_dir().join(format!("endless-mnt-{}", ns.owner.0))
        } else if owner.is_some() {
            ["/run", "/tmp"]
                .iter()
                .map(Path::new)
                .find(|p| p.is_dir())
                .map(|p| p.join("endless-mnt"))
                .unwrap_or_else(|| cache_dir.join("local/mnt"))
        } else {
            cache_dir.join("local/mnt")
        };
        Layout {
            root: cache_dir.join("local"),
            owner,
            stage,
            system_dirs,
            symlinks,
        }
    }

    /// Make the stage in a shared temporary directory, or check that the
    /// one there is a directory of ours (not another user's, not a link).
    fn claim_stage(&self) -> Result<(), SandboxError> {
        use std::os::unix::fs::MetadataExt;
        // trusted: checked below before anything is made beneath it
        match std::fs::create_dir(&self.stage) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(SandboxError::io("create mount point", &self.stage)(e))
            }
            _ => {}
        }
        // trusted: lstat, links not followed
        let meta = std::fs::symlink_metadata(&self.stage)
            .map_err(SandboxError::io("inspect mount point", &self.stage))?;
        // SAFETY: geteuid has no preconditions.
        let ours = meta.is_dir() && meta.uid() == unsafe { libc::geteuid() };
        if !ours {
            return Err(SandboxError::Start(format!(
                "{} is not a directory of yours (another user made it?): remove it",
                self.stage.display()
            )));
        }
        Ok(())
    }

    /// A fingerprint of the base layer, part of every image hash.
    pub fn base_id(&self) -> String {
        let links: Vec<String> = self
            .symlinks
            .iter()
            .map(|(n, t)| format!("{n}->{}", t.display()))
            .collect();
        format!("host:{}|{}", self.system_dirs.join(","), links.join(","))
    }

    /// Finished images.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// The per-step build cache (see `local/build/stepcache.rs`).
    pub fn steps(&self) -> PathBuf {
        self.root.join("steps")
    }

    /// The base skeleton (empty top-level directories and symlinks), one
    /// per owner.
    pub fn skeleton(&self) -> PathBuf {
        match self.owner {
            Some((uid, _)) => self.root.join(format!("skeleton-{uid}")),
            None => self.root.join("skeleton"),
        }
    }

    /// The minimal `/etc` copies, by fingerprint.
    pub fn etc(&self, fingerprint: &str) -> PathBuf {
        self.root.join("etc").join(fingerprint)
    }

    /// The verifier's runtime (see `verifier/runtime.rs`).
    pub fn runtime(&self) -> PathBuf {
        self.root.join("runtime")
    }

    /// Mount points of idmapped host directories (private mount namespaces only).
    pub fn idmapped(&self) -> PathBuf {
        self.stage.join("idmap")
    }

    /// Mount point of a host directory bound for bubblewrap (`x`: the
    /// exchange directory, `rt`: the verifier runtime, `ctx` and `steps`:
    /// a build's context and scripts, `from`: the stage a `COPY --from`
    /// copies from).
    pub fn staged(&self, name: &str) -> PathBuf {
        self.stage.join(name)
    }

    /// Mount point of the merged root (used in private mount namespaces only).
    pub fn merged(&self) -> PathBuf {
        self.stage.join("merged")
    }

    /// Mount point of the episode tmpfs (private mount namespaces only).
    pub fn scratch(&self) -> PathBuf {
        self.stage.join("scratch")
    }

    /// Per-session host directories.
    pub fn sessions(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// Remove session and build directories left by processes that died
    /// (their names start with the owner's pid).
    pub fn remove_stale(&self) {
        let dirs = [
            (self.sessions(), ""),
            (self.images(), ".build-"),
            (self.steps(), ".build-"),
        ];
        for (dir, prefix) in dirs {
            // trusted: the private cache's own directories
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix(prefix) else {
                    continue;
                };
                if let Some(pid) = owner_pid(rest) {
                    if !pid_alive(pid) {
                        remove_tree(&entry.path());
                    }
                }
            }
        }
    }

    /// Create the skeleton and mount points if missing; the cache's root,
    /// its images and its step cache are (made) private, mode 0700.
    pub fn ensure(&self) -> Result<(), SandboxError> {
        for dir in [self.root.clone(), self.images(), self.steps()] {
            crate::fsutil::create_private_dir(&dir)
                .map_err(SandboxError::io("create cache directory", &dir))?;
        }
        for dir in [self.merged(), self.scratch(), self.sessions()] {
            // trusted: the private cache's own directories
            std::fs::create_dir_all(&dir)
                .map_err(SandboxError::io("create cache directory", &dir))?;
        }
        if super::userns::owner_namespace().is_some() {
            self.claim_stage()?;
        }
        let staged = ["x", "rt", "ctx", "steps", "from", "ca"].map(|n| self.staged(n));
        let idmapped = self.system_dirs.iter().map(|d| self.idmapped().join(d));
        for dir in staged.into_iter().chain(idmapped) {
            // trusted: the private cache's own directories
            std::fs::create_dir_all(&dir).map_err(SandboxError::io("create mount point", &dir))?;
        }
        for dir in [&self.stage, &self.idmapped()] {
            // trusted: the private cache's own directories
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(SandboxError::io("chmod mount point", dir))?;
        }
        let skel = self.skeleton();
        if skel.is_dir() {
            return Ok(());
        }
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let tmp = self.root.join(format!(".skeleton-{}", hex::encode(rnd)));
        // trusted: our fresh skeleton in the private cache
        let _ = std::fs::remove_dir_all(&tmp);
        let io = |p: &Path| SandboxError::io("create base skeleton", p.to_path_buf());
        // trusted: our fresh skeleton in the private cache
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        // trusted: our fresh skeleton in the private cache
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).map_err(io(&tmp))?;
        for name in &self.system_dirs {
            let p = tmp.join(name);
            // trusted: our fresh skeleton in the private cache
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        for (rel, mode) in SKELETON_DIRS {
            let p = tmp.join(rel);
            // trusted: our fresh skeleton in the private cache
            std::fs::create_dir_all(&p).map_err(io(&p))?;
            // trusted: our fresh skeleton in the private cache
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).map_err(io(&p))?;
        }
        for (name, target) in &self.symlinks {
            let p = tmp.join(name);
            // trusted: our fresh skeleton in the private cache
            std::os::unix::fs::symlink(target, &p).map_err(io(&p))?;
        }
        if let Some((uid, gid)) = self.owner {
            for entry in walkdir::WalkDir::new(&tmp).into_iter().flatten() {
                // trusted: our fresh skeleton in the private cache
                std::os::unix::fs::lchown(entry.path(), Some(uid), Some(gid))
                    .map_err(io(entry.path()))?;
            }
        }
        // trusted: our fresh skeleton in the private cache
        if std::fs::rename(&tmp, &skel).is_err() {
            // Another process made it first.
            // trusted: our fresh skeleton in the private cache
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Ok(())
    }
}

/// The pid at the start of a `<pid>-...` name.
pub fn owner_pid(name: &str) -> Option<i32> {
    name.split('-').next()?.parse().ok()
}

/// Whether a process with this pid exists.
pub fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove a tree, first making its directories accessible: overlayfs leaves
/// `work/work` with mode 000, which an unprivileged owner cannot enter.
pub fn remove_tree(path: &Path) {
    // trusted: a build or session tree whose processes ended
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
        if entry.file_type().is_dir() {
            // trusted: a build or session tree whose processes ended
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700));
        }
    }
    // Entries walkdir could not enter the first time are reachable now.
    for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
        if entry.file_type().is_dir() {
            // trusted: a build or session tree whose processes ended
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700));
        }
    }
    // trusted: a build or session tree whose processes ended
    let _ = std::fs::remove_dir_all(path);
}
