//! The scalar specification of the K-quants (Q4_K, Q5_K, Q6_K) against
//! 8-bit activations ([`crate::act8`], [`Precision::Int8`](crate::act8::Precision)):
//! every SIMD family matches it bit for bit.
//!
//! # The chain
//!
//! One output is one serial chain over the weight row's super-blocks `sb`
//! in order, starting at `y = +0.0`, with the activation super-block's
//! scale `dx` and quants `qx` (−127..=127, element order):
//!
//! - **Q4_K / Q5_K** (eight 32-element sub-blocks `j`, 6-bit scale `sc_j`
//!   and min `m_j` from [`get_scale_min_k4`], unsigned 4- or 5-bit quants
//!   `q`):
//!
//!   ```text
//!   S = Σ_j sc_j · Σ_{e<32} q[32j+e] · qx[32j+e]     exact, in i32
//!   M = Σ_j m_j · bsum32_j                            exact, in i32
//!   y = fma(f32(S), d · dx, y)
//!   y = fma(−f32(M), dmin · dx, y)
//!   ```
//! - **Q6_K** (sixteen 16-element sub-blocks `k`, signed 8-bit scale
//!   `sc_k`, signed quants `q` in −32..32):
//!
//!   ```text
//!   S = Σ_k sc_k · Σ_{e<16} q[16k+e] · qx[16k+e]     exact, in i32
//!   y = fma(f32(S), d · dx, y)
//!   ```
//!
//! `d`, `dmin` are the super-block's half floats widened (exact); `d · dx`
//! and `dmin · dx` are f32 products (one rounding each); `f32(S)` rounds to
//! nearest even (S can pass 2^24); `fma` rounds once. Two FMAs (one for
//! Q6_K) per super-block, where the 16-bit chain of [`super::scalar`] pays
//! one or two per sub-block.
//!
//! # Why the integer sums are exact (no `i32` overflow)
//!
//! With |qx| ≤ 127 (never −128):
//! - Q4_K: |Σ_e q·qx| ≤ 32·15·127 = 60,960 per sub-block; with sc ≤ 63
//!   and eight sub-blocks |S| ≤ 8·63·60,960 = 30,723,840 < 2^31.
//! - Q5_K: 32·31·127 = 125,984; |S| ≤ 8·63·125,984 = 63,495,936 < 2^31.
//! - both: |bsum32| ≤ 32·127 = 4,064, m ≤ 63: |M| ≤ 8·63·4,064 = 2,048,256.
//! - Q6_K: |q| ≤ 32: a sub-block sum ≤ 16·32·127 = 65,024, |sc| ≤ 128:
//!   |S| ≤ 16·128·65,024 = 133,169,152 < 2^31. A kernel that multiplies
//!   the unsigned quants `q + 32` (0..63) and subtracts `32 · Σ_k sc_k ·
//!   bsum16_k` has partial sums ≤ 16·128·16·63·127 = 262,176,768 and
//!   32·16·128·2,032 = 133,169,152, both < 2^31.
//!
//! So every partial sum fits `i32`, and any order of the integer additions
//! (what the kernels choose: per-lane `vpdpbusd` quadruples, two chains,
//! `vpmulld` by the scales, `vpdpwssd` for the mins) gives the same `S` and
//! `M`. The float part is then the same two (one) FMAs in the same order.
//!
//! The result is a function of (weight row, activation row) alone: not of
//! the family, the layout (GGUF or row-interleaved), the thread count or the
//! other rows of a multi-row call.

use super::r16::k::{self as r16k, KFormat};
use super::r16::{GROUP, R16, R16Format};
use super::scalar::unpack_q6k;
use super::{Input, Matrix, Weights};
use crate::act8::Q8Row;
use crate::quant::dequant::get_scale_min_k4;
use crate::quant::{BlockQ4K, BlockQ5K, BlockQ6K, QK, QK_K};
use half::f16;

