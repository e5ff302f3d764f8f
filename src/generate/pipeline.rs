//! Running many candidates through the four stages (and the optional audit
//! stage) at once, with separate bounds for candidates in flight, model
//! requests (the chat client's own limit) and sandboxes; accepted tasks go
//! to `tasks/`, rejects to `rejected/`, and a journal under the run
//! directory makes a killed run resume without redoing finished candidates.
//! A candidate that infrastructure stopped (the model server down or
//! failing) is not finished: it is counted apart, not journalled, and tried
//! again by the next run; a run in which nothing got past the
//! infrastructure fails ([`InfraFailed`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::SeedableRng;
use serde::Serialize;
use tokio::sync::{mpsc::UnboundedSender, Semaphore};

use super::candidate::Candidate;
use super::config::{PipelineConfig, Shared};
use super::funnel::{CandidateOutcome, Funnel, Stage};
use super::prompts::Prompts;
use super::record::{forget_rejected, save_rejected, Journal, RejectInfo};
use super::stages::{self, Stop};
use super::taxonomy::Taxonomy;
use crate::agent::PolicyFactory;
use crate::llm::ChatModel;
use crate::sandbox::Backend;
use crate::store::{TaskStatus, Workspace};
use crate::task::Solvability;

/// Progress, for progress bars and the TUI.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PipelineEvent {
    /// Sent once at the start.
    Planned {
        /// Candidates in the run.
        total: usize,
        /// Of those, finished by an earlier (resumed) run.
        already_done: usize,
    },
    /// A candidate started a stage.
    Entered {
        /// The candidate id.
        candidate: String,
        /// The stage it entered.
        stage: Stage,
    },
    /// A candidate was accepted or rejected.
    Finished {
        /// The candidate id.
        candidate: String,
        /// How it ended.
        outcome: CandidateOutcome,
    },
}

/// A run that infrastructure stopped: no request to the generator model got
/// through, or every candidate it tried stopped on an infrastructure error.
/// Those candidates are not journalled: the same run tries them again.
#[derive(Debug)]
pub struct InfraFailed {
    /// The run's funnel: the candidates finished before, and the errors.
    pub funnel: Funnel,
    /// The first infrastructure error, naming the server where there was one.
    pub error: String,
    /// Whether any request to the generator model got through.
    pub answered: bool,
}

impl fmt::Display for InfraFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The error first: it names the server, and a narrow jobs list
        // shows the start of the line.
        let what = if self.answered {
            "every candidate tried stopped on an infrastructure error"
        } else {
            "no request to the generator model got through"
        };
        write!(
            f,
            "{} ({what}; {} candidates not finished: run the same command again to retry them)",
            self.error, self.funnel.infra_errors
        )
    }
}

impl std::error::Error for InfraFailed {}

