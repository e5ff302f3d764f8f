//! The tar archives of the sandbox API: paths a client names inside a
//! sandbox, the archives it uploads (checked entry by entry before any byte
//! reaches the sandbox), and the environment directories it sends to build
//! a sandbox from (unpacked on the host, regular files and directories
//! only).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Why a path or an archive was refused.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// A path inside the sandbox that is not a plain absolute path.
    #[error("path {path:?}: {why}")]
    BadPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An archive entry that may not be unpacked.
    #[error("archive entry {entry:?}: {why}")]
    BadEntry {
        /// The entry's name as stored.
        entry: String,
        /// What is wrong with it.
        why: String,
    },
    /// The archive itself cannot be read.
    #[error("the archive is not a readable tar file: {0}")]
    Unreadable(String),
    /// The archive is larger than allowed (limit in bytes, or entries).
    #[error("the archive is too large: {0}")]
    TooLarge(String),
    /// Writing the unpacked environment on the server failed.
    #[error("cannot unpack the environment into {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Most entries one uploaded archive may hold.
pub const MAX_ENTRIES: usize = 100_000;

/// `path` as a plain absolute path inside a sandbox (`/a/b`, no `..`, no
/// empty or `.` components kept), or why not.
pub fn sandbox_path(path: &str) -> Result<String, TarError> {
    let bad = |why| TarError::BadPath {
        path: path.to_string(),
        why,
    };
    if !path.starts_with('/') {
        return Err(bad("must be absolute (start with /)"));
    }
    if path.len() > 4096 {
        return Err(bad("longer than 4096 bytes"));
    }
    if path.bytes().any(|b| b == 0 || b.is_ascii_control()) {
        return Err(bad("holds a control character"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(bad("may not hold `..`")),
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The relative path of an archive entry, checked: no absolute path, no
/// `..`, nothing but plain names (a leading `./` is fine).
fn entry_path(name: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in name.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("`..` may not appear in a path".into()),
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute paths are not allowed".into())
            }
        }
    }
    Ok(out)
}

/// What an upload holds, once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// Entries in the archive.
    pub entries: usize,
    /// Bytes of file content.
    pub bytes: u64,
}

/// Check an archive a client uploads into a sandbox (plain tar): every
/// entry a file, a directory, a symbolic link or a hard link to an earlier
/// entry, at a plain relative path; no entry under a symbolic link of the
/// same archive (the classic way to write through a link the archive
/// itself planted). The archive is unpacked inside the sandbox, so even a
/// link it leaves points into the sandbox only.
pub fn check_upload(archive: &[u8]) -> Result<Checked, TarError> {
    let mut reader = tar::Archive::new(archive);
    let entries = reader
        .entries()
        .map_err(|e| TarError::Unreadable(e.to_string()))?;
    let mut links: BTreeSet<PathBuf> = BTreeSet::new();
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut checked = Checked {
        entries: 0,
        bytes: 0,
    };
    for entry in entries {
        let entry = entry.map_err(|e| TarError::Unreadable(e.to_string()))?;
        checked.entries += 1;
        if checked.entries > MAX_ENTRIES {
            return Err(TarError::TooLarge(format!(
                "more than {MAX_ENTRIES} entries"
            )));
        }
        let raw = entry
            .path()
            .map_err(|e| TarError::Unreadable(e.to_string()))?
            .into_owned();
        let shown = raw.to_string_lossy().into_owned();
        let bad = |why: String| TarError::BadEntry {
            entry: shown.clone(),
            why,
        };
        let path = entry_path(&raw).map_err(bad)?;
        if let Some(link) = path.ancestors().skip(1).find(|a| links.contains(*a)) {
            return Err(bad(format!(
                "lies under {:?}, a symbolic link of the same archive",
                link.display().to_string()
            )));
        }
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                checked.bytes += entry.header().size().unwrap_or(0);
            }
            tar::EntryType::Directory => {}
            tar::EntryType::Symlink => {
                if path.as_os_str().is_empty() {
                    return Err(bad("the archive's root may not be a link".into()));
                }
                links.insert(path.clone());
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| TarError::Unreadable(e.to_string()))?
                    .ok_or_else(|| bad("a hard link without a target".into()))?;
                let target = entry_path(&target).map_err(|why| bad(format!("hard link: {why}")))?;
                if !seen.contains(&target) {
                    return Err(bad(format!(
                        "a hard link to {:?}, which is not an earlier entry of the archive",
                        target.display().to_string()
                    )));
                }
            }
            // pax and GNU long-name headers are read by the tar crate
            // itself; these are extensions it reports as entries.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {}
            tar::EntryType::GNULongName | tar::EntryType::GNULongLink => {}
            other => {
                return Err(bad(format!(
                    "{other:?} entries (devices, FIFOs) are not allowed"
                )))
            }
        }
        seen.insert(path);
    }
    Ok(checked)
}

