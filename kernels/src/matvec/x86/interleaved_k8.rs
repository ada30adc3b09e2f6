//! x86_64 kernels for the row-interleaved K-quants ([`crate::matvec::r16::k`])
//! against 8-bit activations ([`crate::act8`]): the specification of
//! [`crate::matvec::scalar8`], lane by lane, one output per 32-bit lane.
//!
//! # Data flow (AVX-512 VNNI)
//!
//! The tiles are the 16-bit path's, unchanged (one model serves both
//! precisions). A 64-byte load takes two consecutive chunks `s, s + 1`
//! (sixteen rows' bytes `2s, 2s+1`, then `2s+2, 2s+3`); one `vpermw` with a
//! fixed index interleaves their 16-bit words so that 32-bit lane `j` holds
//! row `j`'s four consecutive bytes `2s .. 2s + 4`. Masked, the low nibbles
//! are four consecutive elements of one sub-block and the high nibbles
//! (a 16-bit shift right by 4, masked) of the next one: unsigned bytes, and
//! one `vpdpbusd` against the four matching activation quants (a broadcast
//! dword, `{1to16}` in the instruction) adds their four products to each
//! of the sixteen rows' sums. The permute and masks are paid once per 64
//! bytes of weights for all activation rows; each activation row pays one
//! `vpdpbusd` per 64 products (the 16-bit path: one `vpdpwssd` per 32).
//!
//! - Q5_K: the `qh` chunk pair is permuted the same way and bit `2k`
//!   (`2k + 1`) of each byte is shifted to bit 4 and OR-ed in (one
//!   `vpternlogd`). A 16-bit shift by at most 4 moves a bit across the
//!   byte boundary only into bits the 0x10 mask drops.
//! - Q6_K: `ql` and `qh` pairs are permuted; the top two bits are shifted to
//!   bits 4–5 (mask 0x30) and selected in beside the nibble, giving the
//!   unsigned quant `q + 32` (0..63); `Σ_k sc_k · 32 · bsum16_k` is
//!   subtracted once per super-block (`vpdpwssd` of the scale pairs against
//!   the activation's `bsum16` pairs), which is exact ([`crate::matvec::scalar8`]).
//!
//! Per sub-block the sums are multiplied by the scales as integers
//! (`vpmulld`) into one `S` per activation row, and Q4_K / Q5_K's mins
//! meet the activation's `bsum32` pairs in a `vpdpwssd` per sub-block pair;
//! per super-block one conversion and one FMA (two for the mins) advance
//! sixteen outputs.
//!
//! # AVX2
//!
//! Eight rows per register (a group in two halves): the two chunks' 16-byte
//! halves are interleaved with `vpunpck{l,h}wd` instead of `vpermw`, and
//! `vpmaddubsw` + `vpmaddwd` (by ones) stand in for `vpdpbusd`.
//! `vpmaddubsw` saturates its pair sums to `i16`, which these operands never
//! reach: an unsigned weight of at most 63 (6 bits) times an activation
//! quant of magnitude at most 127 (never −128), two of them, is at most
//! 2·63·127 = 16,002 < 32,767. The scale and min products use `vpmulld` and
//! `vpmaddwd` as on AVX-512.
//!
//! The tiles are asked for ahead as the 16-bit kernels ask them
//! ([`super::interleaved_k`]'s docs, `prefetch_ahead`).

// Register-blocked loops index parallel arrays (activation rows ×
// accumulators) with the same counter.
#![allow(clippy::needless_range_loop)]

use super::interleaved_k::{
    Q4K, Q5K, Q6K, Q6K_LOW_BLOCK, fmt_of, plane, prefetch_ahead, scale_min_bytes, shift256, shift512,
};
use super::shared::{Outs, Pass, dpwssd_bcast};
use crate::dispatch::{FamilyKind, KernelFamily};
use crate::matvec::Input;
use crate::matvec::r16::k::KFormat;
use crate::quant::QK_K;
use std::arch::x86_64::*;

/// Activation rows one 8-bit pass keeps in registers: per row two sub-block
/// accumulators (four at `W = 1`), `S`, the min sum and the output vector;
/// wider chunks of a call run as passes of at most this many (the group's
/// tiles are still in L1 for the second pass).
const MAX_W8: usize = 4;

