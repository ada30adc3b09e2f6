//! x86_64 SIMD mat-vec kernels for the K-quants (Q4_K, Q5_K, Q6_K): AVX2
//! and AVX-512 VNNI, register-blocked over `W` activation rows and `R`
//! weight rows like the legacy kernels in [`super::x86`], whose tiles,
//! activation pointers, prefetching and reductions they share.
//!
//! They follow [`super::scalar`]'s K-quant specification lane for lane. A
//! super-block is eight 32-element sub-blocks; sub-block `j` meets
//! activation block `8·sb + j`, so the even/odd lanes and the
//! pair-interleaved activation work as for the legacy formats:
//!
//! - **Q4_K / Q5_K.** Sub-blocks `2k` and `2k + 1` are the low and high
//!   nibbles of the same 32 bytes. AVX2 widens bytes 0..16 and 16..32 to
//!   16-bit and masks or shifts out the nibble of the sub-block at hand.
//!   AVX-512 widens bytes 0..16 into both halves of a register and shifts
//!   only the upper half, giving `[sub 2k: 0..16 | sub 2k+1: 0..16]`, the
//!   activation pair's first register (bytes 16..32 likewise for the
//!   second). Q5_K's fifth bit is bit `j` of `qh[l]`, shifted into place per
//!   sub-block. The eight 6-bit scales and mins are unpacked from the 12
//!   packed bytes with three 32-bit words of bit operations, converted once
//!   per super-block to eight f32 lanes: `d·sc` and `dmin·m` (exact
//!   products), then `p = (d·sc)·dx` and the min term's FMA with eight
//!   consecutive `sx`, one 256-bit operation each per activation row.
//! - **Q6_K.** A half super-block (128 elements) is decoded at byte level
//!   into four 32-byte sub-blocks (low/high nibble of `ql`, two bits of
//!   `qh`, minus 32); each 16-element half is widened to 16-bit and
//!   multiplied by its 8-bit scale (`vpmullw`, exact: |q·sc| ≤ 4096), so the
//!   integer lanes already carry the sub-block scales and `p = d·dx`.
//!
//! Integer lanes: Q4_K / Q5_K lanes stay below 2^22 in magnitude (four
//! products of at most 31·32767), so the AVX-512 kernel converts them with
//! [`super::x86`]'s magic-number bias like Q4_0/Q4_1; Q6_K lanes reach 2^29
//! and take `vcvtdq2ps`, which rounds exactly like the scalar `as f32`.

// Register-blocked loops index several parallel arrays (weight rows ×
// activation rows) with the same counter; iterator chains would hide that.
#![allow(clippy::needless_range_loop)]

use super::Input;
use super::x86::{Acts, Q4_1, Q5K, Q6K, Q8_0, Tile, dot_pair, prefetch_rows, reduce8_ymm, reduce16_zmm};
use crate::quant::{QK, QK_K};
use std::arch::x86_64::*;

/// Sub-blocks (activation blocks) per super-block.
const SUBS: usize = QK_K / QK;

/// Byte offset of a Q4_K / Q5_K super-block's packed nibbles.
const fn qs_offset(f: u8) -> usize {
    if f == Q5K { 48 } else { 16 }
}

/// Byte offset of Q5_K's high bits (`qh`).
const Q5K_QH: usize = 16;
/// Byte offsets of Q6_K's fields.
const Q6K_QH: usize = 128;
const Q6K_SCALES: usize = 192;
const Q6K_D: usize = 208;

/// Reads an unaligned little-endian `u32` at `p`.
///
/// # Safety
/// Four bytes at `p` are readable.
#[inline(always)]
unsafe fn word(p: *const u8) -> u32 {
    // SAFETY: forwarded from the caller.
    unsafe { p.cast::<u32>().read_unaligned() }
}

