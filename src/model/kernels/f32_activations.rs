//! `Q8_0` weights times f32 activations: each weight block dequantised in
//! registers (`d * q`, as the f32 model's weights are) and multiplied with
//! the activations as they are. The 8-bit kernels of [`super::q4_1`] round
//! every activation block to 8 bits first, as llama.cpp does; that is most
//! of what separates their logits from the f32 model's where two tokens
//! are nearly tied (`endless bench sample --check`). Used for the output
//! layer only, and there for the largest products of the 8-bit kernel
//! ([`refine_top`]): about four times its arithmetic per product.

use super::blocks::{half, W8Block, QK};
use super::level::CpuLevel;
use super::ran::{record, Kernel};

/// Logits per row recomputed exactly: the largest of the 8-bit product.
pub(super) const REFINED: usize = 64;

/// Recompute with f32 activations the [`REFINED`] largest of each row of
/// `out` (`m` rows of `n` products of `xs`' rows with the weight rows `w`,
/// from the 8-bit kernel). The 8-bit product is off by a few hundredths
/// here; whichever token is largest exactly is among its top 64, and only
/// near-ties at the top decide the next token. The exact product of every
/// row would cost more than the rest of a decoding step.
pub(super) fn refine_top(
    w: &[W8Block],
    n: usize,
    xs: &[f32],
    m: usize,
    out: &mut [f32],
    level: CpuLevel,
) {
    // The AVX-512 path serves both AVX-512 levels (no byte products here).
    let path = level.min(CpuLevel::Avx512);
    record(Kernel::Q80F32, path);
    let k = xs.len() / m.max(1);
    let kb = k / QK;
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for (row, x) in out.chunks_exact_mut(n).zip(xs.chunks_exact(k)) {
        order.clear();
        order.extend(0..n);
        if n > REFINED {
            order.select_nth_unstable_by(REFINED - 1, |&a, &b| row[b].total_cmp(&row[a]));
            order.truncate(REFINED);
        }
        for &col in &order {
            row[col] = dot(&w[col * kb..(col + 1) * kb], x, path);
        }
    }
}

/// One weight row against one activation row of as many values, on the
/// path of `level` (one the processor has: checked by the caller).
fn dot(w: &[W8Block], x: &[f32], level: CpuLevel) -> f32 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the processor has AVX2 and FMA.
        CpuLevel::Avx2 => unsafe { dot_avx2(w, x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the processor has AVX-512 F, BW and VL.
        CpuLevel::Avx512 | CpuLevel::Avx512Vnni => unsafe { dot_avx512(w, x) },
        _ => dot_scalar(w, x),
    }
}

fn dot_scalar(w: &[W8Block], x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (b, x) in w.iter().zip(x.chunks_exact(QK)) {
        for (&q, &x) in b.qs.iter().zip(x) {
            sum += half(b.d) * q as f32 * x;
        }
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(w: &[W8Block], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    assert_eq!(w.len() * QK, x.len());
    let mut acc = _mm256_setzero_ps();
    for (blk, x) in w.iter().zip(x.chunks_exact(QK)) {
        // SAFETY: 32 bytes of `qs`; AVX2 is enabled.
        let q = unsafe { _mm256_loadu_si256(blk.qs.as_ptr().cast()) };
        let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        let d = _mm256_set1_ps(half(blk.d));
        let eighths = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
        for (i, q8) in eighths.into_iter().enumerate() {
            // Dequantised as the f32 model's weights are: d * q.
            let wd = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
            // SAFETY: 8 floats of the block's 32.
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(i * 8)) };
            acc = _mm256_fmadd_ps(wd, xv, acc);
        }
    }
    super::blocks::hsum(acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
fn dot_avx512(w: &[W8Block], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    assert_eq!(w.len() * QK, x.len());
    let mut acc = _mm512_setzero_ps();
    for (blk, x) in w.iter().zip(x.chunks_exact(QK)) {
        let d = _mm512_set1_ps(half(blk.d));
        for half in 0..2 {
            // SAFETY: 16 of the block's 32 bytes and 16 of its 32 floats.
            let (q, xv) = unsafe {
                (
                    _mm_loadu_si128(blk.qs.as_ptr().add(half * 16).cast()),
                    _mm512_loadu_ps(x.as_ptr().add(half * 16)),
                )
            };
            // Dequantised as the f32 model's weights are: d * q.
            let wd = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
            acc = _mm512_fmadd_ps(wd, xv, acc);
        }
    }
    _mm512_reduce_add_ps(acc)
}

#[cfg(test)]
mod tests {
    use super::super::q4_1::QuantMatmul;
    use super::{CpuLevel, REFINED};
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    /// Each row's largest products are the dequantised weights' f32 product
    /// (up to the order of additions), the others the 8-bit product's.
    #[test]
    fn q8_0_with_f32_activations_is_exact_at_the_top() {
        let dev = Device::Cpu;
        for n in [300usize, 3] {
            let w = Tensor::randn(0f32, 1.0, (n, 128), &dev).unwrap();
            let q = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
            let exact = q.dequantize(&dev).unwrap();
            let plain = QuantMatmul::from_qtensor(&q).unwrap().unwrap();
            let ours = QuantMatmul::from_qtensor(&q)
                .unwrap()
                .unwrap()
                .with_f32_activations();
            for m in [1usize, 2, 5] {
                let x = Tensor::randn(0f32, 1.0, (m, 128), &dev).unwrap();
                let want: Vec<Vec<f32>> = x.matmul(&exact.t().unwrap()).unwrap().to_vec2().unwrap();
                for level in CpuLevel::ALL.into_iter().filter(|l| l.available()) {
                    // Ranked by the same level's 8-bit products.
                    let eight_bit: Vec<Vec<f32>> =
                        plain.forward_with(&x, level).unwrap().to_vec2().unwrap();
                    let got: Vec<Vec<f32>> =
                        ours.forward_with(&x, level).unwrap().to_vec2().unwrap();
                    for r in 0..m {
                        let mut by_size: Vec<usize> = (0..n).collect();
                        by_size.sort_by(|&a, &b| eight_bit[r][b].total_cmp(&eight_bit[r][a]));
                        for (rank, &c) in by_size.iter().enumerate() {
                            let (reference, tol) = if rank < REFINED {
                                (want[r][c], 1e-4)
                            } else {
                                (eight_bit[r][c], 1e-5)
                            };
                            let d = (got[r][c] - reference).abs();
                            assert!(d < tol, "n={n} m={m} {level} rank {rank}: {d}");
                        }
                        // The refined products moved: 8 bits are not exact.
                        if n > REFINED {
                            let c = by_size[0];
                            assert!((eight_bit[r][c] - want[r][c]).abs() > 1e-6, "n={n} m={m}");
                        }
                    }
                }
            }
        }
    }
}
