//! Background jobs started from the Jobs view. Every job is a
//! [`crate::workbench`] use case run through the [`JobManager`] on its own
//! thread, never on the UI thread and never as a child process; its events
//! are forwarded to the event loop as [`Action::Job`].

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use crate::jobs::{JobContext, JobId, JobManager, NothingDone};
use crate::tui::action::{Action, Msg};
use crate::tui::launch::JobSpec;
use crate::workbench::generate::{LlmRequest, OfflineRequest};
use crate::workbench::validate;
use crate::workbench::{Context, EvalRequest};

/// Owns the job manager and forwards its events to the UI.
pub struct Launcher {
    manager: JobManager,
    root: PathBuf,
    tx: Sender<Msg>,
}

impl Launcher {
    /// A launcher journalling into the workspace at `root`; events go to `tx`.
    pub fn new(root: &Path, tx: Sender<Msg>) -> anyhow::Result<Launcher> {
        let manager = JobManager::new(Some(root))?;
        let mut events = manager.subscribe();
        let fwd = tx.clone();
        std::thread::Builder::new()
            .name("job events".into())
            .spawn(move || loop {
                match events.blocking_recv() {
                    Ok(ev) => {
                        if fwd.send(Msg::Action(Action::Job(ev))).is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            })?;
        Ok(Launcher {
            manager,
            root: root.to_path_buf(),
            tx,
        })
    }

    /// Start a job; returns its id.
    pub fn launch(&self, spec: JobSpec) -> anyhow::Result<JobId> {
        let root = self.root.clone();
        let tx = self.tx.clone();
        let params = spec.params();
        let kind = spec.kind();
        let id = match spec {
            JobSpec::Eval {
                policy,
                tasks,
                samples,
                max_turns,
                concurrency,
            } => self.manager.spawn(kind, params, move |ctx| {
                let req = EvalRequest {
                    policy,
                    tasks: (!tasks.is_empty()).then_some(tasks),
                    samples,
                    max_turns,
                    concurrency,
                    protocol: None,
                    offline: false,
                };
                crate::tui::launch::eval::run(ctx, &root, &req, &tx)
            })?,
            JobSpec::Fork {
                parent,
                task,
                at_step,
                policy,
            } => self.manager.spawn(kind, params, move |ctx| {
                let req = crate::workbench::RunRequest {
                    policy,
                    task,
                    max_turns: None,
                    protocol: None,
                    fork: Some(crate::workbench::fork::ForkRequest { parent, at_step }),
                    offline: false,
                };
                crate::tui::launch::eval::fork(ctx, &root, &req, &tx)
            })?,
            JobSpec::Audit {
                tasks,
                checks,
                concurrency,
            } => self.manager.spawn(kind, params, move |ctx| {
                crate::tui::launch::audit::run(ctx, &root, &tasks, &checks, concurrency)
            })?,
            JobSpec::Repair {
                tasks,
                url,
                model,
                solutions,
            } => self.manager.spawn(kind, params, move |ctx| {
                let req = crate::workbench::repair::RepairRequest {
                    ids: tasks,
                    url: Some(url),
                    model: Some(model),
                    solutions: Some(solutions),
                    ..Default::default()
                };
                let cctx = Context::new(Some(root))?;
                let outcomes = crate::workbench::repair::repair_tasks(&cctx, &req, ctx)?;
                let summary = crate::workbench::repair::outcome_summary(&outcomes);
                if outcomes.iter().any(|o| o.repaired()) {
                    Ok(summary)
                } else {
                    Err(anyhow::anyhow!(summary))
                }
            })?,
            JobSpec::Validate { tasks } => self
                .manager
                .spawn(kind, params, move |ctx| validate_job(ctx, &root, tasks))?,
            JobSpec::Generate {
                url,
                model,
                count,
                solutions,
            } => self.manager.spawn(kind, params, move |ctx| {
                let req = LlmRequest {
                    count,
                    url: Some(url),
                    model: Some(model),
                    solutions: Some(solutions),
                    ..LlmRequest::default()
                };
                let cctx = Context::new(Some(root))?;
                let funnel = crate::workbench::generate::llm(&cctx, &req, ctx)?;
                Ok(crate::workbench::generate::funnel_summary(&funnel))
            })?,
            JobSpec::Offline {
                count,
                seed,
                split,
                families,
            } => self.manager.spawn(kind, params, move |ctx| {
                let req = OfflineRequest {
                    count,
                    seed,
                    split,
                    families,
                };
                let cctx = Context::new(Some(root))?;
                let report = crate::workbench::generate::offline(&cctx, &req, ctx)?;
                if let Some(f) = report.failed.first() {
                    anyhow::bail!(
                        "{} failed to write (first: {f})",
                        crate::plural::count(report.failed.len(), "task")
                    );
                }
                if report.nothing_written() {
                    // The form proposes the free seed next time.
                    if let Some(seed) = report.next_free_seed {
                        let _ = tx.send(Msg::Action(Action::OfflineSeed(seed)));
                    }
                    return Err(NothingDone(report.summary()).into());
                }
                Ok(report.summary())
            })?,
            JobSpec::Train(spec) => {
                // Refused before it starts, as the job would refuse it.
                crate::tui::launch::train::check(&root, &spec)?;
                self.manager.spawn(kind, params, move |ctx| {
                    crate::tui::launch::train::run(ctx, &root, &spec)
                })?
            }
        };
        Ok(id)
    }

    /// Ask a running job to stop.
    pub fn cancel(&self, id: &str) -> bool {
        self.manager.cancel(&JobId(id.to_string()))
    }
}

/// Validate each task (all when `tasks` is empty) with progress.
fn validate_job(ctx: &JobContext, root: &Path, tasks: Vec<String>) -> anyhow::Result<String> {
    let cctx = Context::new(Some(root.to_path_buf()))?;
    let ids = if tasks.is_empty() {
        cctx.workspace()?
            .list_tasks(&Default::default())?
            .into_iter()
            .map(|r| r.id)
            .collect()
    } else {
        tasks
    };
    // A backend that does not start makes each task invalid, with why.
    let backend = cctx.backend().map_err(|e| crate::logging::error_text(&e));
    let verdicts = crate::workbench::validate_tasks(&cctx, backend, &ids, ctx, |_| {})?;
    // The invalid ones by their first blocker's class, each with what it
    // names; then one task's verdict, or a count and the classes.
    let invalid = verdicts.iter().filter(|v| !v.ok);
    for line in crate::workbench::blockers::blockers_by_class(
        invalid.map(crate::workbench::blockers::Invalid::of),
    ) {
        ctx.log(line);
    }
    Ok(validate::verdicts_summary(&verdicts))
}
