//! Importing task directories of any supported format, in parallel, with
//! per-task failures reported and never a half-imported task visible.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use super::tasks::index_task_in;
use super::{StoreError, TaskStatus, Workspace};
use crate::fsutil::{replace_dir_atomic, AtomicDir};
use crate::task::formats::Format;
use crate::task::ReadLimits;
use crate::task::{save_native_atomic, validate, write_native, Task};

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

/// Find task directories under `paths`: a path that is a task is taken as
/// is; otherwise its subdirectories are searched (up to 4 levels deep).
pub fn discover(paths: &[PathBuf], forced: Option<Format>) -> Vec<(PathBuf, Option<Format>)> {
    fn walk(
        dir: &Path,
        depth: usize,
        forced: Option<Format>,
        out: &mut Vec<(PathBuf, Option<Format>)>,
    ) {
        if let Some(format) = Format::detect(dir) {
            out.push((dir.to_path_buf(), Some(forced.unwrap_or(format))));
            return;
        }
        if depth == 0 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut children: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        children.sort();
        for child in children {
            walk(&child, depth - 1, forced, out);
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let before = out.len();
        walk(p, 4, forced, &mut out);
        if out.len() == before {
            out.push((p.clone(), None));
        }
    }
    out
}

/// A task read from disk with its format, or why it could not be read.
type ReadOutcome = Result<(Task, Format), String>;

/// Import every task found under `paths` into `ws`.
pub fn import_paths(
    ws: &mut Workspace,
    paths: &[PathBuf],
    forced: Option<Format>,
    on_conflict: OnConflict,
) -> Result<ImportReport, StoreError> {
    let found = discover(paths, forced);
    let limits = ReadLimits::default();
    let read: Vec<(PathBuf, ReadOutcome)> = found
        .into_par_iter()
        .map(|(path, format)| {
            let result = match format {
                None => Err(format!(
                    "{}: no task found (expected task.toml, task.json or task.yaml)",
                    path.display()
                )),
                Some(format) => format
                    .read(&path, &limits)
                    .map_err(|e| e.to_string())
                    .and_then(|task| {
                        let problems = validate(&task);
                        match problems.first() {
                            Some(p) => Err(format!("{}: {p}", path.display())),
                            None => Ok((task, format)),
                        }
                    }),
            };
            (path, result)
        })
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
