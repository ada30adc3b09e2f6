//! x86_64 SIMD mat-vec kernels (AVX2; AVX-512 VNNI).
//!
//! Eight output rows are computed at once, one per f32 lane. For each
//! activation block the eight weight blocks' quants are widened to i16 and
//! their integer dots with the 16-bit activation formed with `vpmaddwd`
//! (AVX2) or `vpdpwssd` (AVX-512 VNNI), reduced to one i32 per row,
//! and combined into the lane's accumulator with exactly the operations, in
//! exactly the order, of [`super::scalar`]: that is what makes every family
//! bit-identical to the scalar specification. Rows that do not fill a group
//! of eight run through the scalar kernel, which computes the same numbers.

use super::{Input, Matrix, Weights, scalar};
use crate::act::BlockQ16;
use crate::dispatch::KernelFamily;
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};
use std::arch::x86_64::*;

/// Runs the family's kernel for `m` if it has one; `false` means the caller
/// should use the scalar kernel (K-quant formats have only the scalar one).
pub(super) fn matvec_rows(family: KernelFamily, m: &Matrix, input: Input, row0: usize, out: &mut [f32]) -> bool {
    // A family value can be built by anyone; running its instructions on a
    // CPU without them would be undefined behaviour, so check (cached).
    if !family.is_supported() {
        return false;
    }
    let nb = m.cols / QK;
    let x = input.q;
    // SAFETY (all arms): the CPU supports the family's target features
    // (checked above); shapes were checked by the caller (`row0 + out.len()
    // <= m.rows`, `x.len() == nb`, weights hold `rows * nb` blocks).
    unsafe {
        match (family, m.w) {
            (KernelFamily::Avx2, Weights::Q4_1(w)) => avx2::q4_1(w, nb, x, row0, out),
            (KernelFamily::Avx2, Weights::Q4_0(w)) => avx2::q4_0(w, nb, x, row0, out),
            (KernelFamily::Avx2, Weights::Q8_0(w)) => avx2::q8_0(w, nb, x, row0, out),
            (KernelFamily::Avx512Vnni, Weights::Q4_1(w)) => vnni::q4_1(w, nb, x, row0, out),
            (KernelFamily::Avx512Vnni, Weights::Q4_0(w)) => vnni::q4_0(w, nb, x, row0, out),
            (KernelFamily::Avx512Vnni, Weights::Q8_0(w)) => vnni::q8_0(w, nb, x, row0, out),
            (KernelFamily::Avx2 | KernelFamily::Avx512Vnni, Weights::F32(w)) => {
                for (i, o) in out.iter_mut().enumerate() {
                    let r = row0 + i;
                    *o = dot_f32_avx2(&w[r * m.cols..(r + 1) * m.cols], input.x);
                }
            }
            _ => return false,
        }
    }
    true
}

/// [`scalar::dot_f32`] with one 256-bit register holding its eight lanes.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n8 = a.len().min(b.len()) / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= len of both slices.
        let (va, vb) = unsafe { (_mm256_loadu_ps(a.as_ptr().add(i)), _mm256_loadu_ps(b.as_ptr().add(i))) };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(va, vb));
        i += 8;
    }
    // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), as scalar::reduce8.
    let h4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    let h1 = _mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1));
    let mut s = _mm_cvtss_f32(h1);
    for j in n8..a.len() {
        s += a[j] * b[j];
    }
    s
}

/// The 32 quants of a Q4 block as i16: elements 0..16 (low nibbles) and
/// 16..32 (high nibbles).
///
/// # Safety
/// AVX2; `qs` points at 16 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn unpack_nibbles(qs: *const u8) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let v = unsafe { _mm_loadu_si128(qs.cast()) };
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    (_mm256_cvtepu8_epi16(lo), _mm256_cvtepu8_epi16(hi))
}

/// The 32 signed quants of a Q8_0 block as i16, in two halves.
///
/// # Safety
/// AVX2; `qs` points at 32 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn widen_i8(qs: *const i8) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees 32 readable bytes.
    let (a, b) = unsafe { (_mm_loadu_si128(qs.cast()), _mm_loadu_si128(qs.add(16).cast())) };
    (_mm256_cvtepi8_epi16(a), _mm256_cvtepi8_epi16(b))
}

