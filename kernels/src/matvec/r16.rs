//! The row-interleaved layout of Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights
//! ("R16"), and of the K-quants ([`k`]): sixteen weight rows side by side, so that a 512-bit register
//! holds the same two elements of sixteen rows and one `vpdpwssd` against a
//! broadcast pair of activation quants advances sixteen outputs at once.
//!
//! # Why
//!
//! In GGUF's own layout a register holds 32 elements of *one* row, and an
//! output's partial sums end up spread over lanes that must be scaled per
//! block (a lane permutation, a conversion and an FMA for every two blocks
//! and every activation row) and reduced horizontally at the end. In a
//! speculative verify block that per-row float work is paid once per
//! activation row and cost more than the integer dot products themselves.
//! With sixteen rows interleaved, lane `j` of every register belongs to row
//! `j`: a block's integer sum arrives whole in its lane, and the block's
//! scale is applied with one FMA per sixteen outputs. The specification
//! ([`super::scalar`]) is the serial chain this gives: one exact integer
//! sum per block, one FMA per block, in block order.
//!
//! # Layout
//!
//! A matrix of `rows` rows and `nb` blocks per row becomes
//! `groups = rows.div_ceil(16)` groups of sixteen rows (the last one padded
//! with zero rows), stored group after group; a group is `nb` *tiles*, one
//! per block index, each [`R16Format::tile_bytes`] long:
//!
//! ```text
//! d:  16 × f16      the sixteen rows' block scales, row 0 first
//! m:  16 × f16      (Q4_1, Q5_1 only) the sixteen rows' block mins
//! qh: 16 × u32      (Q5_0, Q5_1 only) each row's 32 fifth bits, one
//!                   little-endian word per row, in the order of the next
//!                   section
//! qs: chunks of 32 bytes; in chunk s, bytes 2j and 2j+1 are row j's
//!     quant bytes 2s and 2s+1 (Q4 and Q5: s = 0..8, each byte holding
//!     the low four bits of elements e and e+16 in its low and high
//!     nibble; Q8_0: s = 0..16)
//! ```
//!
//! Widened to sixteen bits, a chunk is one register of 32 values whose
//! 32-bit lane `j` holds row `j`'s elements `2s, 2s+1` (for the nibble
//! formats the low nibbles; the high nibbles give elements `2s+16, 2s+17`).
//! Repacking moves bits and needs no arithmetic, so the repacked matrix
//! holds exactly the weights of the original.
//!
//! # The fifth bits (Q5_0, Q5_1)
//!
//! GGUF keeps a block's fifth bits as one 32-bit word, bit `e` for element
//! `e`. In a widened chunk `s`, lane `j` needs four of them at fixed
//! places: those of elements `2s` and `2s+1` at bits 4 and 20 (the top of
//! the low nibbles in the lane's two 16-bit halves), those of elements
//! `2s+16` and `2s+17` at bits 8 and 24 (the top of the high nibbles, which
//! the kernels keep as `byte & 0xF0`, sixteen times the nibble). The tile
//! stores each row's word permuted so that *one* shift of the whole word
//! by `k_s` ([`q5_shift`]: `s − 4` for `s < 4`, a left shift, and `s` for
//! `s ≥ 4`, a right shift) puts all four in place: element `e` of chunk `s`
//! sits at its target plus `k_s` ([`q5_bit`]). The 32 positions are
//! distinct: chunks 0..4 use bits 0..8 and 16..24, chunks 4..8 bits 8..16
//! and 24..32. A kernel then pays one shift per chunk and one masked OR
//! per nibble register, and AVX2 loads eight rows' words with one load.

pub mod k;

use super::{Matrix, MatrixError, Weights};
use crate::pages::{HUGE_PAGE, Region, WeightArena};
use crate::quant::{GgmlType, QK, QK_K};
use k::KFormat;
use std::sync::Arc;

/// Rows per group.
pub const GROUP: usize = 16;
// A row tile of the multi-row pass and a thread's band of output rows
// ([`crate::dispatch::ROW_TILE`]) hold whole groups.
const _: () = assert!(crate::dispatch::ROW_TILE.is_multiple_of(GROUP));

/// The formats with a row-interleaved layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum R16Format {
    Q4_0,
    Q4_1,
    Q8_0,
    Q5_0,
    Q5_1,
    /// The K-quants: one tile per 256-element super-block ([`k`]).
    K(KFormat),
}

