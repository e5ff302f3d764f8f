//! LoRA: low-rank adapters on a frozen decoder.
//!
//! A targeted projection `y = x Wᵀ` becomes `y = x Wᵀ + (alpha / rank) · x Aᵀ Bᵀ`
//! with `A` `(rank, in)` and `B` `(out, rank)` the only trained matrices of
//! the decoder (`B` starts at zero, so training starts from the base model).
//! Every base weight is then a plain tensor: no gradient, no optimizer
//! moments, and the weight half of each matrix product's backward pass is
//! skipped ([`crate::model::kernels::frozen_matmul`]).
//!
//! An adapter is stored as `adapter.safetensors` (the `A`/`B` pairs, named
//! like PEFT's without its `base_model.model.` prefix:
//! `model.layers.0.self_attn.q_proj.lora_A.weight`) and `adapter.json`
//! ([`AdapterSpec`]: the base weights' path and SHA-256, rank, alpha,
//! targets). A directory with both loads as a policy: the base is read and
//! checked against its digest, and the adapters are merged into it.

use crate::model::config::ModelConfig;
use crate::model::error::{LocalError, Result};
use crate::model::kernels::frozen_matmul::{frozen_matmul, lora_matmul};
use crate::model::models::transformer::{weight_shapes, Transformer};
use crate::model::quantized::dequant::dequantize_gguf;
use crate::model::weights::{mmap, weight_files};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Init, Linear, VarBuilder, VarMap};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The adapter's description in a checkpoint directory.
pub const ADAPTER_SPEC: &str = "adapter.json";
/// The adapter's trained variables (and the value head) in a checkpoint directory.
pub const ADAPTER_WEIGHTS: &str = "adapter.safetensors";

/// A projection an adapter can sit on (Hugging Face module names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraTarget {
    /// `self_attn.q_proj`.
    QProj,
    /// `self_attn.k_proj`.
    KProj,
    /// `self_attn.v_proj`.
    VProj,
    /// `self_attn.o_proj`.
    OProj,
    /// `mlp.gate_proj`.
    GateProj,
    /// `mlp.up_proj`.
    UpProj,
    /// `mlp.down_proj`.
    DownProj,
}

impl LoraTarget {
    /// Every target, in layer order.
    pub const ALL: [LoraTarget; 7] = [
        Self::QProj,
        Self::KProj,
        Self::VProj,
        Self::OProj,
        Self::GateProj,
        Self::UpProj,
        Self::DownProj,
    ];

    /// The module path inside a layer (`self_attn.q_proj`).
    pub fn module(&self) -> &'static str {
        match self {
            Self::QProj => "self_attn.q_proj",
            Self::KProj => "self_attn.k_proj",
            Self::VProj => "self_attn.v_proj",
            Self::OProj => "self_attn.o_proj",
            Self::GateProj => "mlp.gate_proj",
            Self::UpProj => "mlp.up_proj",
            Self::DownProj => "mlp.down_proj",
        }
    }

    /// The short name used on the command line (`q`, `gate`, ...).
    pub fn short(&self) -> &'static str {
        match self {
            Self::QProj => "q",
            Self::KProj => "k",
            Self::VProj => "v",
            Self::OProj => "o",
            Self::GateProj => "gate",
            Self::UpProj => "up",
            Self::DownProj => "down",
        }
    }

    /// Parse a comma-separated list of short names (`q,v`), or `all`.
    pub fn parse_list(s: &str) -> std::result::Result<Vec<Self>, String> {
        if s.trim() == "all" {
            return Ok(Self::ALL.to_vec());
        }
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(t) = Self::ALL.iter().find(|t| t.short() == name) else {
                return Err(format!(
                    "unknown LoRA target `{name}` (known: q, k, v, o, gate, up, down, or all)"
                ));
            };
            if !out.contains(t) {
                out.push(*t);
            }
        }
        if out.is_empty() {
            return Err("no LoRA target given".into());
        }
        Ok(out)
    }
}

/// Rank, scale and placement of the adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// Inner dimension of each `A`/`B` pair.
    pub rank: usize,
    /// The update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// The projections that get adapters, in every layer.
    pub targets: Vec<LoraTarget>,
}

impl LoraConfig {
    /// Rank `rank`, alpha `2 * rank`, on every projection.
    pub fn with_rank(rank: usize) -> Self {
        Self {
            rank,
            alpha: 2.0 * rank as f64,
            targets: LoraTarget::ALL.to_vec(),
        }
    }

    /// Why this configuration cannot be used: the field, and what is wrong.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.rank == 0 || self.rank > 4096 {
            return Some(("rank", format!("{} is not in 1..=4096", self.rank)));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Some(("alpha", format!("{} is not a positive number", self.alpha)));
        }
        if self.targets.is_empty() {
            return Some(("targets", "no projection given".into()));
        }
        None
    }

    /// The factor `alpha / rank` of the low-rank update.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
}

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

