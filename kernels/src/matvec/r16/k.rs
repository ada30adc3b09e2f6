//! The row-interleaved layout of the K-quants (Q4_K, Q5_K, Q6_K): sixteen
//! weight rows side by side, one *tile* per super-block of 256 elements, so
//! that a register's 32-bit lane `j` holds two elements of row `j` and a
//! sub-block's integer sum arrives whole in that lane, as for the formats of
//! [`super`].
//!
//! # The rule
//!
//! A per-row field of `L` bytes (`L` even) becomes `L / 2` *chunks* of 32
//! bytes: in chunk `s`, bytes `2j` and `2j + 1` are row `j`'s bytes `2s` and
//! `2s + 1`. Widened to sixteen bits, a chunk is one register whose lane `j`
//! holds row `j`'s bytes `2s`, `2s + 1`. The sub-block scales instead become
//! *planes* of sixteen bytes (plane `k`, byte `j`: row `j`'s scale byte
//! `k`), which widen to one 32-bit lane per row. Repacking moves bytes and
//! nothing else, so a tile holds exactly its rows' GGUF bytes, as many of
//! them.
//!
//! ```text
//! Q4_K (2,304 bytes)         Q5_K (2,816 bytes)         Q6_K (3,360 bytes)
//! d       1 chunk   0        d       1 chunk   0        d       1 chunk    0
//! dmin    1 chunk  32        dmin    1 chunk  32        scales 16 planes  32
//! scales 12 planes 64        scales 12 planes 64        qh     32 chunks 288
//! qs     64 chunks 256       qh     16 chunks 256       ql     64 chunks 1312
//!                            qs     64 chunks 768
//! ```
//!
//! # What a chunk holds
//!
//! - **Q4_K / Q5_K `qs`**: chunk `16k + s` is bytes `32k + 2s`, `32k + 2s + 1`:
//!   the low nibbles are elements `2s`, `2s + 1` of sub-block `2k`, the high
//!   nibbles the same elements of sub-block `2k + 1`. Q5_K's `qh` chunk `s`
//!   is `qh[2s]`, `qh[2s + 1]`, whose bit `i` is the fifth bit of those
//!   elements in sub-block `i`: one chunk serves all eight sub-blocks.
//! - **Q6_K `ql`**: chunk `16c + s` is bytes `32c + 2s`, `32c + 2s + 1`: low
//!   nibbles are elements `2s`, `2s + 1` of 32-element block `a(c)` (0, 1, 4,
//!   5 for c = 0..4), high nibbles of block `a(c) + 2`. `qh` chunk
//!   `16h + s` (`h = c / 2`) is `qh[32h + 2s]`, `qh[32h + 2s + 1]`, whose bit
//!   pair `2q` holds the top two bits of block `4h + q`: bits 0–1 and 4–5
//!   for the even groups, 2–3 and 6–7 for the odd ones.
//!
//! The specification these layouts serve is in [`crate::matvec::scalar`]
//! (a serial chain per output, one FMA per sub-block, in the order a chunk
//! walk meets them); the kernels are `x86/interleaved_k.rs`.

use super::GROUP;
use crate::quant::{BlockQ4K, BlockQ5K, BlockQ6K, QK_K};

/// Which K-quant a tile holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KFormat {
    Q4K,
    Q5K,
    Q6K,
}

/// A field of a GGUF super-block: its byte offset and length in the block,
/// whether it becomes planes (scales) or chunks, and its offset in a tile.
#[derive(Clone, Copy, Debug)]
struct Field {
    native: usize,
    len: usize,
    planes: bool,
}

impl KFormat {
    /// Bytes of one GGUF super-block.
    pub const fn native_block_bytes(self) -> usize {
        match self {
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
        }
    }

    /// Bytes of one tile: sixteen super-blocks' worth.
    pub const fn tile_bytes(self) -> usize {
        GROUP * self.native_block_bytes()
    }

