//! Errors of the local candle models.

use std::path::PathBuf;

/// Why a local model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A file the model directory needs is missing.
    #[error("{path}: missing ({what})")]
    MissingFile {
        /// Where it was looked for.
        path: PathBuf,
        /// What it would have held.
        what: String,
    },
    /// A file exists but could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something other than what was expected.
    #[error("{path}: field `{field}`: {message}")]
    BadField {
        /// The file.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A file could not be parsed at all.
    #[error("{path}: {message}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        message: String,
    },
    /// The model's architecture is not one this crate implements.
    #[error("{path}: unsupported architecture `{arch}` (supported: {supported})")]
    UnsupportedArchitecture {
        /// The file naming it.
        path: PathBuf,
        /// The architecture named.
        arch: String,
        /// The architectures this crate runs.
        supported: &'static str,
    },
    /// A weight is missing from the weight files or has the wrong shape.
    #[error("{file}: tensor `{name}`: {message}")]
    Weight {
        /// The weight file (or the model directory).
        file: String,
        /// The tensor's name.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// Tokenizer failure (encoding or decoding).
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template failed to render.
    #[error("chat template: {0}")]
    Template(String),
    /// Bad sampling or generation request.
    #[error("generation: {0}")]
    Generation(String),
    /// Fetching a model failed.
    #[error("fetch: {0}")]
    Fetch(String),
    /// A tensor operation failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

impl LocalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn field(
        path: impl Into<PathBuf>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::BadField {
            path: path.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, LocalError>;
