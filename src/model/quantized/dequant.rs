//! GGUF to trainable weights: every tensor of a GGUF file dequantised to f32
//! under its Hugging Face name, the [`ModelConfig`] rebuilt from the GGUF
//! metadata, and the tokenizer, so that a quantized model can be loaded into
//! the differentiable [`crate::model::Transformer`] (and trained, see
//! `rl::Policy::from_gguf`).
//!
//! llama.cpp's converter permutes the rows of `q_proj` / `k_proj` of the
//! `llama` architecture so that its interleaved rotary embedding works; our
//! decoder uses the Hugging Face (non-interleaved, "neox") rotary embedding, so
//! those rows are permuted back ([`unpermute_rope_rows`]). `qwen2` and `qwen3`
//! files are written unpermuted (llama.cpp runs them with neox rope).

use crate::model::config::{Arch, ModelConfig};
use crate::model::error::{LocalError, Result};
use crate::model::models::transformer::weight_shapes;
use crate::model::quantized::gguf::tokenizer_from_gguf;
use crate::model::text::tokenizer::ChatTokenizer;
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// A GGUF model as dense f32 tensors.
pub struct DenseGguf {
    /// Hyper-parameters read from the GGUF metadata.
    pub config: ModelConfig,
    /// Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...).
    pub tensors: HashMap<String, Tensor>,
    /// The tokenizer and chat template rebuilt from the GGUF metadata.
    pub tokenizer: ChatTokenizer,
}

impl std::fmt::Debug for DenseGguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseGguf")
            .field("config", &self.config)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Undo llama.cpp's rotary permutation of a q/k projection weight `(n_head *
/// head_dim, ...)` or bias `(n_head * head_dim,)`. The converter wrote
/// `w.reshape(n_head, 2, head_dim / 2, ...).swapaxes(1, 2).reshape(w.shape)`;
/// this reshapes to `(n_head, head_dim / 2, 2, ...)` and swaps back.
pub fn unpermute_rope_rows(w: &Tensor, n_head: usize) -> candle_core::Result<Tensor> {
    swap_row_halves(w, n_head, false)
}

/// llama.cpp's permutation (Hugging Face to GGUF), the inverse of
/// [`unpermute_rope_rows`]; for tests.
pub fn permute_rope_rows(w: &Tensor, n_head: usize) -> candle_core::Result<Tensor> {
    swap_row_halves(w, n_head, true)
}

fn swap_row_halves(w: &Tensor, n_head: usize, to_gguf: bool) -> candle_core::Result<Tensor> {
    let dims = w.dims().to_vec();
    let rows = dims.first().copied().unwrap_or(0);
    if n_head == 0 || rows % (2 * n_head) != 0 {
        candle_core::bail!("{rows} rows do not split into {n_head} heads of even size");
    }
    let half = rows / n_head / 2;
    let rest: usize = dims[1..].iter().product();
    let (a, b) = if to_gguf { (2, half) } else { (half, 2) };
    w.reshape((n_head, a, b, rest))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)
}

fn md_u64(md: &HashMap<String, Value>, key: &str) -> Option<u64> {
    md.get(key).and_then(|v| match v {
        Value::U8(x) => Some(*x as u64),
        Value::U16(x) => Some(*x as u64),
        Value::U32(x) => Some(*x as u64),
        Value::U64(x) => Some(*x),
        Value::I8(x) => u64::try_from(*x).ok(),
        Value::I16(x) => u64::try_from(*x).ok(),
        Value::I32(x) => u64::try_from(*x).ok(),
        Value::I64(x) => u64::try_from(*x).ok(),
        _ => None,
    })
}

fn md_f64(md: &HashMap<String, Value>, key: &str) -> Option<f64> {
    md.get(key).and_then(|v| match v {
        Value::F32(x) => Some(*x as f64),
        Value::F64(x) => Some(*x),
        _ => None,
    })
}

