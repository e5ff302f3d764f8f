//! `endless slurm submit|status`: a sharded command as a Slurm job array
//! with a dependent merge job (the work is [`crate::workbench::slurm`]).

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::SlurmCommand;
use crate::workbench::sharded_runs::{slurm_runs, ShardedRun};
use crate::workbench::slurm::{submit, JobStatus, SubmitRequest};
use crate::workbench::Context;

/// `endless slurm ...`
pub fn run(ctx: &Context, cmd: SlurmCommand) -> Result<ExitCode> {
    match cmd {
        SlurmCommand::Submit {
            shards,
            partition,
            time,
            cpus,
            mem,
            name,
            no_submit,
            json,
            command,
        } => {
            let job = submit(
                ctx,
                &SubmitRequest {
                    shards,
                    partition,
                    time,
                    cpus,
                    mem,
                    name,
                    submit: !no_submit,
                    command,
                },
            )?;
            if json {
                print_json(&job)?;
            }
            match (&job.array_job, &job.merge_job) {
                (Some(array), Some(merge)) => say_err!(
                    "submitted {}: job array {array} ({} shards), merge job {merge} after it; `endless slurm status {}` follows it",
                    job.name,
                    job.shards,
                    job.name
                ),
                _ => say_err!(
                    "wrote {} and {} (not submitted): `sbatch --array=0-{} {}`, then `sbatch --dependency=afterok:<array id> {}`",
                    job.array_script().display(),
                    job.merge_script().display(),
                    job.shards.saturating_sub(1),
                    job.array_script().display(),
                    job.merge_script().display()
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        SlurmCommand::Status { job, json } => {
            // The one reader the TUI's Jobs view uses too.
            let runs = slurm_runs(&ctx.workspace_root, job.as_deref())?;
            let states: Vec<&JobStatus> = runs.iter().map(|(s, _)| s).collect();
            if json {
                print_json(&states)?;
            } else if states.is_empty() {
                say!(
                    "no Slurm jobs submitted from {}",
                    ctx.workspace_root.display()
                );
            }
            let mut failed = 0;
            for (s, run) in &runs {
                if !json {
                    print_status(s, run);
                }
                failed += s.failed().len();
            }
            Ok(if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// A job's lines: array and merge state, each shard (queued, running,
/// done or failed, with Slurm's word), and what to do about failed ones.
fn print_status(s: &JobStatus, run: &ShardedRun) {
    let job = &s.job;
    let done = s.shards.iter().filter(|x| x.done).count();
    say!(
        "{} ({}): array {} — {done}/{} shards done; merge job {}: {}",
        job.name,
        job.kind,
        job.array_job.as_deref().unwrap_or("not submitted"),
        job.shards,
        job.merge_job.as_deref().unwrap_or("-"),
        s.merge
    );
    for shard in &run.shards {
        let items = shard.items.map_or(String::new(), |n| {
            format!(", {}", crate::plural::count(n, "task"))
        });
        say!(
            "  shard {}/{}: {} ({}){items}",
            shard.index,
            job.shards,
            shard.state,
            shard.detail
        );
    }
    for shard in s.failed() {
        say!(
            "  shard {} failed: log {}; re-run it alone with `sbatch --array={} {}`, then `endless workspace merge {}`",
            shard.shard,
            shard.log.display(),
            shard.shard,
            job.array_script().display(),
            job.dir.display()
        );
    }
    if let Some(note) = &s.sacct_note {
        say_err!("note: sacct: {note} (states from squeue and the shards' shard.json)");
    }
}
