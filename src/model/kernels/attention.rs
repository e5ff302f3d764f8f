//! Causal self-attention of the training forward pass as one differentiable
//! op: rope on queries and keys, scores, causal softmax and the weighted sum
//! of values, for grouped-query heads, read and written in the projections'
//! own `(batch, time, heads, head_dim)` layout.
//!
//! Composed from candle ops, one layer's attention is about fifteen graph
//! nodes (transposes, copies, two batched products, the softmax, rope twice),
//! and candle's backward pass allocates, zero-fills and adds a gradient for
//! every one of them on one thread. Here a layer is one node; each batch row
//! is one rayon task running gemm's kernels on strided views (no copies);
//! blocks of queries skip the keys the causal mask hides; and the backward
//! pass recomputes the attention probabilities instead of keeping
//! `heads x time^2` floats per layer alive between the passes.

use super::train_ops::{exp_nonpositive, f32_slice, fused_ok, lane_sum, scaled_max, Rope};
use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor};
use rayon::prelude::*;

/// Queries per block: a block's scores stop at its last query's position.
const BLOCK: usize = 64;

/// Differentiable causal attention of `q` `(batch, time, heads, head_dim)` over
/// `k`, `v` `(batch, time, kv_heads, head_dim)` at positions `0..time`, with
/// rope applied to `q` and `k`; query head `h` reads key/value head
/// `h / (heads / kv_heads)`. Returns `(batch, time, heads * head_dim)`.
pub fn causal_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    rope: &Rope,
    scale: f64,
) -> Result<Tensor> {
    let (b, t, nh, hd) = q.dims4()?;
    let (kb, kt, nkv, khd) = k.dims4()?;
    if (kb, kt, khd) != (b, t, hd) || v.dims() != k.dims() || nkv == 0 || nh % nkv != 0 {
        candle_core::bail!(
            "attention: queries {:?}, keys {:?} and values {:?} do not fit together",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    if hd != rope.head_dim() || t > rope.positions() {
        candle_core::bail!(
            "attention: {t} positions x {hd} do not fit rope tables of {} positions x {}",
            rope.positions(),
            rope.head_dim()
        );
    }
    // An empty batch (no rows to split among threads) takes the composed path.
    if fused_ok(&[q, k, v]) && q.elem_count() > 0 {
        super::ran::record(
            super::ran::Kernel::CausalAttention,
            super::level::CpuLevel::Portable,
        );
        let op = CausalAttention {
            rope: rope.clone(),
            shape: Dims { b, t, nh, nkv, hd },
            scale: scale as f32,
        };
        return q
            .contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op);
    }
    composed(q, k, v, rope, scale)
}

/// The same attention from candle's differentiable ops (other dtypes, devices).
fn composed(q: &Tensor, k: &Tensor, v: &Tensor, rope: &Rope, scale: f64) -> Result<Tensor> {
    let (b, t, nh, hd) = q.dims4()?;
    let nkv = k.dim(2)?;
    let q = rope.apply(&q.transpose(1, 2)?)?;
    let k = rope.apply(&k.transpose(1, 2)?)?;
    let v = v.transpose(1, 2)?.contiguous()?;
    // Query heads of one key/value group are adjacent: view them as one
    // taller matrix per group instead of repeating keys and values.
    let q = q.reshape((b, nkv, (nh / nkv) * t, hd))?;
    let att = super::train_ops::causal_softmax(&q.matmul(&k.t()?)?, scale, t, 0)?;
    att.matmul(&v)?
        .reshape((b, nh, t, hd))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, t, nh * hd))
}

#[derive(Debug, Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    nh: usize,
    nkv: usize,
    hd: usize,
}

impl Dims {
    fn groups(&self) -> usize {
        self.nh / self.nkv
    }
}

struct CausalAttention {
    rope: Rope,
    shape: Dims,
    scale: f32,
}

/// A read-only strided matrix: element `(r, c)` is `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

impl<'a> View<'a> {
    fn new(data: &'a [f32], rs: usize, cs: usize) -> Self {
        Self { data, rs, cs }
    }

    /// The view starting at element `(r, c)`.
    fn at(self, r: usize, c: usize) -> Self {
        Self {
            data: &self.data[r * self.rs + c * self.cs..],
            ..self
        }
    }

