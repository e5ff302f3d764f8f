//! `endless workspace merge OTHER`, `endless workspace rebuild`

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};

use super::print_json;
use crate::cli::WorkspaceCommand;
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
        WorkspaceCommand::Merge { other, json } => {
            let mut ws = ctx.workspace()?;
            let report = ws.merge_from(&other).with_context(|| {
                format!("merging {} into {}", other.display(), ws.root().display())
            })?;
            if json {
                print_json(&report)?;
            }
            say_err!(
                "merged {}: {} runs and {} episodes added, {} episodes already here, {} conflicts",
                other.display(),
                report.runs_added,
                report.episodes_added,
                report.episodes_unchanged,
                report.conflicts.len()
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
            Ok(if report.conflicts.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
    }
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
