//! The scalar mat-vec kernels: the specification every SIMD family matches
//! bit for bit.
//!
//! For each output row, blocks are visited in order and a single f32
//! accumulator `acc` (starting at +0.0) is updated once per activation
//! block of 32 elements. Within a block the product of the weight quants and
//! the 16-bit activation quants is an exact integer (`isum`, an `i32`; its
//! conversion to f32 is exact below 2^24 and otherwise rounds the same way
//! everywhere), and the update is, with every multiplication and addition
//! rounded separately (no fused multiply-add):
//!
//! | weights | update per block (dw, mw: weight scale/min; dx, sx: activation scale and `dx * sum(qx)`) |
//! |---|---|
//! | Q8_0 | `acc + (dw*dx) * isum` with `isum = Σ qw·qx` |
//! | Q4_0 | `acc + (dw*dx) * isum` with `isum = Σ qw·qx − 8·Σ qx` |
//! | Q4_1 | `acc + ((dw*dx) * isum + mw*sx)` |
//! | Q4_K / Q5_K | sub-block j (scale `sc`, min `m`): `acc + ((d*sc)*dx) * isum − (dmin*m)*sx` |
//! | Q6_K | `acc + (d*dx) * (sc_a·isum_a + sc_b·isum_b)` over the two 16-element halves, the integer in i64 |
//!
//! f32 weights use [`dot_f32`]: eight interleaved partial sums, reduced by a
//! fixed tree, then the tail.

use super::{Input, Matrix, Weights};
use crate::act::BlockQ16;
use crate::quant::dequant::get_scale_min_k4;
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8_0, QK, QK_K};
use half::f16;

#[inline]
fn h(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// `Σ w[i]·x[i]` for Q8_0 weights against one activation row.
pub fn dot_q8_0(w: &[BlockQ8_0], x: &[BlockQ16]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xb) in w.iter().zip(x) {
        let isum: i32 = wb.qs.iter().zip(&xb.qs).map(|(&a, &b)| a as i32 * b as i32).sum();
        let p = h(wb.d) * xb.d;
        acc += p * isum as f32;
    }
    acc
}

/// Q4_0 weights: quants are 0..16 with an implicit offset of −8.
pub fn dot_q4_0(w: &[BlockQ4_0], x: &[BlockQ16]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xb) in w.iter().zip(x) {
        let mut isum = 0i32;
        for j in 0..QK / 2 {
            isum += (wb.qs[j] & 0x0F) as i32 * xb.qs[j] as i32;
            isum += (wb.qs[j] >> 4) as i32 * xb.qs[j + QK / 2] as i32;
        }
        isum -= 8 * xb.sum;
        let p = h(wb.d) * xb.d;
        acc += p * isum as f32;
    }
    acc
}

/// Q4_1 weights: `w = d·q + m`.
pub fn dot_q4_1(w: &[BlockQ4_1], x: &[BlockQ16]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xb) in w.iter().zip(x) {
        let mut isum = 0i32;
        for j in 0..QK / 2 {
            isum += (wb.qs[j] & 0x0F) as i32 * xb.qs[j] as i32;
            isum += (wb.qs[j] >> 4) as i32 * xb.qs[j + QK / 2] as i32;
        }
        let p = h(wb.d) * xb.d;
        let t = p * isum as f32;
        let t2 = h(wb.m) * xb.s;
        acc += t + t2;
    }
    acc
}

/// Shared by Q4_K and Q5_K: `quant(sub, l)` gives the unsigned quant of
/// element `l` of sub-block `sub` of one super-block.
#[inline]
fn dot_k_sub(d: f32, dmin: f32, scales: &[u8; 12], x: &[BlockQ16], quant: impl Fn(usize, usize) -> i32, acc: &mut f32) {
    for (sub, xb) in x.iter().enumerate().take(QK_K / QK) {
        let (sc, m) = get_scale_min_k4(sub, scales);
        let isum: i32 = (0..QK).map(|l| quant(sub, l) * xb.qs[l] as i32).sum();
        let dsc = d * sc as f32;
        let dm = dmin * m as f32;
        *acc = *acc + (dsc * xb.d) * isum as f32 - dm * xb.s;
    }
}

/// Q4_K weights (256-element super-blocks, eight 32-element sub-blocks).
pub fn dot_q4k(w: &[BlockQ4K], x: &[BlockQ16]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xs) in w.iter().zip(x.chunks_exact(QK_K / QK)) {
        let quant = |sub: usize, l: usize| {
            let byte = wb.qs[(sub / 2) * QK + l];
            (if sub.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 }) as i32
        };
        dot_k_sub(h(wb.d), h(wb.dmin), &wb.scales, xs, quant, &mut acc);
    }
    acc
}

/// Q5_K weights: Q4_K's nibbles plus a fifth bit from `qh`.
pub fn dot_q5k(w: &[BlockQ5K], x: &[BlockQ16]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xs) in w.iter().zip(x.chunks_exact(QK_K / QK)) {
        let quant = |sub: usize, l: usize| {
            let byte = wb.qs[(sub / 2) * QK + l];
            let lo = if sub.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 };
            let hi = (wb.qh[l] >> sub) & 1;
            (lo | (hi << 4)) as i32
        };
        dot_k_sub(h(wb.d), h(wb.dmin), &wb.scales, xs, quant, &mut acc);
    }
    acc
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

/// Q6_K weights: sixteen 16-element sub-blocks with signed 8-bit scales.
pub fn dot_q6k(w: &[BlockQ6K], x: &[BlockQ16]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, xs) in w.iter().zip(x.chunks_exact(QK_K / QK)) {
        let q = unpack_q6k(wb);
        let d = h(wb.d);
        for (b, xb) in xs.iter().enumerate() {
            let base = b * QK;
            let half = |o: usize| -> i64 { (0..16).map(|l| q[base + o + l] as i64 * xb.qs[o + l] as i64).sum() };
            // |sc·half| reaches 128·32·32767·16 ≈ 2^31: the sum needs i64.
            let itot = wb.scales[2 * b] as i64 * half(0) + wb.scales[2 * b + 1] as i64 * half(16);
            acc += (d * xb.d) * itot as f32;
        }
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
    fn rows<B>(w: &[B], bpr: usize, row0: usize, out: &mut [f32], x: &[BlockQ16], f: fn(&[B], &[BlockQ16]) -> f32) {
        for (i, o) in out.iter_mut().enumerate() {
            let r = row0 + i;
            *o = f(&w[r * bpr..(r + 1) * bpr], x);
        }
    }
    let q = input.q;
    match m.w {
        Weights::Q4_0(w) => rows(w, m.cols / QK, row0, out, q, dot_q4_0),
        Weights::Q4_1(w) => rows(w, m.cols / QK, row0, out, q, dot_q4_1),
        Weights::Q8_0(w) => rows(w, m.cols / QK, row0, out, q, dot_q8_0),
        Weights::Q4K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q4k),
        Weights::Q5K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q5k),
        Weights::Q6K(w) => rows(w, m.cols / QK_K, row0, out, q, dot_q6k),
        Weights::F32(w) => {
            for (i, o) in out.iter_mut().enumerate() {
                let r = row0 + i;
                *o = dot_f32(&w[r * m.cols..(r + 1) * m.cols], input.x);
            }
        }
    }
}
