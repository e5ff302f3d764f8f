//! Running many candidates through the four stages (and the optional audit
//! stage) at once, with separate bounds for candidates in flight, model
//! requests (the chat client's own limit) and sandboxes; accepted tasks go
//! to `tasks/`, rejects to `rejected/`, and a journal under the run
//! directory makes a killed run resume without redoing finished candidates.

use std::path::PathBuf;
use std::sync::Arc;

use rand::SeedableRng;
use serde::Serialize;
use tokio::sync::{mpsc::UnboundedSender, Semaphore};

use super::candidate::Candidate;
use super::config::{PipelineConfig, Shared};
use super::funnel::{CandidateOutcome, Funnel, Stage};
use super::prompts::Prompts;
use super::record::{save_rejected, Journal, RejectInfo};
use super::stages;
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

/// Run the pipeline into the workspace at `workspace_root`; returns the funnel.
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
    for h in handles {
        let (id, outcome) = h
            .await
            .map_err(|e| anyhow::anyhow!("a candidate worker crashed: {e}"))?;
        journal.finish(&id, &outcome)?;
        funnel.record(&outcome);
    }
    Ok(funnel)
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
) -> Result<Passed, stages::Reject> {
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
    result: Result<Passed, stages::Reject>,
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
            return CandidateOutcome::Rejected {
                stage: Stage::Solvability,
                reason: format!("cannot open the workspace: {e}"),
            }
        }
    };
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
        Err((stage, reason)) => {
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
