//! Fused CPU kernels with backward passes, for the training path of
//! [`crate::model::Transformer`].
//!
//! candle's fused `softmax_last_dim`, `rms_norm` and `rope` have no backward
//! pass, and their composed equivalents cost several full passes over memory
//! (and build large graphs): the causal-mask add and the softmax of the
//! attention scores dominated a PPO step. `swiglu` fuses the MLP's
//! `silu(gate) * up`, whose composed backward takes about ten passes.
//! `log_softmax_pick` gives the policy loss the log-probability of each
//! sampled token and the entropy of each row of logits without the
//! vocabulary-wide log-softmax tensor (about a dozen passes over
//! `(tokens, vocab)` floats forward and back). These ops run one pass forward and one backward,
//! on f32 CPU tensors; anything else (another dtype, a GPU) takes the
//! composed, differentiable path.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape};
use candle_core::{Tensor, D};
use rayon::prelude::*;
use std::sync::Arc;

/// Rows per rayon task: below this much work, threads cost more than they save.
const MIN_PAR_ELEMS: usize = 16 * 1024;

pub(super) fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let all = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&all[a..b]),
        None => candle_core::bail!("fused training op: input must be contiguous"),
    }
}

pub(super) fn fused_ok(xs: &[&Tensor]) -> bool {
    xs.iter()
        .all(|x| x.device().is_cpu() && x.dtype() == DType::F32)
}

/// Apply `f(row_index, row_out)` to each `n`-long row of `out`, in parallel when large.
fn rows_mut(out: &mut [f32], n: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    rows_mut_reading(out, n, n, f)
}

/// [`rows_mut`] for rows of `width` outputs that each read `reads` inputs:
/// in parallel when the reads are large.
fn rows_mut_reading(
    out: &mut [f32],
    width: usize,
    reads: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    let (width, reads) = (width.max(1), reads.max(1));
    if out.len() / width * reads >= 2 * MIN_PAR_ELEMS {
        let per = (MIN_PAR_ELEMS / reads).max(1);
        out.par_chunks_mut(width)
            .with_min_len(per)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        out.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

// ---------------------------------------------------------------------------
// Causal softmax of attention scores.

/// `e^x` for `x <= 0` (softmax after subtracting the maximum), written so that
/// the compiler vectorises it: `2^k * e^r` with `|r| <= ln 2 / 2` and a
/// degree-6 Taylor polynomial (relative error below 2e-7); 0 below -87.
/// `2^k` is built from the rounding sum's own bits (integer adds and a
/// shift), not through a float-to-int cast, whose saturating semantics
/// kept the whole loop scalar.
#[inline(always)]
pub(super) fn exp_nonpositive(x_in: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Round to nearest through the float mantissa (1.5 * 2^23): the sum's
    // bits are `0x4B40_0000 + k` for the small integer `k`.
    const MAGIC: f32 = 12_582_912.0;
    let under = x_in < -87.0;
    let x = x_in.max(-87.0);
    let rounded = x * LOG2E + MAGIC;
    let k = rounded - MAGIC;
    let r = x - k * LN2_HI - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // `(k + 127) << 23`: the shift drops the magic bits above the mantissa.
    let scale = f32::from_bits(rounded.to_bits().wrapping_add(127) << 23);
    if x_in.is_nan() {
        // Keep NaN visible (the trainer stops on a non-finite loss).
        f32::NAN
    } else if under {
        0.0
    } else {
        p * scale
    }
}

/// Maximum with eight independent lanes (vectorisable); NaNs are skipped
/// like `f32::max` skips them, and an empty slice gives -inf.
pub(super) fn lane_max(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    acc.iter().fold(tail, |m, &x| m.max(x))
}

/// `max(x * scale)` over `xs`: through [`lane_max`] when `scale >= 0`
/// (where scaling keeps the order).
pub(super) fn scaled_max(xs: &[f32], scale: f32) -> f32 {
    if scale >= 0.0 {
        lane_max(xs) * scale
    } else {
        xs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x * scale))
    }
}

