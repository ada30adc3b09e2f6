//! Element-wise and small reduction kernels of the transformer block:
//! RMSNorm, rotary position embedding, softmax, SwiGLU, attention.
//!
//! These run once per row per layer on vectors of a few hundred elements;
//! their cost is small beside the mat-vecs, so each has one scalar
//! implementation, written so that every call is a pure function of its
//! inputs (the same row gives the same bits whichever thread or block runs
//! it). Dot products go through [`crate::matvec::scalar::dot_f32`]'s fixed
//! order, with its SIMD twin when the family has one.

use crate::dispatch::KernelFamily;
use crate::matvec::scalar::dot_f32;

/// `Σ a·b` in [`dot_f32`]'s order, using the family's SIMD twin when present.
#[inline]
pub fn dot(family: KernelFamily, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if family != KernelFamily::Scalar && family.is_supported() {
        // SAFETY: every non-scalar x86 family includes AVX2 (checked above).
        return unsafe { crate::matvec::x86_dot_f32(a, b) };
    }
    let _ = family;
    dot_f32(a, b)
}

/// RMSNorm: `out[i] = (x[i] * r) * w[i]` with `r = 1 / sqrt(mean(x²) + eps)`
/// (Zhang & Sennrich 2019).
pub fn rmsnorm(family: KernelFamily, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert!(x.len() == w.len() && x.len() == out.len());
    let ms = dot(family, x, x) / x.len() as f32;
    let r = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * r) * g;
    }
}

/// How a head's dimensions are paired for rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopePairing {
    /// Pairs `(2i, 2i+1)`: GGUF Llama weights, whose Q/K rows llama.cpp's
    /// converter permutes into this order ("normal" RoPE).
    Adjacent,
    /// Pairs `(i, i + d/2)`: Hugging Face Llama checkpoints (`rotate_half`).
    Halves,
}

