//! LoRA layers: low-rank adapters on a frozen decoder's projections.
//!
//! A targeted projection `y = x Wᵀ` becomes `y = x Wᵀ + (alpha / rank) · x Aᵀ Bᵀ`
//! with `A` `(rank, in)` and `B` `(out, rank)` the only trained matrices of
//! the decoder (`B` starts at zero, so training starts from the base model).
//! Every base weight is then a plain tensor: no gradient, no optimizer
//! moments, and the weight half of each matrix product's backward pass is
//! skipped ([`crate::model::kernels::frozen_matmul`]). How an adapter is
//! stored and loaded back onto its base is [`super::adapter`]'s job; this
//! file knows nothing of the decoder around a projection.

use crate::model::error::{LocalError, Result};
use crate::model::kernels::few_rows::rows_times_weight_t;
use crate::model::kernels::frozen_matmul::{frozen_matmul, lora_matmul};
use crate::model::kernels::linear::linear;
use candle_core::{Module, Tensor};
use candle_nn::{Init, Linear, VarBuilder, VarMap};
use serde::{Deserialize, Serialize};

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
        let bias = self.linear.bias();
        let y = match &self.adapter {
            // A trained weight: the bias is part of the op.
            None if !frozen => linear(&x, w, bias)?,
            // An adapter's base weight is always frozen.
            adapter => {
                let y = match adapter {
                    Some(ad) => lora_matmul(&x, w, &ad.a, &ad.b, ad.scale)?,
                    None => frozen_matmul(&x, w)?,
                };
                match bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                }
            }
        };
        dims.push(y.dim(1)?);
        y.reshape(dims)
    }

    /// The sampling path's forward without a backward pass: up to
    /// `few_rows` rows (a decoding step's) through [`rows_times_weight_t`],
    /// more through [`Proj::forward`]; plus the bias and the adapter.
    pub(crate) fn forward_sampling(
        &self,
        x: &Tensor,
        few_rows: usize,
    ) -> candle_core::Result<Tensor> {
        let mut dims = x.dims().to_vec();
        let in_dim = dims.pop().unwrap_or(1);
        let rows = x.elem_count() / in_dim.max(1);
        if rows > few_rows {
            return self.forward(x);
        }
        let x = x.reshape((rows, in_dim))?;
        let mut y = rows_times_weight_t(&x, self.linear.weight())?;
        if let Some(b) = self.linear.bias() {
            y = y.broadcast_add(b)?;
        }
        if let Some(ad) = &self.adapter {
            y = (y + ad.delta_2d(&x)?)?;
        }
        dims.push(y.dim(1)?);
        y.reshape(dims)
    }

    /// candle's `Linear` plus the adapter, differentiable (the sampling path's
    /// prompts, and the composed training path).
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
