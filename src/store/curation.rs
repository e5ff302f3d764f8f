//! Curation kept beside the files it is about, so that the index can be
//! rebuilt from the files with nothing lost: every change is written to the
//! database and, atomically, to
//!
//! - `tasks/<id>/curation.json`: a task's status, rating, notes, tags and
//!   pass@k ([`TaskCuration`]);
//! - `runs/<run>/episodes/<task>/<sample>.review`: an episode's rating,
//!   label and notes ([`EpisodeReview`], JSON).
//!
//! A bundle indexed without a row (a fresh or deleted `endless.db`) takes its
//! curation from its file; [`Workspace::sync_task_curation`] and
//! [`Workspace::sync_episode_review`] make index and file agree (the file
//! wins; a row without a file writes one).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{EpisodeRow, StoreError, TaskRow, TaskStatus, Workspace, TASK_CURATION_FILE};

/// The extension of an episode's review file (beside its `<sample>.json`).
pub const REVIEW_EXTENSION: &str = "review";

/// A task's curation, as `tasks/<id>/curation.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskCuration {
    /// Curation status.
    pub status: TaskStatus,
    /// Curator's rating, 1-5.
    #[serde(default)]
    pub rating: Option<u8>,
    /// Curator's notes.
    #[serde(default)]
    pub notes: String,
    /// Tags as edited.
    #[serde(default)]
    pub tags: Vec<String>,
    /// pass@k keyed by k.
    #[serde(default)]
    pub pass_at_k: BTreeMap<String, f64>,
    /// When it last changed (RFC 3339).
    #[serde(default)]
    pub updated_at: String,
}

impl TaskCuration {
    /// The curation of an index row.
    pub fn of(row: &TaskRow) -> TaskCuration {
        TaskCuration {
            status: row.status,
            rating: row.rating,
            notes: row.notes.clone(),
            tags: row.tags.clone(),
            pass_at_k: row.pass_at_k.clone(),
            updated_at: row.updated_at.clone(),
        }
    }

    /// Whether it says anything beyond a fresh candidate's defaults.
    fn is_blank(&self) -> bool {
        self.status == TaskStatus::Candidate
            && self.rating.is_none()
            && self.notes.is_empty()
            && self.tags.is_empty()
            && self.pass_at_k.is_empty()
    }

    /// Whether someone curated the task: a status other than candidate, a
    /// rating, notes, or tags other than `bundle_tags` (those the bundle
    /// brought when it was indexed). Machine-written pass@k (an
    /// evaluation's, the solvability filter's) is not curation.
    pub fn is_curated(&self, bundle_tags: &[String]) -> bool {
        let mut tags = self.tags.clone();
        let mut bundle = bundle_tags.to_vec();
        tags.sort();
        tags.dedup();
        bundle.sort();
        bundle.dedup();
        self.status != TaskStatus::Candidate
            || self.rating.is_some()
            || !self.notes.trim().is_empty()
            || tags != bundle
    }
}

/// An episode's review, as its `<sample>.review` file holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeReview {
    /// Reviewer's rating, 1-5.
    #[serde(default)]
    pub rating: Option<u8>,
    /// Reviewer's failure label.
    #[serde(default)]
    pub label: Option<String>,
    /// Reviewer's notes.
    #[serde(default)]
    pub notes: String,
}

impl EpisodeReview {
    /// The review of an index row.
    pub fn of(row: &EpisodeRow) -> EpisodeReview {
        EpisodeReview {
            rating: row.rating,
            label: row.label.clone(),
            notes: row.notes.clone(),
        }
    }

    fn is_blank(&self) -> bool {
        self.rating.is_none() && self.label.is_none() && self.notes.is_empty()
    }
}

/// Read a JSON file into `T`, naming the file and the field at fault.
/// `Ok(None)`: there is no file.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    // trusted: this workspace's own files
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(path)(e)),
    };
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(de).map(Some).map_err(|e| {
        let field = e.path().to_string();
        let at = if field == "." || field.is_empty() {
            String::new()
        } else {
            format!(" (field {field})")
        };
        StoreError::Invalid(format!("{}{at}: {}", path.display(), e.inner()))
    })
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let mut json = serde_json::to_vec_pretty(value)
        .map_err(|e| StoreError::Invalid(format!("{}: {e}", path.display())))?;
    json.push(b'\n');
    crate::fsutil::write_atomic(path, &json).map_err(StoreError::io(path))
}

impl Workspace {
    /// `tasks/<id>/curation.json`.
    pub fn task_curation_path(&self, id: &str) -> PathBuf {
        self.task_dir(id).join(TASK_CURATION_FILE)
    }

    /// Task `id`'s curation file, if it has one.
    pub fn read_task_curation(&self, id: &str) -> Result<Option<TaskCuration>, StoreError> {
        read_json(&self.task_curation_path(id))
    }

    /// Write task `id`'s curation file from its index row (after a change).
    pub(crate) fn save_task_curation(&self, id: &str) -> Result<(), StoreError> {
        let row = self.task_row(id)?;
        if !self.task_dir(id).is_dir() {
            return Ok(());
        }
        write_json(&self.task_curation_path(id), &TaskCuration::of(&row))
    }

