//! x86_64 kernels for the row-interleaved K-quants ([`crate::matvec::r16::k`]):
//! AVX-512 VNNI (one `zmm` = sixteen rows, `vpdpwssd` against a broadcast
//! pair of activation quants) and AVX2 (one `ymm` = eight rows, a group in
//! two halves), as [`super::interleaved_q4_q8`] does for Q4_0 / Q4_1 / Q8_0.
//!
//! A chunk's low nibbles are one sub-block's elements and its high nibbles
//! another's (the layout's docs), so every activation row keeps two integer
//! accumulators: `lo` for the low nibbles and `hi` for the high ones, taken
//! as `byte & 0xF0` (sixteen times the quant, divided out with an exact
//! arithmetic shift at the end of the sub-block). Per sub-block and
//! activation row the float work is one conversion, one scale product and
//! one FMA (a second for Q4_K / Q5_K's min) for sixteen outputs: the serial
//! chain of [`crate::matvec::scalar`], lane by lane.
//!
//! Weight bits are assembled once per chunk for all activation rows:
//! - Q5_K: the fifth bits of a `qh` chunk (bit `i` for sub-block `i`) are
//!   shifted to bit 4 (low nibble) or bit 8 (high nibble, ×16) and merged
//!   with one `vpternlogd` per register;
//! - Q6_K: the `qh` chunk's bit pairs of the two blocks at hand are masked
//!   and shifted to bits 4–5 / 8–9, then one `vpternlogd` per register takes
//!   each bit from the nibbles or from them (AVX2: two masks and an OR), and
//!   32 (or 512 for the ×16 register) is subtracted.
//!
//! The sub-block scales come from the tile's planes: sixteen rows' bytes
//! widened to one 32-bit lane each, converted and multiplied by `d` (exact).
//!
//! Each tile asks for the tile [`AHEAD_TILES`] = 3 on (the same group's
//! later super-blocks, then the next group's) into L2, a part of its lines
//! at each sub-block pair (Q6_K: each quarter half), so the requests come
//! spread over the work ([`prefetch_ahead`]); the AVX2 kernels ask in their
//! first half only (the second finds the group in L2). This replaced "the
//! next tile, every line at once, into L2" on 2026-12-07: on the Zen 4
//! host a one-row pass over a 1.5B's K-quant matrices then streamed
//! 14.5 GB/s (8-bit activations; AVX2 7.1) of a 25–29 GB/s plain read, the
//! multiplies and the reads mostly serial; spread, 3 tiles ahead, 21.9
//! (AVX2 15.3); `prefetcht1` and `prefetcht2` alike, `prefetcht0` 5–7%
//! slower, 4 to 9 tiles ahead no better (`cargo run --release -p kernels
//! --example int8_stream`, which times both precisions and families;
//! docs/performance.md, "Prefetching the K-quant tiles, spread"). The next
//! tile at once had made the Intel host's decode 8–12% faster than no
//! prefetch (docs/performance.md, "Prefetching the K-quant tiles"); the
//! spread form is not measured there.

// Register-blocked loops index parallel arrays (activation rows ×
// accumulators) with the same counter.
#![allow(clippy::needless_range_loop)]

use super::shared::{Outs, Pass, act_ptrs, x_offset};
use crate::dispatch::{FamilyKind, KernelFamily};
use crate::matvec::Input;
use crate::matvec::r16::k::KFormat;
use std::arch::x86_64::*;

/// Format tags of the const-generic kernels.
pub(super) const Q4K: u8 = 0;
pub(super) const Q5K: u8 = 1;
pub(super) const Q6K: u8 = 2;

pub(super) const fn fmt_of(f: u8) -> KFormat {
    match f {
        Q4K => KFormat::Q4K,
        Q5K => KFormat::Q5K,
        _ => KFormat::Q6K,
    }
}

/// The 32-element block that a Q6_K `ql` quarter's low nibbles belong to
/// (its high nibbles: two blocks on).
pub(super) const Q6K_LOW_BLOCK: [usize; 4] = [0, 1, 4, 5];

