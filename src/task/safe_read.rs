//! Reading a task directory without ever leaving it, and without ever
//! resolving a path twice.
//!
//! A [`BundleDir`] is opened once; every file below it is reached from that
//! descriptor one name at a time (`openat` with `O_NOFOLLOW`), its type and
//! size come from `fstat` on what was opened, and its bytes from the same
//! descriptor. A symbolic link is read (`readlinkat`) and followed by the
//! same walk, only while it stays inside the task directory. So a user who
//! can write the bundle while it is read may swap any file or directory for
//! a link at any moment: the swap is refused or not seen, and nothing
//! outside the task directory is ever opened (`tasks import`, issue 30).
//!
//! The system calls come from [`crate::fsutil::dirfd`], the primitives every
//! walk of an untrusted tree uses; this file adds the task's policy (links
//! followed only inside, limits, errors that name the task's files).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use super::safe_read_error::SafeReadError;
use super::{BundleError, FileEntry, FileTree};
use crate::fsutil::dirfd::{self, EntryKind, Stat};

/// Bounds on what one task may contain.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// Largest single file, in bytes.
    pub max_file_bytes: u64,
    /// Largest total, in bytes.
    pub max_total_bytes: u64,
    /// Most files.
    pub max_files: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 16 * 1024 * 1024,
            max_total_bytes: 128 * 1024 * 1024,
            max_files: 10_000,
        }
    }
}

/// Symbolic links followed while resolving one path, at most (as Linux).
const MAX_LINK_HOPS: u32 = 40;

/// Directories nested below a tree's top, at most.
pub const MAX_DEPTH: usize = 64;

/// Times an entry that changes between being looked at and being opened
/// is looked at again before the read gives up.
const MAX_RETRIES: u32 = 16;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SafeReadError + '_ {
    move |source| SafeReadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a path resolved to.
enum Found {
    /// A regular file, open for reading, with its `fstat`.
    File(File, Stat),
    /// A directory (a lookup descriptor).
    Dir(OwnedFd),
    /// A device, FIFO or socket: never read.
    Other,
}

/// A task directory, opened once: everything below it is reached from its
/// descriptor (see the module docs).
#[derive(Debug)]
pub struct BundleDir {
    fd: OwnedFd,
    /// The path it was opened at, for messages only.
    path: PathBuf,
    /// Its canonical path when opened, for absolute links that point inside.
    real: PathBuf,
}

