//! LoRA checkpoints: an adapter on disk, and the base it belongs to.
//!
//! An adapter is stored as `adapter.safetensors` (the `A`/`B` pairs, named
//! like PEFT's without its `base_model.model.` prefix:
//! `model.layers.0.self_attn.q_proj.lora_A.weight`) and `adapter.json`
//! ([`AdapterSpec`]: the base weights' path and SHA-256, rank, alpha,
//! targets). A directory with both loads as a policy: the base is read and
//! checked against its digest, and the adapters are merged into it. Kept
//! apart from [`super::lora`] so that the decoder's layers need no loader.

use crate::model::config::ModelConfig;
use crate::model::error::{LocalError, Result};
use crate::model::models::lora::LoraConfig;
use crate::model::models::transformer::{weight_shapes, Transformer};
use crate::model::quantized::dequant::dequantize_gguf;
use crate::model::weights::{mmap, weight_files};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The adapter's description in a checkpoint directory.
pub const ADAPTER_SPEC: &str = "adapter.json";
/// The adapter's trained variables (and the value head) in a checkpoint directory.
pub const ADAPTER_WEIGHTS: &str = "adapter.safetensors";

/// `adapter.json`: what an adapter was trained on and how it is shaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSpec {
    /// The base weights: a `.gguf` file or a model directory (absolute).
    pub base: PathBuf,
    /// SHA-256 of the base's weight file(s), in order.
    pub base_sha256: String,
    /// The adapters' shape.
    #[serde(flatten)]
    pub lora: LoraConfig,
}

impl AdapterSpec {
    /// Describe an adapter on `base`, hashing its weights.
    pub fn new(base: &Path, lora: LoraConfig) -> Result<Self> {
        let base = std::path::absolute(base).map_err(|e| LocalError::Io {
            path: base.to_path_buf(),
            source: e,
        })?;
        Ok(Self {
            base_sha256: base_digest(&base)?,
            base,
            lora,
        })
    }

    /// Read `dir/adapter.json`; errors name the file and the field.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(ADAPTER_SPEC);
        let text = std::fs::read_to_string(&path).map_err(|e| LocalError::Io {
            path: path.clone(),
            source: e,
        })?;
        let spec: Self = serde_json::from_str(&text).map_err(|e| LocalError::BadFile {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if let Some((field, message)) = spec.lora.problem() {
            return Err(LocalError::BadField {
                path,
                field: field.into(),
                message,
            });
        }
        Ok(spec)
    }

    /// Write `dir/adapter.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(ADAPTER_SPEC);
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        crate::fsutil::write_atomic(&path, text.as_bytes())
            .map_err(|e| LocalError::Io { path, source: e })
    }

    /// The base's configuration and weights (f32), refused when the base is
    /// missing or its digest differs from the one recorded in `spec_file`.
    pub fn load_base(&self, spec_file: &Path, device: &Device) -> Result<BaseWeights> {
        if !self.base.exists() {
            return Err(LocalError::BadField {
                path: spec_file.to_path_buf(),
                field: "base".into(),
                message: format!("{}: the base model is missing", self.base.display()),
            });
        }
        let digest = base_digest(&self.base)?;
        if digest != self.base_sha256 {
            return Err(LocalError::BadField {
                path: spec_file.to_path_buf(),
                field: "base_sha256".into(),
                message: format!(
                    "{} has changed since the adapter was trained (SHA-256 {digest})",
                    self.base.display()
                ),
            });
        }
        load_base_weights(&self.base, device)
    }
}

/// A base model's configuration and every weight it reads, in f32.
pub struct BaseWeights {
    /// The architecture.
    pub config: ModelConfig,
    /// Weights by Hugging Face name.
    pub tensors: HashMap<String, Tensor>,
}

/// Read a `.gguf` file (dequantised) or a model directory's safetensors.
pub fn load_base_weights(base: &Path, device: &Device) -> Result<BaseWeights> {
    if base.extension().is_some_and(|e| e == "gguf") {
        let dense = dequantize_gguf(base, device)?;
        return Ok(BaseWeights {
            config: dense.config,
            tensors: dense.tensors,
        });
    }
    let config = ModelConfig::from_file(&base.join("config.json"))?;
    let files = weight_files(base)?;
    let st = mmap(&files)?;
    let mut tensors = HashMap::new();
    for (name, _) in weight_shapes(&config) {
        let t = st
            .load(&name, device)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| LocalError::Weight {
                file: base.display().to_string(),
                name: name.clone(),
                message: e.to_string(),
            })?;
        tensors.insert(name, t);
    }
    Ok(BaseWeights { config, tensors })
}

/// SHA-256 over the base's weight file(s): the `.gguf` file, or a
/// directory's safetensors files in name order.
fn base_digest(base: &Path) -> Result<String> {
    let files = if base.is_dir() {
        weight_files(base)?
    } else {
        vec![base.to_path_buf()]
    };
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for f in files {
        let io = |e| LocalError::Io {
            path: f.clone(),
            source: e,
        };
        let mut file = std::fs::File::open(&f).map_err(io)?;
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// The base decoder of the adapter directory `dir` (architecture `cfg`, from
/// its `config.json`), without adapters; refused when the base is missing,
/// changed, or does not fit `cfg`.
pub fn adapter_base(
    dir: &Path,
    cfg: &ModelConfig,
    device: &Device,
) -> Result<(AdapterSpec, Transformer)> {
    let spec = AdapterSpec::read(dir)?;
    let spec_file = dir.join(ADAPTER_SPEC);
    let base = spec.load_base(&spec_file, device)?;
    let vb = VarBuilder::from_tensors(base.tensors, DType::F32, device);
    let model = Transformer::new(cfg, vb).map_err(|e| LocalError::BadField {
        path: spec_file,
        field: "base".into(),
        message: format!("{} does not fit config.json: {e}", spec.base.display()),
    })?;
    Ok((spec, model))
}

/// The decoder of the adapter directory `dir` with its adapters merged into
/// the base: a plain model for sampling.
pub fn load_adapted(dir: &Path, cfg: &ModelConfig, device: &Device) -> Result<Transformer> {
    let (spec, mut model) = adapter_base(dir, cfg, device)?;
    let file = dir.join(ADAPTER_WEIGHTS);
    let st = mmap(std::slice::from_ref(&file))?;
    let vb = VarBuilder::from_backend(Box::new(st), DType::F32, device.clone());
    model
        .attach_lora(&spec.lora, vb)
        .map_err(|e| LocalError::Weight {
            file: file.display().to_string(),
            name: "lora_A/lora_B".into(),
            message: e.to_string(),
        })?;
    let merged = VarBuilder::from_tensors(model.merged_weights()?, DType::F32, device);
    Ok(Transformer::new(cfg, merged)?)
}
