//! Block layouts of the ggml quantized formats, as stored in GGUF files.
//!
//! Each struct is `#[repr(C)]` and mirrors the definition in ggml's
//! `ggml-common.h` (the format's only specification); a compile-time assertion
//! pins its size so that a file's bytes can be reinterpreted in place.
//! Scales are IEEE half floats stored as raw `u16` bits (little endian, as
//! GGUF is), so every struct has alignment 1 or 2 and no padding.

/// Elements per block of the "legacy" formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
pub const QK: usize = 32;
/// Elements per super-block of the K-quant formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in a Q4_K / Q5_K super-block.
pub const K_SCALE_SIZE: usize = 12;

/// Q4_0: 32 weights `w = d * (q - 8)`, `q` in 0..16; element `j` is the low
/// nibble of `qs[j]`, element `j + 16` its high nibble (`block_q4_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_0 {
    pub d: u16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// Q4_1: 32 weights `w = d * q + m`, `q` in 0..16, same nibble order as Q4_0
/// (`block_q4_1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_1 {
    pub d: u16,
    pub m: u16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// Q5_0: 32 weights `w = d * (q - 16)`, `q` in 0..32. The low four bits of
/// element `j` are the low nibble of `qs[j]`, those of element `j + 16` its
/// high nibble (as Q4_0); the fifth bit of element `j` is bit `j` of `qh`
/// read as a little-endian `u32` (`block_q5_0` in `ggml-common.h`, and
/// `dequantize_row_q5_0` in `ggml-quants.c` for the bit order).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5_0 {
    pub d: u16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
// 2 + 4 + 16: `d` gives the struct alignment 2, and 22 is a multiple of it,
// so blocks lie back to back with no padding, exactly as in the file.
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22 && std::mem::align_of::<BlockQ5_0>() == 2);

/// Q5_1: 32 weights `w = d * q + m`, `q` in 0..32 with Q5_0's bit layout
/// (`block_q5_1`: `d` and `m` are ggml's `dm` pair).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5_1 {
    pub d: u16,
    pub m: u16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24 && std::mem::align_of::<BlockQ5_1>() == 2);

/// Q8_0: 32 weights `w = d * q`, `q` a signed byte (`block_q8_0`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_0 {
    pub d: u16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// Q4_K: a 256-weight super-block of 8 sub-blocks of 32. Sub-block `j` has a
/// 6-bit scale `sc[j]` and 6-bit min `m[j]` packed in `scales` (see
/// `get_scale_min_k4`), and `w = d * sc[j] * q - dmin * m[j]`. The 4-bit
/// quants of sub-blocks `2i` and `2i+1` share bytes `qs[32i..32i+32]`: low
/// nibbles for `2i`, high nibbles for `2i+1` (`block_q4_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4K {
    pub d: u16,
    pub dmin: u16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// Q5_K: as Q4_K with a fifth bit per weight in `qh`: bit `j` of `qh[l]` is
/// the high bit of element `l` of sub-block `j` (`block_q5_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5K {
    pub d: u16,
    pub dmin: u16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// Q6_K: 16 sub-blocks of 16 weights, `w = d * scales[j] * (q - 32)` with `q`
/// 6 bits: low 4 in `ql`, high 2 in `qh` (`block_q6_K`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: u16,
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// Q2_K: sixteen 16-element sub-blocks of 2-bit quants. Byte `k` of
/// `scales` is sub-block `k`'s 4-bit scale (low nibble) and 4-bit min (high
/// nibble), and `w = (d * sc) * q - dmin * m`. Sub-block `k` lies in the
/// 32-byte group `qs[32 (k / 8) ..]`: its elements `l` (0..16) are bits
/// `2 ((k / 2) % 4) ..+2` of byte `16 (k % 2) + l` of that group
/// (`block_q2_K` in `ggml-common.h`; the element order is
/// `dequantize_row_q2_K` in `ggml-quants.c`). 16 + 64 + 2 + 2 = 84 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: u16,
    pub dmin: u16,
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84 && std::mem::align_of::<BlockQ2K>() == 2);

/// Q3_K: sixteen 16-element sub-blocks of 3-bit quants, `w = (d * (sc -
/// 32)) * q` with `q` in −4..4. The low two bits of a quant sit in `qs` as
/// Q2_K's; the third is bit `k / 2` of `hmask[16 (k % 2) + l]` for element
/// `l` of sub-block `k`, and a *clear* bit subtracts 4 (`q = lo − 4` when
/// clear, `lo` when set). The sixteen 6-bit scales are packed in 12 bytes:
/// scale `k` has its low nibble in `scales[k % 8]` (low nibble for `k < 8`,
/// high otherwise) and its top two bits at bits `2 (k / 4)` of `scales[8 +
/// k % 4]` (`block_q3_K` in `ggml-common.h`, `dequantize_row_q3_K` in
/// `ggml-quants.c`). 32 + 64 + 12 + 2 = 110 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: u16,
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110 && std::mem::align_of::<BlockQ3K>() == 2);

/// Storage types of a tensor, with ggml's numeric type ids (`enum ggml_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

impl GgmlType {
    /// The type for a ggml type id, or `None` for ids this project does not read.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::BF16 => 30,
        }
    }

    /// ggml's name for the type (`Q4_1`, `Q6_K`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
        }
    }

    /// Elements per block (1 for the float types).
    pub fn block_elems(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => QK,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => std::mem::size_of::<BlockQ4_0>(),
            Self::Q4_1 => std::mem::size_of::<BlockQ4_1>(),
            Self::Q5_0 => std::mem::size_of::<BlockQ5_0>(),
            Self::Q5_1 => std::mem::size_of::<BlockQ5_1>(),
            Self::Q8_0 => std::mem::size_of::<BlockQ8_0>(),
            Self::Q2K => std::mem::size_of::<BlockQ2K>(),
            Self::Q3K => std::mem::size_of::<BlockQ3K>(),
            Self::Q4K => std::mem::size_of::<BlockQ4K>(),
            Self::Q5K => std::mem::size_of::<BlockQ5K>(),
            Self::Q6K => std::mem::size_of::<BlockQ6K>(),
        }
    }

    /// Bytes that `n_elems` elements occupy, or `None` when `n_elems` is not
    /// a whole number of blocks or the size overflows.
    pub fn row_bytes(self, n_elems: usize) -> Option<usize> {
        let be = self.block_elems();
        if !n_elems.is_multiple_of(be) {
            return None;
        }
        (n_elems / be).checked_mul(self.block_bytes())
    }
}