    fn t(self) -> Self {
        Self {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// `dst (m x n, row stride dst_rs) [+]= a (m x k) * b (k x n)` on one thread.
#[allow(clippy::too_many_arguments)]
fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_rs: usize,
    accumulate: bool,
    a: View,
    b: View,
) {
    if m == 0 || n == 0 {
        return;
    }
    // Every element gemm touches lies inside its slice.
    assert!(
        (m - 1) * dst_rs + n <= dst.len(),
        "attention: dst out of bounds"
    );
    if k == 0 {
        if !accumulate {
            (0..m).for_each(|r| dst[r * dst_rs..r * dst_rs + n].fill(0.0));
        }
        return;
    }
    assert!(
        (m - 1) * a.rs + (k - 1) * a.cs < a.data.len(),
        "attention: lhs out of bounds"
    );
    assert!(
        (k - 1) * b.rs + (n - 1) * b.cs < b.data.len(),
        "attention: rhs out of bounds"
    );
    // SAFETY: the asserts above bound every index gemm reads or writes; the
    // three slices are distinct borrows (dst is exclusive).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Query blocks `(first, end)` over `t` positions.
fn blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t.div_ceil(BLOCK)).map(move |i| (i * BLOCK, ((i + 1) * BLOCK).min(t)))
}

/// One batch row's scratch buffers.
struct Scratch {
    /// Roped queries and keys of one head, `(t, hd)`.
    q: Vec<f32>,
    k: Vec<f32>,
    /// Probabilities `(t, t)`: each block's rows up to the block's end.
    p: Vec<f32>,
    /// Gradient of the probabilities `(t, t)`, then of the scores.
    dp: Vec<f32>,
    /// Gradients of the roped queries and keys, `(t, hd)`.
    dq: Vec<f32>,
    dk: Vec<f32>,
}

impl Scratch {
    fn new(d: &Dims, backward: bool) -> Self {
        let (th, tt) = (d.t * d.hd, d.t * d.t);
        let grad = |n: usize| if backward { vec![0f32; n] } else { Vec::new() };
        Self {
            q: vec![0f32; th],
            k: vec![0f32; th],
            p: vec![0f32; tt],
            dp: grad(tt),
            dq: grad(th),
            dk: grad(th),
        }
    }
}

impl CausalAttention {
    /// Rope head `head` of a batch row `src` (row stride `heads * hd`) into `out` `(t, hd)`.
    fn rope_head(&self, src: &[f32], heads: usize, head: usize, out: &mut [f32]) {
        let Dims { t, hd, .. } = self.shape;
        for i in 0..t {
            let from = &src[i * heads * hd + head * hd..][..hd];
            self.rope
                .rotate(from, i, false, &mut out[i * hd..(i + 1) * hd]);
        }
    }

    /// Rotate `grad` `(t, hd)` back into head `head` of a batch row `dst`.
    fn unrope_head(&self, grad: &[f32], heads: usize, head: usize, dst: &mut [f32]) {
        let Dims { t, hd, .. } = self.shape;
        for i in 0..t {
            let to = &mut dst[i * heads * hd + head * hd..][..hd];
            self.rope.rotate(&grad[i * hd..(i + 1) * hd], i, true, to);
        }
    }

    /// Causal softmax probabilities of `s.q` against `s.k` into `s.p`: rows of
    /// each block up to the block's end, zero past each query's position.
    fn probabilities(&self, s: &mut Scratch) {
        let Dims { t, hd, .. } = self.shape;
        for (r0, r1) in blocks(t) {
            let (q, k) = (View::new(&s.q, hd, 1).at(r0, 0), View::new(&s.k, hd, 1).t());
            matmul(r1 - r0, r1, hd, &mut s.p[r0 * t..], t, false, q, k);
            for i in r0..r1 {
                let row = &mut s.p[i * t..i * t + r1];
                let (seen, hidden) = row.split_at_mut(i + 1);
                let max = scaled_max(seen, self.scale);
                for x in seen.iter_mut() {
                    *x = exp_nonpositive(*x * self.scale - max);
                }
                let inv = 1.0 / lane_sum(seen);
                seen.iter_mut().for_each(|x| *x *= inv);
                hidden.fill(0.0);
            }
        }
    }

    fn forward_row(&self, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32], s: &mut Scratch) {
        let Dims { t, nh, nkv, hd, .. } = self.shape;
        for kvh in 0..nkv {
            self.rope_head(k, nkv, kvh, &mut s.k);
            for h in kvh * self.shape.groups()..(kvh + 1) * self.shape.groups() {
                self.rope_head(q, nh, h, &mut s.q);
                self.probabilities(s);
                for (r0, r1) in blocks(t) {
                    let p = View::new(&s.p, t, 1).at(r0, 0);
                    let vals = View::new(v, nkv * hd, 1).at(0, kvh * hd);
                    let dst = &mut out[r0 * nh * hd + h * hd..];
                    matmul(r1 - r0, hd, r1, dst, nh * hd, false, p, vals);
                }
            }
        }
    }

