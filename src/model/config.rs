//! `config.json` of a Hugging Face-style model directory, reduced to what the
//! Qwen2 / Qwen2.5 / Qwen3 / Llama decoder needs.

use crate::model::error::{LocalError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The decoder families implemented by [`crate::model::models::transformer::Transformer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Qwen2 and Qwen2.5: biases on q/k/v projections.
    Qwen2,
    /// Qwen3: no q/k/v bias, per-head RMS norm on queries and keys.
    Qwen3,
    /// Llama 2/3 (and SmolLM): no biases unless `attention_bias`.
    Llama,
}

/// Llama 3 rope frequency scaling (`rope_scaling` with `rope_type = "llama3"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Llama3RopeScaling {
    /// How much longer than the original context the model was extended to.
    pub factor: f32,
    /// Wavelengths beyond `original / low_freq_factor` are divided by `factor`.
    pub low_freq_factor: f32,
    /// Wavelengths below `original / high_freq_factor` are left alone.
    pub high_freq_factor: f32,
    /// The context length the model was pre-trained with.
    pub original_max_position_embeddings: usize,
}

/// Model hyper-parameters, normalised across the supported families.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// The decoder family.
    pub arch: Arch,
    /// Rows of the embedding and of the output head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's gate and up projections.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads per layer.
    pub num_attention_heads: usize,
    /// Key/value heads per layer (grouped-query attention when fewer).
    pub num_key_value_heads: usize,
    /// Width of one attention head.
    pub head_dim: usize,
    /// Epsilon of the RMS norms.
    pub rms_norm_eps: f64,
    /// Base of the rotary position frequencies.
    pub rope_theta: f64,
    /// Longest context the rotary tables are built for.
    pub max_position_embeddings: usize,
    /// Whether the output head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Whether q/k/v projections carry a bias.
    pub qkv_bias: bool,
    /// Llama 3 rope scaling, when the model uses it.
    pub rope_scaling: Option<Llama3RopeScaling>,
    /// The beginning-of-sequence token, if the model has one.
    pub bos_token_id: Option<u32>,
    /// Tokens that end a generation.
    pub eos_token_ids: Vec<u32>,
}

/// The raw `config.json`, tolerant of the fields each family adds.
#[derive(Debug, Deserialize)]
struct RawConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    hidden_act: Option<String>,
    rope_scaling: Option<serde_json::Value>,
    bos_token_id: Option<serde_json::Value>,
    eos_token_id: Option<serde_json::Value>,
}

const SUPPORTED: &str = "Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM";

/// Token ids given as one number or a list.
pub(crate) fn token_ids(v: &serde_json::Value) -> Vec<u32> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|n| n as u32))
            .collect(),
        _ => Vec::new(),
    }
}

