//! Scalar dequantization of every supported storage type.
//!
//! This file is the readable specification of each format: the mat-vec
//! kernels must agree with it. Every function follows the semantics of ggml's
//! `dequantize_row_*` (ggml-quants.c) for the block layouts of `ggml-common.h`
//! mirrored in [`super::blocks`], including the order of the float operations
//! (`d * sc` first, then times the quant, then minus `dmin * m`), so results
//! are bit-for-bit those of ggml.
//!
//! Blocks are read from file bytes field by field (`from_le_bytes`), never by
//! reinterpreting a pointer: a GGUF tensor's data need not be aligned for the
//! `u16` scales, and the file is little endian whatever the host is.

use half::{bf16, f16};

use super::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
    K_SCALE_SIZE, QK, QK_K,
};

#[derive(Debug, thiserror::Error)]
pub enum DequantError {
    #[error("{ty:?}: {n_elems} elements need {expected} bytes, got {got}")]
    Length { ty: GgmlType, n_elems: usize, expected: usize, got: usize },
    #[error(
        "{ty:?}: {n_elems} elements is not a whole number of {block_elems}-element blocks \
         (the output row length must be a multiple of {block_elems})"
    )]
    NotWholeBlocks { ty: GgmlType, n_elems: usize, block_elems: usize },
    #[error("{ty:?}: the byte size of {n_elems} elements overflows usize")]
    SizeOverflow { ty: GgmlType, n_elems: usize },
}

/// Dequantizes one row: `data` holds exactly the blocks of `out.len()` elements.
///
/// Errors when `out.len()` is not a whole number of blocks of `ty`, or when
/// `data` is not exactly the bytes of those blocks; `out` is untouched then.
pub fn dequantize_row(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), DequantError> {
    let n_elems = out.len();
    let block_elems = ty.block_elems();
    if !n_elems.is_multiple_of(block_elems) {
        return Err(DequantError::NotWholeBlocks { ty, n_elems, block_elems });
    }
    let expected = ty.row_bytes(n_elems).ok_or(DequantError::SizeOverflow { ty, n_elems })?;
    if data.len() != expected {
        return Err(DequantError::Length { ty, n_elems, expected, got: data.len() });
    }
    match ty {
        GgmlType::F32 => {
            for (y, b) in out.iter_mut().zip(data.as_chunks::<4>().0) {
                *y = f32::from_le_bytes(*b);
            }
        }
        GgmlType::F16 => {
            for (y, b) in out.iter_mut().zip(data.as_chunks::<2>().0) {
                *y = f16::from_bits(u16::from_le_bytes(*b)).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (y, b) in out.iter_mut().zip(data.as_chunks::<2>().0) {
                *y = bf16::from_bits(u16::from_le_bytes(*b)).to_f32();
            }
        }
        GgmlType::Q4_0 => {
            for_each_block::<Q4_0_BYTES, QK>(data, out, |b, y| dequantize_block_q4_0(&BlockQ4_0::from_le_bytes(b), y))
        }
        GgmlType::Q4_1 => {
            for_each_block::<Q4_1_BYTES, QK>(data, out, |b, y| dequantize_block_q4_1(&BlockQ4_1::from_le_bytes(b), y))
        }
        GgmlType::Q5_0 => {
            for_each_block::<Q5_0_BYTES, QK>(data, out, |b, y| dequantize_block_q5_0(&BlockQ5_0::from_le_bytes(b), y))
        }
        GgmlType::Q5_1 => {
            for_each_block::<Q5_1_BYTES, QK>(data, out, |b, y| dequantize_block_q5_1(&BlockQ5_1::from_le_bytes(b), y))
        }
        GgmlType::Q8_0 => {
            for_each_block::<Q8_0_BYTES, QK>(data, out, |b, y| dequantize_block_q8_0(&BlockQ8_0::from_le_bytes(b), y))
        }
        GgmlType::Q2K => {
            for_each_block::<Q2K_BYTES, QK_K>(data, out, |b, y| dequantize_block_q2_k(&BlockQ2K::from_le_bytes(b), y))
        }
        GgmlType::Q3K => {
            for_each_block::<Q3K_BYTES, QK_K>(data, out, |b, y| dequantize_block_q3_k(&BlockQ3K::from_le_bytes(b), y))
        }
        GgmlType::Q4K => {
            for_each_block::<Q4K_BYTES, QK_K>(data, out, |b, y| dequantize_block_q4_k(&BlockQ4K::from_le_bytes(b), y))
        }
        GgmlType::Q5K => {
            for_each_block::<Q5K_BYTES, QK_K>(data, out, |b, y| dequantize_block_q5_k(&BlockQ5K::from_le_bytes(b), y))
        }
        GgmlType::Q6K => {
            for_each_block::<Q6K_BYTES, QK_K>(data, out, |b, y| dequantize_block_q6_k(&BlockQ6K::from_le_bytes(b), y))
        }
    }
    Ok(())
}

/// Calls `f` on each `B`-byte block of `data` and its `E` outputs. The caller
/// has checked that both slices hold the same whole number of blocks.
fn for_each_block<const B: usize, const E: usize>(data: &[u8], out: &mut [f32], f: impl Fn(&[u8; B], &mut [f32; E])) {
    let (blocks, rest_in) = data.as_chunks::<B>();
    let (outs, rest_out) = out.as_chunks_mut::<E>();
    debug_assert!(rest_in.is_empty() && rest_out.is_empty() && blocks.len() == outs.len());
    for (b, y) in blocks.iter().zip(outs) {
        f(b, y);
    }
}

/// An IEEE half stored as raw bits, widened to f32 (exact).
#[inline]
fn f16_bits_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// The 6-bit scale and 6-bit min of sub-block `j` (0..8) of a Q4_K / Q5_K
/// super-block, from its 12 packed bytes (`get_scale_min_k4` in ggml).
///
/// Layout: for `j < 4`, the scale is the low 6 bits of `q[j]` and the min the
/// low 6 bits of `q[j + 4]`. For `j >= 4`, the low 4 bits of the scale are the
/// low nibble of `q[j + 4]` and its high 2 bits the top 2 bits of `q[j - 4]`;
/// the min's low 4 bits are the high nibble of `q[j + 4]` and its high 2 bits
/// the top 2 bits of `q[j]`.
///
/// # Panics
/// When `j >= 8` (there are 8 sub-blocks).
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (sc, m)
    }
}

