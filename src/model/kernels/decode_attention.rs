//! Attention of a decoding step (one new position per sequence) over the
//! key/value cache, read in place, forward only.
//!
//! Composed from candle ops, a step's scores are one gemm call per sequence
//! and key/value head, and gemm packs the cached keys into a fresh buffer at
//! every call: with 16 sequences over 1,024 cached positions that packing was
//! a fifth of the decoding time of the replication's policy. Here each
//! query head's scores are dot products with the cached keys where they lie,
//! then the softmax and the weighted sum of values, split over the threads
//! by sequence and head.

use super::columns::for_chunks;
use super::few_rows::dot;
use super::train_ops::{exp_nonpositive, lane_max};
use candle_core::{DType, Layout, Result, Storage, Tensor};

/// Multiply-adds below which the step runs on the calling thread.
const SERIAL_WORK: usize = 1 << 15;

/// Whether [`decode_attention`] can run these operands (f32 on the CPU).
pub fn fits(q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
    [q, k, v]
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
}

/// `softmax(scale · q kᵀ + mask) v` for `q` `(batch, heads, 1, head_dim)`
/// over `k`, `v` `(batch, kv_heads, positions, head_dim)` (any strides with
/// `head_dim` contiguous: views of the cache's buffers), query head `h`
/// reading key/value head `h / (heads / kv_heads)`; `mask` `(batch,
/// positions)` is added to the scores. Returns `(batch, 1, heads * head_dim)`.
pub fn decode_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f32,
) -> Result<Tensor> {
    let (b, nh, one, hd) = q.dims4()?;
    let (kb, nkv, total, khd) = k.dims4()?;
    if one != 1 || kb != b || khd != hd || v.dims() != k.dims() || nkv == 0 || nh % nkv != 0 {
        candle_core::bail!(
            "decode attention: queries {:?}, keys {:?} and values {:?} do not fit together",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    super::ran::record(
        super::ran::Kernel::DecodeAttention,
        super::level::CpuLevel::Portable,
    );
    let q = q.contiguous()?;
    let mask = match mask {
        Some(m) if m.dims() != [b, total] => {
            candle_core::bail!("decode attention: mask {:?} for {b} x {total}", m.dims())
        }
        Some(m) => Some(m.contiguous()?),
        None => None,
    };
    let (qs, ql) = q.storage_and_layout();
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let ms = mask.as_ref().map(|m| m.storage_and_layout());
    let q = f32s(&qs, ql)?;
    let (keys, k_strides) = (f32s(&ks, kl)?, strides(kl)?);
    let (values, v_strides) = (f32s(&vs, vl)?, strides(vl)?);
    let mask = match &ms {
        Some((s, l)) => Some(f32s(s, l)?),
        None => None,
    };
    let groups = nh / nkv;
    let mut out = vec![0f32; b * nh * hd];
    let head = |task: usize, out: &mut [f32]| {
        let (row, h) = (task / nh, task % nh);
        let kv = h / groups;
        let query = &q[task * hd..(task + 1) * hd];
        let at = |s: &[usize; 3], j: usize| row * s[0] + kv * s[1] + j * s[2];
        let mut scores: Vec<f32> = (0..total)
            .map(|j| {
                let key = &keys[at(&k_strides, j)..][..hd];
                let m = mask.map_or(0.0, |m| m[row * total + j]);
                scale * dot(query, key) + m
            })
            .collect();
        let max = lane_max(&scores);
        let mut sum = 0.0;
        for s in &mut scores {
            *s = exp_nonpositive(*s - max);
            sum += *s;
        }
        out.fill(0.0);
        for (j, p) in scores.iter().enumerate() {
            let value = &values[at(&v_strides, j)..][..hd];
            for (o, x) in out.iter_mut().zip(value) {
                *o += p * x;
            }
        }
        for o in out.iter_mut() {
            *o /= sum;
        }
    };
    for_chunks(&mut out, hd, b * nh * total * hd >= SERIAL_WORK, head);
    Tensor::from_vec(out, (b, 1, nh * hd), k.device())
}

/// The f32 data a CPU tensor's layout starts at (to its storage's end).
fn f32s<'a>(s: &'a Storage, l: &Layout) -> Result<&'a [f32]> {
    match s {
        Storage::Cpu(c) => Ok(&c.as_slice::<f32>()?[l.start_offset()..]),
        _ => candle_core::bail!("decode attention: tensors must be on the CPU"),
    }
}

/// Strides of the batch, head and position axes of a 4-D layout whose last
/// axis is contiguous.
fn strides(l: &Layout) -> Result<[usize; 3]> {
    match *l.stride() {
        [b, h, p, 1] => Ok([b, h, p]),
        _ => candle_core::bail!("decode attention: head_dim must be contiguous"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::max_diff;
    use candle_core::{Device, D};

    /// Against candle's composed ops, on keys and values that are views of
    /// larger buffers (as the cache's are), with padding keys masked.
    #[test]
    fn agrees_with_composed_attention_on_cache_views() {
        let dev = Device::Cpu;
        let (b, nh, nkv, hd, total, cap) = (3, 6, 2, 32, 37, 64);
        let q = Tensor::randn(0f32, 1.0, (b, nh, 1, hd), &dev).unwrap();
        let kbuf = Tensor::randn(0f32, 1.0, (b, nkv, cap, hd), &dev).unwrap();
        let vbuf = Tensor::randn(0f32, 1.0, (b, nkv, cap, hd), &dev).unwrap();
        let (k, v) = (
            kbuf.narrow(2, 0, total).unwrap(),
            vbuf.narrow(2, 0, total).unwrap(),
        );
        // Row 1 starts with 5 padding keys.
        let mask: Vec<f32> = (0..b * total)
            .map(|i| {
                if i / total == 1 && i % total < 5 {
                    -1e9
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (b, total), &dev).unwrap();
        let scale = 1.0 / (hd as f32).sqrt();
        let ours = decode_attention(&q, &k, &v, Some(&mask), scale).unwrap();
        // Reference: each query head against its key/value head.
        let groups = nh / nkv;
        let idx: Vec<u32> = (0..nh).map(|h| (h / groups) as u32).collect();
        let idx = Tensor::new(idx.as_slice(), &dev).unwrap();
        let k = k.contiguous().unwrap().index_select(&idx, 1).unwrap();
        let v = v.contiguous().unwrap().index_select(&idx, 1).unwrap();
        let att = (q.matmul(&k.t().unwrap()).unwrap() * scale as f64).unwrap();
        let att = att
            .broadcast_add(&mask.reshape((b, 1, 1, total)).unwrap())
            .unwrap();
        let p = candle_nn::ops::softmax(&att, D::Minus1).unwrap();
        let reference = p.matmul(&v).unwrap().reshape((b, 1, nh * hd)).unwrap();
        let diff = max_diff(&ours, &reference);
        assert!(diff < 1e-5, "max diff {diff}");
    }

    #[test]
    fn mismatched_shapes_are_an_error() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((2, 4, 1, 8), DType::F32, &dev).unwrap();
        let k = Tensor::zeros((2, 3, 5, 8), DType::F32, &dev).unwrap();
        let e = decode_attention(&q, &k, &k, None, 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not fit"), "{e}");
    }
}
