//! Generation, in-process: offline procedural tasks ([`offline`]) and the
//! four-stage LLM pipeline ([`llm`], with an optional audit stage) against any OpenAI-compatible server.
//! `endless generate` and the TUI's generation jobs both call these; the
//! TUI runs them on a job thread (it starts no child process).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::Context;
use crate::agent::PolicyFactory;
use crate::generate::config::{AuditStage, PipelineConfig};
use crate::generate::funnel::{CandidateOutcome, Funnel};
use crate::generate::pipeline::{run_pipeline, InfraFailed, PipelineEvent};
use crate::generate::record::Journal;
use crate::jobs::{Cancelled, JobContext};
use crate::llm::{api_key_from_env, OpenAiChat, OpenAiConfig, SamplingParams};
use crate::procgen::{generate_batch_from, usable_families, Split};
use crate::store::{TaskStatus, Workspace};
use crate::task::EnvKind;

/// Offline generation: `endless generate --offline`'s flags, or the TUI's
/// offline form.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OfflineRequest {
    /// Tasks to generate.
    pub count: usize,
    /// The seed (the same seed gives the same tasks).
    pub seed: u64,
    /// Draw from the train or the held-out dev split (`None`: both).
    pub split: Option<Split>,
    /// Use just these families (empty: every usable one).
    pub families: Vec<String>,
}

/// What an offline generation wrote.
#[derive(Debug, Serialize)]
pub struct OfflineReport {
    /// Tasks asked for.
    pub requested: usize,
    /// New tasks written.
    pub written: usize,
    /// Already in the workspace (same family, seed and complexity).
    pub existing: usize,
    /// Tasks that could not be written, with the reason.
    pub failed: Vec<String>,
    /// Families drawn from.
    pub families: usize,
    /// Families left out because a tool they need is missing: (family, tool).
    pub skipped_families: Vec<(String, String)>,
    /// Wall time.
    pub seconds: f64,
    /// Throughput.
    pub tasks_per_sec: f64,
    /// When nothing was written because every task was already there: the
    /// next seed whose whole batch is new.
    pub next_free_seed: Option<u64>,
    /// The seed asked for.
    pub seed: u64,
}

impl OfflineReport {
    /// `N tasks written (M already present) from F families in ...`, or,
    /// when nothing was written because it was all there, `0 tasks written:
    /// all N tasks of seed S are already present; next free seed T`.
    pub fn summary(&self) -> String {
        if self.nothing_written() {
            let next = self
                .next_free_seed
                .map_or(String::new(), |s| format!("; next free seed {s}"));
            return format!(
                "0 tasks written: all {} of seed {} {} already present{next}",
                crate::plural::count(self.existing, "task"),
                self.seed,
                if self.existing == 1 { "is" } else { "are" }
            );
        }
        format!(
            "{} written ({} already present) from {} in {:.2}s ({:.0} tasks/s)",
            crate::plural::count(self.written, "task"),
            self.existing,
            crate::plural::count(self.families, "family"),
            self.seconds,
            self.tasks_per_sec
        )
    }

    /// Tasks were asked for, none failed, and none was new.
    pub fn nothing_written(&self) -> bool {
        self.requested > 0 && self.written == 0 && self.failed.is_empty()
    }
}

