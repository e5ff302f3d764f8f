//! A trained projection, `x · wᵀ + b`, as one differentiable op.
//!
//! Composed from candle's ops it is three graph nodes (the transpose, the
//! product, the broadcast add) and its backward pass pays for two of them on
//! one thread: the bias gradient is candle's strided reduction over the
//! rows (3% of a 10M-parameter PPO update's CPU time, all of it serial), and
//! the weight gradient comes out of the transpose's backward as a strided
//! view that the gradient store then copies to contiguous memory (2%). Here
//! the weight gradient is computed as `gradᵀ · x`, contiguous from gemm; the
//! bias gradient is a column sum over row blocks in parallel; and the bias
//! is added to the product's rows in place.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::train_ops::{f32_slice, fused_ok};

/// Rows per block of the bias gradient's column sums (a fixed split, so the
/// sum's order, and so its value, does not depend on the thread count).
const SUM_ROWS: usize = 128;

/// `x (m, k) · wᵀ` on the CPU storage: `(m, n)` f32 values.
fn product(x: &CpuStorage, xl: &Layout, w: &CpuStorage, wl: &Layout) -> Result<Vec<f32>> {
    let (m, k) = xl.shape().dims2()?;
    let (n, _) = wl.shape().dims2()?;
    match x.matmul(w, (1, m, n, k), xl, &wl.transpose(0, 1)?)? {
        CpuStorage::F32(y) => Ok(y),
        other => candle_core::bail!("linear: f32 only, got {:?}", other.dtype()),
    }
}

/// `dx = grad · w` and `dw = gradᵀ · x` (contiguous, `(out, in)`); `dx` is
/// skipped when `x` carries no gradient.
fn input_and_weight_grads(x: &Tensor, w: &Tensor, grad: &Tensor) -> Result<[Option<Tensor>; 2]> {
    let dx = if x.track_op() {
        Some(grad.matmul(w)?)
    } else {
        None
    };
    Ok([dx, Some(grad.t()?.matmul(x)?)])
}

/// `x · wᵀ`.
struct Linear;

impl CustomOp2 for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let y = product(x, xl, w, wl)?;
        let shape = Shape::from((xl.dims()[0], wl.dims()[0]));
        Ok((CpuStorage::F32(y), shape))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [dx, dw] = input_and_weight_grads(x, w, grad)?;
        Ok((dx, dw))
    }
}

/// `x · wᵀ + b`.
struct LinearBias;

impl CustomOp3 for LinearBias {
    fn name(&self) -> &'static str {
        "linear-bias"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let mut y = product(x, xl, w, wl)?;
        let b = f32_slice(b, bl)?;
        let n = b.len();
        y.par_chunks_mut((n * SUM_ROWS).max(1)).for_each(|rows| {
            for row in rows.chunks_exact_mut(n) {
                row.iter_mut().zip(b).for_each(|(y, b)| *y += b);
            }
        });
        Ok((CpuStorage::F32(y), Shape::from((xl.dims()[0], n))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let [dx, dw] = input_and_weight_grads(x, w, &grad)?;
        Ok((dx, dw, Some(grad.apply_op1_no_bwd(&ColumnSums)?)))
    }
}

/// The sums of a contiguous `(rows, n)` matrix's columns, `(n,)`.
struct ColumnSums;

impl CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "column-sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = f32_slice(s, l)?;
        let (_, n) = l.shape().dims2()?;
        let add_rows = |rows: &[f32]| {
            let mut acc = vec![0f32; n];
            for row in rows.chunks_exact(n) {
                acc.iter_mut().zip(row).for_each(|(a, g)| *a += g);
            }
            acc
        };
        let blocks: Vec<Vec<f32>> = if n == 0 {
            Vec::new()
        } else {
            g.par_chunks(n * SUM_ROWS).map(add_rows).collect()
        };
        let mut sums = vec![0f32; n];
        for block in &blocks {
            sums.iter_mut().zip(block).for_each(|(s, b)| *s += b);
        }
        Ok((CpuStorage::F32(sums), Shape::from(n)))
    }
}

