//! The project's own Qwen2 / Qwen3 / Llama decoder, with Hugging Face weight
//! names, usable both for sampling and for training.
//!
//! candle-transformers' models use fused ops (`rms_norm`, `softmax_last_dim`,
//! `rope`) that have no backward pass, so a model built from a `VarMap` only
//! gets gradients for the embedding and the head. This module runs either
//! path over the same weights:
//! - [`Transformer::hidden_states`]: differentiable ops only (the fused CPU
//!   kernels with backward passes of [`crate::model::kernels::train_ops`], or `rope_slow`,
//!   `ops::softmax` and a composed RMS norm elsewhere), whole sequences,
//!   causal mask;
//! - [`Transformer::forward_cached`]: fused ops plus a [`KvCache`], for sampling.

use crate::model::config::{Arch, ModelConfig};
use crate::model::kernels::attention::causal_attention;
use crate::model::kernels::decode_attention;
use crate::model::kernels::few_rows::{rows_times_weight_t, FEW_ROWS};
use crate::model::kernels::frozen_matmul::frozen_matmul;
use crate::model::kernels::linear::forward_linear;
use crate::model::kernels::train_ops::{self, Rope};
use crate::model::models::lora::{LoraConfig, LoraTarget, Proj};
use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{Embedding, Init, Linear, VarBuilder};
use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard deviation of freshly initialised weight matrices.
const INIT_STD: f64 = 0.02;

/// Copy per-layer `(keys, values)` of batch 1 to `n` rows.
fn repeat_rows(layers: &mut [Option<(Tensor, Tensor)>], n: usize) -> Result<()> {
    for (k, v) in layers.iter_mut().flatten() {
        *k = k.repeat((n, 1, 1, 1))?;
        *v = v.repeat((n, 1, 1, 1))?;
    }
    Ok(())
}

/// Keep only the batch rows `rows` of per-layer `(keys, values)`.
fn retain_rows(layers: &mut [Option<(Tensor, Tensor)>], rows: &[usize]) -> Result<()> {
    let Some(Some((k, _))) = layers.first() else {
        return Ok(());
    };
    let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
    let idx = Tensor::new(idx.as_slice(), k.device())?;
    for (k, v) in layers.iter_mut().flatten() {
        *k = k.index_select(&idx, 0)?;
        *v = v.index_select(&idx, 0)?;
    }
    Ok(())
}

/// Additive attention mask of a padding key: finite, so that a padding query
/// whose keys are all padding still gets a (meaningless) finite softmax.
const PAD_KEY: f32 = -1e9;

/// Positions [`Transformer::forward_cached`] runs in one pass at most: a pass
/// over `t` new positions holds `heads × t × positions` attention scores, so
/// an 8k-position prompt run whole would hold 2.4 GB per intermediate in
/// SmolLM2 (9 heads), and a chunk of 512 holds 150 MB.
pub const PREFILL_CHUNK: usize = 512;

/// Positions a [`KvCache`] grows by at a time (see
/// [`Transformer::set_kv_reserve`]): a decoding step then writes its keys and
/// values into room already there, where growing by exactly the new
/// positions copied the whole cache at every step (17% of a tiny policy's
/// rollout time).
pub const KV_RESERVE: usize = 256;

/// The environment's `name` as a whole number in `range`, `default` where
/// unset: `ENDLESS_KV_RESERVE` (1 grows the cache at every step, as before
/// [`KV_RESERVE`]) and `ENDLESS_DECODE_KERNELS` (0 leaves a decoding step's
/// products and attention to candle's ops), to compare each with what it
/// replaced in one benchmark run.
fn setting(name: &str, default: usize, range: RangeInclusive<usize>) -> Result<usize> {
    let value = std::env::var_os(name);
    let value = value.as_ref().map(|v| v.to_string_lossy());
    parse_setting(name, value.as_deref(), default, range)
}

/// [`setting`] of an environment value.
pub(crate) fn parse_setting(
    name: &str,
    value: Option<&str>,
    default: usize,
    range: RangeInclusive<usize>,
) -> Result<usize> {
    let Some(v) = value else {
        return Ok(default);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => candle_core::bail!(
            "{name} must be a whole number from {} to {}, not {v:?}",
            range.start(),
            range.end()
        ),
    }
}

