//! The scalar mat-vec kernels: the specification every SIMD family matches
//! bit for bit.
//!
//! # Legacy formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
//!
//! One output is the dot product of a weight row of `nb` blocks with an
//! activation row ([`QRow`], 16-bit quants `qx` with per-block scale `dx` and
//! `sx = dx * Σ qx`). It is one serial chain, in block order:
//!
//! ```text
//! y = +0.0
//! for b in 0..nb:
//!     isum = Σ_e qw[e] · qx[e]                  exact, in i32
//!     y = fma(f32(isum), f32(dw_b) * dx_b, y)   the product rounded once
//!     y = fma(f32(mw_b), sx_b, y)               Q4_1, Q5_1 only
//! ```
//!
//! The weight quant `qw` is the signed byte (Q8_0), the nibble (Q4_1), the
//! nibble − 8 (Q4_0), the 5-bit quant (Q5_1) or the 5-bit quant − 16
//! (Q5_0); with |qw| ≤ 128 and |qx| ≤ 32767 a block's sum stays below 2^31,
//! so it is exact in any order (a kernel may, for instance, take Q5_0's sum
//! as `Σ q·qx − 16·Σ qx`: the same integer). `f32(isum)` rounds to nearest
//! even (exact below 2^24, i.e. always for the Q4 formats; Q5 and Q8_0 sums
//! can round). `fma` is a fused multiply-add (one rounding).
//!
//! This is what the row-interleaved kernels ([`super::r16`]) compute: each
//! 32-bit lane is one output, a block's integer sum arrives whole in it, and
//! one FMA per block applies the scale to sixteen outputs at once. (A
//! specification that spread a block over eight lanes, each scaled
//! separately, and reduced them with a tree would tie the kernels to a
//! register holding one row's elements, whose per-row float work dominates
//! a speculative verify block.)
//!
//! The result depends only on the weight row and the activation row: not on
//! which rows are computed together, the thread count, the family or the
//! weight layout.
//!
//! # K-quants (Q4_K, Q5_K, Q6_K)
//!
//! A 256-element super-block is eight 32-element sub-blocks (Q6_K: sixteen
//! 16-element ones), and elements `32j .. 32j + 32` of super-block `sb`
//! meet activation block `b = 8·sb + j`. They are the legacy chain with a
//! scale per sub-block: one output is one serial chain, one exact integer
//! sum and one FMA per sub-block.
//!
//! - **Q4_K / Q5_K**, sub-blocks `j = 0..8` in order, with the 6-bit scale
//!   `sc_j` and min `m_j` ([`get_scale_min_k4`]) and the unsigned 4- or
//!   5-bit quants `qw`:
//!
//!   ```text
//!   isum = Σ_e qw[e] · qx[e]                           exact, in i32
//!   y = fma(f32(isum), (d · f32(sc_j)) · dx_b, y)
//!   y = fma(−(dmin · f32(m_j)), sx_b, y)
//!   ```
//!
//!   `d · f32(sc_j)` and `dmin · f32(m_j)` are exact (a half float times a
//!   6-bit integer), so each FMA's scale is rounded once. A Q4_K sum is
//!   below 2^24 (exact as f32); a Q5_K sum can round.
//! - **Q6_K**, 16-element sub-blocks `k`, with the signed quants `q`
//!   (−32..32) and the signed 8-bit scale `sc_k`:
//!
//!   ```text
//!   isum = Σ_{e in sub-block k} q[e] · qx[e]           exact, below 2^24
//!   y = fma(f32(isum), (d · f32(sc_k)) · dx_b, y)
//!   ```
//!
//!   in the order GGUF's `ql` bytes meet them ([`Q6K_ORDER`]): each quarter
//!   of `ql` holds the low nibbles of one 32-element block `a` and the high
//!   nibbles of block `a + 2`, so the sub-blocks run `2a, 2a + 4, 2a + 1,
//!   2a + 5` for `a = 0, 1, 4, 5`.
//!
//! This is what the row-interleaved kernels of `r16::k` compute, one output
//! per 32-bit lane; an earlier specification spread a sub-block over eight
//! lanes with a scale each, which bound the kernels to GGUF's layout and
//! cost a verify block's every row eight times the float work.
//!
//! # K-quants with 16-element sub-blocks (Q2_K, Q3_K)
//!
//! These keep GGUF's layout and a lane specification: a block's products
//! are spread over eight integer lanes, each scaled on its own. Their
//! scales are small integers per 16 elements, folded into the integer
//! weights. For activation block `b = 8·sb + j` (elements `32j .. 32j + 32`
//! of super-block `sb`):
//!
//! 1. `qw[e] = sc[2j + e/16] · q[32j + e]`: Q3_K's signed scale (−32..32)
//!    times its quant (−4..4), Q2_K's 4-bit scale times its 2-bit quant.
//!    The exact products `qw[e] · qx[e]` are summed into eight `i32` lanes:
//!    lane `i` (0..8) takes elements `{2i, 2i+1, 16+2i, 17+2i}`
//!    ([`lane_isums`]), what `vpmaddwd`/`vpdpwssd` give when a block's first
//!    and second halves sit in two registers of sixteen 16-bit values
//!    (|qw| ≤ 128: a lane stays below 2^24).
//! 2. Sixteen `f32` accumulators `acc` start at +0.0. Even blocks update
//!    lanes 0..8, odd blocks lanes 8..16:
//!    `acc[8·(b%2) + i] = fma(p_b, f32(isum_b[i]), acc[8·(b%2) + i])` with
//!    `p_b = d · dx_b` (one rounding).
//! 3. Q2_K only: the mins are integer lanes too, `mw[e] = m[2j + e/16]`
//!    (4-bit), [`lane_isums`]`(mw)` added to a second sixteen-lane array
//!    `mt` with `fma(dmin · dx_b, f32(isum), mt[..])` in the same even/odd
//!    halves.
//! 4. `reduce16(acc)`, minus `reduce16(mt)` for Q2_K.
//!
//! Accumulators never hold −0.0 (they start at +0.0 and round-to-nearest
//! never sums to −0.0 unless both addends are −0.0), so a SIMD kernel may
//! apply `fma(0, 0, a)` to a lane it has nothing for: that leaves the lane
//! unchanged.
//!
//! Both integer sums are exact, so this is `Σ_e (d·sc·q − dmin·m)·dx·qx`
//! up to the float combination's rounding.
//!
//! # Float weights
//!
//! f32 weights use [`dot_f32`]: eight interleaved partial sums, reduced by a
//! fixed tree, then the tail.