/// The rotation of one position: `cos`/`sin` of `pos * base^(-2i/d)` for the
/// `d/2` frequencies (Su et al. 2021, RoFormer). Computed in f64 and rounded
/// once, so every row at a position rotates identically.
pub fn rope_angles(pos: usize, head_dim: usize, base: f32, cos: &mut [f32], sin: &mut [f32]) {
    let half = head_dim / 2;
    for i in 0..half {
        let inv_freq = (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
        let theta = pos as f64 * inv_freq;
        cos[i] = theta.cos() as f32;
        sin[i] = theta.sin() as f32;
    }
}

/// Rotates every head of `x` (`n_heads * head_dim`) in place.
pub fn rope(x: &mut [f32], head_dim: usize, pairing: RopePairing, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match pairing {
                RopePairing::Adjacent => (2 * i, 2 * i + 1),
                RopePairing::Halves => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos[i] - x1 * sin[i];
            head[b] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

/// In-place softmax: subtract the max, exponentiate ([`exp_nonpositive`]),
/// divide by the sum. The sum is [`dot_f32`]'s shape: eight lanes in index
/// order, reduced by [`reduce8`], then the tail; so the family's SIMD twin
/// gives the same bits.
pub fn softmax(x: &mut [f32]) {
    softmax_in(KernelFamily::Scalar, x)
}

/// [`softmax`], with the family's SIMD twin when present (the same bits).
pub fn softmax_in(family: KernelFamily, x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if family == KernelFamily::Avx512Vnni && family.is_supported() {
        // SAFETY: the AVX-512 family includes AVX-512 F, AVX2 and FMA.
        unsafe { softmax_avx512(x, max_avx512(x)) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if family != KernelFamily::Scalar && family.is_supported() {
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
unsafe fn exp_nonpositive_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
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

/// SwiGLU (Shazeer 2020): `gate[i] = silu(gate[i]) * up[i]`, with
/// `silu(x) = x / (1 + e^-x)` computed from `e = e^-|x|`
/// ([`exp_nonpositive`], which never overflows): `x / (1 + e)` for
/// `x >= 0`, `(x · e) / (1 + e)` below. Every family does these IEEE
/// operations per element (the AVX2 twin eight lanes at a time), so the
/// result does not depend on the family.
pub fn swiglu(family: KernelFamily, gate: &mut [f32], up: &[f32]) {
    glu(
        family,
        gate,
        up,
        silu,
        #[cfg(target_arch = "x86_64")]
        swiglu_avx2,
    );
}

/// GeGLU (Shazeer 2020) with GELU in its tanh form (Hendrycks & Gimpel
/// 2016), Gemma's feed-forward gate: `gate[i] = gelu(gate[i]) * up[i]`,
/// `gelu(x) = x/2 · (1 + tanh(y))`, `y = √(2/π) · (x + 0.044715 x³)`, with
/// `tanh(y) = ±(1 − e) / (1 + e)`, `e = e^-2|y|` ([`exp_nonpositive`]),
/// signed as `y`. Every family does these IEEE operations per element.
pub fn geglu_tanh(family: KernelFamily, gate: &mut [f32], up: &[f32]) {
    glu(
        family,
        gate,
        up,
        gelu_tanh,
        #[cfg(target_arch = "x86_64")]
        geglu_avx2,
    );
}

/// `gate[i] = act(gate[i]) * up[i]`: the SIMD twin over whole groups of
/// eight where the family has one, `act` on the rest.
fn glu(
    family: KernelFamily,
    gate: &mut [f32],
    up: &[f32],
    act: fn(f32) -> f32,
    #[cfg(target_arch = "x86_64")] simd: unsafe fn(&mut [f32], &[f32]) -> usize,
) {
    assert_eq!(gate.len(), up.len(), "gated activation: gate and up differ in length");
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if family != KernelFamily::Scalar && family.is_supported() {
        // SAFETY: every non-scalar x86 family includes AVX2 and FMA.
        done = unsafe { simd(gate, up) };
    }
    let _ = family;
    for (g, &u) in gate[done..].iter_mut().zip(&up[done..]) {
        *g = act(*g) * u;
    }
}

#[inline]
fn silu(x: f32) -> f32 {
    let e = exp_nonpositive(-x.abs());
    let d = 1.0 + e;
    if x >= 0.0 { x / d } else { (x * e) / d }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044_715;

#[inline]
fn gelu_tanh(x: f32) -> f32 {
    let y = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    let e = exp_nonpositive(-2.0 * y.abs());
    let t = ((1.0 - e) / (1.0 + e)).copysign(y);
    0.5 * x * (1.0 + t)
}

/// [`silu`] in eight lanes.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: AVX2 and FMA (caller).
    unsafe {
        let e = exp_nonpositive_avx2(_mm256_or_ps(x, _mm256_set1_ps(-0.0)));
        let d = _mm256_add_ps(_mm256_set1_ps(1.0), e);
        let ge = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_setzero_ps());
        _mm256_div_ps(_mm256_blendv_ps(_mm256_mul_ps(x, e), x, ge), d)
    }
}

/// [`gelu_tanh`] in eight lanes.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let (sign, one) = (_mm256_set1_ps(-0.0), _mm256_set1_ps(1.0));
    let x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_CUBIC), x), x), x);
    let y = _mm256_mul_ps(_mm256_set1_ps(SQRT_2_OVER_PI), _mm256_add_ps(x, x3));
    // SAFETY: AVX2 and FMA (caller).
    let e = unsafe { exp_nonpositive_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0), _mm256_andnot_ps(sign, y))) };
    let mag = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    let t = _mm256_or_ps(_mm256_andnot_ps(sign, mag), _mm256_and_ps(sign, y));
    _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5), x), _mm256_add_ps(one, t))
}

/// `gate[i] = act(gate[i]) * up[i]` eight lanes at a time, for an
/// activation `act` in eight lanes; returns how many elements it did
/// (whole groups of eight), the caller does the rest.
macro_rules! glu_avx2 {
    ($name:ident, $act:ident) => {
        /// # Safety
        /// AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $name(gate: &mut [f32], up: &[f32]) -> usize {
            use std::arch::x86_64::*;
            let n8 = gate.len().min(up.len()) / 8 * 8;
            let mut i = 0;
            while i < n8 {
                // SAFETY: i + 8 <= n8 <= both lengths; AVX2 and FMA (caller).
                unsafe {
                    let g = $act(_mm256_loadu_ps(gate.as_ptr().add(i)));
                    _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(g, _mm256_loadu_ps(up.as_ptr().add(i))));
                }
                i += 8;
            }
            n8
        }
    };
}
glu_avx2!(swiglu_avx2, silu_avx2);
glu_avx2!(geglu_avx2, gelu_avx2);

