//! What the quantized kernels share: the block size, the `Q8_0` weight
//! block, a horizontal sum. (The instruction set they use is chosen in
//! [`super::level`].)

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::__m256;

/// Values per block.
pub(super) const QK: usize = 32;

/// One `Q8_0` weight block: `x = d * q`.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct W8Block {
    pub(super) d: f32,
    pub(super) qs: [i8; 32],
}

/// The sum of the eight lanes of `acc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum(acc: __m256) -> f32 {
    use std::arch::x86_64::*;
    let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}
