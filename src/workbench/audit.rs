//! The audit use case: `endless tasks audit` and the TUI's audit job both
//! run [`audit_tasks`]. Tasks are audited several at a time; each report
//! is stored as `tasks/<id>/audit.json` as soon as its task is done and
//! indexed (see [`crate::audit::AuditRow`]). Audits resume: a task whose
//! stored report covers the asked checks for the task as it is now is not
//! audited again (unless `fresh`).
//!
//! Also here: what the other front ends need of audits. [`load_audit`]
//! (a task's report, for a detail view) and [`exclude_audited`]
//! (`--exclude-audit` of `eval`, `train` and `export`); the audit index is
//! rebuilt from the files with the rest of the index
//! ([`super::reindex_audits`]).

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use super::{BackendOrError, Context};
use crate::audit::AuditRow;
use crate::audit::{self, file, AuditOptions, AuditReport, Check};
use crate::jobs::{Cancelled, JobContext};
use crate::store::Workspace;

/// What to audit.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRequest {
    /// The task ids.
    pub ids: Vec<String>,
    /// The checks and their budgets.
    pub options: AuditOptions,
    /// Tasks audited at once (`None`: half the CPUs, at least 1).
    pub concurrency: Option<usize>,
    /// Audit again even when a stored report covers the checks.
    pub fresh: bool,
}

/// One task's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct AuditOutcome {
    /// The task id.
    pub id: String,
    /// Its report (`None` when the task could not be audited).
    pub report: Option<AuditReport>,
    /// Why it could not be audited, or why its report was not stored.
    pub error: Option<String>,
    /// The report was stored by an earlier audit and is still current.
    pub resumed: bool,
}

impl AuditOutcome {
    /// The outcome in one line: `id: summary` (`(stored)` when an earlier
    /// audit's report was kept), or why the task was not audited.
    pub fn line(&self) -> String {
        let id = &self.id;
        match (&self.report, &self.error) {
            (Some(r), None) if self.resumed => format!("{id}: {} (stored)", r.summary()),
            (Some(r), None) => format!("{id}: {}", r.summary()),
            (_, Some(e)) => format!("{id}: NOT AUDITED: {e}"),
            (None, None) => format!("{id}: nothing to report"),
        }
    }
}

/// The index row of `report`.
pub fn audit_row(report: &AuditReport) -> AuditRow {
    AuditRow::of(report)
}

/// Audit the tasks of `req` with `backend` (usually `ctx.backend()`),
/// reporting progress (`task: check` as the stage) and one log line per
/// task through `job`, storing and indexing each report and then calling
/// `on_done` as each task finishes (in no set order); the outcomes come back in the order of `req.ids`. Once the job
/// is cancelled no new check starts, nothing more is stored, and the
/// result is `Err(Cancelled)`.
pub fn audit_tasks(
    ctx: &Context,
    backend: BackendOrError,
    req: &AuditRequest,
    job: &JobContext,
    on_done: impl Fn(&AuditOutcome) + Sync,
) -> anyhow::Result<Vec<AuditOutcome>> {
    let ws = ctx.workspace()?;
    let tasks_dir = ws.tasks_dir();
    let total = req.ids.len() as u64;
    let done = std::sync::atomic::AtomicU64::new(0);
    job.progress(0, total, "auditing");
    let threads = req.concurrency.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    });
    // One connection for the workers, taken in turn (the files are the truth).
    let index = std::sync::Mutex::new(ws);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build();
    let run = || {
        req.ids
            .par_iter()
            .map(|id| {
                job.check()?;
                let stage = |s: &str| {
                    let n = done.load(std::sync::atomic::Ordering::Relaxed);
                    job.progress(n, total, s);
                };
                let outcome = audit_one(&tasks_dir, &backend, req, id, job, &stage)?;
                // Indexed as soon as it is stored: an open TUI (which watches
                // the index) shows each report as its task finishes.
                if let Some(r) = outcome.report.as_ref().filter(|_| outcome.error.is_none()) {
                    let indexed = match index.lock() {
                        Ok(ws) => ws.index_audit(&audit_row(r)).map_err(|e| e.to_string()),
                        Err(_) => Err("the index connection is poisoned".into()),
                    };
                    if let Err(e) = indexed {
                        job.log(format!("{id}: the audit was not indexed: {e}"));
                    }
                }
                on_done(&outcome);
                job.log(outcome.line());
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                job.progress(n, total, id);
                Ok(outcome)
            })
            .collect::<Result<Vec<_>, Cancelled>>()
    };
    let outcomes = match pool {
        Ok(pool) => pool.install(run),
        Err(_) => run(),
    }?;
    job.progress(total, total, "done");
    Ok(outcomes)
}

