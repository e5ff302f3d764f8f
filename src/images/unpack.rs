//! Unpacking one image layer (a tar, optionally gzip-compressed) into a
//! directory that becomes an overlay lower layer.
//!
//! Nothing may land outside the layer directory: entries with `..` are
//! refused, an entry is never written through a symlink (every parent must
//! be a real directory inside the layer), hard links must point inside the
//! layer, and each entry's logical size counts against a budget (so a
//! sparse file claiming terabytes is refused; sparse files over
//! [`MAX_SPARSE_BYTES`] are refused outright). Device nodes are skipped with a note.
//! OCI whiteouts become overlayfs whiteouts: `.wh.NAME` a character device
//! 0/0 (which Linux lets any user make since 5.8), `.wh..wh..opq` the
//! opaque attribute on its directory: `trusted.overlay.opaque` for the
//! sandbox's id range (overlays mounted as root), `user.overlay.opaque`
//! when unpacking rootless (overlays mounted in a user namespace with
//! `userxattr`, which reads the `user.` attributes).
//! A whiteout must name an entry of its own directory: `.wh.`, `.wh..` and
//! `.wh...` (which would name the directory itself or its parent, and so
//! empty the layer or the store's temporary directory beside it, where
//! other pulls unpack) are refused.
//! Owners are shifted into the sandbox's id range when one is given.
//!
//! Set-user-id and set-group-id bits are stripped on unpack (files and
//! directories): the unpacked layer stays in the host's cache, where a
//! set-id file would hand its owner's ids (the operator's when rootless,
//! the sandbox root's host id otherwise) to whoever can reach it. Inside
//! the sandbox those programs (`su`, `sudo`, `ping`) therefore run with
//! the caller's ids.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::ImageError;
use crate::fsutil::{without_setid, SETID_BITS};

/// The largest sparse file a layer may hold (its logical size): real
/// images have small ones (`lastlog`); a claim of gigabytes stored in a
/// few bytes is an attack on whatever later reads or copies the file.
pub const MAX_SPARSE_BYTES: u64 = 1 << 30;

/// What an unpack did that the caller may want to report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UnpackReport {
    /// Entries written.
    pub entries: usize,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Things skipped, one line each.
    pub notes: Vec<String>,
}

/// Whose ids an unpacked layer's files get, and how its opaque directories
/// are marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerOwners {
    /// Host id of the sandbox's root: owners are shifted by it (`None`: keep
    /// ours, as single-id rootless unpacking must).
    pub base: Option<u32>,
    /// Mark opaque directories for `userxattr` overlays (`user.overlay.`,
    /// what unprivileged mounts read) instead of `trusted.overlay.`.
    pub user_xattrs: bool,
}

impl LayerOwners {
    /// Our own ids, for unprivileged overlays.
    pub const OURS: LayerOwners = LayerOwners {
        base: None,
        user_xattrs: true,
    };

    /// The suffix of a layer's directory unpacked for these owners.
    pub fn dir_suffix(&self) -> String {
        match (self.base, self.user_xattrs) {
            (None, _) => "self".into(),
            (Some(b), false) => b.to_string(),
            (Some(b), true) => format!("{b}u"),
        }
    }
}

/// How to unpack.
#[derive(Debug, Clone, Copy)]
pub struct UnpackOptions {
    /// Whose ids the files get.
    pub owners: LayerOwners,
    /// The most bytes of content the layer may hold.
    pub max_bytes: u64,
}

/// Unpack the layer `blob` (of `media_type`) into `dest`, which must be an
/// empty directory. `name` names the layer in errors.
pub fn unpack_layer(
    blob: &Path,
    media_type: &str,
    dest: &Path,
    name: &str,
    opts: UnpackOptions,
) -> Result<UnpackReport, ImageError> {
    // trusted: a blob of the private image store, checked by digest
    let file = std::fs::File::open(blob).map_err(ImageError::io("open layer blob", blob))?;
    let reader: Box<dyn Read> = if media_type.ends_with("gzip") || media_type.ends_with("+gzip") {
        Box::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)))
    } else if media_type.ends_with(".tar") || media_type.ends_with("tar") {
        Box::new(std::io::BufReader::new(file))
    } else {
        return Err(ImageError::UnsupportedLayer {
            reference: name.to_string(),
            digest: name.to_string(),
            media_type: media_type.to_string(),
        });
    };
    unpack_tar(reader, dest, name, opts)
}

