//! The CUDA kernels against the CPU scalar specification (within the
//! tolerances of docs/cuda.md) and against themselves across widths (bit for
//! bit). Every test needs a CUDA device: without one it prints why it is
//! skipped and passes, unless `DRAFTWISE_REQUIRE_CUDA=1` (set by
//! scripts/device-check.sh) turns the skip into a failure.
#![cfg(feature = "cuda")]

use half::f16;
use kernels::act::{ActRow, QRow};
use kernels::act8::ActRow8;
use kernels::cuda::device::{CudaDevice, Quant8View, QuantView};
use kernels::cuda::dispatch::CUDA_ROWS_PER_PASS;
use kernels::dispatch::KernelFamily;
use kernels::matvec::{Input, Matrix, matvec_rows, scalar8};
use kernels::ops;
use kernels::quant::{GgmlType, QK, QK_K, dequantize_row};
use std::sync::{Arc, OnceLock};

fn device() -> Option<Arc<CudaDevice>> {
    static DEV: OnceLock<Result<Arc<CudaDevice>, String>> = OnceLock::new();
    let dev = DEV.get_or_init(|| CudaDevice::open(0).map_err(|e| e.to_string()));
    kernels::cuda::or_skip_test(dev.as_ref().map(Arc::clone).map_err(Clone::clone))
}

/// SplitMix64: deterministic test data.
struct Rng(u64);
impl Rng {
    fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn byte(&mut self) -> u8 {
        self.u64() as u8
    }
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        (self.u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// A random (rows, cols) matrix of `ty` as little-endian block bytes, in
/// u16 storage so the block structs' alignment holds.
fn random_matrix(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u16> {
    let mut bytes = Vec::new();
    let half = |v: f32| f16::from_f32(v).to_bits().to_le_bytes();
    let nblocks = rows * cols / ty.block_elems();
    for _ in 0..nblocks {
        match ty {
            GgmlType::Q4_0 => {
                bytes.extend(half(rng.f() * 0.05));
                bytes.extend((0..16).map(|_| rng.byte()));
            }
            GgmlType::Q4_1 => {
                bytes.extend(half(rng.f().abs() * 0.02));
                bytes.extend(half(rng.f() * 0.1));
                bytes.extend((0..16).map(|_| rng.byte()));
            }
            GgmlType::Q8_0 => {
                bytes.extend(half(rng.f() * 0.01));
                bytes.extend((0..32).map(|_| rng.byte()));
            }
            GgmlType::Q5_0 => {
                bytes.extend(half(rng.f() * 0.03));
                bytes.extend((0..4 + 16).map(|_| rng.byte()));
            }
            GgmlType::Q5_1 => {
                bytes.extend(half(rng.f().abs() * 0.01));
                bytes.extend(half(rng.f() * 0.1));
                bytes.extend((0..4 + 16).map(|_| rng.byte()));
            }
            GgmlType::Q4K => {
                bytes.extend(half(rng.f().abs() * 0.003));
                bytes.extend(half(rng.f().abs() * 0.003));
                bytes.extend((0..12 + 128).map(|_| rng.byte()));
            }
            GgmlType::Q6K => {
                bytes.extend((0..128 + 64 + 16).map(|_| rng.byte()));
                bytes.extend(half(rng.f().abs() * 0.002));
            }
            GgmlType::F32 => bytes.extend(rng.f().to_le_bytes()),
            other => panic!("{other:?} not tested"),
        }
    }
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

fn as_bytes(v: &[u16], len: usize) -> &[u8] {
    // SAFETY: u16 storage viewed as its first `len` bytes (len <= 2 * v.len()).
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), len) }
}

/// Activations with a few outliers, like a real residual stream.
fn random_acts(n: usize, cols: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n * cols).map(|i| if i % 97 == 5 { rng.f() * 40.0 } else { rng.f() * 2.0 }).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

const FORMATS: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q6K,
    GgmlType::F32,
];

