//! Storing a file once when two untrusted trees hold it: the sealed verifier
//! environments of different task images are mostly the same files (one
//! interpreter, one set of wheels), gigabytes each for `torch`.
//!
//! A file of `tree` is replaced by a hard link to the file at the same path
//! in `from` only when both are regular files (no link is followed, see
//! [`UntrustedDir`]), of the same size, mode and owner, without extended
//! attributes (a file capability or label must not travel), byte for byte
//! equal, and, where the caller asks (Python sources: a cached bytecode
//! file records its source's modification time), with the same
//! modification time. Anything else is left as it is: sharing is a saving,
//! never a reason to fail. The walk keeps two directory descriptors open at
//! a time, whatever the trees' depth.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::dirfd::EntryKind;
use super::UntrustedDir;

/// What [`link_identical`] shared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shared {
    /// Files of the tree now stored once with their twin.
    pub files: u64,
    /// Bytes on disk those files took before.
    pub bytes: u64,
}

/// Link each file of `tree` to its identical twin in `from` (see the module
/// docs); `same_mtime(name)` says whether a file named `name` must also
/// have its twin's modification time. Fails only when `tree` itself cannot
/// be read.
pub fn link_identical(
    tree: &UntrustedDir,
    from: &UntrustedDir,
    same_mtime: &dyn Fn(&OsStr) -> bool,
) -> io::Result<Shared> {
    let mut shared = Shared::default();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let (here, there) = if rel.as_os_str().is_empty() {
            (tree.try_clone()?, from.try_clone()?)
        } else {
            match (tree.subdir(&rel), from.subdir(&rel)) {
                (Ok(a), Ok(b)) => (a, b),
                _ => continue,
            }
        };
        for name in here.names()? {
            let path = Path::new(&name);
            match here.kind(path) {
                Ok(Some(EntryKind::Dir)) => pending.push(rel.join(&name)),
                Ok(Some(EntryKind::File)) => {
                    if let Ok(Some(bytes)) = link_if_twin(&here, &there, &name, same_mtime) {
                        shared.files += 1;
                        shared.bytes += bytes;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(shared)
}

/// Replace `here/name` with a link to `there/name` when they are twins; the
/// bytes saved, `None` when they are not.
fn link_if_twin(
    here: &UntrustedDir,
    there: &UntrustedDir,
    name: &OsStr,
    same_mtime: &dyn Fn(&OsStr) -> bool,
) -> io::Result<Option<u64>> {
    let path = Path::new(name);
    let (mine, twin) = (here.open_regular(path)?, there.open_regular(path)?);
    let (a, b) = (mine.metadata()?, twin.metadata()?);
    let alike = (a.dev(), a.len(), a.mode(), a.uid(), a.gid())
        == (b.dev(), b.len(), b.mode(), b.uid(), b.gid());
    if !alike
        || a.ino() == b.ino()
        || a.len() == 0
        || (same_mtime(name) && a.mtime() != b.mtime())
        || has_xattrs(&mine)
        || has_xattrs(&twin)
        || !same_bytes(&mine, &twin)?
    {
        return Ok(None);
    }
    here.replace_with_link(name, &twin)?;
    Ok(Some(a.blocks() * 512))
}

/// Whether `file` has any extended attribute (or they cannot be listed).
fn has_xattrs(file: &File) -> bool {
    // SAFETY: a valid descriptor; a null buffer of size 0 asks for the size.
    unsafe { libc::flistxattr(file.as_raw_fd(), std::ptr::null_mut(), 0) != 0 }
}

/// Whether two open files (of one size) hold the same bytes.
fn same_bytes(a: &File, b: &File) -> io::Result<bool> {
    const CHUNK: usize = 1 << 20;
    let (mut a, mut b) = (a, b);
    let (mut x, mut y) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Fill `buf` as far as the file goes; the bytes read.
fn read_full(mut f: impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::time::{Duration, SystemTime};

    fn write(path: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn ino(path: &Path) -> u64 {
        std::fs::symlink_metadata(path).unwrap().ino()
    }

    fn py(name: &OsStr) -> bool {
        name.as_encoded_bytes().ends_with(b".py")
    }

    #[test]
    fn only_true_twins_are_linked() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        for root in [&a, &b] {
            write(&root.join("lib/deep/er/same.so"), &[7u8; 3 << 20]);
            write(&root.join("empty"), b"");
        }
        write(&a.join("differs"), b"aaaa");
        write(&b.join("differs"), b"aaab");
        write(&a.join("mode"), b"mode");
        write(&b.join("mode"), b"mode");
        std::fs::set_permissions(a.join("mode"), std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&a.join("only-here"), b"x");
        for root in [&a, &b] {
            write(&root.join("m.py"), b"print(1)\n");
            write(&root.join("m.txt"), b"print(1)\n");
            let f = File::options()
                .append(true)
                .open(root.join("m.py"))
                .unwrap();
            f.set_modified(
                SystemTime::now() - Duration::from_secs(if root == &a { 100 } else { 200 }),
            )
            .unwrap();
        }
        let tree = UntrustedDir::open(&b).unwrap();
        let from = UntrustedDir::open(&a).unwrap();
        let shared = link_identical(&tree, &from, &py).unwrap();
        assert_eq!(shared.files, 2, "{shared:?}");
        assert!(shared.bytes >= 3 << 20, "{shared:?}");
        assert_eq!(
            ino(&a.join("lib/deep/er/same.so")),
            ino(&b.join("lib/deep/er/same.so"))
        );
        assert_eq!(ino(&a.join("m.txt")), ino(&b.join("m.txt")));
        for kept in ["empty", "differs", "mode", "m.py"] {
            assert_ne!(ino(&a.join(kept)), ino(&b.join(kept)), "{kept}");
        }
        assert_eq!(std::fs::read(b.join("differs")).unwrap(), b"aaab");
        // Again: nothing left to share, no temporary left behind.
        assert_eq!(
            link_identical(&tree, &from, &py).unwrap(),
            Shared::default()
        );
        assert!(!std::fs::read_dir(&b).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".link-")));
    }

    #[test]
    fn no_link_is_followed_on_either_side() {
        let d = tempfile::tempdir().unwrap();
        let (a, b, host) = (
            d.path().join("a"),
            d.path().join("b"),
            d.path().join("host"),
        );
        write(&host.join("secret"), b"CANARY");
        std::fs::set_permissions(host.join("secret"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::create_dir_all(&a).unwrap();
        // `from` offers a link to a host file as the twin of a copy of it.
        symlink(host.join("secret"), a.join("secret")).unwrap();
        write(&b.join("secret"), b"CANARY");
        // `tree` has a link where `from` has the file, and a directory link.
        write(&a.join("f"), b"same");
        symlink(host.join("secret"), b.join("f")).unwrap();
        write(&a.join("dir/g"), b"same");
        symlink(&host, b.join("dir")).unwrap();
        write(&host.join("g"), b"same");
        let shared = link_identical(
            &UntrustedDir::open(&b).unwrap(),
            &UntrustedDir::open(&a).unwrap(),
            &py,
        )
        .unwrap();
        assert_eq!(shared, Shared::default());
        assert_ne!(ino(&b.join("secret")), ino(&host.join("secret")));
        assert_eq!(
            std::fs::read_link(b.join("f")).unwrap(),
            host.join("secret")
        );
        assert_ne!(ino(&host.join("g")), ino(&a.join("dir/g")));
        assert_eq!(std::fs::metadata(host.join("secret")).unwrap().nlink(), 1);
    }
}
