//! Activation quantization: an f32 row becomes blocks of 32 signed 16-bit
//! integers with one f32 scale each, so that mat-vec against quantized
//! weights runs on exact integer dot products. The layout is our own and
//! never stored in a file: it is chosen for the SIMD kernels.
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
//!
//! The K-quants (Q4_K, Q5_K, Q6_K) multiply 8-bit rows instead at the
//! default [`crate::act8::Precision::Int8`] ([`crate::act8`]): docs/accuracy.md
//! measures what that costs on the models that use them; these 16-bit rows
//! serve every other format at both precisions.
//!
//! # Layout ([`ActRow`], viewed as [`QRow`])
//!
//! Blocks are stored in pairs `(2p, 2p+1)`, each pair one 64-byte-aligned
//! [`QPair`] of 64 quants ordered
//!
//! ```text
//! [ block 2p: 0..16 | block 2p+1: 0..16 | block 2p: 16..32 | block 2p+1: 16..32 ]
//! ```
//!
//! so that one 512-bit register holds the first halves of both blocks and
//! another the second halves: exactly where a Q4 weight pair's low and high
//! nibbles land when its 32 packed bytes are widened to 16 bits
//! (`kernels::matvec` module docs). A 256-bit kernel reads one block's half
//! as one aligned 32-byte load. When the row has an odd number of blocks, the
//! last pair's second block is all zeros.
//!
//! Per-block scales `d`, the float sums `s = d * sum(q)` and the integer sums
//! are kept in separate arrays (the kernels load sixteen blocks' scales with
//! one vector load), each padded with zeros to a multiple of
//! [`SCALE_GROUP`] blocks.

use crate::quant::QK;

/// Largest quant magnitude: symmetric, so `-QMAX..=QMAX`.
pub const QMAX: i32 = 32767;

/// The per-block arrays of an [`ActRow`] are padded with zeros to a multiple
/// of this many blocks: the SIMD kernels read sixteen scales at a time.
pub const SCALE_GROUP: usize = 16;

/// Two blocks of quants in the interleaved order of the module docs.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QPair {
    pub qs: [i16; 2 * QK],
}
const _: () = assert!(std::mem::size_of::<QPair>() == 128);

impl Default for QPair {
    fn default() -> Self {
        QPair { qs: [0; 2 * QK] }
    }
}

/// Index in a pair's `qs` of element `e` (0..32) of the pair's block `h` (0 or 1).
#[inline]
pub const fn pair_index(h: usize, e: usize) -> usize {
    (e / 16) * 32 + h * 16 + e % 16
}

/// A borrowed quantized activation row: `x[32 b + e] ≈ d[b] * quant(b, e)`.
#[derive(Clone, Copy, Debug)]
pub struct QRow<'a> {
    /// `nb.div_ceil(2)` pairs.
    pub pairs: &'a [QPair],
    /// Per block scale; length `nb` rounded up to [`SCALE_GROUP`], zero-padded.
    pub d: &'a [f32],
    /// Per block `d * sum`; padded like `d`.
    pub s: &'a [f32],
    /// Per block exact integer sum of the quants; padded like `d`.
    pub sum: &'a [i32],
    /// Number of 32-element blocks.
    pub nb: usize,
}

impl<'a> QRow<'a> {
    /// The row of no blocks (for inputs that feed only f32 matrices).
    pub const EMPTY: QRow<'static> = QRow { pairs: &[], d: &[], s: &[], sum: &[], nb: 0 };

    /// Quant `e` (0..32) of block `b`.
    #[inline]
    pub fn quant(&self, b: usize, e: usize) -> i16 {
        self.pairs[b / 2].qs[pair_index(b % 2, e)]
    }

    /// The 32 quants of block `b` in element order.
    pub fn block_quants(&self, b: usize) -> [i16; QK] {
        std::array::from_fn(|e| self.quant(b, e))
    }
}

/// Quantizes one block: `d = max|x| / 32767`, `q = round(x * (1/d))` (ties
/// away from zero), so `q` lies in -32767..=32767 and every block dot of a
/// weight format fits `i32` (Q8_0: 32·128·32767 < 2^31). A zero block has
/// `d = 0`. Returns `(d, sum(q))`.
fn quantize_block(x: &[f32], q: &mut [i16; QK]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / QMAX as f32;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (qv, &v) in q.iter_mut().zip(x) {
        let r = round_half_away(v * id).clamp(-QMAX, QMAX);
        *qv = r as i16;
        sum += r;
    }
    (d, sum)
}

