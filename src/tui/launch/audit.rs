//! The audit job: [`crate::workbench::audit::audit_tasks`] on a job thread
//! (the same use case as `endless tasks audit`: reports stored beside the
//! tasks and indexed, stored reports that still cover the checks resumed),
//! progress per task and check in the Jobs view.

use std::path::Path;
use std::time::Duration;

use crate::audit::{AuditOptions, Check};
use crate::jobs::JobContext;
use crate::workbench::audit::{audit_tasks, outcome_summary, select_audit_ids, AuditRequest};
use crate::workbench::Context;

/// The checks a form's field names: comma-separated check names; empty or
/// `all`: every check. Why not, naming the check at fault.
pub fn parse_checks(field: &str) -> Result<Vec<Check>, String> {
    match field.trim() {
        "" | "all" => Ok(Check::ALL.to_vec()),
        list => Check::parse_list(list).map_err(|e| e.to_string()),
    }
}

/// Audit the tasks `tasks` names (ids or `*` globs; empty or `all`: every
/// task) with the checks `checks` names, `concurrency` tasks at once, in
/// the workspace at `root`. Returns a one-line summary (or
/// `Err(Cancelled)` once the job was cancelled: what finished is stored).
pub fn run(
    ctx: &JobContext,
    root: &Path,
    tasks: &str,
    checks: &str,
    concurrency: usize,
) -> anyhow::Result<String> {
    let checks = parse_checks(checks).map_err(anyhow::Error::msg)?;
    let cctx = Context::new(Some(root.to_path_buf()))?;
    let ws = cctx.workspace()?;
    let ids = select_audit_ids(&ws, tasks)?;
    if ids.is_empty() {
        anyhow::bail!("no tasks to audit in {}", root.display());
    }
    let req = AuditRequest {
        ids,
        options: AuditOptions {
            checks,
            budget: Duration::from_secs(300),
            ..AuditOptions::default()
        },
        concurrency: Some(concurrency.max(1)),
        fresh: false,
    };
    let backend = cctx.backend().map_err(|e| format!("{e:#}"));
    let outcomes = audit_tasks(&cctx, backend, &req, ctx, |_| {})?;
    ctx.check()?;
    if outcomes.iter().all(|o| o.report.is_none()) {
        let why = outcomes
            .iter()
            .find_map(|o| o.error.clone())
            .unwrap_or_default();
        anyhow::bail!("no task could be audited: {why}");
    }
    Ok(outcome_summary(&outcomes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checks_field_takes_names_or_all() {
        assert_eq!(parse_checks(" ").unwrap(), Check::ALL.to_vec());
        assert_eq!(parse_checks("all").unwrap(), Check::ALL.to_vec());
        assert_eq!(
            parse_checks("flaky,underspecified").unwrap(),
            vec![Check::Underspecified, Check::Flaky]
        );
        let e = parse_checks("flaky,weak").unwrap_err();
        assert!(e.contains("\"weak\""), "{e}");
    }

    #[test]
    fn a_static_audit_runs_as_a_job_and_stores_its_reports() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::store::Workspace::open(dir.path()).unwrap();
        ws.add_task(
            &crate::task::Task::minimal("t-one"),
            crate::store::TaskStatus::Candidate,
        )
        .unwrap();
        drop(ws);
        let (job, _rx) = JobContext::standalone("audit");
        let line = run(&job, dir.path(), "t-*", "underspecified", 1).unwrap();
        assert!(line.starts_with("1 task audited:"), "{line}");
        let ws = crate::store::Workspace::open(dir.path()).unwrap();
        let row = ws.audit_row("t-one").unwrap().expect("indexed");
        assert!(row.checks.contains_key("underspecified"), "{row:?}");
        let e = run(&job, dir.path(), "nope", "", 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"nope\" matches no task"), "{e}");
    }
}