use super::r16::k::{self as r16k, KFormat};
use super::r16::{GROUP, R16, R16Format};
use super::{Input, Matrix, Weights};
use crate::act::QRow;
use crate::quant::dequant::get_scale_min_k4;
use crate::quant::dequant::q5_quants;
use crate::quant::dequant::{k_low2, q3k_quant, q3k_scales};
use crate::quant::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, QK, QK_K,
};
use half::{bf16, f16};

#[inline]
fn h(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Step 1 of the specification: the eight integer lane sums of block `b`,
/// lane `i` over elements `{2i, 2i+1, 16+2i, 17+2i}`.
#[inline]
pub fn lane_isums(qw: &[i32; QK], x: &QRow, b: usize) -> [i32; 8] {
    let qx = x.block_quants(b);
    std::array::from_fn(|i| [2 * i, 2 * i + 1, 16 + 2 * i, 17 + 2 * i].iter().map(|&e| qw[e] * qx[e] as i32).sum())
}

/// Step 2: adds block `b`'s lanes, scaled by `p`, into its half of `acc`.
#[inline]
fn add_block(acc: &mut [f32; 16], b: usize, p: f32, isum: [i32; 8]) {
    let o = 8 * (b % 2);
    for (i, &v) in isum.iter().enumerate() {
        acc[o + i] = p.mul_add(v as f32, acc[o + i]);
    }
}

/// The sixteen-lane reduction tree: `reduce8([a[i] + a[i + 8]])`.
#[inline]
pub fn reduce16(a: [f32; 16]) -> f32 {
    reduce8(std::array::from_fn(|i| a[i] + a[i + 8]))
}

/// The 32 nibbles of a Q4 block in element order: element `j` is the low
/// nibble of byte `j`, element `j + 16` its high nibble.
#[inline]
fn nibbles(qs: &[u8; QK / 2]) -> [i32; QK] {
    std::array::from_fn(|e| if e < 16 { (qs[e] & 0x0F) as i32 } else { (qs[e - 16] >> 4) as i32 })
}

/// The legacy-format chain of the specification: block `b`'s integer
/// weights `qw`, its scale `dw` and (Q4_1) its min `mw`, from `block(b)`.
#[inline]
pub fn dot_legacy(nb: usize, x: &QRow, block: impl Fn(usize) -> (f32, Option<f32>, [i32; QK])) -> f32 {
    let mut y = 0.0f32;
    for b in 0..nb {
        let (dw, mw, qw) = block(b);
        let qx = x.block_quants(b);
        let isum: i32 = qw.iter().zip(&qx).map(|(&w, &v)| w * v as i32).sum();
        y = (isum as f32).mul_add(dw * x.d[b], y);
        if let Some(m) = mw {
            y = m.mul_add(x.s[b], y);
        }
    }
    y
}

/// `Σ w[i]·x[i]` for Q8_0 weights against one activation row.
pub fn dot_q8_0(w: &[BlockQ8_0], x: QRow) -> f32 {
    dot_legacy(w.len(), &x, |b| (h(w[b].d), None, std::array::from_fn(|e| w[b].qs[e] as i32)))
}

/// Q4_0 weights: `w = d·(q − 8)`.
pub fn dot_q4_0(w: &[BlockQ4_0], x: QRow) -> f32 {
    dot_legacy(w.len(), &x, |b| (h(w[b].d), None, nibbles(&w[b].qs).map(|q| q - 8)))
}

/// Q4_1 weights: `w = d·q + m`.
pub fn dot_q4_1(w: &[BlockQ4_1], x: QRow) -> f32 {
    dot_legacy(w.len(), &x, |b| (h(w[b].d), Some(h(w[b].m)), nibbles(&w[b].qs)))
}

/// Q5_0 weights: `w = d·(q − 16)`, `q` the 5-bit quant.
pub fn dot_q5_0(w: &[BlockQ5_0], x: QRow) -> f32 {
    dot_legacy(w.len(), &x, |b| (h(w[b].d), None, q5_quants(&w[b].qh, &w[b].qs).map(|q| q as i32 - 16)))
}

/// Q5_1 weights: `w = d·q + m`, `q` the 5-bit quant.
pub fn dot_q5_1(w: &[BlockQ5_1], x: QRow) -> f32 {
    dot_legacy(w.len(), &x, |b| (h(w[b].d), Some(h(w[b].m)), q5_quants(&w[b].qh, &w[b].qs).map(i32::from)))
}

/// Row `r` of a row-interleaved matrix: the same chain over its tiles.
pub fn dot_r16(m: &R16, r: usize, x: QRow) -> f32 {
    let (g, j) = (r / GROUP, r % GROUP);
    if let R16Format::K(k) = m.fmt {
        let tiles = (0..m.nb).map(|sb| m.tile(g, sb));
        return match k {
            KFormat::Q4K => dot_q4k(&tiles.map(|t| r16k::q4k_block(t, j)).collect::<Vec<_>>(), x),
            KFormat::Q5K => dot_q5k(&tiles.map(|t| r16k::q5k_block(t, j)).collect::<Vec<_>>(), x),
            KFormat::Q6K => dot_q6k(&tiles.map(|t| r16k::q6k_block(t, j)).collect::<Vec<_>>(), x),
        };
    }
    dot_legacy(m.nb, &x, |b| {
        let (d, mw, q) = R16::unpack(m.fmt, m.tile(g, b), j);
        (h(d), m.fmt.has_min().then(|| h(mw)), q)
    })
}

/// Shared by Q4_K and Q5_K: the chain over one super-block, `quants(j)`
/// giving the 32 unsigned quants of sub-block `j` (activation block
/// `8·sb + j`).
#[inline]
fn dot_k_sub(
    (d, dmin, scales): (f32, f32, &[u8; 12]),
    x: &QRow,
    sb: usize,
    quants: impl Fn(usize) -> [i32; QK],
    y: &mut f32,
) {
    for j in 0..QK_K / QK {
        let b = sb * (QK_K / QK) + j;
        let (sc, m) = get_scale_min_k4(j, scales);
        let qx = x.block_quants(b);
        let isum: i32 = quants(j).iter().zip(&qx).map(|(&w, &v)| w * v as i32).sum();
        *y = (isum as f32).mul_add((d * sc as f32) * x.d[b], *y);
        *y = (-(dmin * m as f32)).mul_add(x.s[b], *y);
    }
}

/// Q4_K weights (256-element super-blocks, eight 32-element sub-blocks).
pub fn dot_q4k(w: &[BlockQ4K], x: QRow) -> f32 {
    let mut y = 0.0f32;
    for (sb, wb) in w.iter().enumerate() {
        let quants = |j: usize| -> [i32; QK] {
            std::array::from_fn(|l| {
                let byte = wb.qs[(j / 2) * QK + l];
                (if j.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 }) as i32
            })
        };
        dot_k_sub((h(wb.d), h(wb.dmin), &wb.scales), &x, sb, quants, &mut y);
    }
    y
}