    /// The fields in tile order (module docs), each with its GGUF offset.
    const fn fields(self) -> &'static [Field] {
        const fn f(native: usize, len: usize, planes: bool) -> Field {
            Field { native, len, planes }
        }
        const Q4K: [Field; 4] = [f(0, 2, false), f(2, 2, false), f(4, 12, true), f(16, 128, false)];
        const Q5K: [Field; 5] = [f(0, 2, false), f(2, 2, false), f(4, 12, true), f(16, 32, false), f(48, 128, false)];
        const Q6K: [Field; 4] = [f(208, 2, false), f(192, 16, true), f(128, 64, false), f(0, 128, false)];
        match self {
            Self::Q4K => &Q4K,
            Self::Q5K => &Q5K,
            Self::Q6K => &Q6K,
        }
    }

    /// Offset of the sixteen `dmin` (Q4_K, Q5_K) in a tile.
    pub const DMIN: usize = 2 * GROUP;
    /// Offset of the scale planes: 64 (Q4_K, Q5_K) or 32 (Q6_K).
    pub const fn scales_offset(self) -> usize {
        match self {
            Self::Q6K => 2 * GROUP,
            _ => 4 * GROUP,
        }
    }

    /// Offset of the `qh` chunks (Q5_K, Q6_K).
    pub const fn qh_offset(self) -> usize {
        match self {
            Self::Q6K => 2 * GROUP + 16 * GROUP,
            _ => 4 * GROUP + 12 * GROUP,
        }
    }

    /// Offset of the `qs` (Q4_K, Q5_K) or `ql` (Q6_K) chunks.
    pub const fn qs_offset(self) -> usize {
        match self {
            Self::Q4K => 4 * GROUP + 12 * GROUP,
            Self::Q5K => 4 * GROUP + 12 * GROUP + 32 * GROUP,
            Self::Q6K => 2 * GROUP + 16 * GROUP + 64 * GROUP,
        }
    }
}

/// Writes the `nsb` tiles of one group from `live` (1..=16) consecutive
/// GGUF rows at the start of `native`; rows past `live` are zero in every
/// field.
///
/// # Panics
/// If `native` holds fewer than `live` rows or `out` fewer than `nsb` tiles
/// (the callers size both).
pub fn repack_group(fmt: KFormat, native: &[u8], live: usize, nsb: usize, out: &mut [u8]) {
    let (bb, tb) = (fmt.native_block_bytes(), fmt.tile_bytes());
    for sb in 0..nsb {
        let tile = &mut out[sb * tb..(sb + 1) * tb];
        let mut at = 0;
        for field in fmt.fields() {
            let dst = &mut tile[at..at + GROUP * field.len];
            for j in 0..GROUP {
                if j >= live {
                    for i in 0..field.len {
                        dst[tile_index(field, 0, i, j)] = 0;
                    }
                    continue;
                }
                let o = (j * nsb + sb) * bb + field.native;
                let src = &native[o..o + field.len];
                // A strided copy: one step of GROUP bytes (planes) or 32
                // bytes (chunks) per source byte or byte pair.
                if field.planes {
                    for (d, &b) in dst[j..].iter_mut().step_by(GROUP).zip(src) {
                        *d = b;
                    }
                } else {
                    for (d, s) in dst[2 * j..].chunks_mut(32).zip(src.chunks_exact(2)) {
                        d[0] = s[0];
                        d[1] = s[1];
                    }
                }
            }
            at += GROUP * field.len;
        }
        debug_assert_eq!(at, tb);
    }
}

/// Where byte `i` of row `j`'s `field` lies in a tile whose field starts at `at`.
#[inline]
const fn tile_index(field: &Field, at: usize, i: usize, j: usize) -> usize {
    if field.planes { at + GROUP * i + j } else { at + 32 * (i / 2) + 2 * j + i % 2 }
}

/// Row `j`'s GGUF super-block bytes back from a tile (the inverse of
/// [`repack_group`]), for the portable kernels and tests.
pub fn native_block(fmt: KFormat, tile: &[u8], j: usize, out: &mut [u8]) {
    let mut at = 0;
    for field in fmt.fields() {
        for i in 0..field.len {
            out[field.native + i] = tile[tile_index(field, at, i, j)];
        }
        at += GROUP * field.len;
    }
}

