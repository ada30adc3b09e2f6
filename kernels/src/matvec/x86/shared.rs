//! What the x86_64 kernels share, below every format's kernels and
//! importing none of them: the GGUF-layout passes' format tags and tiles
//! ([`Tile`], [`Acts`]), the reductions (the scalar trees on one register),
//! the prefetches of both layouts, and the integer building blocks (the two
//! `vpdpwssd` forms, memory and broadcast operand, and the block-pair
//! conversion [`dot_pair`]).

// Register-blocked loops index parallel arrays with the same counter.
#![allow(clippy::needless_range_loop)]

use crate::act::QRow;
use crate::matvec::Input;
use std::arch::x86_64::*;

/// What one pass of a row-interleaved kernel reads and writes: a group's
/// `nb` tiles (super-blocks for the K-quants) from `tiles`, prefetching no
/// further than `end` (the Q4/Q5/Q8 passes of enough rows the next tile,
/// [`prefetch_past`];
/// the K-quant passes three tiles on, spread over the work,
/// `interleaved_k::prefetch_ahead`), against the
/// activation rows `xs`, into `o[..xs.len()]` (sixteen floats each).
#[derive(Clone, Copy)]
pub(super) struct Pass<'p, 'a> {
    pub tiles: *const u8,
    pub nb: usize,
    pub end: *const u8,
    pub xs: &'p [Input<'a>],
    pub o: &'p [*mut f32; 8],
}

/// Tags of [`dot_pair`]'s two conversions, and of the const-generic kernels.
pub(super) const Q4_1: u8 = 1;
pub(super) const Q8_0: u8 = 2;
/// Q2_K / Q3_K, in [`super::q2k_q3k`].
pub(super) const Q2K: u8 = 6;
pub(super) const Q3K: u8 = 7;

/// Bytes per super-block of format `f` (ggml's `block_q2_K`, `block_q3_K`).
pub(super) const fn block_bytes(f: u8) -> usize {
    match f {
        Q2K => 84,
        _ => 110,
    }
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

/// The scalar [`crate::matvec::scalar::reduce8`] tree on one `ymm`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn reduce8_ymm(acc: __m256) -> f32 {
    // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
    let h4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    let h1 = _mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1));
    _mm_cvtss_f32(h1)
}

/// Raw pointers into `W` quantized activation rows.
pub(super) struct Acts<const W: usize> {
    /// Pair-interleaved quants ([`crate::act::QPair`]), 64-byte aligned.
    pub(super) qs: [*const i16; W],
    /// Block scales, padded with zeros to a multiple of sixteen blocks.
    pub(super) d: [*const f32; W],
}

impl<const W: usize> Acts<W> {
    pub(super) fn new(xs: &[Input]) -> Self {
        let q = |i: usize| -> QRow { xs[i].q };
        Acts {
            qs: std::array::from_fn(|i| q(i).pairs.as_ptr().cast::<i16>()),
            d: std::array::from_fn(|i| q(i).d.as_ptr()),
        }
    }
}