/// Q5_K weights: Q4_K's nibbles plus a fifth bit from `qh`.
pub fn dot_q5k(w: &[BlockQ5K], x: QRow) -> f32 {
    let mut y = 0.0f32;
    for (sb, wb) in w.iter().enumerate() {
        let quants = |j: usize| -> [i32; QK] {
            std::array::from_fn(|l| {
                let byte = wb.qs[(j / 2) * QK + l];
                let lo = if j.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 };
                let hi = (wb.qh[l] >> j) & 1;
                (lo | (hi << 4)) as i32
            })
        };
        dot_k_sub((h(wb.d), h(wb.dmin), &wb.scales), &x, sb, quants, &mut y);
    }
    y
}

/// The signed 6-bit quants (−32..32) of one Q6_K super-block, in element order.
pub fn unpack_q6k(wb: &BlockQ6K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for half in 0..2 {
        let ql = &wb.ql[half * 64..half * 64 + 64];
        let qh = &wb.qh[half * 32..half * 32 + 32];
        let y = &mut q[half * 128..half * 128 + 128];
        for l in 0..32 {
            y[l] = ((ql[l] & 0x0F) | (qh[l] & 3) << 4) as i8 - 32;
            y[l + 32] = ((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) as i8 - 32;
            y[l + 64] = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) as i8 - 32;
            y[l + 96] = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) as i8 - 32;
        }
    }
    q
}

