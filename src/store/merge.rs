//! `endless workspace merge OTHER`: bring the runs and episodes recorded in
//! another workspace (another node of a cluster, say) into this one: their
//! files under `runs/<run>/` and their index rows, with run ids kept; and
//! the task bundles and validation verdicts it has (see [`super::merge_tasks`]).
//!
//! Idempotent: an episode already here with the same files is skipped, so
//! merging twice changes nothing. An episode whose (run, task, sample) is
//! here with other content is a conflict: reported, and left as it is here.
//! Files are copied (atomically, each) before the index rows are written in
//! one transaction, so a merge that dies half-way is completed by running it
//! again.
//!
//! OTHER may be another user's: it is opened once and its files are read
//! beneath its descriptor ([`OtherWorkspace`]), regular files only, each
//! within a size limit; a link that leads out of it (a run directory that
//! links to a directory elsewhere, say) is refused with an error naming it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags};
use serde::Serialize;

use super::migrations::SCHEMA_VERSION;
use super::runs::result_facts;
use super::{now, StoreError, Workspace};
use crate::fsutil::write_atomic;
use crate::task::{BundleDir, FileTree, ReadLimits, SafeReadError};

/// The largest file taken from another workspace, in bytes.
const MAX_MERGED_FILE_BYTES: u64 = 1 << 30;

/// Another workspace, opened once: every file of it is read beneath its
/// descriptor (see the module docs).
pub(super) struct OtherWorkspace {
    dir: BundleDir,
}

impl OtherWorkspace {
    /// Open the workspace directory `path` (links in `path` itself are
    /// followed: the operator named it).
    pub(super) fn open(path: &Path) -> Result<Self, StoreError> {
        let dir = BundleDir::open(path).map_err(|e| refused(path, e))?;
        Ok(Self { dir })
    }

    /// The names of the regular files in its directory `rel`, sorted
    /// (none when `rel` is missing).
    fn files(&self, rel: &str) -> Result<Vec<String>, StoreError> {
        let names = self.dir.files(rel).map_err(|e| self.refused(e))?;
        Ok(names
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect())
    }

    /// The bytes of its regular file `rel` (`None` when there is none).
    fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let limits = ReadLimits {
            max_file_bytes: MAX_MERGED_FILE_BYTES,
            ..ReadLimits::default()
        };
        let entry = self.dir.read_file(rel, &limits);
        Ok(entry.map_err(|e| self.refused(e))?.map(|e| e.bytes))
    }

    /// The names of the real directories (not links) in its directory
    /// `rel`, sorted (none when `rel` is missing or not a directory).
    pub(super) fn subdirs(&self, rel: &str) -> Result<Vec<String>, StoreError> {
        let Ok(sub) = self.dir.open_subdir(Path::new(rel)) else {
            return Ok(Vec::new());
        };
        let names = sub.subdirs().map_err(|e| self.refused(e))?;
        Ok(names
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .collect())
    }

    /// Whether its `rel` is a regular file.
    pub(super) fn is_file(&self, rel: &str) -> bool {
        self.dir.is_file(rel)
    }

    /// Every regular file below its directory `rel`, within the limits of
    /// a task bundle (see [`ReadLimits`]).
    pub(super) fn tree(&self, rel: &str) -> Result<FileTree, StoreError> {
        self.dir
            .read_tree(rel, &ReadLimits::default(), &mut 0)
            .map_err(|e| self.refused(e))
    }

    /// Its path, for messages.
    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    fn refused(&self, e: SafeReadError) -> StoreError {
        refused(self.dir.path(), e)
    }
}

