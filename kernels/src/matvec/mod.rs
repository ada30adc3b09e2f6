//! Quantized matrix × vector products.
//!
//! A [`Matrix`] is a view of `rows` weight rows of `cols` elements in one
//! storage type. Quantized weights are multiplied against an activation row
//! quantized once to 16-bit blocks ([`crate::act`]); each block's product is
//! an exact integer dot, and the float combination runs in one fixed order
//! per output, spelled out in [`scalar`]. Every SIMD family follows that
//! order lane by lane, so all families produce bit-identical results: the
//! family decides speed, never output.
//!
//! Entry points: [`matvec_rows`] computes a contiguous range of output rows
//! for one activation row (the runtime splits rows across threads, never a
//! reduction), and [`matmul_rows`] does the same for `W` activation rows at
//! once (a verify block or a prefill), streaming each weight row once for
//! all of them: the SIMD families keep up to
//! [`crate::dispatch::max_rows_per_pass`] rows' accumulators in registers and
//! run wider blocks in chunks of that many. Each output is a pure function
//! of (weight row, activation row), so a row of a `W`-row call is bit for
//! bit the single-row call on that row.
//!
//! ## SIMD data flow (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
//!
//! These formats are multiplied in the row-interleaved layout of [`r16`]
//! (the runtime repacks its weights once at load; a GGUF-layout [`Matrix`]
//! is repacked sixteen rows at a time on the way). A 32-byte chunk of a
//! tile widens to one register whose 32-bit lane `j` holds two elements of
//! weight row `j`; `vpdpwssd` against the matching pair of activation
//! quants, broadcast to all lanes, adds both products to each of the
//! sixteen rows' integer sums at once. After a block's sixteen (Q8_0) or
//! eight (Q4, Q5) chunks, every lane holds its row's exact block sum, and one
//! conversion and one FMA per activation row apply the block's scales to
//! sixteen outputs: the serial chain of [`scalar`]. The per-activation-row
//! work is the integer products plus about three instructions per
//! sixteen rows and block, which is what lets a verify block of several
//! rows cost little more than one row. Q5_0 / Q5_1 (`x86/interleaved_q5.rs`) add each
//! row's fifth bits to the widened nibbles with one shift of the tile's
//! permuted bit words per chunk ([`r16`] docs), shared by all activation
//! rows.
//!
//! ## SIMD data flow (Q4_K, Q5_K, Q6_K)
//!
//! The K-quants have a row-interleaved layout too ([`r16::k`]): one tile per
//! sixteen rows and 256-element super-block, holding the rows' GGUF bytes
//! moved, not changed. A chunk's low nibbles are one sub-block's elements
//! and its high nibbles another's, so each activation row keeps two integer
//! accumulators, and per sub-block one conversion, one scale product and
//! one FMA (two for Q4_K / Q5_K's min) advance sixteen outputs: the
//! specification's serial chain ([`scalar`]). The sixteen rows' sub-block
//! scales are byte planes, widened to one lane per row and multiplied by
//! `d` once per tile. Q5_K's fifth bits and Q6_K's top two bits are merged
//! into the widened nibbles once per chunk for all activation rows
//! (`x86/interleaved_k.rs`).
//!
//! At 8-bit activations ([`crate::act8`], [`scalar8`]) the same tiles feed
//! `vpdpbusd` (AVX2: `vpmaddubsw`): a `vpermw` of two chunks gives each
//! lane four consecutive bytes of its row, and each activation row pays one
//! instruction per 64 products and one or two FMAs per super-block
//! (`x86/interleaved_k8.rs`).
//!
//! ## SIMD data flow (Q2_K, Q3_K)
//!
//! These keep GGUF's layout and the lane specification of [`scalar`]. Their
//! sixteen 16-element sub-blocks carry small integer scales that the
//! kernels (`x86/q2k_q3k.rs`) fold into the integer weights: a half
//! super-block decodes at byte level into four 32-byte sub-blocks of
//! signed quants (Q2_K's 2-bit ones, Q3_K's 2 low bits and the `hmask` bit),
//! each 16-element half is widened and multiplied by its scale, and the
//! lanes meet the pair-interleaved activation ([`crate::act::QPair`]). Q2_K's mins are a second set
//! of integer lanes (the min of each 16 elements against the activation
//! quants) scaled by `dmin`.
//!
//! ## F16 and BF16
//!
//! Half-precision matrices multiply the f32 activation ([`scalar::dot_f16`]:
//! [`scalar::dot_f32`]'s eight lanes over the widened weights, which are
//! exact). The x86 kernels (`x86/half.rs`) widen eight weights per step
//! (`vcvtph2ps`, or a 16-bit shift for BF16) once for up to eight
//! activation rows, each row its own accumulator chain, so a `W`-row call
//! streams a weight row once.

