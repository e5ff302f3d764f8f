//! Reading, writing and changing files in a directory whose contents a
//! task, an agent or another user may have shaped: image and step
//! directories (what build steps left), verifier environments, job
//! directories of other tools, workspaces of other nodes.
//!
//! Endless often runs as host root, so a symbolic link planted in such a
//! tree (`/.endless -> /etc/profile.d`, `ld.so -> /etc/shadow`) would turn
//! a write, `chown` or `chmod` of endless into one on any host file. Every
//! operation here starts from the directory's descriptor and resolves names
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (without `openat2`,
//! a component-by-component `O_NOFOLLOW` walk): no link is followed, not
//! even one that stays inside. Owners and modes are changed on the opened
//! descriptor (`fchown`, `fchmod`) after `fstat` says it is a regular file,
//! and files are replaced with `renameat` from a temporary made with
//! `O_EXCL | O_NOFOLLOW`, so nothing is ever written through a link.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::beneath::{open_dir, open_no_links};
use super::dirfd::EntryKind;

/// An open directory whose contents are not trusted (see the module docs).
#[derive(Debug)]
pub struct UntrustedDir {
    fd: File,
    path: PathBuf,
}

impl UntrustedDir {
    /// Open the directory `path`. The path itself is the caller's (it is
    /// followed as given); only what lies beneath it is distrusted.
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(Self {
            fd: open_dir(path)?,
            path: path.to_path_buf(),
        })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The subdirectory `rel` (no link on the way, not even the last
    /// component).
    pub fn subdir(&self, rel: &Path) -> io::Result<UntrustedDir> {
        Ok(Self {
            fd: open_no_links(&self.fd, rel, libc::O_DIRECTORY)?,
            path: self.path.join(rel),
        })
    }

    /// What `rel` is, without following it; `None` when it does not exist.
    pub fn kind(&self, rel: &Path) -> io::Result<Option<EntryKind>> {
        let (parent, name) = self.parent_of(rel)?;
        let c = cname(name)?;
        // SAFETY: stat is plain data, filled in by fstatat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid directory descriptor, C string and stat buffer.
        let rc = unsafe {
            libc::fstatat(
                parent.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::NotFound => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(EntryKind::of_mode(st.st_mode)))
    }

    /// Open the regular file `rel` for reading (anything else, a link
    /// included, is refused: a FIFO does not block, a device is not read).
    pub fn open_regular(&self, rel: &Path) -> io::Result<File> {
        let f = open_no_links(&self.fd, rel, 0)?;
        let ft = f.metadata()?.file_type();
        if !ft.is_file() {
            let what = if ft.is_dir() {
                "a directory"
            } else if ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device()
            {
                "a device, FIFO or socket"
            } else {
                "not a regular file"
            };
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is {what}", self.path.join(rel).display()),
            ));
        }
        Ok(f)
    }

    /// The bytes of the regular file `rel`, refused when it is longer than
    /// `cap` bytes.
    pub fn read_regular(&self, rel: &Path, cap: u64) -> io::Result<Vec<u8>> {
        let f = self.open_regular(rel)?;
        let mut bytes = Vec::new();
        f.take(cap + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is larger than {cap} bytes",
                    self.path.join(rel).display()
                ),
            ));
        }
        Ok(bytes)
    }

    /// Make the regular file `rel` owned by `uid:gid` with mode `mode`,
    /// through its descriptor.
    pub fn set_owner_and_mode(&self, rel: &Path, uid: u32, gid: u32, mode: u32) -> io::Result<()> {
        let f = self.open_regular(rel)?;
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
    }

    /// The directory `name` (one plain name) in this one, made with `mode`
    /// when missing. Whatever else stands there (a link, a file) is removed
    /// first: the name is endless's own.
    pub fn ensure_dir(&self, name: &str, mode: u32) -> io::Result<UntrustedDir> {
        let rel = plain_name(name)?;
        match self.kind(rel)? {
            Some(EntryKind::Dir) => {}
            other => {
                let c = cname(rel)?;
                if other.is_some() {
                    // SAFETY: a valid directory descriptor and C string.
                    if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                // SAFETY: a valid directory descriptor and C string.
                let rc = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        let dir = self.subdir(rel)?;
        dir.fd
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
        Ok(dir)
    }

    /// Replace the file `name` (one plain name) in this directory with
    /// `bytes` at `mode`, atomically: a temporary made with `O_EXCL |
    /// O_NOFOLLOW` beside it, then `renameat` over whatever was there (a
    /// link there is replaced, never written through).
    pub fn write_atomic(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        plain_name(name)?;
        let tmp = format!(".{name}.tmp-{:016x}", rand::random::<u64>());
        let ctmp = cname(Path::new(&tmp))?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid directory descriptor and C string; the descriptor
        // returned is owned by the File below.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), ctmp.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let mut f = unsafe { File::from_raw_fd(fd) };
        let written = f
            .write_all(bytes)
            .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(mode)))
            .and_then(|()| f.sync_all())
            .and_then(|()| self.rename(Path::new(&tmp), self, name));
        if written.is_err() {
            // SAFETY: a valid directory descriptor and C string.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), ctmp.as_ptr(), 0) };
        }
        written
    }

    /// Rename the entry `rel` of this directory (not followed if a link)
    /// to `to_name` in `to` (one plain name), replacing what is there.
    pub fn rename<S: AsRef<OsStr> + ?Sized>(
        &self,
        rel: &Path,
        to: &UntrustedDir,
        to_name: &S,
    ) -> io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        let (from, dest) = (cname(name)?, cname(plain_name(to_name)?)?);
        // SAFETY: valid directory descriptors and C strings.
        let rc = unsafe {
            libc::renameat(
                parent.fd.as_raw_fd(),
                from.as_ptr(),
                to.fd.as_raw_fd(),
                dest.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The names in this directory, without `.` and `..`, sorted.
    pub fn names(&self) -> io::Result<Vec<std::ffi::OsString>> {
        super::dirfd::list(self.fd.as_fd())
    }

    /// Replace the entry `name` (one plain name) of this directory with a
    /// hard link to the open file `file` (the very inode, reached through
    /// its descriptor: no path is resolved again): a link made under a
    /// fresh temporary name, then `renameat` over `name`.
    pub fn replace_with_link(&self, name: &OsStr, file: &File) -> io::Result<()> {
        let rel = plain_name(name)?;
        let tmp = format!(".link-{:016x}", rand::random::<u64>());
        let (from, ctmp) = (
            CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?,
            cname(Path::new(&tmp))?,
        );
        // SAFETY: valid C strings and directory descriptor.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                self.fd.as_raw_fd(),
                ctmp.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let renamed = self.rename(Path::new(&tmp), self, rel);
        if renamed.is_err() {
            // SAFETY: a valid directory descriptor and C string.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), ctmp.as_ptr(), 0) };
        }
        renamed
    }

    /// Remove the directory `rel` if it is empty (a link or a file there is
    /// left alone; a missing one is fine).
    pub fn remove_empty_dir(&self, rel: &Path) -> io::Result<()> {
        if self.kind(rel)? != Some(EntryKind::Dir) {
            return Ok(());
        }
        let (parent, name) = self.parent_of(rel)?;
        let c = cname(name)?;
        // SAFETY: a valid directory descriptor and C string.
        if unsafe { libc::unlinkat(parent.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The directory holding `rel` (opened, no link on the way) and the
    /// last component's name.
    fn parent_of<'a>(&self, rel: &'a Path) -> io::Result<(UntrustedDir, &'a Path)> {
        let name = rel
            .file_name()
            .map(Path::new)
            .filter(|_| rel.components().all(|c| matches!(c, Component::Normal(_))))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EXDEV))?;
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => self.subdir(p)?,
            _ => self.try_clone()?,
        };
        Ok((parent, name))
    }

    pub(super) fn try_clone(&self) -> io::Result<UntrustedDir> {
        Ok(Self {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }
}

/// `name` as a path when it is one plain file name (no `/`, not `.` or
/// `..`, not empty).
fn plain_name<S: AsRef<OsStr> + ?Sized>(name: &S) -> io::Result<&Path> {
    let p = Path::new(name);
    let mut parts = p.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(_)), None) if !name.as_ref().as_bytes().contains(&b'/') => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} is not one plain file name", name.as_ref()),
        )),
    }
}

