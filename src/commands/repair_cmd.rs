//! `endless tasks repair|versions|restore`: task repair through the
//! generator ([`crate::workbench::repair`]) and the versions it makes.

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use super::progress::{BarStyle, JobBar};
use crate::jobs::JobContext;
use crate::workbench::repair::{repair_tasks, RepairOutcome, RepairRequest};
use crate::workbench::Context;

/// `endless tasks repair IDS ...`: one line per task; non-zero exit when
/// any repair failed.
pub fn repair(ctx: &Context, req: &RepairRequest, json: bool) -> Result<ExitCode> {
    let (job, rx) = JobContext::standalone("repair");
    let bar = (!json).then(|| {
        JobBar::start(
            rx,
            BarStyle {
                template: "{prefix:>16} {bar:30} {pos}/{len}",
                stage_as_message: false,
                print_logs: true,
            },
        )
    });
    if let Some(bar) = &bar {
        bar.bar().set_prefix("tasks repaired");
    }
    let outcomes = repair_tasks(ctx, req, &job);
    if let Some(bar) = bar {
        bar.finish();
    }
    let outcomes = outcomes?;
    if json {
        print_json(&outcomes)?;
    } else {
        for o in &outcomes {
            match o {
                RepairOutcome::Repaired { .. } => say!("{}", o.line()),
                RepairOutcome::Failed { .. } => say_err!("{}", o.line()),
            }
        }
    }
    let all_repaired = outcomes
        .iter()
        .all(|o| matches!(o, RepairOutcome::Repaired { .. }));
    Ok(if all_repaired {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `endless tasks versions ID`: one line per version, oldest first.
pub fn versions(ctx: &Context, id: &str, json: bool) -> Result<ExitCode> {
    let ws = ctx.workspace()?;
    let versions = ws.task_versions(id)?;
    if json {
        print_json(&versions)?;
        return Ok(ExitCode::SUCCESS);
    }
    for v in &versions {
        let parent = v.parent.map_or(String::new(), |p| format!(" from {p}"));
        let model = if v.model.is_empty() {
            String::new()
        } else {
            format!(" by {}", v.model)
        };
        say!(
            "{}{:>3}{parent}{model}  {}  {} episode(s)",
            if v.current { "*" } else { " " },
            v.version,
            v.created,
            v.episodes
        );
        for r in &v.reasons {
            say!("       reason: {r}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `endless tasks restore ID --version N`.
pub fn restore(ctx: &Context, id: &str, version: u32) -> Result<ExitCode> {
    let ws = ctx.workspace()?;
    let was = ws.current_version(id)?;
    ws.restore_version(id, version)?;
    ws.index_audit_file(id)?;
    say!("{id}: version {version} is current again (version {was} is kept)");
    Ok(ExitCode::SUCCESS)
}
