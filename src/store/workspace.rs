//! A workspace directory: `endless.db`, `tasks/`, `rejected/`, `runs/`,
//! `checkpoints/`.

use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::migrations::{migrate, EPISODES_CONTEXT};
use super::task_index::{index_task_in, TaskStatus};
use super::StoreError;
use crate::fsutil::{replace_dir_atomic, AtomicDir};
use crate::task::ReadLimits;
use crate::task::{read_native, write_native, Task};

/// The file in a task bundle that holds its curation.
pub const TASK_CURATION_FILE: &str = "curation.json";

/// Staging directories older than this are leftovers of a dead process.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(3600);

/// What [`Workspace::open_recovering`] found wrong with `endless.db`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// There was none, though the workspace has tasks or runs.
    Missing,
    /// It was not a database; it now lies at `moved_to`.
    Corrupt {
        /// Where the broken file went.
        moved_to: PathBuf,
    },
}

/// An open workspace. Each thread opens its own (SQLite WAL allows one
/// writer and many readers at once).
pub struct Workspace {
    root: PathBuf,
    pub(crate) conn: Connection,
    /// This open created the database (there was none, or an empty one).
    created: bool,
}

impl Workspace {
    /// Open (creating and migrating as needed) the workspace at `root`, then
    /// reconcile the index with the bundles on disk.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        for sub in ["tasks", "rejected", "runs", "checkpoints"] {
            let dir = root.join(sub);
            // trusted: this workspace's own files
            fs::create_dir_all(&dir).map_err(StoreError::io(&dir))?;
        }
        let db = root.join("endless.db");
        let mut conn = Connection::open(&db)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        migrate(&mut conn)?;
        let ws = Workspace {
            root: root.to_path_buf(),
            conn,
            created: version == 0,
        };
        // An index made before it had the columns taken from the result
        // files (`taken_over`, `failure_labels`, `policy`...) learns them.
        if version > 0 && (version as usize) < EPISODES_CONTEXT {
            ws.backfill_from_results()?;
        }
        ws.reconcile()?;
        Ok(ws)
    }

    /// [`Workspace::open`], mending a database that is missing while the
    /// workspace has files (it was deleted) or that is not a database any
    /// more (corrupt: moved aside to `endless.db.corrupt-<time>`, with its
    /// `-wal` and `-shm`). Says what it mended: the caller rebuilds the
    /// index from the files (`workbench::rebuild_index`).
    pub fn open_recovering(root: &Path) -> Result<(Self, Option<Recovered>), StoreError> {
        let db = root.join("endless.db");
        let has_files = |sub: &str| {
            // trusted: this workspace's own files
            fs::read_dir(root.join(sub))
                .map(|mut d| {
                    d.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.')))
                })
                .unwrap_or(false)
        };
        let has_files = has_files("tasks") || has_files("runs");
        match Self::open(root) {
            Ok(ws) => {
                let missing = ws.created && has_files;
                Ok((ws, missing.then_some(Recovered::Missing)))
            }
            Err(StoreError::Sql(e))
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
                ) =>
            {
                let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
                let moved_to = root.join(format!("endless.db.corrupt-{stamp}"));
                for suffix in ["", "-wal", "-shm"] {
                    let from = root.join(format!("endless.db{suffix}"));
                    if from.exists() {
                        let to = PathBuf::from(format!("{}{suffix}", moved_to.display()));
                        // trusted: this workspace's own files
                        fs::rename(&from, &to).map_err(StoreError::io(&from))?;
                    }
                }
                tracing::warn!(
                    "{}: not a database ({e}); moved to {} and rebuilding the index",
                    db.display(),
                    moved_to.display()
                );
                let ws = Self::open(root)?;
                Ok((ws, Some(Recovered::Corrupt { moved_to })))
            }
            Err(e) => Err(e),
        }
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `tasks/`: accepted bundles.
    pub fn tasks_dir(&self) -> PathBuf {
        self.root.join("tasks")
    }

    /// `rejected/`: pipeline rejects with their reasons.
    pub fn rejected_dir(&self) -> PathBuf {
        self.root.join("rejected")
    }

    /// `runs/`: evaluation and generation runs.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// `checkpoints/`: training output.
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// The bundle directory of task `id`.
    pub fn task_dir(&self, id: &str) -> PathBuf {
        self.tasks_dir().join(id)
    }

    /// Load task `id` from its bundle.
    pub fn load_task(&self, id: &str) -> Result<Task, StoreError> {
        let dir = self.task_dir(id);
        if !crate::task::is_valid_id(id) || !dir.join("task.toml").is_file() {
            return Err(StoreError::NoSuchTask(id.into()));
        }
        Ok(read_native(&dir, &ReadLimits::default())?)
    }

    /// Whether a bundle with this id exists.
    pub fn has_task(&self, id: &str) -> bool {
        crate::task::is_valid_id(id) && self.task_dir(id).join("task.toml").is_file()
    }

    /// Write a new task bundle atomically and index it. Fails if the id exists.
    pub fn add_task(&self, task: &Task, status: TaskStatus) -> Result<(), StoreError> {
        let dir = self.task_dir(task.id());
        crate::task::save_native_atomic(task, &dir)?;
        index_task_in(&self.conn, task, status)?;
        if status != TaskStatus::Candidate {
            self.save_task_curation(task.id())?;
        }
        Ok(())
    }

    /// Replace an existing task's bundle atomically (readers see old or new).
    pub fn replace_task(&self, task: &Task) -> Result<(), StoreError> {
        let target = self.task_dir(task.id());
        let staging = AtomicDir::new(&self.tasks_dir().join(format!(".new-{}", task.id())))
            .map_err(StoreError::io(&target))?;
        write_native(task, staging.path())?;
        // The curation file stays with the task.
        let curation = target.join(TASK_CURATION_FILE);
        if curation.is_file() {
            let kept = staging.path().join(TASK_CURATION_FILE);
            // trusted: this workspace's own files
            fs::copy(&curation, &kept).map_err(StoreError::io(&curation))?;
        }
        replace_dir_atomic(staging.path(), &target).map_err(StoreError::io(&target))?;
        index_task_in(&self.conn, task, TaskStatus::Candidate)
    }

    /// Delete a task's bundle, its kept versions and its index row.
    pub fn remove_task(&self, id: &str) -> Result<(), StoreError> {
        for dir in [self.task_dir(id), self.versions_dir(id)] {
            if dir.exists() {
                // trusted: this workspace's own files
                fs::remove_dir_all(&dir).map_err(StoreError::io(&dir))?;
            }
        }
        self.unindex_task(id)
    }

    /// Make the index agree with the files: drop leftovers of interrupted
    /// writes, index complete bundles that have no row, drop rows whose
    /// bundle is gone. Returns how many rows changed.
    pub fn reconcile(&self) -> Result<usize, StoreError> {
        let tasks_dir = self.tasks_dir();
        let mut on_disk = std::collections::BTreeSet::new();
        // trusted: this workspace's own files
        for entry in fs::read_dir(&tasks_dir).map_err(StoreError::io(&tasks_dir))? {
            let entry = entry.map_err(StoreError::io(&tasks_dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                // A staging directory: never visible. One left by a write that
                // died long ago is dropped; a recent one may still be in use.
                let stale = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_STAGING);
                if stale {
                    // trusted: this workspace's own files
                    let _ = fs::remove_dir_all(entry.path());
                }
                continue;
            }
            on_disk.insert(name);
        }
        let indexed: std::collections::BTreeSet<String> = self.task_ids()?.into_iter().collect();
        let mut changed = 0;
        for id in on_disk.difference(&indexed) {
            match read_native(&tasks_dir.join(id), &ReadLimits::default()) {
                Ok(task) => {
                    index_task_in(&self.conn, &task, TaskStatus::Candidate)?;
                    // A bundle whose row was lost keeps its curation.
                    self.restore_task_curation(id)?;
                    changed += 1;
                }
                Err(e) => tracing::warn!("not indexing {}: {e}", tasks_dir.join(id).display()),
            }
        }
        for id in indexed.difference(&on_disk) {
            self.unindex_task(id)?;
            changed += 1;
        }
        Ok(changed)
    }

    /// Run `f` inside one database transaction.
    pub(crate) fn transaction<T>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = self.conn.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }
}
