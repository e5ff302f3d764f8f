//! The GGUF `llama` architecture (Llama, SmolLM, Mistral) run with candle's
//! quantized matmuls, batched: the same maths as candle-transformers'
//! `quantized_llama`, but with a KV cache this crate can reach, so that a
//! prompt run once is copied to every sequence of a batch and finished
//! sequences leave it. Attention is grouped-query without copying the keys
//! and values to every query head, and only last-position logits are computed.

use crate::model::kernels::q4_1::QuantMatmul;
use crate::model::kernels::{decode_attention, with_spinning_team};
use crate::model::models::transformer::{KvCache, KV_RESERVE};
use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Result, Tensor};
use candle_nn::Embedding;

/// Longest sequence the rope tables cover.
const MAX_SEQ_LEN: usize = 4096;

/// A quantized weight matrix: `Q4_1` and `Q8_0` through this crate's SIMD
/// kernels ([`QuantMatmul`]: candle's `Q4_1` one is scalar), other types
/// through candle.
enum Linear {
    Simd(QuantMatmul),
    Candle(QMatMul),
}

impl Linear {
    fn new(t: QTensor) -> Result<Self> {
        Ok(match QuantMatmul::from_qtensor(&t)? {
            Some(q) => Self::Simd(q),
            None => Self::Candle(QMatMul::from_qtensor(t)?),
        })
    }

    /// The output layer: as [`Self::new`], but `Q8_0` weights meet the
    /// activations in f32 (see [`QuantMatmul::with_f32_activations`]).
    fn output(t: QTensor) -> Result<Self> {
        Ok(match Self::new(t)? {
            Self::Simd(q) => Self::Simd(q.with_f32_activations()),
            other => other,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Simd(q) => q.forward(x),
            Self::Candle(q) => q.forward(x),
        }
    }
}

/// Projections of one input: stacked into one product where this crate's
/// kernels run them all ([`QuantMatmul::stack_rows`]), else apart.
enum Projections {
    Stacked(QuantMatmul, Vec<usize>),
    Apart(Vec<Linear>),
}

impl Projections {
    fn new(parts: Vec<Linear>) -> Self {
        if parts.iter().any(|p| matches!(p, Linear::Candle(_))) {
            return Self::Apart(parts);
        }
        let simd: Vec<QuantMatmul> = parts
            .into_iter()
            .filter_map(|p| match p {
                Linear::Simd(q) => Some(q),
                Linear::Candle(_) => None,
            })
            .collect();
        let widths = simd.iter().map(QuantMatmul::out_dim).collect();
        match QuantMatmul::stack_rows(simd) {
            Ok(q) => Self::Stacked(q, widths),
            Err(apart) => Self::Apart(apart.into_iter().map(Linear::Simd).collect()),
        }
    }

    /// Each projection of `x`, in the order given to [`Self::new`].
    fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        match self {
            Self::Apart(parts) => parts.iter().map(|p| p.forward(x)).collect(),
            Self::Stacked(q, widths) => {
                let y = q.forward(x)?;
                let last = y.rank() - 1;
                let mut at = 0;
                widths
                    .iter()
                    .map(|&w| {
                        let part = y.narrow(last, at, w);
                        at += w;
                        part
                    })
                    .collect()
            }
        }
    }
}

struct Layer {
    /// Queries, keys, values.
    qkv: Projections,
    wo: Linear,
    /// Gate, up.
    gate_up: Projections,
    w_down: Linear,
    attn_norm: Tensor,
    ffn_norm: Tensor,
}

/// A quantized llama network with its KV cache.
pub struct LlamaGguf {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Linear,
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
    eps: f32,
    cos: Tensor,
    sin: Tensor,
    /// Keys and values, written in place as positions come.
    cache: KvCache,
}

fn md_u32(ct: &Content, key: &str) -> Result<usize> {
    match ct.metadata.get(key) {
        Some(v) => Ok(v.to_u32()? as usize),
        None => candle_core::bail!("cannot find {key} in the GGUF metadata"),
    }
}