/// Per-layer key/value cache of the sampling path.
///
/// Each layer holds `(batch, kv_heads, capacity, head_dim)` buffers whose
/// first [`KvCache::stored`] positions are valid; new positions are written
/// in place while they fit. A clone shares the buffers until either side
/// appends, which then copies them first (copy on write).
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// Set when the buffers may be shared with a clone: the next append
    /// copies them instead of writing in place.
    shared: AtomicBool,
    len: usize,
    /// Rotary position of the first cached key (0 unless moved by
    /// [`Transformer::shift_cache`]); `len` counts from position 0.
    origin: usize,
    /// Sequences of different lengths in one batch are padded on the left;
    /// `(batch, positions)`: [`PAD_KEY`] at padding positions, 0 elsewhere.
    key_mask: Option<Tensor>,
}

/// `(batch, heads, positions, dim)` with `n` zero positions prepended.
fn pad_positions_left(x: &Tensor, n: usize) -> Result<Tensor> {
    if n == 0 {
        return Ok(x.clone());
    }
    let (b, h, _, d) = x.dims4()?;
    Tensor::cat(
        &[&Tensor::zeros((b, h, n, d), x.dtype(), x.device())?, x],
        2,
    )
}

impl Clone for KvCache {
    fn clone(&self) -> Self {
        self.shared.store(true, Ordering::Relaxed);
        Self {
            layers: self.layers.clone(),
            shared: AtomicBool::new(true),
            len: self.len,
            origin: self.origin,
            key_mask: self.key_mask.clone(),
        }
    }
}

impl KvCache {
    /// An empty cache of `layers` layers.
    pub(crate) fn with_layers(layers: usize) -> Self {
        KvCache {
            layers: vec![None; layers],
            shared: AtomicBool::new(false),
            len: 0,
            origin: 0,
            key_mask: None,
        }
    }

    /// Number of positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copy a batch-1 cache to `n` rows (a prompt run once, sampled `n` times).
    pub fn repeat_batch(&mut self, n: usize) -> Result<()> {
        if let Some(m) = &mut self.key_mask {
            *m = m.repeat((n, 1))?;
        }
        repeat_rows(&mut self.layers, n)
    }

    /// Keep only the batch rows `rows` (finished sequences leave the batch).
    pub fn retain(&mut self, rows: &[usize]) -> Result<()> {
        if let Some(m) = &mut self.key_mask {
            let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
            *m = m.index_select(&Tensor::new(idx.as_slice(), m.device())?, 0)?;
        }
        retain_rows(&mut self.layers, rows)
    }

