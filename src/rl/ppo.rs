//! The PPO objective of the paper: asymmetric ratio clipping
//! (eps_low = 0.2, eps_high = 0.28), sequence-level averaging (mean over each
//! sequence's agent tokens, then over sequences), no KL term by default;
//! prompt and observation tokens are masked out. An optional KL penalty to a
//! frozen reference policy (`kl_coef`, the k3 estimator
//! `exp(ref - lp) - (ref - lp) - 1` per agent token, averaged like the
//! policy loss) holds the policy near its warm start. Plus a squared-error value loss,
//! clipped around the values at collection time as in PPO (the reference's
//! `value_clip: 0.2`): `0.5 max((v - R)^2, (v_old + clip(v - v_old, -c, c) - R)^2)`.

use super::batch::RolloutBatch;
use super::error::Result;
use super::gae::{gae, terminal_rewards};
use crate::model::kernels::train_ops::log_softmax_pick;
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

/// PPO hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PpoConfig {
    /// Lower clip: the ratio is not pushed below `1 - eps_low`.
    pub eps_low: f64,
    /// Upper clip: the ratio is not pushed above `1 + eps_high`.
    pub eps_high: f64,
    /// Weight of the value loss.
    pub value_coef: f64,
    /// Weight of an entropy bonus (0 in the paper).
    pub entropy_coef: f64,
    /// Temperature the old log-probs were sampled at.
    pub temperature: f64,
    /// GAE discount.
    pub gamma: f32,
    /// GAE lambda.
    pub lambda: f32,
    /// Value clipping range around the values at collection time (0: off).
    /// Absent in files written before it existed: off, as those runs were.
    #[serde(default)]
    pub value_clip: f64,
    /// Weight of the KL penalty to the reference policy (0: none, as the
    /// paper). Absent in files written before it existed: none.
    #[serde(default)]
    pub kl_coef: f64,
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self {
            eps_low: 0.2,
            eps_high: 0.28,
            value_coef: 0.5,
            entropy_coef: 0.0,
            temperature: 1.0,
            gamma: 1.0,
            lambda: 1.0,
            value_clip: 0.2,
            kl_coef: 0.0,
        }
    }
}

impl PpoConfig {
    /// What the logits are divided by: the sampling temperature, or 1 when
    /// it is not positive.
    pub fn logit_temperature(&self) -> f64 {
        if self.temperature > 0.0 {
            self.temperature
        } else {
            1.0
        }
    }
}

/// The per-token clipped value loss `0.5 max((v - R)^2, (v_c - R)^2)` with
/// `v_c = v_old + clip(v - v_old, -clip, clip)`; `clip <= 0` is the plain
/// `0.5 (v - R)^2`.
pub fn clipped_value_loss(value: f64, old: f64, ret: f64, clip: f64) -> f64 {
    let plain = (value - ret).powi(2);
    if clip <= 0.0 {
        return 0.5 * plain;
    }
    let clipped = old + (value - old).clamp(-clip, clip);
    0.5 * plain.max((clipped - ret).powi(2))
}

/// The per-token clipped surrogate loss `max(-A r, -A clip(r, 1-eps_low, 1+eps_high))`.
pub fn clipped_token_loss(ratio: f64, adv: f64, eps_low: f64, eps_high: f64) -> f64 {
    let clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high);
    (-adv * ratio).max(-adv * clipped)
}

/// Whether clipping removes the token's gradient.
pub fn is_clipped(ratio: f64, adv: f64, eps_low: f64, eps_high: f64) -> bool {
    (adv > 0.0 && ratio > 1.0 + eps_high) || (adv < 0.0 && ratio < 1.0 - eps_low)
}