/// The first seed from `from` on whose whole batch of `count` tasks (in
/// `split`, over `families`) is absent from the workspace; `None` within
/// a thousand seeds.
fn first_free_seed(
    ws: &Workspace,
    families: &[&'static dyn crate::procgen::Family],
    count: usize,
    from: u64,
    split: Option<Split>,
) -> Option<u64> {
    (from..from.saturating_add(1000)).find(|s| {
        generate_batch_from(families, count, *s, split)
            .iter()
            .all(|t| !ws.has_task(t.id()))
    })
}

/// The seed the offline form should propose for `count` tasks: the first
/// from 1 on whose whole batch is new to the workspace.
pub fn next_free_seed(ws: &Workspace, count: usize) -> Option<u64> {
    let (families, _) = usable_families();
    first_free_seed(ws, &families, count.max(1), 1, None)
}

/// Generate `req.count` tasks balanced over the usable families and write
/// the new ones into the workspace as candidates.
pub fn offline(ctx: &Context, req: &OfflineRequest, job: &JobContext) -> Result<OfflineReport> {
    let mut ws = ctx.workspace()?;
    offline_into(&mut ws, req, job)
}

/// [`offline`] into an opened workspace (seeding a fresh one uses it).
pub fn offline_into(
    ws: &mut Workspace,
    req: &OfflineRequest,
    job: &JobContext,
) -> Result<OfflineReport> {
    offline_shard_into(ws, req, None, job)
}

/// [`offline`], writing only the tasks of shard `shard` (`--shard I/N`):
/// the whole batch is drawn (cheap: no sandbox, no model) and the tasks
/// whose id hashes to this shard are written, so N shards write exactly
/// the tasks one unsharded run writes. The shard is recorded in the
/// workspace's `shard.json`.
pub fn offline_shard(
    ctx: &Context,
    req: &OfflineRequest,
    shard: Option<crate::store::Shard>,
    job: &JobContext,
) -> Result<OfflineReport> {
    let mut ws = ctx.workspace()?;
    offline_shard_into(&mut ws, req, shard, job)
}

/// [`offline_shard`] into an opened workspace.
pub fn offline_shard_into(
    ws: &mut Workspace,
    req: &OfflineRequest,
    shard: Option<crate::store::Shard>,
    job: &JobContext,
) -> Result<OfflineReport> {
    let start = Instant::now();
    let (mut families, skipped) = usable_families();
    if !req.families.is_empty() {
        for name in &req.families {
            if crate::procgen::family(name).is_none() {
                let known: Vec<&str> = crate::procgen::families()
                    .iter()
                    .map(|f| f.name())
                    .collect();
                bail!(
                    "--families: unknown family {name:?}; known: {}",
                    known.join(", ")
                );
            }
            if let Some((_, tool)) = skipped.iter().find(|(f, _)| f == name) {
                bail!("--families: {name} needs `{tool}`, which is not installed");
            }
        }
        families.retain(|f| req.families.iter().any(|n| n == f.name()));
    }
    let count = req.count as u64;
    job.progress(0, count, "generating");
    let mut tasks = generate_batch_from(&families, req.count, req.seed, req.split);
    job.check()?;
    let shard_run = match shard {
        Some(shard) => {
            let split = format!("{:?}", req.split);
            let (seed, count, fams) = (
                req.seed.to_string(),
                req.count.to_string(),
                req.families.join(","),
            );
            let total = tasks.len();
            tasks = shard.select(tasks, |t| t.id());
            job.log(format!("shard {shard}: {} of {total} tasks", tasks.len()));
            Some(super::shard_run::ShardRun::begin(
                ws.root(),
                shard,
                super::shard_run::ShardJob {
                    kind: "generate",
                    key: super::shard_run::selection_key(
                        "generate",
                        &[&seed, &count, &split, &fams],
                    ),
                    request: serde_json::json!({
                        "count": req.count, "seed": req.seed, "split": split, "families": req.families,
                    }),
                    items: tasks.len(),
                    total,
                },
            )?)
        }
        None => None,
    };
    let count = if shard.is_some() {
        tasks.len() as u64
    } else {
        count
    };
    job.progress(tasks.len() as u64 / 2, count, "writing");
    let (fresh, existing): (Vec<_>, Vec<_>) = tasks.iter().partition(|t| !ws.has_task(t.id()));
    let items: Vec<(&crate::task::Task, bool)> = fresh.iter().map(|t| (*t, false)).collect();
    let results = ws.write_and_index(&items, TaskStatus::Candidate)?;
    let failed: Vec<String> = items
        .iter()
        .zip(&results)
        .filter_map(|((t, _), r)| r.as_ref().err().map(|e| format!("{}: {e}", t.id())))
        .collect();
    job.progress(count, count, "done");
    let seconds = start.elapsed().as_secs_f64();
    let report = OfflineReport {
        requested: count as usize,
        written: results.iter().filter(|r| r.is_ok()).count(),
        existing: existing.len(),
        failed,
        families: families.len(),
        skipped_families: skipped
            .into_iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect(),
        seconds,
        tasks_per_sec: tasks.len() as f64 / seconds.max(1e-9),
        next_free_seed: None,
        seed: req.seed,
    };
    let mut report = report;
    if report.nothing_written() && shard.is_none() {
        report.next_free_seed = first_free_seed(
            ws,
            &families,
            req.count,
            req.seed.saturating_add(1),
            req.split,
        );
    }
    for (family, tool) in &report.skipped_families {
        job.log(format!(
            "skipped family {family}: it needs `{tool}`, which is not installed"
        ));
    }
    for f in &report.failed {
        job.log(format!("failed: {f}"));
    }
    job.log(report.summary());
    if let Some(run) = shard_run {
        if report.failed.is_empty() {
            run.finish()?;
        }
    }
    Ok(report)
}

/// LLM generation: `endless generate --llm`'s flags, or the TUI's form.
/// Settings left `None` come from the configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LlmRequest {
    /// Candidates to sample.
    pub count: usize,
    /// The seed (`None`: 1); the run id is `gen-<seed>`, so the same seed
    /// resumes.
    pub seed: Option<u64>,
    /// The generator's server (`None`: `[llm] url`).
    pub url: Option<String>,
    /// The generator model (`None`: `[llm] model`).
    pub model: Option<String>,
    /// The solver's server (`None`: the generator's).
    pub solver_url: Option<String>,
    /// The solver model (`None`: the generator model).
    pub solver_model: Option<String>,
    /// Solver attempts per candidate (`None`: `[generate] solutions`).
    pub solutions: Option<u32>,
    /// Candidates in flight (`None`: `[generate] concurrency`).
    pub concurrency: Option<usize>,
    /// Environment repair attempts (`None`: `[generate] max_env_attempts`).
    pub max_env_attempts: Option<u32>,
    /// Run only the candidates of shard I of N (`--shard I/N`), recording
    /// it in the workspace's `shard.json`; `None`: all.
    pub shard: Option<crate::store::Shard>,
    /// The audit stage after solvability (`--audit reject|flag`); `None`: none.
    pub audit: Option<AuditStage>,
}

