//! A generation run's settings ([`PipelineConfig`]) and what every candidate
//! shares ([`Shared`]: settings, models, sandbox backend, prompts, the
//! sandbox bound), used by the orchestration in `pipeline` and by each of
//! the `stages`.

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::prompts::Prompts;
use crate::agent::PolicyFactory;
use crate::llm::{ChatModel, SamplingParams};
use crate::sandbox::Backend;
use crate::task::EnvKind;

/// Settings of one generation run.
#[derive(Clone)]
pub struct PipelineConfig {
    /// Candidates to sample.
    pub count: usize,
    /// Seeds the taxonomy sampling and names the candidates (`cand-<seed>-<n>`).
    pub seed: u64,
    /// `runs/<run-id>`: journal and solution episodes.
    pub run_dir: PathBuf,
    /// The environment definition the model writes.
    pub definition: EnvKind,
    /// Tries at stage 2 (environment and initial tests); each retry is fed the previous error.
    pub max_env_attempts: u32,
    /// Solution episodes per candidate (pass@n > 0 keeps it).
    pub solutions: u32,
    /// Turn limit of each solution episode.
    pub solve_max_turns: u32,
    /// Solution episodes of one candidate in flight at once.
    pub solve_concurrency: usize,
    /// Limit on one shell command in a solution episode.
    pub command_timeout: Duration,
    /// Candidates in flight at once.
    pub concurrency: usize,
    /// Sandbox builds and test runs in flight at once.
    pub sandbox_concurrency: usize,
    /// Sampling of the generator at stage 1 (task and truth).
    pub task_sampling: SamplingParams,
    /// Sampling of the generator at stages 2 and 3 (environment, tests).
    pub test_sampling: SamplingParams,
    /// Whether the environment definition may install software (`apt-get`,
    /// `pip`): its build runs with network; the agent's session stays offline.
    pub allow_installs: bool,
    /// Names recorded in provenance.
    pub generator_name: String,
    /// Recorded as the `solver` key of `[provenance]`.
    pub solver_name: String,
    /// Run only the candidates of this shard (`--shard I/N`: candidate
    /// `cand-<seed>-<index>` is in shard fnv1a64(id) mod N), so N shards
    /// run exactly the candidates of one unsharded run; `None`: all.
    pub shard: Option<crate::store::Shard>,
    /// The audit stage after solvability (`--audit reject|flag`); `None`: no audit.
    pub audit: Option<AuditStage>,
}

/// What the audit stage does with a candidate that has a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditMode {
    /// Reject it at stage `audit`, naming the labels.
    Reject,
    /// Keep it and store its findings with the task (`tasks/<id>/audit.json`).
    Flag,
}

impl AuditMode {
    /// The name `--audit` takes.
    pub fn name(self) -> &'static str {
        match self {
            AuditMode::Reject => "reject",
            AuditMode::Flag => "flag",
        }
    }
}

/// The audit stage: every solvable candidate is audited as
/// `endless tasks audit` would audit the stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditStage {
    /// Reject or flag a candidate with findings.
    pub mode: AuditMode,
    /// The checks and their budgets.
    pub options: crate::audit::AuditOptions,
}

/// What every candidate shares.
pub struct Shared {
    /// The run's settings.
    pub config: PipelineConfig,
    /// The model that writes tasks, environments and tests.
    pub generator: Arc<dyn ChatModel>,
    /// Makes the agent policy of the stage-4 solution episodes.
    pub solver: PolicyFactory,
    /// Sandbox backend for builds, test runs and solution episodes.
    pub backend: Arc<dyn Backend>,
    /// Prompt templates (workspace overrides or built-in).
    pub prompts: Prompts,
    /// Bounds sandbox builds and test runs in flight (`sandbox_concurrency`).
    pub sandboxes: Semaphore,
    /// Requests to the generator model answered in this run.
    pub answered: AtomicUsize,
}