/// [`quantize_block`] with AVX-512: the same operations lane by lane (the
/// maximum is exact in any order, a NaN product is zeroed as the saturating
/// cast does, the sum is an exact integer sum), so the same bits.
///
/// # Safety
/// AVX-512 F/BW; `x` has 32 elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_block_avx512(x: &[f32], q: &mut [i16; QK]) -> (f32, i32) {
    use std::arch::x86_64::*;
    debug_assert_eq!(x.len(), QK);
    // SAFETY: x has 32 elements (two 16-float loads); q has 32 i16 (two
    // 16-i16 stores).
    unsafe {
        let halves = [_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(x.as_ptr().add(16))];
        // `max_ps(a, m)` returns `m` when `a` is NaN: f32::max's NaN rule.
        let mut m = _mm512_setzero_ps();
        for h in halves {
            m = _mm512_max_ps(_mm512_abs_ps(h), m);
        }
        let amax = _mm512_reduce_max_ps(m);
        let d = amax / QMAX as f32;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = _mm512_setzero_si512();
        for (k, h) in halves.into_iter().enumerate() {
            let p = _mm512_mul_ps(h, _mm512_set1_ps(id));
            let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(p, p);
            let t = _mm512_maskz_mov_epi32(ordered, _mm512_cvttps_epi32(p));
            let frac = _mm512_sub_ps(p, _mm512_cvtepi32_ps(t));
            let one = _mm512_set1_epi32(1);
            let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, _mm512_set1_ps(0.5));
            let down = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(frac, _mm512_set1_ps(-0.5));
            let r = _mm512_mask_sub_epi32(_mm512_mask_add_epi32(t, up, t, one), down, t, one);
            let r = _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(-QMAX)), _mm512_set1_epi32(QMAX));
            sum = _mm512_add_epi32(sum, r);
            _mm256_storeu_si256(q.as_mut_ptr().add(16 * k).cast(), _mm512_cvtepi32_epi16(r));
        }
        (d, _mm512_reduce_add_epi32(sum))
    }
}

/// Whether [`quantize_block_avx512`] can run here (checked once).
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")
    })
}

/// One block with the fastest implementation this CPU has (all give the
/// same bits).
#[inline]
fn quantize_block_fast(x: &[f32], q: &mut [i16; QK]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512 F/BW (checked); x is one block.
        return unsafe { quantize_block_avx512(x, q) };
    }
    quantize_block(x, q)
}

/// `v.round() as i32` (ties away from zero) without the `roundf` library
/// call that baseline x86-64 code makes for `f32::round`: truncate, then
/// step away from zero when the exact remainder is at least one half. Exact
/// for |v| < 2^24 (every value here is at most 32767.5 in magnitude); NaN
/// gives 0 like the saturating cast.
#[inline]
fn round_half_away(v: f32) -> i32 {
    let t = v as i32;
    let frac = v - t as f32;
    if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    }
}

/// A quantized activation row, reusable across calls to avoid reallocation.
#[derive(Clone, Debug, Default)]
pub struct ActRow {
    pairs: Vec<QPair>,
    d: Vec<f32>,
    s: Vec<f32>,
    sum: Vec<i32>,
    nb: usize,
}

impl ActRow {
    /// Re-quantizes `x` into this row's storage.
    ///
    /// # Panics
    /// If `x.len()` is not a multiple of 32: a programming error, never
    /// input-driven (matrix shapes are validated at load).
    pub fn quantize(&mut self, x: &[f32]) {
        assert!(x.len().is_multiple_of(QK), "activation length must be a multiple of 32");
        let nb = x.len() / QK;
        let padded = nb.next_multiple_of(SCALE_GROUP);
        self.nb = nb;
        self.pairs.clear();
        self.pairs.resize(nb.div_ceil(2), QPair::default());
        for v in [&mut self.d, &mut self.s] {
            v.clear();
            v.resize(padded, 0.0);
        }
        self.sum.clear();
        self.sum.resize(padded, 0);
        for (b, xb) in x.chunks_exact(QK).enumerate() {
            let mut q = [0i16; QK];
            let (d, sum) = quantize_block_fast(xb, &mut q);
            let pair = &mut self.pairs[b / 2].qs;
            // The block's halves land in two contiguous runs of sixteen.
            let h = b % 2;
            pair[pair_index(h, 0)..][..16].copy_from_slice(&q[..16]);
            pair[pair_index(h, 16)..][..16].copy_from_slice(&q[16..]);
            self.d[b] = d;
            self.sum[b] = sum;
            self.s[b] = d * sum as f32;
        }
    }

    /// The row as the kernels read it.
    pub fn view(&self) -> QRow<'_> {
        QRow { pairs: &self.pairs, d: &self.d, s: &self.s, sum: &self.sum, nb: self.nb }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(x: &[f32]) -> ActRow {
        let mut r = ActRow::default();
        r.quantize(x);
        r
    }

    #[test]
    fn quantize_row_reproduces_values_within_half_a_step() {
        let x: Vec<f32> = (0..96).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let r = row(&x);
        let q = r.view();
        for (i, v) in x.iter().enumerate() {
            let (b, e) = (i / 32, i % 32);
            let back = q.d[b] * q.quant(b, e) as f32;
            assert!((back - v).abs() <= q.d[b] * 0.5 + 1e-6, "{i}: {back} vs {v}");
        }
        for b in 0..3 {
            let qs = q.block_quants(b);
            assert_eq!(q.sum[b], qs.iter().map(|&v| v as i32).sum::<i32>());
            assert!(qs.iter().any(|&v| v.abs() as i32 == QMAX));
            assert_eq!(q.s[b], q.d[b] * q.sum[b] as f32);
        }
    }