/// Picks the const-generic instance for (family, format, width).
///
/// # Safety
/// As [`group_avx512`] / [`group_avx2`]; `o[..w]` each have sixteen
/// writable floats.
pub(super) unsafe fn run_pass(family: KernelFamily, fmt: KFormat, w: usize, pass: Pass) {
    let Pass { tiles, nb: nsb, end, xs, o } = pass;
    macro_rules! widths {
        ($kern:ident, $f:expr, [$($w:literal),*]) => {
            match w {
                // SAFETY: forwarded from the caller; `xs.len() == w`.
                $($w => unsafe { $kern::<$f, $w>(tiles, nsb, end, xs, std::array::from_fn(|i| o[i])) },)*
                _ => unreachable!("width {w} above the family's maximum"),
            }
        };
    }
    macro_rules! formats {
        ($kern:ident, $ws:tt) => {
            match fmt {
                KFormat::Q4K => widths!($kern, Q4K, $ws),
                KFormat::Q5K => widths!($kern, Q5K, $ws),
                KFormat::Q6K => widths!($kern, Q6K, $ws),
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

/// How many tiles ahead of the one being multiplied [`prefetch_ahead`]
/// asks for (module docs).
pub(super) const AHEAD_TILES: usize = 3;

/// Asks for part `part` of `parts` of the lines of the tile
/// [`AHEAD_TILES`] on from `t` (`tb` bytes a tile; the same group's later
/// super-blocks, then the next group's) into L2 (`prefetcht1`), those
/// below `end`. Called once per part as the tile at `t` is worked through,
/// so the requests come spread over the tile rather than in one burst.
#[inline(always)]
pub(super) fn prefetch_ahead(t: *const u8, tb: usize, end: *const u8, part: usize, parts: usize) {
    let base = t.wrapping_add(AHEAD_TILES * tb);
    let lines = tb.div_ceil(64);
    for l in part * lines / parts..(part + 1) * lines / parts {
        let p = base.wrapping_add(64 * l);
        if p >= end {
            return;
        }
        // SAFETY: a prefetch has no architectural effect and cannot fault;
        // the address lies inside the matrix (below `end`).
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast()) };
    }
}

/// `vpdpwssd acc, w, [x + OFF]{1to16}`: every 32-bit lane of `acc` gains
/// `w[2j]·x'[0] + w[2j+1]·x'[1]` for the two `i16` at `OFF` bytes past `x`.
/// The offset is part of the instruction, so the chunks of a sub-block
/// share one address register per activation row (with an address per
/// call, `lea`s and spilled pointers were 40% of the instructions).
///
/// # Safety
/// AVX-512 VNNI; four bytes at `x + OFF` are readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dp_at<const OFF: usize>(mut acc: __m512i, w: __m512i, x: *const i16) -> __m512i {
    // SAFETY: the caller guarantees the four bytes at x + OFF.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, dword ptr [{x} + {off}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            x = in(reg) x,
            off = const OFF,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// Byte offset, from the start of its block in a [`crate::act::QPair`]
/// array ([`x_offset`]`(b, 0)`), of block element `e`'s quant.
const fn pair_bytes(e: usize) -> usize {
    2 * ((e / 16) * 32 + e % 16)
}

/// Expands `$body` once per listed chunk index, each bound to the constant `$s`.
macro_rules! unroll {
    ($s:ident in [$($v:literal),*] $body:block) => {
        $( { const $s: usize = $v; $body } )*
    };
}

/// Sixteen bytes at `p` (sixteen rows' values of one scale plane).
///
/// # Safety
/// Sixteen bytes at `p` are readable.
#[inline(always)]
pub(super) unsafe fn plane(p: *const u8) -> __m128i {
    // SAFETY: forwarded from the caller.
    unsafe { _mm_loadu_si128(p.cast()) }
}

/// Sub-block `j`'s 6-bit scales and mins of sixteen rows, as bytes, from a
/// Q4_K / Q5_K tile's twelve planes at `p` (`get_scale_min_k4`, a row per
/// byte; 16-bit shifts move bits across bytes only into bits the masks drop).
///
/// # Safety
/// SSE2; the 192 plane bytes at `p` are readable.
#[inline(always)]
pub(super) unsafe fn scale_min_bytes(p: *const u8, j: usize) -> (__m128i, __m128i) {
    // SAFETY: every plane index is below 12.
    unsafe {
        let at = |k: usize| plane(p.add(16 * k));
        let (low6, nib, top2) = (_mm_set1_epi8(63), _mm_set1_epi8(0x0F), _mm_set1_epi8(3));
        if j < 4 {
            return (_mm_and_si128(at(j), low6), _mm_and_si128(at(j + 4), low6));
        }
        let top = |v: __m128i| _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(v, 6), top2), 4);
        let q = at(j + 4);
        let sc = _mm_or_si128(_mm_and_si128(q, nib), top(at(j - 4)));
        let m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), nib), top(at(j)));
        (sc, m)
    }
}