fn shapes(ty: GgmlType) -> Vec<(usize, usize)> {
    if ty.block_elems() == 256 {
        vec![(1, 256), (5, 512), (37, 2304), (130, 256 * 33)]
    } else {
        // (37, 640): Gemma 3 270M's width, 20 blocks.
        vec![(1, 32), (3, 96), (37, 576), (130, 1536), (7, 32 * 65), (37, 640)]
    }
}

/// Runs `m` on the device for the `n` rows of `x`: outputs (n, rows).
#[allow(clippy::too_many_arguments)]
fn gpu_matmul(
    dev: &CudaDevice,
    ty: GgmlType,
    raw: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    per_pass: usize,
) -> Vec<f32> {
    let m = Matrix::from_bytes(ty, raw, rows, cols).unwrap();
    let dm = dev.upload_matrix(&m).unwrap();
    let xd = dev.upload(x).unwrap();
    let nb = n * cols / QK;
    let (mut q, mut d, mut s) =
        (dev.alloc::<i16>(n * cols).unwrap(), dev.alloc::<f32>(nb).unwrap(), dev.alloc::<f32>(nb).unwrap());
    if ty != GgmlType::F32 {
        dev.quantize(&xd.as_view(), n, cols, &mut q.as_view_mut(), &mut d.as_view_mut(), &mut s.as_view_mut()).unwrap();
    }
    let mut out = dev.alloc::<f32>(n * rows).unwrap();
    let qv = QuantView { q: q.as_view(), d: d.as_view(), s: s.as_view() };
    dev.matmul_with(&dm, n, &xd.as_view(), Some(&qv), &mut out.as_view_mut(), per_pass).unwrap();
    dev.download(&out).unwrap()
}

#[test]
fn gpu_activation_quantization_equals_the_cpu_bit_for_bit() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(1);
    let (n, cols) = (5, 576);
    let mut x = random_acts(n, cols, &mut rng);
    x[40..72].fill(0.0); // a zero block
    let xd = dev.upload(&x).unwrap();
    let nb = n * cols / QK;
    let (mut q, mut d, mut s) =
        (dev.alloc::<i16>(n * cols).unwrap(), dev.alloc::<f32>(nb).unwrap(), dev.alloc::<f32>(nb).unwrap());
    dev.quantize(&xd.as_view(), n, cols, &mut q.as_view_mut(), &mut d.as_view_mut(), &mut s.as_view_mut()).unwrap();
    let (q, d, s) = (dev.download(&q).unwrap(), dev.download(&d).unwrap(), dev.download(&s).unwrap());
    for (i, row) in x.chunks_exact(cols).enumerate() {
        let mut a = ActRow::default();
        a.quantize(row);
        let v = a.view();
        for b in 0..cols / QK {
            let g = i * cols / QK + b;
            assert_eq!((d[g].to_bits(), s[g].to_bits()), (v.d[b].to_bits(), v.s[b].to_bits()), "row {i} block {b}");
            assert_eq!(&q[g * QK..(g + 1) * QK], &v.block_quants(b)[..], "row {i} block {b}");
        }
    }
}

