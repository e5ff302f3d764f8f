//! `endless episodes export --format atif`, `endless episodes import DIR`

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::{EpisodeFormat, EpisodesCommand};
use crate::workbench::episodes_export::{export_atif, ExportRequest};
use crate::workbench::import_runs::import_harbor;
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
        EpisodesCommand::Import { dir, run, json } => {
            let ws = ctx.workspace()?;
            let report = import_harbor(&ws, &dir, run.as_deref())?;
            if json {
                print_json(&report)?;
            }
            say_err!(
                "imported {} as run {}: {}, {} passed, {}",
                dir.display(),
                report.run,
                crate::plural::count(report.episodes, "episode"),
                report.passed,
                crate::plural::count(report.errors, "error")
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
