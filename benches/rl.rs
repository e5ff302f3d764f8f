//! Learning-side hot paths: one PPO step on a ~1M-parameter policy (batch 8 x
//! 256 tokens), sampling from it with the KV cache, a rollout-sized batch of
//! the replication's tiny policy decoded three ways (as before: cache grown
//! at every step, candle's ops; cache grown 256 positions at a time; and the
//! decoding-step kernels too: today's default), and SmolLM2-135M (Q4_1 GGUF)
//! decoding when it has been fetched (`ENDLESS_MODEL_CACHE` or
//! `target/model-cache`). Run with `cargo bench --bench rl`; candle picks SIMD
//! kernels at compile time, so compare with and without
//! `RUSTFLAGS="-C target-cpu=native"`.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use candle_core::Device;
use criterion::{criterion_group, criterion_main, Criterion};
use endless::bench::ppo::{ppo_model_config, synthetic_batch as batch};
use endless::cli::PpoSize;
use endless::model::models::tiny::train_tokenizer;
use endless::model::{BatchOptions, KV_RESERVE};
use endless::model::{
    ChatTokenizer, LocalModel, ModelConfig, Sampler, SamplingConfig, TemplateMessage,
};
use endless::rl::init::{tiny_policy_config, TINY_VOCAB};
use endless::rl::{Policy, TrainConfig, Trainer};
use std::path::PathBuf;

fn one_million() -> ModelConfig {
    ppo_model_config(PpoSize::M1)
}

fn ppo_step(c: &mut Criterion) {
    let policy = Policy::from_config(&one_million(), &Device::Cpu, 0).unwrap();
    eprintln!("policy parameters: {}", policy.num_params());
    let mut trainer = Trainer::new(policy, TrainConfig::minimal());
    let b = batch(8, 256);
    let mut g = c.benchmark_group("rl");
    g.sample_size(10);
    g.bench_function("ppo_step_1m_8x256", |bench| {
        bench.iter(|| trainer.ppo_step(&b).unwrap())
    });
    let policy = Policy::from_config(&one_million(), &Device::Cpu, 0).unwrap();
    let tok = train_tokenizer(["ls -la /tmp", "cat file"].iter(), 300).unwrap();
    let tok = ChatTokenizer::new(tok, None, "", "", &[]).unwrap();
    let mut lm = LocalModel::from_parts(policy.model().clone(), tok, "bench");
    let prompt: Vec<u32> = (0..64).map(|i| i * 7 % 500 + 3).collect();
    g.bench_function("sample_1m_64_tokens", |bench| {
        bench.iter(|| {
            let mut s = Sampler::new(
                SamplingConfig {
                    temperature: 1.0,
                    top_p: 1.0,
                    max_tokens: 64,
                },
                1,
            );
            lm.generate_ids(&prompt, &mut s).unwrap()
        })
    });
    let gguf = std::env::var_os("ENDLESS_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/model-cache"))
        .join("smollm2")
        .join(endless::model::fetch::SMOLLM2_FILE);
    if gguf.is_file() {
        let mut m = LocalModel::load(&gguf, &Device::Cpu).unwrap();
        let msgs = [TemplateMessage {
            role: "user".into(),
            content: "Write a shell command that lists files.".into(),
        }];
        let params = SamplingConfig {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 32,
        };
        g.bench_function("smollm2_q4_1_32_tokens", |bench| {
            bench.iter(|| m.generate(&msgs, &params, 3).unwrap())
        });
    } else {
        eprintln!("smollm2 not fetched ({}): skipped", gguf.display());
    }
    g.finish();
}

/// 16 samples of one task, 128 tokens each, after a 1,024-token prompt (a
/// late turn of a rollout) on the replication's 2M-parameter policy: the
/// key/value cache grown by exactly the new position at every step (a copy
/// of the whole cache) and every product by gemm, as before; the cache
/// grown by [`KV_RESERVE`] positions at a time (written in place); and the
/// decoding step's products and attention by the project's kernels as well
/// (the default).
fn decode(c: &mut Criterion) {
    let policy = Policy::from_config(&tiny_policy_config(TINY_VOCAB), &Device::Cpu, 0).unwrap();
    let tok = train_tokenizer(["ls -la /tmp", "cat file"].iter(), 300).unwrap();
    let tok = ChatTokenizer::new(tok, None, "", "", &[]).unwrap();
    let mut lm = LocalModel::from_parts(policy.model().clone(), tok, "bench");
    let prompt: Vec<u32> = (0..1024).map(|i| i * 7 % 2000 + 3).collect();
    let mut g = c.benchmark_group("decode");
    g.sample_size(10);
    for (name, reserve, kernels) in [
        ("cache_grown_every_step_candle_ops", 1, false),
        ("cache_preallocated_candle_ops", KV_RESERVE, false),
        ("cache_preallocated_decode_kernels", KV_RESERVE, true),
    ] {
        lm.set_kv_reserve(reserve);
        lm.set_decode_kernels(kernels);
        g.bench_function(format!("tiny_16x128_after_1024_{name}"), |bench| {
            bench.iter(|| {
                let config = SamplingConfig {
                    temperature: 1.0,
                    top_p: 1.0,
                    max_tokens: 128,
                };
                let mut samplers: Vec<Sampler> = (0..16).map(|i| Sampler::new(config, i)).collect();
                let opts = BatchOptions { ignore_eos: true };
                lm.generate_batch_with(&prompt, &mut samplers, opts)
                    .unwrap()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, ppo_step, decode);
criterion_main!(benches);