/// `e`, met reading the other workspace `other`, as the store says it.
fn refused(other: &Path, e: SafeReadError) -> StoreError {
    match e {
        SafeReadError::EscapingLink { path, target } => StoreError::Invalid(format!(
            "{}: symbolic link points outside the workspace merged from, {} ({}); refusing to read it",
            path.display(),
            other.display(),
            target.display()
        )),
        other => StoreError::Invalid(other.to_string()),
    }
}

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MergeReport {
    /// The workspace merged from.
    pub from: PathBuf,
    /// Runs that were not here before.
    pub runs_added: usize,
    /// Episodes copied and indexed.
    pub episodes_added: usize,
    /// Episodes already here with the same files (skipped).
    pub episodes_unchanged: usize,
    /// What could not be merged, one line each (kept as it is here).
    pub conflicts: Vec<String>,
    /// Tasks the merged episodes are about that this workspace does not
    /// have (their episodes are merged all the same).
    pub missing_tasks: Vec<String>,
    /// Task bundles copied in.
    pub tasks_added: usize,
    /// Validation verdicts taken (newer than this workspace's).
    pub verdicts_merged: usize,
}

/// How to merge.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MergeOptions {
    /// Leave out the run-level files (`runs/<run>/report.md`, ...): a
    /// shard's are about its part of the run only, and the merge writes the
    /// whole run's afterwards.
    pub skip_run_files: bool,
}

/// One episode row of the other workspace.
struct OtherEpisode {
    run_id: String,
    task_id: String,
    sample: i64,
    passed: bool,
    reward: f64,
    turns: i64,
    end_reason: String,
    failure_mode: Option<String>,
    rating: Option<i64>,
    label: Option<String>,
    notes: String,
    created_at: String,
}

/// One run row of the other workspace.
struct OtherRun {
    id: String,
    kind: String,
    policy: String,
    config: String,
    summary: String,
    created_at: String,
    finished_at: Option<String>,
}

/// A run id usable as a directory name.
fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'+' | b':'))
}

/// The regular files of sample `sample` in directory `rel` of the other
/// workspace (`<sample>.json`, `<sample>.jsonl`, `<sample>.cast`, ...),
/// by name.
fn sample_files(
    theirs: &OtherWorkspace,
    rel: &str,
    sample: i64,
) -> Result<Vec<String>, StoreError> {
    let prefix = format!("{sample}.");
    let mut names = theirs.files(rel)?;
    names.retain(|n| n.starts_with(&prefix));
    Ok(names)
}

/// Whether our file `ours` holds `bytes`.
fn same_bytes(ours: &Path, bytes: &[u8]) -> Result<bool, StoreError> {
    // trusted: our own workspace (the other's goes through BundleDir)
    Ok(fs::read(ours).map_err(StoreError::io(ours))? == bytes)
}

/// Open the database of workspace `root` read-only, checking that it is one.
fn open_other(root: &Path) -> Result<Connection, StoreError> {
    let not_ws = |why: &str| {
        StoreError::Invalid(format!(
            "{}: not an endless workspace ({why})",
            root.display()
        ))
    };
    if !root.is_dir() {
        return Err(not_ws("no such directory"));
    }
    let db = root.join("endless.db");
    if !db.is_file() {
        return Err(not_ws("no endless.db in it"));
    }
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| not_ws(&format!("cannot open endless.db: {e}")))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| not_ws(&format!("endless.db is not a database: {e}")))?;
    if version <= 0 {
        return Err(not_ws("endless.db has no endless schema"));
    }
    if version as usize > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: version as usize,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(conn)
}

