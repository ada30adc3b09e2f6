//! x86_64 SIMD mat-vec kernels for Q2_K and Q3_K: AVX2 and AVX-512 VNNI,
//! register-blocked over `W` activation rows and `R` weight rows on
//! [`super::shared`]'s tiles, following [`crate::matvec::scalar`]'s 16-element
//! sub-block specification lane for lane.
//!
//! A half super-block (128 elements) decodes at byte level into four
//! 32-byte sub-blocks of signed quants: the 32-byte `qs` group shifted
//! right by `2·jj` and masked to two bits (16-bit shifts move bits across
//! a byte boundary only into bits the mask drops); Q3_K adds bit
//! `4·half + jj` of each `hmask` byte at bit 2 and subtracts 4. Each 16-element
//! half is widened to 16 bits and multiplied by its scale (`vpmullw`,
//! exact: |sc·q| ≤ 128), so the integer lanes carry the scales and the
//! float factor per activation block is `d·dx`, as for Q6_K. Those lanes
//! reach 2^24 and convert with `vcvtdq2ps` (the `Q8_0` instance of
//! [`super::shared::dot_pair`]).
//!
//! Q2_K's mins are a second set of integer lanes: each 16-element half's
//! 4-bit min, broadcast to its sixteen 16-bit lanes, against the same
//! activation quants (lanes below 2^21, so the AVX-512 kernel converts them
//! with the magic-number bias of the `Q4_1` instance), scaled by
//! `dmin·dx` into accumulators of their own.

// Register-blocked loops index several parallel arrays (weight rows ×
// activation rows) with the same counter; iterator chains would hide that.
#![allow(clippy::needless_range_loop)]

use crate::matvec::Input;
use super::shared::{Acts, Q2K, Q4_1, Q8_0, Tile, dot_pair, prefetch_rows, reduce8_ymm, reduce16_zmm};
use crate::quant::{QK, QK_K};
use std::arch::x86_64::*;

/// Sub-blocks (activation blocks) per super-block.
const SUBS: usize = QK_K / QK;

/// Byte offsets of the fields (`block_q2_K`: scales, qs, d, dmin;
/// `block_q3_K`: hmask, qs, scales, d).
const Q2K_QS: usize = 16;
const Q2K_D: usize = 80;
const Q3K_QS: usize = 32;
const Q3K_SCALES: usize = 96;
const Q3K_D: usize = 108;

/// A super-block's sixteen 16-element scales (Q2_K: the low nibbles of
/// `scales`; Q3_K: the unpacked signed 6-bit ones) and Q2_K's mins (the
/// high nibbles; zeros for Q3_K), as bytes.
///
/// # Safety
/// `blk` points at a whole super-block of format `F`.
#[inline(always)]
unsafe fn scales_mins<const F: u8>(blk: *const u8) -> ([i8; 16], [i8; 16]) {
    // SAFETY: the bytes read lie inside the super-block.
    unsafe {
        if F == Q2K {
            let s: [u8; 16] = blk.cast::<[u8; 16]>().read_unaligned();
            (s.map(|b| (b & 0x0F) as i8), s.map(|b| (b >> 4) as i8))
        } else {
            (q3k_scales_words(&blk.add(Q3K_SCALES).cast::<[u8; 12]>().read_unaligned()), [0; 16])
        }
    }
}

/// [`crate::quant::dequant::q3k_scales`] four scales at a time on 32-bit
/// words (ggml's `kmask1` / `kmask2` form): word `i` of the result holds
/// scales `4i .. 4i + 4`, low nibbles from `q[0..4]` or `q[4..8]` (shifted
/// down by 4 for scales 8..16), top two bits from `q[8..12]` shifted by
/// `2i`; shifts across byte boundaries only move bits the masks drop.
#[inline(always)]
fn q3k_scales_words(q: &[u8; 12]) -> [i8; 16] {
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (a0, a1, t) = (w(0), w(1), w(2));
    let (m4, m2) = (0x0F0F_0F0Fu32, 0x0303_0303u32);
    let words = [
        (a0 & m4) | ((t & m2) << 4),
        (a1 & m4) | (((t >> 2) & m2) << 4),
        ((a0 >> 4) & m4) | (((t >> 4) & m2) << 4),
        ((a1 >> 4) & m4) | (((t >> 6) & m2) << 4),
    ];
    // Each byte is 0..64, so it is a non-negative i8 before the offset.
    std::array::from_fn(|k| (words[k / 4].to_le_bytes()[k % 4] as i8) - 32)
}

