//! Reinforcement learning, the paper's recipe: PPO with asymmetric clipping
//! (0.2 / 0.28), sequence-level loss averaging, no KL term, GAE with
//! gamma = lambda = 1 and a value head, binary reward by default.
//!
//! Pieces: [`batch`] (what rollouts hand over), [`gae`], [`ppo`] (loss),
//! [`adamw`] (optimizer with checkpointable state, clipping, warmup),
//! [`policy`] (decoder + value head), [`trainer`] (one step, checkpoints,
//! a loop), [`checkpoint`], [`metrics`], [`reward`].
//!
//! How a full training run plugs together (the rollout side is not here yet):
//! 1. `Policy::from_dir` (or `Policy::from_config` + a tokenizer for `--init tiny`);
//! 2. per step, sample episodes with `LocalModel::from_parts(policy.model().clone(), ..)`
//!    (a clone shares the trained weights), recording each turn into a
//!    [`SequenceBuilder`]: context tokens masked, sampled tokens with the
//!    log-probs `Generation` reports; reward from [`reward::reward`];
//! 3. [`Trainer::ppo_step`] on the [`RolloutBatch`]; [`train_loop`] adds
//!    checkpoints, resume and the stop-on-NaN rule.

pub mod adamw;
pub mod batch;
pub mod checkpoint;
pub mod collect;
pub mod error;
pub mod gae;
pub mod init;
pub mod metrics;
pub mod policy;
pub mod ppo;
pub mod recorder;
pub mod reward;
pub mod run_files;
pub mod session;
pub mod trainer;

pub use batch::{RolloutBatch, RolloutSequence, SequenceBuilder};
pub use error::RlError;
pub use metrics::{MetricsLog, StepMetrics};
pub use policy::Policy;
pub use ppo::PpoConfig;
pub use reward::RewardMode;
pub use trainer::{train_loop, LoopOutcome, Resumed, TrainConfig, Trainer};

#[cfg(test)]
mod tests;