/// Sum with eight independent accumulators (vectorisable).
pub(super) fn lane_sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = v.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `softmax(scale * x)` over the last dimension (keys) with a causal mask: the
/// query of row `r` sits at position `r % queries + offset` and sees keys up to
/// that position. Masked entries are 0.
struct CausalSoftmax {
    scale: f32,
    queries: usize,
    offset: usize,
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(s, l)?;
        let n = l.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; x.len()];
        let (scale, q, off) = (self.scale, self.queries, self.offset);
        rows_mut(&mut out, n, |r, y| {
            let xr = &x[r * n..(r + 1) * n];
            let upto = ((r % q) + off + 1).min(n);
            let max = scaled_max(&xr[..upto], scale);
            for (o, &v) in y[..upto].iter_mut().zip(&xr[..upto]) {
                *o = exp_nonpositive(v * scale - max);
            }
            let inv = 1.0 / lane_sum(&y[..upto]);
            for o in &mut y[..upto] {
                *o *= inv;
            }
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        Ok(Some(res.apply_op2_no_bwd(
            &g,
            &SoftmaxBackward { scale: self.scale },
        )?))
    }
}

/// `scale * y * (g - sum(g * y))` per row.
struct SoftmaxBackward {
    scale: f32,
}

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (y, g) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let n = l1.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; y.len()];
        let scale = self.scale;
        rows_mut(&mut out, n, |r, o| {
            let (yr, gr) = (&y[r * n..(r + 1) * n], &g[r * n..(r + 1) * n]);
            let dot: f32 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
            for ((o, &yv), &gv) in o.iter_mut().zip(yr).zip(gr) {
                *o = scale * yv * (gv - dot);
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Differentiable `softmax(scale * x + causal mask)` over the last dimension of
/// attention scores `(.., rows, keys)`; row `r` is the query at position
/// `r % queries + offset`.
pub fn causal_softmax(x: &Tensor, scale: f64, queries: usize, offset: usize) -> Result<Tensor> {
    let keys = x.dim(D::Minus1)?;
    if fused_ok(&[x]) {
        super::ran::record(
            super::ran::Kernel::CausalSoftmax,
            super::level::CpuLevel::Portable,
        );
        return x.contiguous()?.apply_op1(CausalSoftmax {
            scale: scale as f32,
            queries,
            offset,
        });
    }
    let rows = x.elem_count() / keys;
    let mask: Vec<f32> = (0..rows)
        .flat_map(|r| {
            let pos = r % queries + offset;
            (0..keys).map(move |j| if j > pos { f32::NEG_INFINITY } else { 0.0 })
        })
        .collect();
    let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
    candle_nn::ops::softmax(&((x * scale)? + mask)?, D::Minus1)
}

// ---------------------------------------------------------------------------
// RMS norm.

struct RmsNorm {
    eps: f32,
}

fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
    1.0 / (ms + eps).sqrt()
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "rms-norm-train"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let n = w.len();
        let mut out = vec![0f32; x.len()];
        rows_mut(&mut out, n, |r, y| {
            let xr = &x[r * n..(r + 1) * n];
            let inv = inv_rms(xr, self.eps);
            for ((o, &xv), &wv) in y.iter_mut().zip(xr).zip(w) {
                *o = xv * inv * wv;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let g = grad.contiguous()?;
        let gx = x.apply_op3_no_bwd(w, &g, &RmsNormBackwardX { eps: self.eps })?;
        let gw = x.apply_op2_no_bwd(&g, &RmsNormBackwardW { eps: self.eps })?;
        Ok((Some(gx), Some(gw)))
    }
}

/// `dx = r * (g w) - x r^3 mean((g w) x)` per row, `r = 1 / rms(x)`.
struct RmsNormBackwardX {
    eps: f32,
}

impl CustomOp3 for RmsNormBackwardX {
    fn name(&self) -> &'static str {
        "rms-norm-backward-x"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, g) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let n = w.len();
        let mut out = vec![0f32; x.len()];
        rows_mut(&mut out, n, |r, o| {
            let (xr, gr) = (&x[r * n..(r + 1) * n], &g[r * n..(r + 1) * n]);
            let inv = inv_rms(xr, self.eps);
            let dot: f32 = xr.iter().zip(gr).zip(w).map(|((a, b), c)| a * b * c).sum();
            let k = inv * inv * inv * dot / n as f32;
            for (((o, &xv), &gv), &wv) in o.iter_mut().zip(xr).zip(gr).zip(w) {
                *o = inv * gv * wv - xv * k;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `dw = sum over rows of g x r`.
struct RmsNormBackwardW {
    eps: f32,
}

impl CustomOp2 for RmsNormBackwardW {
    fn name(&self) -> &'static str {
        "rms-norm-backward-w"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, g) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let n = l1.dims().last().copied().unwrap_or(1);
        let mut acc = vec![0f32; n];
        for (xr, gr) in x.chunks(n).zip(g.chunks(n)) {
            let inv = inv_rms(xr, self.eps);
            for ((a, &xv), &gv) in acc.iter_mut().zip(xr).zip(gr) {
                *a += gv * xv * inv;
            }
        }
        Ok((CpuStorage::F32(acc), Shape::from(n)))
    }
}

/// Differentiable RMS norm over the last dimension, weight `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    if fused_ok(&[x, w]) && w.rank() == 1 {
        super::ran::record(
            super::ran::Kernel::RmsNorm,
            super::level::CpuLevel::Portable,
        );
        return x
            .contiguous()?
            .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 });
    }
    candle_nn::ops::rms_norm_slow(x, w, eps as f32)
}

// ---------------------------------------------------------------------------
// SwiGLU.

/// `1 / (1 + e^-x)` through [`exp_nonpositive`] of `-|x|` (vectorisable).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// `silu(gate) * up`.
struct SwiGlu;

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "swiglu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (g, u) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        if g.len() != u.len() {
            candle_core::bail!("swiglu: shapes {:?} and {:?} differ", l1.dims(), l2.dims());
        }
        let n = l1.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; g.len()];
        rows_mut(&mut out, n, |r, o| {
            let (gr, ur) = (&g[r * n..(r + 1) * n], &u[r * n..(r + 1) * n]);
            for ((o, &gv), &uv) in o.iter_mut().zip(gr).zip(ur) {
                *o = gv * sigmoid(gv) * uv;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = grad.contiguous()?;
        let d_gate = gate.apply_op3_no_bwd(up, &dy, &SwiGluBackward { wrt_gate: true })?;
        let d_up = gate.apply_op3_no_bwd(up, &dy, &SwiGluBackward { wrt_gate: false })?;
        Ok((Some(d_gate), Some(d_up)))
    }
}

/// `d gate = dy * up * silu'(gate)` or `d up = dy * silu(gate)`.
struct SwiGluBackward {
    wrt_gate: bool,
}

impl CustomOp3 for SwiGluBackward {
    fn name(&self) -> &'static str {
        "swiglu-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (g, u, dy) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let n = l1.dims().last().copied().unwrap_or(1);
        let mut out = vec![0f32; g.len()];
        let wrt_gate = self.wrt_gate;
        rows_mut(&mut out, n, |r, o| {
            let span = r * n..(r + 1) * n;
            let (gr, ur, dr) = (&g[span.clone()], &u[span.clone()], &dy[span]);
            for (((o, &gv), &uv), &dv) in o.iter_mut().zip(gr).zip(ur).zip(dr) {
                let s = sigmoid(gv);
                *o = if wrt_gate {
                    dv * uv * s * (1.0 + gv * (1.0 - s))
                } else {
                    dv * gv * s
                };
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Differentiable `silu(gate) * up` (the SwiGLU of the MLP).
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if fused_ok(&[gate, up]) && gate.dims() == up.dims() {
        super::ran::record(super::ran::Kernel::SwiGlu, super::level::CpuLevel::Portable);
        return gate.contiguous()?.apply_op2(&up.contiguous()?, SwiGlu);
    }
    gate.silu()? * up
}

// ---------------------------------------------------------------------------
// Log-probabilities of picked tokens and entropies.

/// Per row of `scale * logits`: the log-softmax at the row's target token and
/// the entropy of the softmax, as `(rows, 2)`.
struct LogSoftmaxPick {
    scale: f32,
}

/// The targets as row indices, each checked against the vocabulary `n`.
fn target_indices(s: &CpuStorage, l: &Layout, rows: usize, n: usize) -> Result<Vec<usize>> {
    let (a, b) = match l.contiguous_offsets() {
        Some(ab) => ab,
        None => candle_core::bail!("log_softmax_pick: targets must be contiguous"),
    };
    let idx: Vec<usize> = match s {
        CpuStorage::U32(v) => v[a..b].iter().map(|&t| t as usize).collect(),
        CpuStorage::I64(v) => v[a..b]
            .iter()
            .map(|&t| usize::try_from(t).unwrap_or(usize::MAX))
            .collect(),
        _ => candle_core::bail!("log_softmax_pick: targets must be u32 or i64"),
    };
    if idx.len() != rows {
        candle_core::bail!("log_softmax_pick: {} targets for {rows} rows", idx.len());
    }
    if let Some(r) = idx.iter().position(|&t| t >= n) {
        let t = match s {
            CpuStorage::I64(v) => v[a + r].to_string(),
            _ => idx[r].to_string(),
        };
        candle_core::bail!("log_softmax_pick: target {t} of row {r} outside a vocabulary of {n}");
    }
    Ok(idx)
}

impl CustomOp2 for LogSoftmaxPick {
    fn name(&self) -> &'static str {
        "log-softmax-pick"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(s1, l1)?;
        let n = l1.dims().last().copied().unwrap_or(1).max(1);
        let rows = x.len() / n;
        let targets = target_indices(s2, l2, rows, n)?;
        let scale = self.scale;
        let mut out = vec![0f32; rows * 2];
        rows_mut_reading(&mut out, 2, n, |r, o| {
            let xr = &x[r * n..(r + 1) * n];
            let max = scaled_max(xr, scale);
            // sum e^(z - max) and sum e^(z - max) (z - max), eight lanes each.
            let (mut sum, mut dot) = ([0f32; 8], [0f32; 8]);
            let chunks = xr.chunks_exact(8);
            let tail = chunks.remainder();
            for c in chunks {
                for i in 0..8 {
                    let d = c[i] * scale - max;
                    let e = exp_nonpositive(d);
                    sum[i] += e;
                    dot[i] += e * d;
                }
            }
            let (mut s, mut sd) = (sum.iter().sum::<f32>(), dot.iter().sum::<f32>());
            for &v in tail {
                let d = v * scale - max;
                let e = exp_nonpositive(d);
                s += e;
                sd += e * d;
            }
            let ln_s = s.ln();
            o[0] = xr[targets[r]] * scale - max - ln_s;
            // H = lse - E[z] = ln s - E[z - max].
            o[1] = ln_s - sd / s;
        });
        Ok((CpuStorage::F32(out), Shape::from((rows, 2))))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // (lp, H, g_lp, g_H) per row: small beside the logits.
        let rows = Tensor::cat(&[res, grad], 1)?.contiguous()?;
        let back = LogSoftmaxPickBackward { scale: self.scale };
        Ok((Some(logits.apply_op3_no_bwd(targets, &rows, &back)?), None))
    }
}

/// `d x_j = scale * (g_lp (1[j = t] - p_j) - g_H p_j (log p_j + H))` per
/// row, from the logits, the targets and `(lp, H, g_lp, g_H)` rows. The
/// row's log-sum-exp is not stored: the target's logit gives it back
/// (`lse = z_t - lp`).
struct LogSoftmaxPickBackward {
    scale: f32,
}

impl CustomOp3 for LogSoftmaxPickBackward {
    fn name(&self) -> &'static str {
        "log-softmax-pick-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, packed) = (f32_slice(s1, l1)?, f32_slice(s3, l3)?);
        let n = l1.dims().last().copied().unwrap_or(1).max(1);
        let targets = target_indices(s2, l2, x.len() / n, n)?;
        let scale = self.scale;
        let mut out = vec![0f32; x.len()];
        rows_mut(&mut out, n, |r, o| {
            let xr = &x[r * n..(r + 1) * n];
            let [lp, h, g_lp, g_h] = [0, 1, 2, 3].map(|i| packed[4 * r + i]);
            let t = targets[r];
            let lse = xr[t] * scale - lp;
            for (o, &v) in o.iter_mut().zip(xr) {
                let log_p = (v * scale - lse).min(0.0);
                let p = exp_nonpositive(log_p);
                *o = -scale * p * (g_lp + g_h * (log_p + h));
            }
            o[t] += scale * g_lp;
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// Per row of `logits / temperature` `(rows, vocab)`: the log-probability of
/// the row's token in `targets` `(rows,)` (u32 or i64) and the softmax's
/// entropy, as `(rows, 2)`; differentiable with respect to the logits.
pub fn log_softmax_pick(logits: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    let scale = 1.0 / temperature;
    if fused_ok(&[logits]) && logits.rank() == 2 {
        super::ran::record(
            super::ran::Kernel::LogSoftmaxPick,
            super::level::CpuLevel::Portable,
        );
        return logits.contiguous()?.apply_op2(
            &targets.contiguous()?,
            LogSoftmaxPick {
                scale: scale as f32,
            },
        );
    }
    let z = (logits * scale)?;
    let lp_all = candle_nn::ops::log_softmax(&z, D::Minus1)?;
    let lp = lp_all.gather(&targets.unsqueeze(1)?, 1)?;
    let entropy = (lp_all.exp()? * &lp_all)?.sum_keepdim(D::Minus1)?.neg()?;
    Tensor::cat(&[lp, entropy], 1)
}

// ---------------------------------------------------------------------------
// Rotary embeddings (Hugging Face layout: halves, not interleaved).

/// Rotary tables for `positions` positions: `cos`, `sin` of shape `(positions, head_dim / 2)`.
#[derive(Debug, Clone)]
pub struct Rope {
    cos: Arc<Vec<f32>>,
    sin: Arc<Vec<f32>>,
    half: usize,
    /// Rotate by minus the angle (the backward pass).
    inverse: bool,
}

impl Rope {
    /// Tables from `cos`, `sin` `(positions, head_dim / 2)` (f32 CPU copies).
    pub fn new(cos: &Tensor, sin: &Tensor) -> Result<Self> {
        let (_, half) = cos.dims2()?;
        let flat = |t: &Tensor| -> Result<Arc<Vec<f32>>> {
            Ok(Arc::new(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?))
        };
        Ok(Self {
            cos: flat(cos)?,
            sin: flat(sin)?,
            half,
            inverse: false,
        })
    }

    /// Rotate one head's row `x` (`head_dim` floats) at position `p` into `o`;
    /// `inverse` rotates by minus the angle.
    #[inline]
    pub(super) fn rotate(&self, x: &[f32], p: usize, inverse: bool, o: &mut [f32]) {
        let h = self.half;
        let sign = if inverse { -1.0 } else { 1.0 };
        let (c, s) = (&self.cos[p * h..(p + 1) * h], &self.sin[p * h..(p + 1) * h]);
        let (x1, x2) = x[..2 * h].split_at(h);
        let (o1, o2) = o[..2 * h].split_at_mut(h);
        for i in 0..h {
            let (ci, si) = (c[i], sign * s[i]);
            o1[i] = x1[i] * ci - x2[i] * si;
            o2[i] = x1[i] * si + x2[i] * ci;
        }
    }

    /// Head width the tables rotate.
    pub(super) fn head_dim(&self) -> usize {
        2 * self.half
    }

    /// Rotary positions the tables cover.
    pub(super) fn positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Differentiable rope of `x` `(batch, heads, time, head_dim)`, positions `0..time`.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (_, _, t, d) = x.dims4()?;
        if d != 2 * self.half || t > self.positions() {
            candle_core::bail!(
                "rope: input {:?} does not fit tables of {} positions x {}",
                x.dims(),
                self.positions(),
                self.half
            );
        }
        if fused_ok(&[x]) {
            super::ran::record(super::ran::Kernel::Rope, super::level::CpuLevel::Portable);
            return x.contiguous()?.apply_op1(self.clone());
        }
        let dev = x.device();
        let table = |v: &Arc<Vec<f32>>| -> Result<Tensor> {
            Tensor::from_slice(&v[..t * self.half], (t, self.half), dev)?.to_dtype(x.dtype())
        };
        candle_nn::rotary_emb::rope_slow(x, &table(&self.cos)?, &table(&self.sin)?)
    }
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "rope-train"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(s, l)?;
        let dims = l.dims();
        let (t, d) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        let mut out = vec![0f32; x.len()];
        rows_mut(&mut out, d, |r, o| {
            self.rotate(&x[r * d..(r + 1) * d], r % t, self.inverse, o)
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        // A rotation: its transpose rotates by the opposite angle.
        let inv = Self {
            inverse: !self.inverse,
            ..self.clone()
        };
        Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&inv)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn close(a: &Tensor, b: &Tensor, tol: f32) {
        let d = (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d < tol, "max |diff| {d}");
    }

    #[test]
    fn fast_exp_is_accurate() {
        for i in 0..=20_000 {
            let x = -(i as f32) * 0.005;
            let (got, want) = (exp_nonpositive(x), x.exp());
            assert!(
                (got - want).abs() <= 3e-7 * want + 1e-30,
                "exp({x}): {got} vs {want}"
            );
        }
        assert_eq!(exp_nonpositive(-200.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
        assert_eq!(lane_sum(&[1.0; 19]), 19.0);
        let xs: Vec<f32> = (0..19).map(|i| ((i * 7) % 19) as f32 - 9.0).collect();
        assert_eq!(lane_max(&xs), 9.0);
        assert_eq!(
            lane_max(&xs[..5]),
            xs[..5].iter().fold(f32::MIN, |m, &x| m.max(x))
        );
        assert_eq!(lane_max(&[f32::NAN, -1.0, f32::NAN]), -1.0);
        assert_eq!(lane_max(&[]), f32::NEG_INFINITY);
        assert_eq!(scaled_max(&xs, 0.5), 4.5);
        assert_eq!(scaled_max(&xs, -2.0), 18.0);
    }

    /// Values and gradients of the fused ops equal those of the composed ops.
    #[test]
    fn fused_ops_match_composed_ops_and_their_gradients() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 3, 5, 8), &dev).unwrap()).unwrap();
        let w = Var::from_tensor(&Tensor::randn(1f32, 0.3, 8, &dev).unwrap()).unwrap();
        let probe = Tensor::randn(0f32, 1.0, (2, 3, 5, 8), &dev).unwrap();
        let grads = |y: Tensor| (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();

        // RMS norm.
        let fused = rms_norm(x.as_tensor(), w.as_tensor(), 1e-6).unwrap();
        let slow = candle_nn::ops::rms_norm_slow(x.as_tensor(), w.as_tensor(), 1e-6).unwrap();
        close(&fused, &slow, 1e-5);
        let (gf, gs) = (grads(fused), grads(slow));
        close(gf.get(&x).unwrap(), gs.get(&x).unwrap(), 1e-4);
        close(gf.get(&w).unwrap(), gs.get(&w).unwrap(), 1e-4);

        // Rope.
        let pos = Tensor::arange(0f32, 5.0, &dev)
            .unwrap()
            .reshape((5, 1))
            .unwrap();
        let inv = Tensor::new(&[1.0f32, 0.3, 0.1, 0.01], &dev)
            .unwrap()
            .reshape((1, 4))
            .unwrap();
        let freqs = pos.matmul(&inv).unwrap();
        let (cos, sin) = (freqs.cos().unwrap(), freqs.sin().unwrap());
        let rope = Rope::new(&cos, &sin).unwrap();
        let fused = rope.apply(x.as_tensor()).unwrap();
        let slow = candle_nn::rotary_emb::rope_slow(x.as_tensor(), &cos, &sin).unwrap();
        close(&fused, &slow, 1e-5);
        let (gf, gs) = (grads(fused), grads(slow));
        close(gf.get(&x).unwrap(), gs.get(&x).unwrap(), 1e-5);

        // SwiGLU.
        let up = Var::from_tensor(&Tensor::randn(0f32, 1.0, (2, 3, 5, 8), &dev).unwrap()).unwrap();
        let fused = swiglu(x.as_tensor(), up.as_tensor()).unwrap();
        let slow = (x.as_tensor().silu().unwrap() * up.as_tensor()).unwrap();
        close(&fused, &slow, 1e-5);
        let (gf, gs) = (grads(fused), grads(slow));
        close(gf.get(&x).unwrap(), gs.get(&x).unwrap(), 1e-5);
        close(gf.get(&up).unwrap(), gs.get(&up).unwrap(), 1e-5);

        // Causal softmax: rows are (head, query) pairs over 5 queries; keys = 8
        // with an offset of 3 cached positions.
        let scale = 0.35;
        let fused = causal_softmax(x.as_tensor(), scale, 5, 3).unwrap();
        let mask: Vec<f32> = (0..5)
            .flat_map(|i| (0..8).map(move |j| if j > i + 3 { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (5, 8), &dev).unwrap();
        let slow = candle_nn::ops::softmax(
            &(x.as_tensor() * scale)
                .unwrap()
                .broadcast_add(&mask)
                .unwrap(),
            D::Minus1,
        )
        .unwrap();
        close(&fused, &slow, 1e-6);
        let (gf, gs) = (grads(fused), grads(slow));
        close(gf.get(&x).unwrap(), gs.get(&x).unwrap(), 1e-5);
    }

    /// The picked log-probabilities, the entropies and the logits' gradient
    /// through both equal the composed log-softmax's, at a temperature, over
    /// rows wide enough to run in parallel and with a tail of odd width.
    #[test]
    fn log_softmax_pick_matches_the_composed_log_softmax_and_its_gradient() {
        let dev = Device::Cpu;
        for (rows, vocab) in [(3, 5), (40, 2051)] {
            let logits = Tensor::randn(0f32, 3.0, (rows, vocab), &dev).unwrap();
            let logits = Var::from_tensor(&logits).unwrap();
            let targets: Vec<u32> = (0..rows as u32)
                .map(|r| (r * 7919) % vocab as u32)
                .collect();
            let targets = Tensor::new(targets, &dev).unwrap();
            let probe = Tensor::randn(0f32, 1.0, (rows, 2), &dev).unwrap();
            let temperature = 0.7;
            let fused = log_softmax_pick(logits.as_tensor(), &targets, temperature).unwrap();
            let z = (logits.as_tensor() / temperature).unwrap();
            let lp_all = candle_nn::ops::log_softmax(&z, D::Minus1).unwrap();
            let lp = lp_all.gather(&targets.unsqueeze(1).unwrap(), 1).unwrap();
            let ent = (lp_all.exp().unwrap() * &lp_all)
                .unwrap()
                .sum_keepdim(D::Minus1)
                .unwrap()
                .neg()
                .unwrap();
            let slow = Tensor::cat(&[lp, ent], 1).unwrap();
            // Log-probabilities reach -40 here: f32 rounding of a few 1e-6.
            close(&fused, &slow, 1e-4);
            let grad = |y: &Tensor| {
                let g = (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
                g.get(&logits).unwrap().clone()
            };
            // Gradients reach a few units (probe x 1 / temperature).
            close(&grad(&fused), &grad(&slow), 5e-5);
        }
        let bad = Tensor::new(&[9u32, 0], &dev).unwrap();
        let logits = Tensor::zeros((2, 4), DType::F32, &dev).unwrap();
        let err = log_softmax_pick(&logits, &bad, 1.0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("target 9 of row 0 outside a vocabulary of 4"),
            "{err}"
        );
        let negative = Tensor::new(&[1i64, -3], &dev).unwrap();
        let err = log_softmax_pick(&logits, &negative, 1.0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("target -3 of row 1 outside"), "{err}");
    }
}