    /// Join batch-1 caches of prompts of different lengths into one batch,
    /// padded on the left to the longest: row `r`'s keys and values move
    /// right by its padding, and padding positions are masked from then on.
    /// Each cache must have been moved by [`Transformer::shift_cache`] to
    /// its padding as origin, so that its rotary positions are those of the
    /// padded batch (rotary embeddings see only relative positions, so each
    /// row is sampled as if alone).
    pub fn join_left_padded(rows: Vec<KvCache>) -> Result<KvCache> {
        let width = rows.iter().map(|c| c.len).max().unwrap_or(0);
        if rows.iter().any(|c| c.len != width || c.key_mask.is_some()) {
            candle_core::bail!("caches to join must end at the same position, unpadded");
        }
        let n_layers = rows.first().map_or(0, |c| c.layers.len());
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let mut keys = Vec::with_capacity(rows.len());
            let mut values = Vec::with_capacity(rows.len());
            for c in &rows {
                let Some((k, v)) = c.layer(l)? else {
                    candle_core::bail!("a cache to join is empty");
                };
                keys.push(pad_positions_left(&k, c.origin)?);
                values.push(pad_positions_left(&v, c.origin)?);
            }
            layers.push(Some((Tensor::cat(&keys, 0)?, Tensor::cat(&values, 0)?)));
        }
        let device = match rows.first().and_then(|c| c.layers.first()) {
            Some(Some((k, _))) => k.device().clone(),
            _ => Device::Cpu,
        };
        let mask: Vec<f32> = rows
            .iter()
            .flat_map(|c| (0..width).map(move |j| if j < c.origin { PAD_KEY } else { 0.0 }))
            .collect();
        Ok(KvCache {
            layers,
            shared: AtomicBool::new(false),
            len: width,
            origin: 0,
            key_mask: Some(Tensor::from_vec(mask, (rows.len(), width), &device)?),
        })
    }

    /// Every layer has appended `t` positions: they count from now on, and
    /// the buffers are this cache's own.
    pub(crate) fn appended(&mut self, t: usize) {
        self.len += t;
        *self.shared.get_mut() = false;
    }

    /// Keys cached (positions from the origin on).
    fn stored(&self) -> usize {
        self.len - self.origin
    }

    /// Layer `l`'s valid keys and values, `(batch, kv_heads, stored, head_dim)`.
    fn layer(&self, l: usize) -> Result<Option<(Tensor, Tensor)>> {
        let Some((k, v)) = &self.layers[l] else {
            return Ok(None);
        };
        let n = self.stored();
        Ok(Some((k.narrow(2, 0, n)?, v.narrow(2, 0, n)?)))
    }

    /// Append `k` and `v` (`(batch, kv_heads, t, head_dim)`) to layer `l`'s
    /// stored positions (`len` moves on once every layer has appended): in
    /// place when the buffers are this cache's own and have room, else into
    /// new buffers with room for up to `reserve` positions more (the size
    /// rounded up to a multiple of it). Returns every stored position's keys
    /// and values, the new ones included.
    pub(crate) fn append(
        &mut self,
        l: usize,
        k: &Tensor,
        v: &Tensor,
        reserve: usize,
    ) -> Result<(Tensor, Tensor)> {
        let stored = self.stored();
        let need = stored + k.dim(2)?;
        let own = !*self.shared.get_mut();
        match &self.layers[l] {
            Some((bk, bv))
                if own && bk.dim(2)? >= need && bk.is_contiguous() && bv.is_contiguous() =>
            {
                bk.slice_set(k, 2, stored)?;
                bv.slice_set(v, 2, stored)?;
            }
            past => {
                let (b, h, _, d) = k.dims4()?;
                let room = need.next_multiple_of(reserve.max(1)) - need;
                let grow = |past: Option<&Tensor>, new: &Tensor| -> Result<Tensor> {
                    let mut parts = Vec::with_capacity(3);
                    if let Some(p) = past.filter(|_| stored > 0) {
                        parts.push(p.narrow(2, 0, stored)?.contiguous()?);
                    }
                    parts.push(new.contiguous()?);
                    if room > 0 {
                        parts.push(Tensor::zeros((b, h, room, d), new.dtype(), new.device())?);
                    }
                    Tensor::cat(&parts, 2)
                };
                let (pk, pv) = match past {
                    Some((pk, pv)) => (Some(pk), Some(pv)),
                    None => (None, None),
                };
                self.layers[l] = Some((grow(pk, k)?, grow(pv, v)?));
            }
        }
        let (bk, bv) = self.layers[l].as_ref().expect("layer set above");
        Ok((bk.narrow(2, 0, need)?, bv.narrow(2, 0, need)?))
    }

    /// Keep only the first `n` positions of an unmoved, unpadded batch-1
    /// cache (a conversation that went another way after them).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if self.origin != 0 || self.key_mask.is_some() {
            candle_core::bail!("only an unmoved, unpadded cache can be cut");
        }
        // Positions past `n` are overwritten by the next append.
        self.len = self.len.min(n);
        Ok(())
    }

    /// The key mask over `total` positions as `(batch, 1, 1, total)`, if any
    /// row is padded; positions past the padding are never masked.
    fn key_mask(&mut self, total: usize, dtype: DType) -> Result<Option<Tensor>> {
        let Some(m) = &mut self.key_mask else {
            return Ok(None);
        };
        let (b, width) = m.dims2()?;
        if width < total {
            // Room for as many positions again: not a copy at every step.
            let zeros = Tensor::zeros((b, total.max(2 * width) - width), m.dtype(), m.device())?;
            *m = Tensor::cat(&[&*m, &zeros], 1)?;
        }
        Ok(Some(
            m.narrow(1, 0, total)?
                .reshape((b, 1, 1, total))?
                .to_dtype(dtype)?,
        ))
    }
}

#[derive(Debug, Clone)]
struct Layer {
    q_proj: Proj,
    k_proj: Proj,
    v_proj: Proj,
    o_proj: Proj,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    gate_proj: Proj,
    up_proj: Proj,
    down_proj: Proj,
    input_layernorm: Tensor,
    post_attention_layernorm: Tensor,
}

impl Layer {
    fn proj_mut(&mut self, target: LoraTarget) -> &mut Proj {
        match target {
            LoraTarget::QProj => &mut self.q_proj,
            LoraTarget::KProj => &mut self.k_proj,
            LoraTarget::VProj => &mut self.v_proj,
            LoraTarget::OProj => &mut self.o_proj,
            LoraTarget::GateProj => &mut self.gate_proj,
            LoraTarget::UpProj => &mut self.up_proj,
            LoraTarget::DownProj => &mut self.down_proj,
        }
    }

