//! x86_64 kernels for F16 and BF16 weights against the f32 activation:
//! [`crate::matvec::scalar::dot_f16`] with one 256-bit register holding its eight
//! lanes per activation row.
//!
//! A step loads eight weights of one row and widens them once (`vcvtph2ps`
//! for IEEE half, a zero-extension and a 16-bit left shift for bfloat16,
//! both exact), then multiplies them against eight inputs of each of `W`
//! activation rows, each row in its own accumulator (`vmulps` then
//! `vaddps`, rounded separately as the specification's `lanes[j] += w·x`).
//! So a `W`-row call streams every weight row once, and row `i`'s result is
//! exactly the one-row call's. The AVX-512 family runs the same code
//! compiled with AVX-512 VL enabled, which gives it 32 `ymm` registers for
//! eight rows' accumulators.

// The weight rows × activation rows loops index parallel arrays with one
// counter.
#![allow(clippy::needless_range_loop)]

use super::shared::reduce8_ymm;
use crate::matvec::Input;
use crate::matvec::scalar::{bf16_to_f32, f16_to_f32};
use crate::dispatch::{AVX2_MAX_ROWS, AVX512_MAX_ROWS, FamilyKind, KernelFamily};
use std::arch::x86_64::*;

/// Eight weights at `p` widened to f32.
///
/// # Safety
/// AVX2 + F16C; 16 bytes at `p` are readable.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn widen8<const BF: bool>(p: *const u16) -> __m256 {
    // SAFETY: forwarded from the caller.
    unsafe {
        let v = _mm_loadu_si128(p.cast());
        if BF { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v))) } else { _mm256_cvtph_ps(v) }
    }
}

/// `W` outputs of weight row `w` (cols 16-bit weights) against `xs`.
///
/// # Safety
/// AVX2 + F16C; every `xs[i]` is at least `w.len()` long.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn row_avx2<const BF: bool, const W: usize>(w: &[u16], xs: &[&[f32]; W]) -> [f32; W] {
    let n = w.len();
    let n8 = n / 8 * 8;
    let mut acc = [_mm256_setzero_ps(); W];
    let mut j = 0;
    while j < n8 {
        // SAFETY: j + 8 <= n8 <= n <= every slice's length.
        unsafe {
            let wv = widen8::<BF>(w.as_ptr().add(j));
            for i in 0..W {
                acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(wv, _mm256_loadu_ps(xs[i].as_ptr().add(j))));
            }
        }
        j += 8;
    }
    let widen = |v: u16| if BF { bf16_to_f32(v) } else { f16_to_f32(v) };
    std::array::from_fn(|i| {
        let mut s = reduce8_ymm(acc[i]);
        for k in n8..n {
            s += widen(w[k]) * xs[i][k];
        }
        s
    })
}

/// [`row_avx2`] compiled with AVX-512 VL (32 vector registers).
///
/// # Safety
/// As [`row_avx2`], plus AVX-512 F/VL.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
#[inline]
unsafe fn row_avx512<const BF: bool, const W: usize>(w: &[u16], xs: &[&[f32]; W]) -> [f32; W] {
    // SAFETY: forwarded; the features are a superset of row_avx2's.
    unsafe { row_avx2::<BF, W>(w, xs) }
}

/// Rows `row0 .. row0 + n` of a (rows, cols) 16-bit matrix `w` against
/// `W` inputs, outputs at `o[i * n + r - row0]`.
///
/// # Safety
/// The CPU supports `family`'s instructions; shapes checked by the caller.
unsafe fn pass<const BF: bool, const W: usize>(
    family: KernelFamily,
    w: &[u16],
    cols: usize,
    xs: &[Input],
    row0: usize,
    n: usize,
    o: &mut [f32],
) {
    let x: [&[f32]; W] = std::array::from_fn(|i| xs[i].x);
    for r in 0..n {
        let wr = &w[(row0 + r) * cols..(row0 + r + 1) * cols];
        // SAFETY: forwarded; every input has `cols` elements.
        let y = unsafe {
            if family.kind() == FamilyKind::Avx512Vnni { row_avx512::<BF, W>(wr, &x) } else { row_avx2::<BF, W>(wr, &x) }
        };
        for i in 0..W {
            o[i * n + r] = y[i];
        }
    }
}

/// `m · inputs[i]` for rows `row0 .. row0 + n`, `n = outs.len() /
/// inputs.len()`, in chunks of the family's widest pass.
///
/// # Safety
/// The CPU supports `family` (AVX2 or AVX-512 VNNI); `w` holds `rows ·
/// cols` weights with `row0 + n <= rows`; every input has `cols` elements.
pub(super) unsafe fn matmul(
    family: KernelFamily,
    bf: bool,
    w: &[u16],
    cols: usize,
    inputs: &[Input],
    row0: usize,
    outs: &mut [f32],
) {
    let n = outs.len() / inputs.len();
    let max_w = if family.kind() == FamilyKind::Avx512Vnni { AVX512_MAX_ROWS } else { AVX2_MAX_ROWS };
    let mut i0 = 0;
    while i0 < inputs.len() {
        let wn = (inputs.len() - i0).min(max_w);
        let (xs, o) = (&inputs[i0..i0 + wn], &mut outs[i0 * n..(i0 + wn) * n]);
        macro_rules! widths {
            ($($w:literal),*) => {
                match (bf, wn) {
                    // SAFETY: forwarded from the caller; `xs.len() == wn`.
                    $((false, $w) => unsafe { pass::<false, $w>(family, w, cols, xs, row0, n, o) },
                      (true, $w) => unsafe { pass::<true, $w>(family, w, cols, xs, row0, n, o) },)*
                    _ => unreachable!("width {wn} above the family's maximum"),
                }
            };
        }
        const _: () = assert!(AVX2_MAX_ROWS <= 8 && AVX512_MAX_ROWS == 8, "update the width list below");
        widths!(1, 2, 3, 4, 5, 6, 7, 8);
        i0 += wn;
    }
}