impl ModelConfig {
    /// Read and check `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| LocalError::io(path, e))?;
        Self::from_json(&text, path)
    }

    /// Parse `config.json` text; `path` names the file in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de)
            .map_err(|e| LocalError::field(path, e.path().to_string(), e.inner().to_string()))?;
        let name = raw
            .architectures
            .as_ref()
            .and_then(|a| a.first().cloned())
            .or(raw.model_type.clone())
            .unwrap_or_default();
        let arch = match name.as_str() {
            "Qwen2ForCausalLM" | "qwen2" => Arch::Qwen2,
            "Qwen3ForCausalLM" | "qwen3" => Arch::Qwen3,
            "LlamaForCausalLM" | "llama" | "MistralForCausalLM" | "mistral" => Arch::Llama,
            other => {
                return Err(LocalError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    arch: other.to_string(),
                    supported: SUPPORTED,
                })
            }
        };
        if let Some(act) = &raw.hidden_act {
            if act != "silu" {
                return Err(LocalError::field(
                    path,
                    "hidden_act",
                    format!("`{act}` is not supported (expected `silu`)"),
                ));
            }
        }
        let check = |field: &str, v: usize| -> Result<usize> {
            if v == 0 {
                Err(LocalError::field(path, field, "must be positive"))
            } else {
                Ok(v)
            }
        };
        let heads = check("num_attention_heads", raw.num_attention_heads)?;
        let kv_heads = check(
            "num_key_value_heads",
            raw.num_key_value_heads.unwrap_or(heads),
        )?;
        if heads % kv_heads != 0 {
            return Err(LocalError::field(
                path,
                "num_key_value_heads",
                format!("{kv_heads} does not divide num_attention_heads = {heads}"),
            ));
        }
        let hidden = check("hidden_size", raw.hidden_size)?;
        let head_dim = match raw.head_dim {
            Some(d) => check("head_dim", d)?,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(LocalError::field(
                    path,
                    "hidden_size",
                    "not a multiple of num_attention_heads and no head_dim given",
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err(LocalError::field(path, "head_dim", "must be even for rope"));
        }
        let rope_scaling = match &raw.rope_scaling {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => {
                let kind = v
                    .get("rope_type")
                    .or_else(|| v.get("type"))
                    .and_then(|t| t.as_str())
                    .unwrap_or("default");
                match kind {
                    "default" => None,
                    "llama3" => Some(
                        serde_json::from_value(v.clone())
                            .map_err(|e| LocalError::field(path, "rope_scaling", e.to_string()))?,
                    ),
                    other => {
                        return Err(LocalError::field(
                            path,
                            "rope_scaling.rope_type",
                            format!("`{other}` is not supported (expected default or llama3)"),
                        ))
                    }
                }
            }
        };
        Ok(Self {
            arch,
            vocab_size: check("vocab_size", raw.vocab_size)?,
            hidden_size: hidden,
            intermediate_size: check("intermediate_size", raw.intermediate_size)?,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: raw.rope_theta.unwrap_or(10_000.0),
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(4096),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias: match arch {
                Arch::Qwen2 => true,
                _ => raw.attention_bias.unwrap_or(false),
            },
            rope_scaling,
            bos_token_id: raw
                .bos_token_id
                .as_ref()
                .and_then(|v| token_ids(v).first().copied()),
            eos_token_ids: raw.eos_token_id.as_ref().map(token_ids).unwrap_or_default(),
        })
    }

    /// The `config.json` text that [`ModelConfig::from_json`] reads back as `self`.
    pub fn to_hf_json(&self) -> serde_json::Value {
        let arch = match self.arch {
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Llama => "LlamaForCausalLM",
        };
        let model_type = match self.arch {
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Llama => "llama",
        };
        let mut v = serde_json::json!({
            "architectures": [arch],
            "model_type": model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.qkv_bias,
            "hidden_act": "silu",
            "eos_token_id": self.eos_token_ids,
        });
        if let Some(b) = self.bos_token_id {
            v["bos_token_id"] = b.into();
        }
        if let Some(s) = &self.rope_scaling {
            v["rope_scaling"] = serde_json::json!({
                "rope_type": "llama3",
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings,
            });
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_qwen2_and_rejects_unknown_arch() {
        let p = Path::new("m/config.json");
        let q = r#"{"architectures":["Qwen2ForCausalLM"],"vocab_size":300,"hidden_size":32,
            "intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":4,
            "num_key_value_heads":2,"tie_word_embeddings":true,"eos_token_id":[1,2]}"#;
        let c = ModelConfig::from_json(q, p).unwrap();
        assert_eq!(c.arch, Arch::Qwen2);
        assert_eq!(c.head_dim, 8);
        assert!(c.qkv_bias);
        assert_eq!(c.eos_token_ids, vec![1, 2]);
        let back = ModelConfig::from_json(&c.to_hf_json().to_string(), p).unwrap();
        assert_eq!(back, c);
        let bad = q.replace("Qwen2ForCausalLM", "GPT2LMHeadModel");
        let e = ModelConfig::from_json(&bad, p).unwrap_err().to_string();
        assert!(
            e.contains("m/config.json") && e.contains("GPT2LMHeadModel"),
            "{e}"
        );
        let missing = q.replace(r#""hidden_size":32,"#, "");
        let e = ModelConfig::from_json(&missing, p).unwrap_err().to_string();
        assert!(e.contains("hidden_size"), "{e}");
    }
}