    #[test]
    fn a_reused_row_equals_a_fresh_one_after_longer_and_shorter_rows() {
        let long: Vec<f32> = (0..48 * 32).map(|i| ((i as f32) * 0.11).cos() * 7.0 + 1.0).collect();
        let mut reused = ActRow::default();
        for len in [48, 3, 18, 48, 1, 17, 2] {
            let x = &long[..len * 32];
            reused.quantize(&long);
            reused.quantize(x);
            let fresh = row(x);
            let (a, b) = (reused.view(), fresh.view());
            assert_eq!((a.nb, a.pairs, a.d, a.s, a.sum), (b.nb, b.pairs, b.d, b.s, b.sum), "{len} blocks");
        }
    }

    #[test]
    fn odd_block_count_leaves_the_partner_slot_and_scale_padding_zero() {
        let x: Vec<f32> = (0..96).map(|i| i as f32 - 40.0).collect();
        let r = row(&x);
        let q = r.view();
        assert_eq!((q.nb, q.pairs.len(), q.d.len()), (3, 2, SCALE_GROUP));
        assert!((0..32).all(|e| q.pairs[1].qs[pair_index(1, e)] == 0));
        assert!(q.d[3..].iter().chain(&q.s[3..]).all(|&v| v == 0.0) && q.sum[3..].iter().all(|&v| v == 0));
    }

    #[test]
    fn pairs_interleave_block_halves() {
        let x: Vec<f32> = (0..64).map(|i| i as f32 + 1.0).collect();
        let r = row(&x);
        let p = &r.view().pairs[0].qs;
        // Each block's largest element (its last) quantizes to QMAX.
        assert_eq!((p[47], p[63]), (QMAX as i16, QMAX as i16));
        // Block 0 element 0 first, then block 1 element 0 at slot 16.
        assert!(p[0] < p[16]);
    }

    #[test]
    fn round_half_away_matches_f32_round_on_ties_and_near_ties() {
        let mut vals = vec![0.0f32, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 32767.5, -32767.5, 0.49999997, -0.49999997];
        vals.extend((0..20_000).map(|i| (i as f32 - 10_000.0) * 3.2767 + 0.25 * (i % 4) as f32));
        vals.extend(
            [0.5f32, 1.5, 1000.5].iter().flat_map(|&v| [v.next_up(), v.next_down(), -v.next_up(), -v.next_down()]),
        );
        for v in vals {
            assert_eq!(round_half_away(v), v.round() as i32, "{v}");
        }
        assert_eq!(round_half_away(f32::NAN), 0);
    }

    /// The SIMD block quantizer against the scalar one, bit for bit, on
    /// random blocks of many magnitudes, ties, a huge outlier, zeros,
    /// signed zeros, infinities and NaN.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_block_quantizer_equals_the_scalar_one() {
        if !has_avx512() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut blocks: Vec<[f32; QK]> = Vec::new();
        for i in 0..4000 {
            let scale = [1e-30f32, 1e-3, 1.0, 3.0, 1e4, 2e4, 1e30][i % 7];
            blocks.push(std::array::from_fn(|_| ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale));
        }
        // Exact ties: element k of 32767·k/2 over a max of 32767 gives k/2.
        blocks.push(std::array::from_fn(|k| if k == 31 { 32767.0 } else { k as f32 * 0.5 - 7.0 }));
        blocks.push(std::array::from_fn(|k| if k == 3 { -2.0e4 } else { (k as f32).sin() }));
        blocks.push([0.0; QK]);
        blocks.push(std::array::from_fn(|k| if k % 2 == 0 { -0.0 } else { 0.0 }));
        blocks.push(std::array::from_fn(|k| if k == 5 { f32::INFINITY } else { k as f32 }));
        blocks.push(std::array::from_fn(|k| if k == 9 { f32::NAN } else { k as f32 - 16.0 }));
        blocks.push([f32::NAN; QK]);
        for (i, x) in blocks.iter().enumerate() {
            let (mut a, mut b) = ([0i16; QK], [0i16; QK]);
            let (da, sa) = quantize_block(x, &mut a);
            // SAFETY: AVX-512 checked above; x is one block.
            let (db, sb) = unsafe { quantize_block_avx512(x, &mut b) };
            assert_eq!((da.to_bits(), sa, a), (db.to_bits(), sb, b), "block {i}: {x:?}");
        }
    }

    #[test]
    fn zero_block_quantizes_to_zero_scale() {
        let r = row(&[0.0; 32]);
        assert_eq!((r.view().d[0], r.view().sum[0]), (0.0, 0));
    }

    #[test]
    fn requantizing_a_shorter_row_forgets_the_longer_one() {
        let mut r = row(&[5.0; 96]);
        r.quantize(&[1.0; 32]);
        let q = r.view();
        assert_eq!((q.nb, q.pairs.len()), (1, 1));
        assert!((0..32).all(|e| q.pairs[0].qs[pair_index(1, e)] == 0));
    }
}
