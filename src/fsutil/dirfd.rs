//! Thin wrappers over the `*at` system calls that walk an untrusted tree
//! one name at a time (`crate::task::BundleDir` reads task bundles, job
//! directories and other workspaces with them): every lookup is one name
//! relative to an open directory descriptor, never a path resolved again.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// What an entry is, seen without following it (`fstat` on a descriptor
/// opened with `O_PATH | O_NOFOLLOW`, or `fstatat` with
/// `AT_SYMLINK_NOFOLLOW`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// A device, FIFO or socket.
    Other,
}

impl EntryKind {
    /// The kind an `st_mode` names.
    pub fn of_mode(mode: libc::mode_t) -> Self {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Self::File,
            libc::S_IFDIR => Self::Dir,
            libc::S_IFLNK => Self::Link,
            _ => Self::Other,
        }
    }
}

/// The facts of one `fstat`: kind, identity, size and mode bits.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    /// The entry's kind.
    pub kind: EntryKind,
    /// Device and inode: the same pair means the same file.
    pub id: (u64, u64),
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor the kernel just gave us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Retry `f` while it fails with `EINTR`.
fn retrying(mut f: impl FnMut() -> libc::c_int) -> io::Result<OwnedFd> {
    loop {
        match owned(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Open the directory at `path` (links in it are followed: the caller
/// named it), as a descriptor for lookups only.
pub fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let p = cstr(path.as_os_str())?;
    // SAFETY: a valid NUL-terminated path.
    retrying(|| unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
}

/// The entry `name` of `dir` itself, never following a link there
/// (`O_PATH | O_NOFOLLOW`: nothing is read and no device is opened).
pub fn open_entry(dir: BorrowedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let n = cstr(name)?;
    // SAFETY: a valid descriptor and NUL-terminated name.
    retrying(|| unsafe {
        libc::openat(
            dir.as_raw_fd(),
            n.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })
}

/// Open the entry `name` of `dir` for reading, never following a link
/// there, never blocking on a FIFO nor taking a terminal.
pub fn open_read(dir: BorrowedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let n = cstr(name)?;
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor and NUL-terminated name.
    retrying(|| unsafe { libc::openat(dir.as_raw_fd(), n.as_ptr(), flags) })
}

/// `fstat` on `fd`.
pub fn stat(fd: BorrowedFd) -> io::Result<Stat> {
    // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a buffer of the right type.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Stat {
        kind: EntryKind::of_mode(st.st_mode),
        id: (st.st_dev, st.st_ino),
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
    })
}

/// The target of the symbolic link `link` (a descriptor of the link
/// itself, from [`open_entry`]).
pub fn read_link(link: BorrowedFd) -> io::Result<OsString> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: an empty name makes readlinkat read the link `link` is; buf is writable.
    let n = unsafe {
        libc::readlinkat(
            link.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(OsString::from_vec(buf))
}

/// The names in directory `dir` (a descriptor from [`open_entry`] or
/// [`open_dir_path`]), without `.` and `..`, sorted.
pub fn list(dir: BorrowedFd) -> io::Result<Vec<OsString>> {
    // A readable descriptor of the same directory, handed to fdopendir.
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a valid descriptor and a static name.
    let fd = retrying(|| unsafe { libc::openat(dir.as_raw_fd(), c".".as_ptr(), flags) })?;
    let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
    // SAFETY: raw is an open directory descriptor; on success the stream owns it.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so raw is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    let result = read_entries(stream);
    // SAFETY: the stream came from fdopendir and is closed once.
    unsafe { libc::closedir(stream) };
    let mut names = result?;
    names.sort();
    Ok(names)
}

fn read_entries(stream: *mut libc::DIR) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    loop {
        // SAFETY: errno is thread-local; clearing it tells end from error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: a live stream from fdopendir.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(0) | None => Ok(names),
                Some(_) => Err(e),
            };
        }
        // SAFETY: readdir returned an entry whose d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push(OsStr::from_bytes(bytes).to_os_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn entries_are_opened_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("l")).unwrap();
        let root = open_dir_path(dir.path()).unwrap();
        let kind = |n: &str| stat(open_entry(root.as_fd(), OsStr::new(n)).unwrap().as_fd());
        assert_eq!(kind("f").unwrap().kind, EntryKind::File);
        assert_eq!(kind("d").unwrap().kind, EntryKind::Dir);
        assert_eq!(kind("l").unwrap().kind, EntryKind::Link);
        let link = open_entry(root.as_fd(), OsStr::new("l")).unwrap();
        assert_eq!(read_link(link.as_fd()).unwrap(), "/etc/passwd");
        let err = open_read(root.as_fd(), OsStr::new("l")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        assert_eq!(list(root.as_fd()).unwrap(), ["d", "f", "l"]);
    }
}
