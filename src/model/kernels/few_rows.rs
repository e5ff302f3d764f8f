//! `x · wᵀ` for the few rows of a decoding step (one per sequence sampled),
//! forward only.
//!
//! gemm, under candle's matmul, writes its output row-major, so it swaps the
//! operands and packs the weight as its left-hand side at every call: a
//! decoding step of 16 rows copied every weight matrix of the model into a
//! fresh buffer before multiplying (21% of a `tiny` policy's rollout CPU was
//! `pack_lhs`, more in page faults of those buffers). Here each output is the
//! dot product of an activation row with a weight row, both read where they
//! are: the weight is read once per step, and a row's result does not depend
//! on how many rows are decoded with it.

use super::columns::{for_columns, SyncPtr};
use candle_core::{CpuStorage, CustomOp2, DType, Device, Layout, Result, Shape, Tensor};

/// Rows up to which the sampling path uses [`rows_times_weight_t`] (see
/// [`crate::model::Transformer::set_few_rows`]); more go to gemm, whose
/// packing pays off once it is reused over many rows.
pub const FEW_ROWS: usize = 16;

/// Multiply-adds below which the product runs on the calling thread: waking
/// rayon's workers costs more than they would save.
const SERIAL_WORK: usize = 1 << 15;

/// Lanes summed side by side (whole SIMD registers on AVX2 and AVX-512).
const LANES: usize = 32;

/// `x` `(rows, in)` times the transpose of `w` `(out, in)`: `(rows, out)`.
/// This kernel for f32 on the CPU (meant for a few rows), candle's matmul
/// otherwise. No backward pass: for sampling only.
pub fn rows_times_weight_t(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let fits =
        matches!(x.device(), Device::Cpu) && x.dtype() == DType::F32 && w.dtype() == DType::F32;
    if !fits {
        return x.matmul(&w.t()?);
    }
    super::ran::record(
        super::ran::Kernel::FewRows,
        super::level::CpuLevel::Portable,
    );
    x.contiguous()?.apply_op2_no_bwd(&w.contiguous()?, &FewRows)
}

struct FewRows;

impl CustomOp2 for FewRows {
    fn name(&self) -> &'static str {
        "few-rows-matmul"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        x_layout: &Layout,
        w: &CpuStorage,
        w_layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (m, k) = x_layout.shape().dims2()?;
        let (n, wk) = w_layout.shape().dims2()?;
        if k != wk {
            candle_core::bail!("few-rows matmul: input of {k} columns, weight of {wk}");
        }
        let (Some((x0, x1)), Some((w0, w1))) =
            (x_layout.contiguous_offsets(), w_layout.contiguous_offsets())
        else {
            candle_core::bail!("few-rows matmul: operands must be contiguous");
        };
        let x = &x.as_slice::<f32>()?[x0..x1];
        let w = &w.as_slice::<f32>()?[w0..w1];
        let mut out = vec![0f32; m * n];
        let dst = SyncPtr(out.as_mut_ptr());
        for_columns(n, m * n * k >= SERIAL_WORK, |cols| {
            for col in cols {
                let wr = &w[col * k..(col + 1) * k];
                for r in 0..m {
                    // SAFETY: `out` holds `m * n` values and outlives the
                    // work items, which write disjoint columns.
                    unsafe { dst.write(r * n + col, dot(&x[r * k..(r + 1) * k], wr)) };
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

/// Dot product in [`LANES`] independent sums (vectorised by the compiler),
/// added up at the end.
#[inline(always)]
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() / LANES * LANES);
    let (b_body, b_tail) = b.split_at(a_body.len());
    for (x, y) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::max_diff;

    /// Every row count up to past the sampling path's limit, odd widths (a
    /// tail after the lanes), agrees with candle's matmul; a row's result
    /// does not depend on the rows beside it.
    #[test]
    fn agrees_with_matmul_and_is_batch_invariant() {
        let dev = Device::Cpu;
        for (n, k) in [(7, 5), (64, 192), (1660, 192), (33, 70)] {
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
            let x = Tensor::randn(0f32, 1.0, (FEW_ROWS + 2, k), &dev).unwrap();
            let first = rows_times_weight_t(&x.narrow(0, 0, 1).unwrap(), &w).unwrap();
            for rows in [1, 2, 5, FEW_ROWS, FEW_ROWS + 2] {
                let x = x.narrow(0, 0, rows).unwrap();
                let ours = rows_times_weight_t(&x, &w).unwrap();
                let gemm = x.matmul(&w.t().unwrap()).unwrap();
                let diff = max_diff(&ours, &gemm);
                assert!(diff < 1e-4, "{rows}x{k} by {n}x{k}: {diff}");
                {
                    let row0 = ours.narrow(0, 0, 1).unwrap().flatten_all().unwrap();
                    let alone = first.flatten_all().unwrap();
                    assert_eq!(
                        row0.to_vec1::<f32>().unwrap(),
                        alone.to_vec1::<f32>().unwrap()
                    );
                }
            }
        }
    }

    #[test]
    fn mismatched_widths_are_an_error() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((2, 4), DType::F32, &dev).unwrap();
        let w = Tensor::zeros((3, 5), DType::F32, &dev).unwrap();
        assert!(rows_times_weight_t(&x, &w).is_err());
    }
}
