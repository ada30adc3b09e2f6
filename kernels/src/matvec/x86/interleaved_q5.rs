//! x86_64 kernels for the row-interleaved layout ([`crate::matvec::r16`]) of Q5_0
//! and Q5_1: AVX-512 VNNI (one `zmm` = sixteen rows) and AVX2 (one `ymm` =
//! eight rows, a group in two halves), the Q4 kernels of
//! [`super::interleaved_q4_q8`] with each row's fifth bits added to the widened
//! nibbles. The group driver (chunks of activation rows, groups cut by the
//! row range, GGUF-layout matrices repacked on the way) is the dispatcher's
//! ([`super`]), the prefetching [`super::shared`]'s; only the passes live
//! here.
//!
//! Per tile and chunk `s`, the tile's sixteen permuted fifth-bit words
//! (one register for AVX-512, one per half for AVX2), shifted once by
//! [`q5_shift`]`(s)`, hold in every row's lane the fifth bits of the
//! chunk's four elements at bits 4 and 20 (the low nibbles' tops) and 8
//! and 24 (the high nibbles', which are kept as `byte & 0xF0`, sixteen
//! times the nibble, as the Q4 kernels keep them). One masked OR per
//! nibble register (`vpternlogd` on AVX-512, `vpand` + `vpor` on AVX2)
//! completes the 5-bit quants; all of this is shared by the activation
//! rows of the pass, whose per-row work is the Q4 kernels' exactly.
//!
//! Q5_0's weights are `q − 16`: the kernels multiply `q` and take
//! `16 · Σ qx` (the activation block's exact integer sum,
//! [`crate::act::QRow::sum`]) off each block's integer sum — the same
//! integer as [`crate::matvec::scalar`]'s `Σ (q − 16)·qx`, for one subtraction per
//! activation row and block instead of two per chunk. Then the chain of
//! the specification, lane by lane: one conversion, one scale product and
//! one FMA per block (a second FMA for Q5_1's min).
//!
//! Integer ranges: a 5-bit quant is at most 31 (496 as sixteen times a
//! high nibble), so a lane's high-nibble sum over a block is at most
//! 16 · 496 · 32767 < 2^28, and `16 · Σ qx` at most 2^24: every sum is
//! exact in `i32`. A block's sum can exceed 2^24 and then rounds in the
//! conversion, as `as f32` rounds it in the specification (both to nearest
//! even).

// Register-blocked loops index parallel arrays (activation rows ×
// accumulators) with the same counter.
#![allow(clippy::needless_range_loop)]

use super::shared::{
    Outs, PREFETCH_FROM_ROWS_256, PREFETCH_FROM_ROWS_512, Pass, act_ptrs, dpwssd_bcast, prefetch_past, x_offset,
};
use crate::dispatch::{FamilyKind, KernelFamily};
use crate::matvec::Input;
use crate::matvec::r16::{R16Format, q5_shift};
use std::arch::x86_64::*;

/// Format tags of the const-generic kernels.
const Q5_0: u8 = 0;
const Q5_1: u8 = 1;

const fn fmt_of(f: u8) -> R16Format {
    if f == Q5_0 { R16Format::Q5_0 } else { R16Format::Q5_1 }
}

/// The bits of a shifted row word that complete the low nibbles (4 and 20)
/// and the high nibbles kept as `byte & 0xF0` (8 and 24): [`crate::matvec::r16`].
const LOW_TOPS: i32 = 0x0010_0010;
const HIGH_TOPS: i32 = 0x0100_0100;

/// `vpternlogd` truth table of `a | (b & c)`.
const OR_AND: i32 = 0xF8;

/// Picks the const-generic instance for (family, format, width).
///
/// # Safety
/// As [`group_avx2`] / [`group_avx512`]; `fmt` is Q5_0 or Q5_1.
pub(super) unsafe fn run_pass(family: KernelFamily, fmt: R16Format, w: usize, pass: Pass) {
    debug_assert!(fmt.has_high_bits());
    macro_rules! widths {
        ($kern:ident, $f:expr, [$($w:literal),*]) => {
            match w {
                // SAFETY: forwarded from the caller; `pass.xs.len() == w`.
                $($w => unsafe { $kern::<$f, $w>(pass.tiles, pass.nb, pass.end, pass.xs, std::array::from_fn(|i| pass.o[i])) },)*
                _ => unreachable!("width {w} above the family's maximum"),
            }
        };
    }
    macro_rules! formats {
        ($kern:ident, $ws:tt) => {
            if fmt == R16Format::Q5_0 { widths!($kern, Q5_0, $ws) } else { widths!($kern, Q5_1, $ws) }
        };
    }
    const _: () = assert!(
        crate::dispatch::AVX2_MAX_ROWS == 4 && crate::dispatch::AVX512_MAX_ROWS == 8,
        "update the width lists below"
    );
    match family.kind() {
        FamilyKind::Avx2 => formats!(group_avx2, [1, 2, 3, 4]),
        FamilyKind::Avx512Vnni => formats!(group_avx512, [1, 2, 3, 4, 5, 6, 7, 8]),
        FamilyKind::Scalar => unreachable!("scalar has no SIMD pass"),
    }
}