impl BundleDir {
    /// Open the task directory at `path`. Links in `path` itself are
    /// followed (the caller named it); nothing below it is resolved by path.
    pub fn open(path: &Path) -> Result<Self, SafeReadError> {
        let fd = dirfd::open_dir_path(path).map_err(io_err(path))?;
        // trusted: the directory the caller named, for messages and absolute links
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Self {
            fd,
            path: path.to_path_buf(),
            real,
        })
    }

    /// The directory `rel` below this one, each of its components a real
    /// directory (a link anywhere in `rel` is refused, not followed).
    pub fn open_subdir(&self, rel: &Path) -> Result<Self, SafeReadError> {
        let mut fd: Option<OwnedFd> = None;
        let mut path = self.path.clone();
        let mut real = self.real.clone();
        for c in rel.components() {
            let Component::Normal(name) = c else {
                continue;
            };
            path.push(name);
            real.push(name);
            let parent = fd.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
            let next = dirfd::open_entry(parent, name).map_err(io_err(&path))?;
            let st = dirfd::stat(next.as_fd()).map_err(io_err(&path))?;
            if st.kind != EntryKind::Dir {
                return Err(SafeReadError::Io {
                    path,
                    source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
                });
            }
            fd = Some(next);
        }
        let fd = match fd {
            Some(fd) => fd,
            None => self.fd.try_clone().map_err(io_err(&path))?,
        };
        Ok(Self { fd, path, real })
    }

    /// The path it was opened at (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `rel` below this directory, as messages name it.
    pub fn shown(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.path.clone()
        } else {
            self.path.join(rel)
        }
    }

    /// The names of the real subdirectories (not links to some), sorted.
    pub fn subdirs(&self) -> Result<Vec<OsString>, SafeReadError> {
        let names = dirfd::list(self.fd.as_fd()).map_err(io_err(&self.path))?;
        Ok(names
            .into_iter()
            .filter(|n| {
                dirfd::open_entry(self.fd.as_fd(), n)
                    .and_then(|fd| dirfd::stat(fd.as_fd()))
                    .is_ok_and(|st| st.kind == EntryKind::Dir)
            })
            .collect())
    }

    /// The names of the regular files (not links to some, nor FIFOs or
    /// devices) in the directory `rel` (`""`: this directory), sorted;
    /// none when `rel` is missing. Links on the way to `rel` are followed
    /// only while they stay inside.
    pub fn files(&self, rel: &str) -> Result<Vec<OsString>, SafeReadError> {
        let Some(Found::Dir(fd)) = self.resolve(rel)? else {
            return Ok(Vec::new());
        };
        let names = dirfd::list(fd.as_fd()).map_err(io_err(&self.shown(rel)))?;
        Ok(names
            .into_iter()
            .filter(|n| {
                dirfd::open_entry(fd.as_fd(), n)
                    .and_then(|e| dirfd::stat(e.as_fd()))
                    .is_ok_and(|st| st.kind == EntryKind::File)
            })
            .collect())
    }

    /// Whether `rel` is a regular file (links inside followed).
    pub fn is_file(&self, rel: &str) -> bool {
        matches!(self.resolve(rel), Ok(Some(Found::File(..))))
    }

    /// The regular file at `rel` (`None` when there is none), within
    /// [`ReadLimits::max_file_bytes`].
    pub fn read_file(
        &self,
        rel: &str,
        limits: &ReadLimits,
    ) -> Result<Option<FileEntry>, SafeReadError> {
        let shown = self.shown(rel);
        match self.resolve(rel)? {
            None => Ok(None),
            Some(Found::File(file, st)) => read_regular(file, st, &shown, limits).map(Some),
            Some(Found::Dir(_) | Found::Other) => Err(SafeReadError::Io {
                path: shown,
                source: std::io::Error::other("not a regular file"),
            }),
        }
    }

    /// A required UTF-8 file at `rel`.
    pub fn read_text(&self, rel: &str, limits: &ReadLimits) -> Result<String, BundleError> {
        self.read_text_opt(rel, limits)?
            .ok_or_else(|| BundleError::invalid(self.shown(rel), None, "required file is missing"))
    }

    /// An optional UTF-8 file at `rel` (`None` when absent).
    pub fn read_text_opt(
        &self,
        rel: &str,
        limits: &ReadLimits,
    ) -> Result<Option<String>, BundleError> {
        match self.read_file(rel, limits)? {
            None => Ok(None),
            Some(entry) => super::text::into_utf8(&self.shown(rel), entry.bytes).map(Some),
        }
    }

    /// Every regular file below `rel` (`""`: this directory), with paths
    /// relative to it; `total` counts bytes across calls. Links resolving
    /// inside this directory are read through (links to directories are
    /// left out), links resolving outside it are refused. A missing `rel`
    /// is an empty tree.
    pub fn read_tree(
        &self,
        rel: &str,
        limits: &ReadLimits,
        total: &mut u64,
    ) -> Result<FileTree, SafeReadError> {
        let mut tree = FileTree::default();
        if let Some(Found::Dir(fd)) = self.resolve(rel)? {
            let mut walk = Walk {
                root: self,
                limits,
                total,
                tree: &mut tree,
            };
            walk.dir(fd.as_fd(), rel, "", 0)?;
        }
        Ok(tree)
    }

    /// Resolve `rel` (relative to this directory) one name at a time,
    /// following links only while they stay inside; `None` when the path
    /// (not a link's target) does not exist.
    fn resolve(&self, rel: &str) -> Result<Option<Found>, SafeReadError> {
        let shown = self.shown(rel);
        let mut todo: VecDeque<OsString> = names(Path::new(rel));
        let mut chain: Vec<OwnedFd> = Vec::new();
        let (mut hops, mut retries) = (0u32, 0u32);
        // The target of the last link followed, for messages.
        let mut via = PathBuf::new();
        while let Some(name) = todo.pop_front() {
            if name == ".." {
                if chain.pop().is_none() {
                    return Err(SafeReadError::EscapingLink {
                        path: shown,
                        target: via,
                    });
                }
                continue;
            }
            let dir = chain.last().map_or(self.fd.as_fd(), AsFd::as_fd);
            let entry = match dirfd::open_entry(dir, &name) {
                Ok(fd) => fd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && hops == 0 => return Ok(None),
                Err(e) => return Err(io_err(&shown)(e)),
            };
            let st = dirfd::stat(entry.as_fd()).map_err(io_err(&shown))?;
            match st.kind {
                EntryKind::Link => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(io_err(&shown)(std::io::Error::from_raw_os_error(
                            libc::ELOOP,
                        )));
                    }
                    let target = dirfd::read_link(entry.as_fd()).map_err(io_err(&shown))?;
                    let inside =
                        self.inside(&target)
                            .ok_or_else(|| SafeReadError::EscapingLink {
                                path: shown.clone(),
                                target: PathBuf::from(&target),
                            })?;
                    if Path::new(&target).is_absolute() {
                        chain.clear();
                    }
                    via = PathBuf::from(target);
                    for n in inside.into_iter().rev() {
                        todo.push_front(n);
                    }
                }
                EntryKind::Dir if todo.is_empty() => return Ok(Some(Found::Dir(entry))),
                EntryKind::Dir => chain.push(entry),
                _ if !todo.is_empty() => {
                    return Err(io_err(&shown)(std::io::Error::from_raw_os_error(
                        libc::ENOTDIR,
                    )))
                }
                EntryKind::File => match open_same(dir, &name, st) {
                    Some(file) => return Ok(Some(Found::File(file, st))),
                    // Swapped between the look and the open: look again.
                    None if retries < MAX_RETRIES => {
                        retries += 1;
                        todo.push_front(name);
                    }
                    None => return Err(SafeReadError::Changing { path: shown }),
                },
                EntryKind::Other => return Ok(Some(Found::Other)),
            }
        }
        let fd = chain.pop().map_or_else(|| self.fd.try_clone(), Ok);
        fd.map(|fd| Some(Found::Dir(fd))).map_err(io_err(&shown))
    }

    /// The names to walk, from this directory, for link target `target`:
    /// relative ones as they are, absolute ones below this directory's
    /// canonical path; `None` for an absolute target outside it.
    fn inside(&self, target: &OsStr) -> Option<VecDeque<OsString>> {
        let target = Path::new(target);
        if target.is_absolute() {
            target.strip_prefix(&self.real).ok().map(names)
        } else {
            Some(names(target))
        }
    }
}

