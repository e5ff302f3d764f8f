//! Errors raised while reading, writing or converting task bundles.

use std::fmt;
use std::path::PathBuf;

use super::safe_read_error::SafeReadError;

/// A problem with a bundle, naming the file and, where known, the field.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The content is wrong: a missing file, a bad value, a bad encoding.
    #[error("{}", Located { file, field: field.as_deref(), message })]
    Invalid {
        /// The offending file, as the caller named it (often a full path).
        file: PathBuf,
        /// The key (e.g. `task.id`) or place (`line 3`) inside `file`, if known.
        field: Option<String>,
        /// What is wrong, for humans.
        message: String,
    },
    /// Reading the tree was refused (escaping link, size limit).
    #[error(transparent)]
    Read(#[from] SafeReadError),
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

impl BundleError {
    /// A content error about `file` (and optionally `field`).
    pub fn invalid(
        file: impl Into<PathBuf>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        BundleError::Invalid {
            file: file.into(),
            field: field.map(str::to_owned),
            message: message.into(),
        }
    }

    /// Wrap an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| BundleError::Io { path, source }
    }
}

struct Located<'a> {
    file: &'a PathBuf,
    field: Option<&'a str>,
    message: &'a str,
}

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(field) = self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// One validation finding: file, optional field, message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The offending file, relative to the bundle root.
    pub file: String,
    /// The dotted key inside `file` (e.g. `task.id`), if the problem is about one.
    pub field: Option<String>,
    /// What is wrong, for humans.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = PathBuf::from(&self.file);
        Located {
            file: &file,
            field: self.field.as_deref(),
            message: &self.message,
        }
        .fmt(f)
    }
}
