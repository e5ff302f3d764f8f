//! The error of a safe tree read ([`super::BundleDir`]), in a file of its
//! own so that the bundle error can wrap it without importing the reader.

use std::path::PathBuf;

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
        /// Where it points.
        target: PathBuf,
    },
    /// One file exceeds [`ReadLimits::max_file_bytes`](super::ReadLimits::max_file_bytes).
    #[error("{path}: file is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, in bytes.
        size: u64,
        /// The limit it exceeds, in bytes.
        limit: u64,
    },
    /// The tree exceeds [`ReadLimits::max_total_bytes`](super::ReadLimits::max_total_bytes) or
    /// [`ReadLimits::max_files`](super::ReadLimits::max_files).
    #[error("{path}: the task holds more than {limit} files or bytes")]
    TooMany {
        /// The file being read when a limit was crossed.
        path: PathBuf,
        /// The total-bytes limit (given even when the file count was the one crossed).
        limit: u64,
    },
    /// Directories nest deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
    #[error("{path}: directories nest more than {limit} levels deep")]
    TooDeep {
        /// The directory that is one level too deep.
        path: PathBuf,
        /// The limit.
        limit: usize,
    },
    /// The entry kept changing (swapped for a link or another file) while
    /// it was being opened.
    #[error("{path}: changed while it was being read (swapped for another file or a link); refusing to read it")]
    Changing {
        /// The entry.
        path: PathBuf,
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
