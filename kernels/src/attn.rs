//! Attention over the CPU KV cache: the keys in tiles of [`KEY_TILE`]
//! positions stored column-major, the values row-major, both IEEE halves
//! ([`F16`]).
//!
//! One call ([`attend`]) serves every query of one KV head that a forward
//! pass has at hand: the rows of a block (a verify block, a prefill chunk)
//! times the query heads that share the KV head (grouped-query attention).
//! Each query is a *pair* (row, head) with its own position range
//! `first..n_ctx` (causal: `first = 0`; a sliding window: its start). All
//! pairs of a call read each key tile and each value row once.
//!
//! ## The arithmetic (the specification, [`attend_scalar`])
//!
//! For each pair, with `q` its query and `k_t`, `v_t` the cached key and
//! value of position `t`, both widened exactly from f16:
//! - `s_t = (fma(q[hd-1], k_t[hd-1], … fma(q[1], k_t[1], fma(q[0], k_t[0], 0)))) · scale`:
//!   one fused multiply-add per dimension, in dimension order, then one
//!   product by `scale = 1/√hd`;
//! - `p = softmax_in(s[first..n_ctx])` ([`crate::ops::softmax_in`]);
//! - `out[j] = fma(p_{n-1}, v_{n-1}[j], … fma(p_first, v_first[j], 0))`: one
//!   fused multiply-add per position, in position order.
//!
//! Every value a pair produces is a function of its own query, its range and
//! the stored bits: not of the other pairs of the call, of how pairs are
//! grouped into calls, of the thread that runs it, or of the kernel family.
//! So the one-token chain and a verify block, which read the same cache,
//! agree bit for bit. The SIMD families put sixteen (AVX-512) or eight
//! (AVX2) *positions* in a register for the scores — a key tile's column `j`
//! is sixteen consecutive halves, so one load, one widening and one FMA per
//! pair advance sixteen scores, with no horizontal sums — and sixteen or
//! eight *output dimensions* in a register for the weighted sum; each lane
//! does the scalar chain above, operation for operation.
//!
//! At a long context the cache does not stay in the core's caches between
//! passes (a decode step also streams every weight), so the SIMD steps ask
//! for the key tiles four tiles ahead and the value rows sixteen rows
//! ahead while they compute (`prefetcht0`); a prefetch
//! moves no value, so no bit depends on it.

use crate::dispatch::{FamilyKind, KernelFamily};
use crate::quant::F16;

/// Positions per key tile. A tile of one KV head is `hd` columns of
/// sixteen halves (32 bytes each): one AVX-512 register per column.
pub const KEY_TILE: usize = 16;

/// Key tiles ahead of the one being scored that a SIMD scores step asks
/// the memory system for (`prefetcht0`): at a long context the cache
/// streams from L3 or memory, and a tile of one KV head is 2 KiB followed
/// by the other heads' tiles, which the hardware prefetchers follow late.
/// A prefetch moves no value, so no bit depends on it.
const PREFETCH_TILES: usize = 4;

/// Value rows ahead of the one being summed that a SIMD weighted-sum step
/// prefetches (rows of one KV head lie `kvd` halves apart).
const PREFETCH_ROWS: usize = 16;

/// Index in a tiled key cache (`kvd` key columns per position) of column
/// `c` of position `pos`: tile `pos / 16` holds, for each column, its
/// sixteen positions side by side.
#[inline]
pub fn key_index(kvd: usize, pos: usize, c: usize) -> usize {
    ((pos / KEY_TILE) * kvd + c) * KEY_TILE + pos % KEY_TILE
}

/// Elements a tiled key cache of `n_pos` positions occupies (whole tiles).
#[inline]
pub fn key_cache_len(kvd: usize, n_pos: usize) -> usize {
    n_pos.div_ceil(KEY_TILE) * kvd * KEY_TILE
}

/// One layer's cache as [`attend`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct KvLayer<'a> {
    /// Tiled keys ([`key_index`]), at least [`key_cache_len`]`(kvd, n_pos)`.
    pub keys: &'a [F16],
    /// (n_pos, kvd) values, row-major.
    pub values: &'a [F16],
    /// Key/value columns per position (`n_kv_heads · hd`).
    pub kvd: usize,
    /// Positions stored.
    pub n_pos: usize,
}

