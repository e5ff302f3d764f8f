//! [`Trainer`]: one PPO update per [`RolloutBatch`], checkpoints, resume, and a
//! small loop that stops on a non-finite loss and keeps the last good checkpoint.

use super::adamw::{clip_scale, grad_norm, warmup_lr, AdamW, AdamWConfig};
use super::batch::RolloutBatch;
use super::checkpoint::{
    self, RngState, Skipped, TrainerState, CRITIC_OPTIMIZER, CRITIC_WEIGHTS, OPTIMIZER, WEIGHTS,
};
use super::critic::{Critic, CriticMode};
use super::error::{Result, RlError};
use super::metrics::SftMetrics;
use super::metrics::{MetricsLog, StepMetrics};
use super::policy::Policy;
use super::ppo::{advantages, ppo_loss, prepare, select_agent_positions, PpoConfig, Prepared};
use super::reward::{normalize_rewards, RewardMode};
use crate::model::kernels::train_ops::log_softmax_pick;
use crate::model::models::adapter::{ADAPTER_SPEC, ADAPTER_WEIGHTS};
use crate::model::models::transformer::Transformer;
use candle_core::backprop::GradStore;
use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Attention scores (floats: sequences x heads x layers x longest^2) one
/// supervised forward pass may cover; a larger batch runs in passes whose
/// gradients are summed. The composed attention keeps these scores for the
/// backward pass: one pass over SmolLM2's 8-sequence warm-start batches (9
/// heads, 30 layers) held 13 GB. The fused CPU attention recomputes them, so
/// there the bound limits the other activations kept (SmolLM2's warm start
/// peaked at 5.9 GB); the tiny model's batches stay one pass.
const SFT_PASS_SCORES: usize = 256 << 20;

/// `batch` split, in order, into batches whose attention scores
/// (`per_position` floats per query-key pair: heads x layers) stay within
/// `budget` (at least one sequence each).
pub(super) fn passes(
    batch: &RolloutBatch,
    per_position: usize,
    budget: usize,
) -> Vec<RolloutBatch> {
    let cost = |longest: usize, n: usize| {
        longest
            .saturating_mul(longest)
            .saturating_mul(per_position)
            .saturating_mul(n)
    };
    let mut parts = Vec::new();
    let (mut current, mut longest) = (Vec::new(), 0);
    for s in &batch.sequences {
        let len = s.tokens.len();
        if !current.is_empty() && cost(longest.max(len), current.len() + 1) > budget {
            parts.push(RolloutBatch {
                sequences: std::mem::take(&mut current),
            });
            longest = 0;
        }
        longest = longest.max(len);
        current.push(s.clone());
    }
    if !current.is_empty() {
        parts.push(RolloutBatch { sequences: current });
    }
    parts
}

/// Training hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Steps of linear warmup to `lr`.
    pub warmup_steps: u64,
    /// Global gradient-norm clip.
    pub max_grad_norm: f64,
    /// PPO loss settings: clipping, temperature, value and entropy coefficients.
    pub ppo: PpoConfig,
    /// Optimizer settings, shared by the policy and a separate critic.
    pub adam: AdamWConfig,
    /// How test results become rewards (for the rollout side).
    pub reward: RewardMode,
    /// Seed of the trainer's generator (rollout sampling seeds).
    pub seed: u64,
    /// Passes over each batch; every pass uses the log-probs, values,
    /// advantages and returns of collection time.
    #[serde(default = "one")]
    pub ppo_epochs: usize,
    /// Sequences per optimizer update (0: the whole batch).
    #[serde(default)]
    pub minibatch: usize,
    /// Where the values come from. Absent in files written before it existed:
    /// `shared`, what those runs trained.
    #[serde(default = "legacy_critic")]
    pub critic: CriticMode,
    /// Peak learning rate of a separate critic (same warmup and gradient
    /// clip as the policy).
    #[serde(default = "reference_critic_lr")]
    pub critic_lr: f64,
    /// Normalise each step's rewards to mean 0, std 1 over the step's
    /// episodes before GAE (see [`normalize_rewards`]).
    #[serde(default)]
    pub normalize_reward: bool,
}

