//! The f32 dot products of the x86_64 families (AVX2 and up): f32 weight
//! matrices, and [`crate::ops`] through [`crate::matvec::x86_dot_f32`].

// The four chains index parallel arrays with the same counter.
#![allow(clippy::needless_range_loop)]

use super::shared::reduce8_ymm;
use std::arch::x86_64::*;

/// [`crate::matvec::scalar::dot_f32`] with one 256-bit register holding its eight lanes.
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
    let mut s = reduce8_ymm(acc);
    for j in n8..a.len() {
        s += a[j] * b[j];
    }
    s
}

/// [`dot_f32_avx2`] of `a` with four vectors at once: four independent
/// accumulator chains instead of one, each with exactly that function's
/// operations in its order, so each result has the same bits.
///
/// # Safety
/// The CPU must support AVX2; every `b[k]` is at least `a.len()` long.
#[target_feature(enable = "avx2")]
pub unsafe fn dot4_f32_avx2(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    let n = a.len();
    let n8 = n / 8 * 8;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= n <= every slice's length.
        unsafe {
            let va = _mm256_loadu_ps(a.as_ptr().add(i));
            for k in 0..4 {
                acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(va, _mm256_loadu_ps(b[k].as_ptr().add(i))));
            }
        }
        i += 8;
    }
    std::array::from_fn(|k| {
        let mut s = reduce8_ymm(acc[k]);
        for j in n8..n {
            s += a[j] * b[k][j];
        }
        s
    })
}