/// Q4_0: `y[j] = d * (lo(qs[j]) - 8)`, `y[j + 16] = d * (hi(qs[j]) - 8)`.
pub fn dequantize_block_q4_0(x: &BlockQ4_0, y: &mut [f32; QK]) {
    let d = f16_bits_to_f32(x.d);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in x.qs.iter().enumerate() {
        lo[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// Q4_1: `y[j] = d * lo(qs[j]) + m`, `y[j + 16] = d * hi(qs[j]) + m`.
pub fn dequantize_block_q4_1(x: &BlockQ4_1, y: &mut [f32; QK]) {
    let d = f16_bits_to_f32(x.d);
    let m = f16_bits_to_f32(x.m);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in x.qs.iter().enumerate() {
        lo[j] = (q & 0x0F) as f32 * d + m;
        hi[j] = (q >> 4) as f32 * d + m;
    }
}

/// The 32 five-bit quants (0..32) of a Q5_0 / Q5_1 block in element order:
/// element `j` takes its low four bits from the low nibble of `qs[j]` (`j <
/// 16`) or the high nibble of `qs[j - 16]`, and its fifth bit from bit `j`
/// of `qh` read as a little-endian `u32` (ggml's `xh_0`, `xh_1`).
#[inline]
pub fn q5_quants(qh: &[u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let high = u32::from_le_bytes(*qh);
    std::array::from_fn(|j| {
        let nibble = if j < QK / 2 { qs[j] & 0x0F } else { qs[j - QK / 2] >> 4 };
        nibble | ((((high >> j) & 1) as u8) << 4)
    })
}

/// Q5_0: `y[j] = d * (q[j] - 16)` with `q` from [`q5_quants`].
pub fn dequantize_block_q5_0(x: &BlockQ5_0, y: &mut [f32; QK]) {
    let d = f16_bits_to_f32(x.d);
    for (y, q) in y.iter_mut().zip(q5_quants(&x.qh, &x.qs)) {
        *y = (q as i32 - 16) as f32 * d;
    }
}

/// Q5_1: `y[j] = d * q[j] + m` with `q` from [`q5_quants`].
pub fn dequantize_block_q5_1(x: &BlockQ5_1, y: &mut [f32; QK]) {
    let d = f16_bits_to_f32(x.d);
    let m = f16_bits_to_f32(x.m);
    for (y, q) in y.iter_mut().zip(q5_quants(&x.qh, &x.qs)) {
        *y = q as f32 * d + m;
    }
}

/// Q8_0: `y[j] = d * qs[j]`.
pub fn dequantize_block_q8_0(x: &BlockQ8_0, y: &mut [f32; QK]) {
    let d = f16_bits_to_f32(x.d);
    for (y, &q) in y.iter_mut().zip(&x.qs) {
        *y = q as f32 * d;
    }
}

/// Q4_K: sub-blocks `2i` and `2i+1` (32 weights each) take the low and high
/// nibbles of `qs[32i..32i+32]`; `w = (d * sc) * q - dmin * m`.
pub fn dequantize_block_q4_k(x: &BlockQ4K, y: &mut [f32; QK_K]) {
    let d = f16_bits_to_f32(x.d);
    let dmin = f16_bits_to_f32(x.dmin);
    for (i, (q, y)) in x.qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc_lo, m_lo) = get_scale_min_k4(2 * i, &x.scales);
        let (sc_hi, m_hi) = get_scale_min_k4(2 * i + 1, &x.scales);
        let (d_lo, min_lo) = (d * sc_lo as f32, dmin * m_lo as f32);
        let (d_hi, min_hi) = (d * sc_hi as f32, dmin * m_hi as f32);
        let (y_lo, y_hi) = y.split_at_mut(32);
        for l in 0..32 {
            y_lo[l] = d_lo * (q[l] & 0x0F) as f32 - min_lo;
            y_hi[l] = d_hi * (q[l] >> 4) as f32 - min_hi;
        }
    }
}

/// Q5_K: as Q4_K, plus a fifth bit: bit `j` of `qh[l]` adds 16 to element `l`
/// of sub-block `j`.
pub fn dequantize_block_q5_k(x: &BlockQ5K, y: &mut [f32; QK_K]) {
    let d = f16_bits_to_f32(x.d);
    let dmin = f16_bits_to_f32(x.dmin);
    for (i, (q, y)) in x.qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc_lo, m_lo) = get_scale_min_k4(2 * i, &x.scales);
        let (sc_hi, m_hi) = get_scale_min_k4(2 * i + 1, &x.scales);
        let (d_lo, min_lo) = (d * sc_lo as f32, dmin * m_lo as f32);
        let (d_hi, min_hi) = (d * sc_hi as f32, dmin * m_hi as f32);
        let (bit_lo, bit_hi) = (1u8 << (2 * i), 1u8 << (2 * i + 1));
        let (y_lo, y_hi) = y.split_at_mut(32);
        for l in 0..32 {
            let h_lo = if x.qh[l] & bit_lo != 0 { 16 } else { 0 };
            let h_hi = if x.qh[l] & bit_hi != 0 { 16 } else { 0 };
            y_lo[l] = d_lo * ((q[l] & 0x0F) + h_lo) as f32 - min_lo;
            y_hi[l] = d_hi * ((q[l] >> 4) + h_hi) as f32 - min_hi;
        }
    }
}

