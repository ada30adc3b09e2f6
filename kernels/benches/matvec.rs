//! Criterion benches of the quantized mat-vec kernels: every SIMD family this
//! CPU has, the default model's formats and shapes, `W` = 1..=8 activation
//! rows per call (one pass over the weights), and the `W` single-row calls
//! the multi-row pass replaces (the `DRAFTWISE_MULTIROW=0` control).
//!
//! `cargo bench -p kernels --bench matvec [-- FILTER]`; throughput is weight
//! bytes streamed per second (one pass per call, whatever `W`). Matrices are
//! small enough to stay in L2: these measure compute, the ceiling a decode
//! reaches when memory keeps up (`runtime bench` measures the whole model).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels::act::ActRow;
use kernels::dispatch::KernelFamily;
use kernels::matvec::{Input, Matrix, matmul_rows_with};
use kernels::quant::GgmlType;
use std::hint::black_box;
use std::time::Duration;

/// Random weights with sane f16 scales (random bits would be NaN or inf).
fn weights(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let n = ty.row_bytes(cols).unwrap() * rows;
    let mut bytes: Vec<u8> = (0..n).map(|_| next() as u8).collect();
    let scales: &[usize] = if ty == GgmlType::Q4_1 { &[0, 2] } else { &[0] };
    for blk in bytes.chunks_exact_mut(ty.block_bytes()) {
        for &o in scales {
            blk[o..o + 2]
                .copy_from_slice(&half::f16::from_f32(0.01 + (next() % 100) as f32 * 1e-4).to_bits().to_le_bytes());
        }
    }
    let mut words = vec![0u32; n.div_ceil(4)];
    for (w, c) in words.iter_mut().zip(bytes.chunks(4)) {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        *w = u32::from_le_bytes(b);
    }
    words
}

fn bench_matvec(c: &mut Criterion) {
    let shapes = [
        (GgmlType::Q4_1, 1536, 576),
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q4_0, 1536, 576),
        (GgmlType::Q8_0, 1536, 576),
    ];
    let families: Vec<KernelFamily> = KernelFamily::all_supported();
    for (ty, rows, cols) in shapes {
        let store = weights(ty, rows, cols, 0x9E37_79B9 ^ rows as u64);
        let nbytes = ty.row_bytes(cols).unwrap() * rows;
        // SAFETY: `store` holds at least `nbytes` initialized bytes.
        let bytes = unsafe { std::slice::from_raw_parts(store.as_ptr().cast::<u8>(), nbytes) };
        let m = Matrix::from_bytes(ty, bytes, rows, cols).unwrap();
        let xs: Vec<Vec<f32>> =
            (0..8).map(|i| (0..cols).map(|j| ((i * cols + j) as f32 * 0.37).sin()).collect()).collect();
        let qs: Vec<ActRow> = xs
            .iter()
            .map(|x| {
                let mut q = ActRow::default();
                q.quantize(x);
                q
            })
            .collect();
        let inputs: Vec<Input> = xs.iter().zip(&qs).map(|(x, q)| Input { x, q: q.view() }).collect();
        let mut group = c.benchmark_group(format!("{}_{rows}x{cols}", ty.name()));
        group.throughput(Throughput::Bytes(nbytes as u64));
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(1));
        group.sample_size(30);
        for &fam in &families {
            // The scalar specification only at W = 1: it is the fallback, not a contender.
            let widths = if fam == KernelFamily::Scalar { 1..=1 } else { 1..=8 };
            for w in widths {
                let mut out = vec![0.0f32; w * rows];
                group.bench_function(BenchmarkId::new(format!("{}/multirow", fam.name()), w), |b| {
                    b.iter(|| matmul_rows_with(fam, true, &m, black_box(&inputs[..w]), 0, &mut out))
                });
                if w > 1 {
                    group.bench_function(BenchmarkId::new(format!("{}/single_x_w", fam.name()), w), |b| {
                        b.iter(|| matmul_rows_with(fam, false, &m, black_box(&inputs[..w]), 0, &mut out))
                    });
                }
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench_matvec);
criterion_main!(benches);
