//! GGUF models: quantized weights run by candle-transformers (llama, qwen2,
//! qwen3 architectures), tokenizer rebuilt from the GGUF metadata.

use crate::model::error::{LocalError, Result};
use crate::model::models::gguf_llama::LlamaGguf;
use crate::model::text::tokenizer::ChatTokenizer;
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_qwen2, quantized_qwen3};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, Tokenizer};

/// A quantized network loaded from GGUF.
pub enum GgufModel {
    /// `general.architecture = llama` (Llama, SmolLM, Mistral): this crate's
    /// batched runner ([`LlamaGguf`]).
    Llama(LlamaGguf),
    /// `general.architecture = qwen2`.
    Qwen2(quantized_qwen2::ModelWeights),
    /// `general.architecture = qwen3`.
    Qwen3(quantized_qwen3::ModelWeights),
}

fn meta<'a>(md: &'a HashMap<String, Value>, key: &str, path: &Path) -> Result<&'a Value> {
    md.get(key)
        .ok_or_else(|| LocalError::field(path, key, "missing from the GGUF metadata"))
}

fn meta_u32(md: &HashMap<String, Value>, key: &str) -> Option<u32> {
    md.get(key).and_then(|v| match v {
        Value::U32(x) => Some(*x),
        Value::I32(x) => u32::try_from(*x).ok(),
        Value::U64(x) => u32::try_from(*x).ok(),
        Value::I64(x) => u32::try_from(*x).ok(),
        _ => None,
    })
}

fn strings(v: &Value, key: &str, path: &Path) -> Result<Vec<String>> {
    let list = v
        .to_vec()
        .map_err(|_| LocalError::field(path, key, "expected an array"))?;
    list.iter()
        .map(|x| {
            x.to_string()
                .cloned()
                .map_err(|_| LocalError::field(path, key, "expected an array of strings"))
        })
        .collect()
}

/// Build the tokenizer and chat template from GGUF metadata (byte-level BPE only).
pub fn tokenizer_from_gguf(md: &HashMap<String, Value>, path: &Path) -> Result<ChatTokenizer> {
    let kind = meta(md, "tokenizer.ggml.model", path)?
        .to_string()
        .map_err(|_| LocalError::field(path, "tokenizer.ggml.model", "expected a string"))?;
    if kind != "gpt2" {
        return Err(LocalError::field(
            path,
            "tokenizer.ggml.model",
            format!("`{kind}` tokenizers are not supported (only byte-level BPE, `gpt2`)"),
        ));
    }
    let tokens = strings(
        meta(md, "tokenizer.ggml.tokens", path)?,
        "tokenizer.ggml.tokens",
        path,
    )?;
    let merges = strings(
        meta(md, "tokenizer.ggml.merges", path)?,
        "tokenizer.ggml.merges",
        path,
    )?;
    let merges: Vec<(String, String)> = merges
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| {
                    LocalError::field(path, "tokenizer.ggml.merges", format!("bad merge `{m}`"))
                })
        })
        .collect::<Result<_>>()?;
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| LocalError::field(path, "tokenizer.ggml.merges", e.to_string()))?;
    let mut tok = Tokenizer::new(bpe);
    let byte_level = ByteLevel::new(false, true, true);
    let pre = md
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
        .unwrap_or("default");
    if pre == "smollm" {
        tok.with_pre_tokenizer(Some(Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(byte_level),
        ])));
    } else {
        tok.with_pre_tokenizer(Some(byte_level));
    }
    tok.with_decoder(Some(ByteLevel::default()));
    let types: Vec<i64> = md
        .get("tokenizer.ggml.token_type")
        .and_then(|v| v.to_vec().ok())
        .map(|l| {
            l.iter()
                .map(|x| match x {
                    Value::I32(v) => *v as i64,
                    Value::U32(v) => *v as i64,
                    _ => 1,
                })
                .collect()
        })
        .unwrap_or_default();
    let specials: Vec<AddedToken> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == 3 || **t == 4)
        .filter_map(|(i, _)| tokens.get(i))
        .map(|s| AddedToken::from(s.clone(), true))
        .collect();
    tok.add_special_tokens(&specials);
    let name = |id: Option<u32>| {
        id.and_then(|i| tokens.get(i as usize).cloned())
            .unwrap_or_default()
    };
    let bos_id = meta_u32(md, "tokenizer.ggml.bos_token_id");
    let eos_id = meta_u32(md, "tokenizer.ggml.eos_token_id");
    let template = md
        .get("tokenizer.chat_template")
        .and_then(|v| v.to_string().ok())
        .cloned();
    let eos_ids: Vec<u32> = eos_id.into_iter().collect();
    ChatTokenizer::new(
        tok,
        template.as_deref(),
        &name(bos_id),
        &name(eos_id),
        &eos_ids,
    )
    .map_err(|e| match e {
        LocalError::Template(m) => LocalError::field(path, "tokenizer.chat_template", m),
        e => e,
    })
}