/// Runs the 8-bit pass for (family, format, width): widths above
/// [`MAX_W8`] as two passes.
///
/// # Safety
/// As [`group8_avx512`] / [`group8_avx2`]; `o[..w]` each have sixteen
/// writable floats; every input carries its 8-bit row.
pub(super) unsafe fn run_pass(family: KernelFamily, fmt: KFormat, w: usize, pass: Pass) {
    if w > MAX_W8 {
        let (a, b) = pass.xs.split_at(MAX_W8);
        let mut o2 = [std::ptr::null_mut::<f32>(); 8];
        o2[..w - MAX_W8].copy_from_slice(&pass.o[MAX_W8..w]);
        // SAFETY: forwarded, each half with its own outputs.
        unsafe {
            run_pass(family, fmt, MAX_W8, Pass { xs: a, ..pass });
            run_pass(family, fmt, w - MAX_W8, Pass { xs: b, o: &o2, ..pass });
        }
        return;
    }
    let Pass { tiles, nb: nsb, end, xs, o } = pass;
    macro_rules! widths {
        ($kern:ident, $f:expr) => {
            match w {
                // SAFETY: forwarded from the caller; `xs.len() == w`.
                1 => unsafe { $kern::<$f, 1>(tiles, nsb, end, xs, [o[0]]) },
                2 => unsafe { $kern::<$f, 2>(tiles, nsb, end, xs, [o[0], o[1]]) },
                3 => unsafe { $kern::<$f, 3>(tiles, nsb, end, xs, [o[0], o[1], o[2]]) },
                4 => unsafe { $kern::<$f, 4>(tiles, nsb, end, xs, [o[0], o[1], o[2], o[3]]) },
                _ => unreachable!("width {w} above MAX_W8"),
            }
        };
    }
    macro_rules! formats {
        ($kern:ident) => {
            match fmt {
                KFormat::Q4K => widths!($kern, Q4K),
                KFormat::Q5K => widths!($kern, Q5K),
                KFormat::Q6K => widths!($kern, Q6K),
            }
        };
    }
    match family.kind() {
        FamilyKind::Avx2 => formats!(group8_avx2),
        FamilyKind::Avx512Vnni => formats!(group8_avx512),
        FamilyKind::Scalar => unreachable!("scalar has no SIMD pass"),
    }
}