    /// Every projection with its module path inside the layer.
    fn projs(&self) -> [(&'static str, &Proj); 7] {
        [
            (LoraTarget::QProj.module(), &self.q_proj),
            (LoraTarget::KProj.module(), &self.k_proj),
            (LoraTarget::VProj.module(), &self.v_proj),
            (LoraTarget::OProj.module(), &self.o_proj),
            (LoraTarget::GateProj.module(), &self.gate_proj),
            (LoraTarget::UpProj.module(), &self.up_proj),
            (LoraTarget::DownProj.module(), &self.down_proj),
        ]
    }
}

/// A decoder-only transformer of one of the supported families.
#[derive(Debug, Clone)]
pub struct Transformer {
    cfg: ModelConfig,
    embed_tokens: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Linear,
    cos: Tensor,
    sin: Tensor,
    device: Device,
    /// Base weights are not trained (LoRA): their matrix products skip the
    /// weight gradient.
    frozen: bool,
    /// Positions a [`KvCache`] grows by ([`KV_RESERVE`] unless set).
    kv_reserve: usize,
    /// A decoding step's products of up to [`FEW_ROWS`] rows run
    /// [`rows_times_weight_t`] and its attention
    /// [`decode_attention::decode_attention`] (unless turned off).
    decode_kernels: bool,
}

fn weight(vb: &VarBuilder, out_dim: usize, in_dim: usize, name: &str) -> Result<Tensor> {
    vb.get_with_hints(
        (out_dim, in_dim),
        name,
        Init::Randn {
            mean: 0.0,
            stdev: INIT_STD,
        },
    )
}

fn linear(vb: VarBuilder, in_dim: usize, out_dim: usize, bias: bool) -> Result<Proj> {
    let w = weight(&vb, out_dim, in_dim, "weight")?;
    let b = if bias {
        Some(vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?)
    } else {
        None
    };
    Ok(Proj::new(Linear::new(w, b)))
}

fn norm_weight(vb: VarBuilder, dim: usize) -> Result<Tensor> {
    vb.get_with_hints(dim, "weight", Init::Const(1.0))
}

/// Inverse rope frequencies, with Llama 3 scaling when configured.
fn inv_freqs(cfg: &ModelConfig) -> Vec<f32> {
    let d = cfg.head_dim;
    let base: Vec<f32> = (0..d)
        .step_by(2)
        .map(|i| 1.0 / cfg.rope_theta.powf(i as f64 / d as f64) as f32)
        .collect();
    let Some(s) = &cfg.rope_scaling else {
        return base;
    };
    let orig = s.original_max_position_embeddings as f32;
    let low_wavelen = orig / s.low_freq_factor;
    let high_wavelen = orig / s.high_freq_factor;
    base.into_iter()
        .map(|f| {
            let wavelen = 2.0 * std::f32::consts::PI / f;
            if wavelen < high_wavelen {
                f
            } else if wavelen > low_wavelen {
                f / s.factor
            } else {
                let smooth =
                    (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * f / s.factor + smooth * f
            }
        })
        .collect()
}

/// Longest sequence the rope tables cover.
const MAX_ROPE_POSITIONS: usize = 32_768;

impl Transformer {
    /// Build the model; tensor names follow Hugging Face (`model.layers.0.self_attn.q_proj.weight`).
    /// With a `VarMap`-backed builder, missing weights are created (small random init).
    pub fn new(cfg: &ModelConfig, vb: VarBuilder) -> Result<Self> {
        let device = vb.device().clone();
        let m = vb.pp("model");
        let h = cfg.hidden_size;
        let embed = m.get_with_hints(
            (cfg.vocab_size, h),
            "embed_tokens.weight",
            Init::Randn {
                mean: 0.0,
                stdev: INIT_STD,
            },
        )?;
        let embed_tokens = Embedding::new(embed.clone(), h);
        let (nh, nkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = m.pp("layers").pp(i);
            let a = l.pp("self_attn");
            let mlp = l.pp("mlp");
            let qk_norm = cfg.arch == Arch::Qwen3;
            layers.push(Layer {
                q_proj: linear(a.pp("q_proj"), h, nh * hd, cfg.qkv_bias)?,
                k_proj: linear(a.pp("k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                v_proj: linear(a.pp("v_proj"), h, nkv * hd, cfg.qkv_bias)?,
                o_proj: linear(a.pp("o_proj"), nh * hd, h, false)?,
                q_norm: if qk_norm {
                    Some(norm_weight(a.pp("q_norm"), hd)?)
                } else {
                    None
                },
                k_norm: if qk_norm {
                    Some(norm_weight(a.pp("k_norm"), hd)?)
                } else {
                    None
                },
                gate_proj: linear(mlp.pp("gate_proj"), h, cfg.intermediate_size, false)?,
                up_proj: linear(mlp.pp("up_proj"), h, cfg.intermediate_size, false)?,
                down_proj: linear(mlp.pp("down_proj"), cfg.intermediate_size, h, false)?,
                input_layernorm: norm_weight(l.pp("input_layernorm"), h)?,
                post_attention_layernorm: norm_weight(l.pp("post_attention_layernorm"), h)?,
            });
        }
        let norm = norm_weight(m.pp("norm"), h)?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear::new(embed, None)
        } else {
            Linear::new(
                weight(&vb.pp("lm_head"), cfg.vocab_size, h, "weight")?,
                None,
            )
        };
        let positions = cfg.max_position_embeddings.clamp(1, MAX_ROPE_POSITIONS);
        let inv = inv_freqs(cfg);
        let inv = Tensor::from_vec(inv.clone(), (1, inv.len()), &device)?;
        let t = Tensor::arange(0u32, positions as u32, &device)?
            .to_dtype(DType::F32)?
            .reshape((positions, 1))?;
        let freqs = t.matmul(&inv)?;
        let dtype = vb.dtype();
        Ok(Self {
            cfg: cfg.clone(),
            embed_tokens,
            layers,
            norm,
            lm_head,
            cos: freqs.cos()?.to_dtype(dtype)?,
            sin: freqs.sin()?.to_dtype(dtype)?,
            device,
            frozen: false,
            kv_reserve: setting("ENDLESS_KV_RESERVE", KV_RESERVE, 1..=usize::MAX)?,
            decode_kernels: setting("ENDLESS_DECODE_KERNELS", 1, 0..=1)? == 1,
        })
    }

    /// Freeze every weight of the model and add LoRA adapters to the
    /// `lora.targets` projections of every layer, their matrices taken from
    /// (or created in) `vb` under the projections' own names
    /// (`model.layers.0.self_attn.q_proj.lora_A.weight`).
    pub fn attach_lora(&mut self, lora: &LoraConfig, vb: VarBuilder) -> Result<()> {
        let m = vb.pp("model");
        for (i, layer) in self.layers.iter_mut().enumerate() {
            for t in &lora.targets {
                let vb = m.pp("layers").pp(i).pp(t.module());
                layer.proj_mut(*t).attach(vb, lora.rank, lora.scale())?;
            }
        }
        self.frozen = true;
        Ok(())
    }

    /// A copy of every weight the model reads, by Hugging Face name, with
    /// adapters merged into their projections: what a model without
    /// adapters needs to compute the same function.
    pub fn merged_weights(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        out.insert(
            "model.embed_tokens.weight".to_string(),
            self.embed_tokens.embeddings().copy()?,
        );
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            for (module, proj) in l.projs() {
                out.insert(format!("{p}.{module}.weight"), proj.merged_weight()?);
                if let Some(b) = proj.bias() {
                    out.insert(format!("{p}.{module}.bias"), b.copy()?);
                }
            }
            let norms = [
                ("self_attn.q_norm", l.q_norm.as_ref()),
                ("self_attn.k_norm", l.k_norm.as_ref()),
                ("input_layernorm", Some(&l.input_layernorm)),
                (
                    "post_attention_layernorm",
                    Some(&l.post_attention_layernorm),
                ),
            ];
            for (name, w) in norms {
                if let Some(w) = w {
                    out.insert(format!("{p}.{name}.weight"), w.copy()?);
                }
            }
        }
        out.insert("model.norm.weight".to_string(), self.norm.copy()?);
        if !self.cfg.tie_word_embeddings {
            out.insert("lm_head.weight".to_string(), self.lm_head.weight().copy()?);
        }
        Ok(out)
    }

    /// Longest sequence the model takes in one pass (its rope table): the
    /// configured context, at most 32768 positions.
    pub fn max_positions(&self) -> usize {
        self.cfg
            .max_position_embeddings
            .clamp(1, MAX_ROPE_POSITIONS)
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Let key/value caches grow by `positions` at a time (at least 1): 1
    /// reallocates and copies the cache at every decoding step, more trades
    /// that copy for up to `positions - 1` unused positions per sequence.
    pub fn set_kv_reserve(&mut self, positions: usize) {
        self.kv_reserve = positions.max(1);
    }

    /// Whether decoding steps run the kernels of
    /// [`crate::model::kernels::few_rows`] and
    /// [`crate::model::kernels::decode_attention`] (the default) or
    /// candle's ops (to compare them).
    pub fn set_decode_kernels(&mut self, on: bool) {
        self.decode_kernels = on;
    }

    /// Rows up to which the sampling path's products skip gemm.
    fn few_rows(&self) -> usize {
        if self.decode_kernels {
            FEW_ROWS
        } else {
            0
        }
    }

    /// An empty cache for [`Transformer::forward_cached`].
    pub fn new_cache(&self) -> KvCache {
        KvCache::with_layers(self.layers.len())
    }

    /// A copy of an unmoved, unpadded `cache` whose positions start at
    /// `origin`: each key turned on by `origin` rotary positions (rotations
    /// compose, so this equals having run the tokens there).
    pub fn shift_cache(&self, cache: &KvCache, origin: usize) -> Result<KvCache> {
        if cache.origin != 0 || cache.key_mask.is_some() {
            candle_core::bail!("only an unmoved, unpadded cache can be shifted");
        }
        let mut out = cache.clone();
        out.origin = origin;
        out.len = origin + cache.len;
        if origin == 0 || cache.len == 0 {
            return Ok(out);
        }
        let half = self.cos.dim(1)?;
        let cos = self.cos.narrow(0, origin, 1)?;
        let sin = self.sin.narrow(0, origin, 1)?;
        let (cos, sin) = (
            cos.broadcast_as((cache.len, half))?.contiguous()?,
            sin.broadcast_as((cache.len, half))?.contiguous()?,
        );
        for l in 0..out.layers.len() {
            if let Some((k, v)) = cache.layer(l)? {
                let k = candle_nn::rotary_emb::rope(&k.contiguous()?, &cos, &sin)?;
                out.layers[l] = Some((k, v));
            }
        }
        Ok(out)
    }

    /// Differentiable forward pass over whole sequences: token ids `(batch, time)`
    /// to final (normed) hidden states `(batch, time, hidden)`. Pad on the right:
    /// the causal mask keeps padding from affecting earlier positions.
    pub fn hidden_states(&self, ids: &Tensor) -> Result<Tensor> {
        self.run(ids, None, false)
    }

    /// Sampling forward pass with fused ops: appends `ids` `(batch, time)` to the
    /// cache and returns hidden states `(batch, time, hidden)` for the new positions
    /// (run [`PREFILL_CHUNK`] positions at a time).
    pub fn forward_cached(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let t = ids.dim(1)?;
        if t <= PREFILL_CHUNK {
            return self.run(ids, Some(cache), true);
        }
        let mut parts = Vec::with_capacity(t.div_ceil(PREFILL_CHUNK));
        for start in (0..t).step_by(PREFILL_CHUNK) {
            let n = PREFILL_CHUNK.min(t - start);
            parts.push(self.run(&ids.narrow(1, start, n)?, Some(cache), true)?);
        }
        Tensor::cat(&parts, 1)
    }

    /// Bytes of key/value cache one position of one sequence takes.
    pub fn kv_bytes_per_position(&self) -> usize {
        let c = &self.cfg;
        c.num_hidden_layers
            * 2
            * c.num_key_value_heads
            * c.head_dim
            * self.cos.dtype().size_in_bytes()
    }

    /// [`Transformer::logits`] for sampling, without a backward pass (a
    /// decoding step's few rows through
    /// [`crate::model::kernels::few_rows`]).
    pub fn sampling_logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let mut dims = hidden.dims().to_vec();
        let d = dims.pop().unwrap_or(1);
        let rows = hidden.elem_count() / d.max(1);
        if rows > self.few_rows() {
            return self.logits(hidden);
        }
        let w = self.lm_head.weight();
        let y = rows_times_weight_t(&hidden.reshape((rows, d))?, w)?;
        dims.push(w.dim(0)?);
        y.reshape(dims)
    }

    /// `p` applied to `x`: the sampling path's product when `fused` (no
    /// backward pass), the differentiable one otherwise.
    fn project(&self, p: &Proj, x: &Tensor, fused: bool) -> Result<Tensor> {
        if fused {
            p.forward_sampling(x, self.few_rows())
        } else {
            p.forward(x)
        }
    }

    /// Project hidden states to vocabulary logits.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        if !self.frozen {
            return forward_linear(&self.lm_head, hidden);
        }
        let mut dims = hidden.dims().to_vec();
        let d = dims.pop().unwrap_or(1);
        let w = self.lm_head.weight();
        let y = frozen_matmul(&hidden.reshape(((), d))?, w)?;
        dims.push(w.dim(0)?);
        y.reshape(dims)
    }

