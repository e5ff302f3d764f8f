//! `endless bench ppo`: PPO update throughput of the candle trainer on a
//! synthetic batch (8 sequences x 256 tokens), with an optional dump of the
//! exact model, batch and hyper-parameters so that `scripts/bench_torch_ppo.py`
//! can run the same update in PyTorch (`scripts/bench_ppo.sh` compares both).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result};
use candle_core::Device;
use serde::Serialize;

use crate::cli::PpoSize;
use crate::model::kernels::level::CpuLevel;
use crate::model::kernels::ran::{KernelReport, Snapshot};
use crate::model::models::tiny::{qwen2_config, DecoderShape};
use crate::model::ModelConfig;
use crate::rl::{Policy, RolloutBatch, RolloutSequence, TrainConfig, Trainer};

/// Sequences per synthetic batch.
pub const BATCH: usize = 8;
/// Tokens per synthetic sequence.
pub const SEQ_LEN: usize = 256;

/// The benchmark model of each size (Qwen2-style: q/k/v bias, tied embeddings, GQA).
pub fn ppo_model_config(size: PpoSize) -> ModelConfig {
    match size {
        // ~1M parameters, as `benches/rl.rs`.
        PpoSize::M1 => qwen2_config(
            DecoderShape {
                hidden: 128,
                intermediate: 384,
                layers: 4,
                heads: 4,
                kv_heads: 2,
                head_dim: 32,
            },
            512,
            512,
        ),
        // ~10M parameters.
        PpoSize::M10 => qwen2_config(
            DecoderShape {
                hidden: 256,
                intermediate: 768,
                layers: 10,
                heads: 8,
                kv_heads: 4,
                head_dim: 32,
            },
            8192,
            512,
        ),
        // SmolLM2-135M-Instruct's dimensions.
        PpoSize::M135 => qwen2_config(
            DecoderShape {
                hidden: 576,
                intermediate: 1536,
                layers: 30,
                heads: 9,
                kv_heads: 3,
                head_dim: 64,
            },
            49152,
            512,
        ),
    }
}

/// A deterministic batch of `n` sequences of `len` tokens: the first quarter
/// is prompt, then agent turns of 32 tokens alternate with 32-token observations.
pub fn synthetic_batch(n: usize, len: usize) -> RolloutBatch {
    let sequences = (0..n)
        .map(|i| {
            let tokens: Vec<u32> = (0..len)
                .map(|j| ((i * 131 + j * 17) % 509) as u32 + 3)
                .collect();
            RolloutSequence {
                agent_mask: (0..len)
                    .map(|j| j >= len / 4 && (j / 32) % 2 == 0)
                    .collect(),
                old_logprobs: vec![-6.2; len],
                tokens,
                reward: (i % 2) as f32,
                passed: i % 2 == 1,
            }
        })
        .collect();
    RolloutBatch { sequences }
}

/// What one `bench ppo` run measured.
#[derive(Debug, Serialize)]
pub struct PpoBench {
    /// The framework measured (`candle`).
    pub backend: &'static str,
    /// The model size measured.
    pub size: String,
    /// The model's parameters.
    pub params: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Tokens through the forward pass per step (all positions of all sequences).
    pub tokens_per_step: usize,
    /// Agent tokens (the ones through the LM head and the loss) per step.
    pub agent_tokens: usize,
    /// CPU threads candle used.
    pub threads: usize,
    /// Untimed steps first.
    pub warmup_steps: usize,
    /// Steps timed.
    pub timed_steps: usize,
    /// Mean wall time of a timed step.
    pub seconds_per_step: f64,
    /// Fastest timed step.
    pub min_seconds_per_step: f64,
    /// `tokens_per_step / seconds_per_step`.
    pub tokens_per_s: f64,
    /// `tokens_per_step / min_seconds_per_step` (less sensitive to other load).
    pub tokens_per_s_best: f64,
    /// Total loss (`policy + value_coef * value`) of every step, warmup included;
    /// the first is computed from the initial (dumped) weights.
    pub losses: Vec<f64>,
    /// The first step's policy loss.
    pub policy_loss_first: f64,
    /// The first step's value loss.
    pub value_loss_first: f64,
    /// The first step's gradient norm (before clipping).
    pub grad_norm_first: f64,
    /// The kernel level and the hand kernels that ran over all steps.
    pub kernels: KernelReport,
}

impl std::fmt::Display for PpoBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "PPO update, candle CPU, {} model ({} parameters), batch {} x {} tokens ({} agent tokens), {} threads",
            self.size, self.params, self.batch, self.seq_len, self.agent_tokens, self.threads
        )?;
        writeln!(
            f,
            "  {:.3} s/step (min {:.3}) over {} steps after {} warmup: {:.0} tokens/s (best step {:.0})",
            self.seconds_per_step,
            self.min_seconds_per_step,
            self.timed_steps,
            self.warmup_steps,
            self.tokens_per_s,
            self.tokens_per_s_best
        )?;
        writeln!(
            f,
            "  first-step loss {:.6} (policy {:.6}, value {:.6}), grad norm {:.6}",
            self.losses.first().copied().unwrap_or(f64::NAN),
            self.policy_loss_first,
            self.value_loss_first,
            self.grad_norm_first
        )?;
        write!(f, "  {}", self.kernels)
    }
}