/// The super-block's per-sub-block float factors, eight lanes each:
/// `(d · f32(sc_j), dmin · f32(m_j))` for Q4_K / Q5_K (the 6-bit scales
/// and mins of [`crate::quant::dequant::get_scale_min_k4`]), `(d, 0)` for
/// Q6_K (its scales are folded into the integer weights).
///
/// # Safety
/// AVX2 + F16C; `blk` points at a whole super-block of format `F`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn k_factors<const F: u8>(blk: *const u8) -> (__m256, __m256) {
    // SAFETY: every read lies inside the super-block.
    unsafe {
        if F == Q6K {
            let d = _mm_cvtph_ps(_mm_cvtsi32_si128(blk.add(Q6K_D).cast::<u16>().read_unaligned() as i32));
            return (_mm256_broadcastss_ps(d), _mm256_setzero_ps());
        }
        // [d, dmin, 0, 0].
        let dd = _mm_cvtph_ps(_mm_cvtsi32_si128(word(blk) as i32));
        let (d, dmin) = (_mm256_broadcastss_ps(dd), _mm256_broadcastss_ps(_mm_movehdup_ps(dd)));
        // The 12 packed bytes q[0..12] as words w0 = q[0..4], w1 = q[4..8],
        // w2 = q[8..12]. Sub-blocks 0..4: scale q[j] & 63, min q[j+4] & 63.
        // Sub-blocks 4..8: scale = low nibble of q[j+4] | top two bits of
        // q[j-4] << 4; min = high nibble of q[j+4] | top two bits of q[j] << 4.
        // Byte-wise on words: (w >> 6) & 0x03.. is each byte's top two bits.
        let (w0, w1, w2) = (word(blk.add(4)), word(blk.add(8)), word(blk.add(12)));
        let (low6, nib, top2) = (0x3F3F_3F3Fu32, 0x0F0F_0F0Fu32, 0x0303_0303u32);
        let sc_hi = (w2 & nib) | (((w0 >> 6) & top2) << 4);
        let m_hi = ((w2 >> 4) & nib) | (((w1 >> 6) & top2) << 4);
        let sc = (w0 & low6) as u64 | (sc_hi as u64) << 32;
        let m = (w1 & low6) as u64 | (m_hi as u64) << 32;
        let to_f32 = |v: u64| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)));
        (_mm256_mul_ps(d, to_f32(sc)), _mm256_mul_ps(dmin, to_f32(m)))
    }
}

/// The four 32-byte sub-blocks `4·half .. 4·half + 4` of a Q6_K
/// super-block as signed bytes (`q − 32`, element `l` in byte `l`).
///
/// # Safety
/// AVX2; `blk` points at a whole Q6_K super-block.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn q6k_half(blk: *const u8, half: usize) -> [__m256i; 4] {
    // SAFETY: ql[64 half .. 64 half + 64] and qh[32 half .. 32 half + 32]
    // lie inside the super-block.
    unsafe {
        let ql0 = _mm256_loadu_si256(blk.add(64 * half).cast());
        let ql1 = _mm256_loadu_si256(blk.add(64 * half + 32).cast());
        let qh = _mm256_loadu_si256(blk.add(Q6K_QH + 32 * half).cast());
        let (m4, m30, m32) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30), _mm256_set1_epi8(32));
        // 16-bit shifts move bits across the byte boundary only into bits
        // the masks drop. Sub-block 0 takes qh bits 0..2, 1 bits 2..4, 2 bits
        // 4..6, 3 bits 6..8, each landing at bits 4..6 of the quant.
        let b = [
            _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
            ),
        ];
        b.map(|v| _mm256_sub_epi8(v, m32))
    }
}