    /// Gradients of one batch row: `dq`, `dk`, `dv` start zeroed.
    fn backward_row(
        &self,
        (q, k, v): (&[f32], &[f32], &[f32]),
        (o, g): (&[f32], &[f32]),
        (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
        s: &mut Scratch,
    ) {
        let Dims { t, nh, nkv, hd, .. } = self.shape;
        for kvh in 0..nkv {
            self.rope_head(k, nkv, kvh, &mut s.k);
            s.dk.fill(0.0);
            for h in kvh * self.shape.groups()..(kvh + 1) * self.shape.groups() {
                self.rope_head(q, nh, h, &mut s.q);
                self.probabilities(s);
                let grad = View::new(g, nh * hd, 1).at(0, h * hd);
                // dV += P^T dO; key block [c0, c1) gathers queries c0.. .
                for (c0, c1) in blocks(t) {
                    let pt = View::new(&s.p, t, 1).t().at(c0, c0);
                    let dst = &mut dv[c0 * nkv * hd + kvh * hd..];
                    matmul(c1 - c0, hd, t - c0, dst, nkv * hd, true, pt, grad.at(c0, 0));
                }
                // dS = scale * P * (dO V^T - rowsum(dO * O)).
                for (r0, r1) in blocks(t) {
                    let vt = View::new(v, nkv * hd, 1).at(0, kvh * hd).t();
                    matmul(
                        r1 - r0,
                        r1,
                        hd,
                        &mut s.dp[r0 * t..],
                        t,
                        false,
                        grad.at(r0, 0),
                        vt,
                    );
                    for i in r0..r1 {
                        let at = i * nh * hd + h * hd;
                        let d = dot(&g[at..at + hd], &o[at..at + hd]);
                        let (p, dp) = (&s.p[i * t..i * t + r1], &mut s.dp[i * t..i * t + r1]);
                        for (x, &pv) in dp.iter_mut().zip(p) {
                            *x = self.scale * pv * (*x - d);
                        }
                    }
                }
                // dQ = dS K, dK += dS^T Q.
                for (r0, r1) in blocks(t) {
                    let ds = View::new(&s.dp, t, 1).at(r0, 0);
                    let keys = View::new(&s.k, hd, 1);
                    matmul(r1 - r0, hd, r1, &mut s.dq[r0 * hd..], hd, false, ds, keys);
                }
                for (c0, c1) in blocks(t) {
                    let ds_t = View::new(&s.dp, t, 1).t().at(c0, c0);
                    let queries = View::new(&s.q, hd, 1).at(c0, 0);
                    matmul(
                        c1 - c0,
                        hd,
                        t - c0,
                        &mut s.dk[c0 * hd..],
                        hd,
                        true,
                        ds_t,
                        queries,
                    );
                }
                self.unrope_head(&s.dq, nh, h, dq);
            }
            self.unrope_head(&s.dk, nkv, kvh, dk);
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The f32 contents of a contiguous CPU tensor, locked for reading.
fn read(t: &Tensor) -> Result<(candle_core::StorageRef<'_>, Layout)> {
    let (s, l) = t.storage_and_layout();
    if !matches!(&*s, Storage::Cpu(_)) || !l.is_contiguous() {
        candle_core::bail!("attention backward: tensors must be contiguous on the CPU");
    }
    let l = l.clone();
    Ok((s, l))
}

fn slice<'a>(s: &'a Storage, l: &Layout) -> Result<&'a [f32]> {
    match s {
        Storage::Cpu(c) => f32_slice(c, l),
        _ => candle_core::bail!("attention backward: tensors must be on the CPU"),
    }
}

impl CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "causal-attention-train"
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
        let (q, k, v) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let d = self.shape;
        let (qn, kn) = (d.t * d.nh * d.hd, d.t * d.nkv * d.hd);
        let mut out = vec![0f32; d.b * qn];
        out.par_chunks_mut(qn)
            .zip(q.par_chunks(qn).zip(k.par_chunks(kn).zip(v.par_chunks(kn))))
            .for_each_init(
                || Scratch::new(&d, false),
                |s, (o, (q, (k, v)))| self.forward_row(q, k, v, o, s),
            );
        Ok((CpuStorage::F32(out), Shape::from((d.b, d.t, d.nh * d.hd))))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let d = self.shape;
        let (qn, kn) = (d.t * d.nh * d.hd, d.t * d.nkv * d.hd);
        let (mut dq, mut dk, mut dv) = (
            vec![0f32; d.b * qn],
            vec![0f32; d.b * kn],
            vec![0f32; d.b * kn],
        );
        {
            let (qs, ql) = read(q)?;
            let (ks, kl) = read(k)?;
            let (vs, vl) = read(v)?;
            let (os, ol) = read(res)?;
            let (gs, gl) = read(&grad)?;
            let (q, k, v) = (slice(&qs, &ql)?, slice(&ks, &kl)?, slice(&vs, &vl)?);
            let (o, g) = (slice(&os, &ol)?, slice(&gs, &gl)?);
            let inputs = q.par_chunks(qn).zip(k.par_chunks(kn).zip(v.par_chunks(kn)));
            let upstream = o.par_chunks(qn).zip(g.par_chunks(qn));
            let grads = dq
                .par_chunks_mut(qn)
                .zip(dk.par_chunks_mut(kn).zip(dv.par_chunks_mut(kn)));
            grads.zip(inputs.zip(upstream)).for_each_init(
                || Scratch::new(&d, true),
                |s, ((dq, (dk, dv)), ((q, (k, v)), (o, g)))| {
                    self.backward_row((q, k, v), (o, g), (dq, dk, dv), s)
                },
            );
        }
        let dev = q.device();
        Ok((
            Some(Tensor::from_vec(dq, q.shape(), dev)?),
            Some(Tensor::from_vec(dk, k.shape(), dev)?),
            Some(Tensor::from_vec(dv, v.shape(), dev)?),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    fn rope(t: usize, half: usize) -> Rope {
        let dev = Device::Cpu;
        let pos = Tensor::arange(0f32, t as f32, &dev)
            .unwrap()
            .reshape((t, 1))
            .unwrap();
        let inv: Vec<f32> = (0..half)
            .map(|i| 1.0 / 10000f32.powf(i as f32 / half as f32))
            .collect();
        let inv = Tensor::from_vec(inv, (1, half), &dev).unwrap();
        let freqs = pos.matmul(&inv).unwrap();
        Rope::new(&freqs.cos().unwrap(), &freqs.sin().unwrap()).unwrap()
    }

    /// Values and the gradients of queries, keys and values equal the composed
    /// ops', with grouped heads, several query blocks and a partial last one.
    #[test]
    fn fused_attention_matches_the_composed_attention_and_its_gradients() {
        let dev = Device::Cpu;
        for &(b, t, nh, nkv, hd) in &[(3, 150, 4, 2, 8), (2, 7, 2, 2, 4), (1, 64, 3, 1, 6)] {
            let var = |h: usize, sd: f32| {
                Var::from_tensor(&Tensor::randn(0f32, sd, (b, t, h, hd), &dev).unwrap()).unwrap()
            };
            let (q, k, v) = (var(nh, 1.5), var(nkv, 1.5), var(nkv, 1.0));
            let rope = rope(t + 3, hd / 2);
            let scale = 1.0 / (hd as f64).sqrt();
            let fused = causal_attention(&q, &k, &v, &rope, scale).unwrap();
            let slow = composed(&q, &k, &v, &rope, scale).unwrap();
            assert_eq!(fused.dims(), &[b, t, nh * hd]);
            assert!(
                max_diff(&fused, &slow) < 1e-5,
                "values {}",
                max_diff(&fused, &slow)
            );
            let probe = Tensor::randn(0f32, 1.0, (b, t, nh * hd), &dev).unwrap();
            let grads = |y: &Tensor| (y * &probe).unwrap().sum_all().unwrap().backward().unwrap();
            let (gf, gs) = (grads(&fused), grads(&slow));
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let (a, b) = (gf.get(x).unwrap(), gs.get(x).unwrap());
                let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap();
                let tol = 1e-5 * (1.0 + scale.to_scalar::<f32>().unwrap());
                assert!(max_diff(a, b) < tol, "d{name} {} (t {t})", max_diff(a, b));
            }
        }
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((1, 4, 3, 4), candle_core::DType::F32, &dev).unwrap();
        let k = Tensor::zeros((1, 4, 2, 4), candle_core::DType::F32, &dev).unwrap();
        let err = causal_attention(&q, &k, &k, &rope(8, 2), 0.5).unwrap_err();
        assert!(err.to_string().contains("do not fit together"), "{err}");
        let long = rope(2, 2);
        let k = Tensor::zeros((1, 4, 1, 4), candle_core::DType::F32, &dev).unwrap();
        let err = causal_attention(&q, &k, &k, &long, 0.5).unwrap_err();
        assert!(err.to_string().contains("rope tables"), "{err}");
        // No positions: an empty result, not a panic.
        let empty = Tensor::zeros((2, 0, 1, 4), candle_core::DType::F32, &dev).unwrap();
        let out = causal_attention(&empty, &empty, &empty, &long, 0.5).unwrap();
        assert_eq!(out.dims(), &[2, 0, 4]);
    }
}
