//! A SIMD matmul for GGUF `Q4_1` and `Q8_0` weights.
//!
//! candle 0.11 multiplies `Q4_1` blocks with a scalar loop (`vec_dot_unopt`:
//! 88% of SmolLM2's decoding time in a profile here), where llama.cpp has
//! AVX2 kernels; its `Q8_0` matmul (SmolLM2's tied output layer) has SIMD
//! dot products but runs on a spinning thread pool of its own.
//!
//! This module does what llama.cpp does: activations are quantized to 8 bits per block of 32 (`Q8_1`: scale and scaled sum), and each
//! weight block's 4-bit values are multiplied with them as bytes
//! (`maddubs`), on rayon's worker threads (or a decoding step's spinning
//! team, [`super::team`]). Same arithmetic as
//! `ggml_vec_dot_q4_1_q8_1`, except that the activation scales stay in f32
//! (ggml and candle round them to f16), which moves logits by a few tenths
//! of a quantization step here and there. `Q8_0` weights: the same with
//! `ggml_vec_dot_q8_0_q8_0` (activation sums unused).
//!
//! Two kernels per instruction set ([`CpuLevel`], chosen at run time): one
//! weight row against one activation row (decoding one sequence), and, for
//! several rows (prompts, batches), one weight row against a tile of up to
//! [`TILE`] activation rows, unpacking each weight block's nibbles once.
//! AVX2 works on one block at a time; AVX-512 ([`super::avx512`]) on two
//! blocks per register, with `vpdpbusd` where the CPU has VNNI (tiles keep
//! the AVX2 layout, taking a 256-bit `vpdpbusd` there). Every path
//! computes the same integer block products; only the order of the f32
//! additions differs. Each (weight row, activation row) pair keeps its own vector
//! accumulator, summed horizontally once at the end. (Four weight rows at once
//! against one activation row measured 1.6x slower decoding one sequence
//! than one at a time, on a shared 2-core AMD EPYC.)

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, Tensor};
use std::ops::Range;

use super::blocks::{hsum, W8Block, QK};
use super::columns::{for_columns, SyncPtr};
use super::level::{selected_for_candle, CpuLevel};
use super::ran::record;

#[cfg(target_arch = "x86_64")]
use super::avx512::{pack_pairs, APair};
#[cfg(not(target_arch = "x86_64"))]
type APair = ();
#[cfg(not(target_arch = "x86_64"))]
fn pack_pairs<B>(_: &[ABlock], _: usize, _: usize) -> Vec<APair> {
    Vec::new()
}
use super::weight_blocks::ZERO_A;
pub(super) use super::weight_blocks::{ABlock, WBlock, WeightBlock, TILE};