    fn rms(&self, x: &Tensor, w: &Tensor, fused: bool) -> Result<Tensor> {
        let eps = self.cfg.rms_norm_eps as f32;
        if fused {
            candle_nn::ops::rms_norm(&x.contiguous()?, w, eps)
        } else {
            candle_nn::ops::rms_norm_slow(x, w, eps)
        }
    }

    /// The training forward pass with the fused differentiable kernels of
    /// [`crate::model::kernels::train_ops`] (one pass each for RMS norm and SwiGLU; the
    /// whole causal attention, rope included, as one op reading grouped key/value heads in place;
    /// projections as single 2-D matrix products).
    fn run_train(&self, ids: &Tensor) -> Result<Tensor> {
        let (_b, t) = ids.dims2()?;
        if t > self.cos.dim(0)? {
            candle_core::bail!(
                "sequence of {t} positions exceeds the rope table ({} positions)",
                self.cos.dim(0)?
            );
        }
        let rope = Rope::new(&self.cos.narrow(0, 0, t)?, &self.sin.narrow(0, 0, t)?)?;
        let eps = self.cfg.rms_norm_eps;
        let mut x = self.embed_tokens.forward(ids)?;
        for layer in &self.layers {
            let h = train_ops::rms_norm(&x, &layer.input_layernorm, eps)?;
            x = (self.attention_train(layer, &h, &rope)? + &x)?;
            let h = train_ops::rms_norm(&x, &layer.post_attention_layernorm, eps)?;
            let gate = layer.gate_proj.forward_2d(&h, self.frozen)?;
            let up = layer.up_proj.forward_2d(&h, self.frozen)?;
            let act = train_ops::swiglu(&gate, &up)?;
            x = (layer.down_proj.forward_2d(&act, self.frozen)? + &x)?;
        }
        train_ops::rms_norm(&x, &self.norm, eps)
    }

