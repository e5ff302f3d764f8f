//! Task repair, in-process (`endless tasks repair`): gather why each task
//! needs repair ([`reasons`]), send it through the generator's repair
//! ([`crate::generate::repair`]) and store an accepted revision as a new
//! version of the same task (provenance: parent version, reasons, model).
//! A repair that fails leaves the task as it was; its partial bundle and
//! model exchanges are kept under `rejected/repair-<id>-v<n>/`. Offline
//! (procgen) tasks have no model to ask: they are refused with an
//! explanation, or regenerated with another seed when asked (`--reseed`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::Context;
use crate::agent::PolicyFactory;
use crate::audit::{AuditOptions, Check};
use crate::generate::config::{PipelineConfig, Shared};
use crate::generate::prompts::Prompts;
use crate::generate::record::{save_rejected, RejectInfo};
use crate::generate::repair::{repair, Reason};
use crate::jobs::JobContext;
use crate::llm::{api_key_from_env, OpenAiChat, OpenAiConfig, SamplingParams};
use crate::store::{set_version, task_version, TaskStatus, Workspace};
use crate::task::{EnvKind, Task};

/// Longest evidence kept per reason, in bytes.
const MAX_EVIDENCE: usize = 1500;
/// Failed episodes whose labels are sent, the most recent first.
const MAX_EPISODES: usize = 5;

/// `endless tasks repair`'s flags, or the TUI's repair job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepairRequest {
    /// The tasks to repair.
    pub ids: Vec<String>,
    /// The generator's server (`None`: `[llm] url`).
    pub url: Option<String>,
    /// The generator model (`None`: `[llm] model`).
    pub model: Option<String>,
    /// The solver's server (`None`: the generator's).
    pub solver_url: Option<String>,
    /// The solver model (`None`: the generator model).
    pub solver_model: Option<String>,
    /// Solution episodes (`None`: `[generate] solutions`).
    pub solutions: Option<u32>,
    /// Environment attempts (`None`: `[generate] max_env_attempts`).
    pub max_env_attempts: Option<u32>,
    /// Offline tasks: regenerate with this seed instead of refusing.
    pub reseed: Option<u64>,
}

/// How the repair of one task ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RepairOutcome {
    /// The revision passed: it is the task's new current version.
    Repaired {
        /// The task.
        id: String,
        /// The version it was made from.
        parent: u32,
        /// The new version.
        version: u32,
        /// The reasons sent.
        reasons: Vec<Reason>,
    },
    /// The repair failed at `stage`; the task is unchanged.
    Failed {
        /// The task.
        id: String,
        /// The stage it failed at (`task`, `environment`, ... or `reasons`,
        /// `offline`).
        stage: String,
        /// Why.
        reason: String,
    },
}

impl RepairOutcome {
    /// Whether the task was repaired.
    pub fn repaired(&self) -> bool {
        matches!(self, RepairOutcome::Repaired { .. })
    }

    /// One line for people.
    pub fn line(&self) -> String {
        match self {
            RepairOutcome::Repaired {
                id,
                parent,
                version,
                reasons,
            } => format!(
                "repaired {id}: version {version} (from {parent}) fixes {} reason(s)",
                reasons.len()
            ),
            RepairOutcome::Failed { id, stage, reason } => {
                format!("not repaired {id}: failed at {stage}: {reason}; the task is unchanged")
            }
        }
    }
}

/// One line for a batch: how many were repaired, and each failure with
/// its stage and why; `D` in the Tasks view reviews a repair.
pub fn outcome_summary(outcomes: &[RepairOutcome]) -> String {
    let repaired = outcomes.iter().filter(|o| o.repaired()).count();
    let mut out = format!("{repaired} of {} task(s) repaired", outcomes.len());
    for o in outcomes {
        if let RepairOutcome::Failed { id, stage, reason } = o {
            out.push_str(&format!("; {id} failed at {stage}: {reason}"));
        }
    }
    if repaired > 0 {
        out.push_str(" (D in Tasks reviews a repair)");
    }
    out
}