/// `v` shifted left by `n` bits (right by `-n` when negative), per 16-bit lane.
#[inline(always)]
pub(super) fn shift512(v: __m512i, n: i32) -> __m512i {
    // SAFETY: the callers run with AVX-512 BW enabled (their target features).
    unsafe {
        if n >= 0 { _mm512_sll_epi16(v, _mm_cvtsi32_si128(n)) } else { _mm512_srl_epi16(v, _mm_cvtsi32_si128(-n)) }
    }
}

/// As [`shift512`], on 256 bits.
#[inline(always)]
pub(super) fn shift256(v: __m256i, n: i32) -> __m256i {
    // SAFETY: the callers run with AVX2 enabled (their target features).
    unsafe {
        if n >= 0 { _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)) } else { _mm256_srl_epi16(v, _mm_cvtsi32_si128(-n)) }
    }
}

/// Sixteen outputs (one group) × `W` activation rows, AVX-512 VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, FMA, F16C; `tiles` points at `nsb` tiles of format
/// `F`, `end` at most one past the call's last tile; every input has `8 · nsb` quantized blocks; each `out[i]` has
/// sixteen writable floats.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn group_avx512<const F: u8, const W: usize>(
    tiles: *const u8,
    nsb: usize,
    end: *const u8,
    xs: &[Input],
    out: Outs<W>,
) {
    let fmt = fmt_of(F);
    let (tb, qo, ho, so) = (fmt.tile_bytes(), fmt.qs_offset(), fmt.qh_offset(), fmt.scales_offset());
    // Independent accumulator chains per activation row at W = 1 (a
    // `vpdpwssd` has a latency of several cycles).
    let sets = if W == 1 { 2 } else { 1 };
    let (xq, dx, sx) = act_ptrs::<W>(xs);
    // SAFETY (whole body): tile sb < nsb lies at tiles + sb*tb and every
    // read below is inside it (offsets from the layout); the activation
    // quants of block b < 8·nsb lie at x_offset(b, e < 32) and its scales at
    // index b; the out pointers are the caller's.
    unsafe {
        let mut y = [_mm512_setzero_ps(); W];
        // Sums one register pair's chains: `lo` as is, `hi` divided by 16.
        let isums = |acc: &[[__m512i; 2]; 2]| -> (__m512i, __m512i) {
            let lo = _mm512_add_epi32(acc[0][0], acc[0][1]);
            let hi = _mm512_add_epi32(acc[1][0], acc[1][1]);
            (lo, _mm512_srai_epi32(hi, 4))
        };
        for sb in 0..nsb {
            let t = tiles.add(sb * tb);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(t.cast()));
            if F == Q6K {
                let (c030f, c00f0) = (_mm512_set1_epi16(0x030F), _mm512_set1_epi16(0x00F0));
                for c in 0..4 {
                    let a = Q6K_LOW_BLOCK[c];
                    let (b_lo, b_hi) = (8 * sb + a, 8 * sb + a + 2);
                    let (mask, up) = if c % 2 == 0 { (0x33, 4) } else { (0xCC, 2) };
                    for half in 0..2 {
                        prefetch_ahead(t, tb, end, 2 * c + half, 8);
                        let mut acc = [[[_mm512_setzero_si512(); 2]; 2]; W];
                        let xl: [*const i16; W] = std::array::from_fn(|i| xq[i].add(x_offset(b_lo, 0)));
                        let xh: [*const i16; W] = std::array::from_fn(|i| xq[i].add(x_offset(b_hi, 0)));
                        // Chunk S of the quarter, unrolled: every accumulator
                        // index and activation offset is a constant.
                        macro_rules! chunk {
                            ($S:ident) => {
                                let raw =
                                    _mm512_cvtepu8_epi16(_mm256_loadu_si256(t.add(qo + 32 * (16 * c + $S)).cast()));
                                let v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(
                                    t.add(ho + 32 * (16 * (c / 2) + $S)).cast(),
                                ));
                                let vs = shift512(_mm512_and_si512(v, _mm512_set1_epi16(mask)), up);
                                // Bit by bit: the nibble where the constant is
                                // set, the top bits elsewhere (module docs).
                                let lo = _mm512_ternarylogic_epi32::<0xCA>(c030f, raw, vs);
                                let hi = _mm512_ternarylogic_epi32::<0xCA>(c00f0, raw, vs);
                                let lo = _mm512_sub_epi16(lo, _mm512_set1_epi16(32));
                                let hi = _mm512_sub_epi16(hi, _mm512_set1_epi16(512));
                                let set = $S % sets;
                                for i in 0..W {
                                    acc[i][0][set] = dp_at::<{ pair_bytes(2 * $S % 32) }>(acc[i][0][set], lo, xl[i]);
                                    acc[i][1][set] = dp_at::<{ pair_bytes(2 * $S % 32) }>(acc[i][1][set], hi, xh[i]);
                                }
                            };
                        }
                        if half == 0 {
                            unroll!(S in [0, 1, 2, 3, 4, 5, 6, 7] { chunk!(S); });
                        } else {
                            unroll!(S in [8, 9, 10, 11, 12, 13, 14, 15] { chunk!(S); });
                        }
                        let (k_lo, k_hi) = (2 * a + half, 2 * (a + 2) + half);
                        let sc = |k: usize| _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(plane(t.add(so + 16 * k))));
                        let (p_lo, p_hi) = (_mm512_mul_ps(d, sc(k_lo)), _mm512_mul_ps(d, sc(k_hi)));
                        for i in 0..W {
                            let (lo, hi) = isums(&acc[i]);
                            let s_lo = _mm512_mul_ps(p_lo, _mm512_set1_ps(*dx[i].add(b_lo)));
                            y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), s_lo, y[i]);
                            let s_hi = _mm512_mul_ps(p_hi, _mm512_set1_ps(*dx[i].add(b_hi)));
                            y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), s_hi, y[i]);
                        }
                    }
                }
            } else {
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(t.add(KFormat::DMIN).cast()));
                let (c0f, cf0) = (_mm512_set1_epi16(0x0F), _mm512_set1_epi16(0xF0));
                for k in 0..4 {
                    prefetch_ahead(t, tb, end, k, 4);
                    let (b_lo, b_hi) = (8 * sb + 2 * k, 8 * sb + 2 * k + 1);
                    let mut acc = [[[_mm512_setzero_si512(); 2]; 2]; W];
                    // Sub-blocks 2k and 2k + 1 are one activation pair.
                    let xp: [*const i16; W] = std::array::from_fn(|i| xq[i].add(x_offset(b_lo, 0)));
                    const HI: usize = 2 * 16;
                    // Chunk S of the pair, unrolled: every accumulator
                    // index and activation offset is a constant.
                    macro_rules! chunk {
                        ($S:ident) => {
                            let raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256(t.add(qo + 32 * (16 * k + $S)).cast()));
                            let (lo, hi) = if F == Q5K {
                                // Bit 2k of qh to bit 4, bit 2k + 1 to bit 8.
                                let v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(t.add(ho + 32 * $S).cast()));
                                let v_lo = _mm512_and_si512(shift512(v, 4 - 2 * k as i32), _mm512_set1_epi16(0x10));
                                let v_hi = _mm512_and_si512(shift512(v, 7 - 2 * k as i32), _mm512_set1_epi16(0x100));
                                // (raw & mask) | bits.
                                (
                                    _mm512_ternarylogic_epi32::<0xEA>(raw, c0f, v_lo),
                                    _mm512_ternarylogic_epi32::<0xEA>(raw, cf0, v_hi),
                                )
                            } else {
                                (_mm512_and_si512(raw, c0f), _mm512_and_si512(raw, cf0))
                            };
                            let set = $S % sets;
                            for i in 0..W {
                                acc[i][0][set] = dp_at::<{ pair_bytes(2 * $S) }>(acc[i][0][set], lo, xp[i]);
                                acc[i][1][set] = dp_at::<{ pair_bytes(2 * $S) + HI }>(acc[i][1][set], hi, xp[i]);
                            }
                        };
                    }
                    unroll!(S in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] { chunk!(S); });
                    let factors = |j: usize| {
                        let (sc, m) = scale_min_bytes(t.add(so), j);
                        let f = |v: __m128i| _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
                        (_mm512_mul_ps(d, f(sc)), _mm512_mul_ps(dmin, f(m)))
                    };
                    let ((p_lo, m_lo), (p_hi, m_hi)) = (factors(2 * k), factors(2 * k + 1));
                    for i in 0..W {
                        let (lo, hi) = isums(&acc[i]);
                        let s_lo = _mm512_mul_ps(p_lo, _mm512_set1_ps(*dx[i].add(b_lo)));
                        y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), s_lo, y[i]);
                        y[i] = _mm512_fnmadd_ps(m_lo, _mm512_set1_ps(*sx[i].add(b_lo)), y[i]);
                        let s_hi = _mm512_mul_ps(p_hi, _mm512_set1_ps(*dx[i].add(b_hi)));
                        y[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), s_hi, y[i]);
                        y[i] = _mm512_fnmadd_ps(m_hi, _mm512_set1_ps(*sx[i].add(b_hi)), y[i]);
                    }
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
    nsb: usize,
    end: *const u8,
    xs: &[Input],
    out: Outs<W>,
) {
    let fmt = fmt_of(F);
    let (tb, qo, ho, so) = (fmt.tile_bytes(), fmt.qs_offset(), fmt.qh_offset(), fmt.scales_offset());
    let (xq, dx, sx) = act_ptrs::<W>(xs);
    let pair = |x: *const i16| -> __m256i {
        // SAFETY: the callers pass in-bounds element offsets (two i16).
        _mm256_set1_epi32(unsafe { x.cast::<i32>().read_unaligned() })
    };
    // SAFETY (whole body): as in `group_avx512`; half h reads bytes
    // 16h..16h+16 of every 32-byte chunk and bytes 8h..8h+8 of every plane.
    unsafe {
        // Eight rows' values of a plane, from the half's bytes.
        let plane8 = |p: *const u8| _mm_loadl_epi64(p.cast());
        for h in 0..2 {
            let mut y = [_mm256_setzero_ps(); W];
            let chunk = |t: *const u8, at: usize| _mm256_cvtepu8_epi16(_mm_loadu_si128(t.add(at + 16 * h).cast()));
            for sb in 0..nsb {
                let t = tiles.add(sb * tb);
                let d = _mm256_cvtph_ps(_mm_loadu_si128(t.add(16 * h).cast()));
                if F == Q6K {
                    let (c0f, c30, cf0, c300) = (
                        _mm256_set1_epi16(0x0F),
                        _mm256_set1_epi16(0x30),
                        _mm256_set1_epi16(0xF0),
                        _mm256_set1_epi16(0x300),
                    );
                    for c in 0..4 {
                        let a = Q6K_LOW_BLOCK[c];
                        let (b_lo, b_hi) = (8 * sb + a, 8 * sb + a + 2);
                        let (mask, up) = if c % 2 == 0 { (0x33, 4) } else { (0xCC, 2) };
                        for half in 0..2 {
                            if h == 0 {
                                // The second half finds the group in L2.
                                prefetch_ahead(t, tb, end, 2 * c + half, 8);
                            }
                            let mut acc = [[_mm256_setzero_si256(); 2]; W];
                            for s in 8 * half..8 * half + 8 {
                                let raw = chunk(t, qo + 32 * (16 * c + s));
                                let v = chunk(t, ho + 32 * (16 * (c / 2) + s));
                                let vs = shift256(_mm256_and_si256(v, _mm256_set1_epi16(mask)), up);
                                let lo = _mm256_or_si256(_mm256_and_si256(raw, c0f), _mm256_and_si256(vs, c30));
                                let hi = _mm256_or_si256(_mm256_and_si256(raw, cf0), _mm256_and_si256(vs, c300));
                                let lo = _mm256_sub_epi16(lo, _mm256_set1_epi16(32));
                                let hi = _mm256_sub_epi16(hi, _mm256_set1_epi16(512));
                                for i in 0..W {
                                    let vl = _mm256_madd_epi16(lo, pair(xq[i].add(x_offset(b_lo, 2 * s))));
                                    let vh = _mm256_madd_epi16(hi, pair(xq[i].add(x_offset(b_hi, 2 * s))));
                                    acc[i][0] = _mm256_add_epi32(acc[i][0], vl);
                                    acc[i][1] = _mm256_add_epi32(acc[i][1], vh);
                                }
                            }
                            let (k_lo, k_hi) = (2 * a + half, 2 * (a + 2) + half);
                            let sc =
                                |k: usize| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(plane8(t.add(so + 16 * k + 8 * h))));
                            let (p_lo, p_hi) = (_mm256_mul_ps(d, sc(k_lo)), _mm256_mul_ps(d, sc(k_hi)));
                            for i in 0..W {
                                let (lo, hi) = (acc[i][0], _mm256_srai_epi32(acc[i][1], 4));
                                let s_lo = _mm256_mul_ps(p_lo, _mm256_set1_ps(*dx[i].add(b_lo)));
                                y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), s_lo, y[i]);
                                let s_hi = _mm256_mul_ps(p_hi, _mm256_set1_ps(*dx[i].add(b_hi)));
                                y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), s_hi, y[i]);
                            }
                        }
                    }
                } else {
                    let dmin = _mm256_cvtph_ps(_mm_loadu_si128(t.add(KFormat::DMIN + 16 * h).cast()));
                    let (c0f, cf0, c10, c100) = (
                        _mm256_set1_epi16(0x0F),
                        _mm256_set1_epi16(0xF0),
                        _mm256_set1_epi16(0x10),
                        _mm256_set1_epi16(0x100),
                    );
                    for k in 0..4 {
                        if h == 0 {
                            prefetch_ahead(t, tb, end, k, 4);
                        }
                        let (b_lo, b_hi) = (8 * sb + 2 * k, 8 * sb + 2 * k + 1);
                        let mut acc = [[_mm256_setzero_si256(); 2]; W];
                        for s in 0..16 {
                            let raw = chunk(t, qo + 32 * (16 * k + s));
                            let mut lo = _mm256_and_si256(raw, c0f);
                            let mut hi = _mm256_and_si256(raw, cf0);
                            if F == Q5K {
                                let v = chunk(t, ho + 32 * s);
                                lo = _mm256_or_si256(lo, _mm256_and_si256(shift256(v, 4 - 2 * k as i32), c10));
                                hi = _mm256_or_si256(hi, _mm256_and_si256(shift256(v, 7 - 2 * k as i32), c100));
                            }
                            for i in 0..W {
                                let vl = _mm256_madd_epi16(lo, pair(xq[i].add(x_offset(b_lo, 2 * s))));
                                let vh = _mm256_madd_epi16(hi, pair(xq[i].add(x_offset(b_hi, 2 * s))));
                                acc[i][0] = _mm256_add_epi32(acc[i][0], vl);
                                acc[i][1] = _mm256_add_epi32(acc[i][1], vh);
                            }
                        }
                        let factors = |j: usize| {
                            let (sc, m) = scale_min_bytes(t.add(so), j);
                            // This half's eight rows: bytes 8h..8h+8.
                            let f = |v: __m128i| {
                                let v = if h == 0 { v } else { _mm_srli_si128(v, 8) };
                                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
                            };
                            (_mm256_mul_ps(d, f(sc)), _mm256_mul_ps(dmin, f(m)))
                        };
                        let ((p_lo, m_lo), (p_hi, m_hi)) = (factors(2 * k), factors(2 * k + 1));
                        for i in 0..W {
                            let (lo, hi) = (acc[i][0], _mm256_srai_epi32(acc[i][1], 4));
                            let s_lo = _mm256_mul_ps(p_lo, _mm256_set1_ps(*dx[i].add(b_lo)));
                            y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), s_lo, y[i]);
                            y[i] = _mm256_fnmadd_ps(m_lo, _mm256_set1_ps(*sx[i].add(b_lo)), y[i]);
                            let s_hi = _mm256_mul_ps(p_hi, _mm256_set1_ps(*dx[i].add(b_hi)));
                            y[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), s_hi, y[i]);
                            y[i] = _mm256_fnmadd_ps(m_hi, _mm256_set1_ps(*sx[i].add(b_hi)), y[i]);
                        }
                    }
                }
            }
            for i in 0..W {
                _mm256_storeu_ps(out[i].add(8 * h), y[i]);
            }
        }
    }
}
