//! Errors of the RL pieces.

use std::path::PathBuf;

/// Why a training operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RlError {
    /// A batch is malformed (lengths disagree, nothing to learn from...).
    #[error("rollout batch: {0}")]
    Batch(String),
    /// The loss or the gradient norm is NaN or infinite; no update was applied.
    #[error("step {step}: {what} is not finite ({value}); update skipped")]
    NonFinite {
        /// The trainer's step counter when it happened.
        step: u64,
        /// Which quantity: `loss`, `gradient norm` or `supervised loss`.
        what: &'static str,
        /// Its value (NaN or ±inf).
        value: f64,
    },
    /// A checkpoint is missing, truncated or corrupt.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The checkpoint directory or file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A training setting cannot be used (the message names it).
    #[error("{0}")]
    Setting(String),
    /// Loading the model failed.
    #[error(transparent)]
    Model(#[from] crate::model::LocalError),
    /// A tensor operation failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

impl RlError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn ckpt(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Self::Checkpoint {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, RlError>;