/// `x` `(rows, in)` times the transpose of `w` `(out, in)`, plus `b` `(out,)`
/// when given: `(rows, out)`, differentiable in all three. Off the CPU, or
/// in another dtype than f32, it is composed from candle's ops (the same
/// values).
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let (_, k) = x.dims2()?;
    let (n, wk) = w.dims2()?;
    let bias_fits = b.is_none_or(|b| b.dims() == [n]);
    if k != wk || !bias_fits {
        candle_core::bail!(
            "linear: input {:?}, weight {:?} and bias {:?} do not fit together",
            x.dims(),
            w.dims(),
            b.map(|b| b.dims().to_vec())
        );
    }
    let tensors: Vec<&Tensor> = [Some(x), Some(w), b].into_iter().flatten().collect();
    if !fused_ok(&tensors) {
        let y = x.matmul(&w.t()?)?;
        return match b {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        };
    }
    let x = x.contiguous()?;
    match b {
        Some(b) => x.apply_op3(w, &b.contiguous()?, LinearBias),
        None => x.apply_op2(w, Linear),
    }
}

/// `layer` applied to `x` `(..., in)` through [`linear`]: `(..., out)`.
pub fn forward_linear(layer: &candle_nn::Linear, x: &Tensor) -> Result<Tensor> {
    let mut dims = x.dims().to_vec();
    let in_dim = dims.pop().unwrap_or(1);
    let rows = x.elem_count() / in_dim.max(1);
    let w = layer.weight();
    let y = linear(&x.reshape((rows, in_dim))?, w, layer.bias())?;
    dims.push(w.dim(0)?);
    y.reshape(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap();
        d.max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// Values and all three gradients equal candle's composed ops', and the
    /// weight's gradient is stored contiguous.
    #[test]
    fn values_and_gradients_match_the_composed_ops() {
        let dev = Device::Cpu;
        // 300 rows: the bias sums span three row blocks, the last one short.
        for (rows, with_bias) in [(300, true), (7, true), (300, false)] {
            let x = Var::randn(0f32, 1.0, (rows, 5), &dev).unwrap();
            let w = Var::randn(0f32, 1.0, (3, 5), &dev).unwrap();
            let b = Var::randn(0f32, 1.0, 3, &dev).unwrap();
            let r = Tensor::randn(0f32, 1.0, (rows, 3), &dev).unwrap();
            let bias = with_bias.then(|| b.as_tensor());

            let y = linear(&x, &w, bias).unwrap();
            let mut want = x.matmul(&w.t().unwrap()).unwrap();
            if let Some(b) = bias {
                want = want.broadcast_add(b).unwrap();
            }
            assert!(max_diff(&y, &want) < 1e-5);

            let grads = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let composed = (want * &r).unwrap().sum_all().unwrap().backward().unwrap();
            for v in [&x, &w, &b] {
                match (grads.get(v), composed.get(v)) {
                    (Some(g), Some(c)) => assert!(max_diff(g, c) < 1e-4, "{:?}", v.dims()),
                    (None, None) => assert!(!with_bias, "only an unused bias has no gradient"),
                    (g, c) => panic!("gradient presence differs: {:?} {:?}", g, c),
                }
            }
            assert!(grads.get(&w).unwrap().is_contiguous());
        }
    }

    /// A projection to no outputs gives an empty result and empty
    /// gradients, not a panic.
    #[test]
    fn zero_outputs_are_empty() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (4, 5), &dev).unwrap();
        let w = Var::zeros((0, 5), candle_core::DType::F32, &dev).unwrap();
        let b = Var::zeros(0, candle_core::DType::F32, &dev).unwrap();
        let y = linear(&x, &w, Some(b.as_tensor())).unwrap();
        assert_eq!(y.dims(), &[4, 0]);
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(grads.get(&b).unwrap().dims(), &[0]);
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((4, 5), candle_core::DType::F32, &dev).unwrap();
        let w = Tensor::zeros((3, 6), candle_core::DType::F32, &dev).unwrap();
        assert!(linear(&x, &w, None).is_err());
        let w = Tensor::zeros((3, 5), candle_core::DType::F32, &dev).unwrap();
        let b = Tensor::zeros(4, candle_core::DType::F32, &dev).unwrap();
        let err = linear(&x, &w, Some(&b)).unwrap_err().to_string();
        assert!(err.contains("do not fit"), "{err}");
    }
}
