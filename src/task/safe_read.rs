//! Reading a directory tree without ever leaving it: symlinks that point
//! outside the root are refused, and file sizes are bounded.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{FileEntry, FileTree};

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

/// Why a tree could not be read; always names the offending path.
#[derive(Debug, thiserror::Error)]
pub enum SafeReadError {
    /// A symbolic link resolves outside the tree's root.
    #[error(
        "{path}: symbolic link points outside the task directory ({target}); refusing to read it"
    )]
    EscapingLink {
        /// The link.
        path: PathBuf,
        /// Where it resolves to.
        target: PathBuf,
    },
    /// One file exceeds [`ReadLimits::max_file_bytes`].
    #[error("{path}: file is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, in bytes.
        size: u64,
        /// The limit it exceeds, in bytes.
        limit: u64,
    },
    /// The tree exceeds [`ReadLimits::max_total_bytes`] or [`ReadLimits::max_files`].
    #[error("{path}: the task holds more than {limit} files or bytes")]
    TooMany {
        /// The file being read when a limit was crossed.
        path: PathBuf,
        /// The total-bytes limit (given even when the file count was the one crossed).
        limit: u64,
    },
    /// The filesystem failed.
    #[error("{path}: {source}")]
    Io {
        /// The path the operation failed on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SafeReadError + '_ {
    move |source| SafeReadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Read every regular file below `dir` into a [`FileTree`], with paths
/// relative to `dir`. `root` is the task directory: links resolving inside it
/// are read through, links resolving outside are refused.
pub fn read_tree_bounded(
    root: &Path,
    dir: &Path,
    limits: &ReadLimits,
    total: &mut u64,
) -> Result<FileTree, SafeReadError> {
    let mut tree = FileTree::default();
    if !dir.exists() {
        return Ok(tree);
    }
    let root_real = fs::canonicalize(root).map_err(io_err(root))?;
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e
                .path()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| dir.to_path_buf());
            SafeReadError::Io {
                path,
                source: e
                    .into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("walk failed")),
            }
        })?;
        let path = entry.path();
        let meta = if entry.path_is_symlink() {
            let real = fs::canonicalize(path).map_err(io_err(path))?;
            if !real.starts_with(&root_real) {
                return Err(SafeReadError::EscapingLink {
                    path: path.to_path_buf(),
                    target: real,
                });
            }
            fs::metadata(&real).map_err(io_err(path))?
        } else {
            entry.metadata().map_err(|e| SafeReadError::Io {
                path: path.to_path_buf(),
                source: e
                    .into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("stat failed")),
            })?
        };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > limits.max_file_bytes {
            return Err(SafeReadError::TooLarge {
                path: path.to_path_buf(),
                size: meta.len(),
                limit: limits.max_file_bytes,
            });
        }
        *total += meta.len();
        if *total > limits.max_total_bytes || tree.len() >= limits.max_files {
            return Err(SafeReadError::TooMany {
                path: path.to_path_buf(),
                limit: limits.max_total_bytes,
            });
        }
        let bytes = fs::read(path).map_err(io_err(path))?;
        let rel = path
            .strip_prefix(dir)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        let executable = meta.permissions().mode() & 0o111 != 0;
        tree.0.insert(rel, FileEntry { bytes, executable });
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_links_outside_and_big_files() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        let root = tempfile::tempdir().unwrap();
        fs::create_dir(root.path().join("env")).unwrap();
        fs::write(root.path().join("env/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("a.txt", root.path().join("env/inside")).unwrap();
        let mut total = 0;
        let tree = read_tree_bounded(
            root.path(),
            &root.path().join("env"),
            &ReadLimits::default(),
            &mut total,
        )
        .unwrap();
        assert_eq!(tree.text("inside"), Some("a"));

        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("env/leak"))
            .unwrap();
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
}
