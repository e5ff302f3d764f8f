//! A whole training run, as `endless train` and the TUI's training job run
//! it: build or load the policy, optionally warm-start it with supervised
//! steps on oracle trajectories, measure pass@1 on held-out tasks, run PPO
//! steps (rollouts through the real agent loop and sandbox, then an update),
//! checkpoint, measure again. Everything lands in the run directory (see
//! [`super::run_files`]); a run started again in the same directory resumes
//! from its last good checkpoint.

use std::path::PathBuf;

use super::metrics::StepMetrics;
use super::run_files::{EvalRecord, SftMetrics};
use super::trainer::TrainConfig;
use crate::llm::local::SamplingConfig;
use crate::task::Task;

/// Where the policy comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum InitSpec {
    /// A small decoder trained from scratch, with a byte-level BPE tokenizer
    /// trained on the task corpus.
    Tiny,
    /// A Hugging Face-style model directory (safetensors).
    Dir(PathBuf),
    /// A GGUF file, dequantised into f32 trainable weights.
    Gguf(PathBuf),
    /// SmolLM2-135M-Instruct (GGUF, fetched on first use), dequantised.
    SmolLm2,
}

impl InitSpec {
    /// Parse `tiny`, `smollm2`, `local:X`, a `.gguf` path or a directory.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let s = spec.trim();
        let s = s.strip_prefix("local:").unwrap_or(s);
        match s {
            "" => Err("the initial policy is empty".into()),
            "tiny" => Ok(Self::Tiny),
            "smollm2" => Ok(Self::SmolLm2),
            path if path.ends_with(".gguf") => Ok(Self::Gguf(PathBuf::from(path))),
            path => Ok(Self::Dir(PathBuf::from(path))),
        }
    }

    /// How it is written in `train.json`.
    pub fn describe(&self) -> String {
        match self {
            Self::Tiny => "tiny".into(),
            Self::SmolLm2 => "smollm2".into(),
            Self::Dir(p) | Self::Gguf(p) => p.display().to_string(),
        }
    }
}

/// Everything a training run needs.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// The run directory (`<workspace>/checkpoints/<train-id>`).
    pub out: PathBuf,
    /// Training tasks.
    pub tasks: Vec<Task>,
    /// Held-out tasks for pass@1 before and after PPO (may be empty).
    pub dev_tasks: Vec<Task>,
    pub init: InitSpec,
    /// Supervised warm-start steps on oracle trajectories (0: none).
    pub sft_steps: u64,
    /// PPO steps.
    pub steps: u64,
    /// Stop PPO after this long (checkpointing first).
    pub time_budget: Option<std::time::Duration>,
    /// Samples per task.
    pub samples: u32,
    /// Tasks per PPO step.
    pub tasks_per_step: usize,
    /// Turn limit per episode.
    pub max_turns: u32,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Checkpoint every N PPO steps (and at the end).
    pub checkpoint_every: u64,
    /// Sample tasks by their current pass rate.
    pub curriculum: bool,
    /// Rollout sampling (temperature, top-p, tokens per reply).
    pub sampling: SamplingConfig,
    /// Optimisation and loss settings (learning rate, clipping, reward, seed).
    pub train: TrainConfig,
    /// Where `smollm2` is cached.
    pub model_cache: PathBuf,
}

/// What a run reports as it goes.
#[derive(Debug, Clone)]
pub enum TrainEvent {
    /// A phase started (`building the policy`, `sft`, `eval before`, `ppo`, ...).
    Phase(String),
    /// A supervised step finished.
    Sft { total: u64, metrics: SftMetrics },
    /// Episodes of the current PPO step: `done` of `total`.
    Rollouts {
        step: u64,
        done: usize,
        total: usize,
    },
    /// A PPO step finished.
    Step { total: u64, metrics: StepMetrics },
    /// A held-out evaluation finished.
    Eval(EvalRecord),
    /// A checkpoint was written.
    Checkpoint(PathBuf),
    /// Anything else worth a log line.
    Log(String),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub out: PathBuf,
    pub status: super::run_files::RunStatus,
    pub message: Option<String>,
    pub steps_done: u64,
    /// pass@1 on the held-out tasks before PPO (after SFT), and at the end.
    pub before: Option<EvalRecord>,
    pub after: Option<EvalRecord>,
    pub last_checkpoint: Option<PathBuf>,
}

// PLACEHOLDER (replaced on merge): the real `run` is being built on main.
/// Run a whole training run (placeholder: always fails until the real
/// implementation is merged).
pub fn run(
    _opts: TrainOptions,
    _on_event: &mut dyn FnMut(TrainEvent),
    _cancel: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<TrainSummary> {
    anyhow::bail!("training is not merged yet")
}
