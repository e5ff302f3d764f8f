//! Sandbox benchmark: episode start (fresh environment, shell ready) and the
//! round trip of `exec("true")`, per backend, side by side; for `local`
//! also with a pool of pre-started sandboxes (`local+pool`), where a start
//! is a hand-out from a ready pool (the pool refills between episodes, as
//! it does while an episode runs).

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::sandbox::local::LocalBackend;
use crate::sandbox::pool::PoolSettings;
use crate::sandbox::{backend_by_name, Backend, SandboxError, SessionOptions};
use crate::task::{FileTree, Task, TaskMeta};

/// Summary of one timed operation, in milliseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// Number of samples.
    pub runs: usize,
    /// Median.
    pub median_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// Fastest sample.
    pub min_ms: f64,
    /// Slowest sample.
    pub max_ms: f64,
}

impl Stats {
    /// Summarise `samples` (at least one).
    pub fn from(samples: &mut [Duration]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
        Some(Stats {
            runs: samples.len(),
            median_ms: at(0.5),
            p95_ms: at(0.95),
            min_ms: ms(samples[0]),
            max_ms: ms(samples[samples.len() - 1]),
        })
    }
}

/// Results for one backend.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendBench {
    /// Backend name.
    pub backend: String,
    /// Episode start: fresh environment, shell ready.
    pub start: Option<Stats>,
    /// Round trip of `exec("true")`.
    pub exec_true: Option<Stats>,
    /// Why it was not measured, if it was not.
    pub skipped: Option<String>,
}

/// The whole benchmark.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    /// Samples per measurement.
    pub runs: usize,
    /// `debug` or `release`.
    pub profile: &'static str,
    /// One entry per backend, measured or skipped with the reason.
    pub backends: Vec<BackendBench>,
}

fn bench_task() -> Task {
    let mut task = Task {
        meta: TaskMeta::default(),
        instruction: String::new(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    task.meta.task.id = "bench".into();
    task.environment.insert_text(
        "setup.sh",
        "mkdir -p /home/user/data && echo hello > /home/user/data/a.txt\n",
    );
    task
}

fn bench_one(backend: &dyn Backend, runs: usize) -> Result<(Stats, Stats), SandboxError> {
    let image = backend.prepare(&bench_task())?;
    let opts = SessionOptions::default();
    // Warm up caches once (and ask a pool, if any, for this image).
    backend.start(&image, &opts)?.close();
    let mut starts = Vec::with_capacity(runs);
    for _ in 0..runs {
        wait_for_pool(backend)?;
        let t = Instant::now();
        let s = backend.start(&image, &opts)?;
        starts.push(t.elapsed());
        s.close();
    }
    let mut s = backend.start(&image, &opts)?;
    let mut execs = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = s.exec("true", Duration::from_secs(10))?;
        execs.push(t.elapsed());
        if r.exit_code != Some(0) {
            return Err(SandboxError::Start(format!(
                "`true` returned {:?}",
                r.exit_code
            )));
        }
    }
    s.close();
    let none = || SandboxError::Start("no samples".into());
    Ok((
        Stats::from(&mut starts).ok_or_else(none)?,
        Stats::from(&mut execs).ok_or_else(none)?,
    ))
}

/// Untimed: wait until the backend's pool (if it has one) has a sandbox
/// ready, as it has when episodes last longer than a start.
fn wait_for_pool(backend: &dyn Backend) -> Result<(), SandboxError> {
    let until = Instant::now() + Duration::from_secs(30);
    while let Some(p) = backend.pool_stats() {
        if p.ready > 0 {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(SandboxError::Start(format!(
                "the pool had no sandbox ready after 30 s: {}",
                p.last_error.unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// The pool `local+pool` measures: two per image.
const BENCH_POOL: PoolSettings = PoolSettings {
    size: 2,
    idle: Duration::from_secs(60),
};

/// The backend called `name`; `local+pool` is `local` with [`BENCH_POOL`].
fn bench_backend(name: &str, cache_dir: &Path) -> Result<Box<dyn Backend>, SandboxError> {
    match name {
        "local+pool" => Ok(Box::new(
            LocalBackend::new(cache_dir)?.with_pool(BENCH_POOL),
        )),
        _ => backend_by_name(name, cache_dir),
    }
}

/// Measure every backend present, `runs` times each.
pub fn bench(runs: usize, cache_dir: &Path) -> BenchReport {
    let runs = runs.max(1);
    let mut backends = Vec::new();
    for name in ["local", "local+pool", "apptainer", "oci"] {
        let entry = match bench_backend(name, cache_dir).and_then(|b| bench_one(b.as_ref(), runs)) {
            Ok((start, exec)) => BackendBench {
                backend: name.into(),
                start: Some(start),
                exec_true: Some(exec),
                skipped: None,
            },
            Err(e) => BackendBench {
                backend: name.into(),
                start: None,
                exec_true: None,
                skipped: Some(e.to_string()),
            },
        };
        backends.push(entry);
    }
    BenchReport {
        runs,
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        backends,
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sandbox benchmark ({} runs each, {} build)",
            self.runs, self.profile
        )?;
        writeln!(
            f,
            "{:<10} {:>22} {:>22}",
            "backend", "start med / p95 (ms)", "exec true med / p95"
        )?;
        for b in &self.backends {
            match (&b.start, &b.exec_true) {
                (Some(s), Some(e)) => writeln!(
                    f,
                    "{:<10} {:>10.2} / {:>9.2} {:>10.3} / {:>9.3}",
                    b.backend, s.median_ms, s.p95_ms, e.median_ms, e.p95_ms
                )?,
                _ => writeln!(
                    f,
                    "{:<10} skipped: {}",
                    b.backend,
                    b.skipped
                        .as_deref()
                        .unwrap_or("")
                        .lines()
                        .next()
                        .unwrap_or("")
                )?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_median_and_p95() {
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Stats::from(&mut v).unwrap();
        assert_eq!(s.runs, 100);
        assert!((s.median_ms - 51.0).abs() < 1.01);
        assert!((s.p95_ms - 95.0).abs() < 1.01);
        assert!(Stats::from(&mut []).is_none());
    }
}
