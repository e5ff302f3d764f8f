//! The blocks the 8-bit kernels multiply: `Q4_1` and `Q8_0` weight blocks
//! ([`WeightBlock`]: how each unpacks and multiplies with an activation
//! block on each instruction set) and the `Q8_1` activation block. Shared
//! by the AVX2 and portable paths ([`super::q4_1`]) and the AVX-512 ones
//! ([`super::avx512`]).

use candle_core::quantized::GgmlDType;

use super::blocks::{half, W8Block};
use super::ran::Kernel;

/// Activation rows a weight row is multiplied with at once (rows > 1).
pub(super) const TILE: usize = 8;

/// One `Q4_1` weight block: `x = d * q + m` for 32 four-bit `q`, low
/// nibbles first; `d` and `m` as IEEE half bits, as in the GGUF file (20
/// bytes: f32 scales made every block a fifth larger, and decoding one
/// sequence streams every weight once per token).
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct WBlock {
    pub(super) d: u16,
    pub(super) m: u16,
    pub(super) qs: [u8; 16],
}

/// One activation block: `x ≈ d * q`, and `s = d * Σq`.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct ABlock {
    pub(super) d: f32,
    pub(super) s: f32,
    pub(super) qs: [i8; 32],
}

pub(super) const ZERO_A: ABlock = ABlock {
    d: 0.0,
    s: 0.0,
    qs: [0; 32],
};

fn f16_at(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m128, __m256, __m256i, __m512i};

/// A weight block type: `x = d * q + m` (`m` = 0 without [`WeightBlock::MIN`]).
pub(super) trait WeightBlock: Copy + Send + Sync {
    const DTYPE: GgmlDType;
    /// The kernels of this weight type, one activation row and a tile.
    const KERNELS: (Kernel, Kernel);
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

    /// [`WeightBlock::products`] with each four byte products summed by one
    /// `vpdpbusd` instead of `vpmaddubsw` + `vpmaddwd`: the same integers.
    ///
    /// # Safety
    /// The processor has AVX-512 F, VL and VNNI.
    #[cfg(target_arch = "x86_64")]
    unsafe fn products_vnni(w: Self::Unpacked, a: &ABlock) -> __m256;

    /// Which of the 16 lanes of products of [`WeightBlock::unpack2`]'s
    /// values with [`WeightBlock::pack_pair`]'s bytes belong to the second
    /// block.
    const PAIR_MASK: u16;

    /// Two activation blocks' bytes (the second zero if absent) in the
    /// order of [`WeightBlock::unpack2`]'s values.
    fn pack_pair(a0: &ABlock, a1: Option<&ABlock>) -> [i8; 64];

    /// Two blocks' 64 values as bytes, in the order of
    /// [`WeightBlock::pack_pair`].
    ///
    /// # Safety
    /// The processor has AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack2(b0: &Self, b1: &Self) -> __m512i;

    /// The unsigned and the signed bytes whose pairwise products are those
    /// of the values `w` (from [`WeightBlock::unpack2`]) with activations `aq`.
    ///
    /// # Safety
    /// The processor has AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    unsafe fn operands2(w: __m512i, aq: __m512i) -> (__m512i, __m512i);

    /// `[d, m]` of `b0` then of `b1` (`m` = 0 without [`WeightBlock::MIN`]),
    /// converted from half precision by one instruction.
    ///
    /// # Safety
    /// The processor has F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn scales2(b0: &Self, b1: &Self) -> __m128;
}

/// Four halves (the low bits of `lo` first) as f32 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "f16c")]
#[inline]
fn halves(lo: u32, hi: u32) -> __m128 {
    use std::arch::x86_64::*;
    _mm_cvtph_ps(_mm_set_epi32(0, 0, hi as i32, lo as i32))
}

impl WeightBlock for WBlock {
    const DTYPE: GgmlDType = GgmlDType::Q4_1;
    const KERNELS: (Kernel, Kernel) = (Kernel::Q41Row, Kernel::Q41Tile);
    const PAIR_MASK: u16 = 0xf0f0;

