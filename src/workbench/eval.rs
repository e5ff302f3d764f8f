//! Evaluation: episodes of a policy on tasks in the sandbox, written under
//! `runs/<run-id>/`, indexed in the workspace, summarised (pass rate,
//! pass@k, failure modes) and reported. `endless eval`, `endless run` and
//! the TUI's evaluation job all run [`eval`] or [`run_episode`]; the run id
//! is stable for the same inputs, so re-running resumes and skips finished
//! episodes.
//!
//! Progress (`episodes` done of all), one log line per turn and per
//! finished episode, and cancellation go through the [`JobContext`]. A front
//! end that wants more (the TUI's live panes and takeover) passes
//! [`RolloutHooks`]: its own sandbox provider around the real one, and every
//! raw [`RolloutEvent`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::cancel::{cut_by_cancel, CANCELLED};
use super::{index_episodes, record_pass_at_k, run_id, select_tasks, Context};
use crate::agent::protocol::Protocol;
use crate::agent::{
    run_rollouts, BackendProvider, EpisodeResult, ForkOf, PolicyFactory, RolloutConfig,
    RolloutEvent, SandboxProvider, StepKind,
};
use crate::eval::EvalReport;
use crate::jobs::JobContext;
use crate::store::Workspace;
use crate::task::Task;

/// An evaluation: `endless eval`'s flags, or the TUI's evaluation form.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalRequest {
    /// The policy spec (`oracle`, `openai:MODEL@URL`, `local:DIR`...).
    pub policy: String,
    /// Comma-separated task ids or `*` globs (`None`: all but rejected
    /// and archived).
    pub tasks: Option<String>,
    /// Samples per task.
    pub samples: u32,
    /// Turn limit (`None`: each task's own).
    pub max_turns: Option<u32>,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Agent protocol profile (`endless`, `reference`; `None`: `[agent] protocol`).
    pub protocol: Option<String>,
    /// Sessions without network even for tasks that ask for it (`--offline`).
    #[serde(default)]
    pub offline: bool,
}

/// One episode: `endless run TASK --policy P`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    /// The policy spec.
    pub policy: String,
    /// The task id.
    pub task: String,
    /// Turn limit (`None`: the task's own).
    pub max_turns: Option<u32>,
    /// Agent protocol profile (`None`: `[agent] protocol`).
    pub protocol: Option<String>,
    /// Fork a recorded episode instead of starting from the task's initial
    /// state: its commands before the step re-run first.
    pub fork: Option<super::fork::ForkRequest>,
    /// Sessions without network even for tasks that ask for it (`--offline`).
    pub offline: bool,
}

/// What an evaluation produced.
#[derive(Debug, Clone)]
pub struct EvalOutcome {
    /// The run id (`eval-<hash>`).
    pub run_id: String,
    /// `runs/<run-id>` in the workspace.
    pub run_dir: PathBuf,
    /// Pass rate, pass@k and failure modes over [`Self::episodes`].
    pub report: EvalReport,
    /// The Markdown report written into the run directory.
    pub report_path: PathBuf,
    /// The episodes that count (resumed ones included).
    pub episodes: Vec<EpisodeResult>,
    /// Episodes cut short by a cancel, left out of everything above.
    pub cut_short: usize,
}

/// How a front end takes part in a run beyond job events.
pub trait RolloutHooks {
    /// The sandbox provider the episodes run with.
    type Provider: SandboxProvider;

    /// Wrap the real provider; `stop` is the run's cancel flag (set once
    /// the job is cancelled).
    fn provider(&mut self, inner: BackendProvider, stop: Arc<AtomicBool>) -> Arc<Self::Provider>;

    /// Every event of run `run_id`, after the job has reported it. Called
    /// inside the run's tokio runtime, so it may spawn tasks.
    fn on_event(&mut self, run_id: &str, event: RolloutEvent);

    /// Whether its provider stops running episodes once the job is
    /// cancelled (they end with [`CANCELLED`]); otherwise they run on to
    /// their end and only new ones are not started.
    fn cuts_running_on_cancel(&self) -> bool {
        false
    }
}

/// No hooks: the real provider, events reported through the job only.
pub struct Plain;

impl RolloutHooks for Plain {
    type Provider = BackendProvider;

    fn provider(&mut self, inner: BackendProvider, _stop: Arc<AtomicBool>) -> Arc<BackendProvider> {
        Arc::new(inner)
    }

