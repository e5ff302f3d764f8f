//! [`Trainer`]: one PPO update per [`RolloutBatch`], checkpoints, resume, and a
//! small loop that stops on a non-finite loss and keeps the last good checkpoint.

use super::adamw::{clip_scale, grad_norm, warmup_lr, AdamW, AdamWConfig};
use super::batch::{RolloutBatch, RolloutSequence};
use super::checkpoint::{self, RngState, Skipped, TrainerState, OPTIMIZER, WEIGHTS};
use super::error::{Result, RlError};
use super::metrics::{MetricsLog, StepMetrics};
use super::policy::Policy;
use super::ppo::{advantages, ppo_loss, prepare, PpoConfig};
use super::reward::RewardMode;
use super::run_files::SftMetrics;
use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Training hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Steps of linear warmup to `lr`.
    pub warmup_steps: u64,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    pub ppo: PpoConfig,
    pub adam: AdamWConfig,
    /// How test results become rewards (for the rollout side).
    pub reward: RewardMode,
    /// Seed of the trainer's generator (rollout sampling seeds).
    pub seed: u64,
    /// Passes over each batch.
    #[serde(default = "one")]
    pub ppo_epochs: usize,
    /// Sequences per optimizer update (0: the whole batch).
    #[serde(default)]
    pub minibatch: usize,
}

fn one() -> usize {
    1
}

/// What one minibatch update measured.
struct MinibatchStats {
    policy_loss: f64,
    value_loss: f64,
    clip_frac: f64,
    entropy: f64,
    approx_kl: f64,
    grad_norm: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            lr: 1e-6,
            warmup_steps: 10,
            max_grad_norm: 1.0,
            ppo: PpoConfig::default(),
            adam: AdamWConfig::default(),
            reward: RewardMode::Binary,
            seed: 0,
            ppo_epochs: 1,
            minibatch: 0,
        }
    }
}

/// PPO training state: the policy, its optimizer, the step count and a generator.
pub struct Trainer {
    policy: Policy,
    opt: AdamW,
    cfg: TrainConfig,
    step: u64,
    rng: ChaCha8Rng,
    metrics: Option<MetricsLog>,
}

/// A trainer restored from disk.
pub struct Resumed {
    pub trainer: Trainer,
    /// The checkpoint it came from.
    pub checkpoint: PathBuf,
    /// Newer checkpoints that were refused, and why.
    pub skipped: Vec<Skipped>,
}

/// Keep freed memory in the process for reuse (glibc). A training step
/// allocates and frees many large temporaries; by default glibc hands them back
/// to the kernel (trimming the heap, or `munmap` above its mmap threshold) and
/// the next step pays page faults and page zeroing for every one of them: a
/// quarter of a small model's PPO step. Applied once, process-wide.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes allocator tunables; it is safe to
            // call at any time, from any thread.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
                libc::mallopt(libc::M_TOP_PAD, 64 << 20);
            }
        });
    }
}