/// Raw pointers into `W` quantized activation rows as the row-interleaved
/// kernels read them: the pair-interleaved quants, the block scales and the
/// block sums' scaled values ([`crate::act::QRow`]).
#[inline(always)]
pub(super) fn act_ptrs<const W: usize>(xs: &[Input]) -> ([*const i16; W], [*const f32; W], [*const f32; W]) {
    (
        std::array::from_fn(|i| xs[i].q.pairs.as_ptr().cast::<i16>()),
        std::array::from_fn(|i| xs[i].q.d.as_ptr()),
        std::array::from_fn(|i| xs[i].q.s.as_ptr()),
    )
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

/// The scalar `reduce16` tree on one `zmm`.
#[target_feature(enable = "avx512f,avx2")]
#[inline]
pub(super) fn reduce16_zmm(v: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    reduce8_ymm(_mm256_add_ps(_mm512_castps512_ps256(v), hi))
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
/// `vcvtdq2ps`. The Q2_K / Q3_K kernels ([`super::q2k_q3k`]) use them
/// likewise.
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

/// How far ahead of the tile being computed the kernels prefetch (into L1):
/// about nineteen Q4_1 tiles or eleven Q8_0 ones. Alternating
/// `runtime bench --verify-cost --max-width 4` runs of builds with 2048,
/// 4096, 6144 and 8192 bytes (and 4096/8192 into L2 only) on the default
/// model: no prefetch cost about 25% at W = 1; 2048 gave 10.2–10.7 ms per
/// W = 1 pass and 6144 8.6–9.9 ms (1 thread), the rest in between or
/// noisier. The host's noise (±10%) is about the size of the differences
/// between 4096 and 8192.
const PREFETCH_AHEAD: usize = 6144;

/// Where the outputs of one pass go: `W` pointers to sixteen floats each.
pub(super) type Outs<const W: usize> = [*mut f32; W];

/// `i16` offset, in a [`crate::act::QPair`] array, of element `e` of block `b`.
#[inline(always)]
pub(super) const fn x_offset(b: usize, e: usize) -> usize {
    (b / 2) * 64 + (e / 16) * 32 + (b % 2) * 16 + e % 16
}

/// The fewest activation rows for which an AVX-512 Q4 / Q5 / Q8 pass asks
/// for its tiles ahead ([`prefetch_past`]); narrower passes leave the stream
/// to the hardware prefetchers. Measured once the weights sat on huge pages
/// in one arena ([`crate::pages`]), on the Zen 4 host, SmolLM2 Q4_1, one
/// thread, `runtime bench --verify-cost --max-rows 8 --reps 5`, alternating
/// builds' settings in one binary: asking at every width, a pass of 1, 2, 3,
/// 4, 5, 8 rows took 4.15–4.24, 4.98–5.00, 6.38–6.45, 7.94–8.07, 9.88–9.90,
/// 15.02–15.04 ms; never asking 3.77–3.98, 4.64–4.66, 6.27–6.34,
/// 8.21–8.25, 10.37–10.77, 17.12–17.31; from four rows on 3.79–3.84,
/// 4.66–4.71, 6.28–6.33, 7.94–7.97, 9.92–9.93, 15.01–15.11: the best of
/// both. (One decode token is a one-row pass: about 10% faster.)
pub(super) const PREFETCH_FROM_ROWS_512: usize = 4;

/// As [`PREFETCH_FROM_ROWS_512`] for the AVX2 passes (four rows at most per
/// pass): the same runs under `DRAFTWISE_KERNELS=avx2` took 5.86–5.96 ms at
/// one row asking and 5.29–5.34 not; at two rows 7.82–7.89 and 7.82–7.94;
/// from three rows on asking was faster (11.49–11.59 against 11.77–11.91).
pub(super) const PREFETCH_FROM_ROWS_256: usize = 2;

/// Prefetches the lines of the tile `PREFETCH_AHEAD` bytes past `t`, if it
/// lies before `end`, all at once (the K-quants' spread form is
/// `interleaved_k::prefetch_ahead`). The Q4 / Q5 / Q8 passes call it from
/// [`PREFETCH_FROM_ROWS_512`] (AVX2: [`PREFETCH_FROM_ROWS_256`]) rows on.
#[inline(always)]
pub(super) fn prefetch_past(t: *const u8, tb: usize, end: *const u8) {
    let ahead = t.wrapping_add(PREFETCH_AHEAD);
    let mut off = 0;
    while off < tb {
        let p = ahead.wrapping_add(off);
        if p >= end {
            return;
        }
        // SAFETY: a prefetch has no architectural effect and cannot fault;
        // the address lies inside the matrix (below `end`).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
        off += 64;
    }
}

/// `vpdpwssd acc, w, [x]{1to16}`: every 32-bit lane of `acc` gains
/// `w[2j]·x[0] + w[2j+1]·x[1]`.
///
/// # Safety
/// AVX-512 VNNI; `x` points at two readable `i16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
pub(super) unsafe fn dpwssd_bcast(mut acc: __m512i, w: __m512i, x: *const i16) -> __m512i {
    // SAFETY: the caller guarantees the four bytes at x.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, dword ptr [{x}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            x = in(reg) x,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}
