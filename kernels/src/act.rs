//! Activation quantization: an f32 row becomes blocks of 32 signed 16-bit
//! integers with one f32 scale, so that mat-vec against quantized weights
//! runs on exact integer dot products. The layout is our own and never
//! stored in a file.
//!
//! Why 16 bits and not the 8 of ggml's `block_q8_1`: with 8-bit activations
//! every mat-vec carries ~1% relative error, and on SmolLM2-135M (whose
//! residual stream holds a ~2e4-norm outlier from layer 7 on) the errors add
//! up to 0.1–0.3 (up to 1.5) logits against exact arithmetic: enough to flip
//! the greedy answer to "What is the capital of France?" away from "The
//! capital of France is Paris." (measured against the float64 reference in
//! `reference/`). 16-bit activations put the engine within ~1e-3 of exact
//! arithmetic, at the cost of twice the integer multiply work per weight;
//! weight bytes read — what bounds decode — are unchanged.

use crate::quant::QK;

/// Largest quant magnitude: symmetric, so `-QMAX..=QMAX`.
pub const QMAX: i32 = 32767;

/// One block of a quantized activation row: `x[i] ≈ d * qs[i]`.
///
/// `sum` is the exact integer sum of `qs` and `s = d * sum` its float image,
/// both precomputed once per row because every weight row reuses them
/// (Q4_1's `m * s` term, Q4_0's `-8 * sum`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ16 {
    pub qs: [i16; QK],
    pub d: f32,
    pub s: f32,
    pub sum: i32,
    _pad: i32,
}
const _: () = assert!(std::mem::size_of::<BlockQ16>() == 80);

impl Default for BlockQ16 {
    fn default() -> Self {
        BlockQ16 { qs: [0; QK], d: 0.0, s: 0.0, sum: 0, _pad: 0 }
    }
}

/// Quantizes `x` (length a multiple of 32) into `out` (`x.len() / 32` blocks).
///
/// Per block: `d = max|x| / 32767`, `q = round(x * (1/d))` (ties away from
/// zero), so `q` lies in -32767..=32767; every block dot of a weight format
/// then fits `i32` (Q8_0: 32·128·32767 < 2^31). A zero block has d = 0.
///
/// # Panics
/// If `x.len() != 32 * out.len()`: a programming error, never input-driven.
pub fn quantize_row_q16(x: &[f32], out: &mut [BlockQ16]) {
    assert_eq!(x.len(), out.len() * QK, "activation length must be 32 * blocks");
    for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / QMAX as f32;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in ob.qs.iter_mut().zip(xb) {
            let r = (v * id).round() as i32;
            let r = r.clamp(-QMAX, QMAX);
            *q = r as i16;
            sum += r;
        }
        ob.d = d;
        ob.sum = sum;
        ob.s = d * sum as f32;
    }
}

/// A quantized activation row, reusable across calls to avoid reallocation.
#[derive(Clone, Debug, Default)]
pub struct ActRow {
    pub blocks: Vec<BlockQ16>,
}

impl ActRow {
    /// Re-quantizes `x` into this row's storage.
    pub fn quantize(&mut self, x: &[f32]) {
        self.blocks.resize(x.len() / QK, BlockQ16::default());
        quantize_row_q16(x, &mut self.blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_row_reproduces_values_within_half_a_step() {
        let x: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let mut b = vec![BlockQ16::default(); 2];
        quantize_row_q16(&x, &mut b);
        for (i, v) in x.iter().enumerate() {
            let blk = &b[i / 32];
            let back = blk.d * blk.qs[i % 32] as f32;
            assert!((back - v).abs() <= blk.d * 0.5 + 1e-6, "{i}: {back} vs {v}");
        }
        for blk in &b {
            assert_eq!(blk.sum, blk.qs.iter().map(|&q| q as i32).sum::<i32>());
            assert!(blk.qs.iter().any(|&q| q.abs() as i32 == QMAX));
        }
    }

    #[test]
    fn zero_block_quantizes_to_zero_scale() {
        let mut b = vec![BlockQ16::default(); 1];
        quantize_row_q16(&[0.0; 32], &mut b);
        assert_eq!(b[0].d, 0.0);
        assert_eq!(b[0].sum, 0);
    }
}
