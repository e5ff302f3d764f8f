//! Opening files named by untrusted data (an image archive's manifest, an
//! OCI layout's index) strictly beneath a directory, and keeping what the
//! host caches private and free of set-id bits.
//!
//! [`open_beneath`] resolves a relative path with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: `..`, absolute paths and
//! symlinks that would lead outside the directory fail with `EXDEV`, and
//! `/proc` magic links with `ELOOP`; symlinks that stay beneath it are
//! followed (older `docker save` archives link shared layers to each
//! other). Where the kernel lacks `openat2` (before Linux 5.6, or a
//! seccomp filter refusing it), a component-by-component `openat` walk
//! with `O_NOFOLLOW` is used instead, which refuses every symlink.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

/// The set-user-id and set-group-id bits of a file mode.
pub const SETID_BITS: u32 = 0o6000;

/// Flags every open here uses: read-only, not inherited by children, no
/// controlling terminal, and no blocking on a FIFO planted in place of a
/// file (the caller checks the type of what it opened).
const READ_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

/// How often an `openat2` that raced with a rename or mount is retried.
const EAGAIN_RETRIES: usize = 8;

/// `mode` without its set-user-id and set-group-id bits (the sticky bit
/// and permissions stay).
pub fn without_setid(mode: u32) -> u32 {
    mode & 0o7777 & !SETID_BITS
}

/// Open the directory `path` (the caller's own path, followed as given),
/// to resolve paths beneath it with [`open_beneath`].
pub fn open_dir(path: &Path) -> io::Result<File> {
    let c = cstring(path)?;
    // SAFETY: a valid C string; the descriptor returned is owned by the File.
    let fd = unsafe { libc::open(c.as_ptr(), READ_FLAGS | libc::O_DIRECTORY) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Open `rel` for reading beneath the directory `dir` (see the module
/// docs). `rel` must be relative and free of `..`: anything else fails
/// with `EXDEV` before the filesystem is asked. What is opened may be of
/// any type; callers check that it is the regular file they expect.
pub fn open_beneath(dir: &File, rel: &Path) -> io::Result<File> {
    open_with(
        dir,
        rel,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
        0,
    )
}

/// Open `rel` beneath `dir` following no symlink at all, not even one
/// that stays inside (`RESOLVE_NO_SYMLINKS`; a link fails with `ELOOP`),
/// with `extra` open flags (`O_DIRECTORY`). For trees that endless writes
/// into or changes owners in: a link there is never what endless made.
pub(super) fn open_no_links(dir: &File, rel: &Path, extra: libc::c_int) -> io::Result<File> {
    let resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    open_with(dir, rel, resolve, extra)
}

/// `openat2` with `resolve`, falling back to the no-symlink walk where the
/// kernel (or a seccomp filter) refuses `openat2`.
fn open_with(dir: &File, rel: &Path, resolve: u64, extra: libc::c_int) -> io::Result<File> {
    lexically_beneath(rel)?;
    match openat2_beneath(dir, rel, resolve, extra) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
            walk_nofollow(dir, rel, extra)
        }
        other => other,
    }
}

/// Whether an error from [`open_beneath`] means the path tried to leave
/// the directory (or, without `openat2`, went through a symlink).
pub fn is_escape(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EXDEV) | Some(libc::ELOOP))
}

