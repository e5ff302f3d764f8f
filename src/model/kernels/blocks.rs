//! What the quantized kernels share: the block size, the `Q8_0` weight
//! block, a horizontal sum. (The instruction set they use is chosen in
//! [`super::level`].)

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::__m256;

/// Values per block.
pub(super) const QK: usize = 32;

/// One `Q8_0` weight block: `x = d * q`, as the GGUF file has it (34
/// bytes: `d` as IEEE half bits). Decoding one sequence streams every
/// weight once per token: a 4-byte `d` read 6% more than the file's blocks.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct W8Block {
    pub(super) d: u16,
    pub(super) qs: [i8; 32],
}

/// IEEE half bits to f32: one instruction where the build targets F16C
/// (every AVX2 processor has it), else [`f16_to_f32`]'s bit arithmetic.
#[inline(always)]
pub(super) fn half(h: u16) -> f32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    {
        use std::arch::x86_64::{_mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32};
        // SAFETY: the build's target CPU has F16C.
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))) }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "f16c")))]
    {
        f16_to_f32(h)
    }
}

/// IEEE half to single precision (where the build has F16C, only the
/// tests' reference for [`half`]).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "f16c"), allow(dead_code))]
pub(super) fn f16_to_f32(h: u16) -> f32 {
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