impl LlamaGguf {
    /// Read the weights of a `general.architecture = llama` GGUF file.
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        if ct
            .metadata
            .get("llama.expert_count")
            .and_then(|v| v.to_u32().ok())
            .unwrap_or(0)
            > 1
        {
            candle_core::bail!("mixture-of-experts llama models are not supported");
        }
        let n_head = md_u32(&ct, "llama.attention.head_count")?;
        let n_kv_head = md_u32(&ct, "llama.attention.head_count_kv")?;
        let n_layer = md_u32(&ct, "llama.block_count")?;
        let hidden = md_u32(&ct, "llama.embedding_length")?;
        let rope_dim = md_u32(&ct, "llama.rope.dimension_count")?;
        let eps = match ct.metadata.get("llama.attention.layer_norm_rms_epsilon") {
            Some(v) => v.to_f32()?,
            None => candle_core::bail!("cannot find llama.attention.layer_norm_rms_epsilon"),
        };
        let freq_base = ct
            .metadata
            .get("llama.rope.freq_base")
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(10_000.0);
        let head_dim = hidden / n_head;
        if n_head % n_kv_head != 0 || rope_dim != head_dim {
            candle_core::bail!(
                "unsupported attention shape: {n_head} heads, {n_kv_head} kv heads, rope over {rope_dim} of {head_dim}"
            );
        }
        let theta: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1.0 / freq_base.powf(i as f32 / head_dim as f32))
            .collect();
        let theta = Tensor::new(theta.as_slice(), device)?;
        let idx = Tensor::arange(0, MAX_SEQ_LEN as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((MAX_SEQ_LEN, 1))?
            .matmul(&theta.reshape((1, theta.elem_count()))?)?;
        let dense = |t: QTensor| t.dequantize(device);
        let embed_q = ct.tensor(reader, "token_embd.weight", device)?;
        let embed = Embedding::new(embed_q.dequantize(device)?, hidden);
        let norm = dense(ct.tensor(reader, "output_norm.weight", device)?)?;
        let output = match ct.tensor(reader, "output.weight", device) {
            Ok(t) => t,
            Err(_) => embed_q,
        };
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let mut q = |name: &str| -> Result<Linear> {
                Linear::new(ct.tensor(reader, &format!("blk.{i}.{name}.weight"), device)?)
            };
            let qkv = Projections::new(vec![q("attn_q")?, q("attn_k")?, q("attn_v")?]);
            let wo = q("attn_output")?;
            let gate_up = Projections::new(vec![q("ffn_gate")?, q("ffn_up")?]);
            layers.push(Layer {
                qkv,
                wo,
                gate_up,
                w_down: q("ffn_down")?,
                attn_norm: dense(ct.tensor(
                    reader,
                    &format!("blk.{i}.attn_norm.weight"),
                    device,
                )?)?,
                ffn_norm: dense(ct.tensor(reader, &format!("blk.{i}.ffn_norm.weight"), device)?)?,
            });
        }
        Ok(Self {
            embed,
            cache: KvCache::with_layers(layers.len()),
            layers,
            norm,
            output: Linear::output(output)?,
            n_head,
            n_kv_head,
            head_dim,
            eps,
            cos: idx.cos()?,
            sin: idx.sin()?,
        })
    }

    /// Forget the KV cache.
    pub fn clear_kv_cache(&mut self) {
        self.cache = KvCache::with_layers(self.layers.len());
    }

    /// Copy a batch-1 KV cache to `n` rows.
    pub fn repeat_batch(&mut self, n: usize) -> Result<()> {
        self.cache.repeat_batch(n)
    }

    /// Keep only the batch rows `rows` of the KV cache.
    pub fn retain(&mut self, rows: &[usize]) -> Result<()> {
        self.cache.retain(rows)
    }

    /// Append `ids` `(batch, time)` after the cached positions; logits of the
    /// last position of each row, `(batch, vocab)`.
    pub fn forward(&mut self, ids: &Tensor) -> Result<Tensor> {
        // A decoding step's ~150 short parallel loops go to a team of
        // rayon's threads that spins between them (no wake-up per loop).
        // Prompts stay on rayon: their attention is a candle gemm, which a
        // spinning team would leave to one thread (and a team measured no
        // faster on a 47-token prompt).
        if ids.dim(1)? == 1 {
            return with_spinning_team(|| self.forward_in_pool(ids, false));
        }
        // On one of rayon's workers, which then takes part in every matmul's
        // parallel loop: from outside the pool each matmul would wait for
        // sleeping workers to wake and finish.
        rayon::scope(|_| self.forward_in_pool(ids, false))
    }

    /// Like [`LlamaGguf::forward`], but the logits of every position,
    /// `(batch, time, vocab)` (for numerics checks: teacher forcing).
    pub fn forward_all(&mut self, ids: &Tensor) -> Result<Tensor> {
        rayon::scope(|_| self.forward_in_pool(ids, true))
    }

    fn forward_in_pool(&mut self, ids: &Tensor, all: bool) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let offset = self.cache.len();
        if offset + t > MAX_SEQ_LEN {
            candle_core::bail!("sequence of {} positions exceeds {MAX_SEQ_LEN}", offset + t);
        }
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        let groups = self.n_head / self.n_kv_head;
        // Causal mask over (groups * t query rows, offset + t keys): rows are
        // ordered (group, position) to match the grouped-query layout below.
        let mask = if t > 1 {
            let total = offset + t;
            let m: Vec<f32> = (0..groups * t)
                .flat_map(|r| {
                    let i = r % t;
                    (0..total).map(move |j| {
                        if j > i + offset {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                })
                .collect();
            Some(Tensor::from_vec(m, (groups * t, total), ids.device())?)
        } else {
            None
        };
        let (nh, nkv, hd) = (self.n_head, self.n_kv_head, self.head_dim);
        let scale = 1.0 / (hd as f64).sqrt();
        let mut x = self.embed.forward(ids)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, self.eps)?;
            let [q, k, v] = <[Tensor; 3]>::try_from(layer.qkv.forward(&h)?)
                .map_err(|_| candle_core::Error::Msg("three projections expected".into()))?;
            let q = q.reshape((b, t, nh, hd))?;
            let k = k.reshape((b, t, nkv, hd))?;
            let v = v.reshape((b, t, nkv, hd))?;
            let q = candle_nn::rotary_emb::rope_i(&q.transpose(1, 2)?.contiguous()?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope_i(&k.transpose(1, 2)?.contiguous()?, &cos, &sin)?;
            let v = v.transpose(1, 2)?.contiguous()?;
            let (k, v) = self.cache.append(l, &k, &v, KV_RESERVE)?;
            let y = if t == 1 && decode_attention::fits(&q, &k, &v) {
                // A decoding step: the cached keys and values read in place.
                decode_attention::decode_attention(&q, &k, &v, None, scale as f32)?
            } else {
                // Grouped-query attention: the query heads sharing a kv head are
                // stacked as rows, (b, kv_heads, groups * t, head_dim).
                let q = q.reshape((b, nkv, groups * t, hd))?;
                let mut att = (q.matmul(&k.t()?)? * scale)?;
                if let Some(m) = &mask {
                    att = att.broadcast_add(m)?;
                }
                let att = candle_nn::ops::softmax_last_dim(&att)?;
                att.matmul(&v)?
                    .reshape((b, nh, t, hd))?
                    .transpose(1, 2)?
                    .reshape((b, t, nh * hd))?
            };
            x = (layer.wo.forward(&y)? + x)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, self.eps)?;
            let [gate, up] = <[Tensor; 2]>::try_from(layer.gate_up.forward(&h)?)
                .map_err(|_| candle_core::Error::Msg("two projections expected".into()))?;
            let gate = candle_nn::ops::silu(&gate)?;
            x = (layer.w_down.forward(&(gate * up)?)? + x)?;
        }
        self.cache.appended(t);
        if all {
            let hidden = x.dim(2)?;
            let x = candle_nn::ops::rms_norm(&x.reshape((b * t, hidden))?, &self.norm, self.eps)?;
            let logits = self.output.forward(&x)?;
            let vocab = logits.dim(1)?;
            return logits.reshape((b, t, vocab));
        }
        let last = x.i((.., t - 1, ..))?.contiguous()?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, self.eps)?;
        self.output.forward(&last)
    }
}