    fn on_event(&mut self, _run_id: &str, _event: RolloutEvent) {}
}

/// Evaluate `req.policy` on the selected tasks: run (or resume) the
/// episodes, index them, store each task's pass@k, write the Markdown
/// report and finish the run. A cancelled job stops starting episodes and
/// still reports on those that finished; the caller decides whether a
/// cancel is an error (`job.check()`).
pub fn eval<H: RolloutHooks>(
    ctx: &Context,
    req: &EvalRequest,
    job: &JobContext,
    hooks: &mut H,
) -> Result<EvalOutcome> {
    eval_shard(ctx, req, None, job, hooks)
}

/// The run id of evaluation `req` over `tasks`: stable for the same
/// inputs, so a re-run resumes; every shard of a sharded evaluation has the
/// id of the whole one.
fn eval_run_id(req: &EvalRequest, tasks: &[Task], protocol: &Protocol) -> String {
    let ids: Vec<&str> = tasks.iter().map(Task::id).collect();
    let (joined, samples) = (ids.join(","), req.samples.to_string());
    let turns = format!("{:?}", req.max_turns);
    let mut id_parts = vec![req.policy.as_str(), &joined, &samples, &turns];
    // Another protocol is another run (the default keeps earlier runs' ids).
    let protocol_name = protocol.describe();
    if *protocol != Protocol::endless() {
        id_parts.push(&protocol_name);
    }
    // Offline sessions are another run too (without, ids stay as they were).
    if req.offline {
        id_parts.push("offline");
    }
    run_id("eval", &id_parts)
}

/// [`eval`], of shard `shard` only (`--shard I/N`): the tasks of the
/// selection whose id hashes to this shard, under the run id of the whole
/// selection, recorded in the workspace's `shard.json` (done once the
/// shard's episodes are); the shards' workspaces merged give the run one
/// unsharded evaluation gives.
pub fn eval_shard<H: RolloutHooks>(
    ctx: &Context,
    req: &EvalRequest,
    shard: Option<crate::store::Shard>,
    job: &JobContext,
    hooks: &mut H,
) -> Result<EvalOutcome> {
    let ws = ctx.workspace()?;
    let mut tasks = select_tasks(&ws, req.tasks.as_deref())?;
    if tasks.is_empty() {
        bail!(
            "no tasks selected in {} (try `endless generate --offline --count 20`)",
            ws.root().display()
        );
    }
    let policy = PolicyFactory::from_spec(&req.policy, &ctx.policy_options())?;
    let protocol = ctx.protocol(req.protocol.as_deref())?;
    let run_id = eval_run_id(req, &tasks, &protocol);
    let planned_tasks = tasks.len();
    let shard_run = match shard {
        Some(shard) => {
            tasks = shard.select(tasks, |t| t.id());
            job.log(format!(
                "shard {shard}: {} of {planned_tasks} tasks",
                tasks.len()
            ));
            Some(super::shard_run::ShardRun::begin(
                ws.root(),
                shard,
                super::shard_run::ShardJob {
                    kind: "eval",
                    key: run_id.clone(),
                    request: serde_json::to_value(req)?,
                    items: tasks.len(),
                    total: planned_tasks,
                },
            )?)
        }
        None => None,
    };
    job.log(format!(
        "run {run_id}: {}",
        crate::plural::count(tasks.len(), "task")
    ));
    let plan = Plan {
        run_id: &run_id,
        kind: "eval",
        policy_spec: &req.policy,
        samples: req.samples,
        max_turns: req.max_turns,
        concurrency: req.concurrency,
        protocol,
        planned_tasks,
        offline: req.offline,
        fork: None,
    };
    let (episodes, cut_short) = rollouts(ctx, &ws, &plan, tasks, policy, job, hooks)?;
    let report = crate::eval::evaluate(&episodes);
    record_pass_at_k(&ws, &report)?;
    let run_dir = ws.runs_dir().join(&run_id);
    let report_path = crate::eval::write_markdown_report(
        &report,
        &format!("Evaluation of {}", req.policy),
        &run_dir,
    )
    .context("writing the report")?;
    ws.finish_run(&run_id, &serde_json::to_value(&report)?)?;
    if let Some(shard_run) = shard_run {
        if cut_short == 0 && !job.is_cancelled() {
            shard_run.finish()?;
        }
    }
    Ok(EvalOutcome {
        run_id,
        run_dir,
        report,
        report_path,
        episodes,
        cut_short,
    })
}

