//! 8-bit activations for the K-quants: the [`Precision`] choice, and an f32
//! row quantized to signed bytes per 256-element super-block ([`ActRow8`],
//! viewed as [`Q8Row`]), like ggml's `block_q8_K`.
//!
//! # Why a second activation format
//!
//! The K-quant weights are 4–6 bits already; 16-bit activations ([`crate::act`])
//! make the integer products twice as wide as they need to be, 32 per
//! `vpdpwssd` where 8-bit ones take 64 per `vpdpbusd`, and on a Zen 4 host
//! one-thread decode of a Q4_K_M model is bound by those multiplies. With
//! 8-bit activations the activation rounding error is ~0.4% of a block's
//! largest value, well below the weights' own quantization error
//! (docs/accuracy.md measures both). Non-K formats keep the 16-bit rows at
//! both precisions (see [`crate::act`] for why SmolLM2's Q4_1 needs them).
//!
//! # Rounding (exactly)
//!
//! For each super-block of 256 elements `x[0..256]`:
//!
//! ```text
//! amax = max |x[e]|                   (f32, exact; NaN elements ignored)
//! id   = 127 / amax, or 0 when amax == 0        (one f32 division)
//! q[e] = round_half_even(clamp(x[e] · id, −127, 127))   (one f32 product;
//!                                        a NaN product gives 0)
//! d    = amax / 127                   (one f32 division; 0 for a zero block)
//! ```
//!
//! so `x[e] ≈ d · q[e]`. The quants never take −128, which keeps every
//! `u8 × i8` pair product sum of `vpmaddubsw` inside `i16` (AVX2 kernels).
//! Beside the quants the row keeps each 16 elements' exact integer sum
//! (`bsum16`, |·| ≤ 16·127) and each 32 elements' (`bsum32`, |·| ≤ 32·127),
//! both as `i16`, for the K-quants' mins and Q6_K's offset of 32.
//!
//! # Layout
//!
//! The quants are in element order (`qs[256 sb + e]`), 64-byte aligned: a
//! kernel broadcasts four consecutive quants (one dword) to every lane.

use crate::quant::QK_K;

/// Which activation format the K-quant matrices multiply: the accuracy
/// contract of issue 56. Non-K formats run on 16-bit activations at both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// K-quant matrices (Q4_K, Q5_K, Q6_K) multiply 8-bit activations
    /// ([`ActRow8`]); the default, as llama.cpp's `Q8_K`.
    #[default]
    Int8,
    /// Every quantized matrix multiplies 16-bit activations ([`crate::act`]):
    /// closer to float64, slower on the K-quants.
    Int16,
}

impl Precision {
    /// The name the CLI, the policy key and the events use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Int8 => "int8",
            Self::Int16 => "int16",
        }
    }

    /// Parses [`Precision::as_str`]'s names.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "int8" => Ok(Self::Int8),
            "int16" => Ok(Self::Int16),
            other => Err(format!(
                "unknown activation precision {other:?}: use int8 (8-bit activations for the K-quants, the default) \
                 or int16 (16-bit activations everywhere, closer to float64)"
            )),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Largest quant magnitude: `-QMAX8..=QMAX8`.
pub const QMAX8: i32 = 127;

/// 64 quants at a 64-byte boundary: the storage unit of [`ActRow8`].
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Q8Line(pub [i8; 64]);

/// A borrowed 8-bit activation row: `x[256 sb + e] ≈ d[sb] · qs[256 sb + e]`.
#[derive(Clone, Copy, Debug)]
pub struct Q8Row<'a> {
    /// `256 · nsb` quants in element order, 64-byte aligned.
    pub qs: &'a [i8],
    /// Per super-block scale.
    pub d: &'a [f32],
    /// Per 16 elements, the exact sum of the quants (`16 · nsb`).
    pub bsum16: &'a [i16],
    /// Per 32 elements, the exact sum of the quants (`8 · nsb`).
    pub bsum32: &'a [i16],
    /// Number of 256-element super-blocks.
    pub nsb: usize,
}

impl Q8Row<'_> {
    /// The row of no super-blocks: an input that feeds no K-quant matrix at
    /// 8 bits (the kernels then read the 16-bit row).
    pub const EMPTY: Q8Row<'static> = Q8Row { qs: &[], d: &[], bsum16: &[], bsum32: &[], nsb: 0 };
}

