//! Importing task directories of any supported format, in parallel, with
//! per-task failures reported and never a half-imported task visible.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use super::task_index::index_task_in;
use super::{StoreError, TaskStatus, Workspace};
use crate::fsutil::{replace_dir_atomic, AtomicDir};
use crate::task::formats::Format;
use crate::task::{save_native_atomic, validate, write_native, Task};
use crate::task::{BundleDir, ReadLimits};

/// What to do when an imported task's id already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnConflict {
    /// Report the task as failed (identical content counts as unchanged).
    #[default]
    Fail,
    /// Leave the existing task alone.
    Skip,
    /// Keep both: the new one gets a `-2`, `-3`, ... suffix.
    Rename,
    /// Replace the existing bundle.
    Replace,
}

/// The outcome for one discovered task directory.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ImportOutcome {
    /// Written to the workspace and indexed (new tasks as candidates).
    Imported {
        /// The directory it was read from.
        path: PathBuf,
        /// The id it was stored under (renamed on a `rename` conflict).
        id: String,
        /// The format it was read as.
        format: Format,
    },
    /// Already in the workspace with identical content; nothing written.
    Unchanged {
        /// The directory it was read from.
        path: PathBuf,
        /// The existing task's id.
        id: String,
    },
    /// Left out because its id exists (`--on-conflict skip`).
    Skipped {
        /// The directory it was read from.
        path: PathBuf,
        /// The id that already exists.
        id: String,
        /// Why it was skipped.
        reason: String,
    },
    /// Could not be read, validated, or written.
    Failed {
        /// The directory (or given path) it was read from.
        path: PathBuf,
        /// What went wrong, for humans.
        error: String,
    },
}

/// All outcomes, in discovery order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// One outcome per discovered directory or given path.
    pub outcomes: Vec<ImportOutcome>,
}

impl ImportReport {
    /// Number of tasks written.
    pub fn imported(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| matches!(o, ImportOutcome::Imported { .. }))
            .count()
    }

    /// Number of failures.
    pub fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| matches!(o, ImportOutcome::Failed { .. }))
            .count()
    }
}

impl Workspace {
    /// Write bundles in parallel (each atomically; `true` replaces an existing
    /// one), then index the written ones in one transaction. Returns one result
    /// per item.
    pub fn write_and_index(
        &mut self,
        items: &[(&Task, bool)],
        status: TaskStatus,
    ) -> Result<Vec<Result<(), String>>, StoreError> {
        let tasks_dir = self.tasks_dir();
        let results: Vec<Result<(), String>> = items
            .par_iter()
            .map(|(task, replace)| {
                let target = tasks_dir.join(task.id());
                if *replace {
                    let staging = AtomicDir::new(&tasks_dir.join(format!(".new-{}", task.id())))
                        .map_err(|e| e.to_string())?;
                    write_native(task, staging.path()).map_err(|e| e.to_string())?;
                    replace_dir_atomic(staging.path(), &target).map_err(|e| e.to_string())
                } else {
                    save_native_atomic(task, &target).map_err(|e| e.to_string())
                }
            })
            .collect();
        self.transaction(|tx| {
            for ((task, _), result) in items.iter().zip(&results) {
                if result.is_ok() {
                    index_task_in(tx, task, status)?;
                }
            }
            Ok(())
        })?;
        Ok(results)
    }
}

/// One directory [`discover`] found: which given path it lies under, where
/// below it, and its format (`None`: no task there).
struct Found {
    /// Index into the given paths (and their opened directories).
    top: usize,
    /// The real directories from that path down to this one.
    rel: PathBuf,
    /// The path, for messages and reports.
    path: PathBuf,
    /// Its format, if it is a task.
    format: Option<Format>,
}

/// Levels below a given path that are searched for tasks.
const DISCOVER_DEPTH: usize = 4;

/// Open each given path (links in it are followed: the user named it).
fn open_tops(paths: &[PathBuf]) -> Vec<Option<BundleDir>> {
    paths.iter().map(|p| BundleDir::open(p).ok()).collect()
}