#[test]
fn gpu_matvec_matches_the_cpu_scalar_reference_within_tolerance() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(2);
    for ty in FORMATS {
        for (rows, cols) in shapes(ty) {
            let store = random_matrix(ty, rows, cols, &mut rng);
            let len = ty.row_bytes(cols).unwrap() * rows;
            let raw = as_bytes(&store, len);
            let x = random_acts(1, cols, &mut rng);
            let got = gpu_matmul(&dev, ty, raw, rows, cols, &x, 1, 1);
            let m = Matrix::from_bytes(ty, raw, rows, cols).unwrap();
            let mut act = ActRow::default();
            if ty != GgmlType::F32 {
                act.quantize(&x);
            }
            let mut want = vec![0.0f32; rows];
            matvec_rows(KernelFamily::SCALAR, &m, Input::new(&x, act.view()), 0, &mut want);
            let rb = ty.row_bytes(cols).unwrap();
            let mut w = vec![0.0f32; cols];
            for r in 0..rows {
                let row = &raw[r * rb..(r + 1) * rb];
                dequantize_row(ty, row, &mut w).unwrap();
                // The magnitude the summation errors scale with: Σ (|wᵢ| + |minᵢ|)·|xᵢ|,
                // the min terms counted apart because Q4_1, Q5_1 and Q4_K sum them
                // in their own accumulator (they may cancel the scaled quants).
                let mins = min_terms(ty, row, cols);
                let mag: f64 = w
                    .iter()
                    .zip(&mins)
                    .zip(&x)
                    .map(|((a, m), b)| (a.abs() as f64 + m.abs() as f64) * (*b as f64).abs())
                    .sum();
                let tol = tolerance(cols, mag);
                let diff = (got[r] as f64 - want[r] as f64).abs();
                assert!(
                    diff <= tol,
                    "{ty:?} {rows}x{cols} row {r}: gpu {} cpu {} diff {diff:e} > tol {tol:e}",
                    got[r],
                    want[r]
                );
            }
        }
    }
}

/// Per element, the block's min term (`m` for Q4_1 and Q5_1, `dmin·m` for Q4_K; 0 otherwise).
fn min_terms(ty: GgmlType, row: &[u8], cols: usize) -> Vec<f32> {
    let h = |b: &[u8]| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    (0..cols)
        .map(|e| match ty {
            GgmlType::Q4_1 => h(&row[(e / 32) * 20 + 2..]),
            GgmlType::Q5_1 => h(&row[(e / 32) * 24 + 2..]),
            GgmlType::Q4K => {
                let b = &row[(e / 256) * 144..];
                let (j, q) = ((e % 256) / 32, &b[4..16]);
                let m = if j < 4 { q[j + 4] & 63 } else { (q[j + 4] >> 4) | ((q[j] >> 6) << 4) };
                h(&b[2..]) * m as f32
            }
            _ => 0.0,
        })
        .collect()
}

/// docs/cuda.md: |gpu - cpu| <= 2 * (cols / 32 + 16) * eps_f32 * sum (|w_i| + |min_i|) |x_i|.
/// Both sides sum the same exact per-block integer products in float; only
/// the order of the per-block float additions differs (CPU: sixteen lanes
/// or one chain; GPU: 32 lanes and a butterfly), each addition erring by at
/// most eps relative to the running magnitude.
fn tolerance(cols: usize, mag: f64) -> f64 {
    2.0 * ((cols / QK) as f64 + 16.0) * f32::EPSILON as f64 * mag + 1e-30
}

#[test]
fn multi_row_matvec_equals_the_single_row_kernel_bit_for_bit_at_widths_1_to_16() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(3);
    for ty in FORMATS {
        let (rows, cols) = shapes(ty)[2];
        let store = random_matrix(ty, rows, cols, &mut rng);
        let raw = as_bytes(&store, ty.row_bytes(cols).unwrap() * rows);
        for w in 1..=16 {
            let x = random_acts(w, cols, &mut rng);
            let multi = gpu_matmul(&dev, ty, raw, rows, cols, &x, w, CUDA_ROWS_PER_PASS);
            let single = gpu_matmul(&dev, ty, raw, rows, cols, &x, w, 1);
            assert_eq!(bits(&multi), bits(&single), "{ty:?} W={w}");
            // And each row alone, as the one-token chain runs it.
            for j in 0..w {
                let one = gpu_matmul(&dev, ty, raw, rows, cols, &x[j * cols..(j + 1) * cols], 1, 1);
                assert_eq!(bits(&multi[j * rows..(j + 1) * rows]), bits(&one), "{ty:?} W={w} row {j}");
            }
        }
    }
}

