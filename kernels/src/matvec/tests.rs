//! The shared kernel test runner: every family this CPU has against the
//! scalar specification (bit for bit), the scalar kernels against f64 dot
//! products of the dequantized weights (within the quantization error), and
//! every multi-row pass against single-row calls (bit for bit).

use super::*;
use crate::act::{ActRow, QRow};
use crate::quant::{QK_K, dequantize_row};
use half::f16;

/// Awkward counts, used for rows (around the 16-row tile) and for blocks
/// per row (odd counts leave a block without its pair; 16 is one group of
/// scales, 17 and 33 start a partial group).
const AWKWARD: &[usize] = &[1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33];
const ROWS: &[usize] = AWKWARD;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Random bytes for `rows x cols` weights of `ty`, with every f16 scale
/// field overwritten by a sane value (random bits would be NaN/inf).
fn random_weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let nbytes = ty.row_bytes(cols).unwrap() * rows;
    match ty {
        GgmlType::F32 => return (0..rows * cols).flat_map(|_| rng.f32().to_le_bytes()).collect(),
        GgmlType::F16 => return (0..rows * cols).flat_map(|_| f16::from_f32(rng.f32()).to_le_bytes()).collect(),
        GgmlType::BF16 => {
            return (0..rows * cols).flat_map(|_| half::bf16::from_f32(rng.f32()).to_le_bytes()).collect();
        }
        _ => {}
    }
    let mut bytes: Vec<u8> = (0..nbytes).map(|_| rng.next() as u8).collect();
    let bb = ty.block_bytes();
    let scale_offsets: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        _ => &[],
    };
    for blk in bytes.chunks_exact_mut(bb) {
        for &o in scale_offsets {
            let v = f16::from_f32(rng.f32() * 0.05).to_bits().to_le_bytes();
            blk[o..o + 2].copy_from_slice(&v);
        }
    }
    bytes
}

/// An owned copy of `bytes` at an address aligned for `ty`'s blocks (a Vec<u8>
/// is only guaranteed byte alignment), offset by `skew` f32s for F32.
fn aligned(bytes: &[u8]) -> Vec<u32> {
    let mut v = vec![0u32; bytes.len().div_ceil(4)];
    // SAFETY: v has at least bytes.len() bytes; u32 storage is 4-aligned.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len()) };
    v
}

fn as_bytes(v: &[u32], len: usize) -> &[u8] {
    // SAFETY: v holds at least `len` initialized bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), len) }
}

fn check_type(ty: GgmlType, cols_list: &[usize]) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ty.id() as u64);
    for &cols in cols_list {
        for &rows in ROWS {
            let raw = random_weights(ty, rows, cols, &mut rng);
            let x: Vec<f32> = (0..cols).map(|_| rng.f32() * 2.0).collect();
            check_matrix(ty, &raw, rows, cols, &x);
        }
    }
}

