//! `endless tasks audit (ID...|--all) [--checks a,b] [--concurrency N]
//! [--json] [--shard I/N]`: the task audit ([`crate::workbench::audit`]),
//! one line per task as it finishes, then a summary; the exit status is
//! non-zero when a task has a finding, a check ran out of time or failed,
//! or a task could not be audited.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};

use super::json::print_json;
use super::progress::{cancel_on_ctrl_c, BarStyle, JobBar};
use crate::audit::{AuditOptions, Check, CheckStatus};
use crate::cli::AuditArgs;
use crate::jobs::JobContext;
use crate::workbench::audit::{audit_tasks, AuditOutcome, AuditRequest};
use crate::workbench::{shard_run, Context};

/// Run `endless tasks audit`.
pub fn run(ctx: &Context, args: AuditArgs) -> Result<ExitCode> {
    let ws = ctx.workspace()?;
    let checks = match &args.checks {
        Some(list) => Check::parse_list(list)?,
        None => Check::ALL.to_vec(),
    };
    if !(args.pass_share > 0.0 && args.pass_share <= 1.0) {
        bail!("--pass-share must be above 0 and at most 1");
    }
    if !(args.budget > 0.0 && args.budget <= 86_400.0) {
        bail!("--budget must be a number of seconds above 0 and at most 86400");
    }
    let ids = if args.all {
        ws.task_ids()?
    } else if args.ids.is_empty() {
        bail!("name task ids or pass --all");
    } else {
        for id in &args.ids {
            if !ws.has_task(id) {
                bail!("no task with id {id:?} in {}", ws.root().display());
            }
        }
        args.ids.clone()
    };
    let (ids, running) = match args.shard {
        Some(shard) => {
            let names: Vec<&str> = ids.iter().map(String::as_str).collect();
            let key = shard_run::selection_key("audit", &names);
            let total = ids.len();
            let mine = shard.select(ids.clone(), |id| id.as_str());
            let run = shard_run::ShardRun::begin(
                ws.root(),
                shard,
                shard_run::ShardJob {
                    kind: "audit",
                    key,
                    request: serde_json::json!({ "ids": ids, "checks": checks }),
                    items: mine.len(),
                    total,
                },
            )?;
            say_err!("shard {shard}: {} of {total} tasks", mine.len());
            (mine, Some(run))
        }
        None => (ids, None),
    };
    let req = AuditRequest {
        ids,
        options: AuditOptions {
            checks,
            budget: Duration::from_secs_f64(args.budget),
            flaky_runs: args.flaky_runs.max(1),
            max_mutants: args.max_mutants,
            pass_share: args.pass_share,
        },
        concurrency: args.concurrency,
        fresh: args.fresh,
    };
    let (job, events) = JobContext::standalone("audit");
    cancel_on_ctrl_c(&job, "stopping after the checks that are running");
    let bar = JobBar::start(
        events,
        BarStyle {
            template: "{spinner} {pos}/{len} tasks {wide_msg}",
            stage_as_message: true,
            print_logs: false,
        },
    );
    let above = bar.bar().clone();
    let json = args.json;
    let backend = ctx.backend().map_err(|e| format!("{e:#}"));
    // As each task finishes: its outcome on stdout, or with --json (whose
    // stdout is the whole result at the end) one progress line on stderr.
    let outcomes = audit_tasks(ctx, backend, &req, &job, |o| {
        above.suspend(|| match json {
            false => print_outcome(o),
            true => say_err!("{}", o.line()),
        });
    });
    bar.finish_and_clear();
    let outcomes = outcomes?;
    if let Some(run) = running {
        run.finish()?;
    }
    if json {
        print_json(&outcomes)?;
    }
    let has_findings = |o: &&AuditOutcome| {
        o.report
            .as_ref()
            .is_some_and(|r| r.findings().next().is_some())
    };
    let unfinished =
        |o: &&AuditOutcome| o.error.is_some() || o.report.as_ref().is_none_or(|r| !r.complete());
    let flagged = outcomes.iter().filter(has_findings).count();
    let incomplete = outcomes.iter().filter(unfinished).count();
    let clean = outcomes
        .iter()
        .filter(|o| !has_findings(o) && !unfinished(o))
        .count();
    say_err!(
        "{} audited: {flagged} with findings, {clean} clean, {incomplete} incomplete or not audited",
        crate::plural::count(outcomes.len(), "task")
    );
    let unfinished = incomplete;
    Ok(if flagged > 0 || unfinished > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One task's outcome for people: its summary line, then each finding
/// with the start of its evidence, and each check that did not finish.
fn print_outcome(o: &AuditOutcome) {
    let Some(r) = &o.report else {
        say!("failed  {}: {}", o.id, o.error.as_deref().unwrap_or(""));
        return;
    };
    let word = if r.findings().next().is_some() {
        "FLAGGED"
    } else if r.complete() {
        "clean  "
    } else {
        "partial"
    };
    let stored = if o.resumed {
        " (stored by an earlier audit)"
    } else {
        ""
    };
    say!("{word} {}: {}{stored}", o.id, r.summary());
    for f in r.findings() {
        say!("        [{}] {}", f.label, f.summary);
        for line in f.evidence.lines().take(8) {
            say!("          {line}");
        }
    }
    for c in &r.checks {
        match &c.status {
            CheckStatus::Skipped { why } => say!("        {} skipped: {why}", c.check),
            CheckStatus::OutOfTime { done } => say!("        {} OUT OF TIME: {done}", c.check),
            CheckStatus::Error { message } => say!("        {} error: {message}", c.check),
            CheckStatus::Ok | CheckStatus::Finding => {}
        }
    }
    if let Some(e) = &o.error {
        say!("        {e}");
    }
}

/// `--exclude-audit LABELS` of `eval` and `train`: the task selection
/// without the flagged tasks (said on stderr), or the selection as given
/// when `labels` names none.
pub(crate) fn exclude(
    ctx: &Context,
    selection: Option<&str>,
    labels: &str,
    train_default: bool,
) -> Result<Option<String>> {
    let ws = ctx.workspace()?;
    match crate::workbench::audit::exclude_from_selection(&ws, selection, labels, train_default)? {
        Some((kept, excluded)) => {
            say_err!(
                "--exclude-audit: {} left out{}",
                crate::plural::count(excluded.len(), "task"),
                if excluded.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", excluded.join(", "))
                }
            );
            Ok(Some(kept))
        }
        None => Ok(selection.map(str::to_string)),
    }
}