/// `v` rounded to the nearest integer, ties to even, as an `i32` saturating
/// (NaN → 0): what `vcvtps2dq` gives under the default rounding mode for
/// every |v| ≤ 2^31.
#[inline]
fn round_half_even(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// Quantizes one super-block (module docs); returns `d`.
pub fn quantize_super_block(x: &[f32], q: &mut [i8]) -> f32 {
    debug_assert_eq!((x.len(), q.len()), (QK_K, QK_K));
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = if amax > 0.0 { QMAX8 as f32 / amax } else { 0.0 };
    for (qv, &v) in q.iter_mut().zip(x) {
        // `f32::clamp` keeps NaN, which the cast turns into 0.
        *qv = round_half_even((v * id).clamp(-(QMAX8 as f32), QMAX8 as f32)) as i8;
    }
    amax / QMAX8 as f32
}

/// [`quantize_super_block`] with AVX-512: the same operations lane by lane
/// (the maximum is exact in any order, `vcvtps2dq` rounds half to even
/// under the default MXCSR and a NaN product is zeroed first), so the same
/// bits.
///
/// # Safety
/// AVX-512 F/BW; `x` and `q` have 256 elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_super_block_avx512(x: &[f32], q: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert_eq!((x.len(), q.len()), (QK_K, QK_K));
    // SAFETY: sixteen 16-float loads and sixteen 16-byte stores inside the
    // 256-element slices.
    unsafe {
        let mut m = _mm512_setzero_ps();
        for k in 0..16 {
            // `max_ps(a, m)` returns `m` when `a` is NaN: f32::max's rule.
            m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x.as_ptr().add(16 * k))), m);
        }
        let amax = _mm512_reduce_max_ps(m);
        let id = if amax > 0.0 { QMAX8 as f32 / amax } else { 0.0 };
        for k in 0..16 {
            let p = _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(16 * k)), _mm512_set1_ps(id));
            let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(p, p);
            // Clamped as floats first (an infinite `id`, from a subnormal
            // amax, makes infinite products); NaN lanes are zeroed after.
            let c = _mm512_min_ps(_mm512_max_ps(p, _mm512_set1_ps(-(QMAX8 as f32))), _mm512_set1_ps(QMAX8 as f32));
            let r = _mm512_maskz_mov_epi32(ordered, _mm512_cvtps_epi32(c));
            _mm_storeu_si128(q.as_mut_ptr().add(16 * k).cast(), _mm512_cvtepi32_epi8(r));
        }
        amax / QMAX8 as f32
    }
}

/// Whether [`quantize_super_block_avx512`] can run here (checked once).
#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")
    })
}

#[inline]
fn quantize_super_block_fast(x: &[f32], q: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512 F/BW (checked); both slices are one
        // super-block (the caller's chunks).
        return unsafe { quantize_super_block_avx512(x, q) };
    }
    quantize_super_block(x, q)
}

/// An 8-bit activation row, reusable across calls to avoid reallocation.
#[derive(Clone, Debug, Default)]
pub struct ActRow8 {
    lines: Vec<Q8Line>,
    d: Vec<f32>,
    bsum16: Vec<i16>,
    bsum32: Vec<i16>,
    nsb: usize,
}