/// A batch as tensors. Inputs are `tokens[..-1]` (right-padded); everything
/// else is listed per agent token, in sequence order: only agent positions
/// reach the LM head, so prompts and observations cost no vocabulary-sized work.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Input ids `(b, t)`, right-padded.
    pub inputs: Tensor,
    /// Flat index into `b * t` of the position that predicts each agent token `(n,)`.
    pub positions: Tensor,
    /// The agent tokens `(n,)`.
    pub targets: Tensor,
    /// Their log-probs at sampling time `(n,)`.
    pub old_logprobs: Tensor,
    /// Sequence-level averaging weights `(n,)`: `1 / n_agent(seq) / n_seqs`.
    pub weights: Tensor,
    /// The sequence of each agent token.
    pub seq_of: Vec<usize>,
    /// Rewards per sequence.
    pub rewards: Vec<f32>,
    /// The reference policy's log-probs of the agent tokens `(n,)`, at the
    /// sampling temperature, when the loss has a KL penalty (`None` from
    /// [`prepare`]; the trainer fills it).
    pub ref_logprobs: Option<Tensor>,
}

/// Pad and shift a batch (padding id 0; right padding never affects the
/// positions before it) and list its agent tokens.
pub fn prepare(batch: &RolloutBatch, device: &Device) -> Result<Prepared> {
    batch.validate()?;
    let b = batch.sequences.len();
    let t = batch.max_len().saturating_sub(1).max(1);
    let mut inputs = vec![0u32; b * t];
    let (mut positions, mut targets, mut old, mut weights, mut seq_of) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let live = batch
        .sequences
        .iter()
        .filter(|s| s.agent_tokens() > 0)
        .count() as f32;
    for (i, s) in batch.sequences.iter().enumerate() {
        let n = s.agent_tokens() as f32;
        for j in 0..s.tokens.len().saturating_sub(1) {
            inputs[i * t + j] = s.tokens[j];
            if s.agent_mask[j + 1] {
                positions.push((i * t + j) as u32);
                targets.push(s.tokens[j + 1]);
                old.push(s.old_logprobs[j + 1]);
                weights.push(1.0 / n / live);
                seq_of.push(i);
            }
        }
    }
    let n = positions.len();
    Ok(Prepared {
        inputs: Tensor::from_vec(inputs, (b, t), device)?,
        positions: Tensor::from_vec(positions, n, device)?,
        targets: Tensor::from_vec(targets, n, device)?,
        old_logprobs: Tensor::from_vec(old, n, device)?,
        weights: Tensor::from_vec(weights, n, device)?,
        seq_of,
        rewards: batch.sequences.iter().map(|s| s.reward).collect(),
        ref_logprobs: None,
    })
}

/// Hidden states `(b, t, h)` at the agent positions: `(n, h)`.
pub fn select_agent_positions(prep: &Prepared, hidden: &Tensor) -> Result<Tensor> {
    let (b, t, h) = hidden.dims3()?;
    Ok(hidden
        .reshape((b * t, h))?
        .index_select(&prep.positions, 0)?)
}

/// Advantages and returns `(n,)` by GAE over each sequence's agent tokens,
/// from (detached) values `(n,)`.
pub fn advantages(
    prep: &Prepared,
    values: &Tensor,
    gamma: f32,
    lambda: f32,
) -> Result<(Tensor, Tensor)> {
    let vals: Vec<f32> = values.detach().to_dtype(DType::F32)?.to_vec1()?;
    let n = vals.len();
    let (mut adv, mut ret) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut k = 0;
    while k < n {
        let seq = prep.seq_of[k];
        let end = (k..n).find(|&e| prep.seq_of[e] != seq).unwrap_or(n);
        let (a, r) = gae(
            &terminal_rewards(end - k, prep.rewards[seq]),
            &vals[k..end],
            gamma,
            lambda,
        );
        adv.extend(a);
        ret.extend(r);
        k = end;
    }
    let dev = values.device();
    Ok((
        Tensor::from_vec(adv, n, dev)?,
        Tensor::from_vec(ret, n, dev)?,
    ))
}