/// Audit task `id` (or take its stored, current report).
fn audit_one(
    tasks_dir: &Path,
    backend: &BackendOrError,
    req: &AuditRequest,
    id: &str,
    job: &JobContext,
    stage: &dyn Fn(&str),
) -> Result<AuditOutcome, Cancelled> {
    let failed = |e: String| AuditOutcome {
        id: id.to_string(),
        report: None,
        error: Some(e),
        resumed: false,
    };
    let dir = tasks_dir.join(id);
    if !crate::task::is_valid_id(id) || !dir.join("task.toml").is_file() {
        return Ok(failed(format!("no task with id {id:?}")));
    }
    let task = match crate::task::read_native(&dir, &Default::default()) {
        Ok(t) => t,
        Err(e) => return Ok(failed(e.to_string())),
    };
    if !req.fresh {
        if let Ok(Some(stored)) = file::read(&dir) {
            if stored.covers(&task, &req.options.checks) {
                return Ok(AuditOutcome {
                    id: id.to_string(),
                    report: Some(stored),
                    error: None,
                    resumed: true,
                });
            }
        }
    }
    let needs_sandbox = req.options.checks.iter().any(|c| c.needs_sandbox());
    let report = match backend {
        Ok(b) => audit::audit_task(b.as_ref(), &task, &req.options, &|c: Check| {
            stage(&format!("{id}: {c}"));
            !job.is_cancelled()
        }),
        Err(e) if needs_sandbox => return Ok(failed(e.clone())),
        Err(_) => audit::audit_task(&NoBackend, &task, &req.options, &|_| !job.is_cancelled()),
    };
    let Some(report) = report else {
        return Err(Cancelled);
    };
    let error = file::write(&dir, &report)
        .err()
        .map(|e| format!("the report was not stored: {e}"));
    Ok(AuditOutcome {
        id: id.to_string(),
        report: Some(report),
        error,
        resumed: false,
    })
}

/// A backend for audits that run no sandbox check (never started).
struct NoBackend;

impl crate::sandbox::Backend for NoBackend {
    fn name(&self) -> &'static str {
        "none"
    }
    fn prepare(
        &self,
        task: &crate::task::Task,
    ) -> Result<crate::sandbox::Image, crate::sandbox::SandboxError> {
        Err(crate::sandbox::SandboxError::Unavailable {
            backend: "none".into(),
            reason: format!("no sandbox for {}", task.id()),
        })
    }
    fn start(
        &self,
        _image: &crate::sandbox::Image,
        _opts: &crate::sandbox::SessionOptions,
    ) -> Result<crate::sandbox::Session, crate::sandbox::SandboxError> {
        Err(crate::sandbox::SandboxError::Unavailable {
            backend: "none".into(),
            reason: "no sandbox".into(),
        })
    }
}

