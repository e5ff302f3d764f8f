//! `endless episodes export --format atif`, `endless episodes import DIR`,
//! `endless episodes list`

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::{EpisodeFormat, EpisodesCommand};
use crate::workbench::episodes_export::{export_atif, ExportRequest};
use crate::workbench::import_runs::{import_harbor_with, ImportOptions};
use crate::workbench::Context;

/// `endless episodes ...`
pub fn run(ctx: &Context, cmd: EpisodesCommand) -> Result<ExitCode> {
    match cmd {
        EpisodesCommand::Export {
            format: EpisodeFormat::Atif,
            run,
            task,
            out,
            json,
        } => {
            let ws = ctx.workspace()?;
            let req = ExportRequest {
                run,
                tasks: task,
                out,
            };
            let written = export_atif(&ws, &req)?;
            if json {
                print_json(&written)?;
            }
            say_err!(
                "wrote {} ATIF trajectories under {}",
                written.len(),
                req.out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        EpisodesCommand::Import {
            dir,
            run,
            replace,
            skip_unfinished,
            json,
        } => {
            let ws = ctx.workspace()?;
            let options = ImportOptions {
                run,
                replace,
                skip_unfinished,
            };
            let report = import_harbor_with(&ws, &dir, &options)?;
            if json {
                print_json(&report)?;
            }
            say_err!(
                "{} {} as run {}: {}, {} passed, {}",
                if report.replaced {
                    "re-imported"
                } else {
                    "imported"
                },
                dir.display(),
                report.run,
                crate::plural::count(report.episodes, "episode"),
                report.passed,
                crate::plural::count(report.errors, "error")
            );
            if !report.skipped.is_empty() {
                say_err!(
                    "left out {} that did not finish: {}",
                    crate::plural::count(report.skipped.len(), "trial"),
                    report.skipped.join(", ")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        EpisodesCommand::List { run, json } => {
            let ws = ctx.workspace()?;
            let rows = ws.list_episodes(run.as_deref())?;
            if json {
                print_json(&rows)?;
                return Ok(ExitCode::SUCCESS);
            }
            for r in &rows {
                let outcome = if r.passed { "passed" } else { "failed" };
                let labels = if r.failure_labels.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", r.failure_labels.join(", "))
                };
                say!(
                    "{}  {}  #{}  {outcome}  reward {:.2}  {}{labels}",
                    r.run_id,
                    r.task_id,
                    r.sample,
                    r.reward,
                    r.end_reason
                );
            }
            say_err!("{}", crate::plural::count(rows.len(), "episode"));
            Ok(ExitCode::SUCCESS)
        }
    }
}