    fn attention_train(&self, layer: &Layer, x: &Tensor, rope: &Rope) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (nh, nkv, hd) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        let eps = self.cfg.rms_norm_eps;
        let f = self.frozen;
        let mut q = layer.q_proj.forward_2d(x, f)?.reshape((b, t, nh, hd))?;
        let mut k = layer.k_proj.forward_2d(x, f)?.reshape((b, t, nkv, hd))?;
        let v = layer.v_proj.forward_2d(x, f)?.reshape((b, t, nkv, hd))?;
        if let Some(w) = &layer.q_norm {
            q = train_ops::rms_norm(&q, w, eps)?;
        }
        if let Some(w) = &layer.k_norm {
            k = train_ops::rms_norm(&k, w, eps)?;
        }
        let out = causal_attention(&q, &k, &v, rope, 1.0 / (hd as f64).sqrt())?;
        layer.o_proj.forward_2d(&out, f)
    }

    fn run(&self, ids: &Tensor, mut cache: Option<&mut KvCache>, fused: bool) -> Result<Tensor> {
        if !fused && cache.is_none() && fused_train_ops() {
            return self.run_train(ids);
        }
        let (_b, t) = ids.dims2()?;
        let offset = cache.as_ref().map(|c| c.len).unwrap_or(0);
        if offset + t > self.cos.dim(0)? {
            candle_core::bail!(
                "sequence of {} positions exceeds the rope table ({} positions)",
                offset + t,
                self.cos.dim(0)?
            );
        }
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        // Rotary positions start at `offset`; the keys attended over are the
        // `past` cached ones and the `t` new ones.
        let past = cache.as_ref().map(|c| c.stored()).unwrap_or(0);
        let total = past + t;
        let dtype = self.cos.dtype();
        let causal = if t > 1 {
            let m: Vec<f32> = (0..t)
                .flat_map(|i| {
                    (0..total).map(move |j| if j > i + past { f32::NEG_INFINITY } else { 0.0 })
                })
                .collect();
            Some(Tensor::from_vec(m, (t, total), &self.device)?.to_dtype(dtype)?)
        } else {
            None
        };
        let keys = match cache.as_mut() {
            Some(c) => c.key_mask(total, dtype)?,
            None => None,
        };
        let mask = match (causal, keys) {
            (Some(c), Some(k)) => Some(k.broadcast_add(&c)?),
            (c, k) => c.or(k),
        };
        let mut x = self.embed_tokens.forward(ids)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let residual = &x;
            let h = self.rms(&x, &layer.input_layernorm, fused)?;
            let layer_cache = cache.as_deref_mut().map(|c| (c, i));
            let attn = self.attention(layer, &h, &cos, &sin, mask.as_ref(), layer_cache, fused)?;
            x = (attn + residual)?;
            let residual = &x;
            let h = self.rms(&x, &layer.post_attention_layernorm, fused)?;
            let gate = self.project(&layer.gate_proj, &h, fused)?.silu()?;
            let up = self.project(&layer.up_proj, &h, fused)?;
            let mlp = self.project(&layer.down_proj, &(gate * up)?, fused)?;
            x = (mlp + residual)?;
        }
        if let Some(c) = cache {
            c.appended(t);
        }
        self.rms(&x, &self.norm, fused)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        layer: &Layer,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        cache: Option<(&mut KvCache, usize)>,
        fused: bool,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (nh, nkv, hd) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        let mut q = self
            .project(&layer.q_proj, x, fused)?
            .reshape((b, t, nh, hd))?;
        let mut k = self
            .project(&layer.k_proj, x, fused)?
            .reshape((b, t, nkv, hd))?;
        let v = self
            .project(&layer.v_proj, x, fused)?
            .reshape((b, t, nkv, hd))?;
        if let Some(w) = &layer.q_norm {
            q = self.rms(&q, w, fused)?;
        }
        if let Some(w) = &layer.k_norm {
            k = self.rms(&k, w, fused)?;
        }
        let q = q.transpose(1, 2)?.contiguous()?;
        let k = k.transpose(1, 2)?.contiguous()?;
        let v = v.transpose(1, 2)?.contiguous()?;
        let (q, k) = if fused {
            (
                candle_nn::rotary_emb::rope(&q, cos, sin)?,
                candle_nn::rotary_emb::rope(&k, cos, sin)?,
            )
        } else {
            (
                candle_nn::rotary_emb::rope_slow(&q, cos, sin)?,
                candle_nn::rotary_emb::rope_slow(&k, cos, sin)?,
            )
        };
        // `(cache, layer index)`: the keys and values so far, the new ones included.
        let (k, v) = match cache {
            Some((c, l)) => c.append(l, &k, &v, self.kv_reserve)?,
            None => (k, v),
        };
        if fused && t == 1 && self.decode_kernels && decode_attention::fits(&q, &k, &v) {
            // A decoding step: the mask, if any, is the padding keys'.
            let keys = mask.map(|m| m.reshape((b, k.dim(2)?))).transpose()?;
            let scale = 1.0 / (hd as f32).sqrt();
            let out = decode_attention::decode_attention(&q, &k, &v, keys.as_ref(), scale)?;
            return self.project(&layer.o_proj, &out, fused);
        }
        // The query heads that share a key/value head (`groups` consecutive
        // ones) attend as one matrix of `groups × t` rows: no copy of the
        // keys and values per query head.
        let groups = nh / nkv;
        let total = k.dim(2)?;
        let scale = 1.0 / (hd as f64).sqrt();
        let q = q.reshape((b, nkv, groups * t, hd))?;
        let mut att = (q.matmul(&k.t()?)? * scale)?;
        if let Some(m) = mask {
            // `(t, total)`, or `(b, 1, t or 1, total)`: one more axis for the groups.
            let m = if m.rank() == 4 {
                m.unsqueeze(1)?
            } else {
                m.clone()
            };
            att = att
                .reshape((b, nkv, groups, t, total))?
                .broadcast_add(&m)?
                .reshape((b, nkv, groups * t, total))?;
        }
        let att = if fused {
            candle_nn::ops::softmax_last_dim(&att)?
        } else {
            candle_nn::ops::softmax(&att, D::Minus1)?
        };
        let out = att
            .matmul(&v)?
            .reshape((b, nh, t, hd))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, nh * hd))?;
        self.project(&layer.o_proj, &out, fused)
    }
}

