//! `endless slurm rerun NAME`: the failed shards of a submission as a new
//! job array (the kept `array.sbatch`) with a merge job after it, recorded
//! in its `job.json`; and the record of a merge (`merged.json`), which
//! `endless slurm merge NAME` writes, by its merge job or by hand.

use anyhow::{bail, Context as _, Result};

use super::shards::make_shard_workspaces;
use super::slurm::{jobs, sbatch, status, write_job, MergeRecord, Rerun, ShardStatus, SlurmJob};
use super::slurm_options::SbatchOptions;
use super::Context;

/// Array task ids as sbatch's `--array` takes them: `1,4,7`.
fn task_list(shards: &[u32]) -> String {
    shards
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The submission named `name` of this workspace.
pub fn job(ctx: &Context, name: &str) -> Result<SlurmJob> {
    jobs(ctx, Some(name))?
        .into_iter()
        .next()
        .with_context(|| format!("no Slurm job {name} in this workspace"))
}

/// Submit the failed shards of submission `name` again, as one job array
/// from its kept script, and a merge job after it (afterok). Refused
/// while a shard is still queued or running, or when none failed.
pub fn rerun(ctx: &Context, name: &str) -> Result<(SlurmJob, Rerun)> {
    let mut job = job(ctx, name)?;
    if job.array_job.is_none() {
        bail!("job {name} was not submitted: `endless slurm submit --name {name} ...` without --no-submit submits it");
    }
    let state = status(&job)?;
    let waiting: Vec<&ShardStatus> = state
        .shards
        .iter()
        .filter(|s| !s.done && !state.failed().iter().any(|f| f.shard == s.shard))
        .collect();
    if !waiting.is_empty() {
        bail!(
            "job {name}: shards {} are still {}: wait for them (`endless slurm status {name}`)",
            task_list(&waiting.iter().map(|s| s.shard).collect::<Vec<_>>()),
            waiting[0].state
        );
    }
    let failed: Vec<u32> = state.failed().iter().map(|s| s.shard).collect();
    if failed.is_empty() {
        bail!(
            "job {name}: no shard failed, nothing to re-run (merge: {})",
            state.merge
        );
    }
    // Shards whose workspaces a failed prepare job never made get them
    // now (the job they waited for merged, or its tasks are missing).
    if failed.iter().any(|&i| {
        !super::shards::shard_dir(&job.dir, i)
            .join("endless.db")
            .exists()
    }) {
        make_shard_workspaces(&ctx.workspace()?, &job.dir, job.shards)?;
    }
    let opts = SbatchOptions {
        max_parallel: job.max_parallel,
        ..Default::default()
    };
    let array = sbatch(&[opts.array_arg(&task_list(&failed))], &job.array_script())?;
    let merge = sbatch(
        &[
            format!("--dependency=afterok:{array}"),
            "--kill-on-invalid-dep=yes".into(),
        ],
        &job.merge_script(),
    )?;
    let rerun = Rerun {
        shards: failed,
        array_job: array,
        merge_job: merge,
        at: crate::store::now(),
    };
    job.reruns.push(rerun.clone());
    write_job(&job)?;
    Ok((job, rerun))
}

/// Record that `job` was merged now (by the Slurm job of
/// `$SLURM_JOB_ID`, else by hand), without shards `missing`.
pub fn record_merge(job: &SlurmJob, missing: Vec<u32>) -> Result<MergeRecord> {
    let by = std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|id| !id.is_empty() && id.bytes().all(|c| c.is_ascii_digit()));
    let record = MergeRecord {
        at: crate::store::now(),
        job: by,
        missing,
    };
    let path = job.merge_record_path();
    let mut json = serde_json::to_vec_pretty(&record)?;
    json.push(b'\n');
    crate::fsutil::write_atomic(&path, &json)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reruns_name_their_array_tasks_as_sbatch_takes_them() {
        assert_eq!(task_list(&[1, 4, 7]), "1,4,7");
        let throttled = SbatchOptions {
            max_parallel: Some(2),
            ..Default::default()
        };
        assert_eq!(throttled.array_arg(&task_list(&[3, 5])), "--array=3,5%2");
    }
}
