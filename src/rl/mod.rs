//! Reinforcement learning, the paper's recipe: PPO with asymmetric clipping
//! (0.2 / 0.28), sequence-level loss averaging, no KL term, GAE with
//! gamma = lambda = 1 from a critic (a separate value model by default, as in
//! the reference, or a value head on the policy trunk), value clipping, two
//! epochs per batch, reward normalisation, binary reward by default; every
//! setting and how it compares with the reference is in [`recipe`].
//!
//! Pieces: [`batch`] (what rollouts hand over), [`gae`], [`ppo`] (loss),
//! [`adamw`] (optimizer with checkpointable state, clipping, warmup),
//! [`policy`] (decoder + value head), [`critic`] (the separate value model), [`trainer`] (PPO and supervised steps,
//! checkpoints), [`checkpoint`], [`metrics`], [`reward`].
//!
//! A training run ([`session`], behind `endless train` and the TUI's job):
//! 1. [`init`] builds the policy (`--init tiny`, a model directory, a GGUF file);
//! 2. [`collect`] runs episodes through the real agent loop and sandbox with a
//!    [`recorder`] policy that keeps the conversation as tokens, with the
//!    log-prob of every sampled token; rewards come from the final tests;
//! 3. [`Trainer::ppo_step`] updates on the [`RolloutBatch`]; [`run_files`]
//!    holds what the run writes (metrics, evaluations, checkpoints).

pub mod adamw;
pub mod batch;
pub mod checkpoint;
pub mod collect;
pub mod critic;
pub mod error;
pub mod gae;
pub mod init;
pub mod metrics;
pub mod policy;
pub mod ppo;
pub mod recipe;
pub mod recorder;
pub mod reward;
pub mod run_files;
pub mod session;
pub mod trainer;

pub use batch::{RolloutBatch, RolloutSequence, SequenceBuilder};
pub use critic::{Critic, CriticMode};
pub use error::RlError;
pub use metrics::{MetricsLog, StepMetrics};
pub use policy::Policy;
pub use ppo::PpoConfig;
pub use recipe::{Recipe, RecipeFlags};
pub use reward::{baseline_for, progress_reward, RewardMode};
pub use trainer::{train_loop, LoopOutcome, Resumed, TrainConfig, Trainer};

#[cfg(test)]
mod lora_tests;
#[cfg(test)]
mod tests;