/// Why task `id` needs repair, and the audit checks whose findings are
/// among the reasons (they are re-run on the revision).
pub fn reasons(ws: &Workspace, id: &str) -> Result<(Vec<Reason>, Vec<Check>)> {
    let mut out = Vec::new();
    let row = ws.task_row(id)?;
    if row.rating.is_some() || !row.notes.trim().is_empty() || row.status == TaskStatus::Rejected {
        let mut summary = String::from("the curator");
        if row.status == TaskStatus::Rejected {
            summary.push_str(" rejected it");
        }
        if let Some(r) = row.rating {
            summary.push_str(&format!(" rated it {r}/5"));
        }
        if let Some(first) = row.notes.lines().find(|l| !l.trim().is_empty()) {
            summary.push_str(&format!(": {}", first.trim()));
        }
        out.push(Reason {
            source: "curator".into(),
            summary,
            evidence: shorten(row.notes.trim()),
        });
    }
    let mut checks = Vec::new();
    let report = crate::audit::file::read(&ws.task_dir(id))
        .with_context(|| format!("reading the audit of {id}"))?;
    for f in report.iter().flat_map(|r| r.findings()) {
        out.push(Reason {
            source: "audit".into(),
            summary: format!("[{}] {}", f.label, f.summary),
            evidence: shorten(&f.evidence),
        });
        if !checks.contains(&f.check) {
            checks.push(f.check);
        }
    }
    checks.sort();
    if let Some(v) = super::verdicts::stored_verdict(ws, id)? {
        for p in v.problems.iter().filter(|_| !v.ok) {
            out.push(Reason {
                source: "validation".into(),
                summary: p.lines().next().unwrap_or("").to_string(),
                evidence: shorten(p),
            });
        }
    }
    let mut failed: Vec<_> = ws
        .task_episodes(id)?
        .into_iter()
        .filter(|e| !e.passed)
        .collect();
    failed.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    for e in failed.into_iter().take(MAX_EPISODES) {
        let mut labels = e.failure_labels.clone();
        if let Some(m) = &e.failure_mode {
            if !labels.contains(m) {
                labels.insert(0, m.clone());
            }
        }
        let labels = if labels.is_empty() {
            "no label".to_string()
        } else {
            labels.join(", ")
        };
        out.push(Reason {
            source: "episode".into(),
            summary: format!(
                "episode {}/{} failed ({}; {labels})",
                e.run_id, e.sample, e.end_reason
            ),
            evidence: shorten(&episode_excerpt(ws, &e.path, &e.notes)),
        });
    }
    Ok((out, checks))
}

/// The failed tests of an episode's result file and their first message
/// lines, with the reviewer's notes.
fn episode_excerpt(ws: &Workspace, rel: &str, notes: &str) -> String {
    let mut out = String::new();
    if !notes.trim().is_empty() {
        out.push_str(&format!("reviewer: {}\n", notes.trim()));
    }
    let read = crate::fsutil::UntrustedDir::open(ws.root())
        .and_then(|root| root.read_regular(std::path::Path::new(rel), 4 << 20));
    let Ok(bytes) = read else {
        return out;
    };
    let Ok(result) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return out;
    };
    for t in result["tests"].as_array().into_iter().flatten() {
        if t["passed"].as_bool() == Some(false) {
            let message = t["message"].as_str().unwrap_or("").lines().take(3);
            out.push_str(&format!(
                "FAILED {}: {}\n",
                t["name"].as_str().unwrap_or("?"),
                message.collect::<Vec<_>>().join(" / ")
            ));
        }
    }
    out
}

fn shorten(text: &str) -> String {
    if text.len() <= MAX_EVIDENCE {
        return text.to_string();
    }
    let mut end = MAX_EVIDENCE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [...]", &text[..end])
}

/// Repair each task of `req` in turn; progress is tasks finished.
pub fn repair_tasks(
    ctx: &Context,
    req: &RepairRequest,
    job: &JobContext,
) -> Result<Vec<RepairOutcome>> {
    let ws = ctx.workspace()?;
    for id in &req.ids {
        ws.task_row(id)?;
    }
    let total = req.ids.len() as u64;
    let mut out = Vec::new();
    let mut models = None;
    for (i, id) in req.ids.iter().enumerate() {
        job.progress(i as u64, total, "tasks repaired");
        job.check()?;
        let task = ws.load_task(id)?;
        let outcome = if task.meta.provenance.generator.starts_with("procgen/") {
            offline(&ws, &task, req.reseed)?
        } else {
            if models.is_none() {
                models = Some(Models::new(ctx, req)?);
            }
            let m = models.as_ref().context("the models were made above")?;
            one(ctx, &ws, m, req, &task, job)?
        };
        job.log(outcome.line());
        out.push(outcome);
    }
    job.progress(total, total, "tasks repaired");
    Ok(out)
}

/// The generator and the solver of a batch.
struct Models {
    generator: Arc<OpenAiChat>,
    name: String,
    solver: PolicyFactory,
    solver_name: String,
}