impl Trainer {
    /// Start training `policy` from step 0 (see [`keep_freed_memory`], applied here).
    pub fn new(policy: Policy, cfg: TrainConfig) -> Self {
        keep_freed_memory();
        let opt = AdamW::new(policy.vars(), cfg.adam);
        Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            policy,
            opt,
            cfg,
            step: 0,
            metrics: None,
        }
    }

    /// Append metrics of each step to `log`.
    pub fn with_metrics(mut self, log: MetricsLog) -> Self {
        self.metrics = Some(log);
        self
    }

    /// The policy being trained.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Steps completed.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    /// Change the settings of the next steps (learning rate, clipping, reward,
    /// ...); the optimizer's moments, the step count and the generator stay.
    pub fn set_config(&mut self, cfg: TrainConfig) {
        self.opt.set_config(cfg.adam);
        self.cfg = cfg;
    }

    /// The optimizer.
    pub fn optimizer(&self) -> &AdamW {
        &self.opt
    }

    /// The trainer's generator (checkpointed), e.g. for rollout seeds.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// One PPO step on `batch`: `ppo_epochs` passes over it in minibatches of
    /// `minibatch` sequences (0: the whole batch), one optimizer update per
    /// minibatch. A NaN/infinite loss or gradient norm returns
    /// [`RlError::NonFinite`]; the minibatch that produced it is not applied.
    pub fn ppo_step(&mut self, batch: &RolloutBatch) -> Result<StepMetrics> {
        batch.validate()?;
        let start = Instant::now();
        let n = batch.sequences.len();
        let size = match self.cfg.minibatch {
            0 => n,
            m => m.min(n),
        };
        let lr = warmup_lr(self.cfg.lr, self.step, self.cfg.warmup_steps);
        let mut parts: Vec<MinibatchStats> = Vec::new();
        // Minibatches of similar lengths: padding wastes little, and attention
        // cost grows with the square of the padded length.
        let mut by_len: Vec<&RolloutSequence> = batch.sequences.iter().collect();
        by_len.sort_by_key(|s| s.tokens.len());
        for _ in 0..self.cfg.ppo_epochs.max(1) {
            for chunk in by_len.chunks(size) {
                let mb = RolloutBatch {
                    sequences: chunk.iter().map(|s| (*s).clone()).collect(),
                };
                if mb.agent_tokens() == 0 {
                    continue;
                }
                parts.push(self.update_on(&mb, lr)?);
            }
        }
        self.step += 1;
        let k = parts.len().max(1) as f64;
        let mean = |f: fn(&MinibatchStats) -> f64| parts.iter().map(f).sum::<f64>() / k;
        let nseq = n.max(1) as f64;
        let tokens: usize = batch.sequences.iter().map(|s| s.tokens.len()).sum();
        let seconds = start.elapsed().as_secs_f64();
        let m = StepMetrics {
            step: self.step,
            reward: batch.sequences.iter().map(|s| s.reward as f64).sum::<f64>() / nseq,
            pass_rate: batch.sequences.iter().filter(|s| s.passed).count() as f64 / nseq,
            policy_loss: mean(|p| p.policy_loss),
            value_loss: mean(|p| p.value_loss),
            clip_frac: mean(|p| p.clip_frac),
            entropy: mean(|p| p.entropy),
            approx_kl: mean(|p| p.approx_kl),
            grad_norm: mean(|p| p.grad_norm),
            lr,
            agent_tokens: batch.agent_tokens(),
            tokens,
            tokens_per_s: (tokens * self.cfg.ppo_epochs.max(1)) as f64 / seconds.max(1e-9),
            seconds,
        };
        if let Some(log) = &self.metrics {
            log.append(&m)?;
        }
        Ok(m)
    }

    /// Forward, loss, backward and one optimizer update on a minibatch.
    fn update_on(&mut self, batch: &RolloutBatch, lr: f64) -> Result<MinibatchStats> {
        let prep = prepare(batch, self.policy.device())?;
        let (logits, values) = self.policy.forward_at(&prep.inputs, &prep.positions)?;
        let (adv, ret) = advantages(&prep, &values, self.cfg.ppo.gamma, self.cfg.ppo.lambda)?;
        let out = ppo_loss(&prep, &logits, &values, &adv, &ret, &self.cfg.ppo)?;
        let loss_val = out.policy_loss + self.cfg.ppo.value_coef * out.value_loss;
        if !loss_val.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what: "loss",
                value: loss_val,
            });
        }
        let grad_norm = self.apply(&out.loss, lr)?;
        Ok(MinibatchStats {
            policy_loss: out.policy_loss,
            value_loss: out.value_loss,
            clip_frac: out.clip_frac,
            entropy: out.entropy,
            approx_kl: out.approx_kl,
            grad_norm,
        })
    }

    /// Backward `loss`, clip the gradient norm and update; returns the norm
    /// before clipping. A non-finite norm leaves everything untouched.
    fn apply(&mut self, loss: &candle_core::Tensor, lr: f64) -> Result<f64> {
        let grads = loss.backward()?;
        let norm = grad_norm(self.opt.vars(), &grads)?;
        if !norm.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what: "gradient norm",
                value: norm,
            });
        }
        self.opt
            .step(&grads, lr, clip_scale(norm, self.cfg.max_grad_norm))?;
        Ok(norm)
    }

    /// One supervised step: cross-entropy of the agent tokens of `batch`
    /// (sequence-level averaging, as in PPO), at learning rate `lr`. Does not
    /// count as a PPO step.
    pub fn sft_step(&mut self, batch: &RolloutBatch, lr: f64) -> Result<SftMetrics> {
        let start = Instant::now();
        let prep = prepare(batch, self.policy.device())?;
        let (logits, _) = self.policy.forward_at(&prep.inputs, &prep.positions)?;
        let lp = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1)?;
        let picked = lp.gather(&prep.targets.unsqueeze(1)?, 1)?.squeeze(1)?;
        let loss = (picked * &prep.weights)?.sum_all()?.neg()?;
        let value = loss.to_scalar::<f32>()? as f64;
        if !value.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what: "supervised loss",
                value,
            });
        }
        self.apply(&loss, lr)?;
        let tokens: usize = batch.sequences.iter().map(|s| s.tokens.len()).sum();
        Ok(SftMetrics {
            step: self.opt.steps(),
            loss: value,
            agent_tokens: batch.agent_tokens(),
            tokens_per_s: tokens as f64 / start.elapsed().as_secs_f64().max(1e-9),
            lr,
        })
    }

    /// Forget the optimizer's moments and step count (e.g. between the
    /// supervised warm start and PPO).
    pub fn reset_optimizer(&mut self) {
        self.opt = AdamW::new(self.policy.vars(), self.cfg.adam);
    }

    fn state(&self) -> TrainerState {
        TrainerState {
            step: self.step,
            optimizer_steps: self.opt.steps(),
            rng: RngState::capture(&self.rng),
            model: self.policy.config().clone(),
            train: serde_json::to_value(&self.cfg).unwrap_or_default(),
        }
    }

    /// Write `root/step-<N>/` atomically; the directory is also a loadable model
    /// directory (`config.json`, weights, tokenizer files when known).
    pub fn save_checkpoint(&self, root: &Path) -> Result<PathBuf> {
        let state = self.state();
        checkpoint::save(root, &state, |dir| {
            self.policy.save_weights(&dir.join(WEIGHTS))?;
            let opt = dir.join(OPTIMIZER);
            candle_core::safetensors::save(&self.opt.state_tensors(), &opt)?;
            let cfg = dir.join("config.json");
            let text = serde_json::to_string_pretty(&self.policy.config().to_hf_json())
                .unwrap_or_default();
            crate::fsutil::write_atomic(&cfg, text.as_bytes()).map_err(|e| RlError::io(&cfg, e))?;
            if let Some(t) = self.policy.tokenizer() {
                t.save_to_dir(dir)?;
            }
            Ok(())
        })
    }

    /// Restore from the newest valid checkpoint under `root` (`None` if there
    /// is none). Broken newer checkpoints are skipped and reported.
    pub fn resume(root: &Path, device: &Device) -> Result<Option<Resumed>> {
        let (found, skipped) = checkpoint::latest(root)?;
        let Some((dir, state)) = found else {
            return Ok(None);
        };
        let trainer = Self::load_checkpoint_verified(&dir, state, device)?;
        Ok(Some(Resumed {
            trainer,
            checkpoint: dir,
            skipped,
        }))
    }

    /// Restore from one checkpoint directory; refuses it if it does not verify.
    pub fn load_checkpoint(dir: &Path, device: &Device) -> Result<Self> {
        let state = checkpoint::verify(dir)?;
        Self::load_checkpoint_verified(dir, state, device)
    }

    fn load_checkpoint_verified(dir: &Path, state: TrainerState, device: &Device) -> Result<Self> {
        let cfg: TrainConfig = serde_json::from_value(state.train.clone())
            .map_err(|e| RlError::ckpt(dir, format!("trainer.json field `train`: {e}")))?;
        let mut policy = Policy::from_config(&state.model, device, 0)?;
        policy.load_weights(&dir.join(WEIGHTS))?;
        if dir.join("tokenizer.json").is_file() {
            let t = crate::model::ChatTokenizer::from_dir(dir, &state.model.eos_token_ids)?;
            policy = policy.with_tokenizer(t);
        }
        let moments = candle_core::safetensors::load(dir.join(OPTIMIZER), device)?;
        let mut trainer = Self::new(policy, cfg);
        trainer.opt.load_state(moments, state.optimizer_steps)?;
        trainer.step = state.step;
        trainer.rng = state
            .rng
            .restore()
            .ok_or_else(|| RlError::ckpt(dir, "trainer.json field `rng` is invalid"))?;
        Ok(trainer)
    }
}

