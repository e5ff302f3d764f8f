//! Task versions: a repair (`endless tasks repair`) makes a new version of
//! the same task id. The current version is the bundle in `tasks/<id>/`;
//! every version it replaced is kept whole under `versions/<id>/<n>/`
//! (the bundle with its `audit.json` and `validation.json`), so it can be
//! restored. `[provenance] version` numbers a bundle (1 when absent) and
//! `parent_version` names the one it was made from. Which version each of
//! the task's episodes ran on is kept in `versions/<id>/episodes.json`
//! (`"<run>/<sample>" = n`), written when the version they ran on stops
//! being current; an episode not listed there ran on the current one.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::task_index::{index_task_in, TaskStatus};
use super::{now, EpisodeRow, StoreError, Workspace, TASK_CURATION_FILE};
use crate::fsutil::{replace_dir_atomic, write_atomic, AtomicDir};
use crate::task::{read_native, write_native, ReadLimits, Task};

/// The workspace directory of kept versions: `versions/<id>/<n>/`.
pub const VERSIONS_DIR: &str = "versions";
/// Per task, which version each episode ran on.
pub const EPISODE_VERSIONS_FILE: &str = "episodes.json";
/// The files beside a bundle that belong to its version (its audit and its
/// validation verdict) and move with it.
const VERSION_FILES: [&str; 2] = [super::AUDIT_FILE, super::VALIDATION_FILE];

/// The version number of `task` (`[provenance] version`, 1 when absent);
/// a value that is not a positive integer is an error naming `file` and
/// the field.
pub fn task_version(task: &Task, file: &Path) -> Result<u32, StoreError> {
    version_field(task, "version", file).map(|v| v.unwrap_or(1))
}

/// The version `task` was made from (`[provenance] parent_version`), if any.
pub fn parent_version(task: &Task, file: &Path) -> Result<Option<u32>, StoreError> {
    version_field(task, "parent_version", file)
}

fn version_field(task: &Task, key: &str, file: &Path) -> Result<Option<u32>, StoreError> {
    match task.meta.provenance.extra.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(n)) if *n >= 1 && *n <= i64::from(u32::MAX) => {
            Ok(Some(*n as u32))
        }
        Some(other) => Err(StoreError::Invalid(format!(
            "{}: field provenance.{key}: {other} is not a version number (1, 2, ...)",
            file.display()
        ))),
    }
}

/// Mark `task` as version `version` made from `parent`.
pub fn set_version(task: &mut Task, version: u32, parent: Option<u32>) {
    let extra = &mut task.meta.provenance.extra;
    extra.insert("version".into(), i64::from(version).into());
    match parent {
        Some(p) => extra.insert("parent_version".into(), i64::from(p).into()),
        None => extra.remove("parent_version"),
    };
}

/// One version of a task, as `endless tasks versions` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionInfo {
    /// Its number.
    pub version: u32,
    /// The version it was made from.
    pub parent: Option<u32>,
    /// Whether it is the bundle in `tasks/<id>/`.
    pub current: bool,
    /// `[provenance] created`, or the repair's time for a repaired version.
    pub created: String,
    /// The repair's model, for a repaired version.
    pub model: String,
    /// The repair's reasons, one line each, for a repaired version.
    pub reasons: Vec<String>,
    /// Episodes that ran on it.
    pub episodes: usize,
}

impl Workspace {
    /// `versions/<id>/`: the kept versions of task `id`.
    pub fn versions_dir(&self, id: &str) -> PathBuf {
        self.root().join(VERSIONS_DIR).join(id)
    }

    /// The current version number of task `id`.
    pub fn current_version(&self, id: &str) -> Result<u32, StoreError> {
        let task = self.load_task(id)?;
        task_version(&task, &self.task_dir(id).join("task.toml"))
    }

