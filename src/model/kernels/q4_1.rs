//! A SIMD matmul for GGUF `Q4_1` and `Q8_0` weights.
//!
//! candle 0.11 multiplies `Q4_1` blocks with a scalar loop (`vec_dot_unopt`:
//! 88% of SmolLM2's decoding time in a profile here), where llama.cpp has
//! AVX2 kernels; its `Q8_0` matmul (SmolLM2's tied output layer) has SIMD
//! dot products but runs on a spinning thread pool of its own.
//!
//! This module does what llama.cpp does: activations are quantized to 8 bits per block of 32 (`Q8_1`: scale and scaled sum), and each
//! weight block's 4-bit values are multiplied with them as bytes
//! (`maddubs`), on rayon's worker threads. Same arithmetic as
//! `ggml_vec_dot_q4_1_q8_1`, except that the activation scales stay in f32
//! (ggml and candle round them to f16), which moves logits by a few tenths
//! of a quantization step here and there. `Q8_0` weights: the same with
//! `ggml_vec_dot_q8_0_q8_0` (activation sums unused).
//!
//! Two AVX2 kernels: one weight row against one activation row (decoding one
//! sequence), and, for several rows (prompts, batches), one weight row against
//! a tile of up to [`TILE`] activation rows, unpacking each weight block's
//! nibbles once. Each (weight row, activation row) pair keeps its own vector
//! accumulator, summed horizontally once at the end. (Four weight rows at once
//! against one activation row measured 1.6x slower decoding one sequence
//! than one at a time, on a shared 2-core AMD EPYC.)

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, Tensor};
use std::ops::Range;

use super::blocks::{hsum, Isa, W8Block, QK};
use super::columns::{for_columns, SyncPtr};

/// Activation rows a weight row is multiplied with at once (rows > 1).
const TILE: usize = 8;
/// Block products below which a matmul runs on the calling thread: waking
/// rayon's workers costs more than they would save.
const SERIAL_WORK: usize = 4096;

/// One `Q4_1` weight block: `x = d * q + m` for 32 four-bit `q`, low nibbles first.
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

fn f16_at(b: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m256, __m256i};

/// A weight block type: `x = d * q + m` (`m` = 0 without [`WeightBlock::MIN`]).
trait WeightBlock: Copy + Send + Sync {
    const DTYPE: GgmlDType;
    /// Bytes of a block in the GGUF file.
    const BYTES: usize;
    /// Whether blocks have an offset `m`, multiplied with the activations' `s`.
    const MIN: bool;
    /// The values ready for [`WeightBlock::products`].
    #[cfg(target_arch = "x86_64")]
    type Unpacked: Copy;

    fn parse(b: &[u8]) -> Self;
    fn d(&self) -> f32;
    fn m(&self) -> f32;
    /// Σ q_w * q_a.
    fn dot_i32(&self, a: &ABlock) -> i32;

    /// # Safety
    /// The processor has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack(&self) -> Self::Unpacked;

    /// Σ q_w * q_a as 8 partial sums.
    ///
    /// # Safety
    /// The processor has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    unsafe fn products(w: Self::Unpacked, a: &ABlock) -> __m256;
}

impl WeightBlock for WBlock {
    const DTYPE: GgmlDType = GgmlDType::Q4_1;
    const BYTES: usize = 20;
    const MIN: bool = true;
    #[cfg(target_arch = "x86_64")]
    type Unpacked = __m256i;