/// Sixteen row words shifted by chunk `s`'s [`q5_shift`].
#[target_feature(enable = "avx512f")]
#[inline]
fn shift_words_zmm(words: __m512i, s: usize) -> __m512i {
    let k = q5_shift(s);
    // Constant after unrolling: LLVM emits the immediate shift.
    if k < 0 { _mm512_sll_epi32(words, _mm_cvtsi32_si128(-k)) } else { _mm512_srl_epi32(words, _mm_cvtsi32_si128(k)) }
}

/// Eight row words shifted by chunk `s`'s [`q5_shift`].
#[target_feature(enable = "avx2")]
#[inline]
fn shift_words_ymm(words: __m256i, s: usize) -> __m256i {
    let k = q5_shift(s);
    if k < 0 { _mm256_sll_epi32(words, _mm_cvtsi32_si128(-k)) } else { _mm256_srl_epi32(words, _mm_cvtsi32_si128(k)) }
}

/// Sixteen outputs (one group) × `W` activation rows, AVX-512 VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, FMA, F16C; `pass.tiles` points at `pass.nb` tiles of format
/// `F`; every input has `nb` quantized blocks; each `out[i]` has sixteen
/// writable floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn group_avx512<const F: u8, const W: usize>(
    tiles: *const u8,
    nb: usize,
    end: *const u8,
    xs: &[Input],
    out: Outs<W>,
) {
    let fmt = fmt_of(F);
    let (tb, qo, ho, mo) = (fmt.tile_bytes(), fmt.qs_offset(), fmt.qh_offset(), fmt.min_offset());
    // As in interleaved_q4_q8: two accumulator sets for one row (independent
    // `vpdpwssd` chains), and high nibbles in accumulators of their own
    // (as 16·q) for four rows or fewer, shifted down into the same ones
    // for wider passes, short of registers.
    let sets = if W == 1 { 2 } else { 1 };
    let split = W <= 4;
    let (xq, dx, sx) = act_ptrs::<W>(xs);
    let xsum: [*const i32; W] = std::array::from_fn(|i| xs[i].q.sum.as_ptr());
    // SAFETY (whole body): tiles b < nb lie at tiles + b*tb, each holding
    // its scales, mins, sixteen words and quant chunks at the format's
    // offsets; the activation quants of block b < nb lie at the offsets
    // x_offset(b, e < 32), its scale, d·sum and sum at index b; out
    // pointers are the caller's.
    unsafe {
        let mut y = [_mm512_setzero_ps(); W];
        for b in 0..nb {
            let t = tiles.add(b * tb);
            if W >= PREFETCH_FROM_ROWS_512 {
                prefetch_past(t, tb, end);
            }
            let words = _mm512_loadu_si512(t.add(ho).cast());
            let mut acc = [[_mm512_setzero_si512(); 4]; W];
            for s in 0..8 {
                let raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256(t.add(qo + 32 * s).cast()));
                let fifth = shift_words_zmm(words, s);
                let lo_nib = _mm512_and_si512(raw, _mm512_set1_epi16(0x0F));
                let lo = _mm512_ternarylogic_epi32::<OR_AND>(lo_nib, fifth, _mm512_set1_epi32(LOW_TOPS));
                let hi_nib = _mm512_and_si512(raw, _mm512_set1_epi16(0xF0));
                let hi16 = _mm512_ternarylogic_epi32::<OR_AND>(hi_nib, fifth, _mm512_set1_epi32(HIGH_TOPS));
                let hi = if split { hi16 } else { _mm512_srli_epi16::<4>(hi16) };
                let c = 2 * (s % sets);
                let ch = if split { c + 1 } else { c };
                for i in 0..W {
                    acc[i][c] = dpwssd_bcast(acc[i][c], lo, xq[i].add(x_offset(b, 2 * s)));
                    acc[i][ch] = dpwssd_bcast(acc[i][ch], hi, xq[i].add(x_offset(b, 16 + 2 * s)));
                }
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(t.cast()));
            let mw = if F == Q5_1 { _mm512_cvtph_ps(_mm256_loadu_si256(t.add(mo).cast())) } else { dw };
            for i in 0..W {
                let a = acc[i];
                let mut isum = if split {
                    let hi16 = _mm512_add_epi32(a[1], a[3]);
                    _mm512_add_epi32(_mm512_add_epi32(a[0], a[2]), _mm512_srai_epi32::<4>(hi16))
                } else {
                    _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]))
                };
                if F == Q5_0 {
                    isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(16 * *xsum[i].add(b)));
                }
                let p = _mm512_mul_ps(dw, _mm512_set1_ps(*dx[i].add(b)));
                y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), p, y[i]);
                if F == Q5_1 {
                    y[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(*sx[i].add(b)), y[i]);
                }
            }
        }
        for i in 0..W {
            _mm512_storeu_ps(out[i], y[i]);
        }
    }
}