/// Unpack a tar stream into `dest` (see the module docs).
pub fn unpack_tar(
    reader: impl Read,
    dest: &Path,
    name: &str,
    opts: UnpackOptions,
) -> Result<UnpackReport, ImageError> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    archive.set_preserve_mtime(true);
    // No set-id bits in the host's cache (see the module docs).
    archive.set_mask(SETID_BITS);
    let mut report = UnpackReport::default();
    let hostile = |entry: &str, reason: &str| ImageError::HostileEntry {
        layer: name.to_string(),
        entry: entry.to_string(),
        reason: reason.to_string(),
    };
    let entries = archive
        .entries()
        .map_err(|e| hostile("(archive)", &format!("unreadable archive: {e}")))?;
    let mut opaque_dirs = Vec::new();
    for entry in entries {
        let mut entry =
            entry.map_err(|e| hostile("(archive)", &format!("unreadable entry: {e}")))?;
        let raw = entry
            .path()
            .map_err(|e| hostile("(archive)", &format!("bad path: {e}")))?
            .into_owned();
        let shown = raw.display().to_string();
        let Some(rel) = normalize(&raw).map_err(|reason| hostile(&shown, reason))? else {
            continue;
        };
        let kind = entry.header().entry_type();
        // The logical size: a sparse file's real size, a PAX size record.
        let size = entry.size();
        if kind.is_gnu_sparse() && size > MAX_SPARSE_BYTES {
            return Err(hostile(
                &shown,
                &format!(
                    "a sparse file claiming {size} bytes (more than {MAX_SPARSE_BYTES}) is refused"
                ),
            ));
        }
        if kind.is_file() || kind == tar::EntryType::Continuous || kind.is_gnu_sparse() {
            report.bytes = report.bytes.saturating_add(size);
            if report.bytes > opts.max_bytes {
                return Err(hostile(
                    &shown,
                    &format!("the layer holds more than {} bytes", opts.max_bytes),
                ));
            }
        }
        let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        ensure_real_dirs(dest, &parent, opts).map_err(|reason| hostile(&shown, &reason))?;
        let file_name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if let Some(hidden) = file_name.strip_prefix(".wh.") {
            if hidden == ".wh..opq" {
                opaque_dirs.push(parent.clone());
            } else if matches!(hidden, "" | "." | "..") {
                return Err(hostile(
                    &shown,
                    "a whiteout must name an entry of its directory, not the directory itself or its parent",
                ));
            } else {
                whiteout(&dest.join(&parent).join(hidden), &mut report)?;
            }
            continue;
        }
        if kind.is_character_special() || kind.is_block_special() {
            report.notes.push(format!("{shown}: device node skipped"));
            continue;
        }
        if kind.is_hard_link() {
            let target = entry
                .link_name()
                .ok()
                .flatten()
                .ok_or_else(|| hostile(&shown, "hard link without a target"))?
                .into_owned();
            let target = normalize(&target)
                .map_err(|reason| hostile(&shown, reason))?
                .ok_or_else(|| hostile(&shown, "hard link to the layer's root"))?;
            // trusted: our private layer; parents checked (ensure_real_dirs)
            let meta = std::fs::symlink_metadata(dest.join(&target))
                .map_err(|_| hostile(&shown, "hard link to a file that is not in the layer"))?;
            if !meta.is_file() {
                return Err(hostile(
                    &shown,
                    "hard link to something that is not a regular file",
                ));
            }
        }
        // Replace what an earlier entry left at this path (a symlink is
        // removed, never followed).
        let at = dest.join(&rel);
        // trusted: our private layer; parents checked (ensure_real_dirs)
        if let Ok(m) = std::fs::symlink_metadata(&at) {
            if !(m.is_dir() && kind.is_dir()) {
                let _ = if m.is_dir() {
                    // trusted: our private layer; parents checked (ensure_real_dirs)
                    std::fs::remove_dir_all(&at)
                } else {
                    // trusted: our private layer; parents checked (ensure_real_dirs)
                    std::fs::remove_file(&at)
                };
            }
        }
        let placed = entry.unpack_in(dest).map_err(|e| {
            if e.kind() == std::io::ErrorKind::StorageFull {
                ImageError::Io {
                    what: format!("unpack layer {name}: the disk is full at `{shown}`"),
                    path: dest.to_path_buf(),
                    source: std::io::Error::new(e.kind(), with_causes(&e)),
                }
            } else {
                hostile(&shown, &format!("cannot unpack: {}", with_causes(&e)))
            }
        })?;
        if !placed {
            return Err(hostile(&shown, "it would land outside the layer"));
        }
        if let Some(base) = opts.owners.base {
            let h = entry.header();
            let uid = shift(base, h.uid().unwrap_or(0));
            let gid = shift(base, h.gid().unwrap_or(0));
            // trusted: our private layer; parents checked (ensure_real_dirs)
            std::os::unix::fs::lchown(&at, Some(uid), Some(gid))
                .map_err(ImageError::io("chown unpacked entry", &at))?;
            if kind.is_file() || kind.is_dir() {
                // chown clears set-id bits; put the mode back, without them.
                let mode = without_setid(h.mode().unwrap_or(0o644));
                // trusted: our private layer; parents checked (ensure_real_dirs)
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode))
                    .map_err(ImageError::io("chmod unpacked entry", &at))?;
            }
        }
        report.entries += 1;
    }
    // Read to the end, so that a compressed stream's trailer (its length
    // and checksum) is checked: a truncated layer fails here at the latest.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink())
        .map_err(|e| hostile("(archive)", &format!("unreadable archive end: {e}")))?;
    for dir in opaque_dirs {
        mark_opaque(&dest.join(dir), opts)?;
    }
    Ok(report)
}