/// Finish evaluation run `run_id` of `req` in `ws` from the episodes on
/// disk (the shards' episodes, merged): its pass@k, Markdown report and
/// summary, as one unsharded run writes them. Runs no episode. Returns the
/// run id.
pub fn finish_merged(ws: &Workspace, req: &EvalRequest, run_id: &str) -> Result<String> {
    let run_dir = ws.runs_dir().join(run_id);
    let episodes: Vec<EpisodeResult> = crate::agent::load_run(&run_dir)
        .into_iter()
        .filter(|e| !e.error.as_deref().is_some_and(|m| m.contains(CANCELLED)))
        .collect();
    let report = crate::eval::evaluate(&episodes);
    record_pass_at_k(ws, &report)?;
    crate::eval::write_markdown_report(&report, &format!("Evaluation of {}", req.policy), &run_dir)
        .context("writing the report")?;
    ws.finish_run(run_id, &serde_json::to_value(&report)?)?;
    Ok(run_id.to_string())
}

/// Run one episode of `req.policy` on `req.task` (a fresh run each time:
/// its id includes the time) and index it.
pub fn run_episode<H: RolloutHooks>(
    ctx: &Context,
    req: &RunRequest,
    job: &JobContext,
    hooks: &mut H,
) -> Result<EpisodeResult> {
    let ws = ctx.workspace()?;
    let task = ws.load_task(&req.task)?;
    let mut policy = PolicyFactory::from_spec(&req.policy, &ctx.policy_options())?;
    let protocol = ctx.protocol(req.protocol.as_deref())?;
    let mut link = None;
    if let Some(fork) = &req.fork {
        let (parent, mut of) = super::fork::load_parent(&ws, fork, &req.task)?;
        let source = crate::agent::policy::ForkSource::new(&parent, fork.at_step, policy)?;
        of.replayed = source.replayed() as u32;
        job.log(format!(
            "fork of {}/{}/{} at step {}: {} commands re-run first",
            of.run, of.task, of.sample, of.at_step, of.replayed
        ));
        policy = PolicyFactory::Custom(std::sync::Arc::new(source));
        link = Some(of);
    }
    let fork_key = link
        .as_ref()
        .map(|l| format!("fork {}/{}/{} @{}", l.run, l.task, l.sample, l.at_step))
        .unwrap_or_default();
    let run_id = run_id(
        "run",
        &[
            &req.policy,
            &req.task,
            &format!("{:?}", req.max_turns),
            &crate::store::now(),
            &fork_key,
        ],
    );
    let plan = Plan {
        run_id: &run_id,
        kind: "run",
        policy_spec: &req.policy,
        samples: 1,
        max_turns: req.max_turns,
        concurrency: 1,
        protocol,
        planned_tasks: 1,
        offline: req.offline,
        fork: link,
    };
    let (episodes, _) = rollouts(ctx, &ws, &plan, vec![task], policy, job, hooks)?;
    episodes
        .into_iter()
        .next()
        .context("the episode did not run")
}

/// What [`rollouts`] runs.
struct Plan<'a> {
    run_id: &'a str,
    kind: &'a str,
    policy_spec: &'a str,
    samples: u32,
    max_turns: Option<u32>,
    concurrency: usize,
    protocol: Protocol,
    /// Tasks of the whole run (a shard runs some of them).
    planned_tasks: usize,
    /// Sessions without network (`--offline`).
    offline: bool,
    /// The parent of a fork (`run --fork`): its episode's result and index
    /// row link to it.
    fork: Option<ForkOf>,
}

