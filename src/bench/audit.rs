//! `endless bench audit`: what a full audit costs. For each of --n
//! offline tasks (default 6, one per family in turn), the task's image is
//! built first (not measured), then its validation and its audit with
//! every check (default budgets, 3 flaky runs, up to 40 mutants) run side
//! by side on the same backend: the audit's wall time as a multiple of the
//! validation's, per task and as the median (goal: under 10x).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::output::{print_json, say, say_err};
use crate::audit::{audit_task, AuditOptions};
use crate::workbench::Context;

/// The goal: a full audit costs less than this many validations.
pub const GOAL: f64 = 10.0;

/// One task's costs.
#[derive(Debug, Serialize)]
pub struct AuditCost {
    /// The task.
    pub task: String,
    /// Its validation's wall time.
    pub validation_s: f64,
    /// Its full audit's wall time.
    pub audit_s: f64,
    /// `audit_s / validation_s`.
    pub ratio: f64,
    /// Mutants run by the weak-tests check.
    pub mutants: u32,
    /// The audit's one-line summary.
    pub summary: String,
}

/// What the bench measured.
#[derive(Debug, Serialize)]
pub struct AuditBench {
    /// Per task.
    pub tasks: Vec<AuditCost>,
    /// The median ratio.
    pub median_ratio: f64,
    /// [`GOAL`].
    pub goal: f64,
}

impl std::fmt::Display for AuditBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<36} {:>10} {:>9} {:>7} {:>8}",
            "task", "validate", "audit", "ratio", "mutants"
        )?;
        for t in &self.tasks {
            writeln!(
                f,
                "{:<36} {:>9.2}s {:>8.2}s {:>6.1}x {:>8}",
                t.task, t.validation_s, t.audit_s, t.ratio, t.mutants
            )?;
        }
        write!(
            f,
            "median: a full audit costs {:.1}x its validation (goal: under {GOAL:.0}x)",
            self.median_ratio
        )
    }
}

/// Run `endless bench audit`.
pub fn run(ctx: &Context, n: Option<usize>, json: bool) -> Result<ExitCode> {
    let backend = ctx.backend()?;
    let (families, _missing) = crate::procgen::usable_families();
    let tasks = crate::procgen::generate_batch_from(&families, n.unwrap_or(6).max(1), 1, None);
    let mut costs = Vec::new();
    for task in &tasks {
        // The image is built once, before either side is timed.
        backend.prepare(task)?;
        let t = Instant::now();
        let v = crate::verify::validate_task(backend.as_ref(), task)?;
        let validation_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let report = audit_task(backend.as_ref(), task, &AuditOptions::default(), &|_| true)
            .ok_or_else(|| anyhow::anyhow!("the audit of {} stopped", task.id()))?;
        let audit_s = t.elapsed().as_secs_f64();
        if !v.ok() {
            say_err(&format!(
                "note: {} is not valid: {}",
                task.id(),
                v.problems.join("; ")
            ));
        }
        costs.push(AuditCost {
            task: task.id().to_string(),
            validation_s,
            audit_s,
            ratio: audit_s / validation_s.max(1e-3),
            mutants: report.mutation.map_or(0, |m| m.total),
            summary: report.summary(),
        });
    }
    let mut ratios: Vec<f64> = costs.iter().map(|c| c.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    let median_ratio = ratios[ratios.len() / 2];
    let bench = AuditBench {
        tasks: costs,
        median_ratio,
        goal: GOAL,
    };
    if json {
        print_json(&bench)?;
    } else {
        say(&bench.to_string());
    }
    Ok(if median_ratio < GOAL {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
