//! x86_64 SIMD mat-vec kernels: AVX2 (256-bit, `vpmaddwd`) and AVX-512 VNNI
//! (512-bit, `vpdpwssd`), each register-blocked over `W` activation rows,
//! for Q4_0, Q4_1 and Q8_0 (the K-quants' kernels, in [`super::x86_k`],
//! share this module's tiles and helpers).
//!
//! Both follow [`super::scalar`]'s specification lane for lane:
//!
//! - the eight integer lanes of a block are what `vpmaddwd`/`vpdpwssd` give
//!   on the block's two halves of sixteen 16-bit values;
//! - the AVX2 kernel keeps the even-block lanes and the odd-block lanes in
//!   two `ymm` accumulators per row; the AVX-512 kernel widens a block *pair*
//!   into 512-bit registers (even block in lanes 0..8, odd in 8..16), so its
//!   one `zmm` accumulator per row is the specification's sixteen lanes;
//! - scales `f32(dw) * dx` are formed per block exactly as the scalar code
//!   does (one rounding), fused into the accumulator with one FMA;
//! - Q4_1's min term is sixteen lanes indexed by `block % 16`: one gather of
//!   sixteen block headers gives sixteen `mw`, multiplied-and-added against
//!   sixteen consecutive `sx` of the activation;
//! - the final reduction is the scalar tree.
//!
//! Lanes a kernel has nothing for (the absent partner of an odd last block,
//! scale padding past the row's end) receive `fma(0, 0, acc)`, which the
//! specification shows leaves them unchanged.

// Register-blocked loops index several parallel arrays (weight rows ×
// activation rows) with the same counter; iterator chains would hide that.
#![allow(clippy::needless_range_loop)]

use super::x86_k::{rows_k_avx2, rows_k_avx512};
use super::{Input, Matrix, Weights};
use crate::act::QRow;
use crate::dispatch::{AVX2_MAX_ROWS, AVX512_MAX_ROWS, KernelFamily, ROW_TILE, interleaved_rows, max_rows_per_pass};
use crate::quant::{QK, QK_K};
use std::arch::x86_64::*;

/// Format tags of the const-generic kernels.
pub(super) const Q4_0: u8 = 0;
pub(super) const Q4_1: u8 = 1;
pub(super) const Q8_0: u8 = 2;
/// The K-quant kernels live in [`super::x86_k`].
pub(super) const Q4K: u8 = 3;
pub(super) const Q5K: u8 = 4;
pub(super) const Q6K: u8 = 5;

/// Bytes per block of format `f` (ggml's `block_q4_0`, `block_q4_1`,
/// `block_q8_0`; for the K-quants a super-block: `block_q4_K`, `block_q5_K`,
/// `block_q6_K`).
pub(super) const fn block_bytes(f: u8) -> usize {
    match f {
        Q4_0 => 18,
        Q4_1 => 20,
        Q8_0 => 34,
        Q4K => 144,
        Q5K => 176,
        _ => 210,
    }
}

/// Byte offset of a block's quants (after the f16 scale, and Q4_1's min).
const fn qs_offset(f: u8) -> usize {
    match f {
        Q4_1 => 4,
        _ => 2,
    }
}

