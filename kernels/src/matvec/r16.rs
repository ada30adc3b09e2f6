//! The row-interleaved layout of Q4_0, Q4_1 and Q8_0 weights ("R16"): sixteen
//! weight rows side by side, so that a 512-bit register holds the same two
//! elements of sixteen rows and one `vpdpwssd` against a broadcast pair of
//! activation quants advances sixteen outputs at once.
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
//! m:  16 × f16      (Q4_1 only) the sixteen rows' block mins
//! qs: chunks of 32 bytes; in chunk s, bytes 2j and 2j+1 are row j's
//!     quant bytes 2s and 2s+1 (Q4: s = 0..8, each byte holding elements
//!     e and e+16 in its low and high nibble; Q8_0: s = 0..16)
//! ```
//!
//! Widened to sixteen bits, a chunk is one register of 32 values whose
//! 32-bit lane `j` holds row `j`'s elements `2s, 2s+1` (for Q4 the low
//! nibbles; the high nibbles give elements `2s+16, 2s+17`). Repacking is a
//! transposition of 16-bit words and needs no arithmetic, so the repacked
//! matrix holds exactly the weights of the original.

use super::{Matrix, MatrixError, Weights};
use crate::quant::{GgmlType, QK};

/// Rows per group.
pub const GROUP: usize = 16;

/// The formats with a row-interleaved layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum R16Format {
    Q4_0,
    Q4_1,
    Q8_0,
}

impl R16Format {
    /// The format of `ty`, if it has one.
    pub fn of(ty: GgmlType) -> Option<Self> {
        match ty {
            GgmlType::Q4_0 => Some(Self::Q4_0),
            GgmlType::Q4_1 => Some(Self::Q4_1),
            GgmlType::Q8_0 => Some(Self::Q8_0),
            _ => None,
        }
    }

    pub fn ggml_type(self) -> GgmlType {
        match self {
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// Bytes of one GGUF block: scale (and min), then quants.
    pub const fn native_block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q8_0 => 34,
        }
    }

    /// Offset of the quants in a GGUF block.
    pub const fn native_qs_offset(self) -> usize {
        match self {
            Self::Q4_1 => 4,
            _ => 2,
        }
    }

    /// Quant bytes per row and block (16 for the nibble formats, 32 for Q8_0).
    pub const fn qs_bytes(self) -> usize {
        match self {
            Self::Q8_0 => QK,
            _ => QK / 2,
        }
    }

    /// Offset of the quant chunks in a tile.
    pub const fn qs_offset(self) -> usize {
        match self {
            Self::Q4_1 => 4 * GROUP,
            _ => 2 * GROUP,
        }
    }

    /// Bytes of one tile (sixteen rows × one block): 288, 320 or 544.
    pub const fn tile_bytes(self) -> usize {
        self.qs_offset() + GROUP * self.qs_bytes()
    }
}

/// A borrowed row-interleaved matrix (the kernels' view).
#[derive(Clone, Copy, Debug)]
pub struct R16<'a> {
    pub fmt: R16Format,
    /// `groups * nb` tiles.
    pub data: &'a [u8],
    /// Blocks per row.
    pub nb: usize,
}

impl R16<'_> {
    /// The tile of (group `g`, block `b`).
    #[inline]
    pub fn tile(&self, g: usize, b: usize) -> &[u8] {
        let tb = self.fmt.tile_bytes();
        &self.data[(g * self.nb + b) * tb..(g * self.nb + b + 1) * tb]
    }

    /// Row `j` (0..16) of a tile: (scale, min (Q4_1; else 0), the block's 32
    /// integer weights in element order: Q8_0 the signed byte, Q4_1 the
    /// nibble, Q4_0 the nibble − 8).
    pub fn unpack(fmt: R16Format, tile: &[u8], j: usize) -> (u16, u16, [i32; QK]) {
        let word = |o: usize| u16::from_le_bytes([tile[o], tile[o + 1]]);
        let d = word(2 * j);
        let m = if fmt == R16Format::Q4_1 { word(2 * GROUP + 2 * j) } else { 0 };
        let qs = &tile[fmt.qs_offset()..];
        let q = std::array::from_fn(|e| match fmt {
            R16Format::Q8_0 => qs[(e / 2) * 32 + 2 * j + e % 2] as i8 as i32,
            _ => {
                let byte = qs[((e % 16) / 2) * 32 + 2 * j + e % 2];
                let nib = if e < 16 { byte & 0x0F } else { byte >> 4 } as i32;
                if fmt == R16Format::Q4_0 { nib - 8 } else { nib }
            }
        });
        (d, m, q)
    }
}

/// 64 bytes at a 64-byte boundary: the storage unit of [`Repacked`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// An owned row-interleaved copy of a Q4_0 / Q4_1 / Q8_0 matrix, 64-byte
/// aligned.
#[derive(Clone)]
pub struct Repacked {
    fmt: R16Format,
    rows: usize,
    cols: usize,
    lines: Vec<Line>,
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
        let Some(fmt) = R16Format::of(ty) else { return Ok(None) };
        if !cols.is_multiple_of(QK) {
            return Err(MatrixError::Columns { ty: ty.name(), rows, cols, block: QK });
        }
        let nb = cols / QK;
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
        let mut lines = vec![Line([0; 64]); len.div_ceil(64)];
        // SAFETY: `lines` is `len.div_ceil(64) * 64 >= len` initialized bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), len) };
        for g in 0..groups {
            let live = (rows - g * GROUP).min(GROUP);
            repack_group(fmt, &bytes[g * GROUP * nb * bb..], live, nb, &mut out[g * nb * fmt.tile_bytes()..]);
        }
        Ok(Some(Repacked { fmt, rows, cols, lines, len }))
    }

    /// The kernel view.
    pub fn matrix(&self) -> Matrix<'_> {
        // SAFETY: `lines` holds at least `len` initialized bytes.
        let data = unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.len) };
        Matrix { rows: self.rows, cols: self.cols, w: Weights::R16(R16 { fmt: self.fmt, data, nb: self.cols / QK }) }
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
    let (bb, tb, qo, nq) = (fmt.native_block_bytes(), fmt.tile_bytes(), fmt.qs_offset(), fmt.qs_bytes());
    for b in 0..nb {
        let tile = &mut out[b * tb..(b + 1) * tb];
        for j in 0..live {
            let blk = &native[(j * nb + b) * bb..(j * nb + b + 1) * bb];
            tile[2 * j..2 * j + 2].copy_from_slice(&blk[0..2]);
            if fmt == R16Format::Q4_1 {
                tile[2 * GROUP + 2 * j..2 * GROUP + 2 * j + 2].copy_from_slice(&blk[2..4]);
            }
            let qs = &blk[fmt.native_qs_offset()..fmt.native_qs_offset() + nq];
            for s in 0..nq / 2 {
                let at = qo + s * 32 + 2 * j;
                tile[at..at + 2].copy_from_slice(&qs[2 * s..2 * s + 2]);
            }
        }
        for j in live..GROUP {
            tile[2 * j..2 * j + 2].fill(0);
            if fmt == R16Format::Q4_1 {
                tile[2 * GROUP + 2 * j..2 * GROUP + 2 * j + 2].fill(0);
            }
            for s in 0..nq / 2 {
                let at = qo + s * 32 + 2 * j;
                tile[at..at + 2].fill(0);
            }
        }
    }
}