fn cname(name: &Path) -> io::Result<CString> {
    CString::new(name.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a file name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    /// `root/` holds `a/f` and the links `up -> ..` (a directory outside),
    /// `in -> a`, `secret -> <outside>/secret.txt`; `<outside>/secret.txt`
    /// is mode 0600.
    fn tree() -> (tempfile::TempDir, UntrustedDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/f"), "inside").unwrap();
        let secret = d.path().join("secret.txt");
        std::fs::write(&secret, "CANARY").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        symlink("..", root.join("up")).unwrap();
        symlink("a", root.join("in")).unwrap();
        symlink(&secret, root.join("secret")).unwrap();
        let dir = UntrustedDir::open(&root).unwrap();
        (d, dir, secret)
    }

    #[test]
    fn no_link_is_followed_even_inside() {
        let (_d, dir, _) = tree();
        assert_eq!(dir.read_regular(Path::new("a/f"), 100).unwrap(), b"inside");
        for rel in [
            "in/f",
            "up/secret.txt",
            "secret",
            "../secret.txt",
            "/etc/passwd",
        ] {
            assert!(dir.read_regular(Path::new(rel), 100).is_err(), "{rel}");
        }
        assert_eq!(
            dir.kind(Path::new("secret")).unwrap(),
            Some(EntryKind::Link)
        );
        assert_eq!(dir.kind(Path::new("a")).unwrap(), Some(EntryKind::Dir));
        assert_eq!(dir.kind(Path::new("nothing")).unwrap(), None);
        assert!(dir.subdir(Path::new("in")).is_err());
    }

    #[test]
    fn reads_are_capped_and_only_of_regular_files() {
        let (d, dir, _) = tree();
        let e = dir.read_regular(Path::new("a/f"), 3).unwrap_err();
        assert!(e.to_string().contains("larger than 3 bytes"), "{e}");
        let fifo = d.path().join("root/fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = dir.read_regular(Path::new("fifo"), 100).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(dir.read_regular(Path::new("a"), 100).is_err());
    }

    #[test]
    fn owners_and_modes_change_only_on_regular_files_beneath() {
        let (d, dir, secret) = tree();
        assert!(dir
            .set_owner_and_mode(Path::new("secret"), 0, 0, 0o111)
            .is_err());
        assert_eq!(
            std::fs::metadata(&secret).unwrap().mode() & 0o777,
            0o600,
            "the link's target is untouched"
        );
        let me = std::fs::metadata(d.path()).unwrap();
        dir.set_owner_and_mode(Path::new("a/f"), me.uid(), me.gid(), 0o640)
            .unwrap();
        let f = std::fs::metadata(d.path().join("root/a/f")).unwrap();
        assert_eq!(f.mode() & 0o777, 0o640);
    }

    #[test]
    fn writes_replace_links_instead_of_following_them() {
        let (d, dir, secret) = tree();
        // A link where a directory of ours belongs is replaced by one.
        let sub = dir.ensure_dir("up", 0o755).unwrap();
        sub.write_atomic("env.sh", b"export A='1'\n", 0o644)
            .unwrap();
        assert!(!d.path().join("env.sh").exists(), "nothing written outside");
        let written = d.path().join("root/up/env.sh");
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "export A='1'\n");
        assert_eq!(std::fs::metadata(&written).unwrap().mode() & 0o777, 0o644);
        // A link where a file of ours belongs is replaced, its target kept.
        dir.write_atomic("secret", b"mine", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "CANARY");
        assert_eq!(
            dir.kind(Path::new("secret")).unwrap(),
            Some(EntryKind::File)
        );
        for bad in ["a/b", "..", "", "."] {
            assert!(dir.write_atomic(bad, b"x", 0o600).is_err(), "{bad:?}");
        }
        // No temporary is left behind.
        let names: Vec<_> = std::fs::read_dir(d.path().join("root/up"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("env.sh")]);
    }

    #[test]
    fn renames_and_removals_stay_beneath() {
        let (d, dir, _) = tree();
        std::fs::create_dir_all(d.path().join("root/a/out/inner")).unwrap();
        let dest = UntrustedDir::open(d.path()).unwrap();
        dir.rename(Path::new("a/out"), &dest, "moved").unwrap();
        assert!(d.path().join("moved/inner").is_dir());
        assert!(dir.rename(Path::new("in/f"), &dest, "x").is_err());
        std::fs::create_dir(d.path().join("root/a/empty")).unwrap();
        dir.remove_empty_dir(Path::new("a/empty")).unwrap();
        assert!(!d.path().join("root/a/empty").exists());
        // Through a link: left alone.
        dir.remove_empty_dir(Path::new("in")).unwrap();
        assert!(d.path().join("root/in").symlink_metadata().is_ok());
        assert!(dir.remove_empty_dir(Path::new("up/moved/inner")).is_err());
        assert!(d.path().join("moved/inner").is_dir());
    }
}