impl GgufModel {
    /// Read a GGUF file: its network and its tokenizer.
    pub fn load(path: &Path, device: &Device) -> Result<(Self, ChatTokenizer)> {
        let mut file = std::fs::File::open(path).map_err(|e| LocalError::io(path, e))?;
        let ct = Content::read(&mut file).map_err(|e| LocalError::BadFile {
            path: path.to_path_buf(),
            message: format!("not a readable GGUF file: {e}"),
        })?;
        let tokenizer = tokenizer_from_gguf(&ct.metadata, path)?;
        let arch = meta(&ct.metadata, "general.architecture", path)?
            .to_string()
            .map_err(|_| LocalError::field(path, "general.architecture", "expected a string"))?
            .clone();
        let wrap = |e: candle_core::Error| LocalError::BadFile {
            path: path.to_path_buf(),
            message: format!("cannot load the {arch} weights: {e}"),
        };
        let model = match arch.as_str() {
            "llama" => Self::Llama(LlamaGguf::from_gguf(ct, &mut file, device).map_err(wrap)?),
            "qwen2" => Self::Qwen2(
                quantized_qwen2::ModelWeights::from_gguf(ct, &mut file, device).map_err(wrap)?,
            ),
            "qwen3" => Self::Qwen3(
                quantized_qwen3::ModelWeights::from_gguf(ct, &mut file, device).map_err(wrap)?,
            ),
            other => {
                return Err(LocalError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    arch: other.to_string(),
                    supported: "llama, qwen2, qwen3",
                })
            }
        };
        Ok((model, tokenizer))
    }

    /// Logits of the last position of `ids` `(batch, time)`, placed at `pos`
    /// (qwen2/qwen3: batch 1 only).
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        Ok(match self {
            Self::Llama(m) => m.forward(ids)?,
            Self::Qwen2(m) => m.forward(ids, pos)?,
            Self::Qwen3(m) => m.forward(ids, pos)?,
        })
    }

    /// Whether sequences can be sampled as a batch, sharing one prompt run
    /// ([`GgufModel::repeat_batch`], [`GgufModel::retain`])
    /// (llama only: candle-transformers' qwen2/qwen3 keep their KV cache
    /// private, and take the last position of a batch as a strided tensor
    /// their output matmul refuses, so they sample a batch one sequence at a time).
    pub fn can_batch(&self) -> bool {
        matches!(self, Self::Llama(_))
    }

    /// Copy a batch-1 KV cache to `n` rows.
    pub fn repeat_batch(&mut self, n: usize) -> Result<()> {
        match self {
            Self::Llama(m) => Ok(m.repeat_batch(n)?),
            _ => Err(LocalError::Generation(
                "this GGUF architecture cannot share a prompt across a batch".into(),
            )),
        }
    }

    /// Keep only the batch rows `rows` of the KV cache.
    pub fn retain(&mut self, rows: &[usize]) -> Result<()> {
        match self {
            Self::Llama(m) => Ok(m.retain(rows)?),
            _ => Err(LocalError::Generation(
                "this GGUF architecture cannot drop rows from its KV cache".into(),
            )),
        }
    }

    /// Forget the KV cache.
    pub fn clear_kv_cache(&mut self) {
        match self {
            Self::Llama(m) => m.clear_kv_cache(),
            Self::Qwen2(m) => m.clear_kv_cache(),
            Self::Qwen3(m) => m.clear_kv_cache(),
        }
    }
}