/// Run the LLM pipeline into the workspace; returns the funnel. Reports
/// candidates finished as progress and each accepted or rejected candidate
/// as a log line. A cancelled job stops at once (`Err(Cancelled)`);
/// finished candidates are journalled, so the same seed resumes.
pub fn llm(ctx: &Context, req: &LlmRequest, job: &JobContext) -> Result<Funnel> {
    let cfg = &ctx.config;
    let url = req.url.clone().unwrap_or_else(|| cfg.llm.url.clone());
    let model = req.model.clone().unwrap_or_else(|| cfg.llm.model.clone());
    if model.is_empty() {
        bail!("name the generator model with --model (or [llm] model in the config), or use --offline");
    }
    let mut chat = OpenAiConfig::new(&model, &url);
    chat.api_key = api_key_from_env();
    chat.max_concurrency = cfg.llm.concurrency.max(1);
    chat.request_timeout = Duration::from_secs_f64(cfg.llm.timeout_sec.max(1.0));
    chat.retry.max_retries = cfg.llm.retries;
    let generator = Arc::new(OpenAiChat::new(chat)?);
    let solver_url = req.solver_url.clone().unwrap_or_else(|| url.clone());
    let solver_model = req.solver_model.clone().unwrap_or_else(|| model.clone());
    let solver_spec = format!("openai:{solver_model}@{solver_url}");
    let solver = PolicyFactory::from_spec(&solver_spec, &ctx.policy_options())?;
    let seed = req.seed.unwrap_or(1);
    let ws = ctx.workspace()?;
    let shard_run = match req.shard {
        Some(shard) => Some(begin_llm_shard(
            &ws,
            req,
            shard,
            seed,
            &model,
            &url,
            &solver_spec,
            job,
        )?),
        None => None,
    };
    let run_id = format!("gen-{seed}");
    let run_dir = ws.runs_dir().join(&run_id);
    ws.upsert_run(
        &run_id,
        "generate",
        &solver_spec,
        &serde_json::json!({ "count": req.count, "model": model, "url": url }),
    )?;
    let definition = match cfg.sandbox.backend.as_str() {
        "apptainer" => EnvKind::ApptainerDef,
        "oci" => EnvKind::Dockerfile,
        _ => EnvKind::SetupSh,
    };
    let config = PipelineConfig {
        count: req.count,
        seed,
        run_dir,
        definition,
        max_env_attempts: req
            .max_env_attempts
            .unwrap_or(cfg.generate.max_env_attempts),
        solutions: req.solutions.unwrap_or(cfg.generate.solutions),
        allow_installs: cfg.generate.allow_installs,
        solve_max_turns: cfg.agent.train_max_turns.max(16),
        solve_concurrency: 4,
        command_timeout: Duration::from_secs_f64(cfg.agent.command_timeout_sec.max(1.0)),
        concurrency: req.concurrency.unwrap_or(cfg.generate.concurrency),
        sandbox_concurrency: std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2),
        task_sampling: SamplingParams {
            temperature: 1.0,
            top_p: cfg.llm.top_p as f32,
            max_tokens: Some(cfg.llm.max_tokens),
        },
        test_sampling: SamplingParams {
            temperature: 0.6,
            top_p: cfg.llm.top_p as f32,
            max_tokens: Some(cfg.llm.max_tokens),
        },
        generator_name: model.clone(),
        solver_name: solver_model,
        shard: req.shard,
        audit: req.audit.clone(),
    };
    let backend: Arc<dyn crate::sandbox::Backend> = ctx.backend()?.into();
    let rt = tokio::runtime::Runtime::new()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let root = ws.root().to_path_buf();
    let result = rt.block_on(async {
        let run = run_pipeline(root, config, generator, solver, backend, Some(tx));
        tokio::pin!(run);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let (done, total, accepted) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let on_event = |ev: PipelineEvent| match ev {
            PipelineEvent::Planned {
                total: n,
                already_done,
            } => {
                total.store(n, Ordering::Relaxed);
                done.store(already_done, Ordering::Relaxed);
                job.progress(already_done as u64, n as u64, "candidates finished");
            }
            PipelineEvent::Entered { candidate, stage } => {
                tracing::info!("{candidate}: {stage:?}")
            }
            PipelineEvent::Finished { candidate, outcome } => {
                // A candidate that infrastructure stopped is no work done:
                // the bar does not move for it (a generation that cannot
                // reach its server fails at 0%, not at 100%).
                if !matches!(&outcome, CandidateOutcome::InfraError { .. }) {
                    let n = done.fetch_add(1, Ordering::Relaxed) as u64 + 1;
                    let t = (total.load(Ordering::Relaxed) as u64).max(n);
                    job.progress(n, t, "candidates finished");
                }
                match outcome {
                    CandidateOutcome::Accepted { task_id, audit } => {
                        let a = accepted.fetch_add(1, Ordering::Relaxed) + 1;
                        let flags = match audit.as_deref() {
                            Some([]) => ", audit clean".to_string(),
                            Some(labels) => format!(", audit flagged: {}", labels.join(", ")),
                            None => String::new(),
                        };
                        job.log(format!(
                            "accepted {candidate} as {task_id} ({a} so far{flags})"
                        ));
                    }
                    CandidateOutcome::Rejected { stage, reason } => job.log(format!(
                        "rejected {candidate} at {stage:?}: {}",
                        reason.lines().next().unwrap_or("")
                    )),
                    CandidateOutcome::InfraError { stage, error } => job.log(format!(
                        "not finished {candidate} at {stage:?} (infrastructure, tried again on resume): {}",
                        error.lines().next().unwrap_or("")
                    )),
                }
            }
        };
        let out = loop {
            tokio::select! {
                out = &mut run => break Some(out),
                Some(ev) = rx.recv() => on_event(ev),
                _ = tick.tick() => if job.is_cancelled() { break None },
            }
        };
        while let Ok(ev) = rx.try_recv() {
            on_event(ev);
        }
        out
    });
    // Candidates still running when a cancel stopped the pipeline are
    // dropped with the runtime; their sandboxes stop with them.
    rt.shutdown_background();
    let Some(result) = result else {
        return Err(Cancelled.into());
    };
    let funnel = match result {
        Ok(funnel) => funnel,
        // The run is recorded with what it did, then fails (a generation
        // that never reached its server is not an empty success).
        Err(e) => {
            if let Some(failed) = e.downcast_ref::<InfraFailed>() {
                ws.finish_run(&run_id, &serde_json::to_value(&failed.funnel)?)?;
                return Err(e);
            }
            return Err(e.context("generation failed"));
        }
    };
    ws.finish_run(&run_id, &serde_json::to_value(&funnel)?)?;
    if funnel.infra_errors > 0 {
        job.log(format!(
            "{} candidates not finished because of infrastructure errors (not rejected): run the same command again to retry them",
            funnel.infra_errors
        ));
    }
    if let Some(run) = shard_run {
        run.finish()?;
    }
    Ok(funnel)
}