/// Runs the family's kernel for `m` if it has one; `false` means the caller
/// should use the scalar kernel (only when the CPU lacks the family).
/// `outs` is (inputs.len(), n) with `n = outs.len() / inputs.len()`; shapes
/// were checked by the caller.
pub(super) fn matmul_rows(family: KernelFamily, m: &Matrix, inputs: &[Input], row0: usize, outs: &mut [f32]) -> bool {
    // A family value can be built by anyone; running its instructions on a
    // CPU without them would be undefined behaviour, so check (cached).
    if !family.is_supported() {
        return false;
    }
    let n = outs.len() / inputs.len();
    // K-quant tiles count super-blocks of 256 elements, the others blocks of 32.
    let (nb, nsb) = (m.cols / QK, m.cols / QK_K);
    let (f, base, nb) = match m.w {
        Weights::Q4_0(w) => (Q4_0, w.as_ptr().cast::<u8>(), nb),
        Weights::Q4_1(w) => (Q4_1, w.as_ptr().cast::<u8>(), nb),
        Weights::Q8_0(w) => (Q8_0, w.as_ptr().cast::<u8>(), nb),
        Weights::Q4K(w) => (Q4K, w.as_ptr().cast::<u8>(), nsb),
        Weights::Q5K(w) => (Q5K, w.as_ptr().cast::<u8>(), nsb),
        Weights::Q6K(w) => (Q6K, w.as_ptr().cast::<u8>(), nsb),
        Weights::F32(w) => {
            for (inp, out) in inputs.iter().zip(outs.chunks_exact_mut(n)) {
                for (i, o) in out.iter_mut().enumerate() {
                    let r = row0 + i;
                    // SAFETY: every x86 family includes AVX2 (checked above).
                    *o = unsafe { dot_f32_avx2(&w[r * m.cols..(r + 1) * m.cols], inp.x) };
                }
            }
            return true;
        }
    };
    let max_w = max_rows_per_pass(family);
    let mut t0 = 0;
    while t0 < n {
        let t1 = (t0 + ROW_TILE).min(n);
        let mut i0 = 0;
        while i0 < inputs.len() {
            let w = (inputs.len() - i0).min(max_w);
            let tile = Tile {
                base,
                nb,
                block_bytes: block_bytes(f),
                rows: row0 + t0..row0 + t1,
                call_end: row0 + n,
                out_col: t0,
                n,
            };
            let xs = &inputs[i0..i0 + w];
            let o = &mut outs[i0 * n..(i0 + w) * n];
            // SAFETY: the CPU supports the family (checked above); the
            // caller checked `row0 + n <= m.rows`, so the tile's rows lie in
            // the weights (`rows * nb` blocks of format `f`, super-blocks for
            // the K-quants), and every input's quantized row has `m.cols / 32`
            // blocks (`nb`, or `8 * nb` for the K-quants).
            unsafe { run_pass(family, f, w, &tile, xs, o) };
            i0 += w;
        }
        t0 = t1;
    }
    true
}

/// A tile of weight rows and where its outputs go.
pub(super) struct Tile {
    /// Start of the matrix's blocks.
    pub(super) base: *const u8,
    /// Blocks per row (K-quants: super-blocks).
    pub(super) nb: usize,
    /// Bytes per block (K-quants: per super-block).
    pub(super) block_bytes: usize,
    /// Weight rows of this tile.
    pub(super) rows: std::ops::Range<usize>,
    /// End of the call's rows (prefetching may run into the next tile).
    pub(super) call_end: usize,
    /// Output column of `rows.start`.
    pub(super) out_col: usize,
    /// Output row length: input `i`, weight row `r` goes to
    /// `outs[i * n + out_col + (r - rows.start)]`.
    pub(super) n: usize,
}

/// Picks the const-generic instance for (family, format, width).
///
/// # Safety
/// As [`rows_avx2`] / [`rows_avx512`].
unsafe fn run_pass(family: KernelFamily, f: u8, w: usize, t: &Tile, xs: &[Input], o: &mut [f32]) {
    macro_rules! widths {
        ($kern:ident, $fam:expr, $f:expr, [$($w:literal),*]) => {
            match w {
                // SAFETY: forwarded from the caller; `xs.len() == w`.
                $($w => unsafe { $kern::<$f, $w, { interleaved_rows($fam, $w) }>(t, xs, o) },)*
                _ => unreachable!("width {w} above the family's maximum"),
            }
        };
    }
    macro_rules! formats {
        ($kern:ident, $kkern:ident, $fam:expr, $ws:tt) => {
            match f {
                Q4_0 => widths!($kern, $fam, Q4_0, $ws),
                Q4_1 => widths!($kern, $fam, Q4_1, $ws),
                Q8_0 => widths!($kern, $fam, Q8_0, $ws),
                Q4K => widths!($kkern, $fam, Q4K, $ws),
                Q5K => widths!($kkern, $fam, Q5K, $ws),
                _ => widths!($kkern, $fam, Q6K, $ws),
            }
        };
    }
    const _: () = assert!(AVX2_MAX_ROWS == 4 && AVX512_MAX_ROWS == 8, "update the width lists below");
    match family {
        KernelFamily::Avx2 => formats!(rows_avx2, rows_k_avx2, KernelFamily::Avx2, [1, 2, 3, 4]),
        KernelFamily::Avx512Vnni => {
            formats!(rows_avx512, rows_k_avx512, KernelFamily::Avx512Vnni, [1, 2, 3, 4, 5, 6, 7, 8])
        }
        KernelFamily::Scalar => unreachable!("scalar has no SIMD pass"),
    }
}

