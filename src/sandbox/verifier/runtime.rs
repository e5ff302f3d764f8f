//! The verifier's trusted runtime: the host's own Python and pytest, reached
//! through a tree the agent cannot write.
//!
//! Every session sees, read-only, the host's `/usr` at
//! `/run/endless-runtime/usr` (a bind mount of the host directory, outside
//! the episode's overlay; the agent can neither write nor unmount it) and a
//! private copy of the host's dynamic loader at `/run/endless-runtime/ld.so`.
//! The verifier runs the loader by that path with the runtime's library
//! directories and `--inhibit-cache`, so no file the agent can change (its
//! `/usr/bin/python3`, `/lib64/ld-linux*.so`, `/etc/ld.so.cache`, site
//! packages, `sitecustomize.py`) takes part in starting the interpreter.
//!
//! The loader copy is mode `0111` (execute only): a process that runs a file
//! it may not read is not dumpable, so no process of the agent (even one
//! running as the same user) can ptrace the verifier or open its
//! `/proc/PID/mem`, `root` or `fd`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::sandbox::SandboxError;

/// Where the runtime appears inside every session.
pub const INSIDE: &str = "/run/endless-runtime";

/// Host directories bound under [`INSIDE`] (`usr`, plus `lib*` where the
/// host has not merged them into `/usr`).
pub fn host_dirs() -> Vec<String> {
    ["usr", "lib", "lib64", "lib32"]
        .iter()
        .filter(|d| {
            std::fs::symlink_metadata(Path::new("/").join(d)).is_ok_and(|m| m.file_type().is_dir())
        })
        .map(|d| d.to_string())
        .collect()
}

/// The host's dynamic loader (resolved), for this architecture.
fn host_loader() -> Option<PathBuf> {
    let name = match std::env::consts::ARCH {
        "x86_64" => "/lib64/ld-linux-x86-64.so.2",
        "aarch64" => "/lib/ld-linux-aarch64.so.1",
        _ => return None,
    };
    std::fs::canonicalize(name).ok()
}

/// `path` (absolute, on the host) as seen through the runtime, if it lies in
/// one of the bound directories.
fn inside(path: &Path, dirs: &[String]) -> Option<String> {
    let rel = path.strip_prefix("/").ok()?;
    let top = rel.components().next()?.as_os_str().to_str()?;
    dirs.iter()
        .any(|d| d == top)
        .then(|| format!("{INSIDE}/{}", rel.display()))
}

/// The runtime's host directory: holds the loader copy and the mount points.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// `<cache>/local/runtime`.
    pub dir: PathBuf,
    /// Host directories bound under it.
    pub dirs: Vec<String>,
    /// The argv prefix that starts the trusted Python inside a session.
    pub python: Vec<String>,
}

impl Runtime {
    /// Prepare the runtime under `dir`, owned by `owner` (the host uid and
    /// gid of nobody the verifier runs as: it must not be able to read the
    /// loader). Fails when the host has no Python 3.
    pub fn prepare(dir: &Path, owner: (u32, u32)) -> Result<Runtime, SandboxError> {
        let io = |what: &'static str, p: &Path| SandboxError::io(what, p.to_path_buf());
        let dirs = host_dirs();
        let missing = |what: &str| SandboxError::ToolMissing {
            tool: what.to_string(),
            hint: "install python3 and python3-pytest (the verifier runs the host's)".into(),
        };
        let loader = host_loader().ok_or_else(|| missing("the dynamic loader"))?;
        let python = std::fs::canonicalize("/usr/bin/python3").map_err(|_| missing("python3"))?;
        let python_inside = inside(&python, &dirs).ok_or_else(|| missing("python3 under /usr"))?;
        let mut libs = Vec::new();
        for d in [
            loader.parent().map(Path::to_path_buf),
            Some(PathBuf::from("/usr/lib")),
            Some(PathBuf::from("/usr/local/lib")),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(p) = inside(&d, &dirs) {
                if d.is_dir() && !libs.contains(&p) {
                    libs.push(p);
                }
            }
        }
        std::fs::create_dir_all(dir).map_err(io("create verifier runtime", dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod verifier runtime", dir))?;
        for d in &dirs {
            let p = dir.join(d);
            std::fs::create_dir_all(&p).map_err(io("create runtime mount point", &p))?;
        }
        let ld = dir.join("ld.so");
        // Copied once: every backend start would otherwise rewrite it.
        let current = std::fs::symlink_metadata(&ld).ok().filter(|m| {
            use std::os::unix::fs::MetadataExt;
            m.mode() & 0o7777 == 0o111
                && (m.uid(), m.gid()) == owner
                && std::fs::metadata(&loader)
                    .is_ok_and(|l| l.len() == m.len() && l.mtime() <= m.mtime())
        });
        if current.is_none() {
            Self::install_loader(&loader, dir, &ld, owner)?;
        }
        let mut argv = vec![
            format!("{INSIDE}/ld.so"),
            "--inhibit-cache".to_string(),
            "--library-path".to_string(),
            libs.join(":"),
        ];
        argv.push(python_inside);
        Ok(Runtime {
            dir: dir.to_path_buf(),
            dirs,
            python: argv,
        })
    }

    /// Install an execute-only copy of `loader` at `ld`, owned by `owner`.
    fn install_loader(
        loader: &Path,
        dir: &Path,
        ld: &Path,
        owner: (u32, u32),
    ) -> Result<(), SandboxError> {
        let io = |what: &'static str, p: &Path| SandboxError::io(what, p.to_path_buf());
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let tmp = dir.join(format!(
            ".ld.so-{}-{}",
            std::process::id(),
            hex::encode(rnd)
        ));
        std::fs::copy(loader, &tmp).map_err(io("copy the dynamic loader", &tmp))?;
        std::os::unix::fs::chown(&tmp, Some(owner.0), Some(owner.1))
            .map_err(io("chown the loader copy", &tmp))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o111))
            .map_err(io("chmod the loader copy", &tmp))?;
        std::fs::rename(&tmp, ld).map_err(io("install the loader copy", ld))?;
        Ok(())
    }

    /// The host directories bound (read-only) inside the runtime: (host
    /// path, path inside). The runtime directory itself is bound first.
    pub fn host_binds(&self) -> Vec<(PathBuf, String)> {
        self.dirs
            .iter()
            .map(|d| (Path::new("/").join(d), format!("{INSIDE}/{d}")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_into_bound_dirs_only() {
        let dirs = vec!["usr".to_string()];
        assert_eq!(
            inside(Path::new("/usr/bin/python3.11"), &dirs).as_deref(),
            Some("/run/endless-runtime/usr/bin/python3.11")
        );
        assert_eq!(inside(Path::new("/opt/python3"), &dirs), None);
    }
}