/// Block products below which a matmul runs on the calling thread: waking
/// rayon's workers costs more than they would save.
const SERIAL_WORK: usize = 4096;

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

    /// The matrices `parts` (same weight type and input width) stacked by
    /// rows, `(Σ out, in)`: the projections of one input as one product,
    /// so that decoding one sequence wakes the threads once for them, and
    /// a small projection (a key or value head's) no longer runs alone on
    /// one thread. The parts back when they differ in type or width.
    pub fn stack_rows(parts: Vec<QuantMatmul>) -> std::result::Result<Self, Vec<QuantMatmul>> {
        let same = parts.windows(2).all(|p| {
            p[0].k == p[1].k
                && p[0].f32_activations == p[1].f32_activations
                && matches!(
                    (&p[0].w, &p[1].w),
                    (Weights::Q41(_), Weights::Q41(_)) | (Weights::Q80(_), Weights::Q80(_))
                )
        });
        let Some(first) = parts.first().filter(|_| same) else {
            return Err(parts);
        };
        let (k, f32_activations) = (first.k, first.f32_activations);
        let n = parts.iter().map(|p| p.n).sum();
        let (mut q41, mut q80) = (Vec::new(), Vec::new());
        for p in parts {
            match p.w {
                Weights::Q41(b) => q41.extend(b),
                Weights::Q80(b) => q80.extend(b),
            }
        }
        // One of the two is empty: the parts are of one type.
        let w = if q80.is_empty() {
            Weights::Q41(q41)
        } else {
            Weights::Q80(q80)
        };
        Ok(Self {
            w,
            n,
            k,
            f32_activations,
        })
    }

    /// Output width (rows of the weight matrix).
    pub fn out_dim(&self) -> usize {
        self.n
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
    /// The kernels are those of [`CpuLevel::selected`].
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, selected_for_candle()?)
    }

    /// [`Self::forward`] on the kernels of `level`, which the processor must
    /// have ([`CpuLevel::available`]; an error otherwise).
    pub fn forward_with(&self, x: &Tensor, level: CpuLevel) -> Result<Tensor> {
        if !level.available() {
            candle_core::bail!(
                "quantized matmul: this CPU lacks {} for the {level} kernels",
                level.needs()
            );
        }
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
            Weights::Q41(w) => matmul(w, self.n, kb, &act, m, level),
            Weights::Q80(w) => matmul(w, self.n, kb, &act, m, level),
        };
        if let (true, Weights::Q80(w)) = (self.f32_activations, &self.w) {
            super::f32_activations::refine_top(w, self.n, &xs, m, &mut out, level);
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
    level: CpuLevel,
) -> Vec<f32> {
    // Tiles (several rows) keep the AVX2 layout on AVX-512 levels (with
    // `vpdpbusd` where there is VNNI): a two-blocks-per-register tile kernel
    // disagreed with candle's on a real model's prompt
    // (`model::tests::gguf_llama_runner_matches_candle_transformers`) and
    // gained under 8% where it agreed.
    match m {
        1 => record(B::KERNELS.0, level),
        _ => record(B::KERNELS.1, tile_level(level)),
    }
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
    // The AVX-512 row kernels read activation blocks two at a time, packed.
    let pairs = if m == 1 && level >= CpuLevel::Avx512 {
        pack_pairs::<B>(act, m, kb)
    } else {
        Vec::new()
    };
    let mut out = vec![0f32; m * n];
    let dst = SyncPtr(out.as_mut_ptr());
    for_columns(n, n * m * kb >= SERIAL_WORK, |cols| {
        let ctx = Operands {
            kb,
            level,
            act,
            pairs: &pairs,
            m,
            sums: &sums,
        };
        // SAFETY: work items cover disjoint columns, and `out` outlives them.
        unsafe { columns(w, n, &ctx, cols, &dst) }
    });
    out
}

/// The path the tile kernels take on `level`: AVX-512 without VNNI has no
/// tile kernel of its own (AVX2's runs).
pub(crate) fn tile_level(level: CpuLevel) -> CpuLevel {
    match level {
        CpuLevel::Avx512 => CpuLevel::Avx2,
        _ => level,
    }
}

/// `$tile::<B, R>($w, $a, $sums)` for the `$rows` (1 to [`TILE`]) rows of
/// a tile, as [`TILE`] values.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_of {
    ($tile:ident, $rows:expr, $($arg:expr),*) => {{
        let mut v = [0f32; TILE];
        match $rows {
            1 => v[..1].copy_from_slice(&$tile::<B, 1>($($arg),*)),
            2 => v[..2].copy_from_slice(&$tile::<B, 2>($($arg),*)),
            3 => v[..3].copy_from_slice(&$tile::<B, 3>($($arg),*)),
            4 => v[..4].copy_from_slice(&$tile::<B, 4>($($arg),*)),
            5 => v[..5].copy_from_slice(&$tile::<B, 5>($($arg),*)),
            6 => v[..6].copy_from_slice(&$tile::<B, 6>($($arg),*)),
            7 => v[..7].copy_from_slice(&$tile::<B, 7>($($arg),*)),
            _ => v = $tile::<B, TILE>($($arg),*),
        }
        v
    }};
}

/// A tile kernel for one weight row (`w`), the tile's activation rows
/// (`r`), their `s` per block and the rows in the tile.
#[cfg(target_arch = "x86_64")]
type TileFn<'a, B> = dyn Fn(&[B], Range<usize>, &[[f32; TILE]], usize) -> [f32; TILE] + 'a;

/// What every work item of a matmul reads besides the weights.
struct Operands<'a> {
    /// Blocks per row.
    kb: usize,
    level: CpuLevel,
    /// `m` rows of `kb` activation blocks.
    act: &'a [ABlock],
    /// The same in pairs for the AVX-512 kernels (`m` rows of
    /// `kb.div_ceil(2)`), else empty.
    pairs: &'a [APair],
    m: usize,
    /// Per tile of activation rows and block, the rows' `s`.
    sums: &'a [[f32; TILE]],
}