/// Record in the workspace that shard `shard` of this LLM generation has
/// started: the job is the seed, count, models, servers and settings that
/// decide which candidates exist and how each is made.
#[allow(clippy::too_many_arguments)]
fn begin_llm_shard(
    ws: &Workspace,
    req: &LlmRequest,
    shard: crate::store::Shard,
    seed: u64,
    model: &str,
    url: &str,
    solver: &str,
    job: &JobContext,
) -> Result<super::shard_run::ShardRun> {
    let items = crate::generate::pipeline::candidate_ids(seed, req.count, Some(shard)).len();
    job.log(format!(
        "shard {shard}: {items} of {} candidates",
        req.count
    ));
    let opt = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
    let (seed_s, count) = (seed.to_string(), req.count.to_string());
    let (solutions, attempts) = (opt(req.solutions), opt(req.max_env_attempts));
    // The audit stage decides which candidates are kept: part of the job
    // when set (a key without it is the key of a run without audit).
    let audit = req.audit.as_ref().map(|a| {
        let checks: Vec<&str> = a.options.checks.iter().map(|c| c.name()).collect();
        format!("{}:{}", a.mode.name(), checks.join(","))
    });
    let mut key_parts: Vec<&str> = vec![&seed_s, &count, model, url, solver, &solutions, &attempts];
    if let Some(a) = &audit {
        key_parts.push(a);
    }
    super::shard_run::ShardRun::begin(
        ws.root(),
        shard,
        super::shard_run::ShardJob {
            kind: LLM_SHARD_KIND,
            key: super::shard_run::selection_key(LLM_SHARD_KIND, &key_parts),
            request: serde_json::json!({
                "count": req.count, "seed": seed, "model": model, "url": url, "solver": solver,
                "solutions": req.solutions, "max_env_attempts": req.max_env_attempts,
                "audit": audit,
            }),
            items,
            total: req.count,
        },
    )
}