    /// Version `version` of task `id`: the current bundle or a kept one;
    /// a broken bundle is an error naming its file and field.
    pub fn load_version(&self, id: &str, version: u32) -> Result<Task, StoreError> {
        if self.current_version(id)? == version {
            return self.load_task(id);
        }
        let dir = self.versions_dir(id).join(version.to_string());
        if !dir.join("task.toml").is_file() {
            let kept = self.kept_versions(id)?;
            return Err(StoreError::Invalid(format!(
                "task {id} has no version {version} (versions: {})",
                self.all_numbers(id, &kept)?
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let task = read_native(&dir, &ReadLimits::default())?;
        let file = dir.join("task.toml");
        let found = task_version(&task, &file)?;
        if found != version || task.id() != id {
            return Err(StoreError::Invalid(format!(
                "{}: field provenance.version: the bundle kept as version {version} of {id} says it is version {found} of {}",
                file.display(),
                task.id()
            )));
        }
        Ok(task)
    }

    /// The numbers of the kept (not current) versions of task `id`.
    fn kept_versions(&self, id: &str) -> Result<Vec<u32>, StoreError> {
        let dir = self.versions_dir(id);
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        // trusted: this workspace's own files
        for entry in fs::read_dir(&dir).map_err(StoreError::io(&dir))? {
            let entry = entry.map_err(StoreError::io(&dir))?;
            if let Some(n) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            {
                out.push(n);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn all_numbers(&self, id: &str, kept: &[u32]) -> Result<Vec<u32>, StoreError> {
        let mut all = kept.to_vec();
        all.push(self.current_version(id)?);
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }

    /// The number a new version of task `id` gets: one above every version it had.
    pub fn next_version(&self, id: &str) -> Result<u32, StoreError> {
        let kept = self.kept_versions(id)?;
        Ok(self.all_numbers(id, &kept)?.last().copied().unwrap_or(1) + 1)
    }

    /// Every version of task `id`, oldest first.
    pub fn task_versions(&self, id: &str) -> Result<Vec<VersionInfo>, StoreError> {
        let current = self.current_version(id)?;
        let kept = self.kept_versions(id)?;
        let ran_on = self.episode_versions(id)?;
        let episodes = self.task_episodes(id)?;
        let mut out = Vec::new();
        for n in self.all_numbers(id, &kept)? {
            let task = self.load_version(id, n)?;
            let file = if n == current {
                self.task_dir(id).join("task.toml")
            } else {
                self.versions_dir(id).join(n.to_string()).join("task.toml")
            };
            let repair = task.meta.provenance.extra.get("repair");
            let text = |key: &str| {
                repair
                    .and_then(|r| r.get(key))
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            };
            let reasons = repair
                .and_then(|r| r.get("reasons"))
                .and_then(|r| r.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r.get("summary").and_then(|s| s.as_str()))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            out.push(VersionInfo {
                version: n,
                parent: parent_version(&task, &file)?,
                current: n == current,
                created: text("created").unwrap_or_else(|| task.meta.provenance.created.clone()),
                model: text("model").unwrap_or_default(),
                reasons,
                episodes: episodes
                    .iter()
                    .filter(|e| ran_on.get(&episode_key(e)).copied().unwrap_or(current) == n)
                    .count(),
            });
        }
        Ok(out)
    }

    /// Which version each episode of task `id` ran on (`"<run>/<sample>"`),
    /// for those that ran on a version no longer current.
    pub fn episode_versions(&self, id: &str) -> Result<BTreeMap<String, u32>, StoreError> {
        let path = self.versions_dir(id).join(EPISODE_VERSIONS_FILE);
        // trusted: this workspace's own files
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(StoreError::Io { path, source: e }),
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::Invalid(format!(
                "{}: {e} (expected an object of \"<run>/<sample>\": version)",
                path.display()
            ))
        })
    }

    /// The version episode `row` ran on.
    pub fn episode_version(&self, row: &EpisodeRow) -> Result<u32, StoreError> {
        match self.episode_versions(&row.task_id)?.get(&episode_key(row)) {
            Some(n) => Ok(*n),
            None => self.current_version(&row.task_id),
        }
    }

    /// Make `task` (a new version of a stored task, its `[provenance]
    /// version` set) current: the current bundle is kept as its version
    /// with its audit and verdict, its episodes are attached to it, and
    /// `task` takes its place with `files` (e.g. its `audit.json`) beside
    /// it; its curation stays. Readers see the old bundle or the new one.
    pub fn commit_version(&self, task: &Task, files: &[(&str, &[u8])]) -> Result<(), StoreError> {
        let id = task.id();
        let new = task_version(task, Path::new("the new version"))?;
        if new == self.current_version(id)? {
            return Err(StoreError::Invalid(format!(
                "task {id} is already at version {new}"
            )));
        }
        self.keep_current(id)?;
        self.switch_to(task, files)
    }

    /// Make kept version `version` of task `id` current again (the current
    /// one is kept in its place).
    pub fn restore_version(&self, id: &str, version: u32) -> Result<(), StoreError> {
        if self.current_version(id)? == version {
            return Err(StoreError::Invalid(format!(
                "version {version} of task {id} is already current"
            )));
        }
        let task = self.load_version(id, version)?;
        let kept = self.versions_dir(id).join(version.to_string());
        let mut files = Vec::new();
        for name in VERSION_FILES {
            let path = kept.join(name);
            if path.is_file() {
                // trusted: this workspace's own files
                files.push((name, fs::read(&path).map_err(StoreError::io(&path))?));
            }
        }
        self.keep_current(id)?;
        let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        self.switch_to(&task, &borrowed)
    }

    /// Keep the current bundle of `id` under `versions/<id>/<n>/` (once:
    /// a kept version never changes) and attach its episodes to it.
    fn keep_current(&self, id: &str) -> Result<(), StoreError> {
        let task = self.load_task(id)?;
        let n = task_version(&task, &self.task_dir(id).join("task.toml"))?;
        let target = self.versions_dir(id).join(n.to_string());
        if !target.join("task.toml").is_file() {
            let parent = self.versions_dir(id);
            // trusted: this workspace's own files
            fs::create_dir_all(&parent).map_err(StoreError::io(&parent))?;
            let staging = AtomicDir::new(&target).map_err(StoreError::io(&target))?;
            write_native(&task, staging.path())?;
            self.copy_beside(id, staging.path(), &VERSION_FILES)?;
            staging.commit().map_err(StoreError::io(&target))?;
        }
        let mut ran_on = self.episode_versions(id)?;
        for e in self.task_episodes(id)? {
            ran_on.entry(episode_key(&e)).or_insert(n);
        }
        let path = self.versions_dir(id).join(EPISODE_VERSIONS_FILE);
        let mut json = serde_json::to_vec_pretty(&ran_on)
            .map_err(|e| StoreError::Invalid(format!("{}: {e}", path.display())))?;
        json.push(b'\n');
        write_atomic(&path, &json).map_err(StoreError::io(&path))
    }

    /// Copy the files `names` of task `id`'s bundle directory into `to`.
    fn copy_beside(&self, id: &str, to: &Path, names: &[&str]) -> Result<(), StoreError> {
        for name in names {
            let from = self.task_dir(id).join(name);
            if from.is_file() {
                // trusted: this workspace's own files
                fs::copy(&from, to.join(name)).map_err(StoreError::io(&from))?;
            }
        }
        Ok(())
    }

    /// Put `task` in `tasks/<id>/` with `files`, keeping the curation.
    fn switch_to(&self, task: &Task, files: &[(&str, &[u8])]) -> Result<(), StoreError> {
        let id = task.id();
        let target = self.task_dir(id);
        let staging = AtomicDir::new(&self.tasks_dir().join(format!(".new-{id}")))
            .map_err(StoreError::io(&target))?;
        write_native(task, staging.path())?;
        self.copy_beside(id, staging.path(), &[TASK_CURATION_FILE])?;
        for (name, bytes) in files {
            let path = staging.path().join(name);
            // trusted: a staging directory of ours
            fs::write(&path, bytes).map_err(StoreError::io(&path))?;
        }
        replace_dir_atomic(staging.path(), &target).map_err(StoreError::io(&target))?;
        index_task_in(&self.conn, task, TaskStatus::Candidate)?;
        self.conn.execute(
            "UPDATE tasks SET updated_at = ?1 WHERE id = ?2",
            rusqlite::params![now(), id],
        )?;
        Ok(())
    }
}

/// An episode's key in `episodes.json`: `<run>/<sample>`.
pub fn episode_key(row: &EpisodeRow) -> String {
    format!("{}/{}", row.run_id, row.sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws_with_task() -> (tempfile::TempDir, Workspace, Task) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let task = Task::minimal("t");
        ws.add_task(&task, TaskStatus::Accepted).unwrap();
        (dir, ws, task)
    }

    #[test]
    fn a_new_version_keeps_the_old_one_restorable_with_its_files() {
        let (_d, ws, task) = ws_with_task();
        let id = task.id().to_string();
        assert_eq!(ws.current_version(&id).unwrap(), 1);
        ws.set_notes(&id, "tests too weak").unwrap();
        fs::write(
            ws.task_dir(&id).join(super::super::AUDIT_FILE),
            b"{\"old\":1}",
        )
        .unwrap();
        let mut v2 = task.clone();
        v2.instruction = "the revised instruction\n".into();
        set_version(&mut v2, ws.next_version(&id).unwrap(), Some(1));
        ws.commit_version(&v2, &[("audit.json", b"{\"new\":2}")])
            .unwrap();
        assert_eq!(ws.current_version(&id).unwrap(), 2);
        assert_eq!(ws.load_task(&id).unwrap().instruction, v2.instruction);
        // Curation stays with the task; each version keeps its own audit.
        assert_eq!(ws.task_row(&id).unwrap().notes, "tests too weak");
        assert_eq!(ws.task_row(&id).unwrap().status, TaskStatus::Accepted);
        let audit = |p: PathBuf| fs::read_to_string(p.join("audit.json")).unwrap();
        assert_eq!(audit(ws.task_dir(&id)), "{\"new\":2}");
        assert_eq!(audit(ws.versions_dir(&id).join("1")), "{\"old\":1}");
        let versions = ws.task_versions(&id).unwrap();
        assert_eq!(
            versions
                .iter()
                .map(|v| (v.version, v.parent, v.current))
                .collect::<Vec<_>>(),
            vec![(1, None, false), (2, Some(1), true)]
        );
        ws.restore_version(&id, 1).unwrap();
        assert_eq!(ws.load_task(&id).unwrap().instruction, task.instruction);
        assert_eq!(audit(ws.task_dir(&id)), "{\"old\":1}");
        assert_eq!(ws.load_version(&id, 2).unwrap().instruction, v2.instruction);
        assert_eq!(ws.next_version(&id).unwrap(), 3);
        let e = ws.restore_version(&id, 7).unwrap_err().to_string();
        assert!(e.contains("no version 7") && e.contains("1, 2"), "{e}");
    }

    #[test]
    fn a_broken_version_file_is_a_clear_error() {
        let (_d, ws, task) = ws_with_task();
        let id = task.id().to_string();
        let mut v2 = task.clone();
        set_version(&mut v2, 2, Some(1));
        ws.commit_version(&v2, &[]).unwrap();
        let kept = ws.versions_dir(&id).join("1/task.toml");
        let text = fs::read_to_string(&kept).unwrap();
        let broken = if text.contains("[provenance]") {
            text.replace("[provenance]", "[provenance]\nversion = \"one\"")
        } else {
            format!("{text}\n[provenance]\nversion = \"one\"\n")
        };
        fs::write(&kept, broken).unwrap();
        let e = ws.restore_version(&id, 1).unwrap_err().to_string();
        assert!(
            e.contains("versions/") && e.contains("provenance.version"),
            "{e}"
        );
        fs::write(ws.versions_dir(&id).join(EPISODE_VERSIONS_FILE), "[1,").unwrap();
        let e = ws.episode_versions(&id).unwrap_err().to_string();
        assert!(e.contains(EPISODE_VERSIONS_FILE), "{e}");
        // The current bundle is untouched by the failed restore.
        assert_eq!(ws.current_version(&id).unwrap(), 2);
    }

    fn episode(task: &str, run: &str) -> EpisodeRow {
        EpisodeRow {
            run_id: run.into(),
            task_id: task.into(),
            sample: 0,
            passed: false,
            reward: 0.0,
            turns: 1,
            end_reason: "done".into(),
            failure_mode: None,
            path: String::new(),
            rating: None,
            label: None,
            notes: String::new(),
            taken_over: false,
            failure_labels: Vec::new(),
            policy: "oracle".into(),
            duration_secs: 1.0,
            forked_from: None,
            created_at: String::new(),
        }
    }

    #[test]
    fn episodes_stay_attached_to_the_version_they_ran_on() {
        let (_d, ws, task) = ws_with_task();
        let id = task.id().to_string();
        for run in ["r1", "r2"] {
            ws.upsert_run(run, "eval", "oracle", &serde_json::json!({}))
                .unwrap();
        }
        ws.index_episode(&episode(&id, "r1")).unwrap();
        let mut v2 = task.clone();
        set_version(&mut v2, 2, Some(1));
        ws.commit_version(&v2, &[]).unwrap();
        ws.index_episode(&episode(&id, "r2")).unwrap();
        let on = |run: &str| ws.episode_version(&episode(&id, run)).unwrap();
        assert_eq!((on("r1"), on("r2")), (1, 2));
        // Restoring version 1 moves neither.
        ws.restore_version(&id, 1).unwrap();
        assert_eq!((on("r1"), on("r2")), (1, 2));
        let counts: Vec<(u32, usize)> = ws
            .task_versions(&id)
            .unwrap()
            .iter()
            .map(|v| (v.version, v.episodes))
            .collect();
        assert_eq!(counts, vec![(1, 1), (2, 1)]);
    }
}
