//! `endless generate`: offline procedural tasks, or the four-stage LLM
//! pipeline against any OpenAI-compatible server (the work is
//! [`crate::workbench::generate`]; this file reads the flags, draws the
//! candidates bar with a line per accepted or rejected candidate, and
//! prints the funnel).

use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};

use super::json::print_json;
use super::progress::{BarStyle, JobBar};
use crate::audit::{AuditOptions, Check};
use crate::cli::{AuditModeArg, GenerateArgs};
use crate::generate::config::{AuditMode, AuditStage};
use crate::jobs::JobContext;
use crate::workbench::generate::{llm, LlmRequest};
use crate::workbench::Context;

/// `endless generate ...`
pub fn run(ctx: &Context, args: GenerateArgs) -> Result<ExitCode> {
    if args.offline {
        return super::offline::run(ctx, &args);
    }
    let req = LlmRequest {
        count: args.count,
        seed: args.seed,
        url: args.llm.clone(),
        model: args.model.clone(),
        solver_url: args.solver_llm.clone(),
        solver_model: args.solver_model.clone(),
        solutions: args.solutions,
        concurrency: args.concurrency,
        max_env_attempts: args.max_env_attempts,
        shard: args.shard,
        audit: audit_stage(&args)?,
    };
    let (job, rx) = JobContext::standalone("generate");
    let bar = (!args.json).then(|| {
        JobBar::start(
            rx,
            BarStyle {
                template: "{prefix:>24} {bar:30} {pos}/{len}",
                stage_as_message: false,
                print_logs: true,
            },
        )
    });
    if let Some(bar) = &bar {
        bar.bar().set_prefix("candidates finished");
    }
    let funnel = llm(ctx, &req, &job);
    if let Some(bar) = bar {
        bar.finish();
    }
    let funnel = funnel?;
    if args.json {
        print_json(&funnel)?;
    } else {
        say!("{funnel}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The audit stage `--audit`, `--audit-checks` and `--audit-budget` ask for.
fn audit_stage(args: &GenerateArgs) -> Result<Option<AuditStage>> {
    let Some(mode) = args.audit else {
        return Ok(None);
    };
    let mut options = AuditOptions::default();
    if let Some(list) = &args.audit_checks {
        options.checks = Check::parse_list(list).context("--audit-checks")?;
    }
    if let Some(secs) = args.audit_budget {
        if !(secs > 0.0 && secs <= 86_400.0) {
            bail!("--audit-budget must be a number of seconds above 0 and at most 86400");
        }
        options.budget = std::time::Duration::from_secs_f64(secs);
    }
    let mode = match mode {
        AuditModeArg::Reject => AuditMode::Reject,
        AuditModeArg::Flag => AuditMode::Flag,
    };
    Ok(Some(AuditStage { mode, options }))
}
