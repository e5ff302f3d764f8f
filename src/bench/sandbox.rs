//! Sandbox benchmark: episode start (fresh environment, shell ready) and the
//! round trip of `exec("true")`, per backend, side by side.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

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
    // Warm up caches once.
    backend.start(&image, &opts)?.close();
    let mut starts = Vec::with_capacity(runs);
    for _ in 0..runs {
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

/// Measure every backend present, `runs` times each.
pub fn bench(runs: usize, cache_dir: &Path) -> BenchReport {
    let runs = runs.max(1);
    let mut backends = Vec::new();
    for name in ["local", "apptainer", "oci"] {
        let entry = match backend_by_name(name, cache_dir).and_then(|b| bench_one(b.as_ref(), runs))
        {
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