/// The Hugging Face name of a GGUF tensor (`None`: not one our decoder reads).
pub fn hf_name(gguf: &str) -> Option<String> {
    let fixed = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(n) = fixed {
        return Some(n.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// The model configuration described by a GGUF file's metadata and tensors.
pub fn config_from_gguf(ct: &Content, path: &Path) -> Result<ModelConfig> {
    let md = &ct.metadata;
    let name = md
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| {
            LocalError::field(path, "general.architecture", "missing or not a string")
        })?;
    let arch = match name.as_str() {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => {
            return Err(LocalError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                arch: other.to_string(),
                supported: "llama, qwen2, qwen3",
            })
        }
    };
    let key = |k: &str| format!("{name}.{k}");
    let req = |k: &str| -> Result<usize> {
        match md_u64(md, &key(k)) {
            Some(v) if v > 0 => Ok(v as usize),
            Some(_) => Err(LocalError::field(path, key(k), "must be positive")),
            None => Err(LocalError::field(
                path,
                key(k),
                "missing from the GGUF metadata",
            )),
        }
    };
    let hidden = req("embedding_length")?;
    let heads = req("attention.head_count")?;
    let kv_heads = md_u64(md, &key("attention.head_count_kv"))
        .map(|v| v as usize)
        .unwrap_or(heads);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(LocalError::field(
            path,
            key("attention.head_count_kv"),
            format!("{kv_heads} does not divide {heads} attention heads"),
        ));
    }
    let head_dim = md_u64(md, &key("attention.key_length"))
        .map(|v| v as usize)
        .unwrap_or(hidden / heads);
    if let Some(rope_dim) = md_u64(md, &key("rope.dimension_count")) {
        if rope_dim as usize != head_dim {
            return Err(LocalError::field(
                path,
                key("rope.dimension_count"),
                format!("partial rotary embeddings ({rope_dim} of {head_dim}) are not supported"),
            ));
        }
    }
    if ct.tensor_infos.contains_key("rope_freqs.weight") {
        return Err(LocalError::BadFile {
            path: path.to_path_buf(),
            message: "rope frequency factors (rope_freqs.weight, Llama 3 rope scaling) are not \
                      supported for dense loading"
                .into(),
        });
    }
    let embd = ct
        .tensor_infos
        .get("token_embd.weight")
        .ok_or_else(|| LocalError::BadFile {
            path: path.to_path_buf(),
            message: "no token_embd.weight tensor".into(),
        })?;
    let vocab_size = embd.shape.dims().first().copied().unwrap_or(0);
    let bos = md_u64(md, "tokenizer.ggml.bos_token_id").map(|v| v as u32);
    let eos = md_u64(md, "tokenizer.ggml.eos_token_id").map(|v| v as u32);
    Ok(ModelConfig {
        arch,
        vocab_size,
        hidden_size: hidden,
        intermediate_size: req("feed_forward_length")?,
        num_hidden_layers: req("block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        rms_norm_eps: md_f64(md, &key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-6),
        rope_theta: md_f64(md, &key("rope.freq_base")).unwrap_or(10_000.0),
        max_position_embeddings: md_u64(md, &key("context_length"))
            .map(|v| v as usize)
            .unwrap_or(4096),
        tie_word_embeddings: !ct.tensor_infos.contains_key("output.weight"),
        qkv_bias: ct.tensor_infos.contains_key("blk.0.attn_q.bias"),
        rope_scaling: None,
        bos_token_id: bos,
        eos_token_ids: eos.into_iter().collect(),
    })
}

/// Read a GGUF file and dequantise every tensor the decoder needs to f32, with
/// Hugging Face names and rotary layout.
pub fn dequantize_gguf(path: &Path, device: &Device) -> Result<DenseGguf> {
    let mut file = std::fs::File::open(path).map_err(|e| LocalError::io(path, e))?;
    let ct = Content::read(&mut file).map_err(|e| LocalError::BadFile {
        path: path.to_path_buf(),
        message: format!("not a readable GGUF file: {e}"),
    })?;
    let config = config_from_gguf(&ct, path)?;
    let tokenizer = tokenizer_from_gguf(&ct.metadata, path)?;
    let permuted = config.arch == Arch::Llama;
    let expected: HashMap<String, Vec<usize>> = weight_shapes(&config).into_iter().collect();
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = HashMap::new();
    for gguf_name in names {
        let Some(name) = hf_name(gguf_name) else {
            continue;
        };
        let Some(shape) = expected.get(&name) else {
            continue;
        };
        let weight_err = |message: String| LocalError::Weight {
            file: path.display().to_string(),
            name: gguf_name.clone(),
            message,
        };
        let t = ct
            .tensor(&mut file, gguf_name, device)
            .and_then(|q| q.dequantize(device))
            .map_err(|e| weight_err(format!("cannot dequantise: {e}")))?;
        let t = if t.dims() == shape.as_slice() {
            t
        } else if t.elem_count() == shape.iter().product::<usize>() && shape.len() == 1 {
            t.reshape(shape.as_slice())?
        } else {
            return Err(weight_err(format!(
                "shape {:?}, expected {shape:?} for {name}",
                t.dims()
            )));
        };
        let t = if permuted && name.contains("self_attn.q_proj.") {
            unpermute_rope_rows(&t, config.num_attention_heads)?
        } else if permuted && name.contains("self_attn.k_proj.") {
            unpermute_rope_rows(&t, config.num_key_value_heads)?
        } else {
            t
        };
        tensors.insert(name, t);
    }
    for name in expected.keys() {
        if !tensors.contains_key(name) {
            return Err(LocalError::Weight {
                file: path.display().to_string(),
                name: name.clone(),
                message: "missing from the GGUF file".into(),
            });
        }
    }
    Ok(DenseGguf {
        config,
        tensors,
        tokenizer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() {
        let dev = Device::Cpu;
        // 2 heads of head_dim 4, 3 input columns; row r holds r * 10 + column.
        let rows: Vec<f32> = (0..8)
            .flat_map(|r| (0..3).map(move |c| (r * 10 + c) as f32))
            .collect();
        let w = Tensor::from_vec(rows, (8, 3), &dev).unwrap();
        let g = permute_rope_rows(&w, 2).unwrap();
        // llama.cpp: within each head, rows [0, 1 | 2, 3] (two halves) become
        // interleaved [0, 2, 1, 3].
        let first_col: Vec<f32> = g
            .narrow(1, 0, 1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(
            first_col,
            vec![0.0, 20.0, 10.0, 30.0, 40.0, 60.0, 50.0, 70.0]
        );
        let back = unpermute_rope_rows(&g, 2).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), w.to_vec2::<f32>().unwrap());
        // A bias (one dimension) and a wider head.
        let b = Tensor::arange(0f32, 16.0, &dev).unwrap();
        let pb = permute_rope_rows(&b, 2).unwrap();
        assert_eq!(
            pb.to_vec1::<f32>().unwrap()[..8],
            [0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]
        );
        let bb = unpermute_rope_rows(&pb, 2).unwrap();
        assert_eq!(bb.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
        assert!(unpermute_rope_rows(&b, 3).is_err());
    }

    #[test]
    fn gguf_names_map_to_hugging_face_names() {
        assert_eq!(
            hf_name("blk.12.attn_q.weight").as_deref(),
            Some("model.layers.12.self_attn.q_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.attn_k.bias").as_deref(),
            Some("model.layers.0.self_attn.k_proj.bias")
        );
        assert_eq!(
            hf_name("blk.3.ffn_norm.weight").as_deref(),
            Some("model.layers.3.post_attention_layernorm.weight")
        );
        assert_eq!(
            hf_name("token_embd.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(hf_name("output.weight").as_deref(), Some("lm_head.weight"));
        assert_eq!(hf_name("rope_freqs.weight"), None);
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
    }
}