/// Create `path` (and missing parents) and make it mode 0700, whatever
/// the umask: only its owner may enter it.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    std::fs::create_dir_all(path)?;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if mode != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Refuse absolute paths and `..` before any resolution.
fn lexically_beneath(rel: &Path) -> io::Result<()> {
    let bad = rel.as_os_str().is_empty()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if bad {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    Ok(())
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

/// `openat2(dir, rel, resolve)`, read-only plus `extra` flags.
fn openat2_beneath(dir: &File, rel: &Path, resolve: u64, extra: libc::c_int) -> io::Result<File> {
    let c = cstring(rel)?;
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (READ_FLAGS | extra) as u64;
    how.resolve = resolve;
    for _ in 0..EAGAIN_RETRIES {
        // SAFETY: a valid directory descriptor, C string and open_how of
        // the size passed; the descriptor returned is owned by the File.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if rc >= 0 {
            let fd = libc::c_int::try_from(rc).map_err(io::Error::other)?;
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EAGAIN) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// Without `openat2`: open each component with `O_NOFOLLOW`, so that no
/// symlink is followed at all (a symlink fails with `ELOOP`).
fn walk_nofollow(dir: &File, rel: &Path, extra: libc::c_int) -> io::Result<File> {
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    };
    let mut owned: Option<File> = None;
    for name in parents {
        let at = owned.as_ref().unwrap_or(dir);
        owned = Some(openat_nofollow(at, name, libc::O_DIRECTORY)?);
    }
    openat_nofollow(owned.as_ref().unwrap_or(dir), last, extra)
}

/// `openat(dir, name, O_NOFOLLOW | extra)`, reporting a symlink as `ELOOP`
/// (with `O_DIRECTORY` the kernel says `ENOTDIR` for one).
fn openat_nofollow(dir: &File, name: &std::ffi::OsStr, extra: libc::c_int) -> io::Result<File> {
    let c = cstring(Path::new(name))?;
    let flags = READ_FLAGS | libc::O_NOFOLLOW | extra;
    // SAFETY: a valid directory descriptor and C string; the descriptor
    // returned is owned by the File.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd >= 0 {
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        return Ok(unsafe { File::from_raw_fd(fd) });
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOTDIR) && is_symlink_at(dir, &c) {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Err(e)
}

fn is_symlink_at(dir: &File, name: &std::ffi::CStr) -> bool {
    // SAFETY: stat is plain data, filled in by fstatat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, C string and stat buffer.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn read(f: io::Result<File>) -> io::Result<String> {
        let mut s = String::new();
        f?.read_to_string(&mut s)?;
        Ok(s)
    }

    /// `root/` holds `a/b.txt`, `in -> a` and `up -> ../secret`, `abs ->
    /// <outside>`; `secret/` beside it holds `s.txt`.
    fn tree() -> (tempfile::TempDir, File) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/b.txt"), "inside").unwrap();
        std::fs::create_dir_all(d.path().join("secret")).unwrap();
        std::fs::write(d.path().join("secret/s.txt"), "CANARY").unwrap();
        symlink("a", root.join("in")).unwrap();
        symlink("../secret", root.join("up")).unwrap();
        symlink(d.path().join("secret"), root.join("abs")).unwrap();
        symlink("a/../../secret/s.txt", root.join("dotdot.txt")).unwrap();
        let dir = open_dir(&root).unwrap();
        (d, dir)
    }

    #[test]
    fn paths_resolve_only_beneath_the_directory() {
        let (_d, dir) = tree();
        assert_eq!(
            read(open_beneath(&dir, Path::new("a/b.txt"))).unwrap(),
            "inside"
        );
        assert_eq!(
            read(open_beneath(&dir, Path::new("./in/b.txt"))).unwrap(),
            "inside"
        );
        for escape in [
            "up/s.txt",
            "abs/s.txt",
            "dotdot.txt",
            "../secret/s.txt",
            "/etc/passwd",
            "",
        ] {
            let e = open_beneath(&dir, Path::new(escape)).unwrap_err();
            assert!(is_escape(&e), "{escape}: {e}");
        }
        let e = open_beneath(&dir, Path::new("missing")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn the_fallback_walk_follows_no_symlink() {
        let (_d, dir) = tree();
        assert_eq!(
            read(walk_nofollow(&dir, Path::new("a/b.txt"), 0)).unwrap(),
            "inside"
        );
        for link in ["in/b.txt", "up/s.txt", "abs/s.txt", "dotdot.txt"] {
            let e = walk_nofollow(&dir, Path::new(link), 0).unwrap_err();
            assert!(is_escape(&e), "{link}: {e}");
        }
    }

    #[test]
    fn private_dirs_are_0700_and_setid_bits_go() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x/y");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert_eq!(without_setid(0o104755), 0o755);
        assert_eq!(without_setid(0o6711), 0o711);
        assert_eq!(without_setid(0o1777), 0o1777);
    }
}
