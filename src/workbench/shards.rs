//! Sharded runs (`--shard I/N`): each shard of `generate`, `tasks
//! validate` or `eval` works in its own workspace and records what it is in
//! `shard.json` ([`super::shard_run::ShardRun`]); [`make_shard_workspaces`] makes those
//! workspaces from the main one (task bundles hard-linked); and
//! [`merge_shards`] brings a job's shards back into the main workspace,
//! refusing an incomplete job unless asked, then finishes what only the
//! whole job can (an evaluation's report and pass@k over every shard's
//! episodes).
//!
//! One workspace per shard is the supported layout, on any filesystem:
//! the index is SQLite in WAL mode, whose shared-memory file does not work
//! across the nodes of a network filesystem such as NFS, so shards on
//! several nodes must not share one workspace. A shard's workspace is
//! written by that shard alone; the main workspace only by the merge.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::store::{
    read_shard_record, LinkReport, MergeOptions, MergeReport, ShardRecord, ShardSet, Workspace,
};

/// The directory of shard `index` below `dir`: `dir/shard-<index>`.
pub fn shard_dir(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("shard-{index}"))
}

/// Make (or complete) `count` shard workspaces `dir/shard-0` ... below
/// `dir`, each with every task bundle of `main` hard-linked and a copy of
/// its settings (`endless.toml`); returns their paths and what linking did
/// in each.
pub fn make_shard_workspaces(
    main: &Workspace,
    dir: &Path,
    count: u32,
) -> Result<Vec<(PathBuf, LinkReport)>> {
    if count == 0 || count > crate::store::MAX_SHARDS {
        bail!("--shards must be 1 to {}", crate::store::MAX_SHARDS);
    }
    (0..count)
        .map(|i| {
            let path = shard_dir(dir, i);
            std::fs::create_dir_all(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            let ws = Workspace::open(&path)
                .with_context(|| format!("opening shard workspace {}", path.display()))?;
            let config = main.root().join("endless.toml");
            if config.is_file() {
                let to = path.join("endless.toml");
                let bytes = std::fs::read(&config)
                    .with_context(|| format!("reading {}", config.display()))?;
                crate::fsutil::write_atomic(&to, &bytes)
                    .with_context(|| format!("writing {}", to.display()))?;
            }
            let report = ws
                .link_tasks_from(main)
                .with_context(|| format!("linking the tasks into {}", path.display()))?;
            Ok((path, report))
        })
        .collect()
}

/// What [`merge_shards`] did.
#[derive(Debug, Serialize)]
pub struct ShardMerge {
    /// The job merged.
    pub job: ShardSet,
    /// Each shard workspace's merge.
    pub merges: Vec<MergeReport>,
    /// What finishing the job wrote (an evaluation's run id), if anything.
    pub finished: Option<String>,
}

/// The shard workspaces of `paths`: each path is a shard workspace, or a
/// directory of them (`shard-*`).
pub fn shard_workspaces(paths: &[PathBuf]) -> Result<Vec<(PathBuf, ShardRecord)>> {
    let mut out = Vec::new();
    for path in paths {
        if let Some(record) = read_shard_record(path)? {
            out.push((path.clone(), record));
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| {
                format!(
                    "{}: not a shard workspace nor a directory of them",
                    path.display()
                )
            })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("shard-"))
            })
            .collect();
        found.sort();
        if found.is_empty() {
            bail!(
                "{}: not a shard workspace (no shard.json) and no shard-* workspaces in it",
                path.display()
            );
        }
        for p in found {
            match read_shard_record(&p)? {
                Some(record) => out.push((p, record)),
                // A shard workspace made but never started: missing.
                None => continue,
            }
        }
    }
    Ok(out)
}

/// Merge one job's shard workspaces into `main`: refused, naming the
/// shards, when some are missing or not done, unless `allow_partial`. The
/// shards' own run-level files (reports of their part) are left out; an
/// evaluation's report, pass@k and summary are then written from all the
/// merged episodes, as one unsharded run writes them; an LLM generation's
/// journal and funnel over every shard's candidates. Running it again
/// changes nothing.
pub fn merge_shards(
    main: &mut Workspace,
    shards: &[(PathBuf, ShardRecord)],
    allow_partial: bool,
) -> Result<ShardMerge> {
    let job = ShardSet::check(shards)?;
    if !job.missing.is_empty() && !allow_partial {
        bail!(
            "not merging {} job {}: {}; run them again (`--shard I/{}` resumes), or pass --allow-partial to merge the shards that are done",
            job.kind,
            job.key,
            job.missing_line(),
            job.of
        );
    }
    let mut merges = Vec::new();
    for (path, record) in shards {
        if !record.done {
            continue;
        }
        let report = main
            .merge_from_with(
                path,
                MergeOptions {
                    skip_run_files: true,
                },
            )
            .with_context(|| format!("merging {}", path.display()))?;
        merges.push(report);
    }
    let finished = match job.kind.as_str() {
        "eval" => {
            let req: super::EvalRequest = serde_json::from_value(job.request.clone())
                .context("the shards' shard.json has no readable eval request")?;
            Some(super::eval::finish_merged(main, &req, &job.key)?)
        }
        super::generate::LLM_SHARD_KIND => {
            let done: Vec<PathBuf> = shards
                .iter()
                .filter(|(_, r)| r.done)
                .map(|(p, _)| p.clone())
                .collect();
            Some(super::generate::finish_merged_llm(
                main,
                &done,
                &job.request,
            )?)
        }
        _ => None,
    };
    Ok(ShardMerge {
        job,
        merges,
        finished,
    })
}
