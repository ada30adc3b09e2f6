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

/// In-place softmax: subtract the max, exponentiate, divide by the sum
/// (summed in index order).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// SwiGLU (Shazeer 2020): `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let s = *g / (1.0 + (-*g).exp());
        *g = s * u;
    }
}

/// Causal attention of one query head over `n_ctx` cached positions.
///
/// `q`: (head_dim); `keys`/`values`: the layer's cache rows, each
/// `row_stride` floats, the head's slice starting at `offset`; `scores`:
/// scratch of at least `n_ctx`; `out`: (head_dim). Scores are scaled by
/// `1/sqrt(head_dim)`, softmaxed, and the values summed in position order.
#[allow(clippy::too_many_arguments)]
pub fn attend_head(
    family: KernelFamily,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
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
    let mut t0 = 0;
    #[cfg(target_arch = "x86_64")]
    if family != KernelFamily::Scalar && family.is_supported() {
        // Four keys per step: independent dependency chains, each key's
        // dot exactly `dot`'s (the same bits).
        while t0 + 4 <= n_ctx {
            // SAFETY: every non-scalar x86 family includes AVX2 (checked
            // above); every key slice has `hd` elements.
            let d = unsafe { crate::matvec::x86_dot4_f32(q, std::array::from_fn(|k| key(t0 + k))) };
            for k in 0..4 {
                scores[t0 + k] = d[k] * scale;
            }
            t0 += 4;
        }
    }
    for (t, s) in scores.iter_mut().enumerate().skip(t0) {
        *s = dot(family, q, key(t)) * scale;
    }
    softmax(scores);
    out.fill(0.0);
    assert!(n_ctx == 0 || (n_ctx - 1) * row_stride + offset + hd <= values.len(), "values too short");
    #[cfg(target_arch = "x86_64")]
    if family != KernelFamily::Scalar && family.is_supported() {
        // SAFETY: every non-scalar x86 family includes AVX2 (checked above);
        // the value rows read lie inside `values` (asserted above).
        unsafe { weighted_sum_avx2(scores, values, row_stride, offset, out) };
        return;
    }
    for (t, &p) in scores.iter().enumerate() {
        let v = &values[t * row_stride + offset..t * row_stride + offset + hd];
        for (o, &vv) in out.iter_mut().zip(v) {
            *o += p * vv;
        }
    }
}

/// `out[j] += p_t * v_t[j]` over positions `t` in order, eight `j` at a
/// time: the same multiplication and addition per element, in the same
/// order, as the scalar loop of [`attend_head`] (no fused multiply-add), so
/// the result is bit-identical.
///
/// # Safety
/// AVX2; every value row `t * row_stride + offset .. + out.len()` for
/// `t < scores.len()` lies inside `values`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn weighted_sum_avx2(scores: &[f32], values: &[f32], row_stride: usize, offset: usize, out: &mut [f32]) {
    let hd = out.len();
    let h8 = hd / 8 * 8;
    // Bands of 64 elements (eight registers) stay in registers across all
    // positions; what is left of the first h8 goes eight at a time.
    let mut j0 = 0;
    while j0 + 64 <= h8 {
        // SAFETY: forwarded; j0 + 64 <= h8 <= hd.
        unsafe { weighted_band::<8>(scores, values, row_stride, offset + j0, &mut out[j0..j0 + 64]) };
        j0 += 64;
    }
    while j0 < h8 {
        // SAFETY: forwarded; j0 + 8 <= h8 <= hd.
        unsafe { weighted_band::<1>(scores, values, row_stride, offset + j0, &mut out[j0..j0 + 8]) };
        j0 += 8;
    }
    for (t, &p) in scores.iter().enumerate() {
        let base = t * row_stride + offset;
        for j in h8..hd {
            out[j] += p * values[base + j];
        }
    }
}

/// `out[j] += p_t * v_t[offset + j]` over positions `t` in order, for the
/// `8 R` elements of `out`, held in `R` registers throughout.
///
/// # Safety
/// AVX2; `out.len() == 8 * R`; every value row `t * row_stride + offset ..
/// + 8 R` for `t < scores.len()` lies inside `values`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn weighted_band<const R: usize>(
    scores: &[f32],
    values: &[f32],
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
                *a = _mm256_add_ps(*a, _mm256_mul_ps(pv, _mm256_loadu_ps(base.add(8 * k))));
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
        attend_head(KernelFamily::Scalar, &q, &k, &v, 4, 0, 1, &mut scores, &mut out);
        assert_eq!(out, [3.0, 4.0]);
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
