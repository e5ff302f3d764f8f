//! A generation run's settings ([`PipelineConfig`]) and what every candidate
//! shares ([`Shared`]: settings, models, sandbox backend, prompts, the
//! sandbox bound), used by the orchestration in `pipeline` and by each of
//! the `stages`.

use std::path::PathBuf;
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
    pub seed: u64,
    /// `runs/<run-id>`: journal and solution episodes.
    pub run_dir: PathBuf,
    /// The environment definition the model writes.
    pub definition: EnvKind,
    pub max_env_attempts: u32,
    /// Solution episodes per candidate (pass@n > 0 keeps it).
    pub solutions: u32,
    pub solve_max_turns: u32,
    pub solve_concurrency: usize,
    pub command_timeout: Duration,
    /// Candidates in flight at once.
    pub concurrency: usize,
    /// Sandbox builds and test runs in flight at once.
    pub sandbox_concurrency: usize,
    pub task_sampling: SamplingParams,
    pub test_sampling: SamplingParams,
    /// Whether the environment definition may install software (`apt-get`,
    /// `pip`): its build runs with network; the agent's session stays offline.
    pub allow_installs: bool,
    /// Names recorded in provenance.
    pub generator_name: String,
    pub solver_name: String,
}

/// What every candidate shares.
pub struct Shared {
    pub config: PipelineConfig,
    pub generator: Arc<dyn ChatModel>,
    pub solver: PolicyFactory,
    pub backend: Arc<dyn Backend>,
    pub prompts: Prompts,
    pub sandboxes: Semaphore,
}
