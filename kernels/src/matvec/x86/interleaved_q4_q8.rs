//! x86_64 kernels for the row-interleaved layout ([`crate::matvec::r16`])
//! of Q4_0, Q4_1 and Q8_0: AVX-512 VNNI (one `zmm` = sixteen rows,
//! `vpdpwssd` against a broadcast pair of activation quants) and AVX2 (one
//! `ymm` = eight rows, `vpmaddwd` + `vpaddd`, a group in two halves). The
//! group driver (chunks of activation rows, groups cut by the row range,
//! GGUF-layout matrices repacked on the way) is the dispatcher's
//! ([`super`]); the passes live here.
//!
//! Per tile (sixteen rows × one block) and activation row: the block's
//! integer sums of all sixteen rows accumulate in one register (split over
//! two to four registers for independent dependency chains, summed exactly
//! afterwards), then one conversion, one scale product and one FMA (two for
//! Q4_1) apply the block to the sixteen outputs: the serial chain of
//! [`crate::matvec::scalar`], lane by lane. Widened weights are shared by
//! all the activation rows of a pass.
//!
//! Nibble formats take the high nibbles as `byte & 0xF0`, i.e. sixteen
//! times the quant: their products accumulate in registers of their own,
//! whose exact sum is divided by 16 with an arithmetic shift at the end of
//! the block (every term is a multiple of 16, so the shift is exact). That
//! saves a shift per chunk, which on Intel cores would share port 0 with the
//! `vpdpwssd`s, at the cost of twice the accumulators; passes of more than
//! four rows, short of registers, shift the weights instead.

// Register-blocked loops index parallel arrays (activation rows ×
// accumulators) with the same counter.
#![allow(clippy::needless_range_loop)]

use super::shared::{
    Outs, PREFETCH_FROM_ROWS_256, PREFETCH_FROM_ROWS_512, Pass, act_ptrs, dpwssd_bcast, prefetch_past, x_offset,
};
use crate::dispatch::{FamilyKind, KernelFamily};
use crate::matvec::Input;
use crate::matvec::r16::{GROUP, R16Format};
use std::arch::x86_64::*;

/// Format tags of the const-generic kernels.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;

const fn fmt_of(f: u8) -> R16Format {
    match f {
        Q4_0 => R16Format::Q4_0,
        Q4_1 => R16Format::Q4_1,
        _ => R16Format::Q8_0,
    }
}