/// Unpack an environment directory a client sent (plain or gzip-compressed
/// tar) into the empty directory `dir` on the server: regular files and
/// directories only, at checked relative paths, created fresh (never
/// through an existing file or link) and private to the server's user
/// (directories 0700, files 0600 or 0700), at most `max_bytes` of content.
pub fn unpack_environment(archive: &[u8], dir: &Path, max_bytes: u64) -> Result<usize, TarError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TarError::Io { path, source }
    };
    let plain = gunzip(archive, max_bytes)?;
    let mut reader = tar::Archive::new(plain.as_slice());
    let entries = reader
        .entries()
        .map_err(|e| TarError::Unreadable(e.to_string()))?;
    let mut files = 0usize;
    let mut total = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|e| TarError::Unreadable(e.to_string()))?;
        let raw = entry
            .path()
            .map_err(|e| TarError::Unreadable(e.to_string()))?
            .into_owned();
        let shown = raw.to_string_lossy().into_owned();
        let bad = |why: String| TarError::BadEntry {
            entry: shown.clone(),
            why,
        };
        let rel = entry_path(&raw).map_err(bad)?;
        files += 1;
        if files > MAX_ENTRIES {
            return Err(TarError::TooLarge(format!(
                "more than {MAX_ENTRIES} entries"
            )));
        }
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = dir.join(&rel);
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                make_dirs(dir, &rel)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = rel.parent() {
                    make_dirs(dir, parent)?;
                }
                total += entry.header().size().unwrap_or(0);
                if total > max_bytes {
                    return Err(TarError::TooLarge(format!(
                        "more than {max_bytes} bytes of files"
                    )));
                }
                let mut bytes = Vec::new();
                entry
                    .read_to_end(&mut bytes)
                    .map_err(|e| TarError::Unreadable(e.to_string()))?;
                let executable = entry.header().mode().unwrap_or(0o644) & 0o111 != 0;
                write_new(&target, &bytes, executable).map_err(io(&target))?;
            }
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => {}
            other => {
                return Err(bad(format!(
                "{other:?} entries are not allowed in an environment (files and directories only)"
            )))
            }
        }
    }
    Ok(files)
}

/// The archive itself, or its gunzipped content when it starts with the
/// gzip magic (at most `max_bytes` of it).
fn gunzip(archive: &[u8], max_bytes: u64) -> Result<Vec<u8>, TarError> {
    if !archive.starts_with(&[0x1f, 0x8b]) {
        return Ok(archive.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(archive)
        .take(max_bytes.saturating_mul(2).saturating_add(1 << 20))
        .read_to_end(&mut out)
        .map_err(|e| TarError::Unreadable(format!("gzip: {e}")))?;
    Ok(out)
}

/// Create `rel` and its parents under `root`, refusing to pass through
/// anything but a real directory.
fn make_dirs(root: &Path, rel: &Path) -> Result<(), TarError> {
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(TarError::BadEntry {
                    entry: rel.display().to_string(),
                    why: format!("{} is not a directory", at.display()),
                })
            }
            Err(_) => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&at)
                    .map_err(|source| TarError::Io {
                        path: at.clone(),
                        source,
                    })?
            }
        }
    }
    Ok(())
}

