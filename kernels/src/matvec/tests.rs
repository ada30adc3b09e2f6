//! The shared kernel test runner: every family this CPU has against the
//! scalar specification (bit for bit), and the scalar kernels against f64
//! dot products of the dequantized weights (within the quantization error).

use super::*;
use crate::act::ActRow;
use crate::quant::{QK_K, dequantize_row};
use half::f16;

/// Awkward row counts: around the 8-row SIMD group and its multiples.
const ROWS: &[usize] = &[1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33];

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
    let mut bytes: Vec<u8> = (0..nbytes).map(|_| rng.next() as u8).collect();
    let bb = ty.block_bytes();
    let scale_offsets: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 => &[0, 2],
        GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
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
            let store = aligned(&raw);
            let bytes = as_bytes(&store, raw.len());
            let m = Matrix::from_bytes(ty, bytes, rows, cols).unwrap();
            let x: Vec<f32> = (0..cols).map(|_| rng.f32() * 2.0).collect();
            let mut q = ActRow::default();
            q.quantize(&x);
            let input = Input { x: &x, q: &q.blocks };
            let mut want = vec![0.0f32; rows];
            scalar::matvec_rows(&m, input, 0, &mut want);

            // Scalar against f64 over the dequantized weights and the
            // dequantized activation: the integer path must be exact up to
            // f32 rounding of the block combination.
            let xq: Vec<f64> = q.blocks.iter().flat_map(|b| b.qs.iter().map(move |&v| b.d as f64 * v as f64)).collect();
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

            for fam in KernelFamily::all_supported() {
                // Whole range, and a sub-range starting at an odd row.
                let mut got = vec![0.0f32; rows];
                matvec_rows(fam, &m, input, 0, &mut got);
                assert_eq!(bits(&got), bits(&want), "{ty:?} {fam:?} {rows}x{cols}");
                if rows > 2 {
                    let mut part = vec![0.0f32; rows - 1];
                    matvec_rows(fam, &m, input, 1, &mut part);
                    assert_eq!(bits(&part), bits(&want[1..]), "{ty:?} {fam:?} {rows}x{cols} from row 1");
                }
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn every_family_equals_scalar_on_q4_0() {
    check_type(GgmlType::Q4_0, &[32, 64, 96, 576]);
}

#[test]
fn every_family_equals_scalar_on_q4_1() {
    check_type(GgmlType::Q4_1, &[32, 64, 96, 576]);
}

#[test]
fn every_family_equals_scalar_on_q8_0() {
    check_type(GgmlType::Q8_0, &[32, 64, 96, 576]);
}

#[test]
fn every_family_equals_scalar_on_k_quants() {
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        check_type(ty, &[QK_K, 2 * QK_K]);
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
                matvec_rows(fam, &m, Input { x: b, q: &[] }, 0, &mut got);
                assert_eq!(got[0].to_bits(), want.to_bits(), "{fam:?} len {len} skew {skew}");
            }
        }
    }
}

#[test]
fn multi_row_matmul_equals_single_row_calls_bit_for_bit() {
    let mut rng = Rng(7);
    let (rows, cols) = (17, 96);
    let raw = random_weights(GgmlType::Q4_1, rows, cols, &mut rng);
    let store = aligned(&raw);
    let m = Matrix::from_bytes(GgmlType::Q4_1, as_bytes(&store, raw.len()), rows, cols).unwrap();
    for w in 1..=9 {
        let xs: Vec<Vec<f32>> = (0..w).map(|_| (0..cols).map(|_| rng.f32()).collect()).collect();
        let qs: Vec<ActRow> = xs
            .iter()
            .map(|x| {
                let mut q = ActRow::default();
                q.quantize(x);
                q
            })
            .collect();
        let inputs: Vec<Input> = xs.iter().zip(&qs).map(|(x, q)| Input { x, q: &q.blocks }).collect();
        for fam in KernelFamily::all_supported() {
            let mut outs = vec![0.0f32; w * rows];
            matmul_rows(fam, &m, &inputs, 0, &mut outs);
            for (i, inp) in inputs.iter().enumerate() {
                let mut one = vec![0.0f32; rows];
                matvec_rows(fam, &m, *inp, 0, &mut one);
                assert_eq!(bits(&outs[i * rows..(i + 1) * rows]), bits(&one), "W={w} row {i} {fam:?}");
            }
        }
    }
}

#[test]
fn from_bytes_refuses_wrong_lengths_and_columns() {
    let bytes = vec![0u8; 40];
    assert!(matches!(Matrix::from_bytes(GgmlType::Q4_1, &bytes[..39], 1, 64), Err(MatrixError::Length { .. })));
    assert!(matches!(Matrix::from_bytes(GgmlType::Q4_1, &bytes, 1, 40), Err(MatrixError::Columns { .. })));
    assert!(matches!(Matrix::from_bytes(GgmlType::F16, &bytes, 1, 20), Err(MatrixError::Unsupported(_))));
}
