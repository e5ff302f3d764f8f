//! On-disk layout of the local backend's cache, and the base layer.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::sandbox::SandboxError;

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
    /// Host directories overlaid at `/<name>`.
    pub system_dirs: Vec<String>,
    /// Host system entries that are symlinks (`/bin -> usr/bin`), recreated in the skeleton.
    pub symlinks: Vec<(String, PathBuf)>,
}

impl Layout {
    /// Inspect the host and name the cache paths under `cache_dir`.
    pub fn new(cache_dir: &Path) -> Layout {
        let mut system_dirs = Vec::new();
        let mut symlinks = Vec::new();
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            match std::fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(&host) {
                        symlinks.push((name.to_string(), target));
                    }
                }
                Ok(m) if m.is_dir() => system_dirs.push(name.to_string()),
                _ => {}
            }
        }
        Layout {
            root: cache_dir.join("local"),
            system_dirs,
            symlinks,
        }
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

    /// The base skeleton (empty top-level directories and symlinks).
    pub fn skeleton(&self) -> PathBuf {
        self.root.join("skeleton")
    }

    /// Mount point of the merged root (used in private mount namespaces only).
    pub fn merged(&self) -> PathBuf {
        self.root.join("mnt/merged")
    }

    /// Mount point of the episode tmpfs (private mount namespaces only).
    pub fn scratch(&self) -> PathBuf {
        self.root.join("mnt/scratch")
    }

    /// Per-session host directories.
    pub fn sessions(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// Remove session and build directories left by processes that died
    /// (their names start with the owner's pid).
    pub fn remove_stale(&self) {
        let dirs = [(self.sessions(), ""), (self.images(), ".build-")];
        for (dir, prefix) in dirs {
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

    /// Create the skeleton and mount points if missing.
    pub fn ensure(&self) -> Result<(), SandboxError> {
        for dir in [
            self.images(),
            self.merged(),
            self.scratch(),
            self.sessions(),
        ] {
            std::fs::create_dir_all(&dir)
                .map_err(SandboxError::io("create cache directory", &dir))?;
        }
        let skel = self.skeleton();
        if skel.is_dir() {
            return Ok(());
        }
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let tmp = self.root.join(format!(".skeleton-{}", hex::encode(rnd)));
        let _ = std::fs::remove_dir_all(&tmp);
        let io = |p: &Path| SandboxError::io("create base skeleton", p.to_path_buf());
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).map_err(io(&tmp))?;
        for name in &self.system_dirs {
            let p = tmp.join(name);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        for (rel, mode) in SKELETON_DIRS {
            let p = tmp.join(rel);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).map_err(io(&p))?;
        }
        for (name, target) in &self.symlinks {
            let p = tmp.join(name);
            std::os::unix::fs::symlink(target, &p).map_err(io(&p))?;
        }
        if std::fs::rename(&tmp, &skel).is_err() {
            // Another process made it first.
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
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
        if entry.file_type().is_dir() {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700));
        }
    }
    // Entries walkdir could not enter the first time are reachable now.
    for entry in walkdir::WalkDir::new(path).into_iter().flatten() {
        if entry.file_type().is_dir() {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700));
        }
    }
    let _ = std::fs::remove_dir_all(path);
}