/// The scalar [`super::scalar::reduce8`] tree on one `ymm`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn reduce8_ymm(acc: __m256) -> f32 {
    // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
    let h4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    let h1 = _mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1));
    _mm_cvtss_f32(h1)
}

/// [`super::scalar::dot_f32`] with one 256-bit register holding its eight lanes.
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

/// Raw pointers into `W` quantized activation rows.
pub(super) struct Acts<const W: usize> {
    /// Pair-interleaved quants ([`crate::act::QPair`]), 64-byte aligned.
    pub(super) qs: [*const i16; W],
    /// Block scales, padded with zeros to a multiple of sixteen blocks.
    pub(super) d: [*const f32; W],
    /// Block `d * sum`, padded likewise.
    pub(super) s: [*const f32; W],
}

impl<const W: usize> Acts<W> {
    pub(super) fn new(xs: &[Input]) -> Self {
        let q = |i: usize| -> QRow { xs[i].q };
        Acts {
            qs: std::array::from_fn(|i| q(i).pairs.as_ptr().cast::<i16>()),
            d: std::array::from_fn(|i| q(i).d.as_ptr()),
            s: std::array::from_fn(|i| q(i).s.as_ptr()),
        }
    }
}

/// The f16 values in the low (`HIGH = false`) or high halves of eight
/// 32-bit lanes, converted to f32.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn halves_to_f32<const HIGH: bool>(v: __m256i) -> __m256 {
    let pick = if HIGH {
        _mm256_setr_epi8(
            2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1,
            -1, -1, -1,
        )
    } else {
        _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1,
            -1, -1,
        )
    };
    let packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0b00_00_10_00);
    _mm256_cvtph_ps(_mm256_castsi256_si128(packed))
}

/// Groups of at most this many blocks (a row's tail) load their headers
/// with scalar loads: a gather costs about as much as the pair loop over
/// nine blocks (measured on Sapphire Rapids, `kernels/benches`), which a
/// 576-column row's two-block tail would otherwise pay in full.
const SHORT_TAIL: usize = 4;

/// The first 32-bit words of `n` (0..=4) consecutive blocks `bb` bytes
/// apart, in the low lanes (zeros above).
///
/// # Safety
/// SSE4.1; the `n` words are readable.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn short_headers(at: *const u8, bb: usize, n: usize) -> __m128i {
    // SAFETY: the caller guarantees the n words are readable.
    unsafe {
        let word = |k: usize| at.add(k * bb).cast::<i32>().read_unaligned();
        let mut v = _mm_setzero_si128();
        if n > 0 {
            v = _mm_cvtsi32_si128(word(0));
        }
        if n > 1 {
            v = _mm_insert_epi32(v, word(1), 1);
        }
        if n > 2 {
            v = _mm_insert_epi32(v, word(2), 2);
        }
        if n > 3 {
            v = _mm_insert_epi32(v, word(3), 3);
        }
        v
    }
}