/// The loss and its parts for one batch.
#[derive(Debug, Clone)]
pub struct PpoLoss {
    /// `policy + kl_coef * kl_ref + value_coef * value - entropy_coef *
    /// entropy`, differentiable.
    pub loss: Tensor,
    /// `policy + kl_coef * kl_ref - entropy_coef * entropy`, differentiable (the policy's own
    /// objective when the critic is a separate model).
    pub policy_term: Tensor,
    /// The (clipped) value loss, differentiable, without `value_coef`.
    pub value_term: Tensor,
    /// The policy loss's value, as a number.
    pub policy_loss: f64,
    /// The value loss's value, as a number (without `value_coef`).
    pub value_loss: f64,
    /// Mean entropy of the policy at agent tokens (sequence-level average).
    pub entropy: f64,
    /// Fraction of agent tokens whose gradient is clipped away.
    pub clip_frac: f64,
    /// Approximate KL(old || new), `E[(r - 1) - log r]` over agent tokens.
    pub approx_kl: f64,
    /// The KL estimate to the reference policy (k3, sequence-averaged; 0
    /// without one), before `kl_coef`.
    pub kl_ref: f64,
}

/// Compute the PPO loss from the policy's logits `(n, vocab)` at the agent
/// positions (not yet divided by the temperature) and values `(n,)`.
/// `old_values` `(n,)` are the values at collection time, the centre of value
/// clipping (`None`, or `cfg.value_clip <= 0`: no clipping).
pub fn ppo_loss(
    prep: &Prepared,
    logits: &Tensor,
    values: &Tensor,
    adv: &Tensor,
    returns: &Tensor,
    old_values: Option<&Tensor>,
    cfg: &PpoConfig,
) -> Result<PpoLoss> {
    let temperature = cfg.logit_temperature();
    let dt = logits.dtype();
    let (adv, returns) = (&adv.to_dtype(dt)?, &returns.to_dtype(dt)?);
    let w = &prep.weights.to_dtype(dt)?;
    let old = prep.old_logprobs.to_dtype(dt)?;
    // (log-probability of the sampled token, entropy) per agent token.
    let picked = log_softmax_pick(logits, &prep.targets, temperature)?;
    let lp = picked.narrow(1, 0, 1)?.squeeze(1)?;
    let ratio = (&lp - &old)?.exp()?;
    let clipped = ratio.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)?;
    let neg_adv = adv.neg()?;
    let pg_tok = (&neg_adv * &ratio)?.maximum(&(&neg_adv * &clipped)?)?;
    let policy_loss = (&pg_tok * w)?.sum_all()?;
    let values = &values.to_dtype(dt)?;
    let mut v_sq = (values - returns)?.sqr()?;
    if let (Some(old), true) = (old_values, cfg.value_clip > 0.0) {
        let old = &old.detach().to_dtype(dt)?;
        let delta = (values - old)?.clamp(-cfg.value_clip, cfg.value_clip)?;
        let clipped = ((old + delta)? - returns)?.sqr()?;
        v_sq = v_sq.maximum(&clipped)?;
    }
    let value_loss = ((v_sq * 0.5)? * w)?.sum_all()?;
    let entropy = (picked.narrow(1, 1, 1)?.squeeze(1)? * w)?.sum_all()?;
    let mut policy_term = policy_loss.clone();
    if cfg.entropy_coef != 0.0 {
        policy_term = (policy_term - (&entropy * cfg.entropy_coef)?)?;
    }
    let mut kl_ref = 0.0;
    if let (Some(reference), true) = (&prep.ref_logprobs, cfg.kl_coef > 0.0) {
        let d = (reference.to_dtype(dt)? - &lp)?;
        let k3 = ((d.exp()? - &d)? - 1.0)?;
        let kl = (k3 * w)?.sum_all()?;
        kl_ref = kl.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        policy_term = (policy_term + (kl * cfg.kl_coef)?)?;
    }
    let loss = (&policy_term + (&value_loss * cfg.value_coef)?)?;
    // Diagnostics on the CPU.
    let r: Vec<f32> = ratio.detach().to_dtype(DType::F32)?.to_vec1()?;
    let a: Vec<f32> = adv.to_dtype(DType::F32)?.to_vec1()?;
    let n = r.len();
    let clipped_n = r
        .iter()
        .zip(&a)
        .filter(|(r, a)| is_clipped(**r as f64, **a as f64, cfg.eps_low, cfg.eps_high))
        .count();
    let kl: f64 = r.iter().map(|&r| (r as f64 - 1.0) - (r as f64).ln()).sum();
    let scalar = |t: &Tensor| -> Result<f64> { Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?) };
    Ok(PpoLoss {
        policy_loss: scalar(&policy_loss)?,
        value_loss: scalar(&value_loss)?,
        entropy: scalar(&entropy.detach())?,
        clip_frac: clipped_n as f64 / n.max(1) as f64,
        approx_kl: kl / n.max(1) as f64,
        kl_ref,
        loss,
        policy_term,
        value_term: value_loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_on_hand_computed_ratios() {
        let (lo, hi) = (0.2, 0.28);
        // Positive advantage: gain capped at ratio 1.28.
        assert!((clipped_token_loss(1.5, 2.0, lo, hi) - (-2.56)).abs() < 1e-12);
        assert!(is_clipped(1.5, 2.0, lo, hi));
        assert!((clipped_token_loss(1.1, 2.0, lo, hi) - (-2.2)).abs() < 1e-12);
        assert!(!is_clipped(1.1, 2.0, lo, hi));
        // A low ratio with positive advantage is never clipped (pessimistic bound).
        assert!((clipped_token_loss(0.5, 2.0, lo, hi) - (-1.0)).abs() < 1e-12);
        assert!(!is_clipped(0.5, 2.0, lo, hi));
        // Negative advantage: floor at 0.8; a high ratio stays unclipped.
        assert!((clipped_token_loss(0.5, -1.0, lo, hi) - 0.8).abs() < 1e-12);
        assert!(is_clipped(0.5, -1.0, lo, hi));
        assert!((clipped_token_loss(1.5, -1.0, lo, hi) - 1.5).abs() < 1e-12);
        assert!(!is_clipped(1.5, -1.0, lo, hi));
        // Asymmetry: 1.25 is inside the upper bound, 0.75 is outside the lower.
        assert!(!is_clipped(1.25, 1.0, lo, hi));
        assert!(is_clipped(0.75, -1.0, lo, hi));
    }

    #[test]
    fn tensor_loss_matches_scalar_formula_with_sequence_averaging() {
        use super::super::batch::RolloutSequence;
        let dev = Device::Cpu;
        // Two sequences over a vocabulary of 2: the first has 2 agent tokens, the second 1.
        let seq = |tokens: Vec<u32>, mask: Vec<bool>, old: Vec<f32>, reward| RolloutSequence {
            tokens,
            agent_mask: mask,
            old_logprobs: old,
            reward,
            passed: reward > 0.5,
        };
        let batch = RolloutBatch {
            sequences: vec![
                seq(
                    vec![0, 1, 0],
                    vec![false, true, true],
                    vec![0.0, -1.0, -0.2],
                    1.0,
                ),
                seq(vec![1, 0], vec![false, true], vec![0.0, -0.1], 0.0),
            ],
        };
        let prep = prepare(&batch, &dev).unwrap();
        // Agent tokens: row 0 positions 0 and 1, row 1 position 0.
        assert_eq!(prep.positions.to_vec1::<u32>().unwrap(), vec![0, 1, 2]);
        assert_eq!(prep.seq_of, vec![0, 0, 1]);
        let logits = Tensor::new(&[[0.0f32, 0.0], [1.0, 0.0], [0.0, 2.0]], &dev).unwrap();
        let values = Tensor::new(&[0.1f32, 0.3, 0.2], &dev).unwrap();
        let (adv, ret) = advantages(&prep, &values, 1.0, 1.0).unwrap();
        let close = |t: &Tensor, want: [f32; 3]| {
            let got = t.to_vec1::<f32>().unwrap();
            assert!(
                got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6),
                "{got:?}"
            );
        };
        close(&adv, [0.9, 0.7, -0.2]);
        close(&ret, [1.0, 1.0, 0.0]);
        let cfg = PpoConfig::default();
        let out = ppo_loss(&prep, &logits, &values, &adv, &ret, Some(&values), &cfg).unwrap();
        // By hand: log-softmax picks.
        let lse = |a: f64, b: f64| (a.exp() + b.exp()).ln();
        let lp00 = 0.0 - lse(0.0, 0.0); // target 1 at row 0 pos 0
        let lp01 = 1.0 - lse(1.0, 0.0); // target 0 at row 0 pos 1
        let lp10 = 0.0 - lse(0.0, 2.0); // target 0 at row 1 pos 0
        let t = |lp: f64, old: f64, a: f64| clipped_token_loss((lp - old).exp(), a, 0.2, 0.28);
        let seq0 = (t(lp00, -1.0, 0.9) + t(lp01, -0.2, 0.7)) / 2.0;
        let seq1 = t(lp10, -0.1, -0.2);
        let want = (seq0 + seq1) / 2.0;
        assert!(
            (out.policy_loss - want).abs() < 1e-5,
            "{} vs {want}",
            out.policy_loss
        );
        let vl = ((0.5 * 0.81 + 0.5 * 0.49) / 2.0 + 0.5 * 0.04) / 2.0;
        assert!(
            (out.value_loss - vl).abs() < 1e-6,
            "{} vs {vl}",
            out.value_loss
        );
        // Ratios: e^(lp00+1) = 1.36 (clipped, A>0), e^(lp01+0.2)=0.93, e^(lp10+0.1)=0.14 (clipped, A<0).
        assert!((out.clip_frac - 2.0 / 3.0).abs() < 1e-9);
        let total = out.loss.to_scalar::<f32>().unwrap() as f64;
        assert!((total - (want + 0.5 * vl)).abs() < 1e-5);
    }

    #[test]
    fn kl_penalty_is_k3_to_the_reference_and_pulls_towards_it() {
        use super::super::batch::RolloutSequence;
        let dev = Device::Cpu;
        let batch = RolloutBatch {
            sequences: vec![RolloutSequence {
                tokens: vec![0, 1, 0],
                agent_mask: vec![false, true, true],
                old_logprobs: vec![0.0, -0.5, -0.5],
                reward: 0.0,
                passed: false,
            }],
        };
        let mut prep = prepare(&batch, &dev).unwrap();
        let logits = candle_core::Var::new(&[[0.0f32, 1.0], [0.0, 0.0]], &dev).unwrap();
        let zeros = Tensor::zeros(2, DType::F32, &dev).unwrap();
        let cfg = PpoConfig {
            kl_coef: 0.5,
            ..PpoConfig::default()
        };
        // Without reference log-probs there is no term.
        let none = ppo_loss(&prep, &logits, &zeros, &zeros, &zeros, None, &cfg).unwrap();
        assert_eq!(none.kl_ref, 0.0);
        let reference = [-0.2f64, -1.5];
        prep.ref_logprobs = Some(Tensor::new(&[-0.2f32, -1.5], &dev).unwrap());
        let out = ppo_loss(&prep, &logits, &zeros, &zeros, &zeros, None, &cfg).unwrap();
        let lse = |a: f64, b: f64| (a.exp() + b.exp()).ln();
        let lp = [1.0 - lse(0.0, 1.0), 0.0 - lse(0.0, 0.0)];
        let k3 = |r: f64, l: f64| (r - l).exp() - (r - l) - 1.0;
        let want = (k3(reference[0], lp[0]) + k3(reference[1], lp[1])) / 2.0;
        assert!((out.kl_ref - want).abs() < 1e-6, "{} vs {want}", out.kl_ref);
        // Zero advantages: the policy term is the penalty alone.
        let term = out.policy_term.to_scalar::<f32>().unwrap() as f64;
        assert!((term - 0.5 * want).abs() < 1e-6, "{term}");
        // Its gradient raises a token the reference finds likelier (row 0:
        // lp -0.31 < ref -0.2) and lowers one it finds less likely (row 1).
        let g = out.policy_term.backward().unwrap();
        let g: Vec<Vec<f32>> = g.get(logits.as_tensor()).unwrap().to_vec2().unwrap();
        assert!(g[0][1] < 0.0 && g[1][0] > 0.0, "{g:?}");
        // A policy equal to the reference pays nothing.
        prep.ref_logprobs = Some(Tensor::new(&[lp[0] as f32, lp[1] as f32], &dev).unwrap());
        let same = ppo_loss(&prep, &logits, &zeros, &zeros, &zeros, None, &cfg).unwrap();
        assert!(same.kl_ref.abs() < 1e-6, "{}", same.kl_ref);
    }

    #[test]
    fn value_clipping_takes_the_larger_of_clipped_and_unclipped_error() {
        // Moved within the clip range: both errors are the same.
        assert!((clipped_value_loss(0.5, 0.4, 1.0, 0.2) - 0.5 * 0.25).abs() < 1e-12);
        // Moved 0.5 towards the return from 0.0: clipped to 0.2, error 0.8^2 > 0.5^2.
        assert!((clipped_value_loss(0.5, 0.0, 1.0, 0.2) - 0.5 * 0.64).abs() < 1e-12);
        // Overshot past the return: the unclipped error (0.5^2) is the larger.
        assert!((clipped_value_loss(1.5, 0.9, 1.0, 0.2) - 0.5 * 0.25).abs() < 1e-12);
        // Off: plain squared error.
        assert!((clipped_value_loss(0.5, 0.0, 1.0, 0.0) - 0.5 * 0.25).abs() < 1e-12);

        // The tensor loss agrees, token by token, and the clipped tokens
        // pass no gradient to the value.
        use super::super::batch::RolloutSequence;
        let dev = Device::Cpu;
        let batch = RolloutBatch {
            sequences: vec![RolloutSequence {
                tokens: vec![0, 1, 0, 1],
                agent_mask: vec![false, true, true, true],
                old_logprobs: vec![0.0, -0.7, -0.7, -0.7],
                reward: 1.0,
                passed: true,
            }],
        };
        let prep = prepare(&batch, &dev).unwrap();
        let logits = Tensor::zeros((3, 2), DType::F32, &dev).unwrap();
        let v = candle_core::Var::new(&[0.5f32, 0.5, 1.5], &dev).unwrap();
        let old = Tensor::new(&[0.4f32, 0.0, 0.9], &dev).unwrap();
        let ret = Tensor::new(&[1.0f32, 1.0, 1.0], &dev).unwrap();
        let adv = Tensor::zeros(3, DType::F32, &dev).unwrap();
        let cfg = PpoConfig {
            value_clip: 0.2,
            ..PpoConfig::default()
        };
        let out = ppo_loss(&prep, &logits, v.as_tensor(), &adv, &ret, Some(&old), &cfg).unwrap();
        let want = (clipped_value_loss(0.5, 0.4, 1.0, 0.2)
            + clipped_value_loss(0.5, 0.0, 1.0, 0.2)
            + clipped_value_loss(1.5, 0.9, 1.0, 0.2))
            / 3.0;
        assert!(
            (out.value_loss - want).abs() < 1e-6,
            "{} vs {want}",
            out.value_loss
        );
        let g = out.value_term.backward().unwrap();
        let g: Vec<f32> = g.get(v.as_tensor()).unwrap().to_vec1().unwrap();
        // Token 1 is clipped (its loss is the constant clipped error): no gradient.
        assert!((g[0] - (0.5 - 1.0) / 3.0).abs() < 1e-6, "{g:?}");
        assert_eq!(g[1], 0.0, "{g:?}");
        assert!((g[2] - (1.5 - 1.0) / 3.0).abs() < 1e-6, "{g:?}");
        // Without old values nothing is clipped.
        let plain = ppo_loss(&prep, &logits, v.as_tensor(), &adv, &ret, None, &cfg).unwrap();
        assert!((plain.value_loss - (0.25 + 0.25 + 0.25) / 6.0).abs() < 1e-6);
    }
}