fn report_min(times: &[f64]) -> f64 {
    times.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Write the initial weights, config, batch and training hyper-parameters to `dir`.
fn dump(dir: &Path, policy: &Policy, batch: &RolloutBatch, train: &TrainConfig) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, v: &serde_json::Value| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_string_pretty(v)?)
            .with_context(|| format!("writing {}", p.display()))
    };
    write("config.json", &policy.config().to_hf_json())?;
    write("batch.json", &serde_json::to_value(batch)?)?;
    write("train.json", &serde_json::to_value(train)?)?;
    policy.save_weights(&dir.join("model.safetensors"))?;
    Ok(())
}

/// Run `warmup + steps` PPO updates of a fresh model of `size`; with `dump_dir`,
/// write the initial state there first and the result (`candle.json`) after.
pub fn bench_ppo(
    size: PpoSize,
    warmup: usize,
    steps: usize,
    dump_dir: Option<&Path>,
) -> Result<PpoBench> {
    // A forced kernel level the CPU lacks fails here, before any work.
    CpuLevel::selected()?;
    let cfg = ppo_model_config(size);
    let policy = Policy::from_config(&cfg, &Device::Cpu, 0)?;
    let params = policy.num_params();
    let batch = synthetic_batch(BATCH, SEQ_LEN);
    let train = TrainConfig::minimal();
    if let Some(dir) = dump_dir {
        dump(dir, &policy, &batch, &train)?;
    }
    let value_coef = train.ppo.value_coef;
    let mut trainer = Trainer::new(policy, train);
    let mut losses = Vec::with_capacity(warmup + steps);
    let mut first = None;
    let mut times = Vec::with_capacity(steps);
    let before = Snapshot::now();
    for i in 0..warmup + steps {
        let start = Instant::now();
        let m = trainer.ppo_step(&batch)?;
        let secs = start.elapsed().as_secs_f64();
        if i >= warmup {
            times.push(secs);
        }
        losses.push(m.policy_loss + value_coef * m.value_loss);
        first.get_or_insert(m);
    }
    let first = first.unwrap_or_default();
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let tokens = batch.sequences.iter().map(|s| s.tokens.len()).sum();
    let report = PpoBench {
        backend: "candle",
        size: size.name().to_string(),
        params,
        batch: BATCH,
        seq_len: SEQ_LEN,
        tokens_per_step: tokens,
        agent_tokens: first.agent_tokens,
        threads: candle_core::utils::get_num_threads(),
        warmup_steps: warmup,
        timed_steps: times.len(),
        seconds_per_step: mean,
        min_seconds_per_step: report_min(&times),
        tokens_per_s: tokens as f64 / mean.max(1e-12),
        tokens_per_s_best: tokens as f64 / report_min(&times).max(1e-12),
        losses,
        policy_loss_first: first.policy_loss,
        value_loss_first: first.value_loss,
        grad_norm_first: first.grad_norm,
        kernels: KernelReport::since(&before)?,
    };
    if let Some(dir) = dump_dir {
        let p = dir.join("candle.json");
        std::fs::write(&p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_about_one_ten_and_135_million_parameters() {
        let count = |s| {
            crate::model::models::transformer::weight_shapes(&ppo_model_config(s))
                .iter()
                .map(|(_, sh)| sh.iter().product::<usize>())
                .sum::<usize>()
        };
        let (small, large) = (count(PpoSize::M1), count(PpoSize::M10));
        assert!((800_000..1_500_000).contains(&small), "{small}");
        assert!((8_000_000..12_000_000).contains(&large), "{large}");
        // SmolLM2-135M has 134,515,008 (no biases): ours adds q/k/v biases.
        let smol = count(PpoSize::M135);
        assert!((134_515_008..134_600_000).contains(&smol), "{smol}");
        let b = synthetic_batch(BATCH, SEQ_LEN);
        assert_eq!(b.sequences.len(), 8);
        assert!(b.validate().is_ok());
    }

    #[test]
    fn dump_and_report_on_a_short_run() {
        let dir = tempfile::tempdir().unwrap();
        let r = bench_ppo(PpoSize::M1, 1, 1, Some(dir.path())).unwrap();
        assert_eq!(r.losses.len(), 2);
        assert!(r.losses.iter().all(|l| l.is_finite()));
        assert!(r.tokens_per_s > 0.0);
        // The fused training kernels ran, and are named with their path.
        let names: Vec<&str> = r.kernels.ran.iter().map(|k| k.name.as_str()).collect();
        for k in [
            "causal attention portable",
            "rms norm portable",
            "swiglu portable",
        ] {
            assert!(names.contains(&k), "{k} not in {names:?}");
        }
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["kernels"]["level"], r.kernels.level.name());
        assert!(r.to_string().contains("kernels: "));
        for f in [
            "config.json",
            "batch.json",
            "train.json",
            "model.safetensors",
            "candle.json",
        ] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        // The dumped weights load back into a policy.
        let cfg = crate::model::ModelConfig::from_file(&dir.path().join("config.json")).unwrap();
        assert_eq!(cfg, ppo_model_config(PpoSize::M1));
    }
}
