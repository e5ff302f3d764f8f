//! Token sampling: temperature, nucleus (top-p), and the log-probability of
//! each sampled token, recorded at sampling time for PPO.

use crate::model::kernels::exp_sum::sum_exp_below_max;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How tokens are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingConfig {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f32,
    /// Nucleus mass kept, in (0, 1]; 1 keeps the whole distribution.
    pub top_p: f32,
    /// Maximum number of generated tokens.
    pub max_tokens: usize,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 512,
        }
    }
}

/// Log-softmax of `logits / temperature` (temperature 0 is treated as 1).
pub fn log_softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
    let t = if temperature > 0.0 {
        temperature as f64
    } else {
        1.0
    };
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64 / t));
    let lse = logits
        .iter()
        .map(|&x| (x as f64 / t - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&x| x as f64 / t - lse).collect()
}

/// A seeded token sampler.
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplingConfig,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler with its own seeded generator.
    pub fn new(cfg: SamplingConfig, seed: u64) -> Self {
        Self {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SamplingConfig {
        &self.cfg
    }

    /// Change the token limit (the generator's state is kept).
    pub fn set_max_tokens(&mut self, max_tokens: usize) {
        self.cfg.max_tokens = max_tokens;
    }

    /// Draw a token from `logits`; returns the token and its log-probability
    /// under `softmax(logits / temperature)` (before top-p truncation), which
    /// is the distribution PPO's ratio uses.
    ///
    /// One pass finds the maximum and one the normaliser; greedy decoding stops
    /// there, and nucleus sorting only happens when `top_p < 1` (no per-token
    /// allocation otherwise: this runs once per token over the whole vocabulary).
    pub fn sample(&mut self, logits: &[f32]) -> (u32, f32) {
        if logits.is_empty() {
            return (0, 0.0);
        }
        let greedy = self.cfg.temperature <= 0.0;
        let inv_t = if greedy {
            1.0
        } else {
            1.0 / self.cfg.temperature as f64
        };
        // First maximum, as `Iterator::max_by` would not guarantee.
        let mut best = 0;
        let mut best_v = f32::NEG_INFINITY;
        for (i, &v) in logits.iter().enumerate() {
            if v > best_v {
                best = i;
                best_v = v;
            }
        }
        let (scale, top) = (inv_t as f32, best_v * inv_t as f32);
        let lse = if top.is_finite() {
            sum_exp_below_max(logits, scale, top).ln() + top as f64
        } else {
            // Infinite or NaN logits: the plain sum says what they give.
            let max = best_v as f64 * inv_t;
            logits
                .iter()
                .map(|&x| (x as f64 * inv_t - max).exp())
                .sum::<f64>()
                .ln()
                + max
        };
        let lp = |i: usize| logits[i] as f64 * inv_t - lse;
        if greedy {
            return (best as u32, lp(best) as f32);
        }
        let top_p = self.cfg.top_p as f64;
        if top_p < 1.0 {
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
            let mut mass = 0.0;
            let mut keep = 0;
            for &i in &order {
                mass += lp(i).exp();
                keep += 1;
                if mass >= top_p {
                    break;
                }
            }
            order.truncate(keep.max(1));
            let total: f64 = order.iter().map(|&i| lp(i).exp()).sum();
            let mut u = self.rng.random::<f64>() * total;
            for &i in &order {
                u -= lp(i).exp();
                if u <= 0.0 {
                    return (i as u32, lp(i) as f32);
                }
            }
            let last = *order.last().unwrap_or(&0);
            return (last as u32, lp(last) as f32);
        }
        // The whole distribution (mass 1 up to rounding): no sort, no copy.
        let mut u = self.rng.random::<f64>();
        for i in 0..logits.len() {
            u -= lp(i).exp();
            if u <= 0.0 {
                return (i as u32, lp(i) as f32);
            }
        }
        let last = logits.len() - 1;
        (last as u32, lp(last) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_top_p_and_logprobs() {
        let logits = [0.0f32, 2.0, 1.0, -1.0];
        let lp = log_softmax(&logits, 1.0);
        let s: f64 = lp.iter().map(|x| x.exp()).sum();
        assert!((s - 1.0).abs() < 1e-9);
        let mut g = Sampler::new(
            SamplingConfig {
                temperature: 0.0,
                ..Default::default()
            },
            0,
        );
        let (token, logprob) = g.sample(&logits);
        assert_eq!(token, 1);
        assert!(
            (logprob as f64 - lp[1]).abs() < 1e-6,
            "{logprob} against {}",
            lp[1]
        );
        // top_p small enough keeps only the argmax.
        let mut p = Sampler::new(
            SamplingConfig {
                temperature: 1.0,
                top_p: 0.1,
                max_tokens: 1,
            },
            7,
        );
        for _ in 0..20 {
            assert_eq!(p.sample(&logits).0, 1);
        }
        // Full sampling matches the distribution roughly and logprobs are exact.
        let mut f = Sampler::new(SamplingConfig::default(), 3);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let (t, l) = f.sample(&logits);
            assert!((l as f64 - lp[t as usize]).abs() < 1e-6);
            counts[t as usize] += 1;
        }
        let freq1 = counts[1] as f64 / 4000.0;
        assert!((freq1 - lp[1].exp()).abs() < 0.03, "{counts:?}");
    }
}