/// Run the pipeline into the workspace at `workspace_root`; returns the
/// funnel, or [`InfraFailed`] (with the funnel) when infrastructure errors
/// stopped every candidate it tried or no generator request got through.
pub async fn run_pipeline(
    workspace_root: PathBuf,
    config: PipelineConfig,
    generator: Arc<dyn ChatModel>,
    solver: PolicyFactory,
    backend: Arc<dyn Backend>,
    events: Option<UnboundedSender<PipelineEvent>>,
) -> anyhow::Result<Funnel> {
    let taxonomy = Taxonomy::load(Some(&workspace_root))?;
    let journal = Journal::new(&config.run_dir);
    let done = journal.finished();
    let mut funnel = Funnel::default();
    let ids = candidate_ids(config.seed, config.count, config.shard);
    for (_, id) in &ids {
        if let Some(outcome) = done.get(id) {
            funnel.record(outcome);
        }
    }
    let send = |ev: PipelineEvent| {
        if let Some(tx) = &events {
            let _ = tx.send(ev);
        }
    };
    send(PipelineEvent::Planned {
        total: ids.len(),
        already_done: funnel.sampled,
    });
    let shared = Arc::new(Shared {
        sandboxes: Semaphore::new(config.sandbox_concurrency.max(1)),
        prompts: Prompts::new(Some(&workspace_root)),
        config,
        generator,
        solver,
        backend,
        answered: AtomicUsize::new(0),
    });
    let in_flight = Arc::new(Semaphore::new(shared.config.concurrency.max(1)));
    let mut handles = Vec::new();
    for (index, id) in ids {
        if done.contains_key(&id) {
            continue;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
            shared.config.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let spec = taxonomy.sample(&mut rng);
        let shared = shared.clone();
        let in_flight = in_flight.clone();
        let events = events.clone();
        let root = workspace_root.clone();
        handles.push(tokio::spawn(async move {
            let _permit = in_flight.acquire_owned().await.expect("never closed");
            let mut cand = Candidate::new(id.clone(), index, spec);
            let outcome = run_candidate(&shared, &mut cand, &events).await;
            let outcome = finish(&shared, &root, &cand, outcome);
            if let Some(tx) = &events {
                let _ = tx.send(PipelineEvent::Finished {
                    candidate: id.clone(),
                    outcome: outcome.clone(),
                });
            }
            (id, outcome)
        }));
    }
    let (mut finished_now, mut first_error) = (0usize, None);
    for h in handles {
        let (id, outcome) = h
            .await
            .map_err(|e| anyhow::anyhow!("a candidate worker crashed: {e}"))?;
        match &outcome {
            CandidateOutcome::InfraError { error, .. } => {
                tracing::warn!("{id} not finished: {error}");
                first_error.get_or_insert_with(|| error.clone());
            }
            _ => {
                journal.finish(&id, &outcome)?;
                finished_now += 1;
            }
        }
        funnel.record(&outcome);
    }
    let answered = shared.answered.load(Ordering::Relaxed) > 0;
    match first_error {
        Some(error) if !answered || finished_now == 0 => Err(InfraFailed {
            funnel,
            error,
            answered,
        }
        .into()),
        _ => Ok(funnel),
    }
}

/// Ids are stable across resumes: `cand-<seed>-<index>`.
pub fn candidate_id(seed: u64, index: usize) -> String {
    format!("cand-{seed}-{index:05}")
}

/// The candidates of a run of `count` (index, id), those of `shard` only
/// when given: the split depends on the id alone, so the shards of a run
/// together hold each of its candidates exactly once.
pub fn candidate_ids(
    seed: u64,
    count: usize,
    shard: Option<crate::store::Shard>,
) -> Vec<(usize, String)> {
    (0..count)
        .map(|i| (i, candidate_id(seed, i)))
        .filter(|(_, id)| shard.is_none_or(|s| s.contains(id)))
        .collect()
}

/// What a candidate that passed every stage carries to be stored.
struct Passed {
    solvability: Solvability,
    /// The audit stage's labels, when it ran.
    audit: Option<Vec<String>>,
}

/// The id a candidate's task is stored under: `gen-<seed>-<index>`.
fn task_id(seed: u64, index: usize) -> String {
    format!("gen-{seed}-{index:05}")
}

async fn run_candidate(
    shared: &Shared,
    cand: &mut Candidate,
    events: &Option<UnboundedSender<PipelineEvent>>,
) -> Result<Passed, Stop> {
    let id = cand.id.clone();
    let enter = |stage| {
        if let Some(tx) = events {
            let _ = tx.send(PipelineEvent::Entered {
                candidate: id.clone(),
                stage,
            });
        }
    };
    enter(Stage::Task);
    stages::task(shared, cand).await?;
    enter(Stage::Environment);
    stages::environment(shared, cand).await?;
    enter(Stage::CompletionTests);
    stages::completion_tests(shared, cand).await?;
    enter(Stage::Solvability);
    let solvability = stages::solvability(shared, cand).await?;
    let audit = match &shared.config.audit {
        Some(stage) => {
            enter(Stage::Audit);
            let id = task_id(shared.config.seed, cand.index);
            Some(stages::audit(shared, cand, stage, &id).await?)
        }
        None => None,
    };
    Ok(Passed { solvability, audit })
}

/// Store an accepted task or a reject; returns the outcome to journal.
fn finish(
    shared: &Shared,
    root: &std::path::Path,
    cand: &Candidate,
    result: Result<Passed, Stop>,
) -> CandidateOutcome {
    let mut task = cand.task.clone();
    let p = &mut task.meta.provenance;
    p.generator = "llm-pipeline".into();
    p.model = shared.config.generator_name.clone();
    p.seed = Some(shared.config.seed);
    p.created = crate::store::now();
    p.attempts = cand.attempts.clone();
    p.extra
        .insert("solver".into(), shared.config.solver_name.clone().into());
    p.extra.insert("candidate".into(), cand.id.clone().into());
    p.extra.insert(
        "prompt_hashes".into(),
        toml::Value::try_from(&cand.prompt_hashes)
            .unwrap_or(toml::Value::Table(Default::default())),
    );
    p.extra.insert(
        "seconds".into(),
        toml::Value::try_from(&cand.seconds).unwrap_or(toml::Value::Table(Default::default())),
    );
    if !cand.test_revisions.is_empty() {
        p.extra.insert(
            "initial_test_revisions".into(),
            toml::Value::try_from(&cand.test_revisions).unwrap_or(toml::Value::Array(Vec::new())),
        );
    }
    p.extra.insert(
        "prompt_tokens".into(),
        (cand.usage.prompt_tokens as i64).into(),
    );
    p.extra.insert(
        "completion_tokens".into(),
        (cand.usage.completion_tokens as i64).into(),
    );
    let ws = match Workspace::open(root) {
        Ok(ws) => ws,
        Err(e) => {
            return CandidateOutcome::InfraError {
                stage: Stage::Solvability,
                error: format!("cannot open the workspace: {e}"),
            }
        }
    };
    if !matches!(result, Err(Stop::Reject(..))) {
        // What an earlier version took for a rejection no longer stands.
        if let Err(e) = forget_rejected(&ws.rejected_dir(), &cand.id) {
            tracing::warn!("cannot remove the old reject of {}: {e}", cand.id);
        }
    }
    match result {
        Ok(passed) => {
            let task_id = task_id(shared.config.seed, cand.index);
            task.meta.task.id = task_id.clone();
            let pass_at_k = passed.solvability.pass_at_k.clone();
            task.meta.provenance.solvability = Some(passed.solvability);
            let stored = if ws.has_task(&task_id) {
                Ok(())
            } else {
                ws.add_task(&task, TaskStatus::Accepted)
            };
            let last = if passed.audit.is_some() {
                Stage::Audit
            } else {
                Stage::Solvability
            };
            let stored = stored
                .and_then(|()| ws.set_pass_at_k(&task_id, &pass_at_k))
                .map_err(|e| e.to_string())
                .and_then(|()| store_audit(&ws, &task_id, cand.audit.as_ref()));
            match stored {
                Ok(()) => CandidateOutcome::Accepted {
                    task_id,
                    audit: passed.audit,
                },
                Err(e) => CandidateOutcome::Rejected {
                    stage: last,
                    reason: format!("cannot store the task: {e}"),
                },
            }
        }
        Err(Stop::Infra(stage, error)) => CandidateOutcome::InfraError { stage, error },
        Err(Stop::Reject(stage, reason)) => {
            let info = RejectInfo {
                candidate: cand.id.clone(),
                stage,
                reason: reason.clone(),
                attempts: cand.attempts.clone(),
            };
            match save_rejected(&ws.rejected_dir(), &task, &info, &cand.log) {
                Ok(dir) => {
                    if let Some(report) = &cand.audit {
                        if let Err(e) = crate::audit::file::write(&dir, report) {
                            tracing::warn!("cannot save the audit of {}: {e}", cand.id);
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot save rejected candidate {}: {e}", cand.id),
            }
            CandidateOutcome::Rejected { stage, reason }
        }
    }
}

/// Store an accepted task's audit report as `endless tasks audit` stores it:
/// `tasks/<id>/audit.json`, then the index.
fn store_audit(
    ws: &Workspace,
    task_id: &str,
    report: Option<&crate::audit::AuditReport>,
) -> Result<(), String> {
    let Some(report) = report else {
        return Ok(());
    };
    crate::audit::file::write(&ws.tasks_dir().join(task_id), report)
        .map_err(|e| format!("the audit report was not stored: {e}"))?;
    ws.index_audit(&crate::audit::AuditRow::of(report))
        .map_err(|e| format!("the audit report was not indexed: {e}"))
}