/// Outputs of `R` consecutive weight rows (from `r0`) × `W` activation rows
/// of a K-quant matrix, AVX2: one sub-block per step, even and odd
/// sub-blocks in two accumulators per output, Q4_K / Q5_K's min term in a
/// third.
///
/// # Safety
/// AVX2, FMA and F16C; rows `r0..r0 + R` lie inside the weights (`t.nb`
/// super-blocks of format `F` per row); `a` points into `W` activation rows
/// of `8 · t.nb` blocks; `o` holds the tile's outputs.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_k_avx2<const F: u8, const R: usize, const W: usize>(t: &Tile, a: &Acts<W>, r0: usize, o: &mut [f32]) {
    let (bb, nsb) = (t.block_bytes, t.nb);
    let m4 = _mm256_set1_epi16(0x0F);
    // SAFETY (whole body): rows r0..r0+R hold nsb super-blocks of bb bytes
    // each, and every weight read lies inside one of them; the activation
    // rows hold 8·nsb blocks (4·nsb pairs, 64-byte aligned, so each 32-byte
    // block half is aligned) and their scale arrays at least 8·nsb entries.
    unsafe {
        let rows: [*const u8; R] = std::array::from_fn(|r| t.base.add((r0 + r) * nsb * bb));
        let mut acc = [[[_mm256_setzero_ps(); 2]; W]; R];
        let mut mt = [[_mm256_setzero_ps(); W]; R];
        let mut p = [[[0.0f32; SUBS]; W]; R];
        prefetch_rows(t, r0 + R, R * nsb * bb);
        for sb in 0..nsb {
            let g = sb * SUBS;
            for r in 0..R {
                let (dsc, dm) = k_factors::<F>(rows[r].add(sb * bb));
                for i in 0..W {
                    _mm256_storeu_ps(p[r][i].as_mut_ptr(), _mm256_mul_ps(dsc, _mm256_loadu_ps(a.d[i].add(g))));
                    if F != Q6K {
                        mt[r][i] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(a.s[i].add(g)), mt[r][i]);
                    }
                }
            }
            // Sub-block j's two halves of sixteen 16-bit weights, row r.
            let mut step = |j: usize, r: usize, lo: __m256i, hi: __m256i| {
                let xo = ((g + j) / 2) * 2 * QK + (j % 2) * 16;
                for i in 0..W {
                    let x = a.qs[i].add(xo);
                    let x0 = _mm256_load_si256(x.cast());
                    let x1 = _mm256_load_si256(x.add(32).cast());
                    let isum = _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1));
                    let s = _mm256_broadcast_ss(&p[r][i][j]);
                    acc[r][i][j % 2] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum), acc[r][i][j % 2]);
                }
            };
            if F == Q6K {
                for half in 0..2 {
                    for r in 0..R {
                        let blk = rows[r].add(sb * bb);
                        let q = q6k_half(blk, half);
                        for (jj, qj) in q.iter().enumerate() {
                            let j = 4 * half + jj;
                            let sc = blk.add(Q6K_SCALES + 2 * j).cast::<i8>();
                            let lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(*qj));
                            let hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(*qj, 1));
                            let lo = _mm256_mullo_epi16(lo, _mm256_set1_epi16(sc.read() as i16));
                            let hi = _mm256_mullo_epi16(hi, _mm256_set1_epi16(sc.add(1).read() as i16));
                            step(j, r, lo, hi);
                        }
                    }
                }
            } else {
                // Q5_K: qh[l] << 4 as 16-bit, for elements 0..16 and 16..32.
                let qh: [(__m256i, __m256i); R] = std::array::from_fn(|r| {
                    if F == Q5K {
                        let qh = rows[r].add(sb * bb + Q5K_QH);
                        (
                            _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(qh.cast())), 4),
                            _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(qh.add(16).cast())), 4),
                        )
                    } else {
                        (_mm256_setzero_si256(), _mm256_setzero_si256())
                    }
                });
                for k in 0..SUBS / 2 {
                    for r in 0..R {
                        let qs = rows[r].add(sb * bb + qs_offset(F) + QK * k);
                        let b0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(qs.cast()));
                        let b1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(qs.add(16).cast()));
                        let (h0, h1) = qh[r];
                        for h in 0..2 {
                            let j = 2 * k + h;
                            let (mut lo, mut hi) = if h == 0 {
                                (_mm256_and_si256(b0, m4), _mm256_and_si256(b1, m4))
                            } else {
                                (_mm256_srli_epi16(b0, 4), _mm256_srli_epi16(b1, 4))
                            };
                            if F == Q5K {
                                // Bit j of qh[l], at bit 4.
                                let (cnt, bit) = (_mm_cvtsi32_si128(j as i32), _mm256_set1_epi16(0x10));
                                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_srl_epi16(h0, cnt), bit));
                                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srl_epi16(h1, cnt), bit));
                            }
                            step(j, r, lo, hi);
                        }
                    }
                }
            }
        }
        for r in 0..R {
            let col = t.out_col + (r0 + r - t.rows.start);
            for i in 0..W {
                let mut y = reduce8_ymm(_mm256_add_ps(acc[r][i][0], acc[r][i][1]));
                if F != Q6K {
                    y -= reduce8_ymm(mt[r][i]);
                }
                o[i * t.n + col] = y;
            }
        }
    }
}