/// The order of a Q6_K super-block's sixteen 16-element sub-blocks in the
/// chain: per quarter of `ql` (32-element blocks `a` and `a + 2`), `2a`,
/// `2a + 4`, `2a + 1`, `2a + 5`.
pub const Q6K_ORDER: [usize; 16] = [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15];

/// Q6_K weights: sixteen 16-element sub-blocks with signed 8-bit scales,
/// one FMA each in [`Q6K_ORDER`].
pub fn dot_q6k(w: &[BlockQ6K], x: QRow) -> f32 {
    let mut y = 0.0f32;
    for (sb, wb) in w.iter().enumerate() {
        let q = unpack_q6k(wb);
        let d = h(wb.d);
        for k in Q6K_ORDER {
            let b = sb * (QK_K / QK) + k / 2;
            let half = 16 * (k % 2);
            let isum: i32 = (0..16).map(|e| q[16 * k + e] as i32 * x.quant(b, half + e) as i32).sum();
            y = (isum as f32).mul_add((d * wb.scales[k] as f32) * x.d[b], y);
        }
    }
    y
}

/// One super-block of a 16-element-sub-block K-quant: `d`, the signed quants
/// in element order, the sixteen scales, and (Q2_K) `dmin` with the sixteen
/// mins.
pub struct K16 {
    pub d: f32,
    pub q: [i8; QK_K],
    pub sc: [i8; 16],
    pub min: Option<(f32, [u8; 16])>,
}

/// A Q2_K super-block in [`K16`] form.
pub fn unpack_q2k(wb: &BlockQ2K) -> K16 {
    K16 {
        d: h(wb.d),
        q: std::array::from_fn(|e| k_low2(&wb.qs, e) as i8),
        sc: wb.scales.map(|s| (s & 0x0F) as i8),
        min: Some((h(wb.dmin), wb.scales.map(|s| s >> 4))),
    }
}

/// A Q3_K super-block in [`K16`] form.
pub fn unpack_q3k(wb: &BlockQ3K) -> K16 {
    K16 { d: h(wb.d), q: std::array::from_fn(|e| q3k_quant(wb, e)), sc: q3k_scales(&wb.scales), min: None }
}

/// The Q2_K / Q3_K specification over super-blocks `k16(sb)`.
fn dot_k16(nsb: usize, x: &QRow, k16: impl Fn(usize) -> K16) -> f32 {
    let mut acc = [0.0f32; 16];
    let mut mt = [0.0f32; 16];
    for sb in 0..nsb {
        let k = k16(sb);
        for j in 0..QK_K / QK {
            let b = sb * (QK_K / QK) + j;
            let qw: [i32; QK] = std::array::from_fn(|e| k.sc[2 * j + e / 16] as i32 * k.q[j * QK + e] as i32);
            add_block(&mut acc, b, k.d * x.d[b], lane_isums(&qw, x, b));
            if let Some((dmin, m)) = &k.min {
                let mw: [i32; QK] = std::array::from_fn(|e| m[2 * j + e / 16] as i32);
                add_block(&mut mt, b, dmin * x.d[b], lane_isums(&mw, x, b));
            }
        }
    }
    reduce16(acc) - reduce16(mt)
}

