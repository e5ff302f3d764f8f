//! `endless bench shards`: what sharding costs. One validation of N
//! offline tasks (`--n`, default 48), run as one `endless tasks validate` process with P tasks
//! at once, against the same validation as 4 shard processes
//! (`--shard I/4`, each in its own shard workspace) with P/4 at once each,
//! all four started together: the wall-time ratio sharded / unsharded
//! (goal: under 1.15), and whether both found the same verdicts.
//!
//! Each side has its own image cache, warmed by validating one task that
//! is not measured, so neither profits from builds the other made.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::output::{print_json, say};
use crate::jobs::JobContext;
use crate::store::Workspace;
use crate::workbench::generate::{offline_into, OfflineRequest};
use crate::workbench::shards::make_shard_workspaces;
use crate::workbench::Context;

/// Shards the bench splits into.
const SHARDS: u32 = 4;

/// What the bench measured.
#[derive(Debug, Serialize)]
pub struct ShardsBench {
    /// Tasks validated.
    pub tasks: usize,
    /// Tasks at once: the unsharded process's, the sum over the shards.
    pub parallelism: usize,
    /// Shard processes.
    pub shards: u32,
    /// Wall time of the unsharded validation.
    pub unsharded_s: f64,
    /// Wall time of the sharded one (first start to last exit).
    pub sharded_s: f64,
    /// Each shard's own wall time.
    pub shard_s: Vec<f64>,
    /// Each shard's tasks (the hash split is even only on average).
    pub shard_tasks: Vec<usize>,
    /// `sharded_s / unsharded_s`.
    pub ratio: f64,
    /// Valid tasks found by each side.
    pub valid: (usize, usize),
}

impl std::fmt::Display for ShardsBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "validation of {} offline tasks, {} at once",
            self.tasks, self.parallelism
        )?;
        writeln!(f, "  unsharded, 1 process:   {:>8.2}s", self.unsharded_s)?;
        let each: Vec<String> = self
            .shard_s
            .iter()
            .zip(&self.shard_tasks)
            .map(|(s, n)| format!("{s:.2}s/{n} tasks"))
            .collect();
        writeln!(
            f,
            "  {} shard processes:      {:>8.2}s  (each: {})",
            self.shards,
            self.sharded_s,
            each.join(", ")
        )?;
        writeln!(
            f,
            "  ratio sharded/unsharded: {:.3}x (goal < 1.15x)",
            self.ratio
        )?;
        write!(
            f,
            "  valid tasks: {} unsharded, {} sharded",
            self.valid.0, self.valid.1
        )
    }
}

/// `endless --workspace WS tasks validate --all --json ARGS`, with the
/// cache under `cache`; not yet waited for.
fn validate(ws: &Path, cache: &Path, args: &[String]) -> Result<std::process::Child> {
    let exe = std::env::current_exe().context("finding the endless binary")?;
    Command::new(exe)
        .arg("--workspace")
        .arg(ws)
        .args(["tasks", "validate", "--all", "--json"])
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting endless tasks validate")
}

/// Wait for a validation; its valid tasks.
fn valid_of(child: std::process::Child, what: &str) -> Result<usize> {
    let out = child.wait_with_output()?;
    let verdicts: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "{what}: no verdicts ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(verdicts
        .as_array()
        .map_or(0, |a| a.iter().filter(|v| v["ok"] == true).count()))
}

/// Time the validations (see the module docs).
pub fn bench(n: usize, parallelism: usize) -> Result<ShardsBench> {
    if n == 0 {
        bail!("--n must be at least 1");
    }
    let work = tempfile::tempdir()?;
    let root = work.path();
    let main_dir = root.join("main");
    std::fs::create_dir_all(&main_dir)?;
    let mut main = Workspace::open(&main_dir)?;
    let (job, _rx) = JobContext::standalone("bench-shards");
    offline_into(
        &mut main,
        &OfflineRequest {
            count: n + 1,
            seed: 1,
            ..Default::default()
        },
        &job,
    )?;
    // One task warms each side's cache and is then left out.
    let ids = main.task_ids()?;
    let warm_id = ids[0].clone();
    let whole = make_shard_workspaces(&main, &root.join("whole"), 1)?;
    let shards = make_shard_workspaces(&main, &root.join("sharded"), SHARDS)?;
    let paths: Vec<PathBuf> = whole
        .iter()
        .chain(&shards)
        .map(|(p, _)| p.clone())
        .collect();
    let (cache_one, cache_many) = (root.join("cache-unsharded"), root.join("cache-sharded"));
    for (cache, ws) in [(&cache_one, &paths[0]), (&cache_many, &paths[1])] {
        let out = Command::new(std::env::current_exe()?)
            .arg("--workspace")
            .arg(ws)
            .args(["tasks", "validate", &warm_id])
            .env("XDG_CACHE_HOME", cache)
            .output()?;
        if !out.status.success() {
            bail!(
                "warming the cache: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    for ws in &paths {
        Workspace::open(ws)?.remove_task(&warm_id)?;
    }
    let per_shard = (parallelism / SHARDS as usize).max(1);
    let start = Instant::now();
    let one = validate(
        &paths[0],
        &cache_one,
        &["--concurrency".into(), parallelism.to_string()],
    )?;
    let valid_one = valid_of(one, "the unsharded validation")?;
    let unsharded_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let children: Vec<(std::process::Child, Instant)> = (0..SHARDS)
        .map(|i| {
            let args = [
                "--concurrency".to_string(),
                per_shard.to_string(),
                "--shard".into(),
                format!("{i}/{SHARDS}"),
            ];
            Ok((
                validate(&paths[1 + i as usize], &cache_many, &args)?,
                Instant::now(),
            ))
        })
        .collect::<Result<_>>()?;
    // Each shard waited for on its own thread, so its time is its own.
    let ended: Vec<Result<(usize, f64)>> = std::thread::scope(|scope| {
        let waits: Vec<_> = children
            .into_iter()
            .enumerate()
            .map(|(i, (child, started))| {
                scope.spawn(move || {
                    let valid = valid_of(child, &format!("shard {i}"))?;
                    Ok((valid, started.elapsed().as_secs_f64()))
                })
            })
            .collect();
        waits
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a shard waiter panicked")))
            })
            .collect()
    });
    let sharded_s = start.elapsed().as_secs_f64();
    let mut shard_s = Vec::new();
    let mut valid_many = 0;
    for e in ended {
        let (valid, secs) = e?;
        valid_many += valid;
        shard_s.push(secs);
    }
    let shard_tasks = paths[1..]
        .iter()
        .map(|p| Ok(crate::store::read_shard_record(p)?.map_or(0, |r| r.items)))
        .collect::<Result<Vec<usize>>>()?;
    Ok(ShardsBench {
        shard_tasks,
        tasks: n,
        parallelism: per_shard * SHARDS as usize,
        shards: SHARDS,
        unsharded_s,
        sharded_s,
        shard_s,
        ratio: sharded_s / unsharded_s.max(1e-9),
        valid: (valid_one, valid_many),
    })
}

/// `endless bench shards [--n N]`.
pub fn run(_ctx: &Context, n: Option<usize>, json: bool) -> Result<ExitCode> {
    let parallelism = 4;
    let report = bench(n.unwrap_or(48), parallelism)?;
    if json {
        print_json(&report)?;
    } else {
        say(&report.to_string());
    }
    Ok(if report.valid.0 == report.valid.1 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