#[test]
fn gpu_embedding_gather_equals_cpu_dequantization_bit_for_bit() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(4);
    for ty in FORMATS {
        let (rows, cols) = shapes(ty)[2];
        let store = random_matrix(ty, rows, cols, &mut rng);
        let raw = as_bytes(&store, ty.row_bytes(cols).unwrap() * rows);
        let dm = dev.upload_matrix(&Matrix::from_bytes(ty, raw, rows, cols).unwrap()).unwrap();
        let toks: Vec<i32> = vec![0, (rows - 1) as i32, 7, 7];
        let td = dev.upload(&toks).unwrap();
        let mut out = dev.alloc::<f32>(toks.len() * cols).unwrap();
        dev.embed(&dm, &td.as_view(), toks.len(), &mut out.as_view_mut()).unwrap();
        let got = dev.download(&out).unwrap();
        let rb = ty.row_bytes(cols).unwrap();
        for (i, &t) in toks.iter().enumerate() {
            let mut want = vec![0.0f32; cols];
            dequantize_row(ty, &raw[t as usize * rb..(t as usize + 1) * rb], &mut want).unwrap();
            assert_eq!(bits(&got[i * cols..(i + 1) * cols]), bits(&want), "{ty:?} token {t}");
        }
    }
}

#[test]
fn gpu_rmsnorm_rope_swiglu_and_argmax_match_the_cpu() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(5);
    let (rows, n) = (3, 576);
    let x = random_acts(rows, n, &mut rng);
    let w: Vec<f32> = (0..n).map(|_| rng.f()).collect();
    let (xd, wd) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap());
    let mut out = dev.alloc::<f32>(rows * n).unwrap();
    dev.rmsnorm(&xd.as_view(), &wd.as_view(), &mut out.as_view_mut(), rows, n, 1e-5).unwrap();
    let got = dev.download(&out).unwrap();
    for r in 0..rows {
        let mut want = vec![0.0; n];
        ops::rmsnorm(KernelFamily::SCALAR, &x[r * n..(r + 1) * n], &w, 1e-5, &mut want);
        for (g, c) in got[r * n..(r + 1) * n].iter().zip(&want) {
            // The sum of squares (positive terms) is ordered differently: CPU
            // eight lanes of n/8 terms, GPU 256 threads and a tree; each errs
            // by at most (terms per chain + tree depth) eps relative, and the
            // square root halves it.
            let tol = (n as f32 / 8.0 + 16.0) * f32::EPSILON * c.abs().max(1e-30);
            assert!((g - c).abs() <= tol, "rmsnorm {g} vs {c}");
        }
    }

    // RoPE: the host's angles and the same products: bit for bit.
    let (heads, hd) = (9, 64);
    for adjacent in [true, false] {
        let pairing = if adjacent { ops::RopePairing::Adjacent } else { ops::RopePairing::Halves };
        let q = random_acts(rows, heads * hd, &mut rng);
        let (mut cos, mut sin) = (vec![0.0f32; rows * hd / 2], vec![0.0f32; rows * hd / 2]);
        for r in 0..rows {
            ops::rope_angles(100 + r, hd, 10000.0, &mut cos[r * hd / 2..][..hd / 2], &mut sin[r * hd / 2..][..hd / 2]);
        }
        let mut qd = dev.upload(&q).unwrap();
        let (cd, sd) = (dev.upload(&cos).unwrap(), dev.upload(&sin).unwrap());
        dev.rope(&mut qd.as_view_mut(), &cd.as_view(), &sd.as_view(), rows, heads, hd, adjacent).unwrap();
        let got = dev.download(&qd).unwrap();
        let mut want = q.clone();
        for r in 0..rows {
            let c = &cos[r * hd / 2..][..hd / 2];
            let s = &sin[r * hd / 2..][..hd / 2];
            ops::rope(&mut want[r * heads * hd..(r + 1) * heads * hd], hd, pairing, c, s);
        }
        assert_eq!(bits(&got), bits(&want), "rope adjacent={adjacent}");
    }

    // SwiGLU: exp differs from the CPU's by at most 2 ulp (CUDA's documented
    // expf error), which moves the result by a few ulp.
    let g = random_acts(1, 1536, &mut rng);
    let u = random_acts(1, 1536, &mut rng);
    let (mut gd, ud) = (dev.upload(&g).unwrap(), dev.upload(&u).unwrap());
    dev.swiglu(&mut gd.as_view_mut(), &ud.as_view(), g.len()).unwrap();
    let got = dev.download(&gd).unwrap();
    let mut want = g.clone();
    ops::swiglu(KernelFamily::SCALAR, &mut want, &u);
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 8.0 * f32::EPSILON * b.abs().max(1e-30), "swiglu {a} vs {b}");
    }

    // Argmax: the sampler's rule (lowest index on ties, NaN never chosen).
    let mut l = random_acts(2, 49152, &mut rng);
    l[100] = 99.0;
    l[30000] = 99.0;
    l[49152 + 5] = f32::NAN;
    l[49152 + 7] = 50.0;
    let ld = dev.upload(&l).unwrap();
    let mut o = dev.alloc::<i32>(2).unwrap();
    dev.argmax(&ld.as_view(), 2, 49152, &mut o.as_view_mut()).unwrap();
    assert_eq!(dev.download(&o).unwrap(), vec![100, 7]);
}