impl ActRow8 {
    /// Re-quantizes `x` into this row's storage.
    ///
    /// # Panics
    /// If `x.len()` is not a multiple of 256: a programming error (only the
    /// inputs of K-quant matrices, whose columns are whole super-blocks,
    /// are quantized to 8 bits).
    pub fn quantize(&mut self, x: &[f32]) {
        assert!(x.len().is_multiple_of(QK_K), "8-bit activation length must be a multiple of 256");
        let nsb = x.len() / QK_K;
        self.nsb = nsb;
        self.lines.clear();
        self.lines.resize(4 * nsb, Q8Line([0; 64]));
        self.d.clear();
        self.d.resize(nsb, 0.0);
        self.bsum16.clear();
        self.bsum16.resize(16 * nsb, 0);
        self.bsum32.clear();
        self.bsum32.resize(8 * nsb, 0);
        for (sb, xb) in x.chunks_exact(QK_K).enumerate() {
            // SAFETY: the lines hold 256·nsb initialized bytes, viewed as i8.
            let qs = unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<i8>(), QK_K * nsb) };
            let q = &mut qs[sb * QK_K..(sb + 1) * QK_K];
            self.d[sb] = quantize_super_block_fast(xb, q);
            for (k, c) in q.chunks_exact(16).enumerate() {
                self.bsum16[16 * sb + k] = c.iter().map(|&v| v as i16).sum();
            }
            for j in 0..8 {
                self.bsum32[8 * sb + j] = self.bsum16[16 * sb + 2 * j] + self.bsum16[16 * sb + 2 * j + 1];
            }
        }
    }

    /// The row as the kernels read it.
    pub fn view(&self) -> Q8Row<'_> {
        // SAFETY: the lines hold 256·nsb initialized bytes; i8 has no invalid
        // bit patterns and alignment 1.
        let qs = unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<i8>(), QK_K * self.nsb) };
        Q8Row { qs, d: &self.d, bsum16: &self.bsum16, bsum32: &self.bsum32, nsb: self.nsb }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(x: &[f32]) -> ActRow8 {
        let mut r = ActRow8::default();
        r.quantize(x);
        r
    }

    #[test]
    fn precision_names_round_trip_and_an_unknown_name_is_refused_naming_both() {
        for p in [Precision::Int8, Precision::Int16] {
            assert_eq!(Precision::parse(p.as_str()), Ok(p));
        }
        assert_eq!(Precision::default(), Precision::Int8);
        let e = Precision::parse("fp8").unwrap_err();
        assert!(e.contains("fp8") && e.contains("int8") && e.contains("int16"), "{e}");
    }

    #[test]
    fn quantized_super_blocks_reproduce_values_within_half_a_step_and_carry_exact_sums() {
        let x: Vec<f32> =
            (0..512).map(|i| ((i as f32) * 0.37).sin() * 3.0 + if i == 300 { 40.0 } else { 0.0 }).collect();
        let r = row(&x);
        let q = r.view();
        assert_eq!((q.nsb, q.qs.len(), q.qs.as_ptr() as usize % 64), (2, 512, 0));
        for (i, v) in x.iter().enumerate() {
            let d = q.d[i / QK_K];
            assert!((d * q.qs[i] as f32 - v).abs() <= d * 0.5 * 1.0001, "{i}");
        }
        for sb in 0..2 {
            assert!(q.qs[sb * 256..][..256].iter().any(|&v| v.abs() == 127));
        }
        for k in 0..32 {
            assert_eq!(q.bsum16[k] as i32, q.qs[16 * k..16 * k + 16].iter().map(|&v| v as i32).sum::<i32>());
        }
        for j in 0..16 {
            assert_eq!(q.bsum32[j] as i32, q.qs[32 * j..32 * j + 32].iter().map(|&v| v as i32).sum::<i32>());
        }
    }

    #[test]
    fn ties_round_to_even_and_a_zero_block_has_zero_scale() {
        // amax 127 → id 1: the quants are the values, rounded half to even.
        let mut x = [0.0f32; 256];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 3.5;
        x[4] = -0.5;
        let r = row(&x);
        assert_eq!(&r.view().qs[..5], &[127, 2, -2, 4, 0]);
        assert_eq!(r.view().d[0], 1.0);
        let z = row(&[0.0; 256]);
        assert_eq!((z.view().d[0], z.view().qs.iter().all(|&v| v == 0)), (0.0, true));
    }

    /// The SIMD super-block quantizer against the scalar one, bit for bit,
    /// on random blocks of many magnitudes, ties, zeros, infinities and NaN.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_super_block_quantizer_equals_the_scalar_one() {
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
        let mut blocks: Vec<Vec<f32>> = Vec::new();
        for i in 0..500 {
            let scale = [1e-30f32, 1e-3, 1.0, 3.0, 1e4, 2e4, 1e30][i % 7];
            blocks.push((0..256).map(|_| ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale).collect());
        }
        blocks.push((0..256).map(|k| if k == 255 { 127.0 } else { k as f32 * 0.5 - 60.0 }).collect());
        blocks.push(vec![0.0; 256]);
        blocks.push((0..256).map(|k| if k == 5 { f32::INFINITY } else { k as f32 }).collect());
        blocks.push((0..256).map(|k| if k == 5 { f32::NEG_INFINITY } else { k as f32 }).collect());
        blocks.push((0..256).map(|k| if k == 9 { f32::NAN } else { k as f32 - 16.0 }).collect());
        blocks.push(vec![f32::NAN; 256]);
        blocks.push((0..256).map(|k| if k % 3 == 0 { 1e-40 } else { -1e-41 * k as f32 }).collect());
        for (i, x) in blocks.iter().enumerate() {
            let (mut a, mut b) = ([0i8; 256], [0i8; 256]);
            let da = quantize_super_block(x, &mut a);
            // SAFETY: AVX-512 checked above; both are one super-block.
            let db = unsafe { quantize_super_block_avx512(x, &mut b) };
            assert_eq!((da.to_bits(), a), (db.to_bits(), b), "block {i}");
        }
    }
}
