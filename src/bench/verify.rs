//! `endless bench verify`: the same verifications run with a fresh
//! interpreter (cold) and forked from the pre-warmed one, side by side on
//! the same session states, with their verdicts compared.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::output::print_report;
use crate::sandbox::{Backend, SandboxError, SessionOptions, VerifierPath};
use crate::task::Task;
use crate::verify::{run_oracle, verify_with, TestReport, TestSet, VerifierMode};
use crate::workbench::Context;

/// `endless bench verify`: `n` offline tasks (default 50) of every usable
/// family; any verdict that differs between the two paths fails it.
pub fn run(ctx: &Context, n: Option<usize>, json: bool) -> Result<ExitCode> {
    let backend = ctx.backend()?;
    let (families, _missing) = crate::procgen::usable_families();
    let tasks = crate::procgen::generate_batch_from(&families, n.unwrap_or(50), 1, None);
    let report = bench_verify(backend.as_ref(), &tasks)?;
    print_report(&report, json)?;
    Ok(if report.mismatches.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Latency of one verification path.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Verifications measured.
    pub n: usize,
    /// Median, milliseconds.
    pub median_ms: f64,
    /// 95th percentile, milliseconds.
    pub p95_ms: f64,
    /// Mean, milliseconds.
    pub mean_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let at = |q: f64| {
            samples
                .get(((samples.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |d| ms(*d))
        };
        Latency {
            n: samples.len(),
            median_ms: at(0.5),
            p95_ms: at(0.95),
            mean_ms: samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len().max(1) as f64,
        }
    }
}

/// What [`bench_verify`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyBench {
    /// Tasks whose environment built and whose sessions ran.
    pub tasks: usize,
    /// Tasks left out (their image did not build, or they have no pytest files).
    pub skipped: usize,
    /// Each verification forked from the pre-warmed interpreter.
    pub warm: Latency,
    /// The same verifications, each in a fresh interpreter.
    pub cold: Latency,
    /// Cold median over warm median.
    pub speedup_median: f64,
    /// States whose verdicts differed between the paths (should be none).
    pub mismatches: Vec<String>,
    /// Warm verifications that ran cold instead, with the first reason.
    pub warm_fallbacks: usize,
    /// Why, for the first of them.
    pub fallback_reason: Option<String>,
}

impl std::fmt::Display for VerifyBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "verification of {} tasks' final tests on two states each (do nothing, oracle); {} skipped",
            self.tasks, self.skipped
        )?;
        writeln!(
            f,
            "{:24} {:>8} {:>10} {:>10} {:>10}",
            "", "n", "median ms", "p95 ms", "mean ms"
        )?;
        for (name, l) in [
            ("cold (fresh python)", &self.cold),
            ("pre-warmed (forked)", &self.warm),
        ] {
            writeln!(
                f,
                "{name:24} {:>8} {:>10.1} {:>10.1} {:>10.1}",
                l.n, l.median_ms, l.p95_ms, l.mean_ms
            )?;
        }
        writeln!(f, "speed-up (median): {:.2}x", self.speedup_median)?;
        if self.warm_fallbacks > 0 {
            writeln!(
                f,
                "{} pre-warmed verifications ran cold: {}",
                self.warm_fallbacks,
                self.fallback_reason.as_deref().unwrap_or("")
            )?;
        }
        if self.mismatches.is_empty() {
            write!(f, "verdicts identical on every state")
        } else {
            write!(
                f,
                "{} states with different verdicts:",
                self.mismatches.len()
            )?;
            for m in &self.mismatches {
                write!(f, "\n  {m}")?;
            }
            Ok(())
        }
    }
}

/// Per-test verdicts and the overall one.
fn verdicts(r: &TestReport) -> (bool, Vec<(String, bool)>) {
    let mut v: Vec<(String, bool)> = r
        .verdicts()
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
    v.sort();
    (r.passed, v)
}

/// Verify the final tests of each task cold and pre-warmed, first on the
/// initial state (a policy that does nothing) and then after the oracle,
/// alternating which path goes first.
pub fn bench_verify(
    backend: &dyn Backend,
    tasks: &[Task],
) -> std::result::Result<VerifyBench, SandboxError> {
    let (mut warm, mut cold) = (Vec::new(), Vec::new());
    let (mut ran, mut skipped, mut fallbacks) = (0, 0, 0);
    let mut fallback_reason = None;
    let mut mismatches = Vec::new();
    let mut first = true;
    for (i, task) in tasks.iter().enumerate() {
        if task.meta.verifier.final_tests.is_empty() || task.meta.verifier.script.is_some() {
            skipped += 1;
            continue;
        }
        let Ok(image) = backend.prepare(task) else {
            skipped += 1;
            continue;
        };
        let mut session = backend.start(&image, &SessionOptions::default())?;
        if first {
            // Untimed: wait for the pre-warmed interpreter to be ready.
            verify_with(&mut session, task, TestSet::Final, VerifierMode::Warm)?;
            first = false;
        }
        for state in ["do nothing", "oracle"] {
            if state == "oracle" {
                if task.solve_script().is_none() {
                    continue;
                }
                run_oracle(&mut session, task)?;
            }
            let order = if i % 2 == 0 {
                [VerifierMode::Cold, VerifierMode::Warm]
            } else {
                [VerifierMode::Warm, VerifierMode::Cold]
            };
            let mut reports = Vec::new();
            for mode in order {
                let r = verify_with(&mut session, task, TestSet::Final, mode)?;
                match mode {
                    VerifierMode::Cold => cold.push(r.duration),
                    VerifierMode::Warm => {
                        if let VerifierPath::Cold(why) = &r.verifier {
                            fallbacks += 1;
                            fallback_reason = fallback_reason.or(why.clone());
                        }
                        warm.push(r.duration);
                    }
                }
                reports.push((mode, r));
            }
            let (a, b) = (verdicts(&reports[0].1), verdicts(&reports[1].1));
            if a != b {
                mismatches.push(format!(
                    "{} ({state}): {:?} {:?} vs {:?} {:?}",
                    task.id(),
                    reports[0].0,
                    a,
                    reports[1].0,
                    b
                ));
            }
        }
        session.close();
        ran += 1;
    }
    let (warm, cold) = (Latency::of(warm), Latency::of(cold));
    Ok(VerifyBench {
        tasks: ran,
        skipped,
        speedup_median: if warm.median_ms > 0.0 {
            cold.median_ms / warm.median_ms
        } else {
            0.0
        },
        warm,
        cold,
        mismatches,
        warm_fallbacks: fallbacks,
        fallback_reason,
    })
}