/// The 8-bit activation buffers of `n` rows of `cols` on the device.
struct Dev8 {
    qs: cudarc::driver::CudaSlice<i8>,
    d: cudarc::driver::CudaSlice<f32>,
    b16: cudarc::driver::CudaSlice<i16>,
    b32: cudarc::driver::CudaSlice<i16>,
}

/// `x` ((n, cols)) quantized to 8 bits on the device.
fn gpu_quantize8(dev: &CudaDevice, x: &[f32], n: usize, cols: usize) -> Dev8 {
    let nsb = n * cols / QK_K;
    let xd = dev.upload(x).unwrap();
    let mut q = Dev8 {
        qs: dev.alloc::<i8>(n * cols).unwrap(),
        d: dev.alloc::<f32>(nsb).unwrap(),
        b16: dev.alloc::<i16>(16 * nsb).unwrap(),
        b32: dev.alloc::<i16>(8 * nsb).unwrap(),
    };
    dev.quantize8(
        &xd.as_view(),
        n,
        cols,
        &mut q.qs.as_view_mut(),
        &mut q.d.as_view_mut(),
        &mut q.b16.as_view_mut(),
        &mut q.b32.as_view_mut(),
    )
    .unwrap();
    q
}

/// Runs the K-quant `m` on the device against the 8-bit rows of `x`
/// ((n, cols)), quantized there: outputs (n, rows).
#[allow(clippy::too_many_arguments)]
fn gpu_matmul8(
    dev: &CudaDevice,
    ty: GgmlType,
    raw: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
    per_pass: usize,
) -> Vec<f32> {
    let dm = dev.upload_matrix(&Matrix::from_bytes(ty, raw, rows, cols).unwrap()).unwrap();
    assert!(dm.takes_int8(), "{ty:?}");
    let q = gpu_quantize8(dev, x, n, cols);
    let view = Quant8View { qs: q.qs.as_view(), d: q.d.as_view(), bsum16: q.b16.as_view(), bsum32: q.b32.as_view() };
    let mut out = dev.alloc::<f32>(n * rows).unwrap();
    dev.matmul8_with(&dm, n, &view, &mut out.as_view_mut(), per_pass).unwrap();
    dev.download(&out).unwrap()
}