/// Prefetches `bytes` bytes of weights from row `r` on (the next step's
/// rows) into L1 while the current step computes: with the hardware
/// prefetchers alone, streaming a matrix from DRAM ran at about 60% of the
/// host's read bandwidth; asking for the next rows ahead gained 3–5% in
/// alternating runs (`kernels/benches`), and costs one instruction per 64
/// bytes. Rows past the call's last row are not asked for (another thread
/// may be streaming them; a prefetch cannot fault, but the address is never
/// formed past the matrix either).
#[inline(always)]
pub(super) fn prefetch_rows(t: &Tile, r: usize, bytes: usize) {
    if r >= t.call_end {
        return;
    }
    let row_bytes = t.nb * t.block_bytes;
    let bytes = bytes.min((t.call_end - r) * row_bytes);
    let base = t.base.wrapping_add(r * row_bytes);
    let mut off = 0;
    while off < bytes {
        // SAFETY: a prefetch has no architectural effect and cannot fault;
        // the address lies inside the matrix (r < call_end <= rows).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// Q4_0 / Q4_1 / Q8_0 weights of one block as two halves of sixteen i16
/// (elements 0..16 and 16..32), AVX2.
///
/// # Safety
/// AVX2; `blk` points at the block's quants (16 bytes for Q4, 32 for Q8_0).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn weights_ymm<const F: u8>(blk: *const u8) -> (__m256i, __m256i) {
    // SAFETY: the caller guarantees the block's quant bytes are readable.
    unsafe {
        if F == Q8_0 {
            return (
                _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.cast())),
                _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(16).cast())),
            );
        }
        let wz = _mm256_cvtepu8_epi16(_mm_loadu_si128(blk.cast()));
        let (lo, hi) = (_mm256_and_si256(wz, _mm256_set1_epi16(0x0F)), _mm256_srli_epi16(wz, 4));
        if F == Q4_0 {
            let eight = _mm256_set1_epi16(8);
            (_mm256_sub_epi16(lo, eight), _mm256_sub_epi16(hi, eight))
        } else {
            (lo, hi)
        }
    }
}

