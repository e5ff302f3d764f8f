//! The trainable policy: the project's decoder plus a value head (a linear
//! layer on the final hidden state). Its `VarMap` holds what is trained:
//! every weight, or, with LoRA, only the adapters and the value head (the
//! base weights are then plain tensors).

use super::error::{Result, RlError};
use crate::model::config::ModelConfig;
use crate::model::kernels::linear::forward_linear;
use crate::model::models::adapter::{adapter_base, AdapterSpec, ADAPTER_SPEC, ADAPTER_WEIGHTS};
use crate::model::models::lora::{reseed_adapters, LoraConfig};
use crate::model::models::tiny::reinit_seeded;
use crate::model::models::transformer::weight_shapes;
use crate::model::quantized::dequant::dequantize_gguf;
use crate::model::weights::{load_into_varmap, weight_files};
use crate::model::{ChatTokenizer, LocalError, LocalModel, Transformer};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::{Init, Linear, VarBuilder, VarMap};
use std::collections::HashMap;
use std::path::Path;

/// Prefix of the value head's weights (`value_head.weight`, `value_head.bias`).
pub const VALUE_HEAD: &str = "value_head";

/// Decoder + value head, trained in f32.
pub struct Policy {
    varmap: VarMap,
    model: Transformer,
    value_head: Linear,
    tokenizer: Option<ChatTokenizer>,
    /// The adapters' description when only LoRA adapters are trained.
    adapter: Option<AdapterSpec>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("config", self.model.config())
            .finish()
    }
}

fn build(cfg: &ModelConfig, device: &Device) -> Result<(VarMap, Transformer)> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
    let model = Transformer::new(cfg, vb)?;
    Ok((varmap, model))
}

fn add_value_head(varmap: &VarMap, cfg: &ModelConfig, device: &Device) -> Result<Linear> {
    let vb = VarBuilder::from_varmap(varmap, DType::F32, device).pp(VALUE_HEAD);
    let w = vb.get_with_hints((1, cfg.hidden_size), "weight", Init::Const(0.0))?;
    let b = vb.get_with_hints(1, "bias", Init::Const(0.0))?;
    Ok(Linear::new(w, Some(b)))
}

impl Policy {
    /// A freshly initialised policy (weights N(0, 0.02²) from `seed`, value head 0).
    pub fn from_config(cfg: &ModelConfig, device: &Device, seed: u64) -> Result<Self> {
        let (varmap, model) = build(cfg, device)?;
        reinit_seeded(&varmap, seed, 0.02)?;
        let value_head = add_value_head(&varmap, cfg, device)?;
        Ok(Self {
            varmap,
            model,
            value_head,
            tokenizer: None,
            adapter: None,
        })
    }