/// Half-width of the uniform initialisation of an `A` matrix on `in_dim`
/// inputs (PEFT's default).
fn a_bound(in_dim: usize) -> f64 {
    1.0 / (in_dim as f64).sqrt()
}

/// Re-draw every `lora_A` matrix of `varmap` from `seed` (names in sorted
/// order), so that a run's initial adapters depend only on its seed.
pub fn reseed_adapters(varmap: &VarMap, seed: u64) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data = varmap
        .data()
        .lock()
        .map_err(|_| LocalError::Generation("var map lock poisoned".into()))?;
    let mut names: Vec<&String> = data
        .keys()
        .filter(|n| n.ends_with("lora_A.weight"))
        .collect();
    names.sort();
    for name in names {
        let var = &data[name];
        let (rank, inp) = var.dims2()?;
        let bound = a_bound(inp);
        let vals: Vec<f32> = (0..rank * inp)
            .map(|_| rng.random_range(-bound..bound) as f32)
            .collect();
        var.set(&Tensor::from_vec(vals, (rank, inp), var.device())?)?;
    }
    Ok(())
}

/// One adapter pair on a projection.
#[derive(Debug, Clone)]
struct Adapter {
    /// `(rank, in)`.
    a: Tensor,
    /// `(out, rank)`.
    b: Tensor,
    scale: f64,
}

impl Adapter {
    /// `scale · x Aᵀ Bᵀ` for `x` `(rows, in)`.
    fn delta_2d(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.matmul(&self.a.t()?)?.matmul(&self.b.t()?)? * self.scale
    }
}

/// A linear projection of the decoder, with an optional adapter.
#[derive(Debug, Clone)]
pub(crate) struct Proj {
    linear: Linear,
    adapter: Option<Adapter>,
}

impl Proj {
    /// A projection without adapter.
    pub(crate) fn new(linear: Linear) -> Self {
        Self {
            linear,
            adapter: None,
        }
    }

    /// The base bias, if any.
    pub(crate) fn bias(&self) -> Option<&Tensor> {
        self.linear.bias()
    }

    /// Give the projection an adapter whose matrices `vb` holds (or
    /// creates: `A` uniform in ±1/√in as PEFT's default, `B` zero).
    pub(crate) fn attach(
        &mut self,
        vb: VarBuilder,
        rank: usize,
        scale: f64,
    ) -> candle_core::Result<()> {
        let (out, inp) = self.linear.weight().dims2()?;
        let bound = a_bound(inp);
        let a = vb.pp("lora_A").get_with_hints(
            (rank, inp),
            "weight",
            Init::Uniform {
                lo: -bound,
                up: bound,
            },
        )?;
        let b = vb
            .pp("lora_B")
            .get_with_hints((out, rank), "weight", Init::Const(0.0))?;
        self.adapter = Some(Adapter { a, b, scale });
        Ok(())
    }

    /// The weight with the adapter folded in: `W + scale · B A` (a copy).
    pub(crate) fn merged_weight(&self) -> candle_core::Result<Tensor> {
        let w = self.linear.weight();
        Ok(match &self.adapter {
            Some(ad) => (w + (ad.b.matmul(&ad.a)? * ad.scale)?)?,
            None => w.copy()?,
        })
    }

    /// `x` `(.., in)` through the projection as one 2-D product (candle's
    /// `Linear` broadcasts the weight over the batch, whose backward pass
    /// then runs one product per batch element and sums them); with
    /// `frozen`, the base weight gets no gradient.
    pub(crate) fn forward_2d(&self, x: &Tensor, frozen: bool) -> candle_core::Result<Tensor> {
        let mut dims = x.dims().to_vec();
        let in_dim = dims.pop().unwrap_or(1);
        let rows = x.elem_count() / in_dim.max(1);
        let x = x.reshape((rows, in_dim))?;
        let w = self.linear.weight();
        // An adapter's base weight is always frozen.
        let mut y = match &self.adapter {
            Some(ad) => lora_matmul(&x, w, &ad.a, &ad.b, ad.scale)?,
            None if frozen => frozen_matmul(&x, w)?,
            None => x.matmul(&w.t()?)?,
        };
        if let Some(b) = self.linear.bias() {
            y = y.broadcast_add(b)?;
        }
        dims.push(y.dim(1)?);
        y.reshape(dims)
    }

    /// The sampling path's forward (candle's `Linear`, plus the adapter).
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.linear.forward(x)?;
        let Some(ad) = &self.adapter else {
            return Ok(y);
        };
        let in_dim = x.dim(candle_core::D::Minus1)?;
        let delta = ad.delta_2d(&x.reshape(((), in_dim))?)?;
        &y + delta.reshape(y.shape())?
    }
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
