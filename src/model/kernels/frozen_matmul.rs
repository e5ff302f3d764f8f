//! `x · wᵀ` for a weight that is not trained: the backward pass gives `x`
//! its gradient and `w` none.
//!
//! candle's matmul backward always computes both gradients, whether or not
//! the right-hand side is a variable. In LoRA training every base weight is
//! frozen, so that second product (a third of a linear layer's training
//! work, and the largest single product of all at the vocabulary head) would
//! be computed and thrown away on every step.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

struct FrozenMatmul;

impl CustomOp2 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        w: &CpuStorage,
        w_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (m, k) = x_layout.shape().dims2()?;
        let (n, _) = w_layout.shape().dims2()?;
        let wt = w_layout.transpose(0, 1)?;
        let out = x.matmul(w, (1, m, n, k), x_layout, &wt)?;
        Ok((out, Shape::from((m, n))))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.matmul(w)?), None))
    }
}

/// `x` `(rows, in)` times the transpose of `w` `(out, in)`: `(rows, out)`,
/// differentiable in `x` only. Off the CPU it is candle's matmul (the same
/// values; the weight's gradient is then computed and left unused).
pub fn frozen_matmul(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (_, k) = x.dims2()?;
    let (_, wk) = w.dims2()?;
    if k != wk || x.dtype() != w.dtype() {
        candle_core::bail!(
            "frozen matmul: input {:?} ({:?}) does not fit weight {:?} ({:?})",
            x.dims(),
            x.dtype(),
            w.dims(),
            w.dtype()
        );
    }
    if x.device().is_cpu() && w.device().is_cpu() {
        x.apply_op2(w, FrozenMatmul)
    } else {
        x.matmul(&w.t()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    #[test]
    fn values_and_input_gradient_match_matmul_and_the_weight_gets_none() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (7, 5), &dev).unwrap();
        let w = Var::randn(0f32, 1.0, (3, 5), &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (7, 3), &dev).unwrap();

        let y = frozen_matmul(&x, &w).unwrap();
        let want = x.matmul(&w.t().unwrap()).unwrap();
        let diff = (&y - &want).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-6);

        let grads = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let composed = (want * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let (gx, cx) = (grads.get(&x).unwrap(), composed.get(&x).unwrap());
        let diff = (gx - cx).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-5);
        assert!(grads.get(&w).is_none(), "a frozen weight gets no gradient");
        assert!(composed.get(&w).is_some());
    }

    #[test]
    fn a_non_contiguous_input_and_mismatched_shapes() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (5, 4), &dev).unwrap().t().unwrap();
        let w = Tensor::randn(0f32, 1.0, (2, 5), &dev).unwrap();
        let y = frozen_matmul(&x, &w).unwrap();
        let want = x.matmul(&w.t().unwrap()).unwrap();
        let diff = (&y - &want).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-6);

        let bad = Tensor::zeros((2, 3), DType::F32, &dev).unwrap();
        let e = frozen_matmul(&x, &bad).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
        let e = frozen_matmul(&x.to_dtype(DType::F64).unwrap(), &w).unwrap_err();
        assert!(e.to_string().contains("does not fit"), "{e}");
    }
}
