//! The task half of `endless workspace merge OTHER`: bundles that OTHER
//! has and this workspace lacks (tasks a generation shard wrote) are copied
//! in whole, each appearing at once (staged, then renamed), and indexed
//! with their curation; stored validation verdicts
//! (`tasks/<id>/validation.json`, written by `tasks validate`) are taken
//! when OTHER's is newer, together with the `task.toml` whose baseline that
//! validation recorded. A bundle that differs in anything else is a
//! conflict: reported, and this workspace's is kept. Merging twice changes
//! nothing. OTHER's files are read beneath its descriptor, as the episodes
//! are (see [`super::merge`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::merge::OtherWorkspace;
use super::{StoreError, TaskStatus, Workspace, TASK_CURATION_FILE};
use crate::fsutil::{write_atomic, AtomicDir};
use crate::task::FileTree;

/// The file in a task bundle that holds its latest validation verdict.
pub const VALIDATION_FILE: &str = "validation.json";

/// What the task half of a merge did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TaskMergeReport {
    /// Bundles copied in.
    pub tasks_added: usize,
    /// Bundles here already, the same.
    pub tasks_unchanged: usize,
    /// Validation verdicts taken (newer than this workspace's).
    pub verdicts_merged: usize,
    /// What could not be merged, one line each (kept as it is here).
    pub conflicts: Vec<String>,
}

/// Whether `rel` is a file of a bundle merged on its own terms (curation,
/// verdict, audit).
fn own_terms(rel: &str) -> bool {
    rel == TASK_CURATION_FILE || rel == VALIDATION_FILE || rel == AUDIT_FILE
}

/// The regular files of our bundle `dir` by path relative to it, but for
/// those merged on their own terms.
fn bundle_files(dir: &Path) -> Result<BTreeMap<String, PathBuf>, StoreError> {
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut BTreeMap<String, PathBuf>,
    ) -> Result<(), StoreError> {
        // trusted: our own bundle (the other's goes through BundleDir)
        for entry in fs::read_dir(dir).map_err(StoreError::io(dir))? {
            let entry = entry.map_err(StoreError::io(dir))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(StoreError::io(&path))?;
            if kind.is_dir() {
                walk(root, &path, out)?;
            } else if kind.is_file() {
                let rel = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if !own_terms(&rel) {
                    out.insert(rel, path);
                }
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

fn read(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    // trusted: our own bundle (the other's goes through BundleDir)
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path)(e)),
    }
}