/// An element of the KV cache: `f32`, or an IEEE half stored as its bits
/// ([`F16`]). Attention reads every element through [`KvElem::widen`], an
/// exact conversion to f32, and then does the same f32 arithmetic in the
/// same order whatever the element type and the kernel family: the stored
/// bits alone decide the result, so a verify block and the one-token chain
/// that read the same cache agree bit for bit.
pub trait KvElem: Copy + Send + Sync + 'static {
    /// `dst[i] = src[i]` as f32, exactly (`dst.len() == src.len()`).
    fn widen(family: KernelFamily, src: &[Self], dst: &mut [f32]);

    /// `out[j] += p_t * v_t[j]` over positions `t` in order (see
    /// [`attend_head`]), with the family's SIMD twin when present.
    fn weighted_sum(
        family: KernelFamily,
        scores: &[f32],
        values: &[Self],
        row_stride: usize,
        offset: usize,
        out: &mut [f32],
    ) {
        let hd = out.len();
        let mut row = vec![0.0f32; hd];
        for (t, &p) in scores.iter().enumerate() {
            Self::widen(family, &values[t * row_stride + offset..][..hd], &mut row);
            for (o, &vv) in out.iter_mut().zip(&row) {
                *o += p * vv;
            }
        }
    }
}

impl KvElem for f32 {
    fn widen(_: KernelFamily, src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }

    fn weighted_sum(
        family: KernelFamily,
        scores: &[f32],
        values: &[f32],
        row_stride: usize,
        offset: usize,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if family != KernelFamily::Scalar && family.is_supported() {
            // SAFETY: every non-scalar x86 family includes AVX2 (checked
            // above); `attend_head` asserted the value rows lie inside `values`.
            unsafe { weighted_sum_avx2::<f32>(scores, values, row_stride, offset, out) };
            return;
        }
        let _ = family;
        let hd = out.len();
        for (t, &p) in scores.iter().enumerate() {
            let v = &values[t * row_stride + offset..][..hd];
            for (o, &vv) in out.iter_mut().zip(v) {
                *o += p * vv;
            }
        }
    }
}

/// An IEEE binary16 value stored as its bits: the KV cache's element on
/// the CPU. Written with round-to-nearest-even ([`F16::from_f32`]); read by
/// an exact widening (F16C `vcvtph2ps` on every non-scalar x86 family, the
/// bit-level conversion of the `half` crate on the scalar one: the same
/// value for every non-NaN input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct F16(pub u16);

impl F16 {
    /// `x` rounded to the nearest half (ties to even), as every writer of
    /// the cache rounds.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        F16(half::f16::from_f32(x).to_bits())
    }

    #[inline]
    pub fn to_f32(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
}

impl KvElem for F16 {
    fn widen(family: KernelFamily, src: &[F16], dst: &mut [f32]) {
        debug_assert_eq!(src.len(), dst.len());
        #[cfg(target_arch = "x86_64")]
        if family != KernelFamily::Scalar && family.is_supported() {
            // SAFETY: every non-scalar x86 family includes AVX2 and F16C
            // (`KernelFamily::is_supported` checks both); lengths are equal.
            unsafe { widen_f16c(src, dst) };
            return;
        }
        let _ = family;
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f32();
        }
    }

    fn weighted_sum(
        family: KernelFamily,
        scores: &[f32],
        values: &[F16],
        row_stride: usize,
        offset: usize,
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if family != KernelFamily::Scalar && family.is_supported() {
            // SAFETY: as for `widen`; `attend_head` asserted the value rows
            // lie inside `values`.
            unsafe { weighted_sum_avx2::<F16>(scores, values, row_stride, offset, out) };
            return;
        }
        let hd = out.len();
        let mut row = vec![0.0f32; hd];
        for (t, &p) in scores.iter().enumerate() {
            Self::widen(family, &values[t * row_stride + offset..][..hd], &mut row);
            for (o, &vv) in out.iter_mut().zip(&row) {
                *o += p * vv;
            }
        }
    }
}