#[inline]
fn h(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Q4_K / Q5_K: the chain over super-blocks, `quants(sb, j)` giving
/// sub-block `j`'s 32 unsigned quants of super-block `sb`.
fn dot_k4k5(
    nsb: usize,
    x: &Q8Row,
    head: impl Fn(usize) -> (f32, f32, [u8; 12]),
    quants: impl Fn(usize, usize) -> [i32; QK],
) -> f32 {
    let mut y = 0.0f32;
    for sb in 0..nsb {
        let (d, dmin, scales) = head(sb);
        let qx = &x.qs[sb * QK_K..(sb + 1) * QK_K];
        let (mut s, mut m) = (0i32, 0i32);
        for j in 0..QK_K / QK {
            let (sc, mn) = get_scale_min_k4(j, &scales);
            let q = quants(sb, j);
            let isum: i32 = (0..QK).map(|e| q[e] * qx[QK * j + e] as i32).sum();
            s += sc as i32 * isum;
            m += mn as i32 * x.bsum32[8 * sb + j] as i32;
        }
        let dx = x.d[sb];
        y = (s as f32).mul_add(d * dx, y);
        y = (-(m as f32)).mul_add(dmin * dx, y);
    }
    y
}

/// Q4_K weights against an 8-bit row.
pub fn dot_q4k_q8k(w: &[BlockQ4K], x: Q8Row) -> f32 {
    dot_k4k5(
        w.len(),
        &x,
        |sb| (h(w[sb].d), h(w[sb].dmin), w[sb].scales),
        |sb, j| {
            std::array::from_fn(|l| {
                let byte = w[sb].qs[(j / 2) * QK + l];
                (if j.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 }) as i32
            })
        },
    )
}

/// Q5_K weights against an 8-bit row: Q4_K's nibbles plus a fifth bit.
pub fn dot_q5k_q8k(w: &[BlockQ5K], x: Q8Row) -> f32 {
    dot_k4k5(
        w.len(),
        &x,
        |sb| (h(w[sb].d), h(w[sb].dmin), w[sb].scales),
        |sb, j| {
            std::array::from_fn(|l| {
                let byte = w[sb].qs[(j / 2) * QK + l];
                let lo = if j.is_multiple_of(2) { byte & 0x0F } else { byte >> 4 };
                (lo | (((w[sb].qh[l] >> j) & 1) << 4)) as i32
            })
        },
    )
}

/// Q6_K weights against an 8-bit row.
pub fn dot_q6k_q8k(w: &[BlockQ6K], x: Q8Row) -> f32 {
    let mut y = 0.0f32;
    for (sb, wb) in w.iter().enumerate() {
        let q = unpack_q6k(wb);
        let qx = &x.qs[sb * QK_K..(sb + 1) * QK_K];
        let mut s = 0i32;
        for k in 0..16 {
            let isum: i32 = (16 * k..16 * k + 16).map(|e| q[e] as i32 * qx[e] as i32).sum();
            s += wb.scales[k] as i32 * isum;
        }
        y = (s as f32).mul_add(h(wb.d) * x.d[sb], y);
    }
    y
}

/// Row `r` of a row-interleaved K-quant matrix against an 8-bit row.
pub fn dot_r16_q8k(m: &R16, k: KFormat, r: usize, x: Q8Row) -> f32 {
    let (g, j) = (r / GROUP, r % GROUP);
    let tiles = (0..m.nb).map(|sb| m.tile(g, sb));
    match k {
        KFormat::Q4K => dot_q4k_q8k(&tiles.map(|t| r16k::q4k_block(t, j)).collect::<Vec<_>>(), x),
        KFormat::Q5K => dot_q5k_q8k(&tiles.map(|t| r16k::q5k_block(t, j)).collect::<Vec<_>>(), x),
        KFormat::Q6K => dot_q6k_q8k(&tiles.map(|t| r16k::q6k_block(t, j)).collect::<Vec<_>>(), x),
    }
}

/// Output rows `row0..row0+out.len()` of a K-quant matrix `m` against the
/// 8-bit row of `input`, scalar.
///
/// # Panics
/// If `m` is not a Q4_K / Q5_K / Q6_K matrix ([`Matrix::takes_int8`]).
pub fn matvec_rows(m: &Matrix, input: Input, row0: usize, out: &mut [f32]) {
    let x = input.q8;
    let bpr = m.cols / QK_K;
    for (i, o) in out.iter_mut().enumerate() {
        let r = row0 + i;
        let rows = r * bpr..(r + 1) * bpr;
        *o = match m.w {
            Weights::Q4K(w) => dot_q4k_q8k(&w[rows], x),
            Weights::Q5K(w) => dot_q5k_q8k(&w[rows], x),
            Weights::Q6K(w) => dot_q6k_q8k(&w[rows], x),
            Weights::R16(R16 { fmt: R16Format::K(k), .. }) => {
                let Weights::R16(v) = &m.w else { unreachable!() };
                dot_r16_q8k(v, k, r, x)
            }
            _ => panic!("8-bit activations are for the K-quant matrices only"),
        };
    }
}