/// Super-blocks of many magnitudes, ties, zeros, infinities, NaN and
/// subnormals (act8.rs's SIMD-vs-scalar cases), `cols` wide rows.
fn awkward_acts8(cols: usize, rng: &mut Rng) -> Vec<f32> {
    let mut blocks: Vec<Vec<f32>> = Vec::new();
    for i in 0..14 {
        let scale = [1e-30f32, 1e-3, 1.0, 3.0, 1e4, 2e4, 1e30][i % 7];
        blocks.push((0..QK_K).map(|_| rng.f() * scale).collect());
    }
    blocks.push((0..QK_K).map(|k| if k == 255 { 127.0 } else { k as f32 * 0.5 - 60.0 }).collect());
    blocks.push(vec![0.0; QK_K]);
    blocks.push((0..QK_K).map(|k| if k == 5 { f32::INFINITY } else { k as f32 }).collect());
    blocks.push((0..QK_K).map(|k| if k == 5 { f32::NEG_INFINITY } else { k as f32 }).collect());
    blocks.push((0..QK_K).map(|k| if k == 9 { f32::NAN } else { k as f32 - 16.0 }).collect());
    blocks.push(vec![f32::NAN; QK_K]);
    blocks.push((0..QK_K).map(|k| if k % 3 == 0 { 1e-40 } else { -1e-41 * k as f32 }).collect());
    let mut x: Vec<f32> = blocks.concat();
    x.resize(x.len().div_ceil(cols) * cols, 0.5);
    x
}

#[test]
fn gpu_8bit_activation_quantization_equals_act_row8_bit_for_bit() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(7);
    for (mut x, cols) in [(random_acts(5, 1536, &mut rng), 1536), (awkward_acts8(768, &mut rng), 768)] {
        x.truncate(x.len() / cols * cols);
        let n = x.len() / cols;
        let q = gpu_quantize8(&dev, &x, n, cols);
        let (qs, d, b16, b32) = (
            dev.download(&q.qs).unwrap(),
            dev.download(&q.d).unwrap(),
            dev.download(&q.b16).unwrap(),
            dev.download(&q.b32).unwrap(),
        );
        let nsb = cols / QK_K;
        for (i, row) in x.chunks_exact(cols).enumerate() {
            let mut a = ActRow8::default();
            a.quantize(row);
            let v = a.view();
            assert_eq!(&qs[i * cols..(i + 1) * cols], v.qs, "row {i}: quants");
            assert_eq!(bits(&d[i * nsb..(i + 1) * nsb]), bits(v.d), "row {i}: scales");
            assert_eq!(&b16[16 * i * nsb..16 * (i + 1) * nsb], v.bsum16, "row {i}: 16-element sums");
            assert_eq!(&b32[8 * i * nsb..8 * (i + 1) * nsb], v.bsum32, "row {i}: 32-element sums");
        }
    }
}

/// The 8-bit K-quant kernels run scalar8's float chain exactly (the
/// matvec.cu section's argument), so they equal the CPU specification bit
/// for bit, not within a tolerance: a difference here is a broken claim.
#[test]
fn gpu_8bit_k_quant_matvec_equals_the_scalar8_specification_bit_for_bit() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(8);
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        // 1, 2, 9 and 33 super-blocks a row: whole and partial groups of four.
        for (rows, cols) in shapes(ty) {
            let store = random_matrix(ty, rows, cols, &mut rng);
            let raw = as_bytes(&store, ty.row_bytes(cols).unwrap() * rows);
            let m = Matrix::from_bytes(ty, raw, rows, cols).unwrap();
            let mut x = random_acts(2, cols, &mut rng);
            x[cols..cols + QK_K].fill(0.0); // a zero super-block (d = 0)
            let got = gpu_matmul8(&dev, ty, raw, rows, cols, &x, 2, 1);
            for (j, row) in x.chunks_exact(cols).enumerate() {
                let mut a = ActRow8::default();
                a.quantize(row);
                let mut want = vec![0.0f32; rows];
                scalar8::matvec_rows(&m, Input { x: row, q: QRow::EMPTY, q8: a.view() }, 0, &mut want);
                assert_eq!(bits(&got[j * rows..(j + 1) * rows]), bits(&want), "{ty:?} {rows}x{cols} act row {j}");
            }
        }
    }
}