/// `dst[i] = src[i]` widened, eight at a time with F16C.
///
/// # Safety
/// AVX2 and F16C; `dst.len() == src.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen_f16c(src: &[F16], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n8 = src.len() / 8 * 8;
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= len of both (F16 is a transparent u16).
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for j in n8..src.len() {
        dst[j] = src[j].to_f32();
    }
}

/// Causal attention of one query head over `n_ctx` cached positions.
///
/// `q`: (head_dim); `keys`/`values`: the layer's cache rows, each
/// `row_stride` elements, the head's slice starting at `offset`; `scores`:
/// scratch of at least `n_ctx`; `out`: (head_dim). Scores are scaled by
/// `1/sqrt(head_dim)`, softmaxed, and the values summed in position order.
/// Every element is read through [`KvElem::widen`] (exact), so the result
/// is a function of the stored bits and of nothing else.
#[allow(clippy::too_many_arguments)]
pub fn attend_head<T: KvElem>(
    family: KernelFamily,
    q: &[f32],
    keys: &[T],
    values: &[T],
    row_stride: usize,
    offset: usize,
    n_ctx: usize,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let hd = q.len();
    let scale = 1.0 / (hd as f32).sqrt();
    let scores = &mut scores[..n_ctx];
    let key = |t: usize| &keys[t * row_stride + offset..t * row_stride + offset + hd];
    // Four widened keys: the dot products read these.
    let mut kb = vec![0.0f32; 4 * hd];
    let mut t0 = 0;
    #[cfg(target_arch = "x86_64")]
    if family != KernelFamily::Scalar && family.is_supported() {
        // Four keys per step: independent dependency chains, each key's
        // dot exactly `dot`'s (the same bits).
        while t0 + 4 <= n_ctx {
            for k in 0..4 {
                T::widen(family, key(t0 + k), &mut kb[k * hd..(k + 1) * hd]);
            }
            let rows: [&[f32]; 4] = std::array::from_fn(|k| &kb[k * hd..(k + 1) * hd]);
            // SAFETY: every non-scalar x86 family includes AVX2 (checked
            // above); every key row has `hd` elements.
            let d = unsafe { crate::matvec::x86_dot4_f32(q, rows) };
            for k in 0..4 {
                scores[t0 + k] = d[k] * scale;
            }
            t0 += 4;
        }
    }
    for (t, s) in scores.iter_mut().enumerate().skip(t0) {
        T::widen(family, key(t), &mut kb[..hd]);
        *s = dot(family, q, &kb[..hd]) * scale;
    }
    softmax_in(family, scores);
    out.fill(0.0);
    assert!(n_ctx == 0 || (n_ctx - 1) * row_stride + offset + hd <= values.len(), "values too short");
    T::weighted_sum(family, scores, values, row_stride, offset, out);
}

/// An element the AVX2 weighted sum loads eight at a time as f32.
#[cfg(target_arch = "x86_64")]
trait Load8: Copy {
    /// # Safety
    /// AVX2 and F16C; eight elements readable at `p`.
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    fn widen1(self) -> f32;
}

#[cfg(target_arch = "x86_64")]
impl Load8 for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: forwarded.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    fn widen1(self) -> f32 {
        self
    }
}