/// `vpdpbusd acc, w, [x + OFF]{1to16}`: every 32-bit lane of `acc` gains
/// `Σ_t w[4j + t] · x[OFF + t]` (unsigned weight bytes, signed activation
/// bytes; exact, no saturation).
///
/// # Safety
/// AVX-512 VNNI; four bytes at `x + OFF` are readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dpb_at<const OFF: usize>(mut acc: __m512i, w: __m512i, x: *const i8) -> __m512i {
    // SAFETY: the caller guarantees the four bytes at x + OFF.
    unsafe {
        std::arch::asm!(
            "vpdpbusd {acc}, {w}, dword ptr [{x} + {off}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            x = in(reg) x,
            off = const OFF,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// The `vpermw` index that makes lane `j` of a two-chunk load row `j`'s
/// four bytes: word `2j` from chunk `s` (word `j`), word `2j + 1` from
/// chunk `s + 1` (word `16 + j`).
#[repr(C, align(64))]
struct Idx([i16; 32]);
static PAIR_WORDS: Idx = Idx({
    let mut v = [0i16; 32];
    let mut j = 0;
    while j < 16 {
        v[2 * j] = j as i16;
        v[2 * j + 1] = 16 + j as i16;
        j += 1;
    }
    v
});

/// Expands `$body` once per listed index, each bound to the constant `$s`.
macro_rules! unroll {
    ($s:ident in [$($v:literal),*] $body:block) => {
        $( { const $s: usize = $v; $body } )*
    };
}

/// The 8-bit views' raw pointers: quants, super-block scales, `bsum16`,
/// `bsum32`.
type Acts8<const W: usize> = ([*const i8; W], [*const f32; W], [*const i16; W], [*const i16; W]);

#[inline(always)]
fn act8_ptrs<const W: usize>(xs: &[Input]) -> Acts8<W> {
    (
        std::array::from_fn(|i| xs[i].q8.qs.as_ptr()),
        std::array::from_fn(|i| xs[i].q8.d.as_ptr()),
        std::array::from_fn(|i| xs[i].q8.bsum16.as_ptr()),
        std::array::from_fn(|i| xs[i].q8.bsum32.as_ptr()),
    )
}

/// Sixteen outputs (one group) × `W` activation rows at 8 bits, AVX-512 VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, FMA, F16C; `tiles` points at `nsb` tiles of format
/// `F`, `end` at most one past the call's last tile; every input's 8-bit
/// row has `nsb` super-blocks; each `out[i]` has sixteen writable floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn group8_avx512<const F: u8, const W: usize>(
    tiles: *const u8,
    nsb: usize,
    end: *const u8,
    xs: &[Input],
    out: Outs<W>,
) {
    let fmt = fmt_of(F);
    let (tb, qo, ho, so) = (fmt.tile_bytes(), fmt.qs_offset(), fmt.qh_offset(), fmt.scales_offset());
    // Two independent accumulator chains per sub-block at W = 1.
    let sets = if W == 1 { 2 } else { 1 };
    let (xq, dx, b16, b32) = act8_ptrs::<W>(xs);
    // SAFETY (whole body): tile sb < nsb lies at tiles + sb*tb and every
    // read below is inside it (offsets from the layout; a 64-byte load
    // covers two 32-byte chunks of one field); activation quant e of
    // super-block sb < nsb lies at 256·sb + e, its scale at sb, its sums at
    // 16·sb + k and 8·sb + j; the out pointers are the caller's.
    unsafe {
        let idx = _mm512_load_si512(PAIR_WORDS.0.as_ptr().cast());
        let load2 = |p: *const u8| _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(p.cast()));
        let (c0f, c10, c30) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10), _mm512_set1_epi8(0x30));
        let mut y = [_mm512_setzero_ps(); W];
        for sb in 0..nsb {
            let t = tiles.add(sb * tb);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(t.cast()));
            let mut s = [_mm512_setzero_si512(); W];
            if F == Q6K {
                for c in 0..4 {
                    let a = Q6K_LOW_BLOCK[c];
                    // Bit pair of the low block: 0–1 (even c) or 2–3 (odd c).
                    let p = if c % 2 == 0 { 0 } else { 2 };
                    for half in 0..2 {
                        prefetch_ahead(t, tb, end, 2 * c + half, 8);
                        let mut acc = [[[_mm512_setzero_si512(); 2]; 2]; W];
                        let xl: [*const i8; W] = std::array::from_fn(|i| xq[i].add(QK_K * sb + 32 * a + 16 * half));
                        macro_rules! chunk {
                            ($S:ident) => {
                                let ql = load2(t.add(qo + 32 * (16 * c + 8 * half + 2 * $S)));
                                let qh = load2(t.add(ho + 32 * (16 * (c / 2) + 8 * half + 2 * $S)));
                                let top_lo = _mm512_and_si512(shift512(qh, 4 - p), c30);
                                let top_hi = _mm512_and_si512(shift512(qh, -p), c30);
                                // Bit by bit: the nibble where 0x0F is set, the top bits elsewhere.
                                let lo = _mm512_ternarylogic_epi32::<0xCA>(c0f, ql, top_lo);
                                let hi = _mm512_ternarylogic_epi32::<0xCA>(c0f, _mm512_srli_epi16(ql, 4), top_hi);
                                let set = $S % sets;
                                for i in 0..W {
                                    acc[i][0][set] = dpb_at::<{ 4 * $S }>(acc[i][0][set], lo, xl[i]);
                                    acc[i][1][set] = dpb_at::<{ 64 + 4 * $S }>(acc[i][1][set], hi, xl[i]);
                                }
                            };
                        }
                        unroll!(S in [0, 1, 2, 3] { chunk!(S); });
                        let sc = |k: usize| _mm512_cvtepi8_epi32(plane(t.add(so + 16 * k)));
                        let (sc_lo, sc_hi) = (sc(2 * a + half), sc(2 * (a + 2) + half));
                        for i in 0..W {
                            let lo = _mm512_add_epi32(acc[i][0][0], acc[i][0][1]);
                            let hi = _mm512_add_epi32(acc[i][1][0], acc[i][1][1]);
                            s[i] = _mm512_add_epi32(s[i], _mm512_mullo_epi32(sc_lo, lo));
                            s[i] = _mm512_add_epi32(s[i], _mm512_mullo_epi32(sc_hi, hi));
                        }
                    }
                }
                // − 32 · Σ_k sc_k · bsum16_k, by pairs of sub-blocks.
                let mut corr = [_mm512_setzero_si512(); W];
                for m in 0..8 {
                    let (p0, p1) = (plane(t.add(so + 16 * (2 * m))), plane(t.add(so + 16 * (2 * m + 1))));
                    let pairs =
                        _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(p0, p1), _mm_unpacklo_epi8(p0, p1)));
                    for i in 0..W {
                        corr[i] = dpwssd_bcast(corr[i], pairs, b16[i].add(16 * sb + 2 * m));
                    }
                }
                for i in 0..W {
                    let si = _mm512_sub_epi32(s[i], _mm512_slli_epi32(corr[i], 5));
                    let p = _mm512_mul_ps(d, _mm512_set1_ps(*dx[i].add(sb)));
                    y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), p, y[i]);
                }
            } else {
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(t.add(KFormat::DMIN).cast()));
                let mut mins = [_mm512_setzero_si512(); W];
                for k in 0..4 {
                    prefetch_ahead(t, tb, end, k, 4);
                    let mut acc = [[[_mm512_setzero_si512(); 2]; 2]; W];
                    // Sub-blocks 2k and 2k + 1: elements 64k .. 64k + 64.
                    let xp: [*const i8; W] = std::array::from_fn(|i| xq[i].add(QK_K * sb + 64 * k));
                    macro_rules! chunk {
                        ($S:ident) => {
                            let raw = load2(t.add(qo + 32 * (16 * k + 2 * $S)));
                            let mut lo = _mm512_and_si512(raw, c0f);
                            let mut hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), c0f);
                            if F == Q5K {
                                // Bit 2k of qh to bit 4 of the low quants, bit 2k + 1 of the high.
                                let v = load2(t.add(ho + 32 * (2 * $S)));
                                lo = _mm512_ternarylogic_epi32::<0xF8>(lo, shift512(v, 4 - 2 * k as i32), c10);
                                hi = _mm512_ternarylogic_epi32::<0xF8>(hi, shift512(v, 3 - 2 * k as i32), c10);
                            }
                            let set = $S % sets;
                            for i in 0..W {
                                acc[i][0][set] = dpb_at::<{ 4 * $S }>(acc[i][0][set], lo, xp[i]);
                                acc[i][1][set] = dpb_at::<{ 32 + 4 * $S }>(acc[i][1][set], hi, xp[i]);
                            }
                        };
                    }
                    unroll!(S in [0, 1, 2, 3, 4, 5, 6, 7] { chunk!(S); });
                    let (sc_lo, m_lo) = scale_min_bytes(t.add(so), 2 * k);
                    let (sc_hi, m_hi) = scale_min_bytes(t.add(so), 2 * k + 1);
                    let (sc_lo, sc_hi) = (_mm512_cvtepu8_epi32(sc_lo), _mm512_cvtepu8_epi32(sc_hi));
                    let m_pairs = _mm512_cvtepu8_epi16(_mm256_set_m128i(
                        _mm_unpackhi_epi8(m_lo, m_hi),
                        _mm_unpacklo_epi8(m_lo, m_hi),
                    ));
                    for i in 0..W {
                        let lo = _mm512_add_epi32(acc[i][0][0], acc[i][0][1]);
                        let hi = _mm512_add_epi32(acc[i][1][0], acc[i][1][1]);
                        s[i] = _mm512_add_epi32(s[i], _mm512_mullo_epi32(sc_lo, lo));
                        s[i] = _mm512_add_epi32(s[i], _mm512_mullo_epi32(sc_hi, hi));
                        mins[i] = dpwssd_bcast(mins[i], m_pairs, b32[i].add(8 * sb + 2 * k));
                    }
                }
                for i in 0..W {
                    let x_d = _mm512_set1_ps(*dx[i].add(sb));
                    y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(d, x_d), y[i]);
                    y[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[i]), _mm512_mul_ps(dmin, x_d), y[i]);
                }
            }
        }
        for i in 0..W {
            _mm512_storeu_ps(out[i], y[i]);
        }
    }
}

