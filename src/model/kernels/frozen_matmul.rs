//! Products with weights that are not trained: `x · wᵀ` whose backward
//! pass gives `x` its gradient and `w` none, and the same with a LoRA
//! adapter added, `x · wᵀ + s · (x · aᵀ) · bᵀ`, as one op.
//!
//! candle's matmul backward always computes both gradients, whether or not
//! the right-hand side is a variable. In LoRA training every base weight is
//! frozen, so that second product (a third of a linear layer's training
//! work, and the largest single product of all at the vocabulary head) would
//! be computed and thrown away on every step. Composed from candle ops, an
//! adapted projection is also five graph nodes, three of them keeping a
//! `rows x out` tensor alive until the backward pass, which then allocates,
//! zero-fills and adds a gradient of that size for each; as one op it keeps
//! its output only.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Storage, Tensor};
use rayon::prelude::*;

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
        super::ran::record(
            super::ran::Kernel::FrozenMatmul,
            super::level::CpuLevel::Portable,
        );
        x.apply_op2(w, FrozenMatmul)
    } else {
        x.matmul(&w.t()?)
    }
}

/// `x · wᵀ + scale · (x · aᵀ) · bᵀ` with `w` frozen (captured, not an argument).
struct LoraMatmul {
    w: Tensor,
    scale: f64,
}

impl CustomOp3 for LoraMatmul {
    fn name(&self) -> &'static str {
        "lora-matmul"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        a: &CpuStorage,
        a_layout: &Layout,
        b: &CpuStorage,
        b_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (m, k) = x_layout.shape().dims2()?;
        let (r, _) = a_layout.shape().dims2()?;
        let (n, _) = b_layout.shape().dims2()?;
        let (w_storage, w_layout) = self.w.storage_and_layout();
        let Storage::Cpu(w) = &*w_storage else {
            candle_core::bail!("lora matmul: the frozen weight is not on the CPU");
        };
        let base = x.matmul(w, (1, m, n, k), x_layout, &w_layout.transpose(0, 1)?)?;
        let u = x.matmul(a, (1, m, r, k), x_layout, &a_layout.transpose(0, 1)?)?;
        let u_layout = Layout::contiguous((m, r));
        let delta = u.matmul(b, (1, m, n, r), &u_layout, &b_layout.transpose(0, 1)?)?;
        let (CpuStorage::F32(mut y), CpuStorage::F32(d)) = (base, delta) else {
            candle_core::bail!("lora matmul: f32 only");
        };
        let s = self.scale as f32;
        y.par_chunks_mut(1 << 14)
            .zip(d.par_chunks(1 << 14))
            .for_each(|(y, d)| y.iter_mut().zip(d).for_each(|(y, d)| *y += s * d));
        Ok((CpuStorage::F32(y), Shape::from((m, n))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let u = x.matmul(&a.t()?)?;
        let gu = (grad.matmul(b)? * self.scale)?;
        let gb = (grad.t()?.matmul(&u)? * self.scale)?;
        let ga = gu.t()?.matmul(x)?;
        // The first layer's input carries no gradient: skip its product.
        let gx = if x.track_op() {
            Some((grad.matmul(&self.w)? + gu.matmul(a)?)?)
        } else {
            None
        };
        Ok((gx, Some(ga), Some(gb)))
    }
}

/// `x` `(rows, in)` through frozen `w` `(out, in)` plus the LoRA update of
/// `a` `(rank, in)` and `b` `(out, rank)` scaled by `scale`: `(rows, out)`,
/// differentiable in `x`, `a` and `b`. Off the CPU, or in another dtype
/// than f32, it is composed from candle's ops (the same values).
pub fn lora_matmul(x: &Tensor, w: &Tensor, a: &Tensor, b: &Tensor, scale: f64) -> Result<Tensor> {
    let (_, k) = x.dims2()?;
    let (n, wk) = w.dims2()?;
    let (r, ak) = a.dims2()?;
    let (bn, br) = b.dims2()?;
    if k != wk || k != ak || (bn, br) != (n, r) {
        candle_core::bail!(
            "lora matmul: input {:?}, weight {:?}, A {:?} and B {:?} do not fit together",
            x.dims(),
            w.dims(),
            a.dims(),
            b.dims()
        );
    }
    let on_cpu = [x, w, a, b].iter().all(|t| t.device().is_cpu());
    let f32s = [x, w, a, b]
        .iter()
        .all(|t| t.dtype() == candle_core::DType::F32);
    if on_cpu && f32s {
        return x.apply_op3(
            a,
            b,
            LoraMatmul {
                w: w.clone(),
                scale,
            },
        );
    }
    frozen_matmul(x, w)? + (x.matmul(&a.t()?)?.matmul(&b.t()?)? * scale)?
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

    #[test]
    fn the_adapted_product_matches_its_composition_with_gradients() {
        let dev = Device::Cpu;
        let x = Var::randn(0f32, 1.0, (9, 6), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (5, 6), &dev).unwrap();
        let a = Var::randn(0f32, 1.0, (3, 6), &dev).unwrap();
        let b = Var::randn(0f32, 1.0, (5, 3), &dev).unwrap();
        let r = Tensor::randn(0f32, 1.0, (9, 5), &dev).unwrap();
        let scale = 0.7;

        let y = lora_matmul(&x, &w, &a, &b, scale).unwrap();
        let composed = (x.matmul(&w.t().unwrap()).unwrap()
            + (x.matmul(&a.t().unwrap())
                .unwrap()
                .matmul(&b.t().unwrap())
                .unwrap()
                * scale)
                .unwrap())
        .unwrap();
        let diff = (&y - &composed).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-5);

        let grads = (y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let want = (composed * &r)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for v in [&x, &a, &b] {
            let (g, c) = (grads.get(v).unwrap(), want.get(v).unwrap());
            let diff = (g - c).unwrap().abs().unwrap().max_all().unwrap();
            assert!(diff.to_scalar::<f32>().unwrap() < 1e-4, "{:?}", v.dims());
        }
        assert!(grads.get(&w).is_none());

        // An untracked input (a frozen model's first layer) gets no gradient.
        let plain = x.as_detached_tensor();
        let y = lora_matmul(&plain, &w, &a, &b, scale).unwrap();
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert!(grads.get(&plain).is_none() && grads.get(&a).is_some());

        let e = lora_matmul(&plain, &w, &b, &a, scale)
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not fit"), "{e}");
    }
}