/// Sixteen outputs (one group, in two halves of eight rows) × `W`
/// activation rows, AVX2.
///
/// # Safety
/// AVX2, FMA, F16C; otherwise as [`group_avx512`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_avx2<const F: u8, const W: usize>(
    tiles: *const u8,
    nb: usize,
    end: *const u8,
    xs: &[Input],
    out: Outs<W>,
) {
    let fmt = fmt_of(F);
    let (tb, qo, ho, mo) = (fmt.tile_bytes(), fmt.qs_offset(), fmt.qh_offset(), fmt.min_offset());
    let (xq, dx, sx) = act_ptrs::<W>(xs);
    let xsum: [*const i32; W] = std::array::from_fn(|i| xs[i].q.sum.as_ptr());
    let pair = |x: *const i16| -> __m256i {
        // SAFETY: the callers pass in-bounds element offsets (two i16).
        _mm256_set1_epi32(unsafe { x.cast::<i32>().read_unaligned() })
    };
    // SAFETY (whole body): as in `group_avx512`; half h reads bytes
    // 16h..16h+16 of every 32-byte chunk, scales and mins 8h..8h+8 and row
    // words 8h..8h+8.
    unsafe {
        for h in 0..2 {
            let mut y = [_mm256_setzero_ps(); W];
            for b in 0..nb {
                let t = tiles.add(b * tb);
                if h == 0 && W >= PREFETCH_FROM_ROWS_256 {
                    prefetch_past(t, tb, end);
                }
                let words = _mm256_loadu_si256(t.add(ho + 32 * h).cast());
                let mut acc = [[_mm256_setzero_si256(); 2]; W];
                for s in 0..8 {
                    let raw = _mm256_cvtepu8_epi16(_mm_loadu_si128(t.add(qo + 32 * s + 16 * h).cast()));
                    let fifth = shift_words_ymm(words, s);
                    let lo = _mm256_or_si256(
                        _mm256_and_si256(raw, _mm256_set1_epi16(0x0F)),
                        _mm256_and_si256(fifth, _mm256_set1_epi32(LOW_TOPS)),
                    );
                    let hi = _mm256_or_si256(
                        _mm256_and_si256(raw, _mm256_set1_epi16(0xF0)),
                        _mm256_and_si256(fifth, _mm256_set1_epi32(HIGH_TOPS)),
                    );
                    for i in 0..W {
                        let vl = _mm256_madd_epi16(lo, pair(xq[i].add(x_offset(b, 2 * s))));
                        let vh = _mm256_madd_epi16(hi, pair(xq[i].add(x_offset(b, 16 + 2 * s))));
                        acc[i][0] = _mm256_add_epi32(acc[i][0], vl);
                        acc[i][1] = _mm256_add_epi32(acc[i][1], vh);
                    }
                }
                let dw = _mm256_cvtph_ps(_mm_loadu_si128(t.add(16 * h).cast()));
                let mw = if F == Q5_1 { _mm256_cvtph_ps(_mm_loadu_si128(t.add(mo + 16 * h).cast())) } else { dw };
                for i in 0..W {
                    let mut isum = _mm256_add_epi32(acc[i][0], _mm256_srai_epi32::<4>(acc[i][1]));
                    if F == Q5_0 {
                        isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(16 * *xsum[i].add(b)));
                    }
                    let p = _mm256_mul_ps(dw, _mm256_set1_ps(*dx[i].add(b)));
                    y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), p, y[i]);
                    if F == Q5_1 {
                        y[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(*sx[i].add(b)), y[i]);
                    }
                }
            }
            for i in 0..W {
                _mm256_storeu_ps(out[i].add(8 * h), y[i]);
            }
        }
    }
}
