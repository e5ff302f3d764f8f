//! The workspace: task bundles and trajectories on disk (the source of
//! truth) indexed in SQLite (WAL), which also holds curation data; every
//! curation change is also written beside its bundle or episode (see
//! [`curation`]), so the index can be rebuilt from the files.

mod curation;
mod import;
mod jobs;
mod link;
mod merge;
mod merge_tasks;
mod migrations;
mod runs;
mod shard;
mod task_index;
mod tasks;
mod versions;
mod workspace;

use std::path::PathBuf;

pub use curation::{EpisodeReview, TaskCuration, REVIEW_EXTENSION};
pub use import::{discover, import_paths, ImportOutcome, ImportReport, OnConflict};
pub use jobs::JobRow;
pub use link::LinkReport;
pub use merge::{MergeOptions, MergeReport};
pub use merge_tasks::AUDIT_FILE;
pub use merge_tasks::{TaskMergeReport, VALIDATION_FILE};
pub use migrations::SCHEMA_VERSION;
pub use runs::{EpisodeRow, RunRow};
pub use shard::{
    fnv1a64, read_shard_record, shard_of, write_shard_record, Shard, ShardRecord, ShardSet,
    MAX_SHARDS, SHARD_FILE,
};
pub use task_index::TaskStatus;
pub use tasks::{TaskFilter, TaskRow};
pub use versions::{
    episode_key, parent_version, set_version, task_version, VersionInfo, EPISODE_VERSIONS_FILE,
    VERSIONS_DIR,
};
pub use workspace::{Recovered, Workspace, TASK_CURATION_FILE};

/// Errors from the workspace and its database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The database was written by a newer build.
    #[error("the workspace database has schema version {found}, newer than this build supports ({supported}); upgrade endless")]
    TooNew {
        /// The database's schema version.
        found: usize,
        /// The newest version this build knows.
        supported: usize,
    },
    /// No task has this id.
    #[error("no task with id {0:?}")]
    NoSuchTask(String),
    /// A task bundle could not be read or written.
    #[error(transparent)]
    Bundle(#[from] crate::task::BundleError),
    /// The filesystem failed.
    #[error("{path}: {source}")]
    Io {
        /// The path the operation failed on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Anything else the store refuses or cannot do (rating out of range, unknown episode, ...), explained.
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| StoreError::Io { path, source }
    }
}

/// The current time as RFC 3339 (UTC, seconds).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