    /// Put `c` into task `id`'s index row (the file is not rewritten).
    fn apply_task_curation(&self, id: &str, c: &TaskCuration) -> Result<(), StoreError> {
        if c.rating.is_some_and(|r| !(1..=5).contains(&r)) {
            return Err(StoreError::Invalid(format!(
                "{} (field rating): {} is outside 1..=5",
                self.task_curation_path(id).display(),
                c.rating.unwrap_or_default()
            )));
        }
        let n = self.conn.execute(
            "UPDATE tasks SET status = ?1, rating = ?2, notes = ?3, tags = ?4, pass_at_k = ?5 WHERE id = ?6",
            rusqlite::params![
                c.status.as_str(),
                c.rating.map(i64::from),
                c.notes,
                serde_json::to_string(&c.tags).unwrap_or_else(|_| "[]".into()),
                serde_json::to_string(&c.pass_at_k).unwrap_or_else(|_| "{}".into()),
                id
            ],
        )?;
        if n == 0 {
            return Err(StoreError::NoSuchTask(id.into()));
        }
        Ok(())
    }

    /// Make task `id`'s index row and curation file agree: a file is put
    /// into the row; a row with curation but no file writes the file.
    /// Returns whether someone curated the task ([`TaskCuration::is_curated`]
    /// against the bundle's own tags): pass@k alone is not curation.
    pub fn sync_task_curation(&self, id: &str) -> Result<bool, StoreError> {
        let c = match self.read_task_curation(id)? {
            Some(c) => {
                self.apply_task_curation(id, &c)?;
                c
            }
            None => {
                let c = TaskCuration::of(&self.task_row(id)?);
                if c.is_blank() {
                    return Ok(false);
                }
                self.save_task_curation(id)?;
                c
            }
        };
        let bundle_tags = self.load_task(id)?.meta.task.tags;
        Ok(c.is_curated(&bundle_tags))
    }

    /// Apply a newly indexed bundle's curation file, if it has one (a
    /// broken file is reported and left alone: the bundle stays indexed).
    pub(crate) fn restore_task_curation(&self, id: &str) -> Result<(), StoreError> {
        match self.read_task_curation(id) {
            Ok(Some(c)) => self.apply_task_curation(id, &c),
            Ok(None) => Ok(()),
            Err(e) => {
                tracing::warn!("not restoring the curation of {id}: {e}");
                Ok(())
            }
        }
    }

    /// The review file of an episode row (`<sample>.review` beside its
    /// result); `None` when the row has no path.
    pub fn episode_review_path(&self, row: &EpisodeRow) -> Option<PathBuf> {
        if row.path.is_empty() {
            return None;
        }
        Some(self.root().join(&row.path).with_extension(REVIEW_EXTENSION))
    }

    /// Write an episode's review file from its row, when the episode's
    /// directory exists.
    pub(crate) fn save_episode_review(&self, row: &EpisodeRow) -> Result<(), StoreError> {
        let Some(path) = self.episode_review_path(row) else {
            return Ok(());
        };
        if !path.parent().is_some_and(Path::is_dir) {
            return Ok(());
        }
        write_json(&path, &EpisodeReview::of(row))
    }