/// The components of `path` as names (`..` kept, `.` and roots dropped).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// Open `name` of `dir` for reading, if it is still the regular file `st`
/// describes (not swapped for a link or another file since).
fn open_same(dir: BorrowedFd, name: &OsStr, st: Stat) -> Option<File> {
    let fd = dirfd::open_read(dir, name).ok()?;
    let now = dirfd::stat(fd.as_fd()).ok()?;
    (now.kind == EntryKind::File && now.id == st.id).then(|| File::from(fd))
}

/// The bytes of an open regular file, within the per-file limit (checked
/// on its size, and again on what is read: it may grow meanwhile).
fn read_regular(
    file: File,
    st: Stat,
    shown: &Path,
    limits: &ReadLimits,
) -> Result<FileEntry, SafeReadError> {
    let too_large = |size| SafeReadError::TooLarge {
        path: shown.to_path_buf(),
        size,
        limit: limits.max_file_bytes,
    };
    if st.size > limits.max_file_bytes {
        return Err(too_large(st.size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(st.size).unwrap_or(0));
    file.take(limits.max_file_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_err(shown))?;
    let len = bytes.len() as u64;
    if len > limits.max_file_bytes {
        return Err(too_large(len));
    }
    Ok(FileEntry {
        bytes,
        executable: st.mode & 0o111 != 0,
    })
}

/// One walk of a tree below a [`BundleDir`].
struct Walk<'a> {
    root: &'a BundleDir,
    limits: &'a ReadLimits,
    total: &'a mut u64,
    tree: &'a mut FileTree,
}

impl Walk<'_> {
    /// Read directory `fd`, which is `top/sub` below the root (`sub`
    /// relative to the tree's top, `depth` levels down).
    fn dir(
        &mut self,
        fd: BorrowedFd,
        top: &str,
        sub: &str,
        depth: usize,
    ) -> Result<(), SafeReadError> {
        let here = self.root.shown(&join(top, sub));
        if depth > MAX_DEPTH {
            return Err(SafeReadError::TooDeep {
                path: here,
                limit: MAX_DEPTH,
            });
        }
        for name in dirfd::list(fd).map_err(io_err(&here))? {
            let rel = join(sub, &name.to_string_lossy());
            self.entry(fd, &name, top, &rel, depth)?;
        }
        Ok(())
    }

    /// Read the entry `name` of directory `fd`, which is `top/rel`.
    fn entry(
        &mut self,
        fd: BorrowedFd,
        name: &OsStr,
        top: &str,
        rel: &str,
        depth: usize,
    ) -> Result<(), SafeReadError> {
        let from_root = join(top, rel);
        let shown = self.root.shown(&from_root);
        for _ in 0..MAX_RETRIES {
            let entry = match dirfd::open_entry(fd, name) {
                Ok(e) => e,
                // Removed since it was listed: it is not part of the tree.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io_err(&shown)(e)),
            };
            let st = dirfd::stat(entry.as_fd()).map_err(io_err(&shown))?;
            match st.kind {
                EntryKind::Dir => return self.dir(entry.as_fd(), top, rel, depth + 1),
                EntryKind::Link => {
                    return match self.root.resolve(&from_root)? {
                        Some(Found::File(file, st)) => self.add(rel, file, st, &shown),
                        _ => Ok(()),
                    }
                }
                EntryKind::File => {
                    if let Some(file) = open_same(fd, name, st) {
                        return self.add(rel, file, st, &shown);
                    }
                }
                EntryKind::Other => return Ok(()),
            }
        }
        Err(SafeReadError::Changing { path: shown })
    }

    /// Add the open regular file `file` as `rel`, within the limits.
    fn add(&mut self, rel: &str, file: File, st: Stat, shown: &Path) -> Result<(), SafeReadError> {
        let limit = self.limits.max_total_bytes;
        let too_many = || SafeReadError::TooMany {
            path: shown.to_path_buf(),
            limit,
        };
        if self.tree.len() >= self.limits.max_files
            || self.total.saturating_add(st.size) > self.limits.max_total_bytes
        {
            return Err(too_many());
        }
        let entry = read_regular(file, st, shown, self.limits)?;
        *self.total += entry.bytes.len() as u64;
        if *self.total > self.limits.max_total_bytes {
            return Err(too_many());
        }
        self.tree.0.insert(rel.to_string(), entry);
        Ok(())
    }
}