/// The shift `k_s` that brings the fifth bits of chunk `s` (0..8) of a
/// permuted row word to their places: positive is a right shift, negative a
/// left one (module docs).
pub const fn q5_shift(s: usize) -> i32 {
    if s < 4 { s as i32 - 4 } else { s as i32 }
}

/// Where the fifth bit of element `e` (0..32) lies in a tile's row word:
/// its target in the widened chunk (bit 4 or 20 for a low nibble, 8 or 24
/// for a high one, by the element's parity) plus its chunk's [`q5_shift`].
pub const fn q5_bit(e: usize) -> u32 {
    let (s, odd, high) = ((e % 16) / 2, e % 2, e / 16);
    (4 + 16 * odd as i32 + 4 * high as i32 + q5_shift(s)) as u32
}

/// The permuted row word of a GGUF block's fifth bits (`qh` as a
/// little-endian `u32`, bit `e` for element `e`).
pub fn q5_permute(qh: u32) -> u32 {
    (0..QK).filter(|&e| (qh >> e) & 1 == 1).fold(0, |w, e| w | 1 << q5_bit(e))
}

impl R16Format {
    /// The format of `ty`, if it has one.
    pub fn of(ty: GgmlType) -> Option<Self> {
        match ty {
            GgmlType::Q4_0 => Some(Self::Q4_0),
            GgmlType::Q4_1 => Some(Self::Q4_1),
            GgmlType::Q8_0 => Some(Self::Q8_0),
            GgmlType::Q5_0 => Some(Self::Q5_0),
            GgmlType::Q5_1 => Some(Self::Q5_1),
            GgmlType::Q4K => Some(Self::K(KFormat::Q4K)),
            GgmlType::Q5K => Some(Self::K(KFormat::Q5K)),
            GgmlType::Q6K => Some(Self::K(KFormat::Q6K)),
            _ => None,
        }
    }

    /// Elements per block (a tile's columns): 32, or 256 for the K-quants.
    pub const fn block_elems(self) -> usize {
        match self {
            Self::K(_) => QK_K,
            _ => QK,
        }
    }

    pub fn ggml_type(self) -> GgmlType {
        match self {
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::K(KFormat::Q4K) => GgmlType::Q4K,
            Self::K(KFormat::Q5K) => GgmlType::Q5K,
            Self::K(KFormat::Q6K) => GgmlType::Q6K,
        }
    }

    /// Whether blocks carry a min (`w = d·q + m`): Q4_1 and Q5_1.
    pub const fn has_min(self) -> bool {
        matches!(self, Self::Q4_1 | Self::Q5_1)
    }

    /// Whether blocks carry fifth bits: Q5_0 and Q5_1.
    pub const fn has_high_bits(self) -> bool {
        matches!(self, Self::Q5_0 | Self::Q5_1)
    }

    /// Bytes of one GGUF block: scale (and min), (fifth bits,) then quants
    /// (`block_q4_0`, `block_q4_1`, `block_q8_0`, `block_q5_0`, `block_q5_1`).
    pub const fn native_block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::K(k) => k.native_block_bytes(),
        }
    }

    /// Offset of the fifth bits `qh` in a GGUF block (Q5 formats: right
    /// after the scale and min).
    const fn native_qh_offset(self) -> usize {
        if self.has_min() { 4 } else { 2 }
    }

    /// Offset of the quants in a GGUF block.
    pub const fn native_qs_offset(self) -> usize {
        self.native_qh_offset() + if self.has_high_bits() { 4 } else { 0 }
    }

    /// Quant bytes per row and block (16 for the nibble formats, 32 for Q8_0).
    pub const fn qs_bytes(self) -> usize {
        match self {
            Self::Q8_0 => QK,
            _ => QK / 2,
        }
    }

    /// Offset of the sixteen mins in a tile (formats with a min).
    pub const fn min_offset(self) -> usize {
        2 * GROUP
    }

    /// Offset of the sixteen permuted fifth-bit words in a tile (Q5
    /// formats): right after the scales and mins.
    pub const fn qh_offset(self) -> usize {
        if self.has_min() { 4 * GROUP } else { 2 * GROUP }
    }

    /// Offset of the quant chunks in a tile.
    pub const fn qs_offset(self) -> usize {
        self.qh_offset() + if self.has_high_bits() { 4 * GROUP } else { 0 }
    }

    /// Bytes of one tile (sixteen rows × one block): 288 (Q4_0), 320
    /// (Q4_1), 544 (Q8_0), 352 (Q5_0), 384 (Q5_1), or sixteen super-blocks
    /// of a K-quant; the same bytes per weight as the GGUF blocks.
    pub const fn tile_bytes(self) -> usize {
        match self {
            Self::K(k) => k.tile_bytes(),
            _ => self.qs_offset() + GROUP * self.qs_bytes(),
        }
    }
}

