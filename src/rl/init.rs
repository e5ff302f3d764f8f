//! Building the policy a run starts from: a tiny decoder trained from
//! scratch (with a tokenizer trained on the task corpus), a model directory,
//! or a GGUF file dequantised into trainable f32 weights.

use std::path::{Path, PathBuf};

use super::error::{Result, RlError};
use super::policy::Policy;
use crate::agent::policy::oracle_command;
use crate::agent::protocol::{CORRECTIVE_MESSAGE, SYSTEM_PROMPT};
use crate::model::models::lora::LoraConfig;
use crate::model::models::tiny::{qwen2_config, train_tokenizer, DecoderShape};
use crate::model::{ChatTokenizer, ModelConfig};
use crate::task::Task;
use candle_core::Device;

/// Where the policy comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum InitSpec {
    /// A small decoder trained from scratch, with a byte-level BPE tokenizer
    /// trained on the task corpus.
    Tiny,
    /// A Hugging Face-style model directory (safetensors).
    Dir(PathBuf),
    /// A GGUF file, dequantised into f32 trainable weights.
    Gguf(PathBuf),
    /// SmolLM2-135M-Instruct (GGUF, fetched on first use), dequantised.
    SmolLm2,
}

impl InitSpec {
    /// Parse `tiny`, `smollm2`, `local:X`, a `.gguf` path or a directory.
    pub fn parse(spec: &str) -> std::result::Result<Self, String> {
        let s = spec.trim();
        let s = s.strip_prefix("local:").unwrap_or(s);
        match s {
            "" => Err("the initial policy is empty".into()),
            "tiny" => Ok(Self::Tiny),
            "smollm2" => Ok(Self::SmolLm2),
            path if path.ends_with(".gguf") => Ok(Self::Gguf(PathBuf::from(path))),
            path => Ok(Self::Dir(PathBuf::from(path))),
        }
    }

    /// How it is written in `train.json`.
    pub fn describe(&self) -> String {
        match self {
            Self::Tiny => "tiny".into(),
            Self::SmolLm2 => "smollm2".into(),
            Self::Dir(p) | Self::Gguf(p) => p.display().to_string(),
        }
    }
}

/// Vocabulary size of `--init tiny` tokenizers.
pub const TINY_VOCAB: usize = 2048;

/// The `--init tiny` architecture for a vocabulary of `vocab` tokens: a
/// Qwen2-style decoder of about 2M parameters with a 2048-token context.
pub fn tiny_policy_config(vocab: usize) -> ModelConfig {
    let shape = DecoderShape {
        hidden: 192,
        intermediate: 512,
        layers: 4,
        heads: 6,
        kv_heads: 2,
        head_dim: 32,
    };
    qwen2_config(shape, vocab, 2048)
}

/// Text a tiny tokenizer is trained on: the agent protocol, and each task's
/// instruction and oracle command.
pub fn task_corpus(tasks: &[Task]) -> Vec<String> {
    let mut corpus = vec![
        SYSTEM_PROMPT.to_string(),
        CORRECTIVE_MESSAGE.to_string(),
        "Command executed successfully. Output: \n\n(exit_code=0)".to_string(),
        "Command failed. Output: No such file or directory\n\n(exit_code=1)".to_string(),
        "<think></think><command></command><action>done</action>".to_string(),
    ];
    for t in tasks {
        corpus.push(t.instruction.clone());
        if let Some(s) = t.solve_script() {
            corpus.push(format!("<command>{}</command>", oracle_command(s)));
        }
    }
    corpus
}

/// The ChatML tokenizer of a tiny model, trained on `tasks`.
pub fn tiny_tokenizer(tasks: &[Task]) -> Result<ChatTokenizer> {
    let tok = train_tokenizer(task_corpus(tasks).into_iter(), TINY_VOCAB)?;
    Ok(ChatTokenizer::new(tok, None, "", "<|im_end|>", &[])?)
}

/// Build the initial policy. `tasks` feed the tiny tokenizer; `model_cache`
/// is where `smollm2` is fetched to. With `lora`, the pretrained weights are
/// frozen and only adapters are trained (a LoRA checkpoint given as `spec`
/// goes on training its own adapters, which must have the same shape).
pub fn build_policy(
    spec: &InitSpec,
    tasks: &[Task],
    model_cache: &Path,
    device: &Device,
    seed: u64,
    lora: Option<&LoraConfig>,
) -> Result<Policy> {
    let (policy, base) = match spec {
        InitSpec::Tiny => {
            if lora.is_some() {
                return Err(RlError::Setting(
                    "LoRA needs a pretrained base, not `tiny`".into(),
                ));
            }
            let tok = tiny_tokenizer(tasks)?;
            let vocab = tok.tokenizer().get_vocab_size(true);
            let mut cfg = tiny_policy_config(vocab);
            cfg.eos_token_ids = tok.eos_ids().to_vec();
            return Ok(Policy::from_config(&cfg, device, seed)?.with_tokenizer(tok));
        }
        InitSpec::Dir(dir) => (Policy::from_dir(dir, device)?, dir.clone()),
        InitSpec::Gguf(path) => (Policy::from_gguf(path, device)?, path.clone()),
        InitSpec::SmolLm2 => {
            let path = crate::model::fetch_smollm2(model_cache)?;
            (Policy::from_gguf(&path, device)?, path)
        }
    };
    match (lora, policy.adapter()) {
        (None, _) => Ok(policy),
        (Some(want), Some(have)) if have.lora == *want => Ok(policy),
        (Some(want), Some(have)) => Err(RlError::Setting(format!(
            "{} holds LoRA adapters of rank {} alpha {} on {}; asked for rank {} alpha {} on {}",
            spec.describe(),
            have.lora.rank,
            have.lora.alpha,
            targets_text(&have.lora),
            want.rank,
            want.alpha,
            targets_text(want)
        ))),
        (Some(want), None) => policy.with_lora(want, &base, seed),
    }
}

/// `q,k,v` for a configuration's targets.
fn targets_text(lora: &LoraConfig) -> String {
    let names: Vec<&str> = lora.targets.iter().map(|t| t.short()).collect();
    names.join(",")
}