fn one() -> usize {
    1
}

fn legacy_critic() -> CriticMode {
    CriticMode::Shared
}

fn reference_critic_lr() -> f64 {
    1e-6
}

/// What stays fixed over the epochs of one step, per minibatch: the values
/// of collection time (the centre of value clipping), and the advantages and
/// returns computed from them. (The old log-probs are the batch's own.)
struct Fixed {
    old_values: candle_core::Tensor,
    adv: candle_core::Tensor,
    ret: candle_core::Tensor,
    /// The reference policy's log-probs (with a KL penalty).
    ref_logprobs: Option<candle_core::Tensor>,
}

/// What one minibatch update measured.
struct MinibatchStats {
    policy_loss: f64,
    value_loss: f64,
    clip_frac: f64,
    entropy: f64,
    approx_kl: f64,
    kl_ref: f64,
    grad_norm: f64,
}

impl Default for TrainConfig {
    /// The reference's recipe (see [`super::recipe`]): a separate critic at
    /// 1e-6, value clipping 0.2, weight decay 0.01, two epochs per batch,
    /// reward normalisation.
    fn default() -> Self {
        Self {
            lr: 1e-6,
            warmup_steps: 10,
            max_grad_norm: 1.0,
            ppo: PpoConfig::default(),
            adam: AdamWConfig {
                weight_decay: 0.01,
                ..AdamWConfig::default()
            },
            reward: RewardMode::Binary,
            seed: 0,
            ppo_epochs: 2,
            minibatch: 0,
            critic: CriticMode::Separate,
            critic_lr: 1e-6,
            normalize_reward: true,
        }
    }
}

impl TrainConfig {
    /// The plainest PPO step: a value head on the policy's trunk, one epoch,
    /// no value clipping, no reward normalisation, no weight decay: what
    /// `scripts/bench_torch_ppo.py` implements, so benchmarks compare like
    /// with like.
    pub fn minimal() -> Self {
        Self {
            ppo: PpoConfig {
                value_clip: 0.0,
                ..PpoConfig::default()
            },
            adam: AdamWConfig::default(),
            ppo_epochs: 1,
            critic: CriticMode::Shared,
            normalize_reward: false,
            ..Self::default()
        }
    }
}

/// PPO training state: the policy, its optimizer, the step count and a generator.
pub struct Trainer {
    policy: Policy,
    opt: AdamW,
    /// The separate critic and its optimizer (`critic = separate`).
    critic: Option<(Critic, AdamW)>,
    cfg: TrainConfig,
    step: u64,
    rng: ChaCha8Rng,
    metrics: Option<MetricsLog>,
    /// The frozen policy a KL penalty measures against (`ppo.kl_coef > 0`).
    reference: Option<Transformer>,
}