/// `(d, dmin)` of a super-block as f32 (`dmin` 0 for Q3_K).
///
/// # Safety
/// `blk` points at a whole super-block of format `F`.
#[inline(always)]
unsafe fn d_dmin<const F: u8>(blk: *const u8) -> (f32, f32) {
    let h = |bits: u16| half::f16::from_bits(bits).to_f32();
    // SAFETY: the bytes read lie inside the super-block.
    unsafe {
        if F == Q2K {
            (h(blk.add(Q2K_D).cast::<u16>().read_unaligned()), h(blk.add(Q2K_D + 2).cast::<u16>().read_unaligned()))
        } else {
            (h(blk.add(Q3K_D).cast::<u16>().read_unaligned()), 0.0)
        }
    }
}

/// Sub-blocks `4·half .. 4·half + 4` of a super-block as 32 signed quants
/// each (element `l` in byte `l`).
///
/// # Safety
/// AVX2; `blk` points at a whole super-block of format `F`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn quants_half<const F: u8>(blk: *const u8, half: usize) -> [__m256i; 4] {
    // SAFETY: qs[32 half .. 32 half + 32] and hmask[0..32] lie inside the
    // super-block.
    unsafe {
        let qs = if F == Q2K { Q2K_QS } else { Q3K_QS };
        let g = _mm256_loadu_si256(blk.add(qs + 32 * half).cast());
        let m3 = _mm256_set1_epi8(3);
        std::array::from_fn(|jj| {
            let lo = _mm256_and_si256(_mm256_srl_epi16(g, _mm_cvtsi32_si128(2 * jj as i32)), m3);
            if F == Q2K {
                lo
            } else {
                let hm = _mm256_loadu_si256(blk.cast());
                let bit = _mm256_and_si256(
                    _mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * half + jj) as i32)),
                    _mm256_set1_epi8(1),
                );
                _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(bit, 2)), _mm256_set1_epi8(4))
            }
        })
    }
}

/// Outputs of `R` consecutive weight rows (from `r0`) × `W` activation rows
/// of a Q2_K / Q3_K matrix, AVX2: one sub-block per step, even and odd
/// sub-blocks in two accumulators per output (Q2_K's min lanes in two more).
///
/// # Safety
/// AVX2, FMA and F16C; rows `r0..r0 + R` lie inside the weights (`t.nb`
/// super-blocks of format `F` per row); `a` points into `W` activation rows
/// of `8 · t.nb` blocks; `o` holds the tile's outputs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_avx2<const F: u8, const R: usize, const W: usize>(t: &Tile, a: &Acts<W>, r0: usize, o: &mut [f32]) {
    let (bb, nsb) = (t.block_bytes, t.nb);
    // SAFETY (whole body): rows r0..r0+R hold nsb super-blocks of bb bytes
    // each, and every weight read lies inside one of them; the activation
    // rows hold 8·nsb blocks (4·nsb pairs, 64-byte aligned, so each 32-byte
    // block half is aligned) and their scale arrays at least 8·nsb entries.
    unsafe {
        let rows: [*const u8; R] = std::array::from_fn(|r| t.base.add((r0 + r) * nsb * bb));
        let mut acc = [[[_mm256_setzero_ps(); 2]; W]; R];
        let mut mt = [[[_mm256_setzero_ps(); 2]; W]; R];
        let mut p = [[[0.0f32; SUBS]; W]; R];
        let mut pm = [[[0.0f32; SUBS]; W]; R];
        prefetch_rows(t, r0 + R, R * nsb * bb);
        for sb in 0..nsb {
            let g = sb * SUBS;
            let mut sm = [([0i8; 16], [0i8; 16]); R];
            for r in 0..R {
                let blk = rows[r].add(sb * bb);
                sm[r] = scales_mins::<F>(blk);
                let (d, dmin) = d_dmin::<F>(blk);
                for i in 0..W {
                    let dx = _mm256_loadu_ps(a.d[i].add(g));
                    _mm256_storeu_ps(p[r][i].as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(d), dx));
                    if F == Q2K {
                        _mm256_storeu_ps(pm[r][i].as_mut_ptr(), _mm256_mul_ps(_mm256_set1_ps(dmin), dx));
                    }
                }
            }
            for half in 0..2 {
                for r in 0..R {
                    let q = quants_half::<F>(rows[r].add(sb * bb), half);
                    let (sc, mn) = sm[r];
                    for (jj, qj) in q.iter().enumerate() {
                        let j = 4 * half + jj;
                        let lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(*qj));
                        let hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(*qj, 1));
                        let lo = _mm256_mullo_epi16(lo, _mm256_set1_epi16(sc[2 * j] as i16));
                        let hi = _mm256_mullo_epi16(hi, _mm256_set1_epi16(sc[2 * j + 1] as i16));
                        let (mlo, mhi) = (_mm256_set1_epi16(mn[2 * j] as i16), _mm256_set1_epi16(mn[2 * j + 1] as i16));
                        let xo = ((g + j) / 2) * 2 * QK + (j % 2) * 16;
                        for i in 0..W {
                            let x = a.qs[i].add(xo);
                            let x0 = _mm256_load_si256(x.cast());
                            let x1 = _mm256_load_si256(x.add(32).cast());
                            let isum = _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1));
                            let s = _mm256_broadcast_ss(&p[r][i][j]);
                            acc[r][i][j % 2] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum), acc[r][i][j % 2]);
                            if F == Q2K {
                                let msum = _mm256_add_epi32(_mm256_madd_epi16(mlo, x0), _mm256_madd_epi16(mhi, x1));
                                let s = _mm256_broadcast_ss(&pm[r][i][j]);
                                mt[r][i][j % 2] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(msum), mt[r][i][j % 2]);
                            }
                        }
                    }
                }
            }
        }
        for r in 0..R {
            let col = t.out_col + (r0 + r - t.rows.start);
            for i in 0..W {
                let mut y = reduce8_ymm(_mm256_add_ps(acc[r][i][0], acc[r][i][1]));
                if F == Q2K {
                    y -= reduce8_ymm(_mm256_add_ps(mt[r][i][0], mt[r][i][1]));
                }
                o[i * t.n + col] = y;
            }
        }
    }
}

