//! [`Shared`]: what every candidate of a generation run shares (settings,
//! models, sandbox backend, prompts, the sandbox bound), used by the
//! orchestration in `pipeline` and by each of the `stages`.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::pipeline::PipelineConfig;
use super::prompts::Prompts;
use crate::agent::PolicyFactory;
use crate::llm::ChatModel;
use crate::sandbox::Backend;

/// What every candidate shares.
pub struct Shared {
    pub config: PipelineConfig,
    pub generator: Arc<dyn ChatModel>,
    pub solver: PolicyFactory,
    pub backend: Arc<dyn Backend>,
    pub prompts: Prompts,
    pub sandboxes: Semaphore,
}
