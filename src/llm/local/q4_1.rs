//! A SIMD matmul for GGUF `Q4_1` weights.
//!
//! candle 0.11 multiplies `Q4_1` blocks with a scalar loop (`vec_dot_unopt`:
//! 88% of SmolLM2's decoding time in a profile here), where llama.cpp has
//! AVX2 kernels. This module does what llama.cpp does: activations are
//! quantized to 8 bits per block of 32 (`Q8_1`: scale and scaled sum), and each
//! weight block's 4-bit values are multiplied with them as bytes
//! (`maddubs`), on rayon's worker threads. Same arithmetic as
//! `ggml_vec_dot_q4_1_q8_1`, except that the activation scales stay in f32
//! (ggml and candle round them to f16), which moves logits by a few tenths
//! of a quantization step here and there.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, Tensor};

/// Values per block.
const QK: usize = 32;

/// One weight block: `x = d * q + m` for 32 four-bit `q`, low nibbles first.
#[derive(Clone, Copy)]
#[repr(C)]
struct WBlock {
    d: f32,
    m: f32,
    qs: [u8; 16],
}

/// One activation block: `x ≈ d * q`, and `s = d * Σq`.
#[derive(Clone, Copy)]
#[repr(C)]
struct ABlock {
    d: f32,
    s: f32,
    qs: [i8; 32],
}

const ZERO_A: ABlock = ABlock {
    d: 0.0,
    s: 0.0,
    qs: [0; 32],
};

/// IEEE half to single precision.
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: normalise.
            let mut e = 127 - 15 + 1;
            let mut f = f;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 127 - 15) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

/// A `Q4_1` weight matrix `(out, in)`, ready for [`Q41Matmul::forward`].
pub struct Q41Matmul {
    blocks: Vec<WBlock>,
    n: usize,
    k: usize,
}

impl Q41Matmul {
    /// Take a `Q4_1` tensor of shape `(out, in)`; `None` for other types or shapes.
    pub fn from_qtensor(t: &QTensor) -> Result<Option<Self>> {
        if t.dtype() != GgmlDType::Q4_1 {
            return Ok(None);
        }
        let Ok((n, k)) = t.shape().dims2() else {
            return Ok(None);
        };
        if k % QK != 0 {
            return Ok(None);
        }
        let data = t.data()?;
        let nb = n * k / QK;
        if data.len() != nb * 20 {
            candle_core::bail!("Q4_1 tensor of {} bytes for {nb} blocks", data.len());
        }
        let blocks = data
            .chunks_exact(20)
            .map(|b| {
                let mut qs = [0u8; 16];
                qs.copy_from_slice(&b[4..20]);
                WBlock {
                    d: f16_to_f32(u16::from_le_bytes([b[0], b[1]])),
                    m: f16_to_f32(u16::from_le_bytes([b[2], b[3]])),
                    qs,
                }
            })
            .collect();
        Ok(Some(Self { blocks, n, k }))
    }

    /// `x @ w.T` for `x` of shape `(..., in)`: `(..., out)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let Some((&k, rows)) = dims.split_last() else {
            candle_core::bail!("Q4_1 matmul of a scalar");
        };
        if k != self.k {
            candle_core::bail!(
                "Q4_1 matmul: input {dims:?} against ({}, {})",
                self.n,
                self.k
            );
        }
        let m: usize = rows.iter().product();
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        let kb = k / QK;
        let mut act = vec![ZERO_A; m * kb];
        for (row, a) in xs.chunks_exact(k).zip(act.chunks_exact_mut(kb)) {
            quantize_row(row, a);
        }
        let mut out = vec![0f32; m * self.n];
        let dst = SyncPtr(out.as_mut_ptr());
        let dot = dot_fn();
        // Work items: 16 output columns (weight rows) for every input row, on
        // rayon's pool, whose idle workers sleep: candle's spinning barrier
        // pool loses most of its time waiting when the cores are shared.
        let n = self.n;
        let chunk = 16;
        let cols_per = |c: usize| c * chunk..((c + 1) * chunk).min(n);
        let body = |c: usize| {
            let dst = &dst;
            for col in cols_per(c) {
                let w = &self.blocks[col * kb..(col + 1) * kb];
                for r in 0..m {
                    let v = dot(w, &act[r * kb..(r + 1) * kb]);
                    // SAFETY: each (row, col) is written by exactly one work item,
                    // and `out` outlives the parallel loop.
                    unsafe { *dst.0.add(r * n + col) = v };
                }
            }
        };
        use rayon::prelude::*;
        (0..n.div_ceil(chunk)).into_par_iter().for_each(body);
        let mut shape = dims;
        *shape.last_mut().unwrap_or(&mut 0) = self.n;
        Tensor::from_vec(out, shape, x.device())
    }
}