/// `W` activation rows against the tile's weight rows of a Q2_K / Q3_K
/// matrix, AVX2, `R` weight rows interleaved per step.
///
/// # Safety
/// As [`block_avx2`], for every row of the tile; `xs.len() == W`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_k23_avx2<const F: u8, const W: usize, const R: usize>(t: &Tile, xs: &[Input], o: &mut [f32]) {
    let a = Acts::<W>::new(xs);
    let mut r = t.rows.start;
    // SAFETY: forwarded; every step's rows lie in the tile.
    unsafe {
        while R > 1 && r + R <= t.rows.end {
            block_avx2::<F, R, W>(t, &a, r, o);
            r += R;
        }
        while r < t.rows.end {
            block_avx2::<F, 1, W>(t, &a, r, o);
            r += 1;
        }
    }
}

/// Outputs of `R` consecutive weight rows (from `r0`) × `W` activation rows
/// of a Q2_K / Q3_K matrix, AVX-512 VNNI: one sub-block pair per step in
/// 512-bit registers (even sub-block in lanes 0..8, odd in 8..16).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C; otherwise as [`block_avx2`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_avx512<const F: u8, const R: usize, const W: usize>(t: &Tile, a: &Acts<W>, r0: usize, o: &mut [f32]) {
    let (bb, nsb) = (t.block_bytes, t.nb);
    // SAFETY (whole body): as in `block_avx2`; each pair's activation is a
    // 64-byte-aligned QPair.
    unsafe {
        let rows: [*const u8; R] = std::array::from_fn(|r| t.base.add((r0 + r) * nsb * bb));
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        let mut mt = [[_mm512_setzero_ps(); W]; R];
        prefetch_rows(t, r0 + R, R * nsb * bb);
        for sb in 0..nsb {
            let g = sb * SUBS;
            let mut p = [[_mm256_setzero_ps(); W]; R];
            let mut pm = [[_mm256_setzero_ps(); W]; R];
            let mut scv = [_mm512_setzero_si512(); R];
            let mut mnv = [_mm512_setzero_si512(); R];
            for r in 0..R {
                let blk = rows[r].add(sb * bb);
                let (sc, mn) = scales_mins::<F>(blk);
                // The sixteen scales (mins) as 16-bit lanes 0..16.
                scv[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr().cast())));
                mnv[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(mn.as_ptr().cast())));
                let (d, dmin) = d_dmin::<F>(blk);
                for i in 0..W {
                    let dx = _mm256_loadu_ps(a.d[i].add(g));
                    p[r][i] = _mm256_mul_ps(_mm256_set1_ps(d), dx);
                    if F == Q2K {
                        pm[r][i] = _mm256_mul_ps(_mm256_set1_ps(dmin), dx);
                    }
                }
            }
            for half in 0..2 {
                for r in 0..R {
                    let q = quants_half::<F>(rows[r].add(sb * bb), half);
                    for t2 in 0..2 {
                        let (s0, s1) = (q[2 * t2], q[2 * t2 + 1]);
                        let k = 2 * half + t2;
                        // Register e (0, 1): [2k: 16e..16e+16 | 2k+1: 16e..16e+16],
                        // 16-element sub-blocks 2·(2k) + e and 2·(2k+1) + e.
                        let idx: [__m512i; 2] = std::array::from_fn(|e| {
                            let lo = (4 * k + e) as i16;
                            _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(lo), _mm512_set1_epi16(lo + 2))
                        });
                        let w: [__m512i; 2] = std::array::from_fn(|e| {
                            let bytes = if e == 0 {
                                _mm256_permute2x128_si256(s0, s1, 0x20)
                            } else {
                                _mm256_permute2x128_si256(s0, s1, 0x31)
                            };
                            _mm512_mullo_epi16(_mm512_cvtepi8_epi16(bytes), _mm512_permutexvar_epi16(idx[e], scv[r]))
                        });
                        let mw: [__m512i; 2] = std::array::from_fn(|e| _mm512_permutexvar_epi16(idx[e], mnv[r]));
                        // Lanes 0..8 take block 2k's factor, lanes 8..16 block 2k + 1's.
                        let pick = _mm512_add_epi32(
                            _mm512_set1_epi32(2 * k as i32),
                            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                        );
                        let xo = (g / 2 + k) * 2 * QK;
                        for i in 0..W {
                            let x = a.qs[i].add(xo);
                            let lanes = dot_pair::<Q8_0>(w[0], w[1], x);
                            let s = _mm512_permutexvar_ps(pick, _mm512_castps256_ps512(p[r][i]));
                            acc[r][i] = _mm512_fmadd_ps(s, lanes, acc[r][i]);
                            if F == Q2K {
                                let lanes = dot_pair::<Q4_1>(mw[0], mw[1], x);
                                let s = _mm512_permutexvar_ps(pick, _mm512_castps256_ps512(pm[r][i]));
                                mt[r][i] = _mm512_fmadd_ps(s, lanes, mt[r][i]);
                            }
                        }
                    }
                }
            }
        }
        for r in 0..R {
            let col = t.out_col + (r0 + r - t.rows.start);
            for i in 0..W {
                let mut y = reduce16_zmm(acc[r][i]);
                if F == Q2K {
                    y -= reduce16_zmm(mt[r][i]);
                }
                o[i * t.n + col] = y;
            }
        }
    }
}