/// The `kind` of an LLM generation's shards in `shard.json`.
pub const LLM_SHARD_KIND: &str = "generate-llm";

/// After the shards of an LLM generation (`request`: their `shard.json`
/// request) were merged into `main`: bring their journals
/// (`runs/gen-<seed>/candidates/`) together in `main` and record the run
/// with the funnel of all its candidates, as one unsharded run records it.
/// Returns the run id.
pub fn finish_merged_llm(
    main: &Workspace,
    shards: &[std::path::PathBuf],
    request: &serde_json::Value,
) -> Result<String> {
    let field = |name: &str| {
        request[name]
            .as_u64()
            .with_context(|| format!("the shards' shard.json request has no whole-number {name:?}"))
    };
    let (seed, count) = (field("seed")?, field("count")? as usize);
    let run_id = format!("gen-{seed}");
    let journal = Journal::new(&main.runs_dir().join(&run_id));
    let mut outcomes = journal.finished();
    for shard in shards {
        for (id, outcome) in Journal::new(&shard.join("runs").join(&run_id)).finished() {
            if let std::collections::btree_map::Entry::Vacant(slot) = outcomes.entry(id) {
                journal.finish(slot.key(), &outcome)?;
                slot.insert(outcome);
            }
        }
    }
    let mut funnel = Funnel::default();
    for (_, id) in crate::generate::pipeline::candidate_ids(seed, count, None) {
        if let Some(outcome) = outcomes.get(&id) {
            funnel.record(outcome);
        }
    }
    let text = |name: &str| request[name].as_str().unwrap_or_default().to_string();
    main.upsert_run(
        &run_id,
        "generate",
        &text("solver"),
        &serde_json::json!({ "count": count, "model": text("model"), "url": text("url") }),
    )?;
    main.finish_run(&run_id, &serde_json::to_value(&funnel)?)?;
    Ok(run_id)
}