struct SyncPtr(*mut f32);
// SAFETY: writers touch disjoint elements (see `forward`).
unsafe impl Sync for SyncPtr {}
unsafe impl Send for SyncPtr {}

/// `quantize_row_q8_1`: per block, `d = max|x| / 127`, `q = round(x / d)`.
fn quantize_row(xs: &[f32], out: &mut [ABlock]) {
    for (x, b) in xs.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            let r = (v * id).round() as i32;
            *q = r as i8;
            sum += r;
        }
        b.d = d;
        b.s = d * sum as f32;
    }
}

type DotFn = fn(&[WBlock], &[ABlock]) -> f32;

/// The fastest dot product this processor runs.
fn dot_fn() -> DotFn {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected.
            return |w, a| unsafe { dot_avx2(w, a) };
        }
    }
    dot_scalar
}

fn dot_scalar(w: &[WBlock], a: &[ABlock]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        let mut s = 0i32;
        for j in 0..16 {
            s += (w.qs[j] & 0x0f) as i32 * a.qs[j] as i32;
            s += (w.qs[j] >> 4) as i32 * a.qs[j + 16] as i32;
        }
        sum += s as f32 * w.d * a.d + w.m * a.s;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(w: &[WBlock], a: &[ABlock]) -> f32 {
    use std::arch::x86_64::*;
    let mask = _mm_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let mut summ = 0f32;
    for (w, a) in w.iter().zip(a) {
        let q = _mm_loadu_si128(w.qs.as_ptr() as *const __m128i);
        let lo = _mm_and_si128(q, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
        let wq = _mm256_set_m128i(hi, lo);
        let aq = _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i);
        // u8 (0..15) x i8 pairs summed to i16 (|sum| <= 2 * 15 * 128: no overflow).
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, aq), ones);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * a.d), _mm256_cvtepi32_ps(p), acc);
        summ += w.m * a.s;
    }
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s) + summ
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module};

    #[test]
    fn q4_1_matmul_matches_candle() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (72, 128), &dev).unwrap();
        let q = QTensor::quantize(&w, GgmlDType::Q4_1).unwrap();
        let ours = Q41Matmul::from_qtensor(&q).unwrap().unwrap();
        let theirs = QMatMul::from_qtensor(q).unwrap();
        for m in [1usize, 3, 16] {
            let x = Tensor::randn(0f32, 1.0, (m, 1, 128), &dev).unwrap();
            let a = ours.forward(&x).unwrap();
            let b = theirs.forward(&x).unwrap();
            assert_eq!(a.dims(), &[m, 1, 72]);
            let d = (a - &b)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            let scale = b
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            // Only the f16 rounding of the activation scales differs.
            assert!(d < 2e-3 * scale, "m={m}: {d} (max {scale})");
        }
        let wb = [WBlock {
            d: 0.5,
            m: -1.0,
            qs: [0x21; 16],
        }];
        let mut ab = [ZERO_A];
        quantize_row(&[1.0; 32], &mut ab);
        assert!((dot_scalar(&wb, &ab) - dot_fn()(&wb, &ab)).abs() < 1e-5);
        assert!((f16_to_f32(0x3c00) - 1.0).abs() < 1e-9);
        assert!((f16_to_f32(0xc000) + 2.0).abs() < 1e-9);
        assert!((f16_to_f32(0x0001) - 5.960_464_5e-8).abs() < 1e-12);
    }
}
