//! Tiny models built in-process: a byte-level BPE tokenizer trained on a
//! corpus and a randomly initialised decoder saved as a Hugging Face-style
//! model directory. Used by tests and by `--init tiny`.

use crate::model::config::{Arch, ModelConfig};
use crate::model::error::{LocalError, Result};
use crate::model::models::transformer::Transformer;
use crate::model::text::chat_template::CHATML_TEMPLATE;
use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use std::path::Path;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// Special tokens of tiny models (ChatML).
pub const TINY_SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Train a byte-level BPE tokenizer of about `vocab_size` entries on `corpus`.
/// The ChatML special tokens get ids 0, 1, 2.
pub fn train_tokenizer<S: AsRef<str> + Send>(
    corpus: impl Iterator<Item = S> + Send,
    vocab_size: usize,
) -> Result<Tokenizer> {
    let specials: Vec<AddedToken> = TINY_SPECIAL_TOKENS
        .iter()
        .map(|s| AddedToken::from(*s, true))
        .collect();
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(1)
        .show_progress(false)
        .special_tokens(specials.clone())
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut trainer: TrainerWrapper = trainer.into();
    let mut tok = Tokenizer::new(BPE::default());
    tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tok.with_decoder(Some(ByteLevel::default()));
    tok.train(&mut trainer, corpus)
        .map_err(|e| LocalError::Tokenizer(e.to_string()))?;
    tok.add_special_tokens(&specials);
    Ok(tok)
}

/// The shape of a small decoder: what differs between the test models, the
/// `--init tiny` policy and the PPO benchmark's models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderShape {
    /// Width of the residual stream.
    pub hidden: usize,
    /// Width of the MLP.
    pub intermediate: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
}

/// A Qwen2-style decoder (q/k/v bias, tied embeddings) of `shape` for
/// `vocab_size` tokens and a context of `context` tokens.
pub fn qwen2_config(shape: DecoderShape, vocab_size: usize, context: usize) -> ModelConfig {
    ModelConfig {
        hidden_size: shape.hidden,
        intermediate_size: shape.intermediate,
        num_hidden_layers: shape.layers,
        num_attention_heads: shape.heads,
        num_key_value_heads: shape.kv_heads,
        head_dim: shape.head_dim,
        max_position_embeddings: context,
        ..tiny_config(Arch::Qwen2, vocab_size)
    }
}

/// A small config of the given family for `vocab_size` tokens.
pub fn tiny_config(arch: Arch, vocab_size: usize) -> ModelConfig {
    ModelConfig {
        arch,
        vocab_size,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        max_position_embeddings: 512,
        tie_word_embeddings: arch != Arch::Llama,
        qkv_bias: arch == Arch::Qwen2,
        rope_scaling: None,
        bos_token_id: None,
        eos_token_ids: vec![2],
    }
}

/// Redraw every weight matrix (names ending in `proj.weight`, `embed_tokens.weight`,
/// `lm_head.weight`, `head.weight`) from N(0, std^2) with a seeded generator, in
/// name order, so that a model is reproducible (candle cannot seed its CPU rng).
/// Norm weights and biases keep their values.
pub fn reinit_seeded(varmap: &VarMap, seed: u64, std: f64) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data = varmap
        .data()
        .lock()
        .map_err(|_| LocalError::Generation("var map lock poisoned".into()))?;
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    for name in names {
        let is_matrix = [
            "proj.weight",
            "embed_tokens.weight",
            "lm_head.weight",
            "head.weight",
        ]
        .iter()
        .any(|s| name.ends_with(s));
        if !is_matrix {
            continue;
        }
        let var = &data[name];
        let n = var.elem_count();
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                // Box-Muller.
                let u1: f64 = rng.random::<f64>().max(1e-12);
                let u2: f64 = rng.random::<f64>();
                ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos() * std) as f32
            })
            .collect();
        let t = candle_core::Tensor::from_vec(vals, var.shape(), var.device())?
            .to_dtype(var.dtype())?;
        var.set(&t)?;
    }
    Ok(())
}

/// Write a model directory: `config.json`, `tokenizer.json`,
/// `tokenizer_config.json` (ChatML template) and `model.safetensors` with
/// random weights drawn from `seed`.
pub fn write_model_dir(
    dir: &Path,
    cfg: &ModelConfig,
    tokenizer: &Tokenizer,
    seed: u64,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| LocalError::io(dir, e))?;
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    Transformer::new(cfg, vb)?;
    reinit_seeded(&varmap, seed, 0.02)?;
    let weights = dir.join("model.safetensors");
    varmap.save(&weights)?;
    let write = |name: &str, text: String| -> Result<()> {
        let p = dir.join(name);
        crate::fsutil::write_atomic(&p, text.as_bytes()).map_err(|e| LocalError::io(&p, e))
    };
    write(
        "config.json",
        serde_json::to_string_pretty(&cfg.to_hf_json()).unwrap_or_default(),
    )?;
    let tok_json = tokenizer
        .to_string(true)
        .map_err(|e| LocalError::Tokenizer(e.to_string()))?;
    write("tokenizer.json", tok_json)?;
    let tc = serde_json::json!({
        "chat_template": CHATML_TEMPLATE,
        "bos_token": null,
        "eos_token": "<|im_end|>",
    });
    write("tokenizer_config.json", tc.to_string())?;
    Ok(())
}
