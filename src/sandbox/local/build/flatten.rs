//! Merging cached step layers into one layer, where an image cannot stack
//! them (see `image.rs`: a build past `MAX_STEP_LAYERS`, and the derived
//! builds of verifier environments); `endless bench images` also uses it
//! to reproduce the copying layout.
//!
//! A merge has one directory per overlay part (the root and, on the host
//! base, each system directory). Each layer is applied onto it in order:
//! regular files are copied with their owner, mode, times and extended
//! attributes (files the step hard-linked together stay linked to each
//! other), symlinks are recreated, whiteouts are linked, and directories
//! are created with the layer's owner, mode and extended attributes. The
//! result is what overlayfs would show for the stack of step layers, as
//! one lower directory.
//!
//! Files are copied, not hard-linked to the cached step: a link would show
//! through overlayfs as a link count of two, and tools act on that (`gzip`
//! refuses to compress a file with other links, `tar` stores hard links,
//! `find -links` sees them), so a task would behave differently built from
//! cache. `copy_file_range` keeps the copy in the kernel.
//!
//! Overlay semantics kept: a whiteout in a layer replaces what the merge
//! holds at its path (and still hides the base below); an opaque directory
//! drops what the merge holds below it; a directory replacing a
//! non-directory becomes opaque (the original stack hid the base's entry
//! behind the non-directory). The kernel's `redirect_dir` and `metacopy`
//! features, off by default, are refused where a layer uses them.
//!
//! Set-user-id and set-group-id bits are not carried into the merge (step
//! layers are stored without them, see `stepcache.rs`; this also holds for
//! layers cached before that).
//!
//! trusted: the paths walked here (in `tests/untrusted_fs.rs`'s sense):
//! a stored step layer is written once,
//! by endless, after its step's sandbox ended, and nothing writes it
//! afterwards; the merge is endless's own new directory. Entries are seen
//! with `symlink_metadata` and links are recreated, never followed.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Overlay attributes that describe a layer's content (kept); the others
/// (`origin`, `impure`, ...) describe its past as an upper directory.
const KEPT_OVERLAY_ATTRS: &[&str] = &["opaque", "whiteout", "whiteouts"];
/// Overlay attributes a merge cannot represent.
const REFUSED_OVERLAY_ATTRS: &[&str] = &["redirect", "metacopy"];

/// Apply `layer` onto `merged` (see the module docs). `opaque_attr` is
/// the name overlayfs reads opaque directories by (`trusted.overlay.opaque`
/// as root, `user.overlay.opaque` with `userxattr`).
pub fn apply_layer(layer: &Path, merged: &Path, opaque_attr: &str) -> io::Result<()> {
    if !layer.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(merged)?;
    copy_dir_meta(layer, merged)?;
    merge_dir(layer, merged, opaque_attr, &mut HashMap::new())
}

/// Copies made so far of this layer's multiply linked files, by (device,
/// inode), so that its own hard links stay links.
type Linked = HashMap<(u64, u64), PathBuf>;

fn merge_dir(src: &Path, dst: &Path, opaque_attr: &str, linked: &mut Linked) -> io::Result<()> {
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let s = entry.path();
        let d = dst.join(entry.file_name());
        let smeta = std::fs::symlink_metadata(&s)?;
        let dmeta = std::fs::symlink_metadata(&d).ok();
        if smeta.is_dir() {
            let opaque = get_xattr(&s, opaque_attr)?.is_some();
            match dmeta {
                Some(m) if m.is_dir() => {
                    if opaque {
                        clear_dir(&d)?;
                    }
                    copy_dir_meta(&s, &d)?;
                }
                Some(_) => {
                    std::fs::remove_file(&d)?;
                    std::fs::create_dir(&d)?;
                    copy_dir_meta(&s, &d)?;
                    set_xattr(&d, opaque_attr, b"y")?;
                }
                None => {
                    std::fs::create_dir(&d)?;
                    copy_dir_meta(&s, &d)?;
                }
            }
            merge_dir(&s, &d, opaque_attr, linked)?;
        } else {
            if let Some(m) = dmeta {
                if m.is_dir() {
                    std::fs::remove_dir_all(&d)?;
                } else {
                    std::fs::remove_file(&d)?;
                }
            }
            place(&s, &smeta, &d, linked)?;
        }
    }
    Ok(())
}