/// Q6_K: each half (128 weights) uses 64 bytes of `ql`, 32 of `qh` and 8
/// scales. Within a half, element `l` (0..32) of quarter `k` (0..4) takes its
/// low 4 bits from `ql[l + 32 * (k & 1)]` (low nibble for `k < 2`, high
/// otherwise), its high 2 bits from bits `2k..2k+2` of `qh[l]`, and scale
/// `scales[l / 16 + 2k]`; `w = (d * scale) * (q - 32)`.
pub fn dequantize_block_q6_k(x: &BlockQ6K, y: &mut [f32; QK_K]) {
    let d = f16_bits_to_f32(x.d);
    for half in 0..2 {
        let ql = &x.ql[64 * half..64 * half + 64];
        let qh = &x.qh[32 * half..32 * half + 32];
        let sc = &x.scales[8 * half..8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * sc[is] as f32 * q1 as f32;
            y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
            y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
            y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
        }
    }
}

/// The low two bits of element `e` (0..256) of a Q2_K / Q3_K super-block
/// from its 64 bytes of `qs`: 16-element sub-block `k = e / 16`, element
/// `l = e % 16` is bits `2 ((k / 2) % 4) ..+2` of byte
/// `32 (k / 8) + 16 (k % 2) + l` (ggml's `dequantize_row_q2_K` walks each 32-byte group four times,
/// two bits further each time, two sub-blocks per walk).
#[inline]
pub fn k_low2(qs: &[u8; QK_K / 4], e: usize) -> u8 {
    let (k, l) = (e / 16, e % 16);
    (qs[32 * (k / 8) + 16 * (k % 2) + l] >> (2 * ((k / 2) % 4))) & 3
}

/// The 3-bit quant (−4..4) of element `e` of a Q3_K super-block: the low
/// two bits from [`k_low2`], minus 4 unless bit `k / 2` of `hmask[16 (k %
/// 2) + l]` is set (ggml keeps the mask pointer fixed and moves the bit).
#[inline]
pub fn q3k_quant(x: &BlockQ3K, e: usize) -> i8 {
    let (k, l) = (e / 16, e % 16);
    let high = (x.hmask[16 * (k % 2) + l] >> (k / 2)) & 1;
    k_low2(&x.qs, e) as i8 - if high == 0 { 4 } else { 0 }
}

/// The sixteen signed 6-bit scales (−32..32, stored plus 32) of a Q3_K
/// super-block: scale `k`'s low four bits are nibble `k / 8` of `q[k % 8]`,
/// its top two bits are bits `2 (k / 4) ..+2` of `q[8 + k % 4]` (the
/// `kmask1` / `kmask2` unpacking of `dequantize_row_q3_K`).
#[inline]
pub fn q3k_scales(q: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|k| {
        let lo = (q[k % 8] >> (4 * (k / 8))) & 0x0F;
        let hi = (q[8 + k % 4] >> (2 * (k / 4))) & 3;
        (lo | (hi << 4)) as i8 - 32
    })
}

/// Q2_K: element `l` of 16-element sub-block `k` is
/// `(d * sc_k) * q - dmin * m_k`, `sc_k` and `m_k` the low and high nibbles
/// of `scales[k]`, `q` from [`k_low2`]; both products `d * sc_k` and
/// `dmin * m_k` are exact (an f16 times a 4-bit integer), then one rounding
/// for the product with `q` and one for the difference.
pub fn dequantize_block_q2_k(x: &BlockQ2K, y: &mut [f32; QK_K]) {
    let d = f16_bits_to_f32(x.d);
    let dmin = f16_bits_to_f32(x.dmin);
    for (k, y) in y.chunks_exact_mut(16).enumerate() {
        let (dl, ml) = (d * (x.scales[k] & 0x0F) as f32, dmin * (x.scales[k] >> 4) as f32);
        for (l, y) in y.iter_mut().enumerate() {
            *y = dl * k_low2(&x.qs, 16 * k + l) as f32 - ml;
        }
    }
}