#[cfg(target_arch = "x86_64")]
impl Load8 for F16 {
    #[inline(always)]
    unsafe fn load8(p: *const F16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: forwarded (F16 is a transparent u16; eight of them are 16 bytes).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    fn widen1(self) -> f32 {
        self.to_f32()
    }
}

/// `out[j] += p_t * v_t[j]` over positions `t` in order, eight `j` at a
/// time: the same multiplication and addition per element, in the same
/// order, as the scalar loop (no fused multiply-add), so the result is
/// bit-identical.
///
/// # Safety
/// AVX2 and F16C; every value row `t * row_stride + offset .. + out.len()`
/// for `t < scores.len()` lies inside `values`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn weighted_sum_avx2<T: Load8>(scores: &[f32], values: &[T], row_stride: usize, offset: usize, out: &mut [f32]) {
    let hd = out.len();
    let h8 = hd / 8 * 8;
    // Bands of 64 elements (eight registers) stay in registers across all
    // positions; what is left of the first h8 goes eight at a time.
    let mut j0 = 0;
    while j0 + 64 <= h8 {
        // SAFETY: forwarded; j0 + 64 <= h8 <= hd.
        unsafe { weighted_band::<T, 8>(scores, values, row_stride, offset + j0, &mut out[j0..j0 + 64]) };
        j0 += 64;
    }
    while j0 < h8 {
        // SAFETY: forwarded; j0 + 8 <= h8 <= hd.
        unsafe { weighted_band::<T, 1>(scores, values, row_stride, offset + j0, &mut out[j0..j0 + 8]) };
        j0 += 8;
    }
    for (t, &p) in scores.iter().enumerate() {
        let base = t * row_stride + offset;
        for j in h8..hd {
            out[j] += p * values[base + j].widen1();
        }
    }
}