/// Put the non-directory `src` at `dst` (see the module docs).
fn place(src: &Path, meta: &std::fs::Metadata, dst: &Path, linked: &mut Linked) -> io::Result<()> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dst)?;
        std::os::unix::fs::lchown(dst, Some(meta.uid()), Some(meta.gid()))?;
        return set_times(dst, meta);
    }
    if !kind.is_file() {
        // Whiteouts (and devices, which layers never hold): nothing to copy.
        return std::fs::hard_link(src, dst);
    }
    if meta.nlink() > 1 {
        if let Some(first) = linked.get(&(meta.dev(), meta.ino())) {
            return std::fs::hard_link(first, dst);
        }
        linked.insert((meta.dev(), meta.ino()), dst.to_path_buf());
    }
    std::fs::copy(src, dst)?;
    // The owner first: changing it clears set-id bits and file capabilities.
    std::os::unix::fs::lchown(dst, Some(meta.uid()), Some(meta.gid()))?;
    let mode = crate::fsutil::without_setid(meta.mode());
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode))?;
    for name in list_xattrs(src)? {
        if let Some(value) = get_xattr(src, &name)? {
            set_xattr(dst, &name, &value)?;
        }
    }
    set_times(dst, meta)
}

/// Give `dst` (not followed) the access and modification times of `meta`.
fn set_times(dst: &Path, meta: &std::fs::Metadata) -> io::Result<()> {
    let c = cpath(dst)?;
    let times = [
        libc::timespec {
            tv_sec: meta.atime(),
            tv_nsec: meta.atime_nsec(),
        },
        libc::timespec {
            tv_sec: meta.mtime(),
            tv_nsec: meta.mtime_nsec(),
        },
    ];
    // SAFETY: a valid C string and two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Remove everything inside `dir`, keeping `dir`.
fn clear_dir(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if std::fs::symlink_metadata(&p)?.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

/// Give `dst` the owner, mode and content-describing extended attributes
/// of `src` (both directories).
fn copy_dir_meta(src: &Path, dst: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(src)?;
    let have = std::fs::symlink_metadata(dst)?;
    if (have.uid(), have.gid()) != (meta.uid(), meta.gid()) {
        std::os::unix::fs::lchown(dst, Some(meta.uid()), Some(meta.gid()))?;
    }
    let mode = crate::fsutil::without_setid(meta.mode());
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode))?;
    for name in list_xattrs(src)? {
        if let Some(kind) = overlay_attr(&name) {
            if REFUSED_OVERLAY_ATTRS.contains(&kind) {
                return Err(io::Error::other(format!(
                    "{} uses the overlay feature `{kind}`, which step layers cannot be merged with (mount options redirect_dir and metacopy must stay off)",
                    src.display()
                )));
            }
            if !KEPT_OVERLAY_ATTRS.contains(&kind) {
                continue;
            }
        }
        if let Some(value) = get_xattr(src, &name)? {
            set_xattr(dst, &name, &value)?;
        }
    }
    Ok(())
}

/// `opaque` for `trusted.overlay.opaque` / `user.overlay.opaque`.
fn overlay_attr(name: &str) -> Option<&str> {
    name.strip_prefix("trusted.overlay.")
        .or_else(|| name.strip_prefix("user.overlay."))
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::other(format!("{}: NUL in path", p.display())))
}

fn list_xattrs(p: &Path) -> io::Result<Vec<String>> {
    let c = cpath(p)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: llistxattr writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            break;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    }
    Ok(buf
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect())
}