/// `W` activation rows against the tile's weight rows of a K-quant matrix,
/// AVX2, `R` weight rows interleaved per step.
///
/// # Safety
/// As [`block_k_avx2`], for every row of the tile; `xs.len() == W`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_k_avx2<const F: u8, const W: usize, const R: usize>(t: &Tile, xs: &[Input], o: &mut [f32]) {
    let a = Acts::<W>::new(xs);
    let mut r = t.rows.start;
    // SAFETY: forwarded; every step's rows lie in the tile.
    unsafe {
        while R > 1 && r + R <= t.rows.end {
            block_k_avx2::<F, R, W>(t, &a, r, o);
            r += R;
        }
        while r < t.rows.end {
            block_k_avx2::<F, 1, W>(t, &a, r, o);
            r += 1;
        }
    }
}

/// Sub-block pair `k` (sub-blocks `2k`, `2k + 1`) of a Q4_K / Q5_K
/// super-block as two registers of 32 i16 in the activation's pair order:
/// `([2k: 0..16 | 2k+1: 0..16], [2k: 16..32 | 2k+1: 16..32])`. `qh` is Q5_K's
/// `qh[0..16]` and `qh[16..32]` widened to 16 bits and shifted left by 4.
///
/// # Safety
/// AVX-512 BW; `blk` points at a whole super-block of format `F`.
#[target_feature(enable = "avx512f,avx512bw,avx2")]
#[inline]
unsafe fn pair_q45k<const F: u8>(blk: *const u8, k: usize, qh: [__m512i; 2]) -> [__m512i; 2] {
    // SAFETY: the 32 bytes read lie inside the super-block.
    unsafe {
        let qs = blk.add(qs_offset(F) + QK * k);
        let m4 = _mm512_set1_epi16(0x0F);
        // Sub-block 2k + 1 (the high nibbles) sits in the upper 16 lanes.
        let cnt = _mm512_mask_blend_epi16(
            0xFFFF_0000,
            _mm512_set1_epi16((2 * k) as i16),
            _mm512_set1_epi16((2 * k + 1) as i16),
        );
        std::array::from_fn(|half| {
            let v = _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(_mm_loadu_si128(qs.add(16 * half).cast())));
            let q = _mm512_and_si512(_mm512_mask_srli_epi16::<4>(v, 0xFFFF_0000, v), m4);
            if F == Q5K {
                let bit = _mm512_and_si512(_mm512_srlv_epi16(qh[half], cnt), _mm512_set1_epi16(0x10));
                _mm512_or_si512(q, bit)
            } else {
                q
            }
        })
    }
}