/// The activation block's 32 i16 quants in two halves.
///
/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
#[inline]
fn load_act(xb: &BlockQ16) -> (__m256i, __m256i) {
    // SAFETY: qs is 32 i16 = 64 readable bytes.
    unsafe { (_mm256_loadu_si256(xb.qs.as_ptr().cast()), _mm256_loadu_si256(xb.qs.as_ptr().add(16).cast())) }
}

/// Reduces eight vectors of eight i32 partial sums to one vector whose lane
/// `i` is the total of `v[i]` (integer addition: order does not matter).
#[target_feature(enable = "avx2")]
#[inline]
fn reduce_8x8(v: &[__m256i; 8]) -> __m256i {
    let s01 = _mm256_hadd_epi32(v[0], v[1]);
    let s23 = _mm256_hadd_epi32(v[2], v[3]);
    let s45 = _mm256_hadd_epi32(v[4], v[5]);
    let s67 = _mm256_hadd_epi32(v[6], v[7]);
    let s0123 = _mm256_hadd_epi32(s01, s23);
    let s4567 = _mm256_hadd_epi32(s45, s67);
    let lo = _mm256_permute2x128_si256(s0123, s4567, 0x20);
    let hi = _mm256_permute2x128_si256(s0123, s4567, 0x31);
    _mm256_add_epi32(lo, hi)
}

/// Eight f16 values gathered into f32 lanes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn halves(bits: &[u16; 8]) -> __m256 {
    // SAFETY: `bits` is 16 readable bytes.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(bits.as_ptr().cast()) })
}