/// `a/b`, or the one that is not empty.
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

/// Read every regular file below `dir` into a [`FileTree`], with paths
/// relative to `dir`. `root` is the task directory: links resolving inside it
/// are read through, links resolving outside are refused. `dir` must lie
/// below `root` (by its path); both are read through descriptors, see
/// [`BundleDir`].
pub fn read_tree_bounded(
    root: &Path,
    dir: &Path,
    limits: &ReadLimits,
    total: &mut u64,
) -> Result<FileTree, SafeReadError> {
    let rel = dir.strip_prefix(root).map_err(|_| SafeReadError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not below the task directory {}", root.display()),
        ),
    })?;
    let rel = rel.to_string_lossy().replace('\\', "/");
    BundleDir::open(root)?.read_tree(&rel, limits, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn refuses_links_outside_and_big_files() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("env")).unwrap();
        fs::write(root.path().join("env/a.txt"), "a").unwrap();
        symlink("a.txt", root.path().join("env/inside")).unwrap();
        let mut total = 0;
        let tree = read_tree_bounded(
            root.path(),
            &root.path().join("env"),
            &ReadLimits::default(),
            &mut total,
        )
        .unwrap();
        assert_eq!(tree.text("inside"), Some("a"));

        symlink(outside.path().join("secret"), root.path().join("env/leak")).unwrap();
        let err = read_tree_bounded(
            root.path(),
            &root.path().join("env"),
            &ReadLimits::default(),
            &mut 0,
        )
        .unwrap_err();
        assert!(matches!(err, SafeReadError::EscapingLink { .. }), "{err}");
        assert!(err.to_string().contains("leak"));
        fs::remove_file(root.path().join("env/leak")).unwrap();

        let limits = ReadLimits {
            max_file_bytes: 0,
            ..Default::default()
        };
        let err =
            read_tree_bounded(root.path(), &root.path().join("env"), &limits, &mut 0).unwrap_err();
        assert!(matches!(err, SafeReadError::TooLarge { .. }));
    }

    /// A bundle whose parts are links: to files outside (refused, naming
    /// the link), through `..` out of the root (refused), to a directory
    /// outside (refused: the tree's top itself is a link), and inside the
    /// bundle by relative, `..` and absolute paths (read through).
    #[test]
    fn links_are_followed_only_inside_the_bundle() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "SECRET").unwrap();
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir_all(r.join("tests/sub")).unwrap();
        fs::write(r.join("truth.md"), "truth").unwrap();
        fs::write(r.join("tests/sub/deep.txt"), "deep").unwrap();
        symlink("../truth.md", r.join("tests/up")).unwrap();
        symlink(r.join("truth.md"), r.join("tests/absolute")).unwrap();
        symlink("sub", r.join("tests/dirlink")).unwrap();
        let dir = BundleDir::open(r).unwrap();
        let tree = dir
            .read_tree("tests", &ReadLimits::default(), &mut 0)
            .unwrap();
        assert_eq!(tree.text("up"), Some("truth"));
        assert_eq!(tree.text("absolute"), Some("truth"));
        assert_eq!(tree.text("sub/deep.txt"), Some("deep"));
        assert!(
            !tree.contains("dirlink"),
            "links to directories are left out"
        );

        symlink(outside.path().join("secret"), r.join("instruction.md")).unwrap();
        let err = dir
            .read_text("instruction.md", &ReadLimits::default())
            .unwrap_err();
        assert!(
            err.to_string().contains("instruction.md") && err.to_string().contains("outside"),
            "{err}"
        );

        symlink("../../../../../../../../etc/passwd", r.join("tests/climb")).unwrap();
        let err = dir
            .read_tree("tests", &ReadLimits::default(), &mut 0)
            .unwrap_err();
        assert!(matches!(err, SafeReadError::EscapingLink { .. }), "{err}");
        assert!(err.to_string().contains("climb"), "{err}");
        fs::remove_file(r.join("tests/climb")).unwrap();

        symlink(outside.path(), r.join("solution")).unwrap();
        let err = dir
            .read_tree("solution", &ReadLimits::default(), &mut 0)
            .unwrap_err();
        assert!(matches!(err, SafeReadError::EscapingLink { .. }), "{err}");
        assert!(!err.to_string().contains("SECRET"));
    }

    #[test]
    fn modes_sizes_and_odd_entries() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir(r.join("env")).unwrap();
        fs::write(r.join("env/run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(r.join("env/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        let fifo =
            std::ffi::CString::new(r.join("env/fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let dir = BundleDir::open(r).unwrap();
        let tree = dir
            .read_tree("env", &ReadLimits::default(), &mut 0)
            .unwrap();
        assert_eq!(
            tree.len(),
            1,
            "the FIFO is skipped, never opened for reading"
        );
        assert!(tree.0["run.sh"].executable);
        assert!(dir
            .read_text_opt("missing.md", &ReadLimits::default())
            .unwrap()
            .is_none());
        assert!(dir
            .read_tree("missing", &ReadLimits::default(), &mut 0)
            .unwrap()
            .is_empty());
        let mut total = 0;
        let few = ReadLimits {
            max_total_bytes: 4,
            ..Default::default()
        };
        let err = dir.read_tree("env", &few, &mut total).unwrap_err();
        assert!(matches!(err, SafeReadError::TooMany { .. }), "{err}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let mut p = root.path().join("env");
        for _ in 0..=MAX_DEPTH + 1 {
            p.push("d");
        }
        fs::create_dir_all(&p).unwrap();
        let dir = BundleDir::open(root.path()).unwrap();
        let err = dir
            .read_tree("env", &ReadLimits::default(), &mut 0)
            .unwrap_err();
        assert!(matches!(err, SafeReadError::TooDeep { .. }), "{err}");
    }

    #[test]
    fn subdirectories_are_opened_without_following_links() {
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("a/b")).unwrap();
        symlink(outside.path(), root.path().join("a/link")).unwrap();
        let dir = BundleDir::open(root.path()).unwrap();
        assert_eq!(dir.subdirs().unwrap(), ["a"]);
        let b = dir.open_subdir(Path::new("a/b")).unwrap();
        assert_eq!(b.path(), root.path().join("a/b"));
        assert!(dir.open_subdir(Path::new("a/link")).is_err());
    }
}