/// Find task directories below the opened `tops` (see [`discover`]):
/// every lookup goes through directory descriptors, and links to
/// directories are never entered.
fn discover_in(
    paths: &[PathBuf],
    tops: &[Option<BundleDir>],
    forced: Option<Format>,
) -> Vec<Found> {
    fn walk(
        dir: &BundleDir,
        top: usize,
        rel: &Path,
        depth: usize,
        forced: Option<Format>,
        out: &mut Vec<Found>,
    ) {
        if let Some(format) = Format::detect_in(dir) {
            out.push(Found {
                top,
                rel: rel.to_path_buf(),
                path: dir.path().to_path_buf(),
                format: Some(forced.unwrap_or(format)),
            });
            return;
        }
        if depth == 0 {
            return;
        }
        for name in dir.subdirs().unwrap_or_default() {
            let child_rel = rel.join(&name);
            if let Ok(child) = dir.open_subdir(Path::new(&name)) {
                walk(&child, top, &child_rel, depth - 1, forced, out);
            }
        }
    }
    let mut out = Vec::new();
    for (top, (p, dir)) in paths.iter().zip(tops).enumerate() {
        let before = out.len();
        if let Some(dir) = dir {
            walk(dir, top, Path::new(""), DISCOVER_DEPTH, forced, &mut out);
        }
        if out.len() == before {
            out.push(Found {
                top,
                rel: PathBuf::new(),
                path: p.clone(),
                format: None,
            });
        }
    }
    out
}

/// Find task directories under `paths`: a path that is a task is taken as
/// is; otherwise its subdirectories are searched (up to 4 levels deep;
/// links to directories are not followed).
pub fn discover(paths: &[PathBuf], forced: Option<Format>) -> Vec<(PathBuf, Option<Format>)> {
    let tops = open_tops(paths);
    discover_in(paths, &tops, forced)
        .into_iter()
        .map(|f| (f.path, f.format))
        .collect()
}

/// A task read from disk with its format, or why it could not be read.
type ReadOutcome = Result<(Task, Format), String>;

/// Read and validate the task `found` names, reaching it from its given
/// path's descriptor through real directories only (a directory swapped
/// for a link since it was discovered is refused, not followed).
fn read_found(found: &Found, tops: &[Option<BundleDir>], limits: &ReadLimits) -> ReadOutcome {
    let path = &found.path;
    let Some(format) = found.format else {
        return Err(format!(
            "{}: no task found (expected task.toml, task.json or task.yaml)",
            path.display()
        ));
    };
    let top = tops
        .get(found.top)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("{}: cannot open the directory", path.display()))?;
    let dir = top.open_subdir(&found.rel).map_err(|e| e.to_string())?;
    let task = format.read_in(&dir, limits).map_err(|e| e.to_string())?;
    match validate(&task).first() {
        Some(p) => Err(format!("{}: {p}", path.display())),
        None => Ok((task, format)),
    }
}