fn get_xattr(p: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let c = cpath(p)?;
    let n = CString::new(name).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: lgetxattr writes at most `buf.len()` bytes into `buf`.
        let len =
            unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if len >= 0 {
            buf.truncate(len as usize);
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            // Absent, not supported here, or (`trusted.*` without root) not readable.
            Some(libc::ENODATA) | Some(libc::ENOTSUP) | Some(libc::EPERM) => return Ok(None),
            _ => return Err(e),
        }
    }
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let c = cpath(p)?;
    let n = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: valid C strings and a buffer of `value.len()` bytes.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("set {name} on {}: {e}", p.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn write(p: &Path, body: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }

    #[test]
    fn layers_stack_as_overlayfs_shows_them() {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2, m) = (d.path().join("l1"), d.path().join("l2"), d.path().join("m"));
        write(&l1.join("etc/a.conf"), "a1");
        write(&l1.join("etc/keep.conf"), "k");
        write(&l1.join("opt/tool/bin"), "old");
        write(&l1.join("data"), "file, then a directory");
        symlink("etc/a.conf", l1.join("link")).unwrap();
        write(&l2.join("etc/a.conf"), "a2");
        write(&l2.join("opt/tool"), "a file now");
        write(&l2.join("data/inside"), "x");
        std::fs::set_permissions(l2.join("etc"), std::fs::Permissions::from_mode(0o700)).unwrap();
        // The attribute names root would use are not settable here
        // unprivileged; `user.` ones are, on filesystems with user xattrs.
        let attr = "user.overlay.opaque";
        apply_layer(&l1, &m, attr).unwrap();
        apply_layer(&l2, &m, attr).unwrap();
        assert_eq!(std::fs::read_to_string(m.join("etc/a.conf")).unwrap(), "a2");
        assert_eq!(
            std::fs::read_to_string(m.join("etc/keep.conf")).unwrap(),
            "k"
        );
        assert_eq!(
            std::fs::read_to_string(m.join("opt/tool")).unwrap(),
            "a file now"
        );
        assert_eq!(
            std::fs::read_link(m.join("link")).unwrap(),
            Path::new("etc/a.conf")
        );
        let mode = std::fs::metadata(m.join("etc")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "directories take the top layer's mode");
        // Files are copies (a link to the cached layer would show a link
        // count of 2, and gzip, tar and find act on that), with the times
        // of the layer's file; files a layer linked together stay linked.
        let meta = |p: &Path| std::fs::symlink_metadata(p).unwrap();
        assert_ne!(
            meta(&m.join("etc/a.conf")).ino(),
            meta(&l2.join("etc/a.conf")).ino()
        );
        assert_eq!(meta(&m.join("etc/keep.conf")).nlink(), 1);
        assert_eq!(
            meta(&m.join("etc/keep.conf")).mtime(),
            meta(&l1.join("etc/keep.conf")).mtime()
        );
        assert!(m.join("data/inside").is_file());
        match get_xattr(&m.join("data"), attr) {
            Ok(Some(v)) => assert_eq!(v, b"y"),
            // tmpfs before 6.6 and some filesystems refuse user xattrs.
            other => eprintln!("no user xattrs here ({other:?})"),
        }
    }

    #[test]
    fn opaque_directories_drop_what_was_below() {
        let d = tempfile::tempdir().unwrap();
        let (l1, l2, m) = (d.path().join("l1"), d.path().join("l2"), d.path().join("m"));
        write(&l1.join("opt/old"), "old");
        write(&l2.join("opt/new"), "new");
        let attr = "user.overlay.opaque";
        if set_xattr(&l2.join("opt"), attr, b"y").is_err() {
            eprintln!("SKIP: no user xattrs on this filesystem");
            return;
        }
        apply_layer(&l1, &m, attr).unwrap();
        apply_layer(&l2, &m, attr).unwrap();
        assert!(!m.join("opt/old").exists() && m.join("opt/new").is_file());
        assert_eq!(
            get_xattr(&m.join("opt"), attr).unwrap().as_deref(),
            Some(&b"y"[..])
        );
        // Features a merge cannot represent are refused, naming the path.
        write(&d.path().join("l3/r/x"), "x");
        set_xattr(
            &d.path().join("l3/r"),
            "user.overlay.redirect",
            b"/elsewhere",
        )
        .unwrap();
        let e = apply_layer(&d.path().join("l3"), &m, attr).unwrap_err();
        assert!(e.to_string().contains("redirect"), "{e}");
    }

    #[test]
    fn a_layers_own_hard_links_stay_links_and_nothing_else_is_linked() {
        let d = tempfile::tempdir().unwrap();
        let (l1, m) = (d.path().join("l1"), d.path().join("m"));
        write(&l1.join("a"), "same");
        std::fs::hard_link(l1.join("a"), l1.join("b")).unwrap();
        write(&l1.join("c"), "alone");
        apply_layer(&l1, &m, "user.overlay.opaque").unwrap();
        let meta = |p: &Path| std::fs::metadata(p).unwrap();
        assert_eq!(meta(&m.join("a")).ino(), meta(&m.join("b")).ino());
        assert_eq!(meta(&m.join("a")).nlink(), 2);
        assert_ne!(meta(&m.join("a")).ino(), meta(&l1.join("a")).ino());
        assert_eq!(meta(&m.join("c")).nlink(), 1);
    }
}