    fn parse(b: &[u8]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[4..20]);
        Self {
            d: f16_at(b),
            m: f16_at(&b[2..]),
            qs,
        }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        self.m
    }
    fn dot_i32(&self, a: &ABlock) -> i32 {
        let mut s = 0i32;
        for j in 0..16 {
            s += (self.qs[j] & 0x0f) as i32 * a.qs[j] as i32;
            s += (self.qs[j] >> 4) as i32 * a.qs[j + 16] as i32;
        }
        s
    }

    /// The 32 values as bytes, low nibbles in the low lane.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn unpack(&self) -> __m256i {
        use std::arch::x86_64::*;
        // SAFETY: 16 bytes are read from a 16-byte array.
        let q = unsafe { _mm_loadu_si128(self.qs.as_ptr() as *const __m128i) };
        let both = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
        _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn products(wq: __m256i, a: &ABlock) -> __m256 {
        use std::arch::x86_64::*;
        // SAFETY: 32 bytes are read from a 32-byte array.
        let aq = unsafe { _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i) };
        // u8 (0..15) x i8 pairs summed to i16 (|sum| <= 2 * 15 * 128: no overflow).
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, aq), _mm256_set1_epi16(1));
        _mm256_cvtepi32_ps(p)
    }
}

impl WeightBlock for W8Block {
    const DTYPE: GgmlDType = GgmlDType::Q8_0;
    const BYTES: usize = 34;
    const MIN: bool = false;
    /// |q| and q.
    #[cfg(target_arch = "x86_64")]
    type Unpacked = (__m256i, __m256i);

    fn parse(b: &[u8]) -> Self {
        let mut qs = [0i8; 32];
        for (q, &b) in qs.iter_mut().zip(&b[2..34]) {
            *q = b as i8;
        }
        Self { d: f16_at(b), qs }
    }
    fn d(&self) -> f32 {
        self.d
    }
    fn m(&self) -> f32 {
        0.0
    }
    fn dot_i32(&self, a: &ABlock) -> i32 {
        self.qs
            .iter()
            .zip(&a.qs)
            .map(|(&w, &a)| w as i32 * a as i32)
            .sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn unpack(&self) -> (__m256i, __m256i) {
        use std::arch::x86_64::*;
        // SAFETY: 32 bytes are read from a 32-byte array.
        let q = unsafe { _mm256_loadu_si256(self.qs.as_ptr() as *const __m256i) };
        (_mm256_abs_epi8(q), q)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn products((wabs, wq): (__m256i, __m256i), a: &ABlock) -> __m256 {
        use std::arch::x86_64::*;
        // SAFETY: 32 bytes are read from a 32-byte array.
        let aq = unsafe { _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i) };
        // |w| * (a with w's sign): pairs of at most 128 * 128 stay in i16
        // (ggml's q8_0 weights are within ±127).
        let p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(aq, wq)),
            _mm256_set1_epi16(1),
        );
        _mm256_cvtepi32_ps(p)
    }
}

enum Weights {
    Q41(Vec<WBlock>),
    Q80(Vec<W8Block>),
}

/// A `Q4_1` or `Q8_0` weight matrix `(out, in)`, ready for [`QuantMatmul::forward`].
pub struct QuantMatmul {
    w: Weights,
    n: usize,
    k: usize,
    /// `Q8_0` weights against f32 activations (see [`Self::with_f32_activations`]).
    f32_activations: bool,
}

impl QuantMatmul {
    /// Take a `Q4_1` or `Q8_0` tensor of shape `(out, in)`; `None` for other
    /// types or shapes.
    pub fn from_qtensor(t: &QTensor) -> Result<Option<Self>> {
        let Ok((n, k)) = t.shape().dims2() else {
            return Ok(None);
        };
        if k % QK != 0 {
            return Ok(None);
        }
        fn parse<B: WeightBlock>(t: &QTensor, n: usize, k: usize) -> Result<Vec<B>> {
            let data = t.data()?;
            let nb = n * k / QK;
            if data.len() != nb * B::BYTES {
                candle_core::bail!(
                    "{:?} tensor of {} bytes for {nb} blocks",
                    B::DTYPE,
                    data.len()
                );
            }
            Ok(data.chunks_exact(B::BYTES).map(B::parse).collect())
        }
        let w = match t.dtype() {
            GgmlDType::Q4_1 => Weights::Q41(parse(t, n, k)?),
            GgmlDType::Q8_0 => Weights::Q80(parse(t, n, k)?),
            _ => return Ok(None),
        };
        Ok(Some(Self {
            w,
            n,
            k,
            f32_activations: false,
        }))
    }