/// A borrowed row-interleaved matrix (the kernels' view).
#[derive(Clone, Copy, Debug)]
pub struct R16<'a> {
    pub fmt: R16Format,
    /// `groups * nb` tiles.
    pub data: &'a [u8],
    /// Blocks per row (super-blocks for the K-quants).
    pub nb: usize,
}

impl R16<'_> {
    /// The tile of (group `g`, block `b`).
    #[inline]
    pub fn tile(&self, g: usize, b: usize) -> &[u8] {
        let tb = self.fmt.tile_bytes();
        &self.data[(g * self.nb + b) * tb..(g * self.nb + b + 1) * tb]
    }

    /// Row `j` (0..16) of a tile: (scale, min (Q4_1, Q5_1; else 0), the
    /// block's 32 integer weights in element order: Q8_0 the signed byte,
    /// Q4_1 the nibble, Q4_0 the nibble − 8, Q5_1 the 5-bit quant, Q5_0 the
    /// 5-bit quant − 16). Not for the K-quants ([`k::native_block`]).
    pub fn unpack(fmt: R16Format, tile: &[u8], j: usize) -> (u16, u16, [i32; QK]) {
        let word = |o: usize| u16::from_le_bytes([tile[o], tile[o + 1]]);
        let d = word(2 * j);
        let m = if fmt.has_min() { word(fmt.min_offset() + 2 * j) } else { 0 };
        let high = if fmt.has_high_bits() {
            let o = fmt.qh_offset() + 4 * j;
            u32::from_le_bytes([tile[o], tile[o + 1], tile[o + 2], tile[o + 3]])
        } else {
            0
        };
        let qs = &tile[fmt.qs_offset()..];
        let q = std::array::from_fn(|e| {
            if fmt == R16Format::Q8_0 {
                return qs[(e / 2) * 32 + 2 * j + e % 2] as i8 as i32;
            }
            let byte = qs[((e % 16) / 2) * 32 + 2 * j + e % 2];
            let nib = if e < 16 { byte & 0x0F } else { byte >> 4 } as i32;
            let fifth = ((high >> q5_bit(e)) & 1) as i32;
            match fmt {
                R16Format::Q4_0 => nib - 8,
                R16Format::Q5_0 => (nib | fifth << 4) - 16,
                R16Format::Q5_1 => nib | fifth << 4,
                _ => nib,
            }
        });
        (d, m, q)
    }
}

/// 64 bytes at a 64-byte boundary: the storage unit of [`Repacked`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// `n` zero lines from the allocator's zeroed memory: fresh pages are
/// zero without being written, so the repacking threads fault them in.
fn zeroed_lines(n: usize) -> Vec<Line> {
    if n == 0 {
        return Vec::new();
    }
    let layout = std::alloc::Layout::array::<Line>(n).expect("a matrix's size fits the address space");
    // SAFETY: the layout has a nonzero size; a null result is handled; the
    // memory is `n` initialized (all-zero) `Line`s, a valid bit pattern,
    // allocated by the global allocator with exactly `Vec<Line>`'s layout
    // for capacity `n`.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Vec::from_raw_parts(p.cast::<Line>(), n, n)
    }
}

/// Where a [`Repacked`] matrix's bytes live: its own heap lines, or a
/// region of a [`WeightArena`] (huge pages advised; [`crate::pages`]) that
/// it shares with the rest of its model, or has alone when it is large.
#[derive(Clone)]
enum Store {
    Own(Vec<Line>),
    Arena(Arc<WeightArena>, Region),
}

impl Store {
    /// A zeroed store of at least `len` bytes: a region of `arena` when it
    /// has room, else an arena of its own for a matrix of at least one huge
    /// page (2 MiB), else heap lines.
    fn zeroed(len: usize, arena: Option<&Arc<WeightArena>>) -> Self {
        if let Some(r) = arena.and_then(|a| a.take(len)) {
            return Store::Arena(Arc::clone(arena.expect("took from it")), r);
        }
        if len >= HUGE_PAGE {
            let own = Arc::new(WeightArena::new(len));
            if let Some(r) = own.take(len) {
                return Store::Arena(own, r);
            }
        }
        Store::Own(zeroed_lines(len.div_ceil(64)))
    }