#[test]
fn multi_row_8bit_matvec_equals_the_single_row_kernel_bit_for_bit_at_widths_1_to_16() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(9);
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        let (rows, cols) = shapes(ty)[2];
        let store = random_matrix(ty, rows, cols, &mut rng);
        let raw = as_bytes(&store, ty.row_bytes(cols).unwrap() * rows);
        for w in 1..=16 {
            let x = random_acts(w, cols, &mut rng);
            let multi = gpu_matmul8(&dev, ty, raw, rows, cols, &x, w, CUDA_ROWS_PER_PASS);
            let single = gpu_matmul8(&dev, ty, raw, rows, cols, &x, w, 1);
            assert_eq!(bits(&multi), bits(&single), "{ty:?} W={w}");
            for j in 0..w {
                let one = gpu_matmul8(&dev, ty, raw, rows, cols, &x[j * cols..(j + 1) * cols], 1, 1);
                assert_eq!(bits(&multi[j * rows..(j + 1) * rows]), bits(&one), "{ty:?} W={w} row {j}");
            }
        }
    }
}

/// CPU attention of one row over `n_ctx` cached positions, head by head.
#[allow(clippy::too_many_arguments)]
fn cpu_attention(q: &[f32], k: &[f32], v: &[f32], heads: usize, kv_heads: usize, hd: usize, n_ctx: usize) -> Vec<f32> {
    let kvd = kv_heads * hd;
    let mut out = vec![0.0; heads * hd];
    let mut scores = vec![0.0; n_ctx];
    for h in 0..heads {
        let off = (h / (heads / kv_heads)) * hd;
        ops::attend_head(
            KernelFamily::SCALAR,
            &q[h * hd..(h + 1) * hd],
            k,
            v,
            kvd,
            off,
            n_ctx,
            &mut scores,
            &mut out[h * hd..(h + 1) * hd],
        );
    }
    out
}

#[test]
fn gpu_attention_verify_rows_equal_decode_rows_and_match_the_cpu() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(6);
    let (heads, kv_heads, hd) = (9, 3, 64);
    let (qd, kvd) = (heads * hd, kv_heads * hd);
    let (start, w) = (300, 9);
    let ctx = start + w;
    let k = random_acts(ctx, kvd, &mut rng);
    let v = random_acts(ctx, kvd, &mut rng);
    let q = random_acts(w, qd, &mut rng);
    let (kd, vd, qdv) = (dev.upload(&k).unwrap(), dev.upload(&v).unwrap(), dev.upload(&q).unwrap());
    let mut out = dev.alloc::<f32>(w * qd).unwrap();
    let mut scores = dev.alloc::<f32>(w * heads * ctx).unwrap();
    dev.attention(
        &qdv.as_view(),
        &kd.as_view(),
        &vd.as_view(),
        &mut out.as_view_mut(),
        &mut scores.as_view_mut(),
        w,
        start,
        heads,
        kv_heads,
        hd,
    )
    .unwrap();
    let block = dev.download(&out).unwrap();
    for i in 0..w {
        // The same row as a one-token decode step at position start + i.
        let qi = dev.upload(&q[i * qd..(i + 1) * qd]).unwrap();
        let mut o1 = dev.alloc::<f32>(qd).unwrap();
        let mut s1 = dev.alloc::<f32>(heads * (start + i + 1)).unwrap();
        dev.attention(
            &qi.as_view(),
            &kd.as_view(),
            &vd.as_view(),
            &mut o1.as_view_mut(),
            &mut s1.as_view_mut(),
            1,
            start + i,
            heads,
            kv_heads,
            hd,
        )
        .unwrap();
        let one = dev.download(&o1).unwrap();
        assert_eq!(bits(&block[i * qd..(i + 1) * qd]), bits(&one), "row {i}");
        let want = cpu_attention(&q[i * qd..(i + 1) * qd], &k, &v, heads, kv_heads, hd, start + i + 1);
        for (a, b) in one.iter().zip(&want) {
            // Scores equal the CPU's (same dot order); exp and the sum's
            // order differ: the outputs (|v| <= 40) agree to ~1e-5 absolute.
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "row {i}: {a} vs {b}");
        }
    }
}