    /// Recompute the largest products of each row with `Q8_0` weights and
    /// the activations as they are, in f32, instead of rounded to 8 bits:
    /// the exact product of the dequantised weights where it decides the
    /// next token ([`super::f32_activations`]). For the output layer.
    /// Other weight types are unchanged.
    pub fn with_f32_activations(mut self) -> Self {
        self.f32_activations = matches!(self.w, Weights::Q80(_));
        self
    }

    /// `x @ w.T` for `x` of shape `(..., in)`: `(..., out)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, Isa::detect())
    }

    pub(super) fn forward_with(&self, x: &Tensor, isa: Isa) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let Some((&k, rows)) = dims.split_last() else {
            candle_core::bail!("quantized matmul of a scalar");
        };
        if k != self.k {
            candle_core::bail!(
                "quantized matmul: input {dims:?} against ({}, {})",
                self.n,
                self.k
            );
        }
        let m: usize = rows.iter().product();
        let xs = x.flatten_all()?.to_vec1::<f32>()?;
        let mut shape = dims;
        *shape.last_mut().unwrap_or(&mut 0) = self.n;
        let kb = k / QK;
        let mut act = vec![ZERO_A; m * kb];
        for (row, a) in xs.chunks_exact(k).zip(act.chunks_exact_mut(kb)) {
            quantize_row(row, a);
        }
        let mut out = match &self.w {
            Weights::Q41(w) => matmul(w, self.n, kb, &act, m, isa),
            Weights::Q80(w) => matmul(w, self.n, kb, &act, m, isa),
        };
        if let (true, Weights::Q80(w)) = (self.f32_activations, &self.w) {
            super::f32_activations::refine_top(w, self.n, &xs, m, &mut out, isa);
        }
        Tensor::from_vec(out, shape, x.device())
    }
}

/// The `(m, n)` products of `m` quantized rows of `kb` blocks each with the
/// `n` weight rows `w`.
fn matmul<B: WeightBlock>(
    w: &[B],
    n: usize,
    kb: usize,
    act: &[ABlock],
    m: usize,
    isa: Isa,
) -> Vec<f32> {
    // Per tile of activation rows and block, the rows' `s`, side by side.
    let mut sums = Vec::new();
    if m > 1 {
        sums = vec![[0f32; TILE]; m.div_ceil(TILE) * kb];
        if B::MIN {
            for (r, a) in act.chunks_exact(kb).enumerate() {
                for (b, a) in a.iter().enumerate() {
                    sums[(r / TILE) * kb + b][r % TILE] = a.s;
                }
            }
        }
    }
    let mut out = vec![0f32; m * n];
    let dst = SyncPtr(out.as_mut_ptr());
    for_columns(n, n * m * kb >= SERIAL_WORK, |cols| {
        // SAFETY: work items cover disjoint columns, and `out` outlives them.
        unsafe { columns(w, n, kb, isa, act, m, &sums, cols, &dst) }
    });
    out
}

