//! What a sandbox may not see of the host's system directories.
//!
//! As root, sandboxes see the host's `/usr`, `/lib`, ... through idmapped
//! mounts in which host root is the sandbox's root (so `apt-get` and `dpkg`
//! work as root inside). Without more, a root agent or build step would then
//! read files that only host root may read (a 0600 key under
//! `/usr/local/share`) and could copy them into an image. The mask is an
//! overlay lower layer above each host directory holding a whiteout for
//! every entry no unprivileged host user could read: files without the
//! "others may read" bit and directories without "others may search"; the
//! directories leading to them carry the host's modes and owners (mapped as
//! the idmapped view maps them), so nothing else changes. Overlayfs then
//! shows nothing of the hidden entries, to sessions and builds alike.
//!
//! The host is scanned once per process (in the background from the
//! backend's creation; about a second for 130,000 entries), and the mask is
//! kept under the cache by a fingerprint of what it hides. Files hidden or
//! made private on the host while a process runs are masked from its next
//! start on. Rootless sandboxes need no mask: their root is the operator's
//! own uid, which the kernel checks as it is.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::userns::IdMap;
use crate::sandbox::SandboxError;

/// A directory of the mask: its path relative to the host root, with the
/// host's mode, uid and gid.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MaskDir {
    mode: u32,
    uid: u32,
    gid: u32,
}

/// What the scan found: entries to hide and the directories leading to
/// them, by path relative to `/`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hidden {
    entries: Vec<PathBuf>,
    dirs: BTreeMap<PathBuf, MaskDir>,
}

impl Hidden {
    /// How many entries are hidden.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is hidden.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A fingerprint of the mask these entries make.
    fn fingerprint(&self, map: &IdMap) -> String {
        let mut h = Sha256::new();
        h.update(format!("map:{}:{}\n", map.base, map.count));
        for e in &self.entries {
            h.update(b"hide:");
            h.update(e.as_os_str().as_bytes());
            h.update(b"\n");
        }
        for (d, m) in &self.dirs {
            h.update(format!(
                "dir:{}:{:o}:{}:{}\n",
                d.display(),
                m.mode,
                m.uid,
                m.gid
            ));
        }
        hex::encode(&h.finalize()[..12])
    }
}

/// Whether no unprivileged host user could read `meta`'s entry: a
/// directory others may not search, or anything but a directory or
/// symlink others may not read.
fn private(meta: &std::fs::Metadata) -> bool {
    let mode = meta.permissions().mode();
    let ft = meta.file_type();
    if ft.is_symlink() {
        false
    } else if ft.is_dir() {
        mode & 0o001 == 0
    } else {
        mode & 0o004 == 0
    }
}

/// Scan `dirs` (names under `host_root`, e.g. `usr`) for private entries,
/// staying on each directory's file system (overlayfs shows no submounts)
/// and not descending into what it hides. Entries that vanish or cannot be
/// read while scanning are skipped.
pub fn scan(host_root: &Path, dirs: &[String]) -> Hidden {
    let mut hidden = Hidden::default();
    for name in dirs {
        let top = host_root.join(name);
        let mut walk = walkdir::WalkDir::new(&top)
            .follow_links(false)
            .same_file_system(true)
            .into_iter();
        while let Some(entry) = walk.next() {
            let Ok(entry) = entry else {
                continue;
            };
            if entry.depth() == 0 {
                continue;
            }
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if !private(&meta) {
                continue;
            }
            if meta.is_dir() {
                // Hidden whole: nothing below it needs a whiteout.
                walk.skip_current_dir();
            }
            let Ok(rel) = entry.path().strip_prefix(host_root) else {
                continue;
            };
            hidden.entries.push(rel.to_path_buf());
            let mut parent = rel.parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                if !hidden.dirs.contains_key(p) {
                    if let Ok(m) = std::fs::symlink_metadata(host_root.join(p)) {
                        hidden.dirs.insert(
                            p.to_path_buf(),
                            MaskDir {
                                mode: m.permissions().mode() & 0o7777,
                                uid: m.uid(),
                                gid: m.gid(),
                            },
                        );
                    }
                }
                parent = p.parent();
            }
        }
    }
    hidden.entries.sort();
    hidden
}