    /// 16-byte quarters: `a0`'s first half, `a1`'s, `a0`'s second half, `a1`'s.
    fn pack_pair(a0: &ABlock, a1: Option<&ABlock>) -> [i8; 64] {
        let mut out = [0i8; 64];
        out[..16].copy_from_slice(&a0.qs[..16]);
        out[32..48].copy_from_slice(&a0.qs[16..]);
        if let Some(a1) = a1 {
            out[16..32].copy_from_slice(&a1.qs[..16]);
            out[48..].copy_from_slice(&a1.qs[16..]);
        }
        out
    }
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
    #[inline(always)]
    fn d(&self) -> f32 {
        half(self.d)
    }
    #[inline(always)]
    fn m(&self) -> f32 {
        half(self.m)
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

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn products_vnni(wq: __m256i, a: &ABlock) -> __m256 {
        use std::arch::x86_64::*;
        // SAFETY: 32 bytes are read from a 32-byte array.
        let aq = unsafe { _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i) };
        _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, aq))
    }

    /// 128-bit lanes: `b0`'s low nibbles, `b1`'s, `b0`'s high nibbles, `b1`'s.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn unpack2(b0: &Self, b1: &Self) -> __m512i {
        use std::arch::x86_64::*;
        // SAFETY: 16 bytes are read from each 16-byte array.
        let (q0, q1) = unsafe {
            (
                _mm_loadu_si128(b0.qs.as_ptr() as *const __m128i),
                _mm_loadu_si128(b1.qs.as_ptr() as *const __m128i),
            )
        };
        let both = _mm256_set_m128i(q1, q0);
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(both), _mm256_srli_epi16::<4>(both));
        _mm512_and_si512(z, _mm512_set1_epi8(0x0f))
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn operands2(w: __m512i, aq: __m512i) -> (__m512i, __m512i) {
        (w, aq)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "f16c")]
    #[inline]
    unsafe fn scales2(b0: &Self, b1: &Self) -> __m128 {
        let dm = |b: &Self| b.d as u32 | (b.m as u32) << 16;
        halves(dm(b0), dm(b1))
    }
}

impl WeightBlock for W8Block {
    const DTYPE: GgmlDType = GgmlDType::Q8_0;
    const KERNELS: (Kernel, Kernel) = (Kernel::Q80Row, Kernel::Q80Tile);
    const PAIR_MASK: u16 = 0xff00;

    /// `a0`'s 32 bytes, then `a1`'s.
    fn pack_pair(a0: &ABlock, a1: Option<&ABlock>) -> [i8; 64] {
        let mut out = [0i8; 64];
        out[..32].copy_from_slice(&a0.qs);
        if let Some(a1) = a1 {
            out[32..].copy_from_slice(&a1.qs);
        }
        out
    }
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
    #[inline(always)]
    fn d(&self) -> f32 {
        half(self.d)
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

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn products_vnni((wabs, wq): (__m256i, __m256i), a: &ABlock) -> __m256 {
        use std::arch::x86_64::*;
        // SAFETY: 32 bytes are read from a 32-byte array.
        let aq = unsafe { _mm256_loadu_si256(a.qs.as_ptr() as *const __m256i) };
        let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wabs, _mm256_sign_epi8(aq, wq));
        _mm256_cvtepi32_ps(p)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn unpack2(b0: &Self, b1: &Self) -> __m512i {
        use std::arch::x86_64::*;
        // SAFETY: 32 bytes are read from each 32-byte array.
        let (q0, q1) = unsafe {
            (
                _mm256_loadu_si256(b0.qs.as_ptr() as *const __m256i),
                _mm256_loadu_si256(b1.qs.as_ptr() as *const __m256i),
            )
        };
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1)
    }

    /// |w|, and `aq` with w's sign (AVX-512 has no `vpsignb`: negated where
    /// w < 0; where w = 0 the product is 0 either way).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn operands2(w: __m512i, aq: __m512i) -> (__m512i, __m512i) {
        use std::arch::x86_64::*;
        let negative = _mm512_movepi8_mask(w);
        (
            _mm512_abs_epi8(w),
            _mm512_mask_sub_epi8(aq, negative, _mm512_setzero_si512(), aq),
        )
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "f16c")]
    #[inline]
    unsafe fn scales2(b0: &Self, b1: &Self) -> __m128 {
        halves(b0.d as u32, b1.d as u32)
    }
}