impl Models {
    fn new(ctx: &Context, req: &RepairRequest) -> Result<Models> {
        let cfg = &ctx.config;
        let url = req.url.clone().unwrap_or_else(|| cfg.llm.url.clone());
        let model = req.model.clone().unwrap_or_else(|| cfg.llm.model.clone());
        if model.is_empty() {
            bail!("name the generator model with --model (or [llm] model in the config): a repair asks it for the revised task");
        }
        let mut chat = OpenAiConfig::new(&model, &url);
        chat.api_key = api_key_from_env();
        chat.max_concurrency = cfg.llm.concurrency.max(1);
        chat.request_timeout = Duration::from_secs_f64(cfg.llm.timeout_sec.max(1.0));
        chat.retry.max_retries = cfg.llm.retries;
        let solver_url = req.solver_url.clone().unwrap_or_else(|| url.clone());
        let solver_name = req.solver_model.clone().unwrap_or_else(|| model.clone());
        let spec = format!("openai:{solver_name}@{solver_url}");
        Ok(Models {
            generator: Arc::new(OpenAiChat::new(chat)?),
            name: model,
            solver: PolicyFactory::from_spec(&spec, &ctx.policy_options())?,
            solver_name,
        })
    }
}

/// Repair one LLM or imported task.
fn one(
    ctx: &Context,
    ws: &Workspace,
    models: &Models,
    req: &RepairRequest,
    task: &Task,
    job: &JobContext,
) -> Result<RepairOutcome> {
    let id = task.id().to_string();
    let failed = |stage: &str, reason: String| RepairOutcome::Failed {
        id: id.clone(),
        stage: stage.into(),
        reason,
    };
    let (reasons, checks) = reasons(ws, &id)?;
    if reasons.is_empty() {
        return Ok(failed(
            "reasons",
            "nothing says it needs repair (no curator note, rating or rejection, audit finding, validation problem or failed episode)".into(),
        ));
    }
    let parent = task_version(task, &ws.task_dir(&id).join("task.toml"))?;
    let version = ws.next_version(&id)?;
    let name = format!("repair-{id}-v{version}");
    let cfg = &ctx.config;
    let definition = task
        .environment_definition()
        .map(|(kind, _)| kind)
        .unwrap_or(match cfg.sandbox.backend.as_str() {
            "apptainer" => EnvKind::ApptainerDef,
            "oci" => EnvKind::Dockerfile,
            _ => EnvKind::SetupSh,
        });
    let sampling = SamplingParams {
        temperature: 0.6,
        top_p: cfg.llm.top_p as f32,
        max_tokens: Some(cfg.llm.max_tokens),
    };
    let run_dir = ws.runs_dir().join("repairs");
    let config = PipelineConfig {
        count: 1,
        seed: 0,
        run_dir,
        definition,
        max_env_attempts: req
            .max_env_attempts
            .unwrap_or(cfg.generate.max_env_attempts),
        solutions: req.solutions.unwrap_or(cfg.generate.solutions),
        solve_max_turns: cfg.agent.train_max_turns.max(16),
        solve_concurrency: 4,
        command_timeout: Duration::from_secs_f64(cfg.agent.command_timeout_sec.max(1.0)),
        concurrency: 1,
        sandbox_concurrency: 2,
        task_sampling: sampling.clone(),
        test_sampling: sampling,
        allow_installs: cfg.generate.allow_installs,
        generator_name: models.name.clone(),
        solver_name: models.solver_name.clone(),
        shard: None,
        audit: None,
    };
    let shared = Shared {
        config,
        generator: models.generator.clone(),
        solver: models.solver.clone(),
        backend: ctx.backend()?.into(),
        prompts: Prompts::new(Some(ws.root())),
        sandboxes: tokio::sync::Semaphore::new(2),
        answered: Default::default(),
    };
    let recheck = AuditOptions {
        checks,
        ..AuditOptions::default()
    };
    job.log(format!(
        "repairing {id} (version {parent}) for {} reason(s){}",
        reasons.len(),
        if recheck.checks.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = recheck.checks.iter().map(|c| c.name()).collect();
            format!("; re-running {}", names.join(", "))
        }
    ));
    let rt = tokio::runtime::Runtime::new()?;
    let result = rt.block_on(repair(&shared, &name, task, &reasons, &recheck));
    rt.shutdown_background();
    match result {
        Err(f) => {
            let stage = stage_word(f.stage);
            let info = RejectInfo {
                candidate: name.clone(),
                stage: f.stage,
                reason: f.reason.clone(),
                attempts: Default::default(),
            };
            if let Err(e) = save_rejected(&ws.rejected_dir(), &f.task, &info, &f.log) {
                tracing::warn!("cannot keep the failed repair of {id}: {e}");
            }
            Ok(failed(&stage, f.reason))
        }
        Ok(done) => {
            let mut revised = done.task;
            revised.meta.provenance.attempts = Default::default();
            set_version(&mut revised, version, Some(parent));
            let record = toml::Value::try_from(RepairRecord {
                model: &models.name,
                solver: &models.solver_name,
                created: crate::store::now(),
                reasons: &reasons,
            })
            .context("recording the repair")?;
            revised
                .meta
                .provenance
                .extra
                .insert("repair".into(), record);
            let audit = match &done.audit {
                Some(report) => {
                    let mut json = serde_json::to_vec_pretty(report)?;
                    json.push(b'\n');
                    Some(json)
                }
                None => None,
            };
            let files: Vec<(&str, &[u8])> = audit
                .as_deref()
                .map(|a| (crate::store::AUDIT_FILE, a))
                .into_iter()
                .collect();
            ws.commit_version(&revised, &files)?;
            ws.index_audit_file(&id)?;
            if let Some(s) = &revised.meta.provenance.solvability {
                ws.set_pass_at_k(&id, &s.pass_at_k)?;
            }
            Ok(RepairOutcome::Repaired {
                id: id.clone(),
                parent,
                version,
                reasons,
            })
        }
    }
}