/// Output columns `cols` of every row.
///
/// # Safety
/// `dst` holds `m * n` values, of which no other thread writes these columns.
#[allow(clippy::too_many_arguments)]
unsafe fn columns<B: WeightBlock>(
    blocks: &[B],
    n: usize,
    kb: usize,
    isa: Isa,
    act: &[ABlock],
    m: usize,
    sums: &[[f32; TILE]],
    cols: Range<usize>,
    dst: &SyncPtr,
) {
    let w = |col: usize| &blocks[col * kb..(col + 1) * kb];
    let put = |r: usize, col: usize, v: f32| unsafe { *dst.0.add(r * n + col) = v };
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if m == 1 => {
            for col in cols {
                // SAFETY: Avx2 is only chosen where detected.
                put(0, col, unsafe { row_avx2(w(col), act) });
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            for (t, sums) in sums.chunks_exact(kb).enumerate() {
                let r0 = t * TILE;
                let a = &act[r0 * kb..];
                for col in cols.clone() {
                    let w = w(col);
                    let mut v = [0f32; TILE];
                    // SAFETY: as above; the tile's rows are in `a`.
                    unsafe {
                        match m - r0 {
                            1 => v[..1].copy_from_slice(&tile_avx2::<B, 1>(w, a, sums)),
                            2 => v[..2].copy_from_slice(&tile_avx2::<B, 2>(w, a, sums)),
                            3 => v[..3].copy_from_slice(&tile_avx2::<B, 3>(w, a, sums)),
                            4 => v[..4].copy_from_slice(&tile_avx2::<B, 4>(w, a, sums)),
                            5 => v[..5].copy_from_slice(&tile_avx2::<B, 5>(w, a, sums)),
                            6 => v[..6].copy_from_slice(&tile_avx2::<B, 6>(w, a, sums)),
                            7 => v[..7].copy_from_slice(&tile_avx2::<B, 7>(w, a, sums)),
                            _ => v = tile_avx2::<B, TILE>(w, a, sums),
                        }
                    }
                    for (j, &v) in v.iter().enumerate().take(m - r0) {
                        put(r0 + j, col, v);
                    }
                }
            }
        }
        Isa::Scalar => {
            for col in cols {
                for r in 0..m {
                    put(r, col, dot_scalar(w(col), &act[r * kb..(r + 1) * kb]));
                }
            }
        }
    }
}

/// `quantize_row_q8_1`: per block, `d = max|x| / 127`, `q = round(x / d)`.
/// Tests only: store activation scales rounded to f16, as ggml (llama.cpp)
/// and candle do, to measure what this crate's f32 scales are worth.
#[cfg(test)]
pub(crate) static GGML_F16_SCALES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// `x` rounded to the nearest IEEE half (ties to even), as f32.
#[cfg(test)]
fn round_to_f16(x: f32) -> f32 {
    if x.abs() < 6.103_515_6e-5 {
        // Subnormal halves: multiples of 2^-24.
        let step = 5.960_464_5e-8_f32;
        return (x / step).round_ties_even() * step;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 13) & 1;
    f32::from_bits(bits.wrapping_add(0x0fff + lsb) & !0x1fff)
}

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
        #[cfg(test)]
        if GGML_F16_SCALES.load(std::sync::atomic::Ordering::Relaxed) {
            b.d = round_to_f16(d);
            b.s = round_to_f16(d * sum as f32);
        }
    }
}

fn dot_scalar<B: WeightBlock>(w: &[B], a: &[ABlock]) -> f32 {
    let mut sum = 0f32;
    for (w, a) in w.iter().zip(a) {
        sum += w.dot_i32(a) as f32 * w.d() * a.d;
        if B::MIN {
            sum += w.m() * a.s;
        }
    }
    sum
}

/// One weight row (`w`) against one activation row of as many blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_avx2<B: WeightBlock>(w: &[B], a: &[ABlock]) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = _mm256_setzero_ps();
    let mut summ = 0f32;
    for (w, a) in w.iter().zip(a) {
        // SAFETY: AVX2 is enabled.
        let p = unsafe { B::products(w.unpack(), a) };
        acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d() * a.d), p, acc);
        if B::MIN {
            summ += w.m() * a.s;
        }
    }
    hsum(acc) + summ
}