fn other_runs(conn: &Connection) -> Result<Vec<OtherRun>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, kind, policy, config, summary, created_at, finished_at FROM runs ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(OtherRun {
            id: r.get(0)?,
            kind: r.get(1)?,
            policy: r.get(2)?,
            config: r.get(3)?,
            summary: r.get(4)?,
            created_at: r.get(5)?,
            finished_at: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn other_episodes(conn: &Connection) -> Result<Vec<OtherEpisode>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT run_id, task_id, sample, passed, reward, turns, end_reason, failure_mode,
                rating, label, notes, created_at
         FROM episodes ORDER BY run_id, task_id, sample",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(OtherEpisode {
            run_id: r.get(0)?,
            task_id: r.get(1)?,
            sample: r.get(2)?,
            passed: r.get(3)?,
            reward: r.get(4)?,
            turns: r.get(5)?,
            end_reason: r.get(6)?,
            failure_mode: r.get(7)?,
            rating: r.get(8)?,
            label: r.get(9)?,
            notes: r.get(10)?,
            created_at: r.get(11)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

impl Workspace {
    /// Merge the runs and episodes of the workspace at `other` into this
    /// one (see the module docs). Errors name `other` when it is not a
    /// workspace, or is this one.
    pub fn merge_from(&mut self, other: &Path) -> Result<MergeReport, StoreError> {
        self.merge_from_with(other, MergeOptions::default())
    }

    /// [`Self::merge_from`], as `options` say.
    pub fn merge_from_with(
        &mut self,
        other: &Path,
        options: MergeOptions,
    ) -> Result<MergeReport, StoreError> {
        let conn = open_other(other)?;
        // trusted: the workspace roots the operator named, compared
        let here = fs::canonicalize(self.root()).map_err(StoreError::io(self.root()))?;
        // trusted: the workspace roots the operator named, compared
        let there = fs::canonicalize(other).map_err(StoreError::io(other))?;
        if here == there {
            return Err(StoreError::Invalid(format!(
                "{}: that is this workspace; name another one",
                other.display()
            )));
        }
        let runs = other_runs(&conn)?;
        let episodes = other_episodes(&conn)?;
        drop(conn);
        let theirs = OtherWorkspace::open(other)?;

        let tasks = self.merge_tasks_from_open(&theirs)?;
        let mut report = MergeReport {
            from: other.to_path_buf(),
            tasks_added: tasks.tasks_added,
            verdicts_merged: tasks.verdicts_merged,
            conflicts: tasks.conflicts,
            ..Default::default()
        };
        let known_runs: BTreeSet<String> = self.list_runs()?.into_iter().map(|r| r.id).collect();
        let mut bad_runs = BTreeSet::new();
        for run in &runs {
            if !valid_run_id(&run.id) {
                report
                    .conflicts
                    .push(format!("run {:?}: not a valid run id, skipped", run.id));
                bad_runs.insert(run.id.clone());
            }
        }
        let known_episodes: BTreeSet<(String, String, i64)> = self
            .list_episodes(None)?
            .into_iter()
            .map(|e| (e.run_id, e.task_id, i64::from(e.sample)))
            .collect();
        let mut missing = BTreeSet::new();
        let mut to_index = Vec::new();
        for e in episodes {
            if bad_runs.contains(&e.run_id) || !valid_run_id(&e.run_id) {
                continue;
            }
            let what = format!("episode {}/{}/{}", e.run_id, e.task_id, e.sample);
            if !crate::task::is_valid_id(&e.task_id) || e.sample < 0 {
                report
                    .conflicts
                    .push(format!("{what}: not a valid task id or sample, skipped"));
                continue;
            }
            let rel = format!("runs/{}/episodes/{}", e.run_id, e.task_id);
            let dst_dir = self.root().join(&rel);
            let files = sample_files(&theirs, &rel, e.sample)?;
            if files.is_empty() {
                report.conflicts.push(format!(
                    "{what}: indexed in {} but its files are missing, skipped",
                    other.display()
                ));
                continue;
            }
            let mut theirs_bytes = Vec::new();
            for name in &files {
                if let Some(bytes) = theirs.read(&format!("{rel}/{name}"))? {
                    theirs_bytes.push((name, bytes));
                }
            }
            // Same files here already: nothing to do but make sure it is
            // indexed. Other files here: a conflict, ours are kept.
            let mut differing = Vec::new();
            for (name, bytes) in &theirs_bytes {
                let dst = dst_dir.join(name);
                if dst.exists() && !same_bytes(&dst, bytes)? {
                    differing.push(name.to_string());
                }
            }
            if !differing.is_empty() {
                report.conflicts.push(format!(
                    "{what}: this workspace has another episode with that run, task and sample ({} differ); kept this workspace's",
                    differing.join(", ")
                ));
                continue;
            }
            for (name, bytes) in &theirs_bytes {
                let dst = dst_dir.join(name);
                if !dst.exists() {
                    write_atomic(&dst, bytes).map_err(StoreError::io(&dst))?;
                }
            }
            if !self.has_task(&e.task_id) {
                missing.insert(e.task_id.clone());
            }
            if known_episodes.contains(&(e.run_id.clone(), e.task_id.clone(), e.sample)) {
                report.episodes_unchanged += 1;
            } else {
                report.episodes_added += 1;
                to_index.push(e);
            }
        }
        report.missing_tasks = missing.into_iter().collect();
        for run in &runs {
            if !bad_runs.contains(&run.id) && !options.skip_run_files {
                self.merge_run_files(&theirs, &run.id, &mut report)?;
            }
        }
        let root = self.root().to_path_buf();
        self.transaction(|tx| {
            for run in &runs {
                if bad_runs.contains(&run.id) || known_runs.contains(&run.id) {
                    continue;
                }
                tx.execute(
                    "INSERT INTO runs (id, kind, policy, config, summary, created_at, finished_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING",
                    params![
                        run.id,
                        run.kind,
                        run.policy,
                        run.config,
                        run.summary,
                        run.created_at,
                        run.finished_at
                    ],
                )?;
            }
            for e in &to_index {
                let path = Path::new("runs")
                    .join(&e.run_id)
                    .join("episodes")
                    .join(&e.task_id)
                    .join(format!("{}.json", e.sample));
                let facts = result_facts(&root.join(&path));
                tx.execute(
                    "INSERT INTO runs (id, kind, created_at) VALUES (?1, 'merged', ?2)
                     ON CONFLICT (id) DO NOTHING",
                    params![e.run_id, now()],
                )?;
                tx.execute(
                    "INSERT INTO episodes (run_id, task_id, sample, passed, reward, turns, end_reason,
                         failure_mode, path, rating, label, notes, created_at, taken_over,
                         failure_labels, policy, duration_secs, forked_from)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                         ?16, ?17, ?18)
                     ON CONFLICT (run_id, task_id, sample) DO NOTHING",
                    params![
                        e.run_id,
                        e.task_id,
                        e.sample,
                        e.passed,
                        e.reward,
                        e.turns,
                        e.end_reason,
                        e.failure_mode,
                        path.to_string_lossy(),
                        e.rating,
                        e.label,
                        e.notes,
                        e.created_at,
                        // Read from the copied result: the other index may
                        // predate these columns.
                        facts.taken_over,
                        serde_json::to_string(&facts.failure_labels)
                            .unwrap_or_else(|_| "[]".into()),
                        facts.policy,
                        facts.duration_secs,
                        facts.forked_from,
                    ],
                )?;
            }
            Ok(())
        })?;
        report.runs_added = runs
            .iter()
            .filter(|r| !bad_runs.contains(&r.id) && !known_runs.contains(&r.id))
            .count();
        Ok(report)
    }

    /// Copy the run-level files of run `run` (reports, configs: the regular
    /// files of `runs/<run>/` itself) that this workspace lacks; one that
    /// differs here is a conflict, and ours is kept.
    fn merge_run_files(
        &self,
        theirs: &OtherWorkspace,
        run: &str,
        report: &mut MergeReport,
    ) -> Result<(), StoreError> {
        let rel = format!("runs/{run}");
        let dst_dir = self.runs_dir().join(run);
        for name in theirs.files(&rel)? {
            if name.starts_with('.') {
                continue;
            }
            let Some(bytes) = theirs.read(&format!("{rel}/{name}"))? else {
                continue;
            };
            let dst = dst_dir.join(&name);
            if dst.exists() {
                if !same_bytes(&dst, &bytes)? {
                    report.conflicts.push(format!(
                        "runs/{run}/{name}: differs from this workspace's; kept this workspace's"
                    ));
                }
                continue;
            }
            write_atomic(&dst, &bytes).map_err(StoreError::io(&dst))?;
        }
        Ok(())
    }
}