/// Outputs of `R` consecutive weight rows (from `r0`) × `W` activation rows,
/// AVX2: one block per step, the even- and odd-block lanes in two
/// accumulators per output. Interleaving `R` weight rows gives the core
/// independent dependency chains to overlap.
///
/// # Safety
/// AVX2, FMA and F16C; rows `r0..r0 + R` lie inside the weights of format
/// `F`; `a` points into `W` activation rows of `nb` blocks; `o` holds the
/// tile's outputs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_avx2<const F: u8, const R: usize, const W: usize>(t: &Tile, a: &Acts<W>, r0: usize, o: &mut [f32]) {
    let (bb, qo, nb) = (block_bytes(F), qs_offset(F), t.nb);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let offs = _mm256_mullo_epi32(lane, _mm256_set1_epi32(bb as i32));
    // SAFETY (whole body): rows r0..r0+R hold nb blocks each; the
    // activation arrays hold nb blocks of quants (nb.div_ceil(2) pairs) and
    // scales padded to a multiple of sixteen blocks, so every load below at a
    // block index < nb (quants) or < g + 16 (scales) is in bounds; pairs are
    // 64-byte aligned, so each block half (32 bytes at a multiple of 32) is
    // too; the gathers read only headers of blocks < nb (mask).
    unsafe {
        let rows: [*const u8; R] = std::array::from_fn(|r| t.base.add((r0 + r) * nb * bb));
        let mut acc = [[[_mm256_setzero_ps(); 2]; W]; R];
        let mut mt = [[[_mm256_setzero_ps(); 2]; W]; R];
        let mut p = [[[0.0f32; 16]; W]; R];
        prefetch_rows(t, r0 + R, R * nb * bb);
        let mut g = 0;
        while g < nb {
            let end = (g + 16).min(nb);
            for hh in 0..2 {
                let cnt = end.saturating_sub(g + 8 * hh).min(8);
                let live = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt as i32), lane);
                for r in 0..R {
                    let at = rows[r].add((g + 8 * hh) * bb);
                    let hdr = if cnt <= SHORT_TAIL {
                        _mm256_zextsi128_si256(short_headers(at, bb, cnt))
                    } else {
                        _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), at.cast(), offs, live, 1)
                    };
                    let dw = halves_to_f32::<false>(hdr);
                    for i in 0..W {
                        let dx = _mm256_loadu_ps(a.d[i].add(g + 8 * hh));
                        _mm256_storeu_ps(p[r][i].as_mut_ptr().add(8 * hh), _mm256_mul_ps(dw, dx));
                    }
                    if F == Q4_1 {
                        let mw = halves_to_f32::<true>(hdr);
                        for i in 0..W {
                            let sx = _mm256_loadu_ps(a.s[i].add(g + 8 * hh));
                            mt[r][i][hh] = _mm256_fmadd_ps(mw, sx, mt[r][i][hh]);
                        }
                    }
                }
            }
            // Blocks b (even, lanes 0..8) and b + 1 (odd, lanes 8..16).
            let mut b = g;
            while b < end {
                let xo = (b / 2) * 2 * QK;
                for h in 0..2 {
                    if b + h >= end {
                        break;
                    }
                    for r in 0..R {
                        let (lo, hi) = weights_ymm::<F>(rows[r].add((b + h) * bb + qo));
                        for i in 0..W {
                            let x = a.qs[i].add(xo + h * 16);
                            let x0 = _mm256_load_si256(x.cast());
                            let x1 = _mm256_load_si256(x.add(32).cast());
                            let isum = _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1));
                            let s = _mm256_broadcast_ss(&p[r][i][b + h - g]);
                            acc[r][i][h] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum), acc[r][i][h]);
                        }
                    }
                }
                b += 2;
            }
            g += 16;
        }
        for r in 0..R {
            let col = t.out_col + (r0 + r - t.rows.start);
            for i in 0..W {
                let mut y = reduce8_ymm(_mm256_add_ps(acc[r][i][0], acc[r][i][1]));
                if F == Q4_1 {
                    y += reduce8_ymm(_mm256_add_ps(mt[r][i][0], mt[r][i][1]));
                }
                o[i * t.n + col] = y;
            }
        }
    }
}

/// `W` activation rows against the tile's weight rows, AVX2, `R` weight
/// rows interleaved per step ([`crate::dispatch::interleaved_rows`]).
///
/// # Safety
/// As [`block_avx2`], for every row of the tile; `xs.len() == W`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const F: u8, const W: usize, const R: usize>(t: &Tile, xs: &[Input], o: &mut [f32]) {
    let a = Acts::<W>::new(xs);
    let mut r = t.rows.start;
    // SAFETY: forwarded; every step's rows lie in the tile.
    unsafe {
        while R > 1 && r + R <= t.rows.end {
            block_avx2::<F, R, W>(t, &a, r, o);
            r += R;
        }
        while r < t.rows.end {
            block_avx2::<F, 1, W>(t, &a, r, o);
            r += 1;
        }
    }
}

/// The scalar `reduce16` tree on one `zmm`.
#[target_feature(enable = "avx512f,avx2")]
#[inline]
pub(super) fn reduce16_zmm(v: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    reduce8_ymm(_mm256_add_ps(_mm512_castps512_ps256(v), hi))
}