    /// The first `len` bytes, writable; only while the matrix is built.
    fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        match self {
            // SAFETY: the lines are `len.div_ceil(64) * 64 >= len`
            // initialized bytes, borrowed mutably through `self`.
            Store::Own(lines) => unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), len) },
            // SAFETY: the region is this store's alone until the matrix is
            // built and shared (clones share it read-only afterwards), and
            // it is at least `len` bytes.
            Store::Arena(a, r) => unsafe { &mut a.bytes_mut(r)[..len] },
        }
    }

    fn bytes(&self, len: usize) -> &[u8] {
        match self {
            // SAFETY: the lines hold at least `len` initialized bytes.
            Store::Own(lines) => unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u8>(), len) },
            // SAFETY: the arena's region, no longer written (module docs of
            // `Store::bytes_mut`).
            Store::Arena(a, r) => unsafe { &a.bytes(r)[..len] },
        }
    }
}

/// An owned row-interleaved copy of a Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 /
/// Q4_K / Q5_K / Q6_K matrix, 64-byte aligned.
#[derive(Clone)]
pub struct Repacked {
    fmt: R16Format,
    rows: usize,
    cols: usize,
    lines: Store,
    len: usize,
}

impl std::fmt::Debug for Repacked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repacked")
            .field("fmt", &self.fmt)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("bytes", &self.len)
            .finish()
    }
}

impl Repacked {
    /// Repacks a (rows, cols) matrix of `ty` given as its GGUF bytes (any
    /// alignment). Shapes and lengths are checked as [`Matrix::from_bytes`]
    /// checks them; `Ok(None)` for a type without this layout.
    pub fn from_native(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<Option<Self>, MatrixError> {
        Self::from_native_in(None, ty, bytes, rows, cols)
    }

    /// Bytes the row-interleaved copy of a (rows, cols) matrix of `ty`
    /// holds, to size a [`WeightArena`]; `None` for a type without this
    /// layout or a shape [`Self::from_native`] refuses.
    pub fn packed_bytes(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        let fmt = R16Format::of(ty)?;
        if !cols.is_multiple_of(fmt.block_elems()) {
            return None;
        }
        rows.div_ceil(GROUP).checked_mul(cols / fmt.block_elems())?.checked_mul(fmt.tile_bytes())
    }

    /// As [`Self::from_native`], the copy carved from `arena` when it has
    /// room ([`crate::pages`]: a model's matrices share one mapping on huge
    /// pages); without one, or when it is full, a matrix of 2 MiB or more
    /// gets an arena of its own (so the examples and benches stream large
    /// matrices from huge pages, as the runtime does; its last huge page
    /// may be mostly empty) and a smaller one heap memory.
    pub fn from_native_in(
        arena: Option<&Arc<WeightArena>>,
        ty: GgmlType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Option<Self>, MatrixError> {
        let Some(fmt) = R16Format::of(ty) else { return Ok(None) };
        let block = fmt.block_elems();
        if !cols.is_multiple_of(block) {
            return Err(MatrixError::Columns { ty: ty.name(), rows, cols, block });
        }
        let nb = cols / block;
        let bb = fmt.native_block_bytes();
        let expected = nb.checked_mul(bb).and_then(|rb| rb.checked_mul(rows));
        if expected != Some(bytes.len()) {
            return Err(MatrixError::Length {
                ty: ty.name(),
                rows,
                cols,
                expected: expected.unwrap_or(usize::MAX),
                got: bytes.len(),
            });
        }
        let groups = rows.div_ceil(GROUP);
        let len = groups * nb * fmt.tile_bytes();
        let mut lines = Store::zeroed(len, arena);
        let out = lines.bytes_mut(len);
        let group_bytes = nb * fmt.tile_bytes();
        let pack = |g0: usize, out: &mut [u8]| {
            for (k, dst) in out.chunks_mut(group_bytes).enumerate() {
                let g = g0 + k;
                let live = (rows - g * GROUP).min(GROUP);
                repack_group(fmt, &bytes[g * GROUP * nb * bb..], live, nb, dst);
            }
        };
        // Large matrices are repacked on every available core (a 1.5B
        // model's gigabyte of weights is most of its load time otherwise).
        let threads = if len < (8 << 20) { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get()) };
        let per = groups.div_ceil(threads.min(groups).max(1));
        std::thread::scope(|scope| {
            for (t, part) in out.chunks_mut(per * group_bytes).enumerate() {
                scope.spawn(move || pack(t * per, part));
            }
        });
        Ok(Some(Repacked { fmt, rows, cols, lines, len }))
    }

    /// The kernel view.
    pub fn matrix(&self) -> Matrix<'_> {
        let data = self.lines.bytes(self.len);
        let nb = self.cols / self.fmt.block_elems();
        Matrix { rows: self.rows, cols: self.cols, w: Weights::R16(R16 { fmt: self.fmt, data, nb }) }
    }