/// Q3_K: element `l` of 16-element sub-block `k` is `(d * s_k) * q`, `s_k`
/// from [`q3k_scales`] and `q` from [`q3k_quant`] (`d * s_k` is exact).
pub fn dequantize_block_q3_k(x: &BlockQ3K, y: &mut [f32; QK_K]) {
    let d = f16_bits_to_f32(x.d);
    let sc = q3k_scales(&x.scales);
    for (k, y) in y.chunks_exact_mut(16).enumerate() {
        let dl = d * sc[k] as f32;
        for (l, y) in y.iter_mut().enumerate() {
            *y = dl * q3k_quant(x, 16 * k + l) as f32;
        }
    }
}

// ---------------------------------------------------------------------------
// Reading and writing blocks as little-endian file bytes.

const Q4_0_BYTES: usize = size_of::<BlockQ4_0>();
const Q4_1_BYTES: usize = size_of::<BlockQ4_1>();
const Q5_0_BYTES: usize = size_of::<BlockQ5_0>();
const Q5_1_BYTES: usize = size_of::<BlockQ5_1>();
const Q8_0_BYTES: usize = size_of::<BlockQ8_0>();
const Q2K_BYTES: usize = size_of::<BlockQ2K>();
const Q3K_BYTES: usize = size_of::<BlockQ3K>();
const Q4K_BYTES: usize = size_of::<BlockQ4K>();
const Q5K_BYTES: usize = size_of::<BlockQ5K>();
const Q6K_BYTES: usize = size_of::<BlockQ6K>();

/// Reads fields in order from a block's bytes. The block's byte length is a
/// compile-time constant equal to the sum of its fields, so reads stay inside.
struct FieldReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl FieldReader<'_> {
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.at..self.at + N]);
        self.at += N;
        a
    }

    fn i8_array<const N: usize>(&mut self) -> [i8; N] {
        self.array::<N>().map(|b| b as i8)
    }
}

/// Appends fields in order; the inverse of `FieldReader`.
struct FieldWriter<const N: usize> {
    bytes: [u8; N],
    at: usize,
}

impl<const N: usize> FieldWriter<N> {
    fn new() -> Self {
        Self { bytes: [0; N], at: 0 }
    }

    fn put(&mut self, src: &[u8]) -> &mut Self {
        self.bytes[self.at..self.at + src.len()].copy_from_slice(src);
        self.at += src.len();
        self
    }

    fn finish(&self) -> [u8; N] {
        debug_assert_eq!(self.at, N);
        self.bytes
    }
}

fn i8s_as_u8s<const N: usize>(a: &[i8; N]) -> [u8; N] {
    a.map(|b| b as u8)
}

impl BlockQ4_0 {
    pub fn from_le_bytes(b: &[u8; Q4_0_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), qs: r.array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q4_0_BYTES] {
        FieldWriter::new().put(&self.d.to_le_bytes()).put(&self.qs).finish()
    }
}

impl BlockQ4_1 {
    pub fn from_le_bytes(b: &[u8; Q4_1_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), m: r.u16(), qs: r.array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q4_1_BYTES] {
        FieldWriter::new().put(&self.d.to_le_bytes()).put(&self.m.to_le_bytes()).put(&self.qs).finish()
    }
}

impl BlockQ5_0 {
    pub fn from_le_bytes(b: &[u8; Q5_0_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), qh: r.array(), qs: r.array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q5_0_BYTES] {
        FieldWriter::new().put(&self.d.to_le_bytes()).put(&self.qh).put(&self.qs).finish()
    }
}

impl BlockQ5_1 {
    pub fn from_le_bytes(b: &[u8; Q5_1_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), m: r.u16(), qh: r.array(), qs: r.array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q5_1_BYTES] {
        FieldWriter::new().put(&self.d.to_le_bytes()).put(&self.m.to_le_bytes()).put(&self.qh).put(&self.qs).finish()
    }
}

impl BlockQ8_0 {
    pub fn from_le_bytes(b: &[u8; Q8_0_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), qs: r.i8_array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q8_0_BYTES] {
        FieldWriter::new().put(&self.d.to_le_bytes()).put(&i8s_as_u8s(&self.qs)).finish()
    }
}

impl BlockQ4K {
    pub fn from_le_bytes(b: &[u8; Q4K_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), dmin: r.u16(), scales: r.array(), qs: r.array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q4K_BYTES] {
        FieldWriter::new()
            .put(&self.d.to_le_bytes())
            .put(&self.dmin.to_le_bytes())
            .put(&self.scales)
            .put(&self.qs)
            .finish()
    }
}