/// Q2_K weights: `w = (d·sc)·q − dmin·m` per 16 elements.
pub fn dot_q2k(w: &[BlockQ2K], x: QRow) -> f32 {
    dot_k16(w.len(), &x, |sb| unpack_q2k(&w[sb]))
}

/// Q3_K weights: `w = (d·sc)·q` per 16 elements, `q` in −4..4.
pub fn dot_q3k(w: &[BlockQ3K], x: QRow) -> f32 {
    dot_k16(w.len(), &x, |sb| unpack_q3k(&w[sb]))
}

/// IEEE half bits widened to f32 (exact).
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// bfloat16 bits widened to f32 (exact: the bits are the f32's top half).
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    bf16::from_bits(bits).to_f32()
}

/// `Σ w[i]·b[i]` for half-precision weights `w` (IEEE half bits, or
/// bfloat16 bits when `bf`): [`dot_f32`] over the widened weights, the same
/// lanes, tree and tail. Widening is exact, so this is the f32 product of
/// the weights' exact values.
pub fn dot_f16(w: &[u16], bf: bool, b: &[f32]) -> f32 {
    debug_assert_eq!(w.len(), b.len());
    let widen = |v: u16| if bf { bf16_to_f32(v) } else { f16_to_f32(v) };
    let n8 = w.len() / 8 * 8;
    let mut lanes = [0.0f32; 8];
    for (cw, cb) in w[..n8].chunks_exact(8).zip(b[..n8].chunks_exact(8)) {
        for j in 0..8 {
            lanes[j] += widen(cw[j]) * cb[j];
        }
    }
    let mut acc = reduce8(lanes);
    for i in n8..w.len() {
        acc += widen(w[i]) * b[i];
    }
    acc
}

/// `Σ a[i]·b[i]` in f32: lane `j` of eight accumulates the elements
/// `i ≡ j (mod 8)` of the whole 8-element chunks; the lanes reduce as
/// `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`; remaining elements are then
/// added in order. Multiplications and additions are rounded separately.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n8 = a.len() / 8 * 8;
    let mut lanes = [0.0f32; 8];
    for (ca, cb) in a[..n8].chunks_exact(8).zip(b[..n8].chunks_exact(8)) {
        for j in 0..8 {
            lanes[j] += ca[j] * cb[j];
        }
    }
    let mut acc = reduce8(lanes);
    for i in n8..a.len() {
        acc += a[i] * b[i];
    }
    acc
}

/// The fixed reduction tree of [`dot_f32`]'s eight lanes.
#[inline]
pub fn reduce8(l: [f32; 8]) -> f32 {
    let h4 = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    let h2 = [h4[0] + h4[2], h4[1] + h4[3]];
    h2[0] + h2[1]
}

/// Output rows `row0..row0+out.len()` of `m · input`, scalar.
pub fn matvec_rows(m: &Matrix, input: Input, row0: usize, out: &mut [f32]) {
    fn rows<B>(w: &[B], bpr: usize, row0: usize, out: &mut [f32], x: QRow, f: fn(&[B], QRow) -> f32) {
        for (i, o) in out.iter_mut().enumerate() {
            let r = row0 + i;
            *o = f(&w[r * bpr..(r + 1) * bpr], x);
        }
    }
    let q = input.q;
    match m.w {
        Weights::Q4_0(w) => rows(w, m.cols / QK, row0, out, q, dot_q4_0),
        Weights::Q4_1(w) => rows(w, m.cols / QK, row0, out, q, dot_q4_1),
        Weights::Q5_0(w) => rows(w, m.cols / QK, row0, out, q, dot_q5_0),
        Weights::Q5_1(w) => rows(w, m.cols / QK, row0, out, q, dot_q5_1),
        Weights::Q8_0(w) => rows(w, m.cols / QK, row0, out, q, dot_q8_0),
        Weights::Q2K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q2k),
        Weights::Q3K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q3k),
        Weights::Q4K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q4k),
        Weights::Q5K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q5k),
        Weights::Q6K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q6k),
        Weights::R16(w) => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = dot_r16(&w, row0 + i, q);
            }
        }
        Weights::F32(w) => {
            for (i, o) in out.iter_mut().enumerate() {
                let r = row0 + i;
                *o = dot_f32(&w[r * m.cols..(r + 1) * m.cols], input.x);
            }
        }
        Weights::F16(w) | Weights::BF16(w) => {
            let bf = matches!(m.w, Weights::BF16(_));
            for (i, o) in out.iter_mut().enumerate() {
                let r = row0 + i;
                *o = dot_f16(&w[r * m.cols..(r + 1) * m.cols], bf, input.x);
            }
        }
    }
}
