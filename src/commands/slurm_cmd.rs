//! `endless slurm submit|status|rerun|merge`: a sharded command (or a
//! chain of them) as Slurm job arrays with dependent merge jobs (the work
//! is [`crate::workbench::slurm`] and [`crate::workbench::slurm_rerun`]).

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::SlurmCommand;
use crate::workbench::sharded_runs::{slurm_runs, ShardedRun};
use crate::workbench::shards::shard_dir;
use crate::workbench::slurm::{submit, JobStatus, SlurmJob, SubmitRequest};
use crate::workbench::slurm_options::{sh_quote, SbatchOptions};
use crate::workbench::slurm_rerun::{job as find_job, record_merge, rerun};
use crate::workbench::Context;

/// `endless slurm ...`
pub fn run(ctx: &Context, cmd: SlurmCommand) -> Result<ExitCode> {
    match cmd {
        SlurmCommand::Submit {
            shards,
            partition,
            account,
            qos,
            time,
            cpus,
            mem,
            gres,
            constraint,
            exclusive,
            sbatch_arg,
            max_parallel,
            requeue_before,
            after,
            name,
            no_submit,
            json,
            command,
        } => {
            let extra = ctx
                .config
                .slurm
                .extra
                .iter()
                .map(|a| ("[slurm] extra".to_string(), a.clone()))
                .chain(sbatch_arg.into_iter().map(|a| ("--sbatch-arg".into(), a)))
                .collect();
            let jobs = submit(
                ctx,
                &SubmitRequest {
                    shards,
                    sbatch: SbatchOptions {
                        partition,
                        account,
                        qos,
                        time,
                        cpus,
                        mem,
                        gres,
                        constraint,
                        exclusive,
                        requeue_before,
                        max_parallel,
                        extra,
                    },
                    name,
                    after,
                    submit: !no_submit,
                    command,
                },
            )?;
            if json {
                match jobs.as_slice() {
                    [one] => print_json(one)?,
                    _ => print_json(&jobs)?,
                }
            }
            for job in &jobs {
                say_submitted(ctx, job);
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
        SlurmCommand::Rerun { job, json } => {
            let (job, again) = rerun(ctx, &job)?;
            if json {
                print_json(&again)?;
            }
            say_err!(
                "re-running shards {} of {}: job array {}, merge job {} after it; `endless slurm status {}` follows it",
                again
                    .shards
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                job.name,
                again.array_job,
                again.merge_job,
                job.name
            );
            Ok(ExitCode::SUCCESS)
        }
        SlurmCommand::Merge {
            job,
            allow_partial,
            json,
        } => {
            let job = find_job(ctx, &job)?;
            let code = super::workspace_cmd::merge(
                ctx,
                std::slice::from_ref(&job.dir),
                allow_partial,
                json,
            )?;
            let missing = (0..job.shards)
                .filter(|&i| {
                    !crate::store::read_shard_record(&shard_dir(&job.dir, i))
                        .ok()
                        .flatten()
                        .is_some_and(|r| r.done)
                })
                .collect();
            let record = record_merge(&job, missing)?;
            say_err!(
                "recorded the merge of {} ({}) in {}",
                job.name,
                record
                    .job
                    .map_or("by hand".to_string(), |j| format!("by job {j}")),
                job.merge_record_path().display()
            );
            Ok(code)
        }
    }
}

/// What `submit` did with `job`: submitted, or only written.
fn say_submitted(ctx: &Context, job: &SlurmJob) {
    let main = sh_quote(&ctx.workspace_root.to_string_lossy());
    match (&job.array_job, &job.merge_job) {
        (Some(array), Some(merge)) => {
            let after = match (&job.after, &job.prepare_job) {
                (Some(a), Some(p)) => {
                    format!(" after the merge of {a} (shard workspaces made by job {p})")
                }
                _ => String::new(),
            };
            say_err!(
                "submitted {}: job array {array} ({} shards){after}, merge job {merge} after it; `endless --workspace {main} slurm status {}` follows it",
                job.name,
                job.shards,
                job.name
            )
        }
        _ => say_err!(
            "wrote {} and {} (not submitted): the same `endless slurm submit` without --no-submit submits them",
            job.array_script().display(),
            job.merge_script().display(),
        ),
    }
}

/// A job's lines: array and merge state, each shard (queued, running,
/// done or failed, with Slurm's word), and what to do about failed ones.
fn print_status(s: &JobStatus, run: &ShardedRun) {
    let job = &s.job;
    let done = s.shards.iter().filter(|x| x.done).count();
    let reruns = match job.reruns.len() {
        0 => String::new(),
        n => format!(
            " (re-run {}: last array {})",
            crate::plural::count(n, "time"),
            job.reruns[n - 1].array_job
        ),
    };
    say!(
        "{} ({}): array {}{reruns} — {done}/{} shards done; merge job {}: {}",
        job.name,
        job.kind,
        job.array_job.as_deref().unwrap_or("not submitted"),
        job.shards,
        job.latest_merge_job().unwrap_or("-"),
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
    let main = sh_quote(&job.main_workspace().to_string_lossy());
    let failed = s.failed();
    for shard in &failed {
        say!(
            "  shard {} failed: log {}; re-run it alone with `sbatch --array={} {}`, then `endless --workspace {main} slurm merge {}`",
            shard.shard,
            shard.log.display(),
            shard.shard,
            sh_quote(&job.array_script().to_string_lossy()),
            job.name
        );
    }
    if !failed.is_empty() {
        say!(
            "  re-run the failed shards and merge: `endless --workspace {main} slurm rerun {}`",
            job.name
        );
    }
    if let Some(note) = &s.sacct_note {
        say_err!("note: sacct: {note} (states from squeue and the shards' shard.json)");
    }
}