/// The mask for `hidden` under `masks_dir` (made once per fingerprint, by
/// whichever process comes first), as the directory whose `<name>`
/// subdirectories are the layers; `None` when nothing is hidden.
pub fn materialize(
    masks_dir: &Path,
    hidden: &Hidden,
    map: &IdMap,
) -> Result<Option<PathBuf>, SandboxError> {
    if hidden.is_empty() {
        return Ok(None);
    }
    let dir = masks_dir.join(hidden.fingerprint(map));
    if dir.is_dir() {
        return Ok(Some(dir));
    }
    crate::fsutil::create_private_dir(masks_dir)
        .map_err(SandboxError::io("create mask directory", masks_dir))?;
    let mut rnd = [0u8; 6];
    rand::Rng::fill(&mut rand::rng(), &mut rnd);
    let tmp = masks_dir.join(format!(".tmp-{}-{}", std::process::id(), hex::encode(rnd)));
    let io = |what: &'static str, p: &Path| SandboxError::io(what, p.to_path_buf());
    std::fs::create_dir(&tmp).map_err(io("create mask directory", &tmp))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod mask directory", &tmp))?;
    let built = (|| {
        // Parents first (a BTreeMap of paths orders them so), then whiteouts.
        for rel in hidden.dirs.keys() {
            let p = tmp.join(rel);
            std::fs::create_dir(&p).map_err(io("create mask directory", &p))?;
        }
        for rel in &hidden.entries {
            let p = tmp.join(rel);
            let c = CString::new(p.as_os_str().as_bytes())
                .map_err(|_| SandboxError::Start(format!("NUL byte in {}", p.display())))?;
            // SAFETY: mknod with a valid path; (0, 0) is overlayfs's whiteout.
            if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, libc::makedev(0, 0)) } < 0 {
                return Err(io("create whiteout", &p)(std::io::Error::last_os_error()));
            }
        }
        // Modes and owners last (a 0700 directory is still ours to fill).
        for (rel, m) in hidden.dirs.iter().rev() {
            let p = tmp.join(rel);
            std::os::unix::fs::lchown(&p, Some(map.host(m.uid)), Some(map.host(m.gid)))
                .map_err(io("chown mask directory", &p))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m.mode))
                .map_err(io("chmod mask directory", &p))?;
        }
        Ok(())
    })();
    if let Err(e) = built {
        super::layout::remove_tree(&tmp);
        return Err(e);
    }
    if std::fs::rename(&tmp, &dir).is_err() {
        super::layout::remove_tree(&tmp); // another process made it first
    }
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> IdMap {
        IdMap {
            base: 100_000,
            count: 65_536,
            source: "test",
        }
    }

    #[test]
    fn private_files_and_unsearchable_directories_are_found_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let usr = root.path().join("usr");
        std::fs::create_dir_all(usr.join("share/open")).unwrap();
        std::fs::create_dir_all(usr.join("share/closed/inner")).unwrap();
        std::fs::write(usr.join("share/open/readme"), "hi").unwrap();
        std::fs::write(usr.join("share/key"), "secret").unwrap();
        std::fs::write(usr.join("share/closed/inner/x"), "x").unwrap();
        std::os::unix::fs::symlink("/nowhere", usr.join("share/link")).unwrap();
        let mode = |p: &str, m: u32| {
            std::fs::set_permissions(usr.join(p), std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode("share/key", 0o600);
        mode("share/closed", 0o750);
        let hidden = scan(root.path(), &["usr".to_string()]);
        assert_eq!(
            hidden.entries,
            [
                PathBuf::from("usr/share/closed"),
                PathBuf::from("usr/share/key")
            ]
        );
        assert!(hidden.dirs.contains_key(Path::new("usr/share")));
        assert!(hidden.dirs.contains_key(Path::new("usr")));
        assert!(!hidden.dirs.contains_key(Path::new("usr/share/open")));
    }

    #[test]
    fn nothing_hidden_makes_no_mask_and_the_fingerprint_follows_the_entries() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/share")).unwrap();
        let masks = root.path().join("masks");
        let hidden = scan(root.path(), &["usr".to_string()]);
        assert_eq!(materialize(&masks, &hidden, &map()).unwrap(), None);
        let a = Hidden {
            entries: vec!["usr/a".into()],
            dirs: BTreeMap::new(),
        };
        let b = Hidden {
            entries: vec!["usr/b".into()],
            dirs: BTreeMap::new(),
        };
        assert_ne!(a.fingerprint(&map()), b.fingerprint(&map()));
    }
}
