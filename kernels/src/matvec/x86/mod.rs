//! x86_64 SIMD mat-vec kernels: the dispatcher alone. [`matmul_rows`]
//! picks each format's kernels, whose passes live in files of their own
//! below it, and they on [`shared`] (tiles, reductions, prefetches, the
//! integer building blocks), which imports none of them:
//!
//! - Q4_0, Q4_1, Q8_0 ([`interleaved_q4_q8`]), Q5_0, Q5_1
//!   ([`interleaved_q5`]) and the K-quants Q4_K, Q5_K, Q6_K
//!   ([`interleaved_k`]) run in the row-interleaved layout
//!   ([`crate::matvec::r16`]), through the group driver here
//!   ([`matmul_r16`]; GGUF-layout matrices are repacked a group at a time
//!   on the way, [`matmul_native`]);
//! - at 8-bit activations the K-quants run [`interleaved_k8`] on the same
//!   tiles;
//! - Q2_K and Q3_K keep GGUF's layout ([`q2k_q3k`], in row tiles here);
//! - F16 and BF16 widen in [`half`], f32 in [`dot_f32`].
//!
//! A family value can be built by anyone; running its instructions on a CPU
//! without them would be undefined behaviour, so [`matmul_rows`] checks it
//! once, and every kernel below is `unsafe` on that condition.

// Register-blocked loops index parallel arrays with the same counter.
#![allow(clippy::needless_range_loop)]

mod dot_f32;
mod half;
mod interleaved_k;
mod interleaved_k8;
mod interleaved_q4_q8;
mod interleaved_q5;
mod q2k_q3k;
mod shared;

use crate::dispatch::{
    AVX2_MAX_ROWS, AVX512_MAX_ROWS, FamilyKind, KernelFamily, ROW_TILE, interleaved_rows, max_rows_per_pass,
};
use crate::matvec::r16::k::KFormat;
use crate::matvec::r16::{GROUP, R16, R16Format, repack_group};
use crate::matvec::{Input, Matrix, Weights};
use crate::quant::QK_K;
pub(super) use dot_f32::{dot_f32_avx2, dot4_f32_avx2};
use q2k_q3k::{rows_k23_avx2, rows_k23_avx512};
use shared::{Pass, Q2K, Q3K, Tile, block_bytes};

/// Whether `family` has 8-bit-activation kernels for the K-quants
/// ([`interleaved_k8`]); a family without them runs the scalar
/// specification ([`crate::matvec::scalar8`]) at 8 bits. Every x86 family
/// has them.
pub(super) fn has_int8_kernel(family: KernelFamily) -> bool {
    matches!(family.kind(), FamilyKind::Avx2 | FamilyKind::Avx512Vnni)
}