/// Whether the training path uses [`crate::model::kernels::train_ops`] (the default); set
/// `ENDLESS_COMPOSED_TRAIN_OPS=1` to run it with candle's composed ops instead,
/// to compare speed or check the kernels.
fn fused_train_ops() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("ENDLESS_COMPOSED_TRAIN_OPS").is_none())
}

/// Every weight the model reads, with its shape, in Hugging Face naming.
pub fn weight_shapes(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
    );
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let mut add = |n: &str, s: Vec<usize>| out.push((format!("{p}.{n}"), s));
        add("self_attn.q_proj.weight", vec![q, h]);
        add("self_attn.k_proj.weight", vec![kv, h]);
        add("self_attn.v_proj.weight", vec![kv, h]);
        add("self_attn.o_proj.weight", vec![h, q]);
        if cfg.qkv_bias {
            add("self_attn.q_proj.bias", vec![q]);
            add("self_attn.k_proj.bias", vec![kv]);
            add("self_attn.v_proj.bias", vec![kv]);
        }
        if cfg.arch == Arch::Qwen3 {
            add("self_attn.q_norm.weight", vec![cfg.head_dim]);
            add("self_attn.k_norm.weight", vec![cfg.head_dim]);
        }
        add("mlp.gate_proj.weight", vec![i, h]);
        add("mlp.up_proj.weight", vec![i, h]);
        add("mlp.down_proj.weight", vec![h, i]);
        add("input_layernorm.weight", vec![h]);
        add("post_attention_layernorm.weight", vec![h]);
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![v, h]));
    }
    out
}