/// Picks the const-generic instance for (family, format, width).
///
/// # Safety
/// As [`group_avx2`] / [`group_avx512`]; `fmt` is Q4_0, Q4_1 or Q8_0.
pub(super) unsafe fn run_pass(family: KernelFamily, fmt: R16Format, w: usize, pass: Pass) {
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
            match fmt {
                R16Format::Q4_0 => widths!($kern, Q4_0, $ws),
                R16Format::Q4_1 => widths!($kern, Q4_1, $ws),
                R16Format::Q8_0 => widths!($kern, Q8_0, $ws),
                R16Format::Q5_0 | R16Format::Q5_1 | R16Format::K(_) => unreachable!("not a Q4 or Q8 format"),
            }
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
    let (tb, qo) = (fmt.tile_bytes(), fmt.qs_offset());
    // Independent accumulator sets per activation row: a `vpdpwssd` has a
    // latency of several cycles and one issues per cycle, so a single row
    // needs several chains.
    let sets = if W == 1 { 2 } else { 1 };
    // Nibble formats: high nibbles as 16·q in their own accumulators (four
    // rows or fewer), or shifted down into the same ones (wider passes).
    let split = F != Q8_0 && W <= 4;
    let (xq, dx, sx) = act_ptrs::<W>(xs);
    // SAFETY (whole body): tiles b < nb lie at tiles + b*tb; the activation
    // quants of block b < nb lie at the offsets x_offset(b, e < 32), and its
    // scales at index b; out pointers are the caller's.
    unsafe {
        let mut y = [_mm512_setzero_ps(); W];
        for b in 0..nb {
            let t = tiles.add(b * tb);
            if W >= PREFETCH_FROM_ROWS_512 {
                prefetch_past(t, tb, end);
            }
            let mut acc = [[_mm512_setzero_si512(); 4]; W];
            if F == Q8_0 {
                // Four chunks per step, so that every accumulator index is
                // a constant once the inner loops unroll: with `s % chains`
                // over the sixteen chunks the loop stayed rolled at W >= 2
                // and kept its accumulators on the stack (a W = 2 pass cost
                // 3-4x a W = 1 pass). Integer sums are exact, so the chain
                // a product lands in does not change the result.
                let chains = 2 * sets;
                for s4 in 0..4 {
                    let w16: [__m512i; 4] = std::array::from_fn(|k| {
                        _mm512_cvtepi8_epi16(_mm256_loadu_si256(t.add(qo + 32 * (4 * s4 + k)).cast()))
                    });
                    for k in 0..4 {
                        let c = k % chains;
                        for i in 0..W {
                            acc[i][c] = dpwssd_bcast(acc[i][c], w16[k], xq[i].add(x_offset(b, 2 * (4 * s4 + k))));
                        }
                    }
                }
            } else {
                for s in 0..8 {
                    let raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256(t.add(qo + 32 * s).cast()));
                    let mut lo = _mm512_and_si512(raw, _mm512_set1_epi16(0x0F));
                    let mut hi =
                        if split { _mm512_and_si512(raw, _mm512_set1_epi16(0xF0)) } else { _mm512_srli_epi16(raw, 4) };
                    if F == Q4_0 {
                        lo = _mm512_sub_epi16(lo, _mm512_set1_epi16(8));
                        hi = _mm512_sub_epi16(hi, _mm512_set1_epi16(if split { 128 } else { 8 }));
                    }
                    let c = 2 * (s % sets);
                    let ch = if split { c + 1 } else { c };
                    for i in 0..W {
                        acc[i][c] = dpwssd_bcast(acc[i][c], lo, xq[i].add(x_offset(b, 2 * s)));
                        acc[i][ch] = dpwssd_bcast(acc[i][ch], hi, xq[i].add(x_offset(b, 16 + 2 * s)));
                    }
                }
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(t.cast()));
            let mw = if F == Q4_1 { _mm512_cvtph_ps(_mm256_loadu_si256(t.add(2 * GROUP).cast())) } else { dw };
            for i in 0..W {
                let a = acc[i];
                let isum = if split {
                    let hi16 = _mm512_add_epi32(a[1], a[3]);
                    _mm512_add_epi32(_mm512_add_epi32(a[0], a[2]), _mm512_srai_epi32(hi16, 4))
                } else {
                    _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]))
                };
                let p = _mm512_mul_ps(dw, _mm512_set1_ps(*dx[i].add(b)));
                y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), p, y[i]);
                if F == Q4_1 {
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
    let (tb, qo) = (fmt.tile_bytes(), fmt.qs_offset());
    let (xq, dx, sx) = act_ptrs::<W>(xs);
    let pair = |x: *const i16| -> __m256i {
        // SAFETY: the callers pass in-bounds element offsets (two i16).
        _mm256_set1_epi32(unsafe { x.cast::<i32>().read_unaligned() })
    };
    // SAFETY (whole body): as in `group_avx512`; half h reads bytes
    // 16h..16h+16 of every 32-byte chunk and scales 8h..8h+8.
    unsafe {
        for h in 0..2 {
            let mut y = [_mm256_setzero_ps(); W];
            for b in 0..nb {
                let t = tiles.add(b * tb);
                if h == 0 && W >= PREFETCH_FROM_ROWS_256 {
                    prefetch_past(t, tb, end);
                }
                let mut acc = [[_mm256_setzero_si256(); 2]; W];
                if F == Q8_0 {
                    // Two chunks per step: constant accumulator indices (see
                    // `group_avx512`).
                    for s2 in 0..8 {
                        for k in 0..2 {
                            let s = 2 * s2 + k;
                            let w16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(t.add(qo + 32 * s + 16 * h).cast()));
                            for i in 0..W {
                                let v = _mm256_madd_epi16(w16, pair(xq[i].add(x_offset(b, 2 * s))));
                                acc[i][k] = _mm256_add_epi32(acc[i][k], v);
                            }
                        }
                    }
                } else {
                    for s in 0..8 {
                        let raw = _mm256_cvtepu8_epi16(_mm_loadu_si128(t.add(qo + 32 * s + 16 * h).cast()));
                        let mut lo = _mm256_and_si256(raw, _mm256_set1_epi16(0x0F));
                        let mut hi = _mm256_and_si256(raw, _mm256_set1_epi16(0xF0));
                        if F == Q4_0 {
                            lo = _mm256_sub_epi16(lo, _mm256_set1_epi16(8));
                            hi = _mm256_sub_epi16(hi, _mm256_set1_epi16(128));
                        }
                        for i in 0..W {
                            let vl = _mm256_madd_epi16(lo, pair(xq[i].add(x_offset(b, 2 * s))));
                            let vh = _mm256_madd_epi16(hi, pair(xq[i].add(x_offset(b, 16 + 2 * s))));
                            acc[i][0] = _mm256_add_epi32(acc[i][0], vl);
                            acc[i][1] = _mm256_add_epi32(acc[i][1], vh);
                        }
                    }
                }
                let dw = _mm256_cvtph_ps(_mm_loadu_si128(t.add(16 * h).cast()));
                let mw =
                    if F == Q4_1 { _mm256_cvtph_ps(_mm_loadu_si128(t.add(2 * GROUP + 16 * h).cast())) } else { dw };
                for i in 0..W {
                    let isum = if F == Q8_0 {
                        _mm256_add_epi32(acc[i][0], acc[i][1])
                    } else {
                        _mm256_add_epi32(acc[i][0], _mm256_srai_epi32(acc[i][1], 4))
                    };
                    let p = _mm256_mul_ps(dw, _mm256_set1_ps(*dx[i].add(b)));
                    y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), p, y[i]);
                    if F == Q4_1 {
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