pub mod r16;
pub mod scalar;
pub mod scalar8;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::act::QRow;
use crate::act8::Q8Row;
use crate::dispatch::{self, FamilyKind, KernelFamily};
use crate::quant::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
    QK,
};

/// Weight storage of a matrix, row-major: row `r` occupies blocks
/// `r * blocks_per_row .. (r + 1) * blocks_per_row`.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a> {
    Q4_0(&'a [BlockQ4_0]),
    Q4_1(&'a [BlockQ4_1]),
    Q5_0(&'a [BlockQ5_0]),
    Q5_1(&'a [BlockQ5_1]),
    Q8_0(&'a [BlockQ8_0]),
    Q2K(&'a [BlockQ2K]),
    Q3K(&'a [BlockQ3K]),
    Q4K(&'a [BlockQ4K]),
    Q5K(&'a [BlockQ5K]),
    Q6K(&'a [BlockQ6K]),
    /// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K in the
    /// row-interleaved layout ([`r16`]).
    R16(r16::R16<'a>),
    F32(&'a [f32]),
    /// IEEE half floats as raw bits (little-endian in the file, native here).
    F16(&'a [u16]),
    /// bfloat16 (the top half of an f32) as raw bits.
    BF16(&'a [u16]),
}

/// A weight matrix of shape (rows, cols): `y = W x` maps `cols` inputs to
/// `rows` outputs.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub rows: usize,
    pub cols: usize,
    pub w: Weights<'a>,
}

/// Why bytes could not be viewed as a matrix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatrixError {
    #[error("{ty} matrix {rows}x{cols}: {cols} columns is not a whole number of {block}-element blocks")]
    Columns { ty: &'static str, rows: usize, cols: usize, block: usize },
    #[error("{ty} matrix {rows}x{cols} needs {expected} bytes, got {got}")]
    Length { ty: &'static str, rows: usize, cols: usize, expected: usize, got: usize },
    #[error("{ty} weights are not {align}-byte aligned in memory")]
    Alignment { ty: &'static str, align: usize },
}

fn cast<T>(ty: GgmlType, bytes: &[u8]) -> Result<&[T], MatrixError> {
    let size = std::mem::size_of::<T>();
    let align = std::mem::align_of::<T>();
    if !(bytes.as_ptr() as usize).is_multiple_of(align) {
        return Err(MatrixError::Alignment { ty: ty.name(), align });
    }
    debug_assert_eq!(bytes.len() % size, 0);
    // SAFETY: T is a #[repr(C)] plain-old-data block (or f32) with no
    // invalid bit patterns; the pointer is aligned for T (checked above) and
    // the length is a whole number of T (checked by the caller), so the
    // slice covers exactly the caller's bytes and borrows them.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
}

impl<'a> Matrix<'a> {
    /// Views `bytes` as a (rows, cols) matrix of type `ty`, checking the
    /// block structure, the length and the alignment.
    pub fn from_bytes(ty: GgmlType, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self, MatrixError> {
        let block = ty.block_elems();
        if !cols.is_multiple_of(block) || (block > 1 && !cols.is_multiple_of(QK)) {
            return Err(MatrixError::Columns { ty: ty.name(), rows, cols, block: block.max(QK) });
        }
        let expected = ty.row_bytes(cols).and_then(|rb| rb.checked_mul(rows)).ok_or(MatrixError::Length {
            ty: ty.name(),
            rows,
            cols,
            expected: usize::MAX,
            got: bytes.len(),
        })?;
        if expected != bytes.len() {
            return Err(MatrixError::Length { ty: ty.name(), rows, cols, expected, got: bytes.len() });
        }
        let w = match ty {
            GgmlType::Q4_0 => Weights::Q4_0(cast(ty, bytes)?),
            GgmlType::Q4_1 => Weights::Q4_1(cast(ty, bytes)?),
            GgmlType::Q5_0 => Weights::Q5_0(cast(ty, bytes)?),
            GgmlType::Q5_1 => Weights::Q5_1(cast(ty, bytes)?),
            GgmlType::Q8_0 => Weights::Q8_0(cast(ty, bytes)?),
            GgmlType::Q2K => Weights::Q2K(cast(ty, bytes)?),
            GgmlType::Q3K => Weights::Q3K(cast(ty, bytes)?),
            GgmlType::Q4K => Weights::Q4K(cast(ty, bytes)?),
            GgmlType::Q5K => Weights::Q5K(cast(ty, bytes)?),
            GgmlType::Q6K => Weights::Q6K(cast(ty, bytes)?),
            GgmlType::F32 => Weights::F32(cast(ty, bytes)?),
            // The file is little endian; so is every target this crate's
            // kernels build for (x86_64, and aarch64 in its usual mode).
            GgmlType::F16 => Weights::F16(cast(ty, bytes)?),
            GgmlType::BF16 => Weights::BF16(cast(ty, bytes)?),
        };
        Ok(Matrix { rows, cols, w })
    }

    /// A matrix over f32 weights already in memory.
    ///
    /// # Panics
    /// If `w.len() != rows * cols` (a programming error).
    pub fn from_f32(w: &'a [f32], rows: usize, cols: usize) -> Self {
        assert_eq!(w.len(), rows * cols, "f32 matrix length");
        Matrix { rows, cols, w: Weights::F32(w) }
    }

    /// A matrix over 16-bit float weights already in memory (`bf16`:
    /// bfloat16 bits, else IEEE half bits).
    ///
    /// # Panics
    /// If `w.len() != rows * cols` (a programming error).
    pub fn from_f16_bits(w: &'a [u16], bf16: bool, rows: usize, cols: usize) -> Self {
        assert_eq!(w.len(), rows * cols, "16-bit matrix length");
        Matrix { rows, cols, w: if bf16 { Weights::BF16(w) } else { Weights::F16(w) } }
    }

    /// Whether products read the quantized activation (true) or the f32 one.
    pub fn wants_quantized_input(&self) -> bool {
        !matches!(self.w, Weights::F32(_) | Weights::F16(_) | Weights::BF16(_))
    }

    /// Whether this matrix multiplies 8-bit activations at
    /// [`Precision::Int8`](crate::act8::Precision): Q4_K, Q5_K and Q6_K, in
    /// either layout. (Q2_K / Q3_K and the non-K formats stay on 16 bits.)
    pub fn takes_int8(&self) -> bool {
        match self.w {
            Weights::Q4K(_) | Weights::Q5K(_) | Weights::Q6K(_) => true,
            Weights::R16(v) => matches!(v.fmt, r16::R16Format::K(_)),
            _ => false,
        }
    }
}

/// One activation row in its forms: f32 (for f32 weights), quantized to
/// 16 bits (for block-quantized weights) and, at
/// [`Precision::Int8`](crate::act8::Precision), to 8 bits (for the K-quants).
/// `q` may be [`QRow::EMPTY`] when no matrix consuming the row reads it, and
/// `q8` is [`Q8Row::EMPTY`] unless the row is meant to meet the K-quants at
/// 8 bits: a K-quant matrix ([`Matrix::takes_int8`]) multiplies `q8` when
/// the inputs carry it and `q` otherwise, every other matrix `q`.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub x: &'a [f32],
    pub q: QRow<'a>,
    pub q8: Q8Row<'a>,
}

impl<'a> Input<'a> {
    /// A row with its f32 and 16-bit forms (no 8-bit one).
    pub fn new(x: &'a [f32], q: QRow<'a>) -> Self {
        Input { x, q, q8: Q8Row::EMPTY }
    }
}

/// Whether a product of `m` with `inputs` runs on the 8-bit rows: `m` is a
/// K-quant and the (first) input carries its 8-bit row.
fn uses_int8(m: &Matrix, inputs: &[Input]) -> bool {
    m.takes_int8() && inputs.first().is_some_and(|i| i.q8.nsb > 0)
}

/// Computes output rows `row0 .. row0 + out.len()` of `m · input` with the
/// given kernel family.
///
/// # Panics
/// On shape mismatches (programming errors): `input.x.len() != m.cols`, a
/// missing quantized input for a quantized matrix, or rows out of range.
pub fn matvec_rows(family: KernelFamily, m: &Matrix, input: Input, row0: usize, out: &mut [f32]) {
    matmul_rows_with(family, true, m, std::slice::from_ref(&input), row0, out);
}

/// Multi-row form: for each activation row `i`, computes output rows
/// `row0 .. row0 + n` of `m · inputs[i]` into `outs[i * n .. (i + 1) * n]`
/// where `n = outs.len() / inputs.len()`. Each row's result is bit-identical
/// to [`matvec_rows`] on that row alone.
///
/// One pass over the weights serves all rows, unless `DRAFTWISE_MULTIROW=0`
/// ([`dispatch::multirow_enabled`]) asks for the control: the single-row
/// kernel once per row.
pub fn matmul_rows(family: KernelFamily, m: &Matrix, inputs: &[Input], row0: usize, outs: &mut [f32]) {
    matmul_rows_with(family, dispatch::multirow_enabled(), m, inputs, row0, outs);
}

/// [`matmul_rows`] with the multi-row choice made by the caller (tests and
/// benchmarks compare both without touching the environment).
pub fn matmul_rows_with(
    family: KernelFamily,
    multirow: bool,
    m: &Matrix,
    inputs: &[Input],
    row0: usize,
    outs: &mut [f32],
) {
    if inputs.is_empty() {
        return;
    }
    assert_eq!(outs.len() % inputs.len(), 0, "outputs per input");
    let n = outs.len() / inputs.len();
    assert!(row0 + n <= m.rows, "rows out of range");
    let int8 = uses_int8(m, inputs);
    for inp in inputs {
        assert_eq!(inp.x.len(), m.cols, "input length");
        if int8 {
            assert_eq!(inp.q8.nsb * crate::quant::QK_K, m.cols, "8-bit input length (every input or none)");
        } else if m.wants_quantized_input() {
            assert_eq!(inp.q.nb * QK, m.cols, "quantized input length");
        }
    }
    if !multirow && inputs.len() > 1 {
        for (inp, out) in inputs.iter().zip(outs.chunks_exact_mut(n)) {
            kernel(family, m, std::slice::from_ref(inp), row0, out);
        }
        return;
    }
    kernel(family, m, inputs, row0, outs);
}

/// Shapes checked; runs the family's kernel, or the scalar one.
fn kernel(family: KernelFamily, m: &Matrix, inputs: &[Input], row0: usize, outs: &mut [f32]) {
    let int8 = uses_int8(m, inputs);
    #[cfg(target_arch = "x86_64")]
    if family.kind() != FamilyKind::Scalar && (!int8 || x86::has_int8_kernel(family)) {
        x86::matmul_rows(family, m, inputs, row0, outs);
        return;
    }
    let _ = family;
    let n = outs.len() / inputs.len();
    for (inp, out) in inputs.iter().zip(outs.chunks_exact_mut(n)) {
        if int8 {
            scalar8::matvec_rows(m, *inp, row0, out);
        } else {
            scalar::matvec_rows(m, *inp, row0, out);
        }
    }
}

#[cfg(test)]
mod tests;

/// Four [`x86_dot_f32`]s of `a` at once, each bit for bit the single one.
///
/// # Safety
/// The CPU must support AVX2; every `b[k]` is at least `a.len()` long.
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
pub unsafe fn x86_dot4_f32(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    // SAFETY: forwarded from the caller.
    unsafe { x86::dot4_f32_avx2(a, b) }
}

/// The AVX2 twin of [`scalar::dot_f32`], for [`crate::ops`].
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
pub unsafe fn x86_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: forwarded from the caller.
    unsafe { x86::dot_f32_avx2(a, b) }
}
