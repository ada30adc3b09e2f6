//! The reference attention over an f32 or f16 ([`F16`]) cache
//! ([`attend_head`]: the CUDA tests' reference, and the long-context
//! path's specification), and the cache element trait ([`KvElem`]) that
//! widens what it reads exactly.

use super::dot;
use super::softmax::softmax_in;
use crate::dispatch::{FamilyKind, KernelFamily};
use crate::quant::F16;

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
        if family.kind() != FamilyKind::Scalar {
            // SAFETY: every non-scalar x86 family includes AVX2 (a family is checked
            // when made); `attend_head` asserted the value rows lie inside `values`.
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

impl KvElem for F16 {
    fn widen(family: KernelFamily, src: &[F16], dst: &mut [f32]) {
        debug_assert_eq!(src.len(), dst.len());
        #[cfg(target_arch = "x86_64")]
        if family.kind() != FamilyKind::Scalar {
            // SAFETY: every non-scalar x86 family includes AVX2 and F16C
            // (a `KernelFamily` is checked for both when made); lengths are equal.
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
        if family.kind() != FamilyKind::Scalar {
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
    if family.kind() != FamilyKind::Scalar {
        // Four keys per step: independent dependency chains, each key's
        // dot exactly `dot`'s (the same bits).
        while t0 + 4 <= n_ctx {
            for k in 0..4 {
                T::widen(family, key(t0 + k), &mut kb[k * hd..(k + 1) * hd]);
            }
            let rows: [&[f32]; 4] = std::array::from_fn(|k| &kb[k * hd..(k + 1) * hd]);
            // SAFETY: every non-scalar x86 family includes AVX2 (a family is checked
            // when made); every key row has `hd` elements.
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
