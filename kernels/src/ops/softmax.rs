//! Softmax in place, with the deterministic vectorised `exp` every family
//! shares bit for bit ([`exp_nonpositive`] is the specification).

use crate::dispatch::{FamilyKind, KernelFamily};

/// In-place softmax: subtract the max, exponentiate ([`exp_nonpositive`]),
/// divide by the sum. The sum is [`dot_f32`]'s shape: eight lanes in index
/// order, reduced by [`reduce8`], then the tail; so the family's SIMD twin
/// gives the same bits.
pub fn softmax(x: &mut [f32]) {
    softmax_in(KernelFamily::SCALAR, x)
}

/// [`softmax`], with the family's SIMD twin when present (the same bits).
pub fn softmax_in(family: KernelFamily, x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if family.kind() == FamilyKind::Avx512Vnni {
        // SAFETY: the AVX-512 family includes AVX-512 F, AVX2 and FMA.
        unsafe { softmax_avx512(x, max_avx512(x)) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if family.kind() != FamilyKind::Scalar {
        // SAFETY: every non-scalar x86 family includes AVX2 and FMA.
        unsafe { softmax_avx2(x, max_avx2(x)) };
        return;
    }
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let _ = family;
    let n8 = x.len() / 8 * 8;
    let mut lanes = [0.0f32; 8];
    for c in x[..n8].chunks_exact_mut(8) {
        for j in 0..8 {
            c[j] = exp_nonpositive(c[j] - max);
            lanes[j] += c[j];
        }
    }
    let mut sum = crate::matvec::scalar::reduce8(lanes);
    for v in &mut x[n8..] {
        *v = exp_nonpositive(*v - max);
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `e^x` for `x <= 0` (softmax arguments), within 2 ulp, as a fixed
/// sequence of IEEE operations that the SIMD twin repeats lane for lane:
/// `n = round_ties_even(x·log2 e)`, `r = x − n·ln2` (two fused steps, ln 2
/// split in a high and a low part), a degree-7 Taylor polynomial in `r`
/// (Horner, fused multiply-adds), times `2^n` (exact). Below −87 it is 0
/// (`e^-87` ≈ 1.6e-38, at the edge of the normal range: a softmax weight
/// that small is lost against the largest, which is 1). NaN gives NaN.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x < EXP_MIN {
        return 0.0;
    }
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = EXP_C[7];
    for c in EXP_C[..7].iter().rev() {
        p = p.mul_add(r, *c);
    }
    // n in [-126, 0]: 2^n is a normal float.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

const EXP_MIN: f32 = -87.0;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// `1/k!` for k = 0..=7.
const EXP_C: [f32; 8] = [1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];

/// The largest element of `x`, NaNs ignored (`f32::max`'s fold): a
/// maximum is exact in any order, so only the sign of a zero maximum can
/// differ from the fold's, and `v − (±0)` then feeds the same `exp`
/// (`e^±0 = 1` exactly).
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_avx2(x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n8 = x.len() / 8 * 8;
    let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= x.len(). `max_ps(v, acc)` returns `acc`
        // where `v` is NaN, so NaNs never enter the maximum.
        unsafe { acc = _mm256_max_ps(_mm256_loadu_ps(x.as_ptr().add(i)), acc) };
        i += 8;
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    lanes.iter().chain(&x[n8..]).fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// [`softmax_in`]'s AVX2 twin: [`exp_nonpositive`] eight lanes at a time
/// (the same operations per lane), the sum in eight lanes reduced by
/// [`reduce8`], the tail and the scaling as the scalar code.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_avx2(x: &mut [f32], max: f32) {
    use std::arch::x86_64::*;
    let n8 = x.len() / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    let vmax = _mm256_set1_ps(max);
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= x.len().
        unsafe {
            let v = _mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vmax);
            let e = exp_nonpositive_avx2(v);
            _mm256_storeu_ps(x.as_mut_ptr().add(i), e);
            acc = _mm256_add_ps(acc, e);
        }
        i += 8;
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut sum = crate::matvec::scalar::reduce8(lanes);
    for v in &mut x[n8..] {
        *v = exp_nonpositive(*v - max);
        sum += *v;
    }
    let inv = 1.0 / sum;
    let vinv = _mm256_set1_ps(inv);
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= x.len().
        unsafe { _mm256_storeu_ps(x.as_mut_ptr().add(i), _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vinv)) };
        i += 8;
    }
    for v in &mut x[n8..] {
        *v *= inv;
    }
}

