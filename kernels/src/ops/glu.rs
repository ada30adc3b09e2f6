//! The gated linear units of the feed-forward block: SwiGLU (SiLU gate)
//! and GeGLU (tanh-approximated GELU gate), with their AVX2 twins.

use crate::dispatch::{FamilyKind, KernelFamily};
#[cfg(target_arch = "x86_64")]
use super::softmax::exp_nonpositive_avx2;
use super::softmax::exp_nonpositive;

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
    if family.kind() != FamilyKind::Scalar {
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