/// Q4_0 / Q4_1 / Q8_0 weights of the block pair at `blk` (second block
/// `bb` bytes on, absent when `pair` is false) as two registers of 32 i16:
/// (first halves of both blocks, second halves of both blocks), the
/// activation's [`crate::act::QPair`] order.
///
/// # Safety
/// AVX-512 BW; `blk` points at the first block's quants and, when `pair`,
/// `blk + bb` at the second's.
#[target_feature(enable = "avx512f,avx512bw,avx2")]
#[inline]
unsafe fn weights_zmm<const F: u8>(blk: *const u8, bb: usize, pair: bool) -> (__m512i, __m512i) {
    // SAFETY: the caller guarantees the quant bytes read are readable.
    unsafe {
        let join = |a: __m128i, off: usize| {
            if pair {
                _mm256_inserti128_si256(_mm256_castsi128_si256(a), _mm_loadu_si128(blk.add(bb + off).cast()), 1)
            } else {
                _mm256_zextsi128_si256(a)
            }
        };
        if F == Q8_0 {
            let l = join(_mm_loadu_si128(blk.cast()), 0);
            let h = join(_mm_loadu_si128(blk.add(16).cast()), 16);
            return (_mm512_cvtepi8_epi16(l), _mm512_cvtepi8_epi16(h));
        }
        let wz = _mm512_cvtepu8_epi16(join(_mm_loadu_si128(blk.cast()), 0));
        let (lo, hi) = (_mm512_and_si512(wz, _mm512_set1_epi16(0x0F)), _mm512_srli_epi16(wz, 4));
        if F == Q4_0 {
            let eight = _mm512_set1_epi16(8);
            (_mm512_sub_epi16(lo, eight), _mm512_sub_epi16(hi, eight))
        } else {
            (lo, hi)
        }
    }
}

/// `vpdpwssd acc, w, [x]`: sixteen lanes of pair sums of 16-bit products
/// added to `acc`. Inline assembly keeps it one instruction: from the
/// intrinsic, LLVM emits `vpmaddwd` + `vpaddd` for some call sites.
///
/// # Safety
/// AVX-512 VNNI; `x` points at 64 readable, 64-byte-aligned bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dpwssd_mem(mut acc: __m512i, w: __m512i, x: *const i16) -> __m512i {
    // SAFETY: the caller guarantees the 64 bytes at x.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, zmmword ptr [{x}]",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            x = in(reg) x,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// `0x4B400000`, the bits of 1.5·2^23: an integer `v` with |v| < 2^22 added
/// to these bits gives the float `1.5·2^23 + v` exactly (the float spacing
/// there is 1), and subtracting 1.5·2^23 gives `f32(v)` exactly.
const MAGIC_BITS: i32 = 0x4B40_0000;
const MAGIC: f32 = 12_582_912.0;
const _: () = assert!(MAGIC.to_bits() == MAGIC_BITS as u32);

/// `f32` of the sixteen integer lanes of a block pair (first halves against
/// `x[0..32]`, second halves against `x[32..64]`), exactly as `vcvtdq2ps`
/// would give them.
///
/// Q4 lanes stay below 2^21 in magnitude (four products of at most
/// 15·32767), so they start from [`MAGIC_BITS`] and convert with one
/// subtraction: both instructions run on either vector port, where
/// `vcvtdq2ps` and `vpmaddwd` (the alternatives) share port 0 with the
/// `vpdpwssd`s on Intel cores — the port that bounds the multi-row pass.
/// Q8_0 lanes reach 2^24, so they take `vpmaddwd` + `vpdpwssd` +
/// `vcvtdq2ps`. The K-quant kernels ([`super::x86_k`]) use the `Q4_1`
/// instance for Q4_K / Q5_K (lanes below 2^22, still exact: the float
/// spacing at 1.5·2^23 ± 2^22 is 1) and the `Q8_0` one for Q6_K.
///
/// # Safety
/// AVX-512 BW + VNNI; `x` points at a 64-byte-aligned [`crate::act::QPair`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
pub(super) unsafe fn dot_pair<const F: u8>(lo: __m512i, hi: __m512i, x: *const i16) -> __m512 {
    // SAFETY: the caller guarantees 128 readable, aligned bytes at x.
    unsafe {
        if F == Q8_0 {
            let isum = _mm512_madd_epi16(lo, _mm512_load_si512(x.cast()));
            _mm512_cvtepi32_ps(dpwssd_mem(isum, hi, x.add(32)))
        } else {
            let biased = dpwssd_mem(dpwssd_mem(_mm512_set1_epi32(MAGIC_BITS), lo, x), hi, x.add(32));
            _mm512_sub_ps(_mm512_castsi512_ps(biased), _mm512_set1_ps(MAGIC))
        }
    }
}