/// Attention of `ranges.len()` queries (pairs) over KV head `kv_head`:
/// pair `i` has query `qs[i * hd..][..hd]`, attends to positions
/// `ranges[i].0..ranges[i].1` and writes `outs[i * hd..][..hd]`.
/// `scores` is scratch (resized here). The result of each pair is
/// [`attend_scalar`]'s, bit for bit, for every family.
///
/// # Panics
/// On inconsistent shapes: a range past the cache or empty, `hd` not a
/// multiple of 16, a head outside `kvd`.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    family: KernelFamily,
    layer: KvLayer,
    kv_head: usize,
    hd: usize,
    qs: &[f32],
    ranges: &[(usize, usize)],
    scores: &mut Vec<f32>,
    outs: &mut [f32],
) {
    let geo = check(layer, kv_head, hd, qs, ranges, outs);
    #[cfg(target_arch = "x86_64")]
    if family.kind() != FamilyKind::Scalar {
        // SAFETY: the family runs here (a `KernelFamily` is checked when
        // made), so AVX2, FMA and F16C
        // are (every non-scalar x86 family includes them), and AVX-512 F for
        // Avx512Vnni; shapes were checked by `check`.
        unsafe { x86::attend(family, layer, geo, qs, ranges, scores, outs) };
        return;
    }
    let _ = family;
    attend_scalar_checked(layer, geo, qs, ranges, scores, outs);
}

/// The specification of [`attend`] (see the module documentation), in
/// plain loops.
pub fn attend_scalar(
    layer: KvLayer,
    kv_head: usize,
    hd: usize,
    qs: &[f32],
    ranges: &[(usize, usize)],
    scores: &mut Vec<f32>,
    outs: &mut [f32],
) {
    let geo = check(layer, kv_head, hd, qs, ranges, outs);
    attend_scalar_checked(layer, geo, qs, ranges, scores, outs);
}

/// Shapes of one checked call.
#[derive(Clone, Copy, Debug)]
struct Geo {
    hd: usize,
    /// First key/value column of the head.
    col: usize,
    /// Scores per pair in the scratch (the widest range end, rounded up to
    /// whole tiles).
    stride: usize,
}

fn check(layer: KvLayer, kv_head: usize, hd: usize, qs: &[f32], ranges: &[(usize, usize)], outs: &[f32]) -> Geo {
    let pairs = ranges.len();
    assert!(hd > 0 && hd.is_multiple_of(16), "head dimension {hd} is not a multiple of 16");
    assert!((kv_head + 1) * hd <= layer.kvd, "KV head {kv_head} outside {} columns", layer.kvd);
    assert!(qs.len() == pairs * hd && outs.len() == pairs * hd, "one query and one output of {hd} per pair");
    assert!(ranges.iter().all(|&(f, n)| f < n && n <= layer.n_pos), "a range is empty or past the cache");
    assert!(layer.keys.len() >= key_cache_len(layer.kvd, layer.n_pos), "key cache too short");
    assert!(layer.values.len() >= layer.n_pos * layer.kvd, "value cache too short");
    let max_n = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    Geo { hd, col: kv_head * hd, stride: max_n.div_ceil(KEY_TILE) * KEY_TILE }
}