/// The `validated_at` of a verdict file's bytes (empty when unreadable).
fn validated_at(bytes: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("validated_at")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A task's audit report (`tasks/<id>/audit.json`, written by
/// [`crate::audit`]): merged like a verdict, the later one wins; the
/// caller re-indexes what was taken.
pub const AUDIT_FILE: &str = "audit.json";

/// The `audited_at` of an audit report ('' when unreadable).
fn audited_at(bytes: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v.get("audited_at")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Workspace {
    /// Task `id` is here and in `theirs` (a shard's bundle, as read):
    /// take their `audit.json` when it is newer than ours (or we have
    /// none). Returns whether it was taken; the audit index is brought up
    /// to date by [`crate::audit`]'s re-index after the merge.
    fn take_newer_audit(&self, id: &str, theirs: &FileTree) -> Result<bool, StoreError> {
        let Some(their) = theirs.0.get(AUDIT_FILE).map(|e| &e.bytes) else {
            return Ok(false);
        };
        let ours_path = self.task_dir(id).join(AUDIT_FILE);
        if read(&ours_path)?.is_some_and(|o| audited_at(&o) >= audited_at(their)) {
            return Ok(false);
        }
        write_atomic(&ours_path, their).map_err(StoreError::io(&ours_path))?;
        Ok(true)
    }

    /// `tasks/<id>/validation.json`.
    pub fn validation_path(&self, id: &str) -> PathBuf {
        self.task_dir(id).join(VALIDATION_FILE)
    }

    /// Merge the task bundles and verdicts of the workspace at `other` into
    /// this one (see the module docs).
    pub fn merge_tasks_from(&self, other: &Path) -> Result<TaskMergeReport, StoreError> {
        self.merge_tasks_from_open(&OtherWorkspace::open(other)?)
    }

    /// [`Self::merge_tasks_from`], from the other workspace opened.
    pub(super) fn merge_tasks_from_open(
        &self,
        theirs: &OtherWorkspace,
    ) -> Result<TaskMergeReport, StoreError> {
        let mut report = TaskMergeReport::default();
        let ids: Vec<String> = theirs
            .subdirs("tasks")?
            .into_iter()
            .filter(|id| {
                crate::task::is_valid_id(id) && theirs.is_file(&format!("tasks/{id}/task.toml"))
            })
            .collect();
        for id in ids {
            let shown = theirs.path().join("tasks").join(&id);
            let bundle = theirs.tree(&format!("tasks/{id}"))?;
            if !self.has_task(&id) {
                let target = self.task_dir(&id);
                let staging = AtomicDir::new(&target).map_err(StoreError::io(&target))?;
                crate::task::write_tree(staging.path(), &bundle)?;
                let task = crate::task::read_native(staging.path(), &Default::default())
                    .map_err(|e| StoreError::Invalid(format!("{}: {e}", shown.display())));
                let task = match task {
                    Ok(t) if t.id() == id => t,
                    Ok(t) => {
                        report.conflicts.push(format!(
                            "task {id}: its task.toml says id {:?}, skipped",
                            t.id()
                        ));
                        continue;
                    }
                    Err(e) => {
                        report.conflicts.push(format!("task {id}: {e}, skipped"));
                        continue;
                    }
                };
                staging.commit().map_err(StoreError::io(&target))?;
                self.index_task(&task, TaskStatus::Candidate)?;
                self.restore_task_curation(&id)?;
                self.index_audit_file(&id)?;
                report.tasks_added += 1;
                continue;
            }
            self.merge_one_bundle(&id, &bundle, &mut report)?;
        }
        Ok(report)
    }

    /// Task `id` is here and `theirs` is its bundle there: take their verdict when it is
    /// newer (with the `task.toml` it recorded a baseline in); anything
    /// else that differs is a conflict.
    fn merge_one_bundle(
        &self,
        id: &str,
        theirs: &FileTree,
        report: &mut TaskMergeReport,
    ) -> Result<(), StoreError> {
        let ours_dir = self.task_dir(id);
        let ours = bundle_files(&ours_dir)?;
        let their_files: BTreeMap<&String, &Vec<u8>> = theirs
            .iter()
            .filter(|(rel, _)| !own_terms(rel))
            .map(|(rel, e)| (rel, &e.bytes))
            .collect();
        let mut differing = Vec::new();
        for name in ours.keys().chain(their_files.keys().copied()) {
            let a = ours.get(name).map(|p| read(p)).transpose()?.flatten();
            let b = their_files.get(name).copied();
            if a.as_ref() != b && !differing.contains(name) {
                differing.push(name.clone());
            }
        }
        if differing.iter().all(|n| n == "task.toml") {
            self.take_newer_audit(id, theirs)?;
        }
        let their_verdict = theirs.0.get(VALIDATION_FILE).map(|e| e.bytes.clone());
        let our_verdict = read(&ours_dir.join(VALIDATION_FILE))?;
        let newer = match (&their_verdict, &our_verdict) {
            (Some(t), Some(o)) => t != o && validated_at(t) > validated_at(o),
            (Some(_), None) => true,
            _ => false,
        };
        let only_meta = differing.iter().all(|n| n == "task.toml");
        // Ours is the later validation: its task.toml (the baseline it
        // recorded) stands.
        let ours_newer = match (&our_verdict, &their_verdict) {
            (Some(o), Some(t)) => validated_at(o) >= validated_at(t),
            (Some(_), None) => true,
            _ => false,
        };
        if only_meta && ours_newer {
            report.tasks_unchanged += 1;
            return Ok(());
        }
        let takeable = differing.is_empty() || (newer && only_meta);
        if !takeable {
            report.conflicts.push(format!(
                "task {id}: its bundle differs from this workspace's ({}); kept this workspace's",
                differing.join(", ")
            ));
            return Ok(());
        }
        if !newer {
            report.tasks_unchanged += 1;
            return Ok(());
        }
        if let Some(toml) = theirs.0.get("task.toml").filter(|_| !differing.is_empty()) {
            let to = ours_dir.join("task.toml");
            write_atomic(&to, &toml.bytes).map_err(StoreError::io(&to))?;
            let task = self.load_task(id)?;
            self.index_task(&task, TaskStatus::Candidate)?;
        }
        if let Some(bytes) = their_verdict {
            let to = ours_dir.join(VALIDATION_FILE);
            write_atomic(&to, &bytes).map_err(StoreError::io(&to))?;
        }
        report.verdicts_merged += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(at: &str) -> Vec<u8> {
        format!(r#"{{"id": "x", "ok": true, "validated_at": "{at}"}}"#).into_bytes()
    }

    #[test]
    fn new_bundles_come_whole_newer_verdicts_win_and_other_changes_conflict() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let main = Workspace::open(a.path()).unwrap();
        let other = Workspace::open(b.path()).unwrap();
        let tasks: Vec<crate::task::Task> =
            ["a", "b", "c"].map(crate::task::Task::minimal).to_vec();
        main.add_task(&tasks[0], TaskStatus::Candidate).unwrap();
        for t in &tasks {
            other.add_task(t, TaskStatus::Accepted).unwrap();
        }
        let r = main.merge_tasks_from(b.path()).unwrap();
        assert_eq!((r.tasks_added, r.tasks_unchanged), (2, 1), "{r:?}");
        assert!(r.conflicts.is_empty(), "{r:?}");
        assert_eq!(
            main.task_row(tasks[1].id()).unwrap().status,
            TaskStatus::Accepted
        );
        // A newer verdict with the task.toml it changed is taken, once.
        let id = tasks[0].id();
        let toml = other.task_dir(id).join("task.toml");
        let mut text = fs::read_to_string(&toml).unwrap();
        text.push_str("\n# baseline\n");
        write_atomic(&toml, text.as_bytes()).unwrap();
        write_atomic(&other.validation_path(id), &verdict("2026-01-02T00:00:00Z")).unwrap();
        let r = main.merge_tasks_from(b.path()).unwrap();
        assert_eq!(r.verdicts_merged, 1, "{r:?}");
        assert_eq!(
            fs::read_to_string(main.task_dir(id).join("task.toml")).unwrap(),
            text
        );
        let again = main.merge_tasks_from(b.path()).unwrap();
        assert_eq!((again.verdicts_merged, again.tasks_unchanged), (0, 3));
        // A workspace holding the task unvalidated (another shard's copy)
        // changes nothing: the validated task.toml stands.
        let c = tempfile::tempdir().unwrap();
        let unvalidated = Workspace::open(c.path()).unwrap();
        unvalidated
            .add_task(&tasks[0], TaskStatus::Candidate)
            .unwrap();
        let r = main.merge_tasks_from(c.path()).unwrap();
        assert_eq!((r.tasks_unchanged, r.conflicts.len()), (1, 0), "{r:?}");
        assert_eq!(
            fs::read_to_string(main.task_dir(id).join("task.toml")).unwrap(),
            text
        );
        // An older verdict is not; another change is a conflict.
        write_atomic(&other.validation_path(id), &verdict("2025-01-01T00:00:00Z")).unwrap();
        assert_eq!(main.merge_tasks_from(b.path()).unwrap().verdicts_merged, 0);
        let instruction = other.task_dir(id).join("instruction.md");
        write_atomic(&instruction, b"something else").unwrap();
        let r = main.merge_tasks_from(b.path()).unwrap();
        assert_eq!(r.conflicts.len(), 1, "{r:?}");
        assert!(r.conflicts[0].contains("instruction.md"), "{r:?}");
    }

    /// Issue 46: OTHER's verdict was read by path, following links: a
    /// `validation.json` linking to a file outside OTHER was taken into
    /// this workspace. It is refused, naming it, and nothing is taken.
    #[test]
    fn a_verdict_linking_out_of_the_other_workspace_is_refused() {
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let main = Workspace::open(a.path()).unwrap();
        let other = Workspace::open(b.path()).unwrap();
        let task = crate::task::Task::minimal("a");
        main.add_task(&task, TaskStatus::Candidate).unwrap();
        other.add_task(&task, TaskStatus::Candidate).unwrap();
        let outside = c.path().join("verdict.json");
        fs::write(&outside, verdict("2030-01-01T00:00:00Z")).unwrap();
        std::os::unix::fs::symlink(&outside, other.validation_path(task.id())).unwrap();
        let e = main.merge_tasks_from(b.path()).unwrap_err().to_string();
        assert!(
            e.contains("validation.json") && e.contains("outside"),
            "{e}"
        );
        assert!(!main.validation_path(task.id()).exists());
    }
}