/// A trainer restored from disk.
pub struct Resumed {
    /// The trainer, with its model, optimizer, step counter and generator restored.
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
        let mut t = Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            policy,
            opt,
            critic: None,
            cfg,
            step: 0,
            metrics: None,
            reference: None,
        };
        t.match_critic();
        t
    }

    /// Create or drop the separate critic to match the configuration. A
    /// critic that cannot be built (out of memory) is an error at the first
    /// step that needs it.
    fn match_critic(&mut self) {
        match self.cfg.critic {
            CriticMode::Shared => self.critic = None,
            CriticMode::Separate if self.critic.is_none() => {
                if let Err(e) = self.init_critic() {
                    tracing::error!("cannot build the separate critic: {e}");
                }
            }
            CriticMode::Separate => {}
        }
    }

    /// (Re)start the separate critic from the policy's current decoder, with
    /// a zero value head and fresh optimizer moments; e.g. after the
    /// supervised warm start, so that the critic starts from the same model
    /// as PPO does. Does nothing with a shared critic.
    pub fn init_critic(&mut self) -> Result<()> {
        if self.cfg.critic != CriticMode::Separate {
            return Ok(());
        }
        let critic = Critic::from_policy(&self.policy)?;
        let opt = AdamW::new(critic.vars(), self.cfg.adam);
        self.critic = Some((critic, opt));
        Ok(())
    }

    /// The separate critic, if there is one.
    pub fn critic(&self) -> Option<&Critic> {
        self.critic.as_ref().map(|(c, _)| c)
    }

    /// The separate critic's optimizer, if there is one.
    pub fn critic_optimizer(&self) -> Option<&AdamW> {
        self.critic.as_ref().map(|(_, o)| o)
    }

    /// Append metrics of each step to `log`.
    pub fn with_metrics(mut self, log: MetricsLog) -> Self {
        self.metrics = Some(log);
        self
    }

    /// The reference of the KL penalty: a frozen copy of the policy PPO
    /// started from ([`Policy::frozen_model`]).
    pub fn set_reference(&mut self, model: Transformer) {
        self.reference = Some(model);
    }

    /// Whether a reference policy is set.
    pub fn has_reference(&self) -> bool {
        self.reference.is_some()
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
    /// Switching to a separate critic starts one from the current policy.
    pub fn set_config(&mut self, cfg: TrainConfig) {
        self.opt.set_config(cfg.adam);
        if let Some((_, o)) = &mut self.critic {
            o.set_config(cfg.adam);
        }
        self.cfg = cfg;
        self.match_critic();
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
    /// minibatch (and one of the separate critic's). With `normalize_reward`
    /// the rewards are normalised over the whole batch first. The old
    /// log-probs, the values of collection time, and the advantages and
    /// returns from them are fixed for the step: later epochs reuse them.
    /// A NaN/infinite loss or gradient norm returns [`RlError::NonFinite`];
    /// the minibatch that produced it is not applied.
    pub fn ppo_step(&mut self, batch: &RolloutBatch) -> Result<StepMetrics> {
        batch.validate()?;
        let fitted = self.fit_context(batch);
        let batch = fitted.as_ref().unwrap_or(batch);
        if self.cfg.ppo.kl_coef > 0.0 && self.reference.is_none() {
            return Err(RlError::Setting(
                "kl_coef is above 0 but no reference policy is set".into(),
            ));
        }
        if self.cfg.critic == CriticMode::Separate && self.critic.is_none() {
            self.init_critic()?;
        }
        let start = Instant::now();
        // The update frees and reallocates the same large buffers at every
        // layer: keep them rather than have every page zeroed again.
        let _hold = crate::allocator::HoldFreedMemory::start();
        let n = batch.sequences.len();
        let size = match self.cfg.minibatch {
            0 => n,
            m => m.min(n),
        };
        let lr = warmup_lr(self.cfg.lr, self.step, self.cfg.warmup_steps);
        let critic_lr = warmup_lr(self.cfg.critic_lr, self.step, self.cfg.warmup_steps);
        let mut rewards: Vec<f32> = batch.sequences.iter().map(|s| s.reward).collect();
        if self.cfg.normalize_reward {
            normalize_rewards(&mut rewards);
        }
        // Minibatches of similar lengths: padding wastes little, and attention
        // cost grows with the square of the padded length.
        let mut by_len: Vec<usize> = (0..n).collect();
        by_len.sort_by_key(|&i| batch.sequences[i].tokens.len());
        let chunks: Vec<RolloutBatch> = by_len
            .chunks(size.max(1))
            .map(|c| RolloutBatch {
                sequences: c
                    .iter()
                    .map(|&i| {
                        let mut s = batch.sequences[i].clone();
                        s.reward = rewards[i];
                        s
                    })
                    .collect(),
            })
            .filter(|mb| mb.agent_tokens() > 0)
            .collect();
        // The first minibatch's first forward pass sees the weights of
        // collection time; the others need their values before any update.
        let mut fixed: Vec<Option<Fixed>> = Vec::with_capacity(chunks.len());
        for (i, mb) in chunks.iter().enumerate() {
            fixed.push(match i {
                0 => None,
                _ => Some(self.fixed_for(mb)?),
            });
        }
        let mut parts: Vec<MinibatchStats> = Vec::new();
        for _ in 0..self.cfg.ppo_epochs.max(1) {
            for (mb, slot) in chunks.iter().zip(fixed.iter_mut()) {
                parts.push(self.update_on(mb, slot, lr, critic_lr)?);
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
            kl_ref: mean(|p| p.kl_ref),
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

    /// Values `(n,)` of the critic in use at the agent positions of `prep`.
    fn values(&self, prep: &Prepared) -> Result<candle_core::Tensor> {
        match &self.critic {
            Some((c, _)) => c.values_at(&prep.inputs, &prep.positions),
            None => self.policy.values_at(&prep.inputs, &prep.positions),
        }
    }

    /// The fixed part of a minibatch's loss from the given (detached) values.
    fn fixed_from(&self, prep: &Prepared, values: &candle_core::Tensor) -> Result<Fixed> {
        let old_values = values.detach();
        let (adv, ret) = advantages(prep, &old_values, self.cfg.ppo.gamma, self.cfg.ppo.lambda)?;
        Ok(Fixed {
            old_values,
            adv,
            ret,
            ref_logprobs: self.reference_logprobs(prep)?,
        })
    }

    /// The reference policy's log-probs of `prep`'s agent tokens at the
    /// sampling temperature (`None` without a KL penalty).
    fn reference_logprobs(&self, prep: &Prepared) -> Result<Option<candle_core::Tensor>> {
        let (Some(reference), true) = (&self.reference, self.cfg.ppo.kl_coef > 0.0) else {
            return Ok(None);
        };
        let h = select_agent_positions(prep, &reference.hidden_states(&prep.inputs)?)?;
        let logits = reference.logits(&h)?;
        let picked = log_softmax_pick(&logits, &prep.targets, self.cfg.ppo.logit_temperature())?;
        Ok(Some(picked.narrow(1, 0, 1)?.squeeze(1)?.detach()))
    }

    /// The fixed part of a minibatch's loss, from a values-only pass now.
    fn fixed_for(&self, mb: &RolloutBatch) -> Result<Fixed> {
        let prep = prepare(mb, self.policy.device())?;
        let values = self.values(&prep)?;
        self.fixed_from(&prep, &values)
    }

    /// Forward, loss, backward and one optimizer update on a minibatch (and
    /// one of the separate critic's). `fixed` is filled on the first pass.
    fn update_on(
        &mut self,
        batch: &RolloutBatch,
        fixed: &mut Option<Fixed>,
        lr: f64,
        critic_lr: f64,
    ) -> Result<MinibatchStats> {
        let mut prep = prepare(batch, self.policy.device())?;
        let (logits, trunk_values) = self.policy.forward_at(&prep.inputs, &prep.positions)?;
        let values = match &self.critic {
            Some((c, _)) => c.values_at(&prep.inputs, &prep.positions)?,
            None => trunk_values,
        };
        if fixed.is_none() {
            *fixed = Some(self.fixed_from(&prep, &values)?);
        }
        let Some(f) = fixed.as_ref() else {
            unreachable!("filled above")
        };
        prep.ref_logprobs = f.ref_logprobs.clone();
        let out = ppo_loss(
            &prep,
            &logits,
            &values,
            &f.adv,
            &f.ret,
            Some(&f.old_values),
            &self.cfg.ppo,
        )?;
        let loss_val = out.policy_loss + self.cfg.ppo.value_coef * out.value_loss;
        if !loss_val.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what: "loss",
                value: loss_val,
            });
        }
        // Two models, two objectives, disjoint graphs: one backward pass
        // gives each model the gradient of its own loss.
        let grad_norm = if self.critic.is_some() {
            {
                let total = (&out.policy_term + &out.value_term)?;
                let grads = total.backward()?;
                let norm = self.checked_norm(self.opt.vars(), &grads, "gradient norm")?;
                let Some((_, copt)) = &self.critic else {
                    unreachable!("checked above")
                };
                let cnorm = self.checked_norm(copt.vars(), &grads, "critic gradient norm")?;
                self.opt
                    .step(&grads, lr, clip_scale(norm, self.cfg.max_grad_norm))?;
                if let Some((_, copt)) = &mut self.critic {
                    copt.step(&grads, critic_lr, clip_scale(cnorm, self.cfg.max_grad_norm))?;
                }
                norm
            }
        } else {
            self.apply(&out.loss, lr)?
        };
        Ok(MinibatchStats {
            policy_loss: out.policy_loss,
            value_loss: out.value_loss,
            clip_frac: out.clip_frac,
            entropy: out.entropy,
            approx_kl: out.approx_kl,
            kl_ref: out.kl_ref,
            grad_norm,
        })
    }

    /// The gradient norm of `vars`; an error when it is not finite.
    fn checked_norm(
        &self,
        vars: &[(String, candle_core::Var)],
        grads: &candle_core::backprop::GradStore,
        what: &'static str,
    ) -> Result<f64> {
        let norm = grad_norm(vars, grads)?;
        if !norm.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what,
                value: norm,
            });
        }
        Ok(norm)
    }

    /// Backward `loss`, clip the gradient norm and update; returns the norm
    /// before clipping. A non-finite norm leaves everything untouched.
    fn apply(&mut self, loss: &candle_core::Tensor, lr: f64) -> Result<f64> {
        self.apply_grads(&loss.backward()?, lr)
    }

    /// Clip the norm of `grads` and update with them (see [`Self::apply`]).
    fn apply_grads(&mut self, grads: &GradStore, lr: f64) -> Result<f64> {
        let norm = grad_norm(self.opt.vars(), grads)?;
        if !norm.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what: "gradient norm",
                value: norm,
            });
        }
        self.opt
            .step(grads, lr, clip_scale(norm, self.cfg.max_grad_norm))?;
        Ok(norm)
    }

    /// One supervised step: cross-entropy of the agent tokens of `batch`
    /// (sequence-level averaging, as in PPO), at learning rate `lr`. Does not
    /// count as a PPO step.
    pub fn sft_step(&mut self, batch: &RolloutBatch, lr: f64) -> Result<SftMetrics> {
        let _hold = crate::allocator::HoldFreedMemory::start();
        let fitted = self.fit_context(batch);
        self.sft_step_in_passes(fitted.as_ref().unwrap_or(batch), lr, SFT_PASS_SCORES)
    }

    /// `batch` cut to the policy's context when a sequence is longer (with
    /// a warning saying how many), else `None`: a sequence the model cannot
    /// take in one pass must not stop the run.
    fn fit_context(&self, batch: &RolloutBatch) -> Option<RolloutBatch> {
        let window = self.policy.model().max_positions();
        if batch.max_len() <= window {
            return None;
        }
        let mut fitted = batch.clone();
        let cut = fitted.truncate_to(window);
        tracing::warn!(
            cut,
            window,
            "sequences longer than the policy's context were cut to it"
        );
        Some(fitted)
    }

    /// [`Self::sft_step`], running the batch in forward passes that keep at
    /// most `budget` attention scores (see [`passes`]) and summing their
    /// gradients: the same update, in less memory.
    pub(super) fn sft_step_in_passes(
        &mut self,
        batch: &RolloutBatch,
        lr: f64,
        budget: usize,
    ) -> Result<SftMetrics> {
        let start = Instant::now();
        let live = |b: &RolloutBatch| b.sequences.iter().filter(|s| s.agent_tokens() > 0).count();
        let all = live(batch).max(1) as f64;
        let (mut grads, mut value) = (GradStore::default(), 0.0);
        let cfg = self.policy.config();
        let per_position = cfg.num_attention_heads * cfg.num_hidden_layers;
        for part in passes(batch, per_position, budget) {
            let part_live = live(&part);
            if part_live == 0 {
                continue;
            }
            let prep = prepare(&part, self.policy.device())?;
            let (logits, _) = self.policy.forward_at(&prep.inputs, &prep.positions)?;
            let picked = log_softmax_pick(&logits, &prep.targets, 1.0)?;
            let picked = picked.narrow(1, 0, 1)?.squeeze(1)?;
            // `prepare` weighs each sequence by 1 / (the pass's sequences).
            let share = part_live as f64 / all;
            let loss = ((picked * &prep.weights)?.sum_all()?.neg()? * share)?;
            value += loss.to_scalar::<f32>()? as f64;
            let part_grads = loss.backward()?;
            for (_, v) in self.opt.vars() {
                if let Some(g) = part_grads.get(v.as_tensor()) {
                    let sum = match grads.remove(v.as_tensor()) {
                        Some(acc) => (acc + g)?,
                        None => g.clone(),
                    };
                    grads.insert(v.as_tensor(), sum);
                }
            }
        }
        if !value.is_finite() {
            return Err(RlError::NonFinite {
                step: self.step,
                what: "supervised loss",
                value,
            });
        }
        self.apply_grads(&grads, lr)?;
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
            critic_optimizer_steps: self.critic_optimizer().map(AdamW::steps),
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
            match self.policy.adapter() {
                Some(spec) => {
                    self.policy.save_weights(&dir.join(ADAPTER_WEIGHTS))?;
                    spec.write(dir)?;
                }
                None => self.policy.save_weights(&dir.join(WEIGHTS))?,
            }
            let opt = dir.join(OPTIMIZER);
            candle_core::safetensors::save(&self.opt.state_tensors(), &opt)?;
            let cfg = dir.join("config.json");
            let text = serde_json::to_string_pretty(&self.policy.config().to_hf_json())
                .unwrap_or_default();
            crate::fsutil::write_atomic(&cfg, text.as_bytes()).map_err(|e| RlError::io(&cfg, e))?;
            if let Some(t) = self.policy.tokenizer() {
                t.save_to_dir(dir)?;
            }
            if let Some((critic, copt)) = &self.critic {
                critic.save_weights(&dir.join(CRITIC_WEIGHTS))?;
                let path = dir.join(CRITIC_OPTIMIZER);
                candle_core::safetensors::save(&copt.state_tensors(), &path)?;
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
        let policy = if dir.join(ADAPTER_SPEC).is_file() {
            Policy::from_dir(dir, device)?
        } else {
            let mut policy = Policy::from_config(&state.model, device, 0)?;
            policy.load_weights(&dir.join(WEIGHTS))?;
            if dir.join("tokenizer.json").is_file() {
                let t = crate::model::ChatTokenizer::from_dir(dir, &state.model.eos_token_ids)?;
                policy = policy.with_tokenizer(t);
            }
            policy
        };
        let moments = candle_core::safetensors::load(dir.join(OPTIMIZER), device)?;
        let mut trainer = Self::new(policy, cfg);
        trainer.opt.load_state(moments, state.optimizer_steps)?;
        // A separate critic comes back from its files; a checkpoint without
        // them (written with a shared critic) starts one from the policy.
        let critic_file = dir.join(CRITIC_WEIGHTS);
        if let (Some((critic, copt)), true) = (&mut trainer.critic, critic_file.is_file()) {
            critic.load_weights(&critic_file)?;
            let moments = candle_core::safetensors::load(dir.join(CRITIC_OPTIMIZER), device)?;
            copt.load_state(moments, state.critic_optimizer_steps.unwrap_or(0))?;
        }
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
        if checkpoint_every > 0 && trainer.step().is_multiple_of(checkpoint_every) {
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