    /// Make an episode's index row and review file agree (the file wins; a
    /// reviewed row without a file writes one). Returns whether the episode
    /// has a review.
    pub fn sync_episode_review(&self, row: &EpisodeRow) -> Result<bool, StoreError> {
        let Some(path) = self.episode_review_path(row) else {
            return Ok(false);
        };
        match read_json::<EpisodeReview>(&path)? {
            Some(r) => {
                if r.rating.is_some_and(|v| !(1..=5).contains(&v)) {
                    return Err(StoreError::Invalid(format!(
                        "{} (field rating): {} is outside 1..=5",
                        path.display(),
                        r.rating.unwrap_or_default()
                    )));
                }
                self.conn.execute(
                    "UPDATE episodes SET rating = ?1, label = ?2, notes = ?3 WHERE run_id = ?4 AND task_id = ?5 AND sample = ?6",
                    rusqlite::params![
                        r.rating.map(i64::from),
                        r.label,
                        r.notes,
                        row.run_id,
                        row.task_id,
                        row.sample
                    ],
                )?;
                Ok(!r.is_blank())
            }
            None => {
                let r = EpisodeReview::of(row);
                if r.is_blank() {
                    return Ok(false);
                }
                self.save_episode_review(row)?;
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str) -> crate::task::Task {
        crate::task::Task::minimal(id)
    }

    #[test]
    fn curation_survives_losing_the_database() {
        let dir = tempfile::tempdir().unwrap();
        {
            let ws = Workspace::open(dir.path()).unwrap();
            ws.add_task(&task("a"), TaskStatus::Candidate).unwrap();
            ws.add_task(&task("b"), TaskStatus::Candidate).unwrap();
            ws.set_status("a", TaskStatus::Accepted).unwrap();
            ws.set_rating("a", Some(4)).unwrap();
            ws.set_notes("a", "good one").unwrap();
            ws.set_tags("a", &["x".into(), "y".into()]).unwrap();
            let on_disk = ws.read_task_curation("a").unwrap().unwrap();
            assert_eq!(on_disk.status, TaskStatus::Accepted);
            assert_eq!(on_disk.tags, ["x", "y"]);
            assert!(ws.read_task_curation("b").unwrap().is_none());
        }
        for f in ["endless.db", "endless.db-wal", "endless.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        let ws = Workspace::open(dir.path()).unwrap();
        let a = ws.task_row("a").unwrap();
        assert_eq!(
            (a.status, a.rating, a.notes.as_str()),
            (TaskStatus::Accepted, Some(4), "good one")
        );
        assert_eq!(a.tags, ["x", "y"]);
        assert_eq!(ws.task_row("b").unwrap().status, TaskStatus::Candidate);
        // The bundle still reads: the file is beside it, not in it.
        ws.load_task("a").unwrap();
    }

    #[test]
    fn a_broken_curation_file_is_named_and_the_row_is_written_out_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.add_task(&task("a"), TaskStatus::Accepted).unwrap();
        // An index row with curation but no file (a workspace from before
        // the files existed) writes it.
        std::fs::remove_file(ws.task_curation_path("a")).ok();
        assert!(ws.sync_task_curation("a").unwrap());
        assert_eq!(
            ws.read_task_curation("a").unwrap().unwrap().status,
            TaskStatus::Accepted
        );
        std::fs::write(ws.task_curation_path("a"), r#"{"status": "maybe"}"#).unwrap();
        let err = ws.sync_task_curation("a").unwrap_err().to_string();
        assert!(err.contains("curation.json"), "{err}");
        assert!(err.contains("status"), "{err}");
        // The row is untouched.
        assert_eq!(ws.task_row("a").unwrap().status, TaskStatus::Accepted);
    }

    #[test]
    fn only_what_someone_did_counts_as_curated() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let mut t = task("a");
        t.meta.task.tags = vec!["files".into(), "easy".into()];
        ws.add_task(&t, TaskStatus::Candidate).unwrap();
        // The solvability filter's pass@k and the bundle's own tags: not curated.
        let mut c = TaskCuration::of(&ws.task_row("a").unwrap());
        c.pass_at_k.insert("1".into(), 0.5);
        let bundle = ["easy".to_string(), "files".to_string()];
        assert!(!c.is_curated(&bundle));
        write_json(&ws.task_curation_path("a"), &c).unwrap();
        assert!(!ws.sync_task_curation("a").unwrap());
        // Each thing a curator does counts.
        let cases: [fn(&mut TaskCuration); 4] = [
            |c| c.status = TaskStatus::Accepted,
            |c| c.rating = Some(2),
            |c| c.notes = "tests too weak".into(),
            |c| c.tags.push("reviewed".into()),
        ];
        for edit in cases {
            let mut d = c.clone();
            edit(&mut d);
            assert!(d.is_curated(&bundle), "{d:?}");
        }
        let mut d = c.clone();
        d.rating = Some(3);
        write_json(&ws.task_curation_path("a"), &d).unwrap();
        assert!(ws.sync_task_curation("a").unwrap());
    }

    #[test]
    fn episode_reviews_are_written_beside_the_result() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.upsert_run("r", "eval", "oracle", &serde_json::json!({}))
            .unwrap();
        let ep_dir = dir.path().join("runs/r/episodes/t");
        std::fs::create_dir_all(&ep_dir).unwrap();
        let row = EpisodeRow {
            run_id: "r".into(),
            task_id: "t".into(),
            sample: 0,
            passed: false,
            reward: 0.0,
            turns: 1,
            end_reason: "done".into(),
            failure_mode: None,
            path: "runs/r/episodes/t/0.json".into(),
            rating: None,
            label: None,
            notes: String::new(),
            taken_over: false,
            failure_labels: Vec::new(),
            policy: "oracle".into(),
            duration_secs: 1.5,
            forked_from: None,
            created_at: String::new(),
        };
        ws.index_episode(&row).unwrap();
        ws.rate_episode("r", "t", 0, Some(2), Some("test_wrong"), "flaky")
            .unwrap();
        let text = std::fs::read_to_string(ep_dir.join("0.review")).unwrap();
        let review: EpisodeReview = serde_json::from_str(&text).unwrap();
        assert_eq!(review.label.as_deref(), Some("test_wrong"));
        // A fresh row (re-indexed) takes the review back from the file.
        ws.conn
            .execute(
                "UPDATE episodes SET rating = NULL, label = NULL, notes = ''",
                [],
            )
            .unwrap();
        assert!(ws.sync_episode_review(&row).unwrap());
        let back = &ws.list_episodes(None).unwrap()[0];
        assert_eq!(
            (back.rating, back.label.as_deref(), back.notes.as_str()),
            (Some(2), Some("test_wrong"), "flaky")
        );
    }
}