/// The scalar kernel against f64, then every family against the scalar
/// kernel bit for bit, on one matrix and one activation row.
fn check_matrix(ty: GgmlType, raw: &[u8], rows: usize, cols: usize, x: &[f32]) {
    let store = aligned(raw);
    let bytes = as_bytes(&store, raw.len());
    let m = Matrix::from_bytes(ty, bytes, rows, cols).unwrap();
    let mut q = ActRow::default();
    q.quantize(x);
    let input = Input::new(x, q.view());
    let mut want = vec![0.0f32; rows];
    scalar::matvec_rows(&m, input, 0, &mut want);

    // Scalar against f64 over the dequantized weights and the
    // dequantized activation: the integer path must be exact up to
    // f32 rounding of the block combination.
    // (Float weights multiply the f32 activation itself.)
    let qv = q.view();
    let xq: Vec<f64> = if m.wants_quantized_input() {
        (0..qv.nb).flat_map(|b| qv.block_quants(b).map(move |v| qv.d[b] as f64 * v as f64)).collect()
    } else {
        x.iter().map(|&v| v as f64).collect()
    };
    let row_bytes = ty.row_bytes(cols).unwrap();
    for r in 0..rows {
        let mut wr = vec![0.0f32; cols];
        dequantize_row(ty, &raw[r * row_bytes..(r + 1) * row_bytes], &mut wr).unwrap();
        let exact: f64 = wr.iter().zip(&xq).map(|(&a, &b)| a as f64 * b).sum();
        let mag: f64 = wr.iter().zip(&xq).map(|(&a, &b)| (a as f64 * b).abs()).sum();
        assert!(
            (want[r] as f64 - exact).abs() <= 1e-5 * mag + 1e-6,
            "{ty:?} {rows}x{cols} row {r}: scalar {} vs f64 {exact}",
            want[r]
        );
    }

    // The legacy formats also in the row-interleaved layout: the same
    // numbers from every family, scalar included.
    let packed = r16::Repacked::from_native(ty, raw, rows, cols).unwrap();
    let views: Vec<(&str, Matrix)> =
        std::iter::once(("gguf", m)).chain(packed.as_ref().map(|p| ("r16", p.matrix()))).collect();
    for (layout, m) in &views {
        for fam in KernelFamily::all_supported() {
            // Whole range, a sub-range starting at an odd row, and one
            // ending inside a group.
            let mut got = vec![0.0f32; rows];
            matvec_rows(fam, m, input, 0, &mut got);
            assert_eq!(bits(&got), bits(&want), "{ty:?} {layout} {fam:?} {rows}x{cols}");
            if rows > 2 {
                let mut part = vec![0.0f32; rows - 1];
                matvec_rows(fam, m, input, 1, &mut part);
                assert_eq!(bits(&part), bits(&want[1..]), "{ty:?} {layout} {fam:?} {rows}x{cols} from row 1");
                let mut mid = vec![0.0f32; rows - 2];
                matvec_rows(fam, m, input, 1, &mut mid);
                assert_eq!(bits(&mid), bits(&want[1..rows - 1]), "{ty:?} {layout} {fam:?} {rows}x{cols} rows 1..-1");
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Column counts: every awkward number of 32-element blocks.
fn legacy_cols() -> Vec<usize> {
    AWKWARD.iter().map(|nb| nb * QK).chain([576, 1536]).collect()
}

/// Q5_0 / Q5_1 blocks at the extremes: every quant 31 (all nibble and
/// fifth bits set), every quant 0, alternating bits and random ones, under
/// f16 scales and mins from the largest finite to subnormal and negative,
/// against activations whose every quant is ±32767 (the integer sums'
/// worst case, where a block sum exceeds 2^24 and its conversion rounds)
/// and a mixed random row; both layouts, every family, one row and the
/// multi-row passes.
#[test]
fn every_family_equals_scalar_on_q5_at_extreme_values() {
    let cols = 33 * QK;
    let mut rng = Rng(0x55);
    let xs = extreme_inputs(cols, 3, &mut rng);
    for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
        let (raw, rows) = extreme_rows(ty, cols, &mut rng, |blk, r, _| {
            blk[0..2].copy_from_slice(&extreme_f16(r));
            if ty == GgmlType::Q5_1 {
                blk[2..4].copy_from_slice(&extreme_f16(r + 1));
            }
        });
        for x in &xs {
            check_matrix(ty, &raw, rows, cols, x);
        }
        let store = aligned(&raw);
        let m = Matrix::from_bytes(ty, as_bytes(&store, raw.len()), rows, cols).unwrap();
        let packed = r16::Repacked::from_native(ty, &raw, rows, cols).unwrap().unwrap();
        for m in [m, packed.matrix()] {
            assert_multi_row_equals_scalar(ty, &m, &xs);
        }
    }
}

/// Super-block counts per row: one, a few odd ones, and the default
/// model's 576 and 1536 columns' neighbours (K-quant rows are whole
/// super-blocks).
fn k_cols() -> Vec<usize> {
    [1, 2, 3, 5, 6, 9].iter().map(|nsb| nsb * QK_K).collect()
}

/// One test per format: every family gives the scalar kernel's outputs
/// bit for bit over that format's awkward column counts ([`check_type`]).
macro_rules! every_family_equals_scalar {
    ($($name:ident: $ty:ident over $cols:ident;)*) => {
        $(
            #[test]
            fn $name() {
                check_type(GgmlType::$ty, &$cols());
            }
        )*
    };
}

every_family_equals_scalar! {
    every_family_equals_scalar_on_q4_0: Q4_0 over legacy_cols;
    every_family_equals_scalar_on_q4_1: Q4_1 over legacy_cols;
    every_family_equals_scalar_on_q8_0: Q8_0 over legacy_cols;
    every_family_equals_scalar_on_q5_0: Q5_0 over legacy_cols;
    every_family_equals_scalar_on_q5_1: Q5_1 over legacy_cols;
    every_family_equals_scalar_on_q4_k: Q4K over k_cols;
    every_family_equals_scalar_on_q5_k: Q5K over k_cols;
    every_family_equals_scalar_on_q6_k: Q6K over k_cols;
    every_family_equals_scalar_on_q2_k: Q2K over k_cols;
    every_family_equals_scalar_on_q3_k: Q3K over k_cols;
}

/// K-quant super-blocks at the extremes of every field: the largest and
/// smallest quants, 6-bit scales and mins of 63, Q6_K scales of −128 and
/// 127, f16 scales from the largest finite to subnormal and negative,
/// against activations whose every quant is ±32767 (the integer lanes'
/// worst case), and a mixed random row.
#[test]
fn every_family_equals_scalar_on_k_quants_at_extreme_values() {
    let cols = 3 * QK_K;
    let mut rng = Rng(0xE77);
    let xs = extreme_inputs(cols, 7, &mut rng);
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let (raw, rows) = extreme_rows(ty, cols, &mut rng, |blk, r, pattern| match ty {
            GgmlType::Q6K => {
                blk[208..210].copy_from_slice(&extreme_f16(r));
                // Quants 31 against scale 127, −32 against −128 (the
                // largest |q·sc|), then alternating scales.
                for (k, s) in blk[192..208].iter_mut().enumerate() {
                    *s = match pattern {
                        0 => 0x7F,
                        1 => 0x80,
                        2 => [0x80, 0x7F][k % 2],
                        _ => *s,
                    };
                }
            }
            _ => {
                blk[0..2].copy_from_slice(&extreme_f16(r));
                blk[2..4].copy_from_slice(&extreme_f16(r + 1));
                if pattern == 1 {
                    // Zero quants under the largest scales and mins:
                    // the min term alone.
                    blk[4..16].fill(0xFF);
                }
            }
        });
        for x in &xs {
            check_matrix(ty, &raw, rows, cols, x);
        }
    }
}

/// Each row of `xs` quantized as a verify block's activations are.
fn quantized(xs: &[Vec<f32>]) -> Vec<ActRow> {
    xs.iter()
        .map(|x| {
            let mut q = ActRow::default();
            q.quantize(x);
            q
        })
        .collect()
}

/// Every family's multi-row pass of `m` over the rows `xs` (quantized as a
/// verify block's are) gives the scalar kernel's outputs bit for bit.
fn assert_multi_row_equals_scalar(ty: GgmlType, m: &Matrix, xs: &[Vec<f32>]) {
    let rows = m.rows;
    let qs = quantized(xs);
    let inputs: Vec<Input> = xs.iter().zip(&qs).map(|(x, q)| Input::new(x, q.view())).collect();
    let mut want = vec![0.0f32; inputs.len() * rows];
    for (inp, out) in inputs.iter().zip(want.chunks_exact_mut(rows)) {
        scalar::matvec_rows(m, *inp, 0, out);
    }
    for fam in KernelFamily::all_supported() {
        let mut got = vec![f32::NAN; inputs.len() * rows];
        matmul_rows_with(fam, true, m, &inputs, 0, &mut got);
        assert_eq!(bits(&got), bits(&want), "{ty:?} {fam:?} multi-row at extremes");
    }
}

/// The f16 scales the extreme-value tests cycle through, as file bytes:
/// the largest finite, one, a negative, a subnormal and zero.
fn extreme_f16(i: usize) -> [u8; 2] {
    const VALUES: [f32; 5] = [65504.0, 1.0, -3.5, 6.0e-8, 0.0];
    f16::from_f32(VALUES[i % VALUES.len()]).to_bits().to_le_bytes()
}

/// Activation rows at the extremes: every element 1 and every element −2
/// (each block quantizes to ±32767 throughout: the integer sums' worst
/// case), signs alternating every `period` elements, and a random row.
fn extreme_inputs(cols: usize, period: usize, rng: &mut Rng) -> Vec<Vec<f32>> {
    let signs: Vec<f32> = (0..cols).map(|i| if (i / period).is_multiple_of(2) { 1.0 } else { -1.0 }).collect();
    vec![vec![1.0; cols], vec![-2.0; cols], signs, (0..cols).map(|_| rng.f32() * 1e3).collect()]
}

/// Twenty rows of `ty` blocks at the extremes: row `r`'s every byte is all
/// ones, all zeros, alternating or random (pattern `r / 5`), then `scales`
/// sets the format's scale fields (given the block, `r` and the pattern;
/// [`extreme_f16`]`(r)` cycles the f16 scales). Returns the bytes and the
/// row count.
fn extreme_rows(
    ty: GgmlType,
    cols: usize,
    rng: &mut Rng,
    scales: impl Fn(&mut [u8], usize, usize),
) -> (Vec<u8>, usize) {
    let rows = 5 * 4;
    let per_row = cols / ty.block_elems();
    let mut raw = vec![0u8; rows * ty.row_bytes(cols).unwrap()];
    for (i, blk) in raw.chunks_exact_mut(ty.block_bytes()).enumerate() {
        let r = i / per_row;
        let pattern = r / 5;
        for v in blk.iter_mut() {
            *v = match pattern {
                0 => 0xFF,
                1 => 0x00,
                2 => 0xAA,
                _ => rng.next() as u8,
            };
        }
        scales(blk, r, pattern);
    }
    (raw, rows)
}

#[test]
fn every_family_equals_scalar_on_f16_and_bf16() {
    for ty in [GgmlType::F16, GgmlType::BF16] {
        check_type(ty, &legacy_cols());
    }
}

/// Q2_K / Q3_K super-blocks at the extremes: all quant and scale bits set
/// (Q2_K: quants 3 under scales and mins 15; Q3_K: quants 3 under scale
/// 31), all clear (Q3_K: quants −4 under scale −32, the largest |sc·q|),
/// alternating and random bits, under f16 `d` / `dmin` from the largest
/// finite to subnormal and negative, against activations whose every quant
/// is ±32767 and a mixed random row; then every multi-row pass on them.
#[test]
fn every_family_equals_scalar_on_q2_k_and_q3_k_at_extreme_values() {
    let f16s: Vec<[u8; 2]> =
        [65504.0f32, 1.0, -3.5, 6.0e-8, 0.0].iter().map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect();
    let rows = f16s.len() * 4;
    let cols = 3 * QK_K;
    let mut rng = Rng(0x23);
    let signs: Vec<f32> = (0..cols).map(|i| if (i / 5) % 2 == 0 { 1.0 } else { -1.0 }).collect();
    let xs: Vec<Vec<f32>> =
        vec![vec![1.0; cols], vec![-2.0; cols], signs, (0..cols).map(|_| rng.f32() * 1e3).collect()];
    for ty in [GgmlType::Q2K, GgmlType::Q3K] {
        let bb = ty.block_bytes();
        let mut raw = vec![0u8; rows * ty.row_bytes(cols).unwrap()];
        for (i, blk) in raw.chunks_exact_mut(bb).enumerate() {
            let r = i / (cols / QK_K);
            let (dv, pattern) = (f16s[r % f16s.len()], r / f16s.len());
            for v in blk.iter_mut() {
                *v = match pattern {
                    0 => 0xFF,
                    1 => 0x00,
                    2 => 0xAA,
                    _ => rng.next() as u8,
                };
            }
            if ty == GgmlType::Q2K {
                blk[80..82].copy_from_slice(&dv);
                blk[82..84].copy_from_slice(&f16s[(r + 1) % f16s.len()]);
                if pattern == 1 {
                    // Zero quants under the largest mins: the min term alone.
                    blk[..16].fill(0xF0);
                }
            } else {
                blk[108..110].copy_from_slice(&dv);
            }
        }
        for x in &xs {
            check_matrix(ty, &raw, rows, cols, x);
        }
        let store = aligned(&raw);
        let m = Matrix::from_bytes(ty, as_bytes(&store, raw.len()), rows, cols).unwrap();
        assert_multi_row_equals_scalar(ty, &m, &xs);
    }
}

/// F16 / BF16 rows of every awkward length (not only whole 32-element
/// blocks: float rows have no block structure), at offsets that misalign
/// both operands, against the scalar specification and f64, including
/// f16 subnormals and the largest finite values.
#[test]
fn every_family_equals_scalar_on_f16_and_bf16_at_awkward_lengths_and_alignments() {
    let mut rng = Rng(1616);
    for bf in [false, true] {
        for len in [1usize, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100] {
            for skew in 0..3 {
                let w: Vec<u16> = (0..len + skew)
                    .map(|i| match (bf, i % 7) {
                        (false, 3) => f16::from_f32(6.0e-8).to_bits(),
                        (false, 5) => f16::MAX.to_bits(),
                        (false, _) => f16::from_f32(rng.f32()).to_bits(),
                        (true, 5) => half::bf16::from_f32(1.0e30).to_bits(),
                        (true, _) => half::bf16::from_f32(rng.f32()).to_bits(),
                    })
                    .collect();
                let x: Vec<f32> = (0..len + skew).map(|_| rng.f32()).collect();
                let (w, x) = (&w[skew..], &x[..len]);
                let want = scalar::dot_f16(w, bf, x);
                let widen = |v: u16| if bf { scalar::bf16_to_f32(v) } else { scalar::f16_to_f32(v) };
                let exact: f64 = w.iter().zip(x).map(|(&a, &b)| widen(a) as f64 * b as f64).sum();
                let mag: f64 = w.iter().zip(x).map(|(&a, &b)| (widen(a) as f64 * b as f64).abs()).sum();
                assert!((want as f64 - exact).abs() <= 1e-6 * mag, "bf16={bf} len {len}: {want} vs {exact}");
                for fam in KernelFamily::all_supported() {
                    let m = Matrix::from_f16_bits(w, bf, 1, len);
                    let mut got = [0.0f32];
                    matvec_rows(fam, &m, Input::new(x, QRow::EMPTY), 0, &mut got);
                    assert_eq!(got[0].to_bits(), want.to_bits(), "{fam:?} bf16={bf} len {len} skew {skew}");
                }
            }
        }
    }
}

#[test]
fn every_family_equals_scalar_on_f32_at_awkward_lengths_and_alignments() {
    let mut rng = Rng(42);
    for len in [1usize, 2, 3, 5, 7, 15, 16, 17, 31, 33, 64, 100] {
        for skew in 0..3 {
            let a: Vec<f32> = (0..len + skew).map(|_| rng.f32()).collect();
            let b: Vec<f32> = (0..len + skew).map(|_| rng.f32()).collect();
            let (a, b) = (&a[skew..], &b[..len]);
            let want = scalar::dot_f32(a, b);
            let exact: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
            assert!((want as f64 - exact).abs() < 1e-5, "len {len}");
            for fam in KernelFamily::all_supported() {
                let m = Matrix::from_f32(a, 1, len);
                let mut got = [0.0f32];
                matvec_rows(fam, &m, Input::new(b, QRow::EMPTY), 0, &mut got);
                assert_eq!(got[0].to_bits(), want.to_bits(), "{fam:?} len {len} skew {skew}");
            }
        }
    }
}

/// Every multi-row pass of every family equals `W` single-row calls bit for
/// bit, for `W` = 1..=17 (chunks of a family's widest pass and a remainder
/// included: 17 = 2·8 + 1 = 4·4 + 1), on every format, over awkward row and
/// block counts and a sub-range of rows.
fn check_multirow(ty: GgmlType, shapes: &[(usize, usize)]) {
    let mut rng = Rng(0x5EED ^ ty.id() as u64);
    for &(rows, cols) in shapes {
        let raw = random_weights(ty, rows, cols, &mut rng);
        let store = aligned(&raw);
        let m = Matrix::from_bytes(ty, as_bytes(&store, raw.len()), rows, cols).unwrap();
        let xs: Vec<Vec<f32>> = (0..17).map(|_| (0..cols).map(|_| rng.f32()).collect()).collect();
        let qs = quantized(&xs);
        let all: Vec<Input> = xs.iter().zip(&qs).map(|(x, q)| Input::new(x, q.view())).collect();
        let row0 = rows / 3;
        let n = rows - row0;
        let packed = r16::Repacked::from_native(ty, &raw, rows, cols).unwrap();
        let views: Vec<Matrix> = std::iter::once(m).chain(packed.as_ref().map(|p| p.matrix())).collect();
        for (fam, m) in KernelFamily::all_supported().into_iter().flat_map(|f| views.iter().map(move |m| (f, m))) {
            let singles: Vec<Vec<f32>> = all
                .iter()
                .map(|inp| {
                    let mut one = vec![0.0f32; n];
                    matvec_rows(fam, m, *inp, row0, &mut one);
                    one
                })
                .collect();
            for w in 1..=17 {
                for multirow in [true, false] {
                    let mut outs = vec![f32::NAN; w * n];
                    matmul_rows_with(fam, multirow, m, &all[..w], row0, &mut outs);
                    for (i, one) in singles.iter().take(w).enumerate() {
                        assert_eq!(
                            bits(&outs[i * n..(i + 1) * n]),
                            bits(one),
                            "{ty:?} {fam:?} {rows}x{cols} W={w} row {i} multirow={multirow}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn multi_row_passes_equal_single_row_calls_bit_for_bit_for_w_1_to_17() {
    let shapes = [(1, 32), (17, 96), (33, 544), (5, 576), (48, 64)];
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F32] {
        check_multirow(ty, &shapes);
    }
    // Q5: also Gemma 3 270M's 640 columns (20 blocks) at a row count that
    // is not a multiple of 16, and 33 blocks.
    for ty in [GgmlType::Q5_0, GgmlType::Q5_1] {
        check_multirow(ty, &[(1, 32), (17, 96), (33, 544), (5, 576), (48, 64), (37, 640), (19, 33 * QK)]);
    }
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::Q2K, GgmlType::Q3K] {
        check_multirow(ty, &[(1, QK_K), (3, QK_K), (9, 2 * QK_K), (17, 3 * QK_K), (40, 5 * QK_K)]);
    }
    for ty in [GgmlType::F16, GgmlType::BF16] {
        check_multirow(ty, &[(1, 32), (17, 96), (33, 544), (5, 576), (48, 64), (37, 640)]);
    }
}

#[test]
fn from_bytes_refuses_wrong_lengths_and_columns() {
    let bytes = vec![0u8; 40];
    assert!(matches!(Matrix::from_bytes(GgmlType::Q4_1, &bytes[..39], 1, 64), Err(MatrixError::Length { .. })));
    assert!(matches!(Matrix::from_bytes(GgmlType::Q4_1, &bytes, 1, 40), Err(MatrixError::Columns { .. })));
    assert!(matches!(Matrix::from_bytes(GgmlType::F16, &bytes[..38], 1, 20), Err(MatrixError::Length { .. })));
    assert!(matches!(Matrix::from_bytes(GgmlType::Q2K, &bytes, 1, 128), Err(MatrixError::Columns { .. })));
    // Odd float rows are fine: no block structure.
    let w = aligned(&bytes);
    assert!(matches!(Matrix::from_bytes(GgmlType::BF16, as_bytes(&w, 38), 1, 19).unwrap().w, Weights::BF16(_)));
}

// ---- 8-bit activations for the K-quants (`Precision::Int8`, `scalar8`) ----

use crate::act8::ActRow8;

/// A row in all three forms, as the runtime builds it at `Precision::Int8`.
fn input8<'a>(x: &'a [f32], q: &'a ActRow, q8: &'a ActRow8) -> Input<'a> {
    Input { x, q: q.view(), q8: q8.view() }
}

fn quantized8(xs: &[Vec<f32>]) -> Vec<ActRow8> {
    xs.iter()
        .map(|x| {
            let mut q = ActRow8::default();
            q.quantize(x);
            q
        })
        .collect()
}

/// The 8-bit specification against f64 over the dequantized weights and
/// the dequantized 8-bit activation, then every family (both layouts, a
/// sub-range starting at row 1, one ending inside a group) against the
/// specification bit for bit.
fn check_matrix8(ty: GgmlType, raw: &[u8], rows: usize, cols: usize, x: &[f32]) {
    let store = aligned(raw);
    let m = Matrix::from_bytes(ty, as_bytes(&store, raw.len()), rows, cols).unwrap();
    assert!(m.takes_int8());
    let (mut q, mut q8) = (ActRow::default(), ActRow8::default());
    q.quantize(x);
    q8.quantize(x);
    let input = input8(x, &q, &q8);
    let mut want = vec![0.0f32; rows];
    scalar8::matvec_rows(&m, input, 0, &mut want);
    let v8 = q8.view();
    let xq: Vec<f64> = (0..cols).map(|e| v8.d[e / QK_K] as f64 * v8.qs[e] as f64).collect();
    let row_bytes = ty.row_bytes(cols).unwrap();
    for r in 0..rows {
        let mut wr = vec![0.0f32; cols];
        dequantize_row(ty, &raw[r * row_bytes..(r + 1) * row_bytes], &mut wr).unwrap();
        let exact: f64 = wr.iter().zip(&xq).map(|(&a, &b)| a as f64 * b).sum();
        // The scaled sums before the min is subtracted bound the rounding.
        let mag: f64 = wr.iter().zip(&xq).map(|(&a, &b)| (a as f64 * b).abs()).sum::<f64>()
            + xq.iter().map(|b| b.abs()).sum::<f64>() * wr.iter().fold(0.0f64, |m, &a| m.max(a.abs() as f64));
        let (got, tol) = (want[r] as f64, 1e-5 * mag + 1e-6);
        assert!(
            (got - exact).abs() <= tol || (got.is_nan() && exact.is_nan()) || (got.is_infinite() && got == exact),
            "{ty:?} {rows}x{cols} row {r}: int8 spec {got} vs f64 {exact}"
        );
    }
    let packed = r16::Repacked::from_native(ty, raw, rows, cols).unwrap().expect("K-quants repack");
    for (layout, m) in [("gguf", m), ("r16", packed.matrix())] {
        for fam in KernelFamily::all_supported() {
            let mut got = vec![0.0f32; rows];
            matvec_rows(fam, &m, input, 0, &mut got);
            assert_eq!(bits(&got), bits(&want), "{ty:?} int8 {layout} {fam:?} {rows}x{cols}");
            if rows > 2 {
                let mut mid = vec![0.0f32; rows - 2];
                matvec_rows(fam, &m, input, 1, &mut mid);
                assert_eq!(bits(&mid), bits(&want[1..rows - 1]), "{ty:?} int8 {layout} {fam:?} rows 1..-1");
            }
        }
    }
}

/// 8-bit activation rows at the extremes: all +127 (every element 1), all
/// −127, signs alternating every `period`, one outlier that leaves the
/// others at 0 or ±1, an all-zero row (d = 0), and a random one.
fn extreme_inputs8(cols: usize, period: usize, rng: &mut Rng) -> Vec<Vec<f32>> {
    let mut xs = extreme_inputs(cols, period, rng);
    xs.push((0..cols).map(|i| if i % 97 == 5 { 1e4 } else { rng.f32() * 60.0 }).collect());
    xs.push(vec![0.0; cols]);
    xs
}

#[test]
fn int8_every_family_equals_the_spec_on_k_quants_at_awkward_shapes() {
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let mut rng = Rng(0x8B17 ^ ty.id() as u64);
        for cols in k_cols() {
            for &rows in ROWS {
                let raw = random_weights(ty, rows, cols, &mut rng);
                let x: Vec<f32> = (0..cols).map(|_| rng.f32() * 2.0).collect();
                check_matrix8(ty, &raw, rows, cols, &x);
            }
        }
    }
}

/// The extreme K-quant blocks of the 16-bit test (largest quants and
/// scales, Q6_K scales of −128 and 127, zero quants under the largest
/// mins, f16 scales from 65504 to subnormal) against the extreme 8-bit rows:
/// the integer sums' worst case of `scalar8`'s overflow proof.
#[test]
fn int8_every_family_equals_the_spec_on_k_quants_at_extreme_values() {
    let cols = 3 * QK_K;
    let mut rng = Rng(0xE78);
    let xs = extreme_inputs8(cols, 7, &mut rng);
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let (raw, rows) = extreme_rows(ty, cols, &mut rng, |blk, r, pattern| match ty {
            GgmlType::Q6K => {
                blk[208..210].copy_from_slice(&extreme_f16(r));
                for (k, s) in blk[192..208].iter_mut().enumerate() {
                    *s = match pattern {
                        0 => 0x7F,
                        1 => 0x80,
                        2 => [0x80, 0x7F][k % 2],
                        _ => *s,
                    };
                }
            }
            _ => {
                blk[0..2].copy_from_slice(&extreme_f16(r));
                blk[2..4].copy_from_slice(&extreme_f16(r + 1));
                if pattern == 1 {
                    blk[4..16].fill(0xFF);
                }
            }
        });
        for x in &xs {
            check_matrix8(ty, &raw, rows, cols, x);
        }
    }
}

/// A `W`-row call at 8 bits equals `W` single-row calls bit for bit, for
/// W = 1..=17 (two passes of the widest width, plus one), both layouts,
/// every family, a sub-range of rows; and the multi-row control agrees.
#[test]
fn int8_multi_row_passes_equal_single_row_calls_bit_for_bit_for_w_1_to_17() {
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let mut rng = Rng(0x5EED8 ^ ty.id() as u64);
        for (rows, cols) in [(1, QK_K), (3, QK_K), (9, 2 * QK_K), (17, 3 * QK_K), (40, 5 * QK_K)] {
            let raw = random_weights(ty, rows, cols, &mut rng);
            let store = aligned(&raw);
            let m = Matrix::from_bytes(ty, as_bytes(&store, raw.len()), rows, cols).unwrap();
            let packed = r16::Repacked::from_native(ty, &raw, rows, cols).unwrap().unwrap();
            let xs: Vec<Vec<f32>> = (0..17).map(|_| (0..cols).map(|_| rng.f32()).collect()).collect();
            let (qs, q8s) = (quantized(&xs), quantized8(&xs));
            let all: Vec<Input> = (0..17).map(|i| input8(&xs[i], &qs[i], &q8s[i])).collect();
            let row0 = rows / 3;
            let n = rows - row0;
            for fam in KernelFamily::all_supported() {
                for m in [m, packed.matrix()] {
                    let singles: Vec<Vec<f32>> = all
                        .iter()
                        .map(|inp| {
                            let mut one = vec![0.0f32; n];
                            matvec_rows(fam, &m, *inp, row0, &mut one);
                            let mut spec = vec![0.0f32; n];
                            scalar8::matvec_rows(&m, *inp, row0, &mut spec);
                            assert_eq!(bits(&one), bits(&spec), "{ty:?} {fam:?} single row");
                            one
                        })
                        .collect();
                    for w in 1..=17 {
                        for multirow in [true, false] {
                            let mut outs = vec![f32::NAN; w * n];
                            matmul_rows_with(fam, multirow, &m, &all[..w], row0, &mut outs);
                            for (i, one) in singles.iter().take(w).enumerate() {
                                assert_eq!(
                                    bits(&outs[i * n..(i + 1) * n]),
                                    bits(one),
                                    "{ty:?} int8 {fam:?} {rows}x{cols} W={w} row {i} multirow={multirow}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// At `Precision::Int8` only the K-quants read the 8-bit row: a Q4_1 (or
/// any other) matrix given inputs that carry one computes exactly what it
/// computes without, so SmolLM2's numbers cannot move.
#[test]
fn int8_rows_leave_non_k_formats_on_the_16_bit_path() {
    let mut rng = Rng(0x16B1);
    let cols = 2 * QK_K;
    let xs: Vec<Vec<f32>> = (0..3).map(|_| (0..cols).map(|_| rng.f32()).collect()).collect();
    let (qs, q8s) = (quantized(&xs), quantized8(&xs));
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q2K, GgmlType::Q3K] {
        let raw = random_weights(ty, 19, cols, &mut rng);
        let store = aligned(&raw);
        let m = Matrix::from_bytes(ty, as_bytes(&store, raw.len()), 19, cols).unwrap();
        assert!(!m.takes_int8(), "{ty:?}");
        for fam in KernelFamily::all_supported() {
            let with: Vec<Input> = (0..3).map(|i| input8(&xs[i], &qs[i], &q8s[i])).collect();
            let without: Vec<Input> = (0..3).map(|i| Input::new(&xs[i], qs[i].view())).collect();
            let (mut a, mut b) = (vec![0.0f32; 3 * 19], vec![0.0f32; 3 * 19]);
            matmul_rows_with(fam, true, &m, &with, 0, &mut a);
            matmul_rows_with(fam, true, &m, &without, 0, &mut b);
            assert_eq!(bits(&a), bits(&b), "{ty:?} {fam:?}");
        }
    }
}

/// The two precisions are different computations (the 8-bit one is not the
/// 16-bit one in disguise) and both stay close to each other on a K-quant.
#[test]
fn int8_and_int16_differ_slightly_on_a_k_quant() {
    let mut rng = Rng(0xD1FF);
    let (rows, cols) = (32, 4 * QK_K);
    let raw = random_weights(GgmlType::Q4K, rows, cols, &mut rng);
    let store = aligned(&raw);
    let m = Matrix::from_bytes(GgmlType::Q4K, as_bytes(&store, raw.len()), rows, cols).unwrap();
    let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
    let (qs, q8s) = (quantized(std::slice::from_ref(&x)), quantized8(std::slice::from_ref(&x)));
    let (mut a, mut b) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    matvec_rows(KernelFamily::best(), &m, input8(&x, &qs[0], &q8s[0]), 0, &mut a);
    matvec_rows(KernelFamily::best(), &m, Input::new(&x, qs[0].view()), 0, &mut b);
    assert_ne!(bits(&a), bits(&b));
    let scale = b.iter().fold(0.0f32, |s, v| s.max(v.abs()));
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 0.05 * scale), "{a:?} vs {b:?}");
}
