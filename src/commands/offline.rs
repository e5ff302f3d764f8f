//! `endless generate --offline`: procedural tasks from the offline families,
//! no LLM (the work is [`crate::workbench::generate::offline`]).

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use super::progress::{BarStyle, JobBar};
use crate::cli::GenerateArgs;
use crate::jobs::JobContext;
use crate::procgen::Split;
use crate::workbench::generate::{offline_shard, OfflineRequest};
use crate::workbench::Context;

/// `endless generate --offline ...`
pub fn run(ctx: &Context, args: &GenerateArgs) -> Result<ExitCode> {
    let req = OfflineRequest {
        count: args.count,
        seed: args.seed.unwrap_or(1),
        split: args.split.map(|s| match s {
            crate::cli::SplitArg::Train => Split::Train,
            crate::cli::SplitArg::Dev => Split::Dev,
        }),
        families: args.families.clone(),
    };
    let (job, rx) = JobContext::standalone("generate-offline");
    let bar = (!args.json).then(|| {
        JobBar::start(
            rx,
            BarStyle {
                template: "{spinner} generating {bar:30} {pos}/{len} tasks",
                stage_as_message: false,
                print_logs: false,
            },
        )
    });
    let report = offline_shard(ctx, &req, args.shard, &job);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    if args.json {
        print_json(&report)?;
    } else {
        for (family, tool) in &report.skipped_families {
            say_err!("skipped family {family}: it needs `{tool}`, which is not installed");
        }
        for f in &report.failed {
            say_err!("failed: {f}");
        }
        say!("{}", report.summary());
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