/// Write a new file (never an existing one, never through a link),
/// readable by the server's user alone (0600, or 0700 when executable).
fn write_new(path: &Path, bytes: &[u8], executable: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(if executable { 0o700 } else { 0o600 })
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, body: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // set_path refuses `..`; write the raw name as a hostile client would.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, body).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, name: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_entry_type(kind);
        h.set_path(name).unwrap();
        let raw = &mut h.as_old_mut().linkname;
        raw[..target.len()].copy_from_slice(target.as_bytes());
        h.set_cksum();
        b.append(&h, std::io::empty()).unwrap();
    }

    #[test]
    fn sandbox_paths_are_absolute_and_plain() {
        assert_eq!(sandbox_path("/logs//agent/./").unwrap(), "/logs/agent");
        assert_eq!(sandbox_path("/").unwrap(), "/");
        for bad in ["logs", "/a/../b", "/..", "", "/a\nb"] {
            assert!(sandbox_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uploads_with_escaping_paths_or_links_are_refused() {
        let ok = archive(|b| {
            file(b, "./a/b.txt", b"hi");
            link(b, tar::EntryType::Symlink, "a/up", "/etc");
            link(b, tar::EntryType::Link, "a/c.txt", "a/b.txt");
        });
        assert_eq!(check_upload(&ok).unwrap().entries, 3);
        let dotdot = archive(|b| file(b, "../x", b"x"));
        let e = check_upload(&dotdot).unwrap_err().to_string();
        assert!(e.contains("\"../x\"") && e.contains(".."), "{e}");
        let absolute = archive(|b| file(b, "/etc/passwd", b"x"));
        assert!(check_upload(&absolute)
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        let through = archive(|b| {
            link(b, tar::EntryType::Symlink, "l", "/etc");
            file(b, "l/passwd", b"x");
        });
        assert!(check_upload(&through)
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
        let hard = archive(|b| link(b, tar::EntryType::Link, "h", "../../etc/shadow"));
        assert!(check_upload(&hard).is_err());
        let hard_unknown = archive(|b| link(b, tar::EntryType::Link, "h", "etc/shadow"));
        assert!(check_upload(&hard_unknown).is_err());
        assert!(check_upload(b"not a tar archive at all, just some bytes").is_err());
    }

    #[test]
    fn environments_unpack_files_only_and_never_escape() {
        let dir = tempfile::tempdir().unwrap();
        let env = archive(|b| {
            file(b, "Dockerfile", b"FROM x\n");
            file(b, "data/poem.txt", b"words\n");
        });
        assert_eq!(unpack_environment(&env, dir.path(), 1 << 20).unwrap(), 2);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("data/poem.txt")).unwrap(),
            "words\n"
        );
        let out = tempfile::tempdir().unwrap();
        let evil = archive(|b| link(b, tar::EntryType::Symlink, "data", "/tmp"));
        assert!(unpack_environment(&evil, out.path(), 1 << 20).is_err());
        let escape = archive(|b| file(b, "../escaped", b"x"));
        assert!(unpack_environment(&escape, out.path(), 1 << 20).is_err());
        assert!(!out.path().parent().unwrap().join("escaped").exists());
        let big = archive(|b| file(b, "big", &[0u8; 4096]));
        assert!(matches!(
            unpack_environment(&big, tempfile::tempdir().unwrap().path(), 100),
            Err(TarError::TooLarge(_))
        ));
    }

    /// Issue 46: what a client uploads is the server's alone on the host.
    #[test]
    fn unpacked_environments_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let env = archive(|b| {
            file(b, "data/poem.txt", b"words\n");
            let mut h = tar::Header::new_gnu();
            h.set_size(3);
            h.set_mode(0o755);
            h.set_path("bin/run.sh").unwrap();
            h.set_cksum();
            b.append(&h, &b"ls\n"[..]).unwrap();
        });
        unpack_environment(&env, dir.path(), 1 << 20).unwrap();
        let mode = |rel: &str| {
            std::fs::symlink_metadata(dir.path().join(rel))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("data"), 0o700);
        assert_eq!(mode("bin"), 0o700);
        assert_eq!(mode("data/poem.txt"), 0o600);
        assert_eq!(mode("bin/run.sh"), 0o700);
    }
}
