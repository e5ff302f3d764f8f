//! `endless generate --offline`: procedural tasks from the offline families,
//! no LLM; also seeds a fresh workspace before the TUI opens.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::print_json;
use crate::cli::GenerateArgs;
use crate::procgen::{generate_batch_from, usable_families, Split};
use crate::store::{TaskStatus, Workspace};
use crate::workbench::Context;

/// What an offline generation wrote.
#[derive(Debug, Serialize)]
pub struct OfflineReport {
    pub requested: usize,
    pub written: usize,
    /// Already in the workspace (same family, seed and complexity).
    pub existing: usize,
    pub failed: Vec<String>,
    pub families: usize,
    /// Families left out because a tool they need is missing: (family, tool).
    pub skipped_families: Vec<(String, String)>,
    pub seconds: f64,
    pub tasks_per_sec: f64,
}

pub fn run(ctx: &Context, args: &GenerateArgs) -> Result<ExitCode> {
    let mut ws = ctx.workspace()?;
    let split = args.split.map(|s| match s {
        crate::cli::SplitArg::Train => Split::Train,
        crate::cli::SplitArg::Dev => Split::Dev,
    });
    let report = generate_offline(
        &mut ws,
        args.count,
        args.seed.unwrap_or(1),
        split,
        &args.families,
        !args.json,
    )?;
    if args.json {
        print_json(&report)?;
    } else {
        for (family, tool) in &report.skipped_families {
            say_err!("skipped family {family}: it needs `{tool}`, which is not installed");
        }
        for f in &report.failed {
            say_err!("failed: {f}");
        }
        say!(
            "{} tasks written ({} already present) from {} families in {:.2}s ({:.0} tasks/s)",
            report.written,
            report.existing,
            report.families,
            report.seconds,
            report.tasks_per_sec
        );
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Generate `count` tasks balanced over the usable families (only those
/// named in `only`, when it is not empty) and write the new ones into `ws`.
pub fn generate_offline(
    ws: &mut Workspace,
    count: usize,
    seed: u64,
    split: Option<Split>,
    only: &[String],
    progress: bool,
) -> Result<OfflineReport> {
    let start = Instant::now();
    let (mut families, skipped) = usable_families();
    if !only.is_empty() {
        for name in only {
            if crate::procgen::family(name).is_none() {
                let known: Vec<&str> = crate::procgen::families()
                    .iter()
                    .map(|f| f.name())
                    .collect();
                anyhow::bail!(
                    "--families: unknown family {name:?}; known: {}",
                    known.join(", ")
                );
            }
            if let Some((_, tool)) = skipped.iter().find(|(f, _)| f == name) {
                anyhow::bail!("--families: {name} needs `{tool}`, which is not installed");
            }
        }
        families.retain(|f| only.iter().any(|n| n == f.name()));
    }
    let bar = progress.then(|| {
        let bar = indicatif::ProgressBar::new(count as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} generating {bar:30} {pos}/{len} tasks",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let tasks = generate_batch_from(&families, count, seed, split);
    if let Some(bar) = &bar {
        bar.set_position(tasks.len() as u64 / 2);
    }
    let (fresh, existing): (Vec<_>, Vec<_>) = tasks.iter().partition(|t| !ws.has_task(t.id()));
    let items: Vec<(&crate::task::Task, bool)> = fresh.iter().map(|t| (*t, false)).collect();
    let results = ws.write_and_index(&items, TaskStatus::Candidate)?;
    let failed: Vec<String> = items
        .iter()
        .zip(&results)
        .filter_map(|((t, _), r)| r.as_ref().err().map(|e| format!("{}: {e}", t.id())))
        .collect();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(OfflineReport {
        requested: count,
        written: results.iter().filter(|r| r.is_ok()).count(),
        existing: existing.len(),
        failed,
        families: families.len(),
        skipped_families: skipped
            .into_iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect(),
        seconds,
        tasks_per_sec: tasks.len() as f64 / seconds.max(1e-9),
    })
}