/// An error and its causes, `: `-separated (the tar crate's errors keep
/// the cause, such as a full disk, in their source).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The host id of inside id `id` (ids past the mapped range become nobody).
fn shift(base: u32, id: u64) -> u32 {
    let id = u32::try_from(id).unwrap_or(65_534);
    base + if id < 65_536 { id } else { 65_534 }
}

/// A tar path made relative and checked: `None` for the root itself.
fn normalize(path: &Path) -> Result<Option<PathBuf>, &'static str> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => return Err("`..` would leave the layer"),
            Component::Prefix(_) => return Err("not a Unix path"),
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Make sure every component of `rel` under `dest` is a real directory
/// (creating missing ones), so nothing is ever written through a symlink.
fn ensure_real_dirs(dest: &Path, rel: &Path, opts: UnpackOptions) -> Result<(), String> {
    let mut at = dest.to_path_buf();
    for c in rel.components() {
        at.push(c);
        // trusted: our private layer; parents checked (ensure_real_dirs)
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!("its parent {} is a symlink", at.display()))
            }
            Ok(_) => return Err(format!("its parent {} is not a directory", at.display())),
            Err(_) => {
                // trusted: our private layer; parents checked (ensure_real_dirs)
                std::fs::create_dir(&at).map_err(|e| format!("create {}: {e}", at.display()))?;
                if let Some(base) = opts.owners.base {
                    // trusted: our private layer; parents checked (ensure_real_dirs)
                    std::os::unix::fs::lchown(&at, Some(base), Some(base))
                        .map_err(|e| format!("chown {}: {e}", at.display()))?;
                }
            }
        }
    }
    Ok(())
}

/// An overlayfs whiteout at `path` (hides the lower layers' entry).
fn whiteout(path: &Path, report: &mut UnpackReport) -> Result<(), ImageError> {
    // trusted: our private layer; parents checked (ensure_real_dirs)
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let _ = if m.is_dir() {
            // trusted: our private layer; parents checked (ensure_real_dirs)
            std::fs::remove_dir_all(path)
        } else {
            // trusted: our private layer; parents checked (ensure_real_dirs)
            std::fs::remove_file(path)
        };
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| ImageError::io("whiteout", path)(std::io::Error::other("NUL in path")))?;
    // SAFETY: mknod on a path we own. A 0/0 character device needs no
    // privilege since Linux 5.8 (it is the overlayfs whiteout).
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, libc::makedev(0, 0)) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        let what = if e.raw_os_error() == Some(libc::EPERM) {
            "create whiteout (a 0/0 character device; without root this needs Linux 5.8 or later)"
        } else {
            "create whiteout"
        };
        return Err(ImageError::io(what, path)(e));
    }
    report.entries += 1;
    Ok(())
}

