//! `endless workspace merge OTHER...`, `endless workspace shards DIR`,
//! `endless workspace rebuild`

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};

use super::json::print_json;
use crate::cli::WorkspaceCommand;
use crate::plural::count;
use crate::store::SHARD_FILE;
use crate::workbench::shards::{make_shard_workspaces, merge_shards, shard_workspaces};
use crate::workbench::{rebuild_index, Context};

/// `endless workspace ...`
pub fn run(ctx: &Context, cmd: WorkspaceCommand) -> Result<ExitCode> {
    match cmd {
        WorkspaceCommand::Rebuild { json } => {
            let ws = ctx.workspace()?;
            let report = rebuild_index(&ws)
                .with_context(|| format!("rebuilding the index of {}", ws.root().display()))?;
            if json {
                print_json(&report)?;
            }
            say_err!("rebuilt {}: {}", ws.root().display(), report.summary());
            for p in &report.problems {
                say_err!("skipped: {p}");
            }
            Ok(ExitCode::SUCCESS)
        }
        WorkspaceCommand::Merge {
            other,
            allow_partial,
            json,
        } => merge(ctx, &other, allow_partial, json),
        WorkspaceCommand::Shards { dir, count, json } => {
            let ws = ctx.workspace()?;
            let made = make_shard_workspaces(&ws, &dir, count)?;
            if json {
                let list: Vec<_> = made
                    .iter()
                    .map(|(p, r)| serde_json::json!({ "path": p, "linked": r.linked, "present": r.present }))
                    .collect();
                print_json(&list)?;
            }
            for (path, r) in &made {
                say_err!(
                    "{}: {} task bundles linked, {} already there",
                    path.display(),
                    r.linked,
                    r.present
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `endless workspace merge OTHER... [--allow-partial]`: plain workspaces
/// one by one, shard workspaces (or directories of them) as one job.
pub(crate) fn merge(
    ctx: &Context,
    other: &[PathBuf],
    allow_partial: bool,
    json: bool,
) -> Result<ExitCode> {
    let mut ws = ctx.workspace()?;
    let (shard_paths, plain): (Vec<PathBuf>, Vec<PathBuf>) =
        other.iter().cloned().partition(|p| is_shards(p));
    let mut reports = Vec::new();
    for path in &plain {
        let report = ws
            .merge_from(path)
            .with_context(|| format!("merging {} into {}", path.display(), ws.root().display()))?;
        reports.push(report);
    }
    let mut job = None;
    if !shard_paths.is_empty() {
        let shards = shard_workspaces(&shard_paths)?;
        let merged = merge_shards(&mut ws, &shards, allow_partial)
            .with_context(|| format!("merging shards into {}", ws.root().display()))?;
        if !merged.job.missing.is_empty() {
            say_err!("partial merge: {}", merged.job.missing_line());
        }
        if let Some(run) = &merged.finished {
            say_err!("finished run {run} over the merged shards");
        }
        reports.extend(merged.merges.iter().cloned());
        job = Some(merged);
    }
    // Audit reports merged or brought in with new tasks join the index.
    for problem in crate::workbench::reindex_audits(&ws)? {
        say_err!("note: {problem}");
    }
    if json {
        match &job {
            Some(job) if plain.is_empty() => print_json(job)?,
            None if reports.len() == 1 => print_json(&reports[0])?,
            _ => print_json(&reports)?,
        }
    }
    let mut conflicts = 0;
    for report in &reports {
        say_err!(
            "merged {}: {} and {}, {} and {} added, {} already here, {}",
            report.from.display(),
            count(report.tasks_added, "task"),
            count(report.verdicts_merged, "verdict"),
            count(report.runs_added, "run"),
            count(report.episodes_added, "episode"),
            count(report.episodes_unchanged, "episode"),
            count(report.conflicts.len(), "conflict")
        );
        if !report.missing_tasks.is_empty() {
            say_err!(
                "note: this workspace lacks tasks {} (their episodes were merged)",
                report.missing_tasks.join(", ")
            );
        }
        for c in &report.conflicts {
            say_err!("conflict: {c}");
        }
        conflicts += report.conflicts.len();
    }
    Ok(if conflicts == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// Whether `path` is a shard workspace (it has a `shard.json`) or a
/// directory of them (no `endless.db`, some `shard-*` in it).
fn is_shards(path: &Path) -> bool {
    if path.join(SHARD_FILE).is_file() {
        return true;
    }
    if path.join("endless.db").exists() {
        return false;
    }
    std::fs::read_dir(path).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("shard-"))
    })
}

/// Asks the user whether to create a workspace at a path.
pub type AskCreate<'a> = &'a mut dyn FnMut(&Path) -> Result<bool>;

/// Check that an explicitly named workspace (`--workspace`,
/// `ENDLESS_WORKSPACE`) exists, or may be created: with `create`
/// (`--create`), or when `ask` (the TUI, on a terminal) gets a yes. The
/// default workspace needs neither.
pub fn check_workspace_exists(
    named: Option<&Path>,
    create: bool,
    ask: Option<AskCreate<'_>>,
) -> Result<()> {
    let Some(path) = named else {
        return Ok(());
    };
    if path.exists() {
        if !path.is_dir() {
            bail!("workspace {} is not a directory", path.display());
        }
        return Ok(());
    }
    let create = create
        || match ask {
            Some(ask) => ask(path)?,
            None => false,
        };
    if !create {
        bail!(
            "workspace {} does not exist: pass --create to make a new one there (or check the path)",
            path.display()
        );
    }
    std::fs::create_dir_all(path)
        .with_context(|| format!("creating workspace {}", path.display()))?;
    Ok(())
}

/// Ask on the terminal whether to create the workspace at `path`
/// (`false` when stdin is not a terminal: nobody can answer).
pub fn ask_to_create(path: &Path) -> Result<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return Ok(false);
    }
    eprint!(
        "endless: workspace {} does not exist. Create it? [y/N] ",
        crate::task::terminal_safe(&path.display().to_string())
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_that_does_not_exist_needs_create_or_a_yes() {
        let dir = tempfile::tempdir().unwrap();
        let typo = dir.path().join("wrokspace");
        let err = check_workspace_exists(Some(&typo), false, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist: pass --create"), "{err}");
        assert!(!typo.exists(), "nothing is created");
        let mut no = |_: &Path| Ok(false);
        assert!(check_workspace_exists(Some(&typo), false, Some(&mut no)).is_err());
        assert!(!typo.exists());
        let mut yes = |_: &Path| Ok(true);
        check_workspace_exists(Some(&typo), false, Some(&mut yes)).unwrap();
        assert!(typo.is_dir());
        let other = dir.path().join("new");
        check_workspace_exists(Some(&other), true, None).unwrap();
        assert!(other.is_dir());
        // An existing (empty) directory and the default need nothing.
        check_workspace_exists(Some(dir.path()), false, None).unwrap();
        check_workspace_exists(None, false, None).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(check_workspace_exists(Some(&file), true, None).is_err());
    }
}
