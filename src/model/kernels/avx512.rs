//! The AVX-512 paths of the 8-bit kernels of [`super::q4_1`]: two weight
//! blocks per 512-bit register against two activation blocks packed side by
//! side beforehand ([`APair`], once per matmul), the byte products summed
//! four at a time into 32-bit lanes, by `vpmaddubsw` + `vpmaddwd` (AVX-512
//! BW) or by one `vpdpbusd` (VNNI). Both give the same integers as the AVX2
//! and portable paths (each lane is the sum of the same four products,
//! without saturation: |u8 * i8| pairs stay within i16, and `vpdpbusd` adds
//! in 32 bits); the blocks' f32 scales are then applied per lane, so only
//! the order of the f32 additions differs.
//!
//! A row of an odd number of blocks ends with its last block paired with
//! itself against zero activations, the second copy's scale 0.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::weight_blocks::{ABlock, WeightBlock};

/// Two activation blocks' bytes in the order of a weight type's
/// [`WeightBlock::unpack2`], aligned for one load, and their scales
/// `[d, s]` of the first block then of the second (zeros when absent), in
/// the order of [`WeightBlock::scales2`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct APair {
    qs: [i8; 64],
    scales: [f32; 4],
}

impl APair {
    fn new<B: WeightBlock>(a0: &ABlock, a1: Option<&ABlock>) -> Self {
        let (d1, s1) = a1.map_or((0.0, 0.0), |a| (a.d, a.s));
        Self {
            qs: B::pack_pair(a0, a1),
            scales: [a0.d, a0.s, d1, s1],
        }
    }
}

/// `m` rows of `kb` activation blocks as rows of `kb.div_ceil(2)` pairs.
pub(super) fn pack_pairs<B: WeightBlock>(act: &[ABlock], m: usize, kb: usize) -> Vec<APair> {
    let mut out = Vec::with_capacity(m * kb.div_ceil(2));
    for row in act.chunks_exact(kb).take(m) {
        for pair in row.chunks(2) {
            out.push(APair::new::<B>(&pair[0], pair.get(1)));
        }
    }
    out
}

/// The pair's 64 bytes.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
#[inline]
fn load(p: &APair) -> __m512i {
    // SAFETY: 64 aligned bytes.
    unsafe { _mm512_load_si512(p.qs.as_ptr().cast()) }
}

/// For each of the 16 lanes of a pair's products, the lane of
/// [`WeightBlock::scales2`]'s that holds its block's `d`: 0 or 2.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
#[inline]
fn d_lanes<B: WeightBlock>() -> __m512i {
    _mm512_mask_blend_epi32(B::PAIR_MASK, _mm512_setzero_si512(), _mm512_set1_epi32(2))
}

/// Sums of four adjacent `u * s` byte products, by `vpmaddubsw` + `vpmaddwd`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) fn dots_bw(u: __m512i, s: __m512i) -> __m512i {
    _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
}

/// Sums of four adjacent `u * s` byte products, by `vpdpbusd`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn dots_vnni(u: __m512i, s: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s)
}

/// The row and tile kernels over one way of summing byte products.
macro_rules! kernels {
    ($row:ident, $dots:ident, $features:literal) => {
        /// One weight row (`w`) against one activation row of as many
        /// blocks packed in pairs (`p`), in two accumulators (pairs of
        /// blocks alternating), so that one pair's additions need not wait
        /// for the previous pair's.
        #[target_feature(enable = $features)]
        pub(super) fn $row<B: WeightBlock>(w: &[B], p: &[APair]) -> f32 {
            let kb = w.len();
            assert!(p.len() >= kb.div_ceil(2));
            // Blocks `b` and `b + 1` (or `b` alone, the last of an odd row):
            // their scaled products added to `acc`; `[d·d, m·s]` of both,
            // whose `m·s` lanes (1 and 3) are the offsets, to `summ`. The
            // scales are converted and multiplied four at a time, as one
            // vector, not one by one.
            let d_lanes = d_lanes::<B>();
            let add = |b: usize, acc: &mut __m512, summ: &mut __m128| {
                let b1 = if b + 1 < kb { b + 1 } else { b };
                // SAFETY: b, b1 < kb, b / 2 < p.len(); the features are
                // enabled. An odd row's last pair has zero second scales.
                unsafe {
                    let (w0, w1) = (w.get_unchecked(b), w.get_unchecked(b1));
                    let pair = p.get_unchecked(b / 2);
                    let (u, s) = B::operands2(B::unpack2(w0, w1), load(pair));
                    let prod = _mm512_cvtepi32_ps($dots(u, s));
                    let sc = _mm_mul_ps(B::scales2(w0, w1), _mm_load_ps(pair.scales.as_ptr()));
                    *summ = _mm_add_ps(*summ, sc);
                    let d = _mm512_permutexvar_ps(d_lanes, _mm512_castps128_ps512(sc));
                    *acc = _mm512_fmadd_ps(d, prod, *acc);
                }
            };
            let (mut acc0, mut acc1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            let (mut summ0, mut summ1) = (_mm_setzero_ps(), _mm_setzero_ps());
            let mut b = 0;
            while b + 4 <= kb {
                add(b, &mut acc0, &mut summ0);
                add(b + 2, &mut acc1, &mut summ1);
                b += 4;
            }
            while b < kb {
                add(b, &mut acc0, &mut summ0);
                b += 2;
            }
            let summ = _mm_add_ps(summ0, summ1);
            let offsets = if B::MIN {
                // Lanes 1 and 3; without offsets they hold zeros.
                let hi = _mm_movehl_ps(summ, summ);
                _mm_cvtss_f32(_mm_shuffle_ps::<1>(_mm_add_ps(summ, hi), summ))
            } else {
                0.0
            };
            _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + offsets
        }
    };
}

kernels!(
    row_avx512bw,
    dots_bw,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl"
);
kernels!(
    row_avx512vnni,
    dots_vnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

/// The integer products of the blocks `w` with `a`, pairwise (test of the
/// lanes).
///
/// # Safety
/// The processor has AVX-512 F, BW and VL, and VNNI if `vnni`.
#[cfg(test)]
pub(super) unsafe fn block_dots<B: WeightBlock>(
    w: &[B; 2],
    a: &[ABlock; 2],
    vnni: bool,
) -> [i32; 2] {
    unsafe {
        let p = APair::new::<B>(&a[0], Some(&a[1]));
        let (u, s) = B::operands2(B::unpack2(&w[0], &w[1]), load(&p));
        let d = if vnni { dots_vnni(u, s) } else { dots_bw(u, s) };
        let mut lanes = [0i32; 16];
        _mm512_storeu_si512(lanes.as_mut_ptr().cast(), d);
        let mut out = [0; 2];
        for (i, v) in lanes.into_iter().enumerate() {
            out[(B::PAIR_MASK >> i) as usize & 1] += v;
        }
        out
    }
}
