//! `endless bench rollout`: oracle-policy episodes over a set of tasks,
//! reporting throughput and where the time goes; for the local backend, once
//! verifying cold and once pre-warmed, with their ratio.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::output::{print_json, say};
use crate::agent::policy::PolicyFactory;
use crate::agent::rollout::{run_rollouts, RolloutConfig};
use crate::agent::{BackendProvider, EndReason, RolloutError, SandboxProvider, Timings};
use crate::task::Task;
use crate::workbench::Context;

/// What [`bench_rollout`] measured. Times are sums over episodes, in
/// seconds, except `wall_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutBench {
    /// Tasks run.
    pub tasks: usize,
    /// Oracle episodes per task.
    pub samples: u32,
    /// Episodes running at once.
    pub concurrency: usize,
    /// Episodes that finished.
    pub episodes: usize,
    /// Episodes whose final tests all passed.
    pub passed: usize,
    /// Episodes that ended in an infrastructure error.
    pub errors: usize,
    /// Seconds spent building task images before the timed run.
    pub prepare_secs: f64,
    /// Wall-clock seconds of the timed run.
    pub wall_secs: f64,
    /// Finished episodes per minute of wall clock.
    pub episodes_per_minute: f64,
    /// Mean seconds per episode spent starting the sandbox.
    pub mean_sandbox_start_secs: f64,
    /// Mean seconds per episode running the agent's commands.
    pub mean_exec_secs: f64,
    /// Mean seconds per episode running the final tests.
    pub mean_verify_secs: f64,
    /// Mean seconds per episode, start to result file.
    pub mean_total_secs: f64,
}