/// Mark `dir` opaque (the lower layers' contents are hidden).
fn mark_opaque(dir: &Path, opts: UnpackOptions) -> Result<(), ImageError> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| ImageError::io("opaque", dir)(std::io::Error::other("NUL in path")))?;
    let attr = match opts.owners.user_xattrs {
        false => c"trusted.overlay.opaque",
        true => c"user.overlay.opaque",
    };
    // SAFETY: lsetxattr with valid C strings and a one-byte value.
    let rc = unsafe { libc::lsetxattr(c.as_ptr(), attr.as_ptr(), b"y".as_ptr().cast(), 1, 0) };
    if rc < 0 {
        return Err(ImageError::io("mark directory opaque", dir)(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, body: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, path, body).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, path: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_mode(0o777);
        h.set_entry_type(kind);
        b.append_link(&mut h, path, target).unwrap();
    }

    /// A GNU sparse file of `real` bytes whose only data is its last 512.
    fn sparse(b: &mut tar::Builder<Vec<u8>>, path: &str, real: u64) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_mode(0o644);
        h.set_size(512);
        h.set_path(path).unwrap();
        let gnu = h.as_gnu_mut().unwrap();
        gnu.set_real_size(real);
        gnu.sparse[0].set_offset(real - 512);
        gnu.sparse[0].set_length(512);
        h.set_cksum();
        b.append(&h, &[7u8; 512][..]).unwrap();
    }

    #[test]
    fn small_sparse_files_unpack_and_count_their_real_size() {
        let t = tar_of(|b| sparse(b, "var/log/lastlog", 64 << 10));
        let d = tempfile::tempdir().unwrap();
        let r = unpack_tar(&t[..], d.path(), "l1", opts()).unwrap();
        assert_eq!(r.bytes, 64 << 10);
        let meta = std::fs::metadata(d.path().join("var/log/lastlog")).unwrap();
        assert_eq!(meta.len(), 64 << 10);
        let small_budget = UnpackOptions {
            max_bytes: 32 << 10,
            ..opts()
        };
        let d = tempfile::tempdir().unwrap();
        let e = unpack_tar(&t[..], d.path(), "l1", small_budget).unwrap_err();
        assert!(e.to_string().contains("more than 32768 bytes"), "{e}");
    }

    fn opts() -> UnpackOptions {
        UnpackOptions {
            owners: LayerOwners::OURS,
            max_bytes: 1 << 20,
        }
    }

    #[test]
    fn files_links_and_modes_land_inside() {
        let t = tar_of(|b| {
            file(b, "usr/bin/tool", b"#!/bin/sh\n");
            link(b, tar::EntryType::Symlink, "bin", "usr/bin");
            link(b, tar::EntryType::Link, "usr/bin/tool2", "usr/bin/tool");
            link(b, tar::EntryType::Symlink, "etc/abs", "/etc/passwd");
        });
        let d = tempfile::tempdir().unwrap();
        let r = unpack_tar(&t[..], d.path(), "l1", opts()).unwrap();
        assert_eq!(r.entries, 4);
        assert_eq!(
            std::fs::read(d.path().join("usr/bin/tool2")).unwrap(),
            b"#!/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_link(d.path().join("etc/abs")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    #[test]
    fn hostile_entries_are_refused() {
        let traversal = tar_of(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_size(1);
            h.set_entry_type(tar::EntryType::Regular);
            h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../escape");
            h.set_cksum();
            b.append(&h, &b"x"[..]).unwrap();
        });
        let through_link = tar_of(|b| {
            link(b, tar::EntryType::Symlink, "etc", "/tmp");
            file(b, "etc/owned", b"x");
        });
        let outside_hardlink = tar_of(|b| link(b, tar::EntryType::Link, "pw", "../../etc/passwd"));
        let too_big = tar_of(|b| file(b, "big", &vec![0u8; 2 << 20]));
        let sparse_claim = tar_of(|b| sparse(b, "var/log/huge", 10 << 30));
        for (name, t) in [
            ("traversal", traversal),
            ("through a symlink", through_link),
            ("hard link outside", outside_hardlink),
            ("size budget", too_big),
            ("10 GB sparse claim", sparse_claim),
        ] {
            let d = tempfile::tempdir().unwrap();
            let e = unpack_tar(&t[..], d.path(), "l1", opts());
            assert!(
                matches!(e, Err(ImageError::HostileEntry { .. })),
                "{name}: {e:?}"
            );
        }
        assert!(!Path::new("/tmp/owned").exists());
    }

    #[test]
    fn devices_are_skipped_and_whiteouts_made_without_root() {
        let t = tar_of(|b| {
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_entry_type(tar::EntryType::Char);
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
            b.append_data(&mut h, "dev/null", &[][..]).unwrap();
            file(b, "etc/.wh.gone", b"");
            file(b, "opt/.wh..wh..opq", b"");
        });
        let d = tempfile::tempdir().unwrap();
        let r = unpack_tar(&t[..], d.path(), "l1", opts()).unwrap();
        assert!(!d.path().join("dev/null").exists());
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        // Unpacked for rootless overlays (`userxattr`): a 0/0 device and
        // the `user.` opaque attribute, whoever we are.
        use std::os::unix::fs::FileTypeExt;
        let gone = std::fs::symlink_metadata(d.path().join("etc/gone")).unwrap();
        assert!(gone.file_type().is_char_device());
        assert_eq!(std::os::unix::fs::MetadataExt::rdev(&gone), 0);
        let opt =
            std::ffi::CString::new(d.path().join("opt").as_os_str().as_encoded_bytes()).unwrap();
        let mut v = [0u8; 4];
        // SAFETY: lgetxattr writes at most `v.len()` bytes into `v`.
        let n = unsafe {
            libc::lgetxattr(
                opt.as_ptr(),
                c"user.overlay.opaque".as_ptr(),
                v.as_mut_ptr().cast(),
                v.len(),
            )
        };
        assert_eq!(n, 1, "{}", std::io::Error::last_os_error());
        assert_eq!(v[0], b'y');
    }

    #[test]
    fn whiteouts_of_the_directory_itself_or_its_parent_are_refused() {
        for name in [".wh.", ".wh..", ".wh...", "etc/.wh..."] {
            let d = tempfile::tempdir().unwrap();
            let sibling = d.path().join("other-pull");
            std::fs::create_dir(&sibling).unwrap();
            std::fs::write(sibling.join("blob"), "x").unwrap();
            let layer = d.path().join("layer");
            std::fs::create_dir(&layer).unwrap();
            let t = tar_of(|b| {
                file(b, "etc/keep", b"k");
                file(b, name, b"");
            });
            let e = unpack_tar(&t[..], &layer, "l1", opts()).unwrap_err();
            match &e {
                ImageError::HostileEntry { layer, entry, .. } => {
                    assert_eq!((layer.as_str(), entry.as_str()), ("l1", name));
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(sibling.join("blob").is_file(), "{name}: {e}");
            assert!(layer.join("etc/keep").is_file(), "{name}: {e}");
        }
    }

    #[test]
    fn set_id_bits_are_stripped() {
        let t = tar_of(|b| {
            for (path, mode) in [("bin/su", 0o4755), ("bin/wall", 0o2755), ("tmp/", 0o1777)] {
                let mut h = tar::Header::new_gnu();
                h.set_size(0);
                h.set_mode(mode);
                let kind = if path.ends_with('/') {
                    tar::EntryType::Directory
                } else {
                    tar::EntryType::Regular
                };
                h.set_entry_type(kind);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
        });
        let d = tempfile::tempdir().unwrap();
        unpack_tar(&t[..], d.path(), "l1", opts()).unwrap();
        let mode = |p: &str| {
            std::fs::symlink_metadata(d.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("bin/su"), 0o755);
        assert_eq!(mode("bin/wall"), 0o755);
        assert_eq!(mode("tmp"), 0o1777, "the sticky bit stays");
    }
}