/// Import every task found under `paths` into `ws`. Bundles are read
/// through directory descriptors only (see [`BundleDir`]): a bundle changed
/// while it is imported never brings in a file from outside it.
pub fn import_paths(
    ws: &mut Workspace,
    paths: &[PathBuf],
    forced: Option<Format>,
    on_conflict: OnConflict,
) -> Result<ImportReport, StoreError> {
    let tops = open_tops(paths);
    let found = discover_in(paths, &tops, forced);
    let limits = ReadLimits::default();
    let read: Vec<(PathBuf, ReadOutcome)> = found
        .par_iter()
        .map(|f| (f.path.clone(), read_found(f, &tops, &limits)))
        .collect();

    // Resolve ids one by one (cheap), then write bundles in parallel.
    let mut taken: BTreeSet<String> = ws.task_ids()?.into_iter().collect();
    let mut outcomes = Vec::with_capacity(read.len());
    let mut to_write: Vec<(usize, Task, bool)> = Vec::new();
    for (path, result) in read {
        let (mut task, format) = match result {
            Ok(ok) => ok,
            Err(error) => {
                outcomes.push(ImportOutcome::Failed { path, error });
                continue;
            }
        };
        let id = task.id().to_string();
        let mut replace = false;
        if taken.contains(&id) {
            let existing = ws.has_task(&id).then(|| ws.load_task(&id).ok()).flatten();
            if existing.as_ref() == Some(&task) {
                outcomes.push(ImportOutcome::Unchanged { path, id });
                continue;
            }
            match on_conflict {
                OnConflict::Fail => {
                    outcomes.push(ImportOutcome::Failed {
                        path,
                        error: format!(
                            "task id {id:?} already exists with different content; use --on-conflict rename|skip|replace"
                        ),
                    });
                    continue;
                }
                OnConflict::Skip => {
                    outcomes.push(ImportOutcome::Skipped {
                        path,
                        id,
                        reason: "id exists".into(),
                    });
                    continue;
                }
                OnConflict::Rename => {
                    let new_id = (2..)
                        .map(|n| format!("{id}-{n}"))
                        .find(|c| !taken.contains(c))
                        .unwrap_or(id);
                    task.meta.task.id = new_id;
                }
                OnConflict::Replace => replace = ws.has_task(&id),
            }
        }
        taken.insert(task.id().to_string());
        outcomes.push(ImportOutcome::Imported {
            path,
            id: task.id().to_string(),
            format,
        });
        to_write.push((outcomes.len() - 1, task, replace));
    }

    let items: Vec<(&Task, bool)> = to_write.iter().map(|(_, t, r)| (t, *r)).collect();
    let results = ws.write_and_index(&items, TaskStatus::Candidate)?;
    for ((i, _, _), result) in to_write.iter().zip(results) {
        if let Err(error) = result {
            let path = match &outcomes[*i] {
                ImportOutcome::Imported { path, .. } => path.clone(),
                _ => PathBuf::new(),
            };
            outcomes[*i] = ImportOutcome::Failed { path, error };
        }
    }
    Ok(ImportReport { outcomes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A native bundle at `dir`.
    fn bundle(dir: &Path, id: &str) {
        let mut t = Task {
            meta: Default::default(),
            instruction: "do it".into(),
            truth: String::new(),
            environment: Default::default(),
            tests: Default::default(),
            solution: Default::default(),
        };
        t.meta.task.id = id.into();
        t.tests
            .insert_text("test_final_state.py", "def test_x():\n    pass\n");
        t.meta.verifier.final_tests = vec!["test_final_state.py".into()];
        save_native_atomic(&t, dir).unwrap();
    }

    #[test]
    fn discovery_never_enters_links_to_directories() {
        let outside = tempfile::tempdir().unwrap();
        bundle(&outside.path().join("elsewhere"), "elsewhere");
        let top = tempfile::tempdir().unwrap();
        bundle(&top.path().join("real"), "real");
        symlink(outside.path(), top.path().join("link")).unwrap();
        let found = discover(&[top.path().to_path_buf()], None);
        assert_eq!(
            found,
            vec![(top.path().join("real"), Some(Format::Native))],
            "the linked directory is not searched"
        );
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_discovery_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        bundle(&outside.path().join("secret"), "secret");
        let top = tempfile::tempdir().unwrap();
        let task_dir = top.path().join("t");
        bundle(&task_dir, "t");
        let paths = [top.path().to_path_buf()];
        let tops = open_tops(&paths);
        let found = discover_in(&paths, &tops, None);
        assert_eq!(found.len(), 1);
        // Swapped between discovery and reading.
        std::fs::rename(&task_dir, top.path().join("moved")).unwrap();
        symlink(outside.path().join("secret"), &task_dir).unwrap();
        let err = read_found(&found[0], &tops, &ReadLimits::default()).unwrap_err();
        assert!(err.contains(&*task_dir.to_string_lossy()), "{err}");
        assert!(err.contains("Not a directory"), "{err}");
    }

    #[test]
    fn a_bundle_file_linking_outside_fails_naming_it_and_writes_nothing() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("canary"), "CANARY").unwrap();
        let src = tempfile::tempdir().unwrap();
        let dir = src.path().join("t");
        bundle(&dir, "t");
        std::fs::remove_file(dir.join("instruction.md")).unwrap();
        symlink(outside.path().join("canary"), dir.join("instruction.md")).unwrap();
        let ws_dir = tempfile::tempdir().unwrap();
        let mut ws = Workspace::open(ws_dir.path()).unwrap();
        let report =
            import_paths(&mut ws, std::slice::from_ref(&dir), None, OnConflict::Fail).unwrap();
        match &report.outcomes[..] {
            [ImportOutcome::Failed { error, .. }] => {
                assert!(
                    error.contains(&*dir.join("instruction.md").to_string_lossy()),
                    "{error}"
                );
                assert!(error.contains("outside the task directory"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!ws.has_task("t"));
    }
}