/// `A of N candidates accepted`, for a job's one-line result, with the
/// candidates infrastructure errors left unfinished when there are any.
pub fn funnel_summary(funnel: &Funnel) -> String {
    let flagged = if funnel.flagged.is_empty() {
        String::new()
    } else {
        let labels: Vec<&str> = funnel.flagged.keys().map(String::as_str).collect();
        format!(" (audit flagged: {})", labels.join(", "))
    };
    let unfinished = if funnel.infra_errors == 0 {
        String::new()
    } else {
        format!(
            "; {} not finished (infrastructure errors, retried on resume)",
            funnel.infra_errors
        )
    };
    format!(
        "{} of {} candidates accepted{flagged}{unfinished}",
        funnel.accepted(),
        funnel.sampled
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobEvent;

    #[test]
    fn the_one_line_result_counts_unfinished_candidates_apart() {
        let mut funnel = Funnel::default();
        funnel.record(&CandidateOutcome::Accepted {
            task_id: "gen-1-00000".into(),
            audit: None,
        });
        assert_eq!(funnel_summary(&funnel), "1 of 1 candidates accepted");
        funnel.record(&CandidateOutcome::InfraError {
            stage: crate::generate::funnel::Stage::Task,
            error: "cannot reach the model server at http://127.0.0.1:9/v1/chat/completions".into(),
        });
        assert_eq!(
            funnel_summary(&funnel),
            "1 of 1 candidates accepted; 1 not finished (infrastructure errors, retried on resume)"
        );
    }

    #[test]
    fn offline_generation_writes_reports_and_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = Workspace::open(dir.path()).unwrap();
        let (job, mut rx) = JobContext::standalone("generate-offline");
        let req = OfflineRequest {
            count: 4,
            seed: 3,
            ..OfflineRequest::default()
        };
        let first = offline_into(&mut ws, &req, &job).unwrap();
        assert_eq!((first.written, first.existing), (4, 0), "{first:?}");
        assert!(first.failed.is_empty());
        let again = offline_into(&mut ws, &req, &job).unwrap();
        assert_eq!((again.written, again.existing), (0, 4));
        // Nothing new: it says so, and names a seed whose tasks are all new.
        assert!(again.nothing_written());
        let next = again.next_free_seed.unwrap();
        assert!(next > 3, "{again:?}");
        assert_eq!(
            again.summary(),
            format!(
                "0 tasks written: all 4 tasks of seed 3 are already present; next free seed {next}"
            )
        );
        let fresh = offline_into(
            &mut ws,
            &OfflineRequest {
                seed: next,
                ..req.clone()
            },
            &job,
        )
        .unwrap();
        assert_eq!((fresh.written, fresh.existing), (4, 0));
        let mut finished = false;
        let mut logged = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            match ev {
                JobEvent::Progress { done, total, .. } => finished |= done == total && total == 4,
                JobEvent::Log { line, .. } => logged.push(line),
                _ => {}
            }
        }
        assert!(finished);
        assert!(
            logged.iter().any(|l| l.starts_with("4 tasks written")),
            "{logged:?}"
        );
    }

    #[test]
    fn unknown_families_are_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = Workspace::open(dir.path()).unwrap();
        let (job, _rx) = JobContext::standalone("generate-offline");
        let req = OfflineRequest {
            count: 1,
            families: vec!["no-such-family".into()],
            ..OfflineRequest::default()
        };
        let err = offline_into(&mut ws, &req, &job).unwrap_err().to_string();
        assert!(err.contains("unknown family \"no-such-family\""), "{err}");
    }
}