/// Sixteen outputs (one group, in two halves of eight rows) × `W`
/// activation rows at 8 bits, AVX2.
///
/// # Safety
/// AVX2, FMA, F16C; otherwise as [`group8_avx512`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group8_avx2<const F: u8, const W: usize>(
    tiles: *const u8,
    nsb: usize,
    end: *const u8,
    xs: &[Input],
    out: Outs<W>,
) {
    let fmt = fmt_of(F);
    let (tb, qo, ho, so) = (fmt.tile_bytes(), fmt.qs_offset(), fmt.qh_offset(), fmt.scales_offset());
    let (xq, dx, b16, b32) = act8_ptrs::<W>(xs);
    // SAFETY (whole body): as in `group8_avx512`; half h reads bytes
    // 16h..16h+16 of every 32-byte chunk and bytes 8h..8h+8 of every plane.
    unsafe {
        let quad = |x: *const i8| _mm256_set1_epi32(x.cast::<i32>().read_unaligned());
        let pair16 = |x: *const i16| _mm256_set1_epi32(x.cast::<i32>().read_unaligned());
        let ones = _mm256_set1_epi16(1);
        // Exact: the pair sums of vpmaddubsw stay below 2^15 (module docs).
        let dot4 = |w: __m256i, x: *const i8| _mm256_madd_epi16(_mm256_maddubs_epi16(w, quad(x)), ones);
        let (c0f, c10, c30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10), _mm256_set1_epi8(0x30));
        for h in 0..2 {
            // Half h's rows of chunks s, s + 1 at p, lane j = row 8h + j's four bytes.
            let load2 = |p: *const u8| {
                let a = _mm_loadu_si128(p.add(16 * h).cast());
                let b = _mm_loadu_si128(p.add(32 + 16 * h).cast());
                _mm256_set_m128i(_mm_unpackhi_epi16(a, b), _mm_unpacklo_epi16(a, b))
            };
            // This half's eight rows of a 16-byte plane value.
            let half8 = |v: __m128i| if h == 0 { v } else { _mm_srli_si128(v, 8) };
            let mut y = [_mm256_setzero_ps(); W];
            for sb in 0..nsb {
                let t = tiles.add(sb * tb);
                let d = _mm256_cvtph_ps(_mm_loadu_si128(t.add(16 * h).cast()));
                let mut s = [_mm256_setzero_si256(); W];
                if F == Q6K {
                    for c in 0..4 {
                        let a = Q6K_LOW_BLOCK[c];
                        let p = if c % 2 == 0 { 0 } else { 2 };
                        for half in 0..2 {
                            if h == 0 {
                                prefetch_ahead(t, tb, end, 2 * c + half, 8);
                            }
                            let mut acc = [[_mm256_setzero_si256(); 2]; W];
                            let xl: [*const i8; W] = std::array::from_fn(|i| xq[i].add(QK_K * sb + 32 * a + 16 * half));
                            for s4 in 0..4 {
                                let ql = load2(t.add(qo + 32 * (16 * c + 8 * half + 2 * s4)));
                                let qh = load2(t.add(ho + 32 * (16 * (c / 2) + 8 * half + 2 * s4)));
                                let top_lo = _mm256_and_si256(shift256(qh, 4 - p), c30);
                                let top_hi = _mm256_and_si256(shift256(qh, -p), c30);
                                let lo = _mm256_or_si256(_mm256_and_si256(ql, c0f), top_lo);
                                let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), c0f), top_hi);
                                for i in 0..W {
                                    acc[i][0] = _mm256_add_epi32(acc[i][0], dot4(lo, xl[i].add(4 * s4)));
                                    acc[i][1] = _mm256_add_epi32(acc[i][1], dot4(hi, xl[i].add(64 + 4 * s4)));
                                }
                            }
                            let sc = |k: usize| _mm256_cvtepi8_epi32(half8(plane(t.add(so + 16 * k))));
                            let (sc_lo, sc_hi) = (sc(2 * a + half), sc(2 * (a + 2) + half));
                            for i in 0..W {
                                s[i] = _mm256_add_epi32(s[i], _mm256_mullo_epi32(sc_lo, acc[i][0]));
                                s[i] = _mm256_add_epi32(s[i], _mm256_mullo_epi32(sc_hi, acc[i][1]));
                            }
                        }
                    }
                    let mut corr = [_mm256_setzero_si256(); W];
                    for m in 0..8 {
                        let (p0, p1) = (plane(t.add(so + 16 * (2 * m))), plane(t.add(so + 16 * (2 * m + 1))));
                        let inter = if h == 0 { _mm_unpacklo_epi8(p0, p1) } else { _mm_unpackhi_epi8(p0, p1) };
                        let pairs = _mm256_cvtepi8_epi16(inter);
                        for i in 0..W {
                            corr[i] = _mm256_add_epi32(
                                corr[i],
                                _mm256_madd_epi16(pairs, pair16(b16[i].add(16 * sb + 2 * m))),
                            );
                        }
                    }
                    for i in 0..W {
                        let si = _mm256_sub_epi32(s[i], _mm256_slli_epi32(corr[i], 5));
                        let p = _mm256_mul_ps(d, _mm256_set1_ps(*dx[i].add(sb)));
                        y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), p, y[i]);
                    }
                } else {
                    let dmin = _mm256_cvtph_ps(_mm_loadu_si128(t.add(KFormat::DMIN + 16 * h).cast()));
                    let mut mins = [_mm256_setzero_si256(); W];
                    for k in 0..4 {
                        if h == 0 {
                            prefetch_ahead(t, tb, end, k, 4);
                        }
                        let mut acc = [[_mm256_setzero_si256(); 2]; W];
                        let xp: [*const i8; W] = std::array::from_fn(|i| xq[i].add(QK_K * sb + 64 * k));
                        for s8 in 0..8 {
                            let raw = load2(t.add(qo + 32 * (16 * k + 2 * s8)));
                            let mut lo = _mm256_and_si256(raw, c0f);
                            let mut hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), c0f);
                            if F == Q5K {
                                let v = load2(t.add(ho + 32 * (2 * s8)));
                                lo = _mm256_or_si256(lo, _mm256_and_si256(shift256(v, 4 - 2 * k as i32), c10));
                                hi = _mm256_or_si256(hi, _mm256_and_si256(shift256(v, 3 - 2 * k as i32), c10));
                            }
                            for i in 0..W {
                                acc[i][0] = _mm256_add_epi32(acc[i][0], dot4(lo, xp[i].add(4 * s8)));
                                acc[i][1] = _mm256_add_epi32(acc[i][1], dot4(hi, xp[i].add(32 + 4 * s8)));
                            }
                        }
                        let (sc_lo, m_lo) = scale_min_bytes(t.add(so), 2 * k);
                        let (sc_hi, m_hi) = scale_min_bytes(t.add(so), 2 * k + 1);
                        let (sc_lo, sc_hi) = (_mm256_cvtepu8_epi32(half8(sc_lo)), _mm256_cvtepu8_epi32(half8(sc_hi)));
                        let inter = if h == 0 { _mm_unpacklo_epi8(m_lo, m_hi) } else { _mm_unpackhi_epi8(m_lo, m_hi) };
                        let m_pairs = _mm256_cvtepu8_epi16(inter);
                        for i in 0..W {
                            s[i] = _mm256_add_epi32(s[i], _mm256_mullo_epi32(sc_lo, acc[i][0]));
                            s[i] = _mm256_add_epi32(s[i], _mm256_mullo_epi32(sc_hi, acc[i][1]));
                            let mp = _mm256_madd_epi16(m_pairs, pair16(b32[i].add(8 * sb + 2 * k)));
                            mins[i] = _mm256_add_epi32(mins[i], mp);
                        }
                    }
                    for i in 0..W {
                        let x_d = _mm256_set1_ps(*dx[i].add(sb));
                        y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(d, x_d), y[i]);
                        y[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins[i]), _mm256_mul_ps(dmin, x_d), y[i]);
                    }
                }
            }
            for i in 0..W {
                _mm256_storeu_ps(out[i].add(8 * h), y[i]);
            }
        }
    }
}