/// Run `samples` oracle episodes of every task, `concurrency` at a time,
/// into a fresh run directory under `work_dir`, and report throughput.
pub async fn bench_rollout<P: SandboxProvider>(
    provider: Arc<P>,
    tasks: Vec<Task>,
    samples: u32,
    concurrency: usize,
    work_dir: &Path,
) -> Result<RolloutBench, RolloutError> {
    let run_dir = work_dir.join(format!("bench-rollout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run_dir);
    let mut config = RolloutConfig::new(&run_dir);
    config.samples = samples;
    config.concurrency = concurrency;
    config.command_timeout = Duration::from_secs(120);
    config.record_cast = false;
    let n_tasks = tasks.len();
    let prep = std::time::Instant::now();
    for task in &tasks {
        if let Err(e) = provider.prepare(task) {
            tracing::warn!(task = task.id(), %e, "image build failed");
        }
    }
    let prepare_secs = prep.elapsed().as_secs_f64();
    let summary = run_rollouts(config, tasks, PolicyFactory::Oracle, provider, None).await?;
    let _ = std::fs::remove_dir_all(&run_dir);
    let eps = &summary.episodes;
    let n = eps.len().max(1) as f64;
    let mean = |f: fn(&Timings) -> f64| eps.iter().map(|e| f(&e.timings)).sum::<f64>() / n;
    Ok(RolloutBench {
        tasks: n_tasks,
        samples,
        concurrency,
        episodes: eps.len(),
        passed: eps.iter().filter(|e| e.passed).count(),
        errors: eps
            .iter()
            .filter(|e| e.end_reason == EndReason::Error)
            .count(),
        prepare_secs,
        wall_secs: summary.wall_secs,
        episodes_per_minute: if summary.wall_secs > 0.0 {
            eps.len() as f64 * 60.0 / summary.wall_secs
        } else {
            0.0
        },
        mean_sandbox_start_secs: mean(|t| t.sandbox_start_secs),
        mean_exec_secs: mean(|t| t.exec_secs),
        mean_verify_secs: mean(|t| t.verify_secs),
        mean_total_secs: mean(|t| t.total_secs),
    })
}

impl RolloutBench {
    /// A short human-readable summary.
    pub fn summary(&self) -> String {
        format!(
            "images built in {:.1}s; {} episodes ({} tasks x {} samples, {} at once) in {:.1}s: {:.1} episodes/min; {} passed, {} errors\n\
             per episode: sandbox start {:.3}s, commands {:.3}s, tests {:.3}s, total {:.3}s",
            self.prepare_secs,
            self.episodes,
            self.tasks,
            self.samples,
            self.concurrency,
            self.wall_secs,
            self.episodes_per_minute,
            self.passed,
            self.errors,
            self.mean_sandbox_start_secs,
            self.mean_exec_secs,
            self.mean_verify_secs,
            self.mean_total_secs
        )
    }
}

/// [`bench_rollout`] over `n_tasks` offline procedural tasks (families whose
/// tools this machine has), `samples` oracle episodes each, on `backend`.
pub async fn bench_rollout_offline(
    backend: Arc<dyn crate::sandbox::Backend>,
    n_tasks: usize,
    samples: u32,
    concurrency: usize,
    seed: u64,
    work_dir: &Path,
) -> Result<RolloutBench, RolloutError> {
    let (families, _missing) = crate::procgen::usable_families();
    let tasks = crate::procgen::generate_batch_from(&families, n_tasks, seed, None);
    let provider = Arc::new(BackendProvider::new(backend));
    bench_rollout(provider, tasks, samples, concurrency, work_dir).await
}

/// `endless bench rollout`: `n` offline tasks (default 50) through every
/// backend [`rollout_backends`] names, printed as text or JSON.
pub fn run(ctx: &Context, n: Option<usize>, json: bool) -> Result<ExitCode> {
    let runs = rollout_backends(ctx)?;
    let work = tempfile::tempdir()?;
    let concurrency = std::thread::available_parallelism().map_or(2, |c| c.get()) * 2;
    let rt = tokio::runtime::Runtime::new()?;
    let mut reports = Vec::new();
    for (verifier, backend) in runs {
        let report = rt.block_on(bench_rollout_offline(
            backend,
            n.unwrap_or(50),
            4,
            concurrency,
            1,
            work.path(),
        ))?;
        reports.push(RolloutRun { verifier, report });
    }
    let speedup = match reports.as_slice() {
        [cold, warm] if cold.report.episodes_per_minute > 0.0 => {
            Some(warm.report.episodes_per_minute / cold.report.episodes_per_minute)
        }
        _ => None,
    };
    if json {
        print_json(&serde_json::json!({ "runs": reports, "speedup": speedup }))?;
    } else {
        for run in &reports {
            say(&format!(
                "verifier {}:\n{}",
                run.verifier,
                run.report.summary()
            ));
        }
        if let Some(x) = speedup {
            say(&format!("pre-warmed over cold: {x:.2}x episodes/min"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One `bench rollout` run and the verifier it used.
#[derive(Debug, Serialize)]
struct RolloutRun {
    verifier: &'static str,
    #[serde(flatten)]
    report: RolloutBench,
}

/// The backends `bench rollout` compares: for `local`, one verifying cold
/// and one pre-warmed (in that order), each with the configured pool of
/// pre-started sandboxes; else the configured backend alone.
fn rollout_backends(
    ctx: &Context,
) -> Result<Vec<(&'static str, std::sync::Arc<dyn crate::sandbox::Backend>)>> {
    use crate::sandbox::local::LocalBackend;
    if ctx.config.sandbox.backend != "local" {
        return Ok(vec![("of the backend", ctx.backend()?.into())]);
    }
    let cache = ctx.paths.cache_dir.join("sandbox");
    // With `[sandbox] pool` (e.g. ENDLESS_SANDBOX_POOL=2), both start their
    // sandboxes from a pool of pre-started ones.
    let pool = crate::sandbox::pool::PoolSettings::of(&ctx.config.sandbox);
    let local = || -> Result<LocalBackend> {
        Ok(LocalBackend::new(&cache)?.with_images(ctx.config.images.clone()))
    };
    Ok(vec![
        (
            "cold",
            std::sync::Arc::new(local()?.with_cold_verifier().with_pool(pool)),
        ),
        ("pre-warmed", std::sync::Arc::new(local()?.with_pool(pool))),
    ])
}