/// The tasks a selection names, sorted: comma-separated ids or `*` globs;
/// empty or `all`: every task. A pattern that matches no task is an error
/// naming it.
pub fn select_audit_ids(ws: &Workspace, selection: &str) -> anyhow::Result<Vec<String>> {
    let all = ws.task_ids()?;
    let patterns: Vec<&str> = selection
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if patterns.is_empty() || patterns == ["all"] {
        return Ok(all);
    }
    let mut out = Vec::new();
    for p in patterns {
        let matched: Vec<&String> = all
            .iter()
            .filter(|id| super::runs::glob_match(p, id))
            .collect();
        if matched.is_empty() {
            anyhow::bail!("tasks: {p:?} matches no task");
        }
        out.extend(matched.into_iter().cloned());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// One line for people about an audit's outcomes: how many tasks have
/// findings (and which labels), how many are clean, how many are not.
pub fn outcome_summary(outcomes: &[AuditOutcome]) -> String {
    let mut flagged = 0;
    let mut clean = 0;
    let mut labels: Vec<String> = Vec::new();
    for o in outcomes {
        match o.report.as_ref().filter(|_| o.error.is_none()) {
            Some(r) if r.findings().next().is_some() => {
                flagged += 1;
                labels.extend(r.labels());
            }
            Some(r) if r.complete() => clean += 1,
            _ => {}
        }
    }
    let labels: Vec<&str> = audit::LABELS
        .into_iter()
        .filter(|l| labels.iter().any(|x| x == l))
        .collect();
    let rest = outcomes.len() - flagged - clean;
    let mut line = format!(
        "{} audited: {flagged} with findings",
        crate::plural::count(outcomes.len(), "task")
    );
    if !labels.is_empty() {
        line.push_str(&format!(" ({})", labels.join(", ")));
    }
    line.push_str(&format!(", {clean} clean"));
    if rest > 0 {
        line.push_str(&format!(", {rest} incomplete or not audited"));
    }
    line
}

/// Task `id`'s stored audit report, if it has one (what a detail view
/// shows); a bad file is an error naming it and the field at fault.
pub fn load_audit(ws: &Workspace, id: &str) -> anyhow::Result<Option<AuditReport>> {
    Ok(file::read(&ws.task_dir(id))?)
}

/// Split `ids` into those kept and those whose audit has any of `labels`
/// (`--exclude-audit`): `(kept, excluded)`, each in the order of `ids`.
/// No labels excludes nothing.
pub fn exclude_audited(
    ws: &Workspace,
    ids: Vec<String>,
    labels: &[String],
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    if labels.is_empty() {
        return Ok((ids, Vec::new()));
    }
    let flagged: std::collections::BTreeSet<String> =
        ws.tasks_with_audit_labels(labels)?.into_iter().collect();
    Ok(ids.into_iter().partition(|id| !flagged.contains(id)))
}

/// `--exclude-audit LABELS` of a task selection (`--tasks` of `eval` and
/// `train`; `None`: the command's default, every task but rejected and
/// archived ones, and for training only the train split): the selection
/// as exact ids without the tasks whose audit has any of the labels, and
/// those left out. `Ok(None)` when `labels` names none; an unknown label
/// or a selection left empty is an error.
pub fn exclude_from_selection(
    ws: &Workspace,
    selection: Option<&str>,
    labels: &str,
    train_default: bool,
) -> anyhow::Result<Option<(String, Vec<String>)>> {
    let labels = audit::parse_labels(labels)?;
    if labels.is_empty() {
        return Ok(None);
    }
    let tasks = super::select_tasks(ws, selection)?;
    let ids: Vec<String> = tasks
        .iter()
        .filter(|t| {
            selection.is_some()
                || !train_default
                || crate::procgen::task_split(t) != Some(crate::procgen::Split::Dev)
        })
        .map(|t| t.id().to_string())
        .collect();
    let (kept, excluded) = exclude_audited(ws, ids, &labels)?;
    if kept.is_empty() {
        anyhow::bail!(
            "--exclude-audit {}: every selected task has such a finding ({} left out)",
            labels.join(","),
            excluded.len()
        );
    }
    Ok(Some((kept.join(","), excluded)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{CheckResult, Finding, AUDIT_FORMAT};
    use crate::store::TaskStatus;
    use crate::task::Task;
    use crate::workbench::reindex_audits;

    fn report(id: &str, label: Option<&str>) -> AuditReport {
        let findings = label
            .map(|l| Finding {
                check: Check::Flaky,
                label: l.into(),
                summary: "s".into(),
                tests: vec![],
                evidence: String::new(),
            })
            .into_iter()
            .collect();
        AuditReport {
            format: AUDIT_FORMAT,
            task_id: id.into(),
            digest: "d".into(),
            audited_at: "2026-12-05T00:00:00Z".into(),
            seconds: 1.0,
            has_oracle: true,
            checks: vec![CheckResult::done(Check::Flaky, findings, vec![])],
            mutation: None,
        }
    }

    #[test]
    fn selections_take_globs_and_all_and_outcomes_read_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        for id in ["up-a", "up-b", "other"] {
            ws.add_task(&Task::minimal(id), TaskStatus::Candidate)
                .unwrap();
        }
        assert_eq!(select_audit_ids(&ws, "up-*").unwrap(), ["up-a", "up-b"]);
        assert_eq!(select_audit_ids(&ws, " all ").unwrap().len(), 3);
        assert_eq!(select_audit_ids(&ws, "").unwrap().len(), 3);
        assert_eq!(
            select_audit_ids(&ws, "other, up-a").unwrap(),
            ["other", "up-a"]
        );
        let e = select_audit_ids(&ws, "up-a,nope*").unwrap_err().to_string();
        assert!(e.contains("\"nope*\" matches no task"), "{e}");
        let o = |id: &str, label: Option<&str>, error: Option<&str>| AuditOutcome {
            id: id.into(),
            report: Some(report(id, label)),
            error: error.map(String::from),
            resumed: false,
        };
        let line = outcome_summary(&[
            o("a", Some("flaky"), None),
            o("b", None, None),
            o("c", None, Some("not stored")),
        ]);
        assert_eq!(
            line,
            "3 tasks audited: 1 with findings (flaky), 1 clean, 1 incomplete or not audited"
        );
        assert_eq!(
            outcome_summary(&[o("b", None, None)]),
            "1 task audited: 0 with findings, 1 clean"
        );
    }

    #[test]
    fn the_index_is_rebuilt_from_the_files_and_excludes_by_label() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        for id in ["a", "b", "c"] {
            ws.add_task(&Task::minimal(id), TaskStatus::Candidate)
                .unwrap();
        }
        file::write(&ws.task_dir("a"), &report("a", Some("flaky"))).unwrap();
        file::write(&ws.task_dir("b"), &report("b", None)).unwrap();
        std::fs::write(ws.task_dir("c").join(file::AUDIT_FILE), "{").unwrap();
        let problems = reindex_audits(&ws).unwrap();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("audit.json"), "{problems:?}");
        assert_eq!(ws.audit_row("a").unwrap().unwrap().labels, vec!["flaky"]);
        let ids = vec!["a".to_string(), "b".into(), "c".into()];
        let (kept, out) = exclude_audited(&ws, ids.clone(), &["flaky".into()]).unwrap();
        assert_eq!(
            (kept, out),
            (vec!["b".to_string(), "c".into()], vec!["a".to_string()])
        );
        assert_eq!(exclude_audited(&ws, ids.clone(), &[]).unwrap().0, ids);
        // A file removed drops its row.
        std::fs::remove_file(ws.task_dir("a").join(file::AUDIT_FILE)).unwrap();
        reindex_audits(&ws).unwrap();
        assert!(ws.audit_row("a").unwrap().is_none());
        assert_eq!(load_audit(&ws, "b").unwrap().unwrap().task_id, "b");
        // A selection without the flagged tasks; unknown labels and empty results refused.
        file::write(&ws.task_dir("b"), &report("b", Some("weak-tests"))).unwrap();
        reindex_audits(&ws).unwrap();
        let (sel, out) = exclude_from_selection(&ws, Some("a,b,c"), "weak-tests", false)
            .unwrap()
            .unwrap();
        assert_eq!((sel.as_str(), out), ("a,c", vec!["b".to_string()]));
        assert!(exclude_from_selection(&ws, None, "", true)
            .unwrap()
            .is_none());
        let e = exclude_from_selection(&ws, None, "weak", false).unwrap_err();
        assert!(e.to_string().contains("unknown audit label"), "{e}");
        let e = exclude_from_selection(&ws, Some("b"), "weak-tests", false).unwrap_err();
        assert!(e.to_string().contains("every selected task"), "{e}");
    }

    /// Each report is stored and indexed as its task finishes, not when the
    /// whole run ends: what an open TUI (watching the index) shows.
    #[test]
    fn each_report_is_indexed_as_soon_as_its_task_is_audited() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        for id in ["one", "two", "three"] {
            ws.add_task(&Task::minimal(id), TaskStatus::Candidate)
                .unwrap();
        }
        let ctx = Context::new(Some(dir.path().to_path_buf())).unwrap();
        let req = AuditRequest {
            ids: vec!["one".into(), "two".into(), "three".into()],
            options: AuditOptions {
                checks: vec![Check::Underspecified],
                ..AuditOptions::default()
            },
            concurrency: Some(1),
            fresh: false,
        };
        let (job, _rx) = JobContext::standalone("audit");
        let seen = std::sync::Mutex::new(Vec::new());
        let watcher = std::sync::Mutex::new(Workspace::open(dir.path()).unwrap());
        audit_tasks(&ctx, Err("no sandbox here".into()), &req, &job, |o| {
            let ws = watcher.lock().unwrap();
            let indexed: Vec<String> = ["one", "two", "three"]
                .into_iter()
                .filter(|id| ws.audit_row(id).unwrap().is_some())
                .map(String::from)
                .collect();
            let stored = file::read(&ws.task_dir(&o.id)).unwrap().is_some();
            seen.lock().unwrap().push((o.id.clone(), stored, indexed));
        })
        .unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 3);
        for (n, (id, stored, indexed)) in seen.iter().enumerate() {
            assert!(stored, "{id}'s report is on disk when it finishes");
            assert_eq!(indexed.len(), n + 1, "{id}: indexed so far {indexed:?}");
            assert!(indexed.contains(id), "{id}: {indexed:?}");
        }
    }

    #[test]
    fn a_static_audit_needs_no_sandbox_and_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let mut t = Task::minimal("s");
        t.meta.verifier.final_tests = vec!["test_final_state.py".into()];
        t.tests.insert_text(
            "test_final_state.py",
            "def test_x():\n    assert open('/home/user/secret_name.txt').read() == 'x'\n",
        );
        ws.add_task(&t, TaskStatus::Candidate).unwrap();
        let ctx = Context::new(Some(dir.path().to_path_buf())).unwrap();
        let req = AuditRequest {
            ids: vec!["s".into(), "missing".into()],
            options: AuditOptions {
                checks: vec![Check::Underspecified],
                ..AuditOptions::default()
            },
            concurrency: Some(1),
            fresh: false,
        };
        let (job, _rx) = JobContext::standalone("audit");
        let out = audit_tasks(&ctx, Err("no sandbox here".into()), &req, &job, |_| {}).unwrap();
        assert_eq!(out.len(), 2);
        let r = out[0].report.as_ref().unwrap();
        assert_eq!(r.labels(), vec!["underspecified"]);
        assert!(!out[0].resumed);
        assert!(out[1].error.as_deref().unwrap().contains("missing"));
        assert_eq!(
            ws.audit_row("s").unwrap().unwrap().labels,
            vec!["underspecified"]
        );
        let again = audit_tasks(&ctx, Err("no sandbox here".into()), &req, &job, |_| {}).unwrap();
        assert!(again[0].resumed, "a current report is kept");
        let sandboxed = AuditRequest {
            options: AuditOptions::default(),
            ..req
        };
        let failed = audit_tasks(
            &ctx,
            Err("no sandbox here".into()),
            &sandboxed,
            &job,
            |_| {},
        )
        .unwrap();
        assert_eq!(failed[0].error.as_deref(), Some("no sandbox here"));
    }
}
