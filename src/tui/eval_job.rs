//! The evaluation job: episodes of a policy on the selected tasks in the
//! real sandbox, as `endless eval` runs them (same run ids, so a re-run
//! resumes; same indexing and pass@k), with every episode's terminal
//! streamed to a live pane.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::app::{Action, LiveEvent};
use super::event::Msg;
use super::takeover::TakeoverProvider;
use crate::agent::{run_rollouts, BackendProvider, PolicyFactory, RolloutConfig, RolloutEvent};
use crate::jobs::JobContext;
use crate::task::Task;
use crate::workbench::{index_episodes, record_pass_at_k, run_id, select_tasks};
use crate::workbench::Context;

/// The evaluation form's values.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub policy: String,
    pub tasks: Option<String>,
    pub samples: u32,
    pub max_turns: Option<u32>,
    pub concurrency: usize,
}

fn send(tx: &Sender<Msg>, ev: LiveEvent) {
    let _ = tx.send(Msg::Action(Action::Live(ev)));
}

/// Run the evaluation; returns a one-line summary.
pub fn run(
    ctx: &JobContext,
    root: &Path,
    opts: &EvalOptions,
    tx: &Sender<Msg>,
) -> anyhow::Result<String> {
    let cctx = Context::new(Some(root.to_path_buf()))?;
    let ws = cctx.workspace()?;
    let tasks = select_tasks(&ws, opts.tasks.as_deref())?;
    if tasks.is_empty() {
        bail!("no tasks selected in {}", root.display());
    }
    let policy = PolicyFactory::from_spec(&opts.policy, &cctx.policy_options())?;
    if matches!(policy, PolicyFactory::Human) {
        bail!(
            "the human policy needs a terminal of its own: use `endless run TASK --policy human`"
        );
    }
    let ids: Vec<&str> = tasks.iter().map(Task::id).collect();
    let run_id = run_id(
        "eval",
        &[
            &opts.policy,
            &ids.join(","),
            &opts.samples.to_string(),
            &format!("{:?}", opts.max_turns),
        ],
    );
    ctx.log(format!("run {run_id}: {} tasks", tasks.len()));
    let backend: Arc<dyn crate::sandbox::Backend> = cctx.backend()?.into();
    let run_dir = ws.runs_dir().join(&run_id);
    let mut config = RolloutConfig::new(&run_dir);
    config.samples = opts.samples.max(1);
    config.concurrency = opts.concurrency.max(1);
    config.max_turns = opts.max_turns;
    config.protocol = cctx.protocol(None)?;
    config.command_timeout =
        Duration::from_secs_f64(cctx.config.agent.command_timeout_sec.max(1.0));
    let cancel = Arc::new(AtomicBool::new(false));
    config.cancel = Some(cancel.clone());
    ws.upsert_run(
        &run_id,
        "eval",
        &opts.policy,
        &serde_json::json!({ "samples": opts.samples, "max_turns": opts.max_turns, "tasks": tasks.len() }),
    )?;
    let mut inner = BackendProvider::new(backend);
    inner.session.max_recording_bytes = cctx.config.sandbox.max_recording_bytes;
    let provider = Arc::new(TakeoverProvider::new(inner, cancel.clone()));
    let (rows, cols) = (48u16, 160u16);
    let rt = tokio::runtime::Runtime::new()?;
    let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel();
    let summary = rt.block_on(async {
        let run = run_rollouts(config, tasks, policy, provider.clone(), Some(etx));
        tokio::pin!(run);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let (mut done, mut total, mut passed) = (0u64, 0u64, 0u64);
        let mut on_event = |ev: RolloutEvent| match ev {
            RolloutEvent::Planned { total: t, finished } => {
                total = t as u64;
                done = finished as u64;
                ctx.progress(done, total, "episodes");
            }
            RolloutEvent::Started {
                task,
                sample,
                stream,
            } => {
                let key = format!("{run_id}/{task}/{sample}");
                send(
                    tx,
                    LiveEvent::Open {
                        key: key.clone(),
                        title: format!("{task}#{sample}"),
                        policy: opts.policy.clone(),
                        rows,
                        cols,
                        input: provider.handle(&task, sample),
                    },
                );
                if let Some(mut stream) = stream {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        use tokio::sync::broadcast::error::RecvError;
                        loop {
                            match stream.recv().await {
                                Ok(bytes) => send(
                                    &tx,
                                    LiveEvent::Feed {
                                        key: key.clone(),
                                        bytes: bytes.to_vec(),
                                    },
                                ),
                                Err(RecvError::Lagged(_)) => continue,
                                Err(RecvError::Closed) => return,
                            }
                        }
                    });
                }
            }
            RolloutEvent::Step { task, sample, step } => {
                let command = step.command.clone().unwrap_or_default();
                ctx.log(format!("{task}#{sample} turn {}: {command}", step.turn));
                send(
                    tx,
                    LiveEvent::Step {
                        key: format!("{run_id}/{task}/{sample}"),
                        turn: step.turn,
                        command,
                    },
                );
            }
            RolloutEvent::Finished { result } => {
                done += 1;
                passed += u64::from(result.passed);
                ctx.progress(done, total.max(done), "episodes");
                ctx.log(format!(
                    "{}#{}: {} after {} turns",
                    result.task,
                    result.sample,
                    if result.passed { "passed" } else { "failed" },
                    result.turns
                ));
                send(
                    tx,
                    LiveEvent::Finished {
                        key: format!("{run_id}/{}/{}", result.task, result.sample),
                        passed: result.passed,
                    },
                );
            }
        };
        let out = loop {
            tokio::select! {
                out = &mut run => break out,
                Some(ev) = erx.recv() => on_event(ev),
                _ = tick.tick() => {
                    if ctx.is_cancelled() && !cancel.load(Ordering::Relaxed) {
                        ctx.log("cancelling: no new episodes start; running ones finish");
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
            }
        };
        while let Ok(ev) = erx.try_recv() {
            on_event(ev);
        }
        out
    })?;
    // Episodes cut short by a cancel are not results: leave them out (a
    // re-run of the same evaluation retries them).
    let (episodes, cut): (Vec<_>, Vec<_>) = summary.episodes.into_iter().partition(|e| {
        !e.error
            .as_deref()
            .is_some_and(|m| m.contains(super::takeover::CANCELLED))
    });
    if !cut.is_empty() {
        ctx.log(format!(
            "{} episodes cut short by the cancel are not indexed; re-running this evaluation retries them",
            cut.len()
        ));
    }
    index_episodes(&ws, &run_id, &episodes)?;
    let report = crate::eval::evaluate(&episodes);
    record_pass_at_k(&ws, &report)?;
    crate::eval::write_markdown_report(
        &report,
        &format!("Evaluation of {}", opts.policy),
        &run_dir,
    )
    .context("writing the report")?;
    ws.finish_run(&run_id, &serde_json::to_value(&report)?)?;
    ctx.check()?;
    let passed = episodes.iter().filter(|e| e.passed).count();
    Ok(format!(
        "{passed}/{} episodes passed (run {run_id})",
        episodes.len()
    ))
}