    /// Load a Hugging Face-style model directory for training (any dtype on
    /// disk, f32 in memory); the value head starts at zero. A LoRA checkpoint
    /// (`adapter.json`) loads as its frozen base with its adapters and value
    /// head, training the adapters on.
    pub fn from_dir(dir: &Path, device: &Device) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let cfg = ModelConfig::from_file(&cfg_path)?;
        if dir.join(ADAPTER_SPEC).is_file() {
            return Self::from_adapter_dir(dir, &cfg, device);
        }
        let (varmap, model) = build(&cfg, device)?;
        let required: Vec<String> = weight_shapes(&cfg).into_iter().map(|(n, _)| n).collect();
        load_into_varmap(&varmap, &weight_files(dir)?, &required, device)?;
        let value_head = add_value_head(&varmap, &cfg, device)?;
        let tokenizer = ChatTokenizer::from_dir(dir, &cfg.eos_token_ids)?;
        Ok(Self {
            varmap,
            model,
            value_head,
            tokenizer: Some(tokenizer),
            adapter: None,
        })
    }

    /// Load a GGUF file for training: every weight dequantised to f32 (llama's
    /// rotary row permutation undone), the configuration from the GGUF
    /// metadata, the tokenizer from its vocabulary; the value head starts at zero.
    pub fn from_gguf(path: &Path, device: &Device) -> Result<Self> {
        let dense = dequantize_gguf(path, device)?;
        let varmap = VarMap::new();
        {
            let mut data = varmap.data().lock().map_err(|_| {
                RlError::Model(LocalError::Generation("var map lock poisoned".into()))
            })?;
            for (name, t) in dense.tensors {
                data.insert(name, Var::from_tensor(&t)?);
            }
        }
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, device);
        let model = Transformer::new(&dense.config, vb)?;
        let value_head = add_value_head(&varmap, &dense.config, device)?;
        Ok(Self {
            varmap,
            model,
            value_head,
            tokenizer: Some(dense.tokenizer),
            adapter: None,
        })
    }

    /// Train only LoRA adapters on this policy's current weights, which
    /// become the frozen base; `base` is where those weights were read
    /// from (recorded with its digest in the checkpoints' `adapter.json`).
    /// The adapters' `A` matrices are drawn from `seed`, `B` starts at zero,
    /// and the value head at zero.
    pub fn with_lora(self, lora: &LoraConfig, base: &Path, seed: u64) -> Result<Self> {
        if let Some((field, message)) = lora.problem() {
            return Err(RlError::Setting(format!("LoRA {field}: {message}")));
        }
        let spec = AdapterSpec::new(base, lora.clone())?;
        let device = self.device().clone();
        let frozen: HashMap<String, Tensor> = self
            .vars()
            .into_iter()
            .filter(|(n, _)| !n.starts_with(VALUE_HEAD))
            .map(|(n, v)| (n, v.as_detached_tensor()))
            .collect();
        let vb = VarBuilder::from_tensors(frozen, DType::F32, &device);
        let model = Transformer::new(self.config(), vb)?;
        let policy = Self::adapted(model, spec, &device, self.tokenizer)?;
        reseed_adapters(&policy.varmap, seed)?;
        Ok(policy)
    }

    /// A LoRA checkpoint directory: its base (checked against the digest in
    /// `adapter.json`) with the adapters and value head of `adapter.safetensors`.
    fn from_adapter_dir(dir: &Path, cfg: &ModelConfig, device: &Device) -> Result<Self> {
        let (spec, model) = adapter_base(dir, cfg, device)?;
        let tokenizer = if dir.join("tokenizer.json").is_file() {
            Some(ChatTokenizer::from_dir(dir, &cfg.eos_token_ids)?)
        } else {
            None
        };
        let policy = Self::adapted(model, spec, device, tokenizer)?;
        policy.load_weights(&dir.join(ADAPTER_WEIGHTS))?;
        Ok(policy)
    }

    /// `model` (frozen) with fresh adapters of `spec` and a value head, the
    /// only variables.
    fn adapted(
        mut model: Transformer,
        spec: AdapterSpec,
        device: &Device,
        tokenizer: Option<ChatTokenizer>,
    ) -> Result<Self> {
        let varmap = VarMap::new();
        model.attach_lora(
            &spec.lora,
            VarBuilder::from_varmap(&varmap, DType::F32, device),
        )?;
        let value_head = add_value_head(&varmap, model.config(), device)?;
        Ok(Self {
            varmap,
            model,
            value_head,
            tokenizer,
            adapter: Some(spec),
        })
    }

    /// The LoRA adapters' description, when only adapters are trained.
    pub fn adapter(&self) -> Option<&AdapterSpec> {
        self.adapter.as_ref()
    }

    /// Attach a tokenizer (for sampling through [`crate::model::LocalModel`]).
    pub fn with_tokenizer(mut self, tokenizer: ChatTokenizer) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// The tokenizer, when known.
    pub fn tokenizer(&self) -> Option<&ChatTokenizer> {
        self.tokenizer.as_ref()
    }

    /// The decoder (shares storage with the trained variables: a clone sees updates).
    pub fn model(&self) -> &Transformer {
        &self.model
    }

    /// The model configuration.
    pub fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.model.device()
    }

    /// Every trainable variable, by name (with LoRA: the adapters and the
    /// value head).
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.varmap
            .data()
            .lock()
            .map(|d| d.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Number of trainable parameters.
    pub fn num_params(&self) -> usize {
        self.vars().iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Differentiable forward: logits `(b, t, vocab)` and values `(b, t)`.
    pub fn forward(&self, ids: &Tensor) -> Result<(Tensor, Tensor)> {
        let h = self.model.hidden_states(ids)?;
        let logits = self.model.logits(&h)?;
        let values = forward_linear(&self.value_head, &h)?.squeeze(D::Minus1)?;
        Ok((logits, values))
    }

    /// Differentiable forward evaluated only at `positions` `(n,)`, flat indices
    /// into `b * t`: logits `(n, vocab)` and values `(n,)`.
    pub fn forward_at(&self, ids: &Tensor, positions: &Tensor) -> Result<(Tensor, Tensor)> {
        let h = self.model.hidden_states(ids)?;
        let (b, t, d) = h.dims3()?;
        let h = h.reshape((b * t, d))?.index_select(positions, 0)?;
        let logits = self.model.logits(&h)?;
        let values = forward_linear(&self.value_head, &h)?.squeeze(D::Minus1)?;
        Ok((logits, values))
    }

    /// Values only `(n,)` at `positions` (no LM head): the shared critic's
    /// estimates at collection time.
    pub fn values_at(&self, ids: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let h = self.model.hidden_states(ids)?;
        let (b, t, d) = h.dims3()?;
        let h = h.reshape((b * t, d))?.index_select(positions, 0)?;
        Ok(forward_linear(&self.value_head, &h)?.squeeze(D::Minus1)?)
    }

    /// A copy of the current decoder weights for sampling (no gradient
    /// tracking, adapters merged), with the tokenizer; `None` without a tokenizer.
    pub fn sampling_model(&self, name: &str) -> Result<Option<LocalModel>> {
        let Some(tok) = &self.tokenizer else {
            return Ok(None);
        };
        Ok(Some(LocalModel::from_parts(
            self.frozen_model()?,
            tok.clone(),
            name,
        )))
    }

    /// A copy of the current decoder weights (no gradient tracking,
    /// adapters merged): what sampling runs, or a KL penalty's reference.
    pub fn frozen_model(&self) -> Result<Transformer> {
        let vb = VarBuilder::from_tensors(self.model.merged_weights()?, DType::F32, self.device());
        Ok(Transformer::new(self.config(), vb)?)
    }

    /// Save every variable (decoder or adapters, and value head) as safetensors.
    pub fn save_weights(&self, path: &Path) -> Result<()> {
        self.varmap.save(path).map_err(|e| {
            RlError::Model(LocalError::Weight {
                file: path.display().to_string(),
                name: "*".into(),
                message: e.to_string(),
            })
        })
    }

    /// Load every variable from a file written by [`Policy::save_weights`];
    /// all must be present with matching shapes.
    pub fn load_weights(&self, path: &Path) -> Result<()> {
        let required: Vec<String> = self.vars().into_iter().map(|(n, _)| n).collect();
        load_into_varmap(
            &self.varmap,
            &[path.to_path_buf()],
            &required,
            self.device(),
        )?;
        Ok(())
    }
}
