//! x86_64 SIMD mat-vec kernels: the dispatch for every format, and the
//! helpers the GGUF-layout Q2_K / Q3_K kernels ([`super::x86_k23`]) share.
//! Q4_0, Q4_1, Q8_0 and the K-quants Q4_K, Q5_K, Q6_K run in the
//! row-interleaved kernels of [`super::x86_r16`], Q5_0 and Q5_1 in those of
//! [`super::x86_r16_q5`], F16 and BF16 in [`super::x86_f16`] (GGUF-layout
//! matrices are repacked a group at a time on the way). Q2_K and Q3_K keep
//! GGUF's layout and follow [`super::scalar`]'s lane specification:
//!
//! - the eight integer lanes of a block are what `vpmaddwd`/`vpdpwssd`
//!   give on its two halves of sixteen 16-bit values;
//! - the AVX2 kernel keeps the even- and odd-block lanes in two `ymm`
//!   accumulators per row; the AVX-512 kernel widens a block *pair* into
//!   512-bit registers (even block in lanes 0..8, odd in 8..16), so its one
//!   `zmm` accumulator per row is the specification's sixteen lanes;
//! - scales are formed per block exactly as the scalar code does (one
//!   rounding), fused into the accumulator with one FMA;
//! - the final reduction is the scalar tree.

// Register-blocked loops index several parallel arrays (weight rows ×
// activation rows) with the same counter; iterator chains would hide that.
#![allow(clippy::needless_range_loop)]

use super::r16::R16Format;
use super::r16::k::KFormat;
use super::x86_k23::{rows_k23_avx2, rows_k23_avx512};
use super::x86_r16;
use super::{Input, Matrix, Weights};
use crate::act::QRow;
use crate::dispatch::{AVX2_MAX_ROWS, AVX512_MAX_ROWS, KernelFamily, ROW_TILE, interleaved_rows, max_rows_per_pass};
use crate::quant::QK_K;
use std::arch::x86_64::*;

/// Tags of [`dot_pair`]'s two conversions, and of the const-generic kernels.
pub(super) const Q4_1: u8 = 1;
pub(super) const Q8_0: u8 = 2;
/// Q2_K / Q3_K, in [`super::x86_k23`].
pub(super) const Q2K: u8 = 6;
pub(super) const Q3K: u8 = 7;

/// Bytes per super-block of format `f` (ggml's `block_q2_K`, `block_q3_K`).
pub(super) const fn block_bytes(f: u8) -> usize {
    match f {
        Q2K => 84,
        _ => 110,
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
    let nsb = m.cols / QK_K;
    let native = |fmt: R16Format, base: *const u8, outs: &mut [f32]| {
        let nb = m.cols / fmt.block_elems();
        // SAFETY: `base` is the matrix's `rows * nb` GGUF blocks of `fmt`
        // (a typed slice of them, viewed as its bytes).
        let bytes = unsafe { std::slice::from_raw_parts(base, m.rows * nb * fmt.native_block_bytes()) };
        // SAFETY: the CPU supports the family (checked above); shapes were
        // checked by the caller.
        unsafe { x86_r16::matmul_native(family, fmt, bytes, m.rows, nb, inputs, row0, outs) };
        true
    };
    let (f, base, nb) = match m.w {
        Weights::Q4_0(w) => return native(R16Format::Q4_0, w.as_ptr().cast::<u8>(), outs),
        Weights::Q4_1(w) => return native(R16Format::Q4_1, w.as_ptr().cast::<u8>(), outs),
        Weights::Q5_0(w) => return native(R16Format::Q5_0, w.as_ptr().cast::<u8>(), outs),
        Weights::Q5_1(w) => return native(R16Format::Q5_1, w.as_ptr().cast::<u8>(), outs),
        Weights::Q8_0(w) => return native(R16Format::Q8_0, w.as_ptr().cast::<u8>(), outs),
        Weights::R16(v) => {
            // SAFETY: as above.
            unsafe { x86_r16::matmul_r16(family, &v, inputs, row0, outs) };
            return true;
        }
        Weights::Q2K(w) => (Q2K, w.as_ptr().cast::<u8>(), nsb),
        Weights::Q3K(w) => (Q3K, w.as_ptr().cast::<u8>(), nsb),
        Weights::Q4K(w) => return native(R16Format::K(KFormat::Q4K), w.as_ptr().cast::<u8>(), outs),
        Weights::Q5K(w) => return native(R16Format::K(KFormat::Q5K), w.as_ptr().cast::<u8>(), outs),
        Weights::Q6K(w) => return native(R16Format::K(KFormat::Q6K), w.as_ptr().cast::<u8>(), outs),
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
        Weights::F16(w) | Weights::BF16(w) => {
            let bf = matches!(m.w, Weights::BF16(_));
            // SAFETY: the CPU supports the family (checked above); the
            // caller checked the shapes (`row0 + n <= rows`, inputs of `cols`).
            unsafe { super::x86_f16::matmul(family, bf, w, m.cols, inputs, row0, outs) };
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
        ($k23kern:ident, $fam:expr, $ws:tt) => {
            match f {
                Q2K => widths!($k23kern, $fam, Q2K, $ws),
                _ => widths!($k23kern, $fam, Q3K, $ws),
            }
        };
    }
    const _: () = assert!(AVX2_MAX_ROWS == 4 && AVX512_MAX_ROWS == 8, "update the width lists below");
    match family {
        KernelFamily::Avx2 => formats!(rows_k23_avx2, KernelFamily::Avx2, [1, 2, 3, 4]),
        KernelFamily::Avx512Vnni => formats!(rows_k23_avx512, KernelFamily::Avx512Vnni, [1, 2, 3, 4, 5, 6, 7, 8]),
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
/// `vcvtdq2ps`. The Q2_K / Q3_K kernels ([`super::x86_k23`]) use them
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