/// Output columns `cols` of every row.
///
/// # Safety
/// `dst` holds `m * n` values, of which no other thread writes these
/// columns; the processor has `level`'s instructions.
unsafe fn columns<B: WeightBlock>(
    blocks: &[B],
    n: usize,
    ops: &Operands,
    cols: Range<usize>,
    dst: &SyncPtr,
) {
    #[cfg(target_arch = "x86_64")]
    use super::avx512::{row_avx512bw, row_avx512vnni};
    let Operands {
        kb,
        level,
        act,
        pairs,
        m,
        sums,
    } = *ops;
    let w = |col: usize| &blocks[col * kb..(col + 1) * kb];
    let put = |r: usize, col: usize, v: f32| unsafe { *dst.0.add(r * n + col) = v };
    // One weight row against each tile of activation rows, for the columns.
    #[cfg(target_arch = "x86_64")]
    let tiles = |tile: &TileFn<'_, B>| {
        for (t, sums) in sums.chunks_exact(kb).enumerate() {
            let r0 = t * TILE;
            for col in cols.clone() {
                let v = tile(w(col), r0..m, sums, m - r0);
                for (j, &v) in v.iter().enumerate().take(m - r0) {
                    put(r0 + j, col, v);
                }
            }
        }
    };
    // SAFETY (all arms): `level` was checked available by the caller; the
    // tile's rows are in `a`.
    match level {
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx2 if m == 1 => {
            for col in cols {
                put(0, col, unsafe { row_avx2(w(col), act) });
            }
        }
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx512 if m == 1 => {
            for col in cols {
                put(0, col, unsafe { row_avx512bw(w(col), pairs) });
            }
        }
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx512Vnni if m == 1 => {
            for col in cols {
                put(0, col, unsafe { row_avx512vnni(w(col), pairs) });
            }
        }
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx2 | CpuLevel::Avx512 => tiles(&|w, r, sums, rows| unsafe {
            tile_of!(tile_avx2, rows, w, &act[r.start * kb..], sums)
        }),
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx512Vnni => tiles(&|w, r, sums, rows| unsafe {
            tile_of!(tile_vnni, rows, w, &act[r.start * kb..], sums)
        }),
        _ => {
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

pub(super) fn quantize_row(xs: &[f32], out: &mut [ABlock]) {
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

pub(super) fn dot_scalar<B: WeightBlock>(w: &[B], a: &[ABlock]) -> f32 {
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
pub(super) fn row_avx2<B: WeightBlock>(w: &[B], a: &[ABlock]) -> f32 {
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

/// Defines a tile kernel: one weight row against the first `R` activation
/// rows of a tile starting at `a` (rows of `w.len()` blocks), whose `s` per
/// block are in `sums`, with `$products` for the block products.
macro_rules! tile_kernel {
    ($(#[$doc:meta])* $name:ident, $features:literal, $products:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        fn $name<B: WeightBlock, const R: usize>(
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
                // SAFETY: the features are enabled; b < kb, and the lengths
                // were checked above.
                let wq = unsafe { w.unpack() };
                if B::MIN {
                    let s = unsafe { _mm256_loadu_ps(sums.get_unchecked(b).as_ptr()) };
                    summ = _mm256_fmadd_ps(_mm256_set1_ps(w.m()), s, summ);
                }
                let wd = w.d();
                for (j, acc) in acc.iter_mut().enumerate() {
                    let a = unsafe { a.get_unchecked(j * kb + b) };
                    let p = unsafe { B::$products(wq, a) };
                    *acc = _mm256_fmadd_ps(_mm256_set1_ps(wd * a.d), p, *acc);
                }
            }
            let mut ms = [0f32; TILE];
            // SAFETY: TILE == 8 floats are written.
            unsafe { _mm256_storeu_ps(ms.as_mut_ptr(), summ) };
            std::array::from_fn(|j| hsum(acc[j]) + ms[j])
        }
    };
}

tile_kernel!(
    /// The tile kernel on AVX2.
    tile_avx2,
    "avx2,fma",
    products
);
tile_kernel!(
    /// The AVX2 tile kernel with `vpdpbusd` (same integers, same order of
    /// f32 additions: the same results).
    tile_vnni,
    "avx2,fma,avx512f,avx512vl,avx512vnni",
    products_vnni
);

#[cfg(test)]
mod tests {
    use super::super::blocks::{f16_to_f32, half};
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{DType, Device, Module};
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::__m256;

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
                    let s = ours.forward_with(&x, CpuLevel::Portable).unwrap();
                    let d = max_abs(&(&a - &s).unwrap());
                    assert!(d < 1e-5 * scale, "{dtype:?} n={n} m={m} scalar: {d}");
                }
            }
        }
        assert!((f16_to_f32(0x3c00) - 1.0).abs() < 1e-9);
        assert!((f16_to_f32(0xc000) + 2.0).abs() < 1e-9);
        assert!((f16_to_f32(0x0001) - 5.960_464_5e-8).abs() < 1e-12);
        // The scales' fast conversion is the same function, value for value.
        for h in 0..=u16::MAX {
            let (a, b) = (half(h), f16_to_f32(h));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{h:#x}"
            );
        }
    }

    /// A xorshift generator: the same blocks on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn byte(&mut self) -> u8 {
            (self.next() >> 24) as u8
        }
    }

    /// The levels this processor runs besides the portable one; the others
    /// are named as skipped.
    fn simd_levels() -> Vec<CpuLevel> {
        let (have, lack): (Vec<CpuLevel>, Vec<CpuLevel>) =
            CpuLevel::ALL[1..].iter().partition(|l| l.available());
        for l in lack {
            println!("skipped {l}: this CPU lacks {}", l.needs());
        }
        have
    }

    /// Every kernel path (row and tile, both weight types) computes what the
    /// portable one does on odd shapes: one to 48 blocks, odd block and
    /// column counts, tiles with every remainder of rows.
    #[test]
    fn every_level_matches_portable() {
        let dev = Device::Cpu;
        let levels = simd_levels();
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
            for (n, kb) in [
                (1usize, 1usize),
                (3, 3),
                (77, 5),
                (130, 18),
                (33, 48),
                (9, 2),
            ] {
                let k = kb * QK;
                let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
                let q = QTensor::quantize(&w, dtype).unwrap();
                let ours = QuantMatmul::from_qtensor(&q).unwrap().unwrap();
                for m in [1usize, 2, 3, 7, 8, 9, 17, 33] {
                    let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
                    let want = ours.forward_with(&x, CpuLevel::Portable).unwrap();
                    let scale = max_abs(&want).max((k as f32).sqrt());
                    for &level in &levels {
                        let got = ours.forward_with(&x, level).unwrap();
                        let d = max_abs(&(&got - &want).unwrap());
                        assert!(
                            d < 1e-5 * scale,
                            "{dtype:?} {level} n={n} kb={kb} m={m}: {d}"
                        );
                    }
                }
            }
        }
        // A level this CPU lacks is an error, not a crash.
        if let Some(&missing) = CpuLevel::ALL.iter().find(|l| !l.available()) {
            let q = QTensor::quantize(
                &Tensor::ones((1, 32), DType::F32, &dev).unwrap(),
                GgmlDType::Q4_1,
            );
            let ours = QuantMatmul::from_qtensor(&q.unwrap()).unwrap().unwrap();
            let x = Tensor::ones((1, 32), DType::F32, &dev).unwrap();
            let e = ours.forward_with(&x, missing).unwrap_err().to_string();
            assert!(e.contains("this CPU lacks"), "{e}");
        }
    }

    /// The sum of 8 lanes of integer products held as f32.
    #[cfg(target_arch = "x86_64")]
    fn lanes(p: __m256) -> i32 {
        let mut l = [0f32; 8];
        // SAFETY: 8 floats are written to an 8-float array.
        unsafe { std::arch::x86_64::_mm256_storeu_ps(l.as_mut_ptr(), p) };
        l.iter().sum::<f32>() as i32
    }

    /// The SIMD paths' integer block products equal the portable ones
    /// exactly, extremes included (Q8_0's -128 against -127).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn block_products_are_the_same_integers_on_every_level() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let levels = simd_levels();
        let act = |rng: &mut Rng, extreme: bool| ABlock {
            d: 0.01,
            s: 0.0,
            qs: std::array::from_fn(|_| {
                if extreme {
                    -127
                } else {
                    ((rng.byte() % 255) as i16 - 127) as i8
                }
            }),
        };
        for case in 0..200 {
            let extreme = case % 10 == 0;
            // 0.1 and 0.2 as IEEE half bits.
            let w4: [WBlock; 2] = std::array::from_fn(|_| WBlock {
                d: 0x2e66,
                m: 0x3266,
                qs: std::array::from_fn(|_| if extreme { 0xff } else { rng.byte() }),
            });
            let w8: [W8Block; 2] = std::array::from_fn(|_| W8Block {
                d: 0x2e66,
                qs: std::array::from_fn(|_| if extreme { -128 } else { rng.byte() as i8 }),
            });
            let a: [ABlock; 2] = std::array::from_fn(|_| act(&mut rng, extreme));
            let want4 = [w4[0].dot_i32(&a[0]), w4[1].dot_i32(&a[1])];
            let want8 = [w8[0].dot_i32(&a[0]), w8[1].dot_i32(&a[1])];
            for &level in &levels {
                // SAFETY: the level is available.
                let (got4, got8) = unsafe {
                    match level {
                        CpuLevel::Avx2 => (
                            [0, 1].map(|i| lanes(WBlock::products(w4[i].unpack(), &a[i]))),
                            [0, 1].map(|i| lanes(W8Block::products(w8[i].unpack(), &a[i]))),
                        ),
                        _ => {
                            use super::super::avx512::block_dots;
                            let vnni = level == CpuLevel::Avx512Vnni;
                            if vnni {
                                // The tile kernel's 256-bit VNNI products too.
                                let ymm4 = [0, 1]
                                    .map(|i| lanes(WBlock::products_vnni(w4[i].unpack(), &a[i])));
                                let ymm8 = [0, 1]
                                    .map(|i| lanes(W8Block::products_vnni(w8[i].unpack(), &a[i])));
                                assert_eq!(ymm4, want4, "q4_1 256-bit vnni case {case}");
                                assert_eq!(ymm8, want8, "q8_0 256-bit vnni case {case}");
                            }
                            (block_dots(&w4, &a, vnni), block_dots(&w8, &a, vnni))
                        }
                    }
                };
                assert_eq!(got4, want4, "q4_1 {level} case {case}");
                assert_eq!(got8, want8, "q8_0 {level} case {case}");
            }
        }
    }

    /// Timings of SmolLM2's matmul shapes on every level, interleaved, the
    /// fastest of several rounds each (robust to a busy machine):
    /// `cargo test --release --lib q4_1_bench -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn q4_1_bench() {
        let dev = Device::Cpu;
        let levels: Vec<CpuLevel> = CpuLevel::ALL
            .into_iter()
            .filter(|l| l.available())
            .collect();
        for (dtype, n, k) in [
            (GgmlDType::Q4_1, 576usize, 576usize),
            (GgmlDType::Q4_1, 192, 576),
            (GgmlDType::Q4_1, 1536, 576),
            (GgmlDType::Q4_1, 576, 1536),
            (GgmlDType::Q8_0, 49152, 576),
        ] {
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
            let q = QTensor::quantize(&w, dtype).unwrap();
            let ours = QuantMatmul::from_qtensor(&q).unwrap().unwrap();
            for m in [1usize, 16, 47] {
                let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
                let reps = 20_000_000 / (n * k * m).max(1) + 3;
                let mut best = vec![f64::INFINITY; levels.len()];
                for _round in 0..7 {
                    for (i, &level) in levels.iter().enumerate() {
                        let t = std::time::Instant::now();
                        for _ in 0..reps {
                            ours.forward_with(&x, level).unwrap();
                        }
                        let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
                        best[i] = best[i].min(us);
                    }
                }
                let line: Vec<String> = levels
                    .iter()
                    .zip(&best)
                    .map(|(l, us)| format!("{l} {us:.1}"))
                    .collect();
                println!(
                    "{dtype:?} ({n:5}, {k:5}) x {m:3} rows, us: {}",
                    line.join(" | ")
                );
            }
        }
    }
}