/// Row `j` of a Q4_K tile as a GGUF block.
pub fn q4k_block(tile: &[u8], j: usize) -> BlockQ4K {
    let mut b = [0u8; 144];
    native_block(KFormat::Q4K, tile, j, &mut b);
    BlockQ4K {
        d: u16::from_le_bytes([b[0], b[1]]),
        dmin: u16::from_le_bytes([b[2], b[3]]),
        scales: b[4..16].try_into().expect("12 bytes"),
        qs: b[16..144].try_into().expect("128 bytes"),
    }
}

/// Row `j` of a Q5_K tile as a GGUF block.
pub fn q5k_block(tile: &[u8], j: usize) -> BlockQ5K {
    let mut b = [0u8; 176];
    native_block(KFormat::Q5K, tile, j, &mut b);
    BlockQ5K {
        d: u16::from_le_bytes([b[0], b[1]]),
        dmin: u16::from_le_bytes([b[2], b[3]]),
        scales: b[4..16].try_into().expect("12 bytes"),
        qh: b[16..48].try_into().expect("32 bytes"),
        qs: b[48..176].try_into().expect("128 bytes"),
    }
}

/// Row `j` of a Q6_K tile as a GGUF block.
pub fn q6k_block(tile: &[u8], j: usize) -> BlockQ6K {
    let mut b = [0u8; 210];
    native_block(KFormat::Q6K, tile, j, &mut b);
    BlockQ6K {
        ql: b[0..128].try_into().expect("128 bytes"),
        qh: b[128..192].try_into().expect("64 bytes"),
        scales: std::array::from_fn(|k| b[192 + k] as i8),
        d: u16::from_le_bytes([b[208], b[209]]),
    }
}

const _: () = assert!(QK_K == 256, "the tile layouts above are for 256-element super-blocks");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_cover_each_gguf_block_once_in_tile_order() {
        for fmt in [KFormat::Q4K, KFormat::Q5K, KFormat::Q6K] {
            let mut seen = vec![false; fmt.native_block_bytes()];
            let mut at = 0;
            for f in fmt.fields() {
                for i in 0..f.len {
                    assert!(!seen[f.native + i], "{fmt:?} byte {} twice", f.native + i);
                    seen[f.native + i] = true;
                }
                at += GROUP * f.len;
            }
            assert!(seen.iter().all(|&s| s), "{fmt:?} leaves a byte out");
            assert_eq!(at, fmt.tile_bytes());
        }
        // The documented offsets are where the fields land.
        assert_eq!(KFormat::Q4K.scales_offset(), 64);
        assert_eq!(KFormat::Q4K.qs_offset(), 256);
        assert_eq!((KFormat::Q5K.qh_offset(), KFormat::Q5K.qs_offset()), (256, 768));
        assert_eq!((KFormat::Q6K.scales_offset(), KFormat::Q6K.qh_offset()), (32, 288));
        assert_eq!(KFormat::Q6K.qs_offset(), 1312);
    }

    #[test]
    fn a_tile_gives_back_every_rows_gguf_bytes_and_zero_padding() {
        for fmt in [KFormat::Q4K, KFormat::Q5K, KFormat::Q6K] {
            let (live, nsb, bb) = (11, 3, fmt.native_block_bytes());
            let mut state = 0x2545_F491_4F6C_DD1Du64;
            let native: Vec<u8> = (0..live * nsb * bb)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let mut out = vec![0xEEu8; nsb * fmt.tile_bytes()];
            repack_group(fmt, &native, live, nsb, &mut out);
            let mut back = vec![0u8; bb];
            for sb in 0..nsb {
                let tile = &out[sb * fmt.tile_bytes()..(sb + 1) * fmt.tile_bytes()];
                for j in 0..GROUP {
                    native_block(fmt, tile, j, &mut back);
                    if j < live {
                        assert_eq!(back, native[(j * nsb + sb) * bb..(j * nsb + sb + 1) * bb], "{fmt:?} {sb} {j}");
                    } else {
                        assert!(back.iter().all(|&b| b == 0), "{fmt:?} padding row {j}");
                    }
                }
            }
        }
    }
}