/// One weight row against the first `R` activation rows of a tile starting at
/// `a` (rows of `w.len()` blocks), whose `s` per block are in `sums`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tile_avx2<B: WeightBlock, const R: usize>(
    w: &[B],
    a: &[ABlock],
    sums: &[[f32; TILE]],
) -> [f32; R] {
    use std::arch::x86_64::*;
    const { assert!(TILE == 8) };
    let kb = w.len();
    assert!(a.len() >= R * kb && sums.len() >= kb);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summ = _mm256_setzero_ps();
    for (b, w) in w.iter().enumerate() {
        // SAFETY: AVX2 is enabled; b < kb, and the lengths were checked above.
        let wq = unsafe { w.unpack() };
        if B::MIN {
            let s = unsafe { _mm256_loadu_ps(sums.get_unchecked(b).as_ptr()) };
            summ = _mm256_fmadd_ps(_mm256_set1_ps(w.m()), s, summ);
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            let a = unsafe { a.get_unchecked(j * kb + b) };
            let p = unsafe { B::products(wq, a) };
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d() * a.d), p, *acc);
        }
    }
    let mut ms = [0f32; TILE];
    // SAFETY: TILE == 8 floats are written.
    unsafe { _mm256_storeu_ps(ms.as_mut_ptr(), summ) };
    std::array::from_fn(|j| hsum(acc[j]) + ms[j])
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module};

    fn max_abs(t: &Tensor) -> f32 {
        t.abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn q4_1_matmul_matches_candle() {
        let dev = Device::Cpu;
        // Odd weight row counts leave remainders after the work items; 17 activation rows leave one after two tiles.
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
            for n in [72usize, 77, 3] {
                let w = Tensor::randn(0f32, 1.0, (n, 128), &dev).unwrap();
                let q = QTensor::quantize(&w, dtype).unwrap();
                let ours = QuantMatmul::from_qtensor(&q).unwrap().unwrap();
                let theirs = QMatMul::from_qtensor(q).unwrap();
                for m in [1usize, 2, 3, 4, 5, 8, 16, 17] {
                    let x = Tensor::randn(0f32, 1.0, (m, 1, 128), &dev).unwrap();
                    let a = ours.forward(&x).unwrap();
                    let b = theirs.forward(&x).unwrap();
                    assert_eq!(a.dims(), &[m, 1, n]);
                    // The typical size of a dot product of 128 unit normals: with
                    // only 3 outputs the largest can be small next to its terms.
                    let scale = max_abs(&b).max((128f32).sqrt());
                    // Only the f16 rounding of the activation scales differs.
                    let d = max_abs(&(&a - &b).unwrap());
                    assert!(d < 2e-3 * scale, "{dtype:?} n={n} m={m}: {d} (max {scale})");
                    // The SIMD kernels add in another order than the scalar loop.
                    let s = ours.forward_with(&x, Isa::Scalar).unwrap();
                    let d = max_abs(&(&a - &s).unwrap());
                    assert!(d < 1e-5 * scale, "{dtype:?} n={n} m={m} scalar: {d}");
                }
            }
        }
        let wb = [WBlock {
            d: 0.5,
            m: -1.0,
            qs: [0x21; 16],
        }];
        let mut ab = [ZERO_A];
        quantize_row(&[1.0; 32], &mut ab);
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() == Isa::Avx2 {
            let v = unsafe { row_avx2(&wb, &ab) };
            assert!((dot_scalar(&wb, &ab) - v).abs() < 1e-5);
            // Q8_0's extreme -128 times -127 in every pair.
            let w8 = [W8Block {
                d: 1.0,
                qs: [-128; 32],
            }];
            quantize_row(&[-1.0; 32], &mut ab);
            let v = unsafe { row_avx2(&w8, &ab) };
            assert_eq!(v, dot_scalar(&w8, &ab));
        }
        assert!((f16_to_f32(0x3c00) - 1.0).abs() < 1e-9);
        assert!((f16_to_f32(0xc000) + 2.0).abs() < 1e-9);
        assert!((f16_to_f32(0x0001) - 5.960_464_5e-8).abs() < 1e-12);
    }

    /// Timings of SmolLM2's matmul shapes:
    /// `cargo test --release --lib q4_1_bench -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn q4_1_bench() {
        let dev = Device::Cpu;
        for (n, k) in [(576usize, 576usize), (192, 576), (1536, 576), (576, 1536)] {
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
            let q = QTensor::quantize(&w, GgmlDType::Q4_1).unwrap();
            let ours = QuantMatmul::from_qtensor(&q).unwrap().unwrap();
            for m in [1usize, 16, 47] {
                let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
                let reps = 20_000_000 / (n * k * m).max(1) + 1;
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    ours.forward(&x).unwrap();
                }
                let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
                println!("({n:5}, {k:5}) x {m:3} rows: {us:8.1} us");
            }
        }
    }
}