// The specification indexes the cache and the scores by position, as the
// documentation writes it.
#[allow(clippy::needless_range_loop)]
fn attend_scalar_checked(
    layer: KvLayer,
    geo: Geo,
    qs: &[f32],
    ranges: &[(usize, usize)],
    scores: &mut Vec<f32>,
    outs: &mut [f32],
) {
    let hd = geo.hd;
    let scale = 1.0 / (hd as f32).sqrt();
    scores.clear();
    scores.resize(geo.stride, 0.0);
    for (i, &(first, n)) in ranges.iter().enumerate() {
        let q = &qs[i * hd..(i + 1) * hd];
        for t in first..n {
            let mut s = 0.0f32;
            for (j, &qj) in q.iter().enumerate() {
                s = qj.mul_add(layer.keys[key_index(layer.kvd, t, geo.col + j)].to_f32(), s);
            }
            scores[t] = s * scale;
        }
        crate::ops::softmax_in(KernelFamily::SCALAR, &mut scores[first..n]);
        let out = &mut outs[i * hd..(i + 1) * hd];
        out.fill(0.0);
        for t in first..n {
            let v = &layer.values[t * layer.kvd + geo.col..][..hd];
            for (o, &vj) in out.iter_mut().zip(v) {
                *o = scores[t].mul_add(vj.to_f32(), *o);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The SIMD families of [`super::attend`]. Scores: a step takes `P`
    //! pairs × `T` register-wide position groups (sixteen positions for
    //! AVX-512, eight for AVX2), `P · T` independent FMA chains over the
    //! head's dimensions. Weighted sums: a step takes `P` pairs × `C`
    //! register-wide column groups, one FMA chain per register over the
    //! positions in order; the positions that only some pairs of the call
    //! see (ragged range ends) run per pair before and after the common
    //! range, so each pair's chain keeps its order.

    // Register-blocked loops index parallel arrays with one counter.
    #![allow(clippy::needless_range_loop)]

    use super::{Geo, KEY_TILE, KvLayer, PREFETCH_ROWS, PREFETCH_TILES, key_index};
    use crate::dispatch::{FamilyKind, KernelFamily};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU supports `family` (AVX2, FMA, F16C; AVX-512 F for
    /// Avx512Vnni); shapes were checked by `super::check`.
    pub(super) unsafe fn attend(
        family: KernelFamily,
        layer: KvLayer,
        geo: Geo,
        qs: &[f32],
        ranges: &[(usize, usize)],
        scores: &mut Vec<f32>,
        outs: &mut [f32],
    ) {
        let (hd, stride) = (geo.hd, geo.stride);
        let pairs = ranges.len();
        let wide = family.kind() == FamilyKind::Avx512Vnni;
        // The register width in positions / columns.
        let lanes = if wide { 16 } else { 8 };
        // Every score a pair reads is written first (positions lo..hi of
        // every pair), so the scratch only grows.
        if scores.len() < pairs * stride {
            scores.resize(pairs * stride, 0.0);
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0) / lanes * lanes;
        let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
        // Scores of every pair over lo..hi, register-wide position groups;
        // positions outside a pair's range are computed and never read.
        let mut i0 = 0;
        while i0 < pairs {
            let rem = pairs - i0;
            // AVX-512 has 32 registers: up to twelve single-tile chains
            // (one widened key column feeds twelve FMAs); AVX2 has 16.
            let (p, t) = if wide && rem >= 9 {
                (rem.min(12), 1)
            } else if rem >= 5 {
                (rem.min(8), 1)
            } else if rem >= 3 {
                (rem, 2)
            } else {
                (rem, 4)
            };
            let mut g = lo;
            while g < hi {
                let groups = t.min((hi - g).div_ceil(lanes));
                // SAFETY: forwarded; pairs i0..i0+p exist, positions
                // g..g + groups·lanes lie in whole tiles of the cache
                // (`key_cache_len` rounds up), and the scratch holds
                // `stride >= hi` rounded up to whole tiles per pair.
                unsafe { scores_step(wide, p, groups, layer, geo, qs, i0, g, scale, scores) };
                g += groups * lanes;
            }
            i0 += p;
        }
        for (i, &(first, n)) in ranges.iter().enumerate() {
            crate::ops::softmax_in(family, &mut scores[i * stride + first..i * stride + n]);
        }
        outs.fill(0.0);
        let common = (ranges.iter().map(|r| r.0).max().unwrap_or(0), ranges.iter().map(|r| r.1).min().unwrap_or(0));
        let run = |pair0: usize, np: usize, t0: usize, t1: usize, outs: &mut [f32]| {
            if t0 >= t1 {
                return;
            }
            let mut c0 = 0;
            while c0 < hd {
                // More than six pairs (AVX-512 only): two column groups per
                // pass, so each widened value row feeds up to 24 FMAs.
                let cw = if np > 6 {
                    if hd - c0 >= 2 * lanes { 2 } else { 1 }
                } else if hd - c0 >= 4 * lanes {
                    4
                } else {
                    1
                };
                // SAFETY: forwarded; pairs pair0..pair0+np exist, positions
                // t0..t1 are stored, columns c0..c0 + cw·lanes lie in the head.
                unsafe { values_step(wide, np, cw, layer, geo, scores, pair0, t0, t1, c0, outs) };
                c0 += cw * lanes;
            }
        };
        if common.0 < common.1 {
            for (i, &(first, _)) in ranges.iter().enumerate() {
                run(i, 1, first, common.0, outs);
            }
            let mut i0 = 0;
            while i0 < pairs {
                let rem = pairs - i0;
                let p = if wide && rem >= 7 { rem.min(12) } else { rem.min(6) };
                run(i0, p, common.0, common.1, outs);
                i0 += p;
            }
            for (i, &(_, n)) in ranges.iter().enumerate() {
                run(i, 1, common.1, n, outs);
            }
        } else {
            for (i, &(first, n)) in ranges.iter().enumerate() {
                run(i, 1, first, n, outs);
            }
        }
    }

    /// Prefetches, while column `j` of the current key tiles is scored, the
    /// same 64-byte line of the tiles [`PREFETCH_TILES`] ahead: every
    /// other column starts a line, and the last column also asks for the
    /// tile's last half (a tile need not start on a line).
    #[inline(always)]
    fn prefetch_tiles<const T: usize>(kp: *const u16, base: &[usize; T], kvd: usize, j: usize, hd: usize) {
        let even = j.is_multiple_of(2);
        if even || j + 1 == hd {
            let ahead = PREFETCH_TILES * kvd * KEY_TILE + KEY_TILE * j + if even { 0 } else { KEY_TILE - 1 };
            for &b in base {
                // SAFETY: a prefetch reads nothing architecturally and never
                // faults; the address is only computed (wrapping), never
                // dereferenced, so it may lie past the cache.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(kp.wrapping_add(b + ahead).cast()) };
            }
        }
    }

    /// Prefetches the `span` halves of the value row [`PREFETCH_ROWS`]
    /// ahead of `row` (rows `kvd` halves apart): one request per 64-byte
    /// line, and one for its last half (the span need not start on a line).
    #[inline(always)]
    fn prefetch_row(row: *const u16, kvd: usize, span: usize) {
        let ahead = row.wrapping_add(PREFETCH_ROWS * kvd);
        let mut o = 0;
        while o < span {
            // SAFETY: as in `prefetch_tiles`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(o).cast()) };
            o += 32;
        }
        // SAFETY: as in `prefetch_tiles`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(span - 1).cast()) };
    }

    /// Dispatches a scores step to its const-generic instance.
    ///
    /// # Safety
    /// See [`scores_avx512`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn scores_step(
        wide: bool,
        p: usize,
        t: usize,
        layer: KvLayer,
        geo: Geo,
        qs: &[f32],
        i0: usize,
        g: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        macro_rules! go {
            ($($p:literal, $t:literal);*) => {
                match (p, t) {
                    // SAFETY: forwarded.
                    $(($p, $t) => unsafe {
                        if wide {
                            scores_avx512::<$p, $t>(layer, geo, qs, i0, g, scale, scores)
                        } else {
                            scores_avx2::<$p, $t>(layer, geo, qs, i0, g, scale, scores)
                        }
                    },)*
                    _ => unreachable!("scores step {p} x {t}"),
                }
            };
        }
        go!(1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 7,1; 8,1; 9,1; 10,1; 11,1; 12,1; 1,2; 2,2; 3,2; 4,2; 1,3; 2,3; 1,4; 2,4)
    }

    /// Scores of pairs `i0..i0+P` at positions `g..g + 16·T` (AVX-512).
    ///
    /// # Safety
    /// AVX-512 F, F16C, FMA; the positions lie in whole stored tiles, `g` is
    /// a multiple of 16; the pairs exist; `scores` holds `geo.stride` per
    /// pair with `g + 16·T <= geo.stride`.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn scores_avx512<const P: usize, const T: usize>(
        layer: KvLayer,
        geo: Geo,
        qs: &[f32],
        i0: usize,
        g: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let hd = geo.hd;
        let kp = layer.keys.as_ptr().cast::<u16>();
        let base: [usize; T] = std::array::from_fn(|k| key_index(layer.kvd, g + KEY_TILE * k, geo.col));
        let mut acc = [[_mm512_setzero_ps(); T]; P];
        // SAFETY (whole body): column j of a tile is 16 consecutive halves
        // at key_index(.., col + j) (the tile's base + 16 j), inside the
        // cache; queries and scores are in bounds (caller).
        unsafe {
            for j in 0..hd {
                prefetch_tiles::<T>(kp, &base, layer.kvd, j, hd);
                let kv: [__m512; T] =
                    std::array::from_fn(|k| _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(base[k] + KEY_TILE * j).cast())));
                for i in 0..P {
                    let q = _mm512_set1_ps(*qs.get_unchecked((i0 + i) * hd + j));
                    for k in 0..T {
                        acc[i][k] = _mm512_fmadd_ps(q, kv[k], acc[i][k]);
                    }
                }
            }
            let vs = _mm512_set1_ps(scale);
            for i in 0..P {
                for k in 0..T {
                    let dst = scores.as_mut_ptr().add((i0 + i) * geo.stride + g + KEY_TILE * k);
                    _mm512_storeu_ps(dst, _mm512_mul_ps(acc[i][k], vs));
                }
            }
        }
    }

    /// Scores of pairs `i0..i0+P` at positions `g..g + 8·T` (AVX2: a key
    /// tile is two groups of eight).
    ///
    /// # Safety
    /// AVX2, F16C, FMA; `g` a multiple of 8; otherwise as [`scores_avx512`].
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scores_avx2<const P: usize, const T: usize>(
        layer: KvLayer,
        geo: Geo,
        qs: &[f32],
        i0: usize,
        g: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let hd = geo.hd;
        let kp = layer.keys.as_ptr().cast::<u16>();
        let base: [usize; T] = std::array::from_fn(|k| key_index(layer.kvd, g + 8 * k, geo.col));
        let mut acc = [[_mm256_setzero_ps(); T]; P];
        // SAFETY (whole body): as in `scores_avx512`, eight halves per group.
        unsafe {
            for j in 0..hd {
                prefetch_tiles::<T>(kp, &base, layer.kvd, j, hd);
                let kv: [__m256; T] =
                    std::array::from_fn(|k| _mm256_cvtph_ps(_mm_loadu_si128(kp.add(base[k] + KEY_TILE * j).cast())));
                for i in 0..P {
                    let q = _mm256_set1_ps(*qs.get_unchecked((i0 + i) * hd + j));
                    for k in 0..T {
                        acc[i][k] = _mm256_fmadd_ps(q, kv[k], acc[i][k]);
                    }
                }
            }
            let vs = _mm256_set1_ps(scale);
            for i in 0..P {
                for k in 0..T {
                    let dst = scores.as_mut_ptr().add((i0 + i) * geo.stride + g + 8 * k);
                    _mm256_storeu_ps(dst, _mm256_mul_ps(acc[i][k], vs));
                }
            }
        }
    }

    /// Dispatches a weighted-sum step to its const-generic instance.
    ///
    /// # Safety
    /// See [`values_avx512`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn values_step(
        wide: bool,
        p: usize,
        c: usize,
        layer: KvLayer,
        geo: Geo,
        scores: &[f32],
        i0: usize,
        t0: usize,
        t1: usize,
        c0: usize,
        outs: &mut [f32],
    ) {
        macro_rules! go {
            ($($p:literal, $c:literal);*) => {
                match (p, c) {
                    // SAFETY: forwarded.
                    $(($p, $c) => unsafe {
                        if wide {
                            values_avx512::<$p, $c>(layer, geo, scores, i0, t0, t1, c0, outs)
                        } else {
                            values_avx2::<$p, $c>(layer, geo, scores, i0, t0, t1, c0, outs)
                        }
                    },)*
                    _ => unreachable!("values step {p} x {c}"),
                }
            };
        }
        go!(1,1; 2,1; 3,1; 4,1; 5,1; 6,1; 7,1; 8,1; 9,1; 10,1; 11,1; 12,1; 7,2; 8,2; 9,2; 10,2; 11,2; 12,2; 1,4; 2,4; 3,4; 4,4; 5,4; 6,4)
    }

    /// `out[j] = fma(p_t, v_t[j], out[j])` for pairs `i0..i0+P`, positions
    /// `t0..t1` in order, columns `c0..c0 + 16·C` of the head (AVX-512),
    /// continuing from the outputs' current values.
    ///
    /// # Safety
    /// AVX-512 F, F16C, FMA; positions `t0..t1` are stored; columns lie in
    /// the head; the pairs exist.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    unsafe fn values_avx512<const P: usize, const C: usize>(
        layer: KvLayer,
        geo: Geo,
        scores: &[f32],
        i0: usize,
        t0: usize,
        t1: usize,
        c0: usize,
        outs: &mut [f32],
    ) {
        let (hd, kvd) = (geo.hd, layer.kvd);
        let vp = layer.values.as_ptr().cast::<u16>();
        // SAFETY (whole body): value row t's columns col + c0 .. + 16 C lie in
        // the cache (t < n_pos, columns inside the head); scores and outputs
        // are in bounds (caller).
        unsafe {
            let op = outs.as_mut_ptr();
            let mut acc: [[__m512; C]; P] =
                std::array::from_fn(|i| std::array::from_fn(|c| _mm512_loadu_ps(op.add((i0 + i) * hd + c0 + 16 * c))));
            let sp: [*const f32; P] = std::array::from_fn(|i| scores.as_ptr().add((i0 + i) * geo.stride));
            for t in t0..t1 {
                let row = vp.add(t * kvd + geo.col + c0);
                prefetch_row(row, kvd, 16 * C);
                let v: [__m512; C] =
                    std::array::from_fn(|c| _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16 * c).cast())));
                for i in 0..P {
                    let p = _mm512_set1_ps(*sp[i].add(t));
                    for c in 0..C {
                        acc[i][c] = _mm512_fmadd_ps(p, v[c], acc[i][c]);
                    }
                }
            }
            for i in 0..P {
                for c in 0..C {
                    _mm512_storeu_ps(op.add((i0 + i) * hd + c0 + 16 * c), acc[i][c]);
                }
            }
        }
    }

    /// [`values_avx512`] with eight columns per register (AVX2).
    ///
    /// # Safety
    /// AVX2, F16C, FMA; otherwise as [`values_avx512`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values_avx2<const P: usize, const C: usize>(
        layer: KvLayer,
        geo: Geo,
        scores: &[f32],
        i0: usize,
        t0: usize,
        t1: usize,
        c0: usize,
        outs: &mut [f32],
    ) {
        let (hd, kvd) = (geo.hd, layer.kvd);
        let vp = layer.values.as_ptr().cast::<u16>();
        // SAFETY (whole body): as in `values_avx512`, eight columns per register.
        unsafe {
            let op = outs.as_mut_ptr();
            let mut acc: [[__m256; C]; P] =
                std::array::from_fn(|i| std::array::from_fn(|c| _mm256_loadu_ps(op.add((i0 + i) * hd + c0 + 8 * c))));
            let sp: [*const f32; P] = std::array::from_fn(|i| scores.as_ptr().add((i0 + i) * geo.stride));
            for t in t0..t1 {
                let row = vp.add(t * kvd + geo.col + c0);
                prefetch_row(row, kvd, 8 * C);
                let v: [__m256; C] = std::array::from_fn(|c| _mm256_cvtph_ps(_mm_loadu_si128(row.add(8 * c).cast())));
                for i in 0..P {
                    let p = _mm256_set1_ps(*sp[i].add(t));
                    for c in 0..C {
                        acc[i][c] = _mm256_fmadd_ps(p, v[c], acc[i][c]);
                    }
                }
            }
            for i in 0..P {
                for c in 0..C {
                    _mm256_storeu_ps(op.add((i0 + i) * hd + c0 + 8 * c), acc[i][c]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiled key cache and a row-major value cache of `n` positions with
    /// values of every sign and magnitude a model writes.
    fn cache(n: usize, kvd: usize, seed: u32) -> (Vec<F16>, Vec<F16>) {
        let mut s = seed;
        let mut next = move || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 6.0
        };
        let mut keys = vec![F16::default(); key_cache_len(kvd, n)];
        let mut values = vec![F16::default(); n * kvd];
        for t in 0..n {
            for c in 0..kvd {
                keys[key_index(kvd, t, c)] = F16::from_f32(next());
                values[t * kvd + c] = F16::from_f32(next());
            }
        }
        (keys, values)
    }

    fn queries(pairs: usize, hd: usize) -> Vec<f32> {
        (0..pairs * hd).map(|i| ((i as f32) * 0.731).sin() * 1.7).collect()
    }

    #[test]
    fn every_family_equals_the_specification_bit_for_bit() {
        let mut scratch = Vec::new();
        for &(hd, n_kv) in &[(16, 1), (64, 3), (80, 2), (256, 1)] {
            let kvd = hd * n_kv;
            for &n in &[1, 2, 7, 15, 16, 17, 33, 70, 131] {
                let (keys, values) = cache(n, kvd, (n * hd) as u32);
                let layer = KvLayer { keys: &keys, values: &values, kvd, n_pos: n };
                // Ragged ranges: a verify block's rows end one apart, a
                // window cuts the front, single pairs and full houses.
                let shapes: Vec<Vec<(usize, usize)>> = vec![
                    vec![(0, n)],
                    (0..n.min(11)).map(|i| (0, n - i)).collect(),
                    (0..n.min(9)).map(|i| ((i * 3).min(n - 1), n)).collect(),
                    (0..n.min(13)).map(|i| ((i * 5) % n, ((i * 5) % n + 1 + i * 7).min(n))).collect(),
                ];
                for ranges in shapes {
                    let pairs = ranges.len();
                    let qs = queries(pairs, hd);
                    let mut want = vec![0.0; pairs * hd];
                    attend_scalar(layer, n_kv - 1, hd, &qs, &ranges, &mut Vec::new(), &mut want);
                    for fam in KernelFamily::all_supported() {
                        let mut got = vec![f32::NAN; pairs * hd];
                        // One scratch across calls of every shape: what an
                        // earlier call left in it is never read.
                        attend(fam, layer, n_kv - 1, hd, &qs, &ranges, &mut scratch, &mut got);
                        let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{} hd {hd} n {n} ranges {ranges:?}", fam.name());
                    }
                }
            }
        }
    }

    #[test]
    fn a_pair_gives_the_same_bits_alone_or_among_others() {
        let (hd, kvd, n) = (64, 192, 90);
        let (keys, values) = cache(n, kvd, 7);
        let layer = KvLayer { keys: &keys, values: &values, kvd, n_pos: n };
        let ranges: Vec<(usize, usize)> = (0..16).map(|i| (i % 4 * 7, n - (i % 5))).collect();
        let qs = queries(ranges.len(), hd);
        for fam in KernelFamily::all_supported() {
            let mut together = vec![0.0; ranges.len() * hd];
            attend(fam, layer, 1, hd, &qs, &ranges, &mut Vec::new(), &mut together);
            for (i, &r) in ranges.iter().enumerate() {
                let mut alone = vec![0.0; hd];
                attend(fam, layer, 1, hd, &qs[i * hd..(i + 1) * hd], &[r], &mut Vec::new(), &mut alone);
                let same = alone.iter().zip(&together[i * hd..]).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{} pair {i}", fam.name());
            }
        }
    }

    #[test]
    fn the_specification_is_attention() {
        // Against softmax(q·k/√d)·v in f64 over the widened cache.
        let (hd, kvd, n) = (64, 128, 40);
        let (keys, values) = cache(n, kvd, 11);
        let layer = KvLayer { keys: &keys, values: &values, kvd, n_pos: n };
        let qs = queries(1, hd);
        let mut out = vec![0.0; hd];
        attend_scalar(layer, 1, hd, &qs, &[(5, n)], &mut Vec::new(), &mut out);
        let s: Vec<f64> = (5..n)
            .map(|t| {
                (0..hd).map(|j| qs[j] as f64 * keys[key_index(kvd, t, hd + j)].to_f32() as f64).sum::<f64>()
                    / (hd as f64).sqrt()
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for j in 0..hd {
            let want: f64 = (5..n).map(|t| e[t - 5] / z * values[t * kvd + hd + j].to_f32() as f64).sum();
            assert!((out[j] as f64 - want).abs() < 1e-5, "dim {j}: {} vs {want}", out[j]);
        }
    }

    #[test]
    #[should_panic(expected = "past the cache")]
    fn a_range_past_the_cache_is_refused() {
        let (keys, values) = cache(4, 16, 1);
        let layer = KvLayer { keys: &keys, values: &values, kvd: 16, n_pos: 4 };
        attend(KernelFamily::SCALAR, layer, 0, 16, &[0.0; 16], &[(0, 5)], &mut Vec::new(), &mut [0.0; 16]);
    }
}