/// [`max_avx2`] sixteen lanes at a time (a maximum is exact in any order;
/// see there for the sign of a zero maximum).
///
/// # Safety
/// AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_avx512(x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n16 = x.len() / 16 * 16;
    let mut acc = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n16 {
        // SAFETY: i + 16 <= n16 <= x.len(). `max_ps(v, acc)` returns `acc`
        // where `v` is NaN, so NaNs never enter the maximum.
        unsafe { acc = _mm512_max_ps(_mm512_loadu_ps(x.as_ptr().add(i)), acc) };
        i += 16;
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: sixteen floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    lanes.iter().chain(&x[n16..]).fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// [`softmax_in`]'s AVX-512 twin: [`exp_nonpositive`] sixteen lanes at a
/// time (the same operations per lane), and the sum exactly
/// [`softmax_avx2`]'s: the low and then the high eight lanes of each
/// sixteen are added into one eight-lane accumulator, so element `i` meets
/// lane `i % 8` in index order; a last group of eight, the tail and the
/// scaling as there.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn softmax_avx512(x: &mut [f32], max: f32) {
    use std::arch::x86_64::*;
    let (n16, n8) = (x.len() / 16 * 16, x.len() / 8 * 8);
    let mut acc = _mm256_setzero_ps();
    let vmax = _mm512_set1_ps(max);
    let mut i = 0;
    while i < n16 {
        // SAFETY: i + 16 <= n16 <= x.len().
        unsafe {
            let v = _mm512_sub_ps(_mm512_loadu_ps(x.as_ptr().add(i)), vmax);
            let e = exp_nonpositive_avx512(v);
            _mm512_storeu_ps(x.as_mut_ptr().add(i), e);
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
            acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))));
        }
        i += 16;
    }
    if n8 > n16 {
        // SAFETY: n16 + 8 = n8 <= x.len().
        unsafe {
            let v = _mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(n16)), _mm256_set1_ps(max));
            let e = exp_nonpositive_avx2(v);
            _mm256_storeu_ps(x.as_mut_ptr().add(n16), e);
            acc = _mm256_add_ps(acc, e);
        }
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut sum = crate::matvec::scalar::reduce8(lanes);
    for v in &mut x[n8..] {
        *v = exp_nonpositive(*v - max);
        sum += *v;
    }
    let inv = 1.0 / sum;
    let vinv = _mm512_set1_ps(inv);
    let mut i = 0;
    while i < n16 {
        // SAFETY: i + 16 <= n16 <= x.len().
        unsafe { _mm512_storeu_ps(x.as_mut_ptr().add(i), _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(i)), vinv)) };
        i += 16;
    }
    for v in &mut x[n16..] {
        *v *= inv;
    }
}

/// [`exp_nonpositive`] in sixteen lanes: [`exp_nonpositive_avx2`]'s
/// operations, with mask registers for its blends.
///
/// # Safety
/// AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_nonpositive_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_MIN));
    // Keep the arithmetic in range where the result is replaced anyway.
    let xs = _mm512_mask_blend_ps(nan | under, x, _mm512_setzero_ps());
    // Round to the nearest integer, ties to even (scale 0): `_mm256_round_ps`'s.
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
        xs,
        _mm512_set1_ps(std::f32::consts::LOG2_E),
    ));
    let neg_n = _mm512_sub_ps(_mm512_setzero_ps(), n);
    let r = _mm512_fmadd_ps(neg_n, _mm512_set1_ps(LN2_HI), xs);
    let r = _mm512_fmadd_ps(neg_n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_C[7]);
    for k in (0..7).rev() {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C[k]));
    }
    let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)));
    let e = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    let e = _mm512_mask_blend_ps(under, e, _mm512_setzero_ps());
    _mm512_mask_blend_ps(nan, e, x)
}

/// [`exp_nonpositive`] in eight lanes.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_nonpositive_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN));
    // Keep the arithmetic in range where the result is replaced anyway.
    let xs = _mm256_blendv_ps(x, _mm256_setzero_ps(), _mm256_or_ps(nan, under));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        xs,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let neg_n = _mm256_sub_ps(_mm256_setzero_ps(), n);
    let r = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(LN2_HI), xs);
    let r = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_C[7]);
    for k in (0..7).rev() {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C[k]));
    }
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
    let e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    let e = _mm256_blendv_ps(e, _mm256_setzero_ps(), under);
    _mm256_blendv_ps(e, x, nan)
}