/// Run the episodes, report them through `job` and `hooks`, index those
/// that count; returns them and how many a cancel cut short.
fn rollouts<H: RolloutHooks>(
    ctx: &Context,
    ws: &Workspace,
    plan: &Plan<'_>,
    tasks: Vec<Task>,
    policy: PolicyFactory,
    job: &JobContext,
    hooks: &mut H,
) -> Result<(Vec<EpisodeResult>, usize)> {
    let backend = crate::sandbox::offline::offline_if(ctx.backend()?, plan.offline);
    let backend: Arc<dyn crate::sandbox::Backend> = backend.into();
    if plan.offline {
        let networked = tasks.iter().filter(|t| t.meta.environment.network).count();
        if networked > 0 {
            job.log(format!(
                "{networked} of {}: {}",
                crate::plural::count(tasks.len(), "task"),
                crate::sandbox::offline::OFFLINE_NOTE
            ));
        }
    }
    let run_dir = ws.runs_dir().join(plan.run_id);
    let mut config = RolloutConfig::new(&run_dir);
    config.samples = plan.samples.max(1);
    config.concurrency = plan.concurrency.max(1);
    config.max_turns = plan.max_turns;
    config.protocol = plan.protocol.clone();
    config.command_timeout = Duration::from_secs_f64(ctx.config.agent.command_timeout_sec.max(1.0));
    config.atif = ctx.config.record.atif;
    let cancel = Arc::new(AtomicBool::new(false));
    config.cancel = Some(cancel.clone());
    ws.upsert_run(
        plan.run_id,
        plan.kind,
        plan.policy_spec,
        &serde_json::json!({ "samples": plan.samples, "max_turns": plan.max_turns, "tasks": plan.planned_tasks }),
    )?;
    let mut inner = BackendProvider::new(backend);
    inner.session.max_recording_bytes = ctx.config.sandbox.max_recording_bytes;
    let provider = hooks.provider(inner, cancel.clone());
    let total_planned = (tasks.len() as u64) * u64::from(plan.samples.max(1));
    job.progress(0, total_planned, "episodes");
    let rt = tokio::runtime::Runtime::new()?;
    let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel();
    let summary = rt.block_on(async {
        let run = run_rollouts(config, tasks, policy, provider, Some(etx));
        tokio::pin!(run);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let (mut done, mut total) = (0u64, total_planned);
        let cuts_running = hooks.cuts_running_on_cancel();
        let mut on_event = |ev: RolloutEvent| {
            match &ev {
                RolloutEvent::Planned { total: t, finished } => {
                    total = *t as u64;
                    done = *finished as u64;
                    job.progress(done, total, "episodes");
                }
                RolloutEvent::Started { .. } => {}
                RolloutEvent::Step { task, sample, step } => {
                    let command = step.command.as_deref().unwrap_or_default();
                    let who = if step.kind == StepKind::Human {
                        " (human)"
                    } else {
                        ""
                    };
                    job.log(format!(
                        "{task}#{sample} turn {}{who}: {command}",
                        step.turn
                    ));
                }
                RolloutEvent::Finished { result } if cut_by_cancel(result) => {
                    job.log(format!(
                        "{}#{}: cancelled after {} turns (not counted)",
                        result.task, result.sample, result.turns
                    ));
                }
                RolloutEvent::Finished { result } => {
                    done += 1;
                    job.progress(done, total.max(done), "episodes");
                    job.log(format!(
                        "{}#{}: {} after {} turns{}",
                        result.task,
                        result.sample,
                        if result.passed { "passed" } else { "failed" },
                        result.turns,
                        if result.taken_over.is_some() {
                            " (taken over by a human: not counted)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            hooks.on_event(plan.run_id, ev);
        };
        let out = loop {
            tokio::select! {
                out = &mut run => break out,
                Some(ev) = erx.recv() => on_event(ev),
                _ = tick.tick() => {
                    if job.is_cancelled() && !cancel.load(Ordering::Relaxed) {
                        job.log(if cuts_running {
                            "cancelling: no new episodes start; running ones stop now and are not counted (running the evaluation again retries them)"
                        } else {
                            "cancelling: no new episodes start; running ones finish"
                        });
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
    let (episodes, cut): (Vec<_>, Vec<_>) = summary
        .episodes
        .into_iter()
        .partition(|e| !cut_by_cancel(e));
    if !cut.is_empty() {
        job.log(format!(
            "{} cut short by the cancel {} not indexed; re-running this evaluation retries them",
            crate::plural::count(cut.len(), "episode"),
            if cut.len() == 1 { "is" } else { "are" }
        ));
    }
    // A fork learns its parent before it is indexed, so that the index
    // (what the TUI's `⑂`, `/fork` and `m` read) has the link at once.
    let episodes = match &plan.fork {
        Some(link) => episodes
            .into_iter()
            .map(|e| super::fork::link_fork(&run_dir, e, link.clone()))
            .collect::<Result<Vec<_>>>()?,
        None => episodes,
    };
    index_episodes(ws, plan.run_id, &episodes)?;
    Ok((episodes, cut.len()))
}