/// A stage as provenance and reject records name it (`completion_tests`).
fn stage_word(stage: crate::generate::funnel::Stage) -> String {
    serde_json::to_value(stage)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{stage:?}"))
}

/// `[provenance.repair]` of a repaired version.
#[derive(Serialize)]
struct RepairRecord<'a> {
    model: &'a str,
    solver: &'a str,
    created: String,
    reasons: &'a [Reason],
}

/// An offline task: refused with the explanation, or regenerated by its
/// family with `reseed` as a new version.
fn offline(ws: &Workspace, task: &Task, reseed: Option<u64>) -> Result<RepairOutcome> {
    let id = task.id().to_string();
    let family_name = task
        .meta
        .provenance
        .generator
        .trim_start_matches("procgen/");
    let Some(seed) = reseed else {
        return Ok(RepairOutcome::Failed {
            id,
            stage: "offline".into(),
            reason: format!(
                "it was made by the offline family {family_name}, not by a model: a repair needs the generator to be an LLM. Regenerate it with another seed (--reseed SEED), or fix the family's code"
            ),
        });
    };
    let family = crate::procgen::family(family_name)
        .with_context(|| format!("{id}: no offline family {family_name:?} to regenerate it"))?;
    let scenario = crate::procgen::scenarios()
        .iter()
        .find(|s| s.name == task.meta.task.scenario)
        .or_else(|| crate::procgen::scenarios().first())
        .context("no scenarios")?;
    let mut revised = family.generate(seed, task.meta.task.complexity.unwrap_or(1), scenario);
    revised.meta.task.id = id.clone();
    let parent = task_version(task, &ws.task_dir(&id).join("task.toml"))?;
    let version = ws.next_version(&id)?;
    set_version(&mut revised, version, Some(parent));
    let reason = Reason {
        source: "curator".into(),
        summary: format!("regenerated by {family_name} with seed {seed}"),
        evidence: String::new(),
    };
    let record = toml::Value::try_from(RepairRecord {
        model: "",
        solver: "",
        created: crate::store::now(),
        reasons: std::slice::from_ref(&reason),
    })
    .context("recording the regeneration")?;
    revised
        .meta
        .provenance
        .extra
        .insert("repair".into(), record);
    ws.commit_version(&revised, &[])?;
    ws.index_audit_file(&id)?;
    Ok(RepairOutcome::Repaired {
        id,
        parent,
        version,
        reasons: vec![reason],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_summary_counts_the_repairs_and_names_each_failure_with_its_stage() {
        let outcomes = vec![
            RepairOutcome::Repaired {
                id: "a".into(),
                parent: 1,
                version: 2,
                reasons: Vec::new(),
            },
            RepairOutcome::Failed {
                id: "b".into(),
                stage: "completion_tests".into(),
                reason: "final tests pass on the initial state".into(),
            },
        ];
        assert_eq!(
            outcome_summary(&outcomes),
            "1 of 2 task(s) repaired; b failed at completion_tests: final tests pass on the initial state (D in Tasks reviews a repair)"
        );
        assert!(!outcome_summary(&outcomes[1..]).contains("D in Tasks"));
        assert!(outcomes[1].line().contains("the task is unchanged"));
    }
}