/// `W` activation rows against the tile's weight rows of a Q2_K / Q3_K
/// matrix, AVX-512 VNNI, `R` weight rows interleaved per step.
///
/// # Safety
/// As [`block_avx512`], for every row of the tile; `xs.len() == W`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_k23_avx512<const F: u8, const W: usize, const R: usize>(
    t: &Tile,
    xs: &[Input],
    o: &mut [f32],
) {
    let a = Acts::<W>::new(xs);
    let mut r = t.rows.start;
    // SAFETY: forwarded; every step's rows lie in the tile.
    unsafe {
        while R > 1 && r + R <= t.rows.end {
            block_avx512::<F, R, W>(t, &a, r, o);
            r += R;
        }
        while r < t.rows.end {
            block_avx512::<F, 1, W>(t, &a, r, o);
            r += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn word_unpacking_of_q3_k_scales_equals_the_specification() {
        let mut s = 0x1234_5678_9ABC_DEF0u64;
        for i in 0..4096 {
            let q: [u8; 12] = std::array::from_fn(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            });
            let q = match i {
                0 => [0xFF; 12],
                1 => [0; 12],
                _ => q,
            };
            assert_eq!(super::q3k_scales_words(&q), crate::quant::dequant::q3k_scales(&q), "{q:?}");
        }
    }
}