/// Outputs of `R` consecutive weight rows (from `r0`) × `W` activation rows,
/// AVX-512 VNNI: one block pair per step, widened into 512-bit registers
/// (even block in lanes 0..8, odd in 8..16).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C; otherwise as [`block_avx2`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_avx512<const F: u8, const R: usize, const W: usize>(t: &Tile, a: &Acts<W>, r0: usize, o: &mut [f32]) {
    let (bb, qo, nb) = (block_bytes(F), qs_offset(F), t.nb);
    let offs = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(bb as i32),
    );
    // Lanes 0..8 take scale 2k, lanes 8..16 scale 2k + 1, for pair k.
    let pick0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let two = _mm512_set1_epi32(2);
    // SAFETY (whole body): as in `block_avx2`; a pair's second block is
    // read only when it exists (b + 1 < nb).
    unsafe {
        let rows: [*const u8; R] = std::array::from_fn(|r| t.base.add((r0 + r) * nb * bb));
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        let mut mt = [[_mm512_setzero_ps(); W]; R];
        prefetch_rows(t, r0 + R, R * nb * bb);
        let mut g = 0;
        while g < nb {
            let end = (g + 16).min(nb);
            let live: __mmask16 = if end - g == 16 { 0xFFFF } else { (1u16 << (end - g)) - 1 };
            let mut p = [[_mm512_setzero_ps(); W]; R];
            for r in 0..R {
                let at = rows[r].add(g * bb);
                let hdr = if end - g <= SHORT_TAIL {
                    _mm512_zextsi128_si512(short_headers(at, bb, end - g))
                } else {
                    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, offs, at.cast(), 1)
                };
                let dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hdr));
                for i in 0..W {
                    p[r][i] = _mm512_mul_ps(dw, _mm512_loadu_ps(a.d[i].add(g)));
                }
                if F == Q4_1 {
                    let mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hdr, 16)));
                    for i in 0..W {
                        mt[r][i] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a.s[i].add(g)), mt[r][i]);
                    }
                }
            }
            let mut pick = pick0;
            let mut b = g;
            while b < end {
                let xo = (b / 2) * 2 * QK;
                for r in 0..R {
                    let (lo, hi) = weights_zmm::<F>(rows[r].add(b * bb + qo), bb, b + 1 < end);
                    for i in 0..W {
                        let x = a.qs[i].add(xo);
                        let s = _mm512_permutexvar_ps(pick, p[r][i]);
                        acc[r][i] = _mm512_fmadd_ps(s, dot_pair::<F>(lo, hi, x), acc[r][i]);
                    }
                }
                pick = _mm512_add_epi32(pick, two);
                b += 2;
            }
            g += 16;
        }
        for r in 0..R {
            let col = t.out_col + (r0 + r - t.rows.start);
            for i in 0..W {
                let mut y = reduce16_zmm(acc[r][i]);
                if F == Q4_1 {
                    y += reduce16_zmm(mt[r][i]);
                }
                o[i * t.n + col] = y;
            }
        }
    }
}

/// `W` activation rows against the tile's weight rows, AVX-512 VNNI, `R`
/// weight rows interleaved per step.
///
/// # Safety
/// As [`block_avx512`], for every row of the tile; `xs.len() == W`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn rows_avx512<const F: u8, const W: usize, const R: usize>(t: &Tile, xs: &[Input], o: &mut [f32]) {
    let a = Acts::<W>::new(xs);
    let mut r = t.rows.start;
    // SAFETY: forwarded; every step's rows lie in the tile.
    unsafe {
        while R > 1 && r + R <= t.rows.end {
            block_avx512::<F, R, W>(t, &a, r, o);
            r += R;
        }
        while r < t.rows.end {
            block_avx512::<F, 1, W>(t, &a, r, o);
            r += 1;
        }
    }
}