/// Generates the Q4_0 / Q4_1 / Q8_0 kernels for one family: `$dot(w, x)`
/// returns eight i32 lanes whose total is `Σ w[k]·x[k]` over the two i16
/// halves of a weight block and an activation block.
macro_rules! q_kernels {
    ($feat:literal, $dot:ident) => {
        use super::*;

        /// Rows `row0..row0+out.len()`, Q4_1 weights.
        ///
        /// # Safety
        /// CPU features of the family; shapes as checked by `matvec_rows`.
        #[target_feature(enable = $feat)]
        pub unsafe fn q4_1(w: &[BlockQ4_1], nb: usize, x: &[BlockQ16], row0: usize, out: &mut [f32]) {
            let groups = out.len() / 8;
            for g in 0..groups {
                let r = row0 + g * 8;
                let mut acc = _mm256_setzero_ps();
                for (b, xb) in x.iter().enumerate().take(nb) {
                    let xv = load_act(xb);
                    let mut sums = [_mm256_setzero_si256(); 8];
                    let (mut ds, mut ms) = ([0u16; 8], [0u16; 8]);
                    for i in 0..8 {
                        let wb = &w[(r + i) * nb + b];
                        ds[i] = wb.d;
                        ms[i] = wb.m;
                        // SAFETY: qs is 16 bytes.
                        sums[i] = $dot(unsafe { unpack_nibbles(wb.qs.as_ptr()) }, xv);
                    }
                    let isum = _mm256_cvtepi32_ps(reduce_8x8(&sums));
                    let p = _mm256_mul_ps(halves(&ds), _mm256_set1_ps(xb.d));
                    let t = _mm256_mul_ps(p, isum);
                    let t2 = _mm256_mul_ps(halves(&ms), _mm256_set1_ps(xb.s));
                    acc = _mm256_add_ps(acc, _mm256_add_ps(t, t2));
                }
                // SAFETY: g * 8 + 8 <= out.len().
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(g * 8), acc) };
            }
            let done = groups * 8;
            for (i, o) in out[done..].iter_mut().enumerate() {
                let r = row0 + done + i;
                *o = scalar::dot_q4_1(&w[r * nb..(r + 1) * nb], x);
            }
        }

        /// Rows `row0..row0+out.len()`, Q4_0 weights.
        ///
        /// # Safety
        /// CPU features of the family; shapes as checked by `matvec_rows`.
        #[target_feature(enable = $feat)]
        pub unsafe fn q4_0(w: &[BlockQ4_0], nb: usize, x: &[BlockQ16], row0: usize, out: &mut [f32]) {
            let groups = out.len() / 8;
            for g in 0..groups {
                let r = row0 + g * 8;
                let mut acc = _mm256_setzero_ps();
                for (b, xb) in x.iter().enumerate().take(nb) {
                    let xv = load_act(xb);
                    let mut sums = [_mm256_setzero_si256(); 8];
                    let mut ds = [0u16; 8];
                    for i in 0..8 {
                        let wb = &w[(r + i) * nb + b];
                        ds[i] = wb.d;
                        // SAFETY: qs is 16 bytes.
                        sums[i] = $dot(unsafe { unpack_nibbles(wb.qs.as_ptr()) }, xv);
                    }
                    let isum = _mm256_sub_epi32(reduce_8x8(&sums), _mm256_set1_epi32(8 * xb.sum));
                    let p = _mm256_mul_ps(halves(&ds), _mm256_set1_ps(xb.d));
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(p, _mm256_cvtepi32_ps(isum)));
                }
                // SAFETY: g * 8 + 8 <= out.len().
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(g * 8), acc) };
            }
            let done = groups * 8;
            for (i, o) in out[done..].iter_mut().enumerate() {
                let r = row0 + done + i;
                *o = scalar::dot_q4_0(&w[r * nb..(r + 1) * nb], x);
            }
        }

        /// Rows `row0..row0+out.len()`, Q8_0 weights.
        ///
        /// # Safety
        /// CPU features of the family; shapes as checked by `matvec_rows`.
        #[target_feature(enable = $feat)]
        pub unsafe fn q8_0(w: &[BlockQ8_0], nb: usize, x: &[BlockQ16], row0: usize, out: &mut [f32]) {
            let groups = out.len() / 8;
            for g in 0..groups {
                let r = row0 + g * 8;
                let mut acc = _mm256_setzero_ps();
                for (b, xb) in x.iter().enumerate().take(nb) {
                    let xv = load_act(xb);
                    let mut sums = [_mm256_setzero_si256(); 8];
                    let mut ds = [0u16; 8];
                    for i in 0..8 {
                        let wb = &w[(r + i) * nb + b];
                        ds[i] = wb.d;
                        // SAFETY: qs is 32 bytes.
                        sums[i] = $dot(unsafe { widen_i8(wb.qs.as_ptr()) }, xv);
                    }
                    let isum = reduce_8x8(&sums);
                    let p = _mm256_mul_ps(halves(&ds), _mm256_set1_ps(xb.d));
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(p, _mm256_cvtepi32_ps(isum)));
                }
                // SAFETY: g * 8 + 8 <= out.len().
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(g * 8), acc) };
            }
            let done = groups * 8;
            for (i, o) in out[done..].iter_mut().enumerate() {
                let r = row0 + done + i;
                *o = scalar::dot_q8_0(&w[r * nb..(r + 1) * nb], x);
            }
        }
    };
}

/// `vpmaddwd` sums adjacent i16 products into i32 (at most 2·128·32767:
/// no overflow, since activations never reach -32768).
#[target_feature(enable = "avx2")]
#[inline]
fn dot_madd(w: (__m256i, __m256i), x: (__m256i, __m256i)) -> __m256i {
    _mm256_add_epi32(_mm256_madd_epi16(w.0, x.0), _mm256_madd_epi16(w.1, x.1))
}

/// `vpdpwssd`: the same pair sums accumulated straight into the i32 lanes.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
#[inline]
fn dot_vnni(w: (__m256i, __m256i), x: (__m256i, __m256i)) -> __m256i {
    _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(_mm256_setzero_si256(), w.0, x.0), w.1, x.1)
}

mod avx2 {
    q_kernels!("avx2,fma,f16c", dot_madd);
}

mod vnni {
    q_kernels!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", dot_vnni);
}