/// `out[j] += p_t * v_t[offset + j]` over positions `t` in order, for the
/// `8 R` elements of `out`, held in `R` registers throughout.
///
/// # Safety
/// AVX2 and F16C; `out.len() == 8 * R`; every value row `t * row_stride +
/// offset .. + 8 R` for `t < scores.len()` lies inside `values`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn weighted_band<T: Load8, const R: usize>(
    scores: &[f32],
    values: &[T],
    row_stride: usize,
    offset: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    debug_assert_eq!(out.len(), 8 * R);
    // SAFETY (whole body): the caller guarantees every row read and out.
    unsafe {
        let mut acc: [__m256; R] = std::array::from_fn(|k| _mm256_loadu_ps(out.as_ptr().add(8 * k)));
        for (t, &p) in scores.iter().enumerate() {
            let base = values.as_ptr().add(t * row_stride + offset);
            let pv = _mm256_set1_ps(p);
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, T::load8(base.add(8 * k))));
            }
        }
        for (k, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmsnorm_of_constant_row_is_the_weight() {
        let x = [2.0f32; 8];
        let w: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let mut out = [0.0; 8];
        rmsnorm(KernelFamily::Scalar, &x, &w, 0.0, &mut out);
        for i in 0..8 {
            assert!((out[i] - w[i]).abs() < 1e-6);
        }
    }

    #[test]
    fn rope_at_position_zero_is_identity_and_preserves_norm_later() {
        let mut cos = [0.0; 4];
        let mut sin = [0.0; 4];
        let x: Vec<f32> = (0..16).map(|i| i as f32 - 7.5).collect();
        for pairing in [RopePairing::Adjacent, RopePairing::Halves] {
            rope_angles(0, 8, 10000.0, &mut cos, &mut sin);
            let mut y = x.clone();
            rope(&mut y, 8, pairing, &cos, &sin);
            assert_eq!(x, y);
            rope_angles(5, 8, 10000.0, &mut cos, &mut sin);
            rope(&mut y, 8, pairing, &cos, &sin);
            let n0: f32 = x.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }

    #[test]
    fn rope_adjacent_rotates_pairs_two_i_and_two_i_plus_one() {
        let mut cos = [0.0; 1];
        let mut sin = [0.0; 1];
        rope_angles(1, 2, 10000.0, &mut cos, &mut sin);
        let mut y = [1.0f32, 0.0];
        rope(&mut y, 2, RopePairing::Adjacent, &cos, &sin);
        assert!((y[0] - 1f32.cos()).abs() < 1e-6 && (y[1] - 1f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn glu_gates_equal_across_families_and_stay_near_libm() {
        let xs: Vec<f32> = (0..4099)
            .map(|i| {
                let t = i as f32 / 4099.0;
                match i % 5 {
                    0 => (t - 0.5) * 200.0,
                    1 => (t - 0.5) * 1e-3,
                    _ => (t - 0.5) * 24.0,
                }
            })
            .chain([0.0, -0.0, 88.0, -88.0, 1e30, -1e30, f32::INFINITY])
            .collect();
        let up: Vec<f32> = (0..xs.len()).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for fam in KernelFamily::all_supported() {
            for (glu, name) in [(swiglu as fn(KernelFamily, &mut [f32], &[f32]), "swiglu"), (geglu_tanh, "geglu")] {
                let (mut a, mut b) = (xs.clone(), xs.clone());
                glu(KernelFamily::Scalar, &mut a, &up);
                glu(fam, &mut b, &up);
                assert_eq!(bits(&a), bits(&b), "{name} {fam:?}");
            }
        }
        let mut s = xs.clone();
        swiglu(KernelFamily::Scalar, &mut s, &up);
        let mut g = xs.clone();
        geglu_tanh(KernelFamily::Scalar, &mut g, &up);
        for (i, &x) in xs.iter().enumerate() {
            let xd = x as f64;
            let silu = xd / (1.0 + (-xd).exp());
            let y = 0.797_884_560_802_865_4 * (xd + 0.044_715 * xd * xd * xd);
            let gelu = 0.5 * xd * (1.0 + y.tanh());
            let eps = f32::EPSILON as f64;
            // A few ulp of the result; for GELU also of its term x/2, where
            // 1 + tanh cancels (as it does with libm's tanh); and the
            // underflow of e^x below -87.
            for (got, want, name, cancel) in [
                (s[i], silu * up[i] as f64, "swiglu", 0.0),
                (g[i], gelu * up[i] as f64, "geglu", xd.abs() * up[i] as f64),
            ] {
                let err = (got as f64 - want).abs();
                let tol = 8.0 * eps * want.abs() + 2.0 * eps * cancel + 1e-30;
                assert!(err <= tol || (want.is_infinite() && got as f64 == want), "{name}({x}) = {got}, want {want}");
            }
        }
    }

    #[test]
    fn exp_is_within_two_ulp_of_libm_and_every_family_softmaxes_alike() {
        let mut worst = 0u32;
        let mut x = 0.0f32;
        while x > -87.0 {
            let (a, b) = (exp_nonpositive(x), x.exp());
            worst = worst.max(a.to_bits().abs_diff(b.to_bits()));
            x -= 0.000_731;
        }
        assert!(worst <= 2, "{worst} ulp");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-90.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
        let signed_zeros: Vec<f32> = (0..19).map(|i| if i % 3 == 0 { -0.0 } else { -(i as f32) }).collect();
        let masked: Vec<f32> = (0..21).map(|i| if i % 2 == 0 { f32::NEG_INFINITY } else { i as f32 * 0.5 }).collect();
        let tail_max: Vec<f32> = (0..17).map(|i| i as f32 * 0.25).collect();
        let sized = [0usize, 1, 7, 8, 9, 15, 16, 24, 31, 40, 64, 333, 2048]
            .map(|n| (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.7).collect::<Vec<f32>>());
        for base in [signed_zeros, masked, tail_max].into_iter().chain(sized) {
            let n = base.len();
            let mut want = base.clone();
            softmax_in(KernelFamily::Scalar, &mut want);
            for fam in KernelFamily::all_supported() {
                let mut got = base.clone();
                softmax_in(fam, &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{fam:?} n {n}"
                );
            }
            if n > 0 {
                assert!((want.iter().sum::<f32>() - 1.0).abs() < 1e-5, "n {n}");
            }
        }
    }

    #[test]
    fn softmax_sums_to_one_and_survives_large_values() {
        let mut x = [1000.0f32, 1001.0, 999.0];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[0] && x[0] > x[2]);
    }

    #[test]
    fn attention_over_one_position_returns_its_value() {
        let q = [1.0f32, 2.0];
        let k = [0.5f32, 0.5, 9.0, 9.0];
        let v = [3.0f32, 4.0, 7.0, 7.0];
        let mut scores = [0.0; 1];
        let mut out = [0.0; 2];
        attend_head::<f32>(KernelFamily::Scalar, &q, &k, &v, 4, 0, 1, &mut scores, &mut out);
        assert_eq!(out, [3.0, 4.0]);
    }

    #[test]
    fn f16_widening_is_exact_and_the_same_in_every_family() {
        // Every half: normal, subnormal, zero, infinity (NaNs excluded: their
        // payloads are not part of the contract).
        let all: Vec<F16> = (0..=u16::MAX).map(F16).filter(|h| !h.to_f32().is_nan()).collect();
        let mut want = vec![0.0f32; all.len()];
        F16::widen(KernelFamily::Scalar, &all, &mut want);
        for (h, w) in all.iter().zip(&want) {
            assert_eq!(F16::from_f32(*w), *h, "round trip of {:#06x}", h.0);
        }
        for fam in KernelFamily::all_supported() {
            let mut got = vec![0.0f32; all.len()];
            F16::widen(fam, &all, &mut got);
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{fam:?}");
        }
        // Round to nearest, ties to even.
        assert_eq!(F16::from_f32(1.0 + 1.0 / 2048.0), F16::from_f32(1.0));
        assert_eq!(F16::from_f32(1.0 + 3.0 / 2048.0).to_f32(), 1.0 + 2.0 / 1024.0);
    }

    #[test]
    fn every_family_attends_bit_identically_over_an_f16_cache() {
        for (hd, n) in [(64, 37), (20, 5), (7, 1), (8, 16), (136, 9), (72, 3), (256, 6), (64, 4), (64, 7)] {
            let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.3).sin()).collect();
            let k: Vec<F16> = (0..n * hd * 3).map(|i| F16::from_f32((i as f32 * 0.11).cos())).collect();
            let v: Vec<F16> = (0..n * hd * 3).map(|i| F16::from_f32((i as f32 * 0.07).sin())).collect();
            let mut want = vec![0.0; hd];
            let mut scores = vec![0.0; n];
            attend_head(KernelFamily::Scalar, &q, &k, &v, hd * 3, hd, n, &mut scores, &mut want);
            // The f16 cache is read as exactly the f32 values it holds.
            let kf: Vec<f32> = k.iter().map(|h| h.to_f32()).collect();
            let vf: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
            let mut as_f32 = vec![0.0; hd];
            attend_head(KernelFamily::Scalar, &q, &kf, &vf, hd * 3, hd, n, &mut scores, &mut as_f32);
            assert_eq!(want, as_f32, "hd {hd} n {n}");
            for fam in KernelFamily::all_supported() {
                let mut got = vec![0.0; hd];
                attend_head(fam, &q, &k, &v, hd * 3, hd, n, &mut scores, &mut got);
                assert_eq!(
                    got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                    "{fam:?} hd {hd} n {n}"
                );
            }
        }
    }

    #[test]
    fn every_family_attends_bit_identically() {
        // Head sizes around the 8-wide SIMD step; the head is the middle one
        // of three per cache row.
        for (hd, n) in [(64, 37), (20, 5), (7, 1), (8, 16), (136, 9), (72, 3), (100, 6), (64, 4), (64, 7)] {
            let q: Vec<f32> = (0..hd).map(|i| (i as f32 * 0.3).sin()).collect();
            let k: Vec<f32> = (0..n * hd * 3).map(|i| (i as f32 * 0.11).cos()).collect();
            let v: Vec<f32> = (0..n * hd * 3).map(|i| (i as f32 * 0.07).sin()).collect();
            let mut want = vec![0.0; hd];
            let mut scores = vec![0.0; n];
            attend_head(KernelFamily::Scalar, &q, &k, &v, hd * 3, hd, n, &mut scores, &mut want);
            for fam in KernelFamily::all_supported() {
                let mut got = vec![0.0; hd];
                attend_head(fam, &q, &k, &v, hd * 3, hd, n, &mut scores, &mut got);
                assert_eq!(
                    got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                    "{fam:?} hd {hd} n {n}"
                );
            }
        }
    }
}