/// Runs the family's kernel for `m`: every x86 family has one for every
/// format. `outs` is (inputs.len(), n) with `n = outs.len() / inputs.len()`;
/// shapes were checked by the caller. `family` is an x86 family (not the
/// scalar one), which this CPU runs: a [`KernelFamily`] is checked when made.
pub(super) fn matmul_rows(family: KernelFamily, m: &Matrix, inputs: &[Input], row0: usize, outs: &mut [f32]) {
    let n = outs.len() / inputs.len();
    // K-quant tiles count super-blocks of 256 elements, the others blocks of 32.
    let nsb = m.cols / QK_K;
    let native = |fmt: R16Format, base: *const u8, outs: &mut [f32]| {
        let nb = m.cols / fmt.block_elems();
        // SAFETY: `base` is the matrix's `rows * nb` GGUF blocks of `fmt`
        // (a typed slice of them, viewed as its bytes).
        let bytes = unsafe { std::slice::from_raw_parts(base, m.rows * nb * fmt.native_block_bytes()) };
        // SAFETY: the CPU supports the family (a `KernelFamily` is checked when made); shapes were
        // checked by the caller.
        unsafe { matmul_native(family, fmt, bytes, m.rows, nb, inputs, row0, outs) };
    };
    let (f, base, nb) = match m.w {
        Weights::Q4_0(w) => return native(R16Format::Q4_0, w.as_ptr().cast::<u8>(), outs),
        Weights::Q4_1(w) => return native(R16Format::Q4_1, w.as_ptr().cast::<u8>(), outs),
        Weights::Q5_0(w) => return native(R16Format::Q5_0, w.as_ptr().cast::<u8>(), outs),
        Weights::Q5_1(w) => return native(R16Format::Q5_1, w.as_ptr().cast::<u8>(), outs),
        Weights::Q8_0(w) => return native(R16Format::Q8_0, w.as_ptr().cast::<u8>(), outs),
        Weights::R16(v) => {
            // SAFETY: as above.
            unsafe { matmul_r16(family, &v, inputs, row0, outs) };
            return;
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
                    // SAFETY: every x86 family includes AVX2 (a `KernelFamily` is checked when made).
                    *o = unsafe { dot_f32_avx2(&w[r * m.cols..(r + 1) * m.cols], inp.x) };
                }
            }
            return;
        }
        Weights::F16(w) | Weights::BF16(w) => {
            let bf = matches!(m.w, Weights::BF16(_));
            // SAFETY: the CPU supports the family (a `KernelFamily` is checked when made); the
            // caller checked the shapes (`row0 + n <= rows`, inputs of `cols`).
            unsafe { half::matmul(family, bf, w, m.cols, inputs, row0, outs) };
            return;
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
            // SAFETY: the CPU supports the family (a `KernelFamily` is checked when made); the
            // caller checked `row0 + n <= m.rows`, so the tile's rows lie in
            // the weights (`rows * nb` blocks of format `f`, super-blocks for
            // the K-quants), and every input's quantized row has `m.cols / 32`
            // blocks (`nb`, or `8 * nb` for the K-quants).
            unsafe { run_gguf_pass(family, f, w, &tile, xs, o) };
            i0 += w;
        }
        t0 = t1;
    }
}

/// Picks the const-generic instance for (family, format, width).
///
/// # Safety
/// As [`rows_avx2`] / [`rows_avx512`].
unsafe fn run_gguf_pass(family: KernelFamily, f: u8, w: usize, t: &Tile, xs: &[Input], o: &mut [f32]) {
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
    match family.kind() {
        FamilyKind::Avx2 => formats!(rows_k23_avx2, FamilyKind::Avx2, [1, 2, 3, 4]),
        FamilyKind::Avx512Vnni => formats!(rows_k23_avx512, FamilyKind::Avx512Vnni, [1, 2, 3, 4, 5, 6, 7, 8]),
        FamilyKind::Scalar => unreachable!("scalar has no SIMD pass"),
    }
}

/// Computes rows `row0 .. row0 + n` (`n = outs.len() / inputs.len()`) of a
/// row-interleaved matrix for every input: the AVX2 or AVX-512 pass per
/// group of sixteen rows and chunk of activation rows.
///
/// # Safety
/// The CPU supports `family` (an x86 SIMD family); shapes were checked by
/// the caller: `row0 + n` rows exist, every input has `m.nb` blocks.
pub(super) unsafe fn matmul_r16(family: KernelFamily, m: &R16, inputs: &[Input], row0: usize, outs: &mut [f32]) {
    let tb = m.fmt.tile_bytes();
    let group_bytes = m.nb * tb;
    let n = outs.len() / inputs.len();
    let (g0, g1) = (row0 / GROUP, (row0 + n).div_ceil(GROUP));
    // SAFETY: `g1` groups exist (the matrix has at least row0 + n rows in
    // `rows.div_ceil(16)` groups), so the end pointer is inside or one past
    // the data.
    let end = unsafe { m.data.as_ptr().add(g1 * group_bytes) };
    for g in g0..g1 {
        // SAFETY: group g < g1 lies in the data.
        let tiles = unsafe { m.data.as_ptr().add(g * group_bytes) };
        // SAFETY: forwarded.
        unsafe { run_group(family, m.fmt, tiles, m.nb, end, inputs, row0, g, outs) };
    }
}

thread_local! {
    /// One group of a GGUF-layout matrix, repacked.
    static PACK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`matmul_r16`] for a GGUF-layout matrix of `rows` rows at `native`: each