impl BlockQ5K {
    pub fn from_le_bytes(b: &[u8; Q5K_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { d: r.u16(), dmin: r.u16(), scales: r.array(), qh: r.array(), qs: r.array() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q5K_BYTES] {
        FieldWriter::new()
            .put(&self.d.to_le_bytes())
            .put(&self.dmin.to_le_bytes())
            .put(&self.scales)
            .put(&self.qh)
            .put(&self.qs)
            .finish()
    }
}

impl BlockQ2K {
    pub fn from_le_bytes(b: &[u8; Q2K_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { scales: r.array(), qs: r.array(), d: r.u16(), dmin: r.u16() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q2K_BYTES] {
        FieldWriter::new()
            .put(&self.scales)
            .put(&self.qs)
            .put(&self.d.to_le_bytes())
            .put(&self.dmin.to_le_bytes())
            .finish()
    }
}

impl BlockQ3K {
    pub fn from_le_bytes(b: &[u8; Q3K_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { hmask: r.array(), qs: r.array(), scales: r.array(), d: r.u16() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q3K_BYTES] {
        FieldWriter::new().put(&self.hmask).put(&self.qs).put(&self.scales).put(&self.d.to_le_bytes()).finish()
    }
}

impl BlockQ6K {
    pub fn from_le_bytes(b: &[u8; Q6K_BYTES]) -> Self {
        let mut r = FieldReader { bytes: b, at: 0 };
        Self { ql: r.array(), qh: r.array(), scales: r.i8_array(), d: r.u16() }
    }

    pub fn to_le_bytes(&self) -> [u8; Q6K_BYTES] {
        FieldWriter::new()
            .put(&self.ql)
            .put(&self.qh)
            .put(&i8s_as_u8s(&self.scales))
            .put(&self.d.to_le_bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: f32) -> u16 {
        f16::from_f32(x).to_bits()
    }

    fn dequant(ty: GgmlType, data: &[u8], n: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; n];
        dequantize_row(ty, data, &mut out).unwrap();
        out
    }

    #[test]
    fn q4_0_block_maps_nibbles_to_d_times_q_minus_8() {
        let mut qs = [0u8; 16];
        qs[0] = 0x80; // elem 0 = 0, elem 16 = 8
        qs[1] = 0xF1; // elem 1 = 1, elem 17 = 15
        qs[15] = 0x3C; // elem 15 = 12, elem 31 = 3
        let block = BlockQ4_0 { d: h(0.5), qs };
        let y = dequant(GgmlType::Q4_0, &block.to_le_bytes(), 32);
        assert_eq!(y[0], -4.0);
        assert_eq!(y[16], 0.0);
        assert_eq!(y[1], -3.5);
        assert_eq!(y[17], 3.5);
        assert_eq!(y[15], 2.0);
        assert_eq!(y[31], -2.5);
        // Untouched bytes are 0x00: both nibbles give (0 - 8) * 0.5.
        assert_eq!(y[2], -4.0);
        assert_eq!(y[18], -4.0);
    }

    #[test]
    fn q4_1_block_with_d_half_and_m_minus_one_gives_known_floats() {
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            // low nibble j, high nibble 15 - j
            *q = (j as u8) | ((15 - j as u8) << 4);
        }
        let block = BlockQ4_1 { d: h(0.5), m: h(-1.0), qs };
        let y = dequant(GgmlType::Q4_1, &block.to_le_bytes(), 32);
        assert_eq!(y[0], -1.0); // 0 * 0.5 - 1
        assert_eq!(y[3], 0.5); // 3 * 0.5 - 1
        assert_eq!(y[15], 6.5); // 15 * 0.5 - 1
        assert_eq!(y[16], 6.5); // high nibble of qs[0] = 15
        assert_eq!(y[31], -1.0); // high nibble of qs[15] = 0
        for j in 0..16 {
            assert_eq!(y[j], j as f32 * 0.5 - 1.0);
            assert_eq!(y[j + 16], (15 - j) as f32 * 0.5 - 1.0);
        }
    }

    #[test]
    fn q4_1_reads_unaligned_blocks_from_an_odd_offset() {
        let block = BlockQ4_1 { d: h(2.0), m: h(1.0), qs: [0x21; 16] };
        let mut buf = vec![0xAAu8];
        buf.extend_from_slice(&block.to_le_bytes());
        let y = dequant(GgmlType::Q4_1, &buf[1..], 32);
        assert_eq!(y[0], 3.0); // 1 * 2 + 1
        assert_eq!(y[16], 5.0); // 2 * 2 + 1
    }

    #[test]
    fn q5_0_fifth_bit_of_element_j_is_bit_j_of_little_endian_qh() {
        let mut qs = [0u8; 16];
        qs[0] = 0x3F; // elem 0: 15, elem 16: 3
        qs[7] = 0x90; // elem 7: 0, elem 23: 9
        qs[15] = 0xFF; // elem 15: 15, elem 31: 15
        // Bits 0, 16, 23 and 31 set: qh bytes 0, 2, 2 and 3.
        let qh = (1u32 | 1 << 16 | 1 << 23 | 1 << 31).to_le_bytes();
        assert_eq!(qh, [0x01, 0x00, 0x81, 0x80]);
        let block = BlockQ5_0 { d: h(0.5), qh, qs };
        let y = dequant(GgmlType::Q5_0, &block.to_le_bytes(), 32);
        assert_eq!(y[0], (31 - 16) as f32 * 0.5);
        assert_eq!(y[16], (19 - 16) as f32 * 0.5);
        assert_eq!(y[7], -8.0); // 0 - 16
        assert_eq!(y[23], (25 - 16) as f32 * 0.5);
        assert_eq!(y[15], -0.5); // 15 - 16, no fifth bit
        assert_eq!(y[31], 7.5); // 31 - 16
        assert_eq!(y[1], -8.0);
        assert_eq!(q5_quants(&qh, &qs)[16], 19);
    }

    #[test]
    fn q5_1_block_is_d_times_q_plus_m_over_all_32_quant_values() {
        // Element j holds quant j: nibble j & 15, fifth bit j >> 4.
        let qs: [u8; 16] = std::array::from_fn(|j| j as u8 | ((j as u8) << 4));
        let qh = 0xFFFF_0000u32.to_le_bytes();
        let block = BlockQ5_1 { d: h(0.25), m: h(-2.0), qh, qs };
        let bytes = block.to_le_bytes();
        assert_eq!(&bytes[..8], &[0x00, 0x34, 0x00, 0xC0, 0x00, 0x00, 0xFF, 0xFF]);
        let y = dequant(GgmlType::Q5_1, &bytes, 32);
        for (j, &v) in y.iter().enumerate() {
            assert_eq!(v, j as f32 * 0.25 - 2.0, "elem {j}");
        }
        let back = BlockQ5_1::from_le_bytes(&bytes);
        assert_eq!((back.d, back.m, back.qh, back.qs), (block.d, block.m, block.qh, block.qs));
    }

    #[test]
    fn q8_0_row_of_two_blocks_uses_each_blocks_scale() {
        let mut qs = [0i8; 32];
        qs[0] = -128;
        qs[1] = 127;
        qs[31] = -3;
        let b0 = BlockQ8_0 { d: h(0.25), qs };
        let b1 = BlockQ8_0 { d: h(-2.0), qs };
        let mut bytes = b0.to_le_bytes().to_vec();
        bytes.extend_from_slice(&b1.to_le_bytes());
        let y = dequant(GgmlType::Q8_0, &bytes, 64);
        assert_eq!(&y[..2], &[-32.0, 31.75]);
        assert_eq!(y[31], -0.75);
        assert_eq!(y[2], 0.0);
        assert_eq!(&y[32..34], &[256.0, -254.0]);
        assert_eq!(y[63], 6.0);
    }

    /// Packs 8 six-bit scales and mins the way `get_scale_min_k4` unpacks them.
    fn pack_scales_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
            q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
            q[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
        }
        q
    }

    #[test]
    fn get_scale_min_k4_unpacks_hand_packed_bytes_including_high_bits() {
        // Sub-block 5: scale 51 = 0b11_0011, min 37 = 0b10_0101.
        // Low nibbles go to q[9] (scale low, min high): 0x53.
        // Scale's top bits (0b11) sit in the top of q[1]; min's (0b10) in q[5].
        let mut q = [0u8; 12];
        q[1] = 0xC0 | 7; // sub-block 1 scale 7, plus sub-block 5's scale high bits
        q[5] = 0x80 | 9; // sub-block 1 min 9, plus sub-block 5's min high bits
        q[9] = 0x53;
        assert_eq!(get_scale_min_k4(1, &q), (7, 9));
        assert_eq!(get_scale_min_k4(5, &q), (51, 37));
        assert_eq!(get_scale_min_k4(0, &q), (0, 0));
        assert_eq!(get_scale_min_k4(4, &q), (0, 0));
        let sc = [1, 2, 3, 63, 0, 17, 48, 63];
        let m = [63, 0, 5, 6, 40, 33, 1, 62];
        let packed = pack_scales_k4(sc, m);
        for j in 0..8 {
            assert_eq!(get_scale_min_k4(j, &packed), (sc[j], m[j]), "sub-block {j}");
        }
    }

    #[test]
    fn q4_k_block_applies_per_sub_block_scales_and_mins() {
        let sc = [1, 2, 3, 4, 51, 6, 7, 63];
        let m = [0, 1, 2, 3, 37, 5, 6, 48];
        let mut qs = [0u8; 128];
        for (k, q) in qs.iter_mut().enumerate() {
            *q = (k % 16) as u8 | (((k + 3) % 16) as u8) << 4;
        }
        let block = BlockQ4K { d: h(0.5), dmin: h(0.25), scales: pack_scales_k4(sc, m), qs };
        let y = dequant(GgmlType::Q4K, &block.to_le_bytes(), 256);
        // Hand-checked spots: element 0 of sub-block 0: q = 0 -> 0.5*1*0 - 0.25*0 = 0.
        assert_eq!(y[0], 0.0);
        // Element 32 is sub-block 1, high nibble of qs[0] = 3: 0.5*2*3 - 0.25*1.
        assert_eq!(y[32], 2.75);
        // Element 128 is sub-block 4 (low nibble of qs[64] = 0): -0.25*37.
        assert_eq!(y[128], -9.25);
        // Element 129: q = 1: 0.5*51*1 - 9.25.
        assert_eq!(y[129], 16.25);
        // Element 255 is sub-block 7, high nibble of qs[127] = (127+3)%16 = 2.
        assert_eq!(y[255], 0.5 * 63.0 * 2.0 - 0.25 * 48.0);
        for (e, &v) in y.iter().enumerate() {
            let (sub, l) = (e / 32, e % 32);
            let byte = qs[32 * (sub / 2) + l];
            let q = if sub.is_multiple_of(2) { byte & 15 } else { byte >> 4 };
            assert_eq!(v, 0.5 * sc[sub] as f32 * q as f32 - 0.25 * m[sub] as f32, "elem {e}");
        }
    }

    #[test]
    fn q5_k_high_bit_of_sub_block_j_is_bit_j_of_qh() {
        let sc = [1, 1, 1, 1, 1, 1, 1, 2];
        let m = [0, 0, 0, 0, 0, 0, 0, 1];
        let mut qh = [0u8; 32];
        qh[0] = 0b0000_0001; // element 0 of sub-block 0 gets +16
        qh[5] = 0b1000_0010; // element 5 of sub-blocks 1 and 7 get +16
        let mut qs = [0u8; 128];
        qs[0] = 0x0F; // sub-block 0 elem 0: 15; sub-block 1 elem 0: 0
        qs[5] = 0x30; // sub-block 0 elem 5: 0; sub-block 1 elem 5: 3
        qs[96 + 5] = 0x70; // sub-block 7 elem 5: 7
        let block = BlockQ5K { d: h(1.0), dmin: h(0.5), scales: pack_scales_k4(sc, m), qh, qs };
        let y = dequant(GgmlType::Q5K, &block.to_le_bytes(), 256);
        assert_eq!(y[0], 31.0); // 15 + 16
        assert_eq!(y[32], 0.0); // sub-block 1 elem 0: bit 1 of qh[0] clear
        assert_eq!(y[5], 0.0);
        assert_eq!(y[32 + 5], 19.0); // 3 + 16
        assert_eq!(y[224 + 5], 2.0 * 23.0 - 0.5); // (7 + 16) * 2 - 0.5 * 1
        assert_eq!(y[224], -0.5);
        assert_eq!(y[100], 0.0);
    }

    #[test]
    fn q6_k_combines_ql_nibbles_and_qh_bit_pairs() {
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        let mut scales = [1i8; 16];
        scales[0] = 2; // elements 0..16
        scales[2] = -1; // elements 32..48
        scales[4] = 3; // elements 64..80
        scales[6] = 1; // elements 96..112
        scales[15] = -4; // elements 240..256 (second half, is=1, quarter 3)
        // Element 0: ql[0] low = 5, qh[0] bits 0..2 = 2 -> q = 5 + 32 = 37 -> 5.
        // Element 64: ql[0] high = 0xA, qh[0] bits 4..6 = 0 -> q = 10 -> -22.
        ql[0] = 0xA5;
        // Element 32: ql[32] low = 0xF, qh[0] bits 2..4 = 3 -> q = 63 -> 31.
        // Element 96: ql[32] high = 0, qh[0] bits 6..8 = 1 -> q = 16 -> -16.
        ql[32] = 0x0F;
        qh[0] = 0b01_00_11_10;
        // Element 255: second half, l = 31, quarter 3: ql[64 + 32 + 31] high,
        // qh[32 + 31] bits 6..8. q = 0x7 | (3 << 4) = 55 -> 23.
        ql[127] = 0x70;
        qh[63] = 0b11_00_00_00;
        let block = BlockQ6K { ql, qh, scales, d: h(0.5) };
        let y = dequant(GgmlType::Q6K, &block.to_le_bytes(), 256);
        assert_eq!(y[0], 0.5 * 2.0 * 5.0);
        assert_eq!(y[64], 0.5 * 3.0 * -22.0);
        assert_eq!(y[32], -0.5 * 31.0);
        assert_eq!(y[96], 0.5 * 1.0 * -16.0);
        assert_eq!(y[255], 0.5 * -4.0 * 23.0);
        // All-zero bits elsewhere: q = -32.
        assert_eq!(y[1], 0.5 * 2.0 * -32.0);
        assert_eq!(y[128], 0.5 * 1.0 * -32.0);
    }

    #[test]
    fn f32_f16_and_bf16_rows_round_trip_through_le_bytes() {
        let xs = [0.0f32, -0.0, 1.0, -2.5, 0.333, 65504.0, 1e-5, -7.75e3];
        let f32_bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(dequant(GgmlType::F32, &f32_bytes, xs.len()), xs);

        let f16_bytes: Vec<u8> = xs.iter().flat_map(|&x| h(x).to_le_bytes()).collect();
        let want: Vec<f32> = xs.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        assert_eq!(dequant(GgmlType::F16, &f16_bytes, xs.len()), want);
        assert_eq!(dequant(GgmlType::F16, &f16_bytes, xs.len())[3], -2.5);

        let bf16_bytes: Vec<u8> = xs.iter().flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes()).collect();
        let want: Vec<f32> = xs.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
        assert_eq!(dequant(GgmlType::BF16, &bf16_bytes, xs.len()), want);
        assert_eq!(dequant(GgmlType::BF16, &bf16_bytes, xs.len())[2], 1.0);
    }

    #[test]
    fn length_mismatches_are_errors_that_leave_out_untouched() {
        let mut out = vec![7.0f32; 32];
        let err = dequantize_row(GgmlType::Q4_1, &[0u8; 19], &mut out).unwrap_err();
        assert!(matches!(err, DequantError::Length { expected: 20, got: 19, n_elems: 32, .. }), "{err}");
        assert!(out.iter().all(|&v| v == 7.0));

        let err = dequantize_row(GgmlType::Q8_0, &[0u8; 68], &mut out).unwrap_err();
        assert!(matches!(err, DequantError::Length { expected: 34, got: 68, .. }), "{err}");

        let mut odd = vec![0.0f32; 33];
        let err = dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut odd).unwrap_err();
        assert!(matches!(err, DequantError::NotWholeBlocks { block_elems: 32, .. }), "{err}");

        let err = dequantize_row(GgmlType::F32, &[0u8; 3], &mut out[..1]).unwrap_err();
        assert!(err.to_string().contains("need 4 bytes, got 3"), "{err}");

        let mut k = vec![0.0f32; 128];
        assert!(matches!(
            dequantize_row(GgmlType::Q6K, &[0u8; 210], &mut k),
            Err(DequantError::NotWholeBlocks { block_elems: 256, .. })
        ));
    }

    #[test]
    fn empty_rows_are_fine_for_every_type() {
        for ty in (0..64).filter_map(GgmlType::from_id) {
            dequantize_row(ty, &[], &mut []).unwrap();
        }
    }

    #[test]
    fn block_byte_codecs_round_trip_every_field() {
        let b = BlockQ6K {
            ql: std::array::from_fn(|i| i as u8),
            qh: std::array::from_fn(|i| 255 - i as u8),
            scales: std::array::from_fn(|i| i as i8 - 8),
            d: 0xBEEF,
        };
        let bytes = b.to_le_bytes();
        assert_eq!(&bytes[208..], &[0xEF, 0xBE]);
        let back = BlockQ6K::from_le_bytes(&bytes);
        assert_eq!((back.ql, back.qh, back.scales, back.d), (b.ql, b.qh, b.scales, b.d));

        let b = BlockQ5K {
            d: 0x0102,
            dmin: 0x0304,
            scales: std::array::from_fn(|i| i as u8),
            qh: std::array::from_fn(|i| 100 + i as u8),
            qs: std::array::from_fn(|i| i as u8 ^ 0x5A),
        };
        let bytes = b.to_le_bytes();
        assert_eq!(&bytes[..4], &[0x02, 0x01, 0x04, 0x03]);
        let back = BlockQ5K::from_le_bytes(&bytes);
        assert_eq!((back.d, back.dmin, back.scales, back.qh, back.qs), (b.d, b.dmin, b.scales, b.qh, b.qs));
    }

    fn hex_bytes(s: &str) -> Vec<u8> {
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
    }

    /// The gguf Python package's `dequantize` on deterministic blocks
    /// (reference/gguf_dequant_reference.py; all bits set, clear,
    /// alternating and random, under extreme f16 scales) equals ours bit
    /// for bit, for Q2_K, Q3_K, F16 and BF16.
    #[test]
    fn dequantization_equals_the_gguf_package() {
        let fixture = include_str!("../../../reference/data/gguf_dequant.txt");
        let mut seen = Vec::new();
        for line in fixture.lines().filter(|l| !l.starts_with('#')) {
            let mut f = line.split(' ');
            let (name, data) = (f.next().unwrap(), hex_bytes(f.next().unwrap()));
            let want: Vec<u32> = f.map(|v| u32::from_str_radix(v, 16).unwrap()).collect();
            let ty = [GgmlType::Q2K, GgmlType::Q3K, GgmlType::F16, GgmlType::BF16]
                .into_iter()
                .find(|t| t.name() == name)
                .unwrap();
            let got = dequant(ty, &data, want.len());
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "{name} element {i}: {} vs gguf {}", f32::from_bits(*g), f32::from_bits(*w));
            }
            assert!(want.len() >= 64, "{name}");
            seen.push(name);
        }
        assert_eq!(seen, ["Q2_K", "Q3_K", "F16", "BF16"]);
    }

