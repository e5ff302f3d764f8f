//! `endless workspace merge OTHER`

use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::print_json;
use crate::cli::WorkspaceCommand;
use crate::workbench::Context;

/// `endless workspace ...`
pub fn run(ctx: &Context, cmd: WorkspaceCommand) -> Result<ExitCode> {
    match cmd {
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