/// group is repacked into per-thread scratch first.
///
/// # Safety
/// As [`matmul_r16`]; `native` holds `rows` rows of `nb` GGUF blocks of `fmt`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn matmul_native(
    family: KernelFamily,
    fmt: R16Format,
    native: &[u8],
    rows: usize,
    nb: usize,
    inputs: &[Input],
    row0: usize,
    outs: &mut [f32],
) {
    let n = outs.len() / inputs.len();
    let row_bytes = nb * fmt.native_block_bytes();
    PACK.with_borrow_mut(|pack| {
        pack.clear();
        pack.resize(nb * fmt.tile_bytes(), 0);
        for g in row0 / GROUP..(row0 + n).div_ceil(GROUP) {
            let live = (rows - g * GROUP).min(GROUP);
            repack_group(fmt, &native[g * GROUP * row_bytes..], live, nb, pack);
            let tiles = pack.as_ptr();
            // SAFETY: forwarded; `pack` holds the group's nb tiles.
            unsafe { run_group(family, fmt, tiles, nb, tiles.add(pack.len()), inputs, row0, g, outs) };
        }
    });
}

/// Group `g`'s rows that fall in `row0 .. row0 + n`, for every input, in
/// chunks of the family's widest pass. Whole groups are written in place;
/// a group cut by the range goes through a buffer.
///
/// # Safety
/// `tiles` points at the group's `nb` tiles of `fmt`; `end` bounds
/// prefetching; otherwise as [`matmul_r16`].
#[allow(clippy::too_many_arguments)]
unsafe fn run_group(
    family: KernelFamily,
    fmt: R16Format,
    tiles: *const u8,
    nb: usize,
    end: *const u8,
    inputs: &[Input],
    row0: usize,
    g: usize,
    outs: &mut [f32],
) {
    let n = outs.len() / inputs.len();
    let (lo, hi) = ((g * GROUP).max(row0), (g * GROUP + GROUP).min(row0 + n));
    let whole = lo == g * GROUP && hi == g * GROUP + GROUP;
    let max_w = max_rows_per_pass(family);
    let mut buf = [[0.0f32; GROUP]; 8];
    let mut i0 = 0;
    while i0 < inputs.len() {
        let w = (inputs.len() - i0).min(max_w);
        let xs = &inputs[i0..i0 + w];
        let mut ptrs = [std::ptr::null_mut::<f32>(); 8];
        for i in 0..w {
            ptrs[i] = if whole {
                // SAFETY: output (i0 + i, g*16 - row0 .. + 16) lies in outs.
                unsafe { outs.as_mut_ptr().add((i0 + i) * n + g * GROUP - row0) }
            } else {
                buf[i].as_mut_ptr()
            };
        }
        // SAFETY: forwarded; every pointer has sixteen writable floats.
        unsafe { run_interleaved_pass(family, fmt, w, Pass { tiles, nb, end, xs, o: &ptrs }) };
        if !whole {
            for i in 0..w {
                let dst = (i0 + i) * n + lo - row0;
                outs[dst..dst + hi - lo].copy_from_slice(&buf[i][lo - g * GROUP..hi - g * GROUP]);
            }
        }
        i0 += w;
    }
}

/// Picks the format's passes: Q4_0 / Q4_1 / Q8_0 ([`interleaved_q4_q8`]),
/// Q5_0 / Q5_1 ([`interleaved_q5`]) or the K-quants ([`interleaved_k`]).
///
/// # Safety
/// As the passes: the CPU supports `family`; `pass.tiles` points at the
/// group's `pass.nb` tiles of `fmt` (super-blocks for the K-quants),
/// `pass.end` bounds prefetching, `pass.xs.len() == w`, every `pass.o[i]`
/// (i < w) has sixteen writable floats.
unsafe fn run_interleaved_pass(family: KernelFamily, fmt: R16Format, w: usize, pass: Pass) {
    // SAFETY (all three): forwarded from the caller.
    if fmt.has_high_bits() {
        unsafe { interleaved_q5::run_pass(family, fmt, w, pass) }
    } else if let R16Format::K(kf) = fmt {
        // The inputs carry 8-bit rows only when the call runs at 8 bits
        // (`matvec::uses_int8`), and then all of them do.
        if pass.xs[0].q8.nsb > 0 {
            unsafe { interleaved_k8::run_pass(family, kf, w, pass) }
        } else {
            unsafe { interleaved_k::run_pass(family, kf, w, pass) }
        }
    } else {
        unsafe { interleaved_q4_q8::run_pass(family, fmt, w, pass) }
    }
}