    #[test]
    fn q2_k_sub_block_k_takes_bits_of_its_32_byte_group_and_its_scale_byte() {
        let mut b = BlockQ2K { scales: [0; 16], qs: [0; 64], d: h(0.5), dmin: h(0.25) };
        // Sub-block 11: group 1 (bytes 32..64), odd (bytes +16), shift 2·((11/2)%4) = 2.
        b.qs[32 + 16 + 3] = 0b0000_1100; // element 3 of sub-block 11 = 3
        b.scales[11] = 0x52; // scale 2, min 5
        let y = dequant(GgmlType::Q2K, &b.to_le_bytes(), 256);
        assert_eq!(y[11 * 16 + 3], 0.5 * 2.0 * 3.0 - 0.25 * 5.0);
        assert_eq!(y[11 * 16 + 4], -0.25 * 5.0);
        assert_eq!(y[10 * 16 + 3], 0.0);
    }

    #[test]
    fn q3_k_clear_mask_bit_subtracts_four_and_scales_unpack_to_signed_six_bits() {
        let mut b = BlockQ3K { hmask: [0; 32], qs: [0; 64], scales: [0; 12], d: h(1.0) };
        // Scales: k = 5 → low nibble of q[5], top bits at bits 2..4 of q[9];
        // k = 14 → high nibble of q[6], top bits at bits 6..8 of q[10].
        b.scales[5] = 0x07;
        b.scales[9] = 0b0000_1000; // top bits 2 → scale 0x27 = 39 − 32 = 7
        b.scales[6] = 0xF0;
        b.scales[10] = 0b1100_0000; // 0x3F = 63 − 32 = 31
        assert_eq!(q3k_scales(&b.scales)[5], 7);
        assert_eq!(q3k_scales(&b.scales)[14], 31);
        assert_eq!(q3k_scales(&[0; 12])[0], -32);
        // Sub-block 5 element 2: byte 16 + 2 of group 0, shift 2·2 = 4; mask
        // bit 5/2 = 2 of hmask[16 + 2].
        b.qs[18] = 0b0010_0000; // low bits 2
        b.hmask[18] = 0b100;
        let y = dequant(GgmlType::Q3K, &b.to_le_bytes(), 256);
        assert_eq!(y[5 * 16 + 2], 7.0 * 2.0);
        assert_eq!(y[5 * 16 + 3], 7.0 * -4.0);
        assert_eq!(y[14 * 16], 31.0 * -4.0);
    }
}