/// How a [`train_loop`] ended.
#[derive(Debug, Clone)]
pub struct LoopOutcome {
    /// Steps completed (total, including earlier runs).
    pub steps_done: u64,
    /// The last checkpoint written.
    pub last_checkpoint: Option<PathBuf>,
    /// Why training stopped early, if it did.
    pub stopped: Option<String>,
    /// Metrics of each step run here.
    pub metrics: Vec<StepMetrics>,
}

/// Run PPO steps until `total_steps`, checkpointing every `checkpoint_every`
/// steps and at the end. `next_batch` collects a batch with the current policy.
/// A non-finite loss stops the loop without writing a checkpoint: the last good
/// one stays the latest, and `stopped` says why.
pub fn train_loop(
    trainer: &mut Trainer,
    total_steps: u64,
    checkpoint_every: u64,
    root: &Path,
    mut next_batch: impl FnMut(&mut Trainer) -> Result<RolloutBatch>,
) -> Result<LoopOutcome> {
    let mut out = LoopOutcome {
        steps_done: trainer.step(),
        last_checkpoint: None,
        stopped: None,
        metrics: Vec::new(),
    };
    while trainer.step() < total_steps {
        let batch = next_batch(trainer)?;
        match trainer.ppo_step(&batch) {
            Ok(m) => out.metrics.push(m),
            Err(e @ RlError::NonFinite { .. }) => {
                let last = checkpoint::latest(root)?.0.map(|(d, _)| d);
                out.stopped = Some(match &last {
                    Some(d) => format!(
                        "{e}; training stopped, last good checkpoint {}",
                        d.display()
                    ),
                    None => format!("{e}; training stopped, no checkpoint written yet"),
                });
                tracing::error!("{}", out.stopped.as_deref().unwrap_or_default());
                out.last_checkpoint = last;
                out.steps_done = trainer.step();
                return Ok(out);
            }
            Err(e) => return Err(e),
        }
        if checkpoint_every > 0 && trainer.step() % checkpoint_every == 0 {
            out.last_checkpoint = Some(trainer.save_checkpoint(root)?);
        }
    }
    if out
        .last_checkpoint
        .as_ref()
        .map(|p| p.ends_with(checkpoint::step_dir_name(trainer.step())))
        != Some(true)
    {
        out.last_checkpoint = Some(trainer.save_checkpoint(root)?);
    }
    out.steps_done = trainer.step();
    Ok(out)
}