    /// The arena the copy lives in, if any ([`crate::pages`]).
    pub fn arena(&self) -> Option<&Arc<WeightArena>> {
        match &self.lines {
            Store::Arena(a, _) => Some(a),
            Store::Own(_) => None,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.len
    }

    pub fn format(&self) -> R16Format {
        self.fmt
    }
}

/// Writes the `nb` tiles of one group from `live` (1..=16) consecutive GGUF
/// rows at the start of `native`; rows past `live` stay as `out` has them
/// (zeros from the caller).
///
/// # Panics
/// If `native` holds fewer than `live` rows or `out` fewer than `nb` tiles
/// (the callers size both).
pub fn repack_group(fmt: R16Format, native: &[u8], live: usize, nb: usize, out: &mut [u8]) {
    if let R16Format::K(k) = fmt {
        return k::repack_group(k, native, live, nb, out);
    }
    let (bb, tb, qo, nq) = (fmt.native_block_bytes(), fmt.tile_bytes(), fmt.qs_offset(), fmt.qs_bytes());
    let (mo, ho) = (fmt.min_offset(), fmt.qh_offset());
    for b in 0..nb {
        let tile = &mut out[b * tb..(b + 1) * tb];
        for j in 0..live {
            let blk = &native[(j * nb + b) * bb..(j * nb + b + 1) * bb];
            tile[2 * j..2 * j + 2].copy_from_slice(&blk[0..2]);
            if fmt.has_min() {
                tile[mo + 2 * j..mo + 2 * j + 2].copy_from_slice(&blk[2..4]);
            }
            if fmt.has_high_bits() {
                let at = fmt.native_qh_offset();
                let qh = u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
                tile[ho + 4 * j..ho + 4 * j + 4].copy_from_slice(&q5_permute(qh).to_le_bytes());
            }
            let qs = &blk[fmt.native_qs_offset()..fmt.native_qs_offset() + nq];
            for s in 0..nq / 2 {
                let at = qo + s * 32 + 2 * j;
                tile[at..at + 2].copy_from_slice(&qs[2 * s..2 * s + 2]);
            }
        }
        for j in live..GROUP {
            tile[2 * j..2 * j + 2].fill(0);
            if fmt.has_min() {
                tile[mo + 2 * j..mo + 2 * j + 2].fill(0);
            }
            if fmt.has_high_bits() {
                tile[ho + 4 * j..ho + 4 * j + 4].fill(0);
            }
            for s in 0..nq / 2 {
                let at = qo + s * 32 + 2 * j;
                tile[at..at + 2].fill(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed bytes of `m`.
    fn packed(m: &Repacked) -> &[u8] {
        match m.matrix().w {
            Weights::R16(r) => r.data,
            _ => unreachable!("a repacked matrix"),
        }
    }

    #[test]
    fn a_copy_in_an_arena_holds_the_bytes_of_one_on_the_heap() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut noise = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        };
        for (ty, rows, cols) in [(GgmlType::Q8_0, 40, 512), (GgmlType::Q4K, 37, 512), (GgmlType::Q8_0, 4096, 512)] {
            let native = noise(ty.row_bytes(cols).unwrap() * rows);
            let want = Repacked::packed_bytes(ty, rows, cols).unwrap();
            let alone = Repacked::from_native(ty, &native, rows, cols).unwrap().unwrap();
            assert_eq!(alone.bytes(), want, "{ty:?}: packed_bytes sizes the copy");
            // A matrix of a huge page or more gets an arena of its own.
            assert_eq!(alone.arena().is_some(), want >= HUGE_PAGE, "{ty:?} {rows}x{cols}");
            let arena = Arc::new(WeightArena::new(2 * want.next_multiple_of(4096)));
            let a = Repacked::from_native_in(Some(&arena), ty, &native, rows, cols).unwrap().unwrap();
            let b = Repacked::from_native_in(Some(&arena), ty, &native, rows, cols).unwrap().unwrap();
            assert!(
                a.arena().is_some_and(|x| Arc::ptr_eq(x, &arena)) && b.arena().is_some_and(|x| Arc::ptr_eq(x, &arena))
            );
            assert_ne!(packed(&a).as_ptr(), packed(&b).as_ptr(), "two matrices, two regions");
            // An arena without room: the copy goes elsewhere, with the same bytes.
            let full = Arc::new(WeightArena::new(0));
            let c = Repacked::from_native_in(Some(&full), ty, &native, rows, cols).unwrap().unwrap();
            assert!(!c.arena().is_some_and(|x| Arc::ptr_eq(x, &full)), "a copy in an arena without room");
            let cloned = a.clone();
            for m in [&alone, &a, &b, &c, &cloned] {
                assert_eq!(packed(m).as_ptr() as usize % 64, 0, "tiles are 64-byte aligned");
            }
            for m in [&a, &b, &c, &cloned] {
                assert!(packed(m) == packed(&alone), "{ty:?}: the bytes depend on where they live");
            }
        }
    }

    #[test]
    fn q5_bit_positions_are_a_permutation_of_the_word() {
        let mut seen = 0u64;
        for e in 0..QK {
            let p = q5_bit(e);
            assert!(p < 32 && seen & (1 << p) == 0, "element {e} at bit {p}");
            seen |= 1 << p;
        }
        assert_eq!(seen, 0xFFFF_FFFF);
        for e in 0..QK {
            assert_eq!(q5_permute(1 << e), 1 << q5_bit(e));
        }
    }

    #[test]
    fn one_shift_per_chunk_puts_its_four_fifth_bits_at_the_nibble_tops() {
        for s in 0..8 {
            let k = q5_shift(s);
            let shifted = |w: u32| if k < 0 { w << -k } else { w >> k };
            // (element, target): low nibbles at bits 4 and 20, high at 8 and 24.
            for (e, target) in [(2 * s, 4), (2 * s + 1, 20), (2 * s + 16, 8), (2 * s + 17, 24)] {
                assert_eq!(shifted(q5_permute(1 << e)), 1 << target, "chunk {s} element {e}");
            }
        }
    }

    #[test]
    fn unpacking_a_q5_tile_gives_every_rows_gguf_quants() {
        for fmt in [R16Format::Q5_0, R16Format::Q5_1] {
            let (live, nb, bb) = (13, 2, fmt.native_block_bytes());
            let mut state = 0x1234_5678_9ABC_DEF1u64;
            let native: Vec<u8> = (0..live * nb * bb)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let mut out = vec![0xEEu8; nb * fmt.tile_bytes()];
            repack_group(fmt, &native, live, nb, &mut out);
            for b in 0..nb {
                let tile = &out[b * fmt.tile_bytes()..(b + 1) * fmt.tile_bytes()];
                for j in 0..GROUP {
                    let (d, m, q) = R16::unpack(fmt, tile, j);
                    if j >= live {
                        assert_eq!((d, m), (0, 0));
                        let zero = if fmt == R16Format::Q5_0 { -16 } else { 0 };
                        assert!(q.iter().all(|&v| v == zero), "{fmt:?} padding row {j}");
                        continue;
                    }
                    let blk = &native[(j * nb + b) * bb..(j * nb + b + 1) * bb];
                    let o = fmt.native_qh_offset();
                    let want = crate::quant::dequant::q5_quants(
                        &blk[o..o + 4].try_into().unwrap(),
                        &blk[o + 4..o + 20].try_into().unwrap(),
                    );
                    let offset = if fmt == R16Format::Q5_0 { 16 } else { 0 };
                    assert_eq!(q, want.map(|v| v as i32 - offset), "{fmt:?} block {b} row {j}");
                    assert_eq!(d, u16::from_le_bytes([blk[0], blk[1]]));
                    if fmt.has_min() {
                        assert_eq!(m, u16::from_le_bytes([blk[2], blk[3]]));
                    }
                }
            }
        }
    }
}