/// Outputs of `R` consecutive weight rows (from `r0`) × `W` activation rows
/// of a K-quant matrix, AVX-512 VNNI: one sub-block pair per step in 512-bit
/// registers (even sub-block in lanes 0..8, odd in 8..16).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C; otherwise as [`block_k_avx2`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_k_avx512<const F: u8, const R: usize, const W: usize>(t: &Tile, a: &Acts<W>, r0: usize, o: &mut [f32]) {
    let (bb, nsb) = (t.block_bytes, t.nb);
    // SAFETY (whole body): as in `block_k_avx2`; each pair's activation is
    // a 64-byte-aligned QPair.
    unsafe {
        let rows: [*const u8; R] = std::array::from_fn(|r| t.base.add((r0 + r) * nsb * bb));
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        let mut mt = [[_mm256_setzero_ps(); W]; R];
        prefetch_rows(t, r0 + R, R * nsb * bb);
        for sb in 0..nsb {
            let g = sb * SUBS;
            let mut p = [[_mm256_setzero_ps(); W]; R];
            for r in 0..R {
                let (dsc, dm) = k_factors::<F>(rows[r].add(sb * bb));
                for i in 0..W {
                    p[r][i] = _mm256_mul_ps(dsc, _mm256_loadu_ps(a.d[i].add(g)));
                    if F != Q6K {
                        mt[r][i] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(a.s[i].add(g)), mt[r][i]);
                    }
                }
            }
            // Pair k's integer weights for row r, then its lanes for every
            // activation row: lanes 0..8 take p[2k], lanes 8..16 p[2k + 1].
            let mut step = |k: usize, r: usize, w: [__m512i; 2]| {
                let pick = _mm512_add_epi32(
                    _mm512_set1_epi32(2 * k as i32),
                    _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                );
                let xo = (g / 2 + k) * 2 * QK;
                for i in 0..W {
                    let x = a.qs[i].add(xo);
                    let lanes =
                        if F == Q6K { dot_pair::<Q8_0>(w[0], w[1], x) } else { dot_pair::<Q4_1>(w[0], w[1], x) };
                    let s = _mm512_permutexvar_ps(pick, _mm512_castps256_ps512(p[r][i]));
                    acc[r][i] = _mm512_fmadd_ps(s, lanes, acc[r][i]);
                }
            };
            if F == Q6K {
                for half in 0..2 {
                    for r in 0..R {
                        let blk = rows[r].add(sb * bb);
                        // The sixteen 8-bit scales as 16-bit lanes 0..16.
                        let sc =
                            _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(Q6K_SCALES).cast())));
                        let q = q6k_half(blk, half);
                        for t2 in 0..2 {
                            let (s0, s1) = (q[2 * t2], q[2 * t2 + 1]);
                            let k = 2 * half + t2;
                            // Register e (0, 1): [2k: 16e..16e+16 | 2k+1: 16e..16e+16],
                            // scales 2·(2k) + e and 2·(2k+1) + e.
                            let w: [__m512i; 2] = std::array::from_fn(|e| {
                                let bytes = if e == 0 {
                                    _mm256_permute2x128_si256(s0, s1, 0x20)
                                } else {
                                    _mm256_permute2x128_si256(s0, s1, 0x31)
                                };
                                let lo = (4 * k + e) as i16;
                                let idx = _mm512_mask_blend_epi16(
                                    0xFFFF_0000,
                                    _mm512_set1_epi16(lo),
                                    _mm512_set1_epi16(lo + 2),
                                );
                                _mm512_mullo_epi16(_mm512_cvtepi8_epi16(bytes), _mm512_permutexvar_epi16(idx, sc))
                            });
                            step(k, r, w);
                        }
                    }
                }
            } else {
                // Q5_K: qh[0..16] and qh[16..32] in both halves of a
                // register, widened to 16 bits and shifted left by 4.
                let qh: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                    if F == Q5K {
                        let h = rows[r].add(sb * bb + Q5K_QH);
                        std::array::from_fn(|e| {
                            let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(h.add(16 * e).cast()));
                            _mm512_slli_epi16(_mm512_cvtepu8_epi16(v), 4)
                        })
                    } else {
                        [_mm512_setzero_si512(); 2]
                    }
                });
                for k in 0..SUBS / 2 {
                    for r in 0..R {
                        step(k, r, pair_q45k::<F>(rows[r].add(sb * bb), k, qh[r]));
                    }
                }
            }
        }
        for r in 0..R {
            let col = t.out_col + (r0 + r - t.rows.start);
            for i in 0..W {
                let mut y = reduce16_zmm(acc[r][i]);
                if F != Q6K {
                    y -= reduce8_ymm(mt[r][i]);
                }
                o[i * t.n + col] = y;
            }
        }
    }
}

/// `W` activation rows against the tile's weight rows of a K-quant matrix,
/// AVX-512 VNNI, `R` weight rows interleaved per step.
///
/// # Safety
/// As [`block_k_avx512`], for every row of the tile; `xs.len() == W`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn rows_k_avx512<const F: u8, const W: usize, const R: usize>(t: &Tile, xs: &[Input], o: &mut [f32]) {
    let a = Acts::<W>::new(xs);
    let mut r = t.rows.start;
    // SAFETY: forwarded; every step's rows lie in the tile.
    unsafe {
        while R > 1 && r + R <= t.rows.end {
            block_k_avx512::<F, R, W>(t, &a, r, o);
            r += R;
        }
        while r < t.rows.end {
            block_k_avx512::<F, 1, W>(t, &a, r, o);
            r += 1;
        }
    }
}
