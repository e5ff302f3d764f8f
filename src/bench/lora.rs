//! `endless bench lora`: the supervised warm-start step training every
//! weight beside the same step training LoRA adapters only, on the same
//! model, weights and synthetic batch, alternating step by step in one run.
//! Its `135m` size has SmolLM2-135M's dimensions (random weights: a step's
//! cost does not depend on their values), the model `--init smollm2` trains.

use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use serde::Serialize;

use super::ppo::{ppo_model_config, synthetic_batch, BATCH, SEQ_LEN};
use crate::cli::PpoSize;
use crate::model::models::lora::LoraConfig;
use crate::model::models::tiny::{train_tokenizer, write_model_dir};
use crate::rl::{Policy, TrainConfig, Trainer};

/// Supervised learning rate of the timed steps (each side's usual one).
const FULL_LR: f64 = 2e-5;

/// One side of the comparison.
#[derive(Debug, Serialize)]
pub struct Side {
    /// Variables the optimizer updates.
    pub trainable_params: usize,
    /// Median wall time of a timed step.
    pub median_seconds_per_step: f64,
    /// Every timed step's wall time.
    pub seconds: Vec<f64>,
    /// Tokens per second at the median step.
    pub tokens_per_s: f64,
    /// The loss of every step, warm-up included.
    pub losses: Vec<f64>,
}

/// What one `bench lora` run measured.
#[derive(Debug, Serialize)]
pub struct LoraBench {
    /// The model size.
    pub size: String,
    /// Parameters of the model.
    pub params: usize,
    /// The adapters' rank (alpha 2 x rank, on every projection).
    pub rank: usize,
    /// Sequences x tokens per step.
    pub batch: (usize, usize),
    /// CPU threads candle used.
    pub threads: usize,
    /// Every weight trained.
    pub full: Side,
    /// Adapters only.
    pub lora: Side,
    /// `full median / lora median`: above 1, LoRA steps are faster.
    pub speedup: f64,
}

impl std::fmt::Display for LoraBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "supervised step, {} model ({} parameters), batch {} x {} tokens, {} threads",
            self.size, self.params, self.batch.0, self.batch.1, self.threads
        )?;
        for (name, s) in [("full", &self.full), ("lora", &self.lora)] {
            let times: Vec<String> = s.seconds.iter().map(|t| format!("{t:.2}")).collect();
            writeln!(
                f,
                "  {name:<4} {:>10} trained: median {:.3} s/step ({:.0} tokens/s); steps {}; loss {:.4} -> {:.4}",
                s.trainable_params,
                s.median_seconds_per_step,
                s.tokens_per_s,
                times.join(" "),
                s.losses.first().copied().unwrap_or(f64::NAN),
                s.losses.last().copied().unwrap_or(f64::NAN),
            )?;
        }
        write!(
            f,
            "  LoRA (rank {}) step: {:.2}x the full step's speed",
            self.rank, self.speedup
        )
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Time `steps` supervised steps of each side after one warm-up step each,
/// alternating full and LoRA steps so that both see the same machine load.
pub fn bench_lora(size: PpoSize, rank: usize, steps: usize) -> Result<LoraBench> {
    let cfg = ppo_model_config(size);
    let tmp = tempfile::tempdir()?;
    let base = tmp.path().join("base");
    let tok = train_tokenizer(["a b"].iter(), 260)?;
    write_model_dir(&base, &cfg, &tok, 0)?;
    let full = Policy::from_dir(&base, &Device::Cpu)?;
    let params = full.num_params();
    let lora =
        Policy::from_dir(&base, &Device::Cpu)?.with_lora(&LoraConfig::with_rank(rank), &base, 0)?;
    let train = TrainConfig::minimal();
    let mut sides = [
        (Trainer::new(full, train.clone()), FULL_LR, vec![], vec![]),
        (
            Trainer::new(lora, train),
            FULL_LR * crate::rl::recipe::LORA_LR_FACTOR,
            vec![],
            vec![],
        ),
    ];
    let batch = synthetic_batch(BATCH, SEQ_LEN);
    for i in 0..=steps {
        for (trainer, lr, times, losses) in sides.iter_mut() {
            let start = Instant::now();
            let m = trainer.sft_step(&batch, *lr)?;
            if i > 0 {
                times.push(start.elapsed().as_secs_f64());
            }
            losses.push(m.loss);
        }
    }
    let tokens = (BATCH * SEQ_LEN) as f64;
    let [full, lora] = sides.map(|(t, _, seconds, losses)| {
        let m = median(&seconds);
        Side {
            trainable_params: t.policy().num_params(),
            median_seconds_per_step: m,
            tokens_per_s: tokens / m,
            seconds,
            losses,
        }
    });
    Ok(LoraBench {
        size: size.name().to_string(),
        params,
        rank,
        batch: (BATCH, SEQ_LEN),
        threads: candle_core::utils::get_num_threads(),
        speedup: full.median_seconds_per_step / lora.median_seconds_per_step,
        full,
        lora,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_learn_and_only_adapters_train_on_the_lora_side() {
        let r = bench_lora(PpoSize::M1, 4, 1).unwrap();
        assert_eq!(r.full.trainable_params, r.params);
        assert!(
            r.lora.trainable_params * 10 < r.params,
            "{}",
            r.lora.trainable_params
        );
        for s in [&r.full, &r.lora] {
            assert_eq!((s.seconds.len(), s.losses.len()), (1, 2));
            assert!(s.losses.iter().all(|l| l.is_finite()));
        }
        assert!(r.speedup > 0.0);
        assert!(r.to_string().contains("LoRA (rank 4) step"));
    }
}
