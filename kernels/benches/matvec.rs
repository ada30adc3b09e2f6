//! Criterion benches of the quantized mat-vec kernels: every SIMD family this
//! CPU has, the default model's formats and shapes, `W` = 1..=8 activation
//! rows per call (one pass over the weights), and the `W` single-row calls
//! the multi-row pass replaces (the `DRAFTWISE_MULTIROW=0` control). Q4_0,
//! Q4_1, Q5_0, Q5_1 and Q8_0 run in the row-interleaved layout the runtime
//! repacks to.
//!
//! `cargo bench -p kernels --bench matvec [-- FILTER]`; throughput is weight
//! bytes streamed per second (one pass per call, whatever `W`). The matrices
//! are one layer's (a 1536 × 576 Q4_1 matrix is 553 KB, Q8_0 940 KB), so
//! they stay in L2 on cores with 1 MiB or more (Sapphire Rapids, Zen 4 and
//! 5) and spill to L3 on Zen 3's 512 KiB: there these measure compute
//! against L3, elsewhere compute alone, the ceiling a decode reaches when
//! memory keeps up (`runtime bench` measures the whole model).
//!
//! `DRAFTWISE_BENCH_ALTERNATE=REPS [DRAFTWISE_BENCH_FILTER=Q4_K] cargo bench
//! -p kernels --bench matvec` skips criterion and prints each family's
//! speedup over the scalar kernel, timed in alternation ([`alternate`]).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use kernels::act::ActRow;
use kernels::dispatch::KernelFamily;
use kernels::matvec::r16::Repacked;
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
    let scales: &[usize] = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        // 16-bit floats: every element is a "scale" (random bits could be NaN).
        GgmlType::F16 | GgmlType::BF16 => &[0],
        _ => &[0],
    };
    for blk in bytes.chunks_exact_mut(ty.block_bytes()) {
        for &o in scales {
            let v = 0.01 + (next() % 100) as f32 * 1e-4;
            let b =
                if ty == GgmlType::BF16 { half::bf16::from_f32(v).to_bits() } else { half::f16::from_f32(v).to_bits() };
            blk[o..o + 2].copy_from_slice(&b.to_le_bytes());
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

/// The default model's formats and shapes, then the K-quants at the shapes
/// a 576-wide model would have if its width were a whole number of
/// 256-element super-blocks (512), then Gemma 3 270M's ffn_gate / ffn_up
/// shape (2048 × 640, Q5_0 in its GGUF) in Q5_0, Q5_1 and the formats to
/// compare them with; F16 / BF16 at that shape, and Q2_K / Q3_K (with Q4_K
/// to compare) at 2048 × 512, the nearest whole number of super-blocks.
const SHAPES: &[(GgmlType, usize, usize)] = &[
    (GgmlType::Q4_1, 1536, 576),
    (GgmlType::Q4_1, 576, 1536),
    (GgmlType::Q4_0, 1536, 576),
    (GgmlType::Q8_0, 1536, 576),
    (GgmlType::Q4K, 1536, 512),
    (GgmlType::Q4K, 512, 1536),
    (GgmlType::Q5K, 1536, 512),
    (GgmlType::Q6K, 1536, 512),
    (GgmlType::Q6K, 512, 1536),
    (GgmlType::Q5_0, 2048, 640),
    (GgmlType::Q5_1, 2048, 640),
    (GgmlType::Q4_1, 2048, 640),
    (GgmlType::Q8_0, 2048, 640),
    (GgmlType::F16, 2048, 640),
    (GgmlType::BF16, 2048, 640),
    (GgmlType::Q2K, 2048, 512),
    (GgmlType::Q3K, 2048, 512),
    (GgmlType::Q4K, 2048, 512),
];

/// A matrix's storage and eight quantized activation rows.
struct Case {
    store: Vec<u32>,
    nbytes: usize,
    /// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 in the row-interleaved layout the runtime uses.
    packed: Option<Repacked>,
    xs: Vec<Vec<f32>>,
    qs: Vec<ActRow>,
}

impl Case {
    fn new(ty: GgmlType, rows: usize, cols: usize) -> Self {
        let store = weights(ty, rows, cols, 0x9E37_79B9 ^ rows as u64);
        let nbytes = ty.row_bytes(cols).unwrap() * rows;
        let xs: Vec<Vec<f32>> =
            (0..8).map(|i| (0..cols).map(|j| ((i * cols + j) as f32 * 0.37).sin()).collect()).collect();
        let qs = xs
            .iter()
            .map(|x| {
                let mut q = ActRow::default();
                q.quantize(x);
                q
            })
            .collect();
        // SAFETY: `store` holds at least `nbytes` initialized bytes.
        let bytes = unsafe { std::slice::from_raw_parts(store.as_ptr().cast::<u8>(), nbytes) };
        let packed = Repacked::from_native(ty, bytes, rows, cols).unwrap();
        Case { store, nbytes, packed, xs, qs }
    }

    fn matrix(&self, ty: GgmlType, rows: usize, cols: usize) -> Matrix<'_> {
        if let Some(p) = &self.packed {
            return p.matrix();
        }
        // SAFETY: `store` holds at least `nbytes` initialized bytes.
        let bytes = unsafe { std::slice::from_raw_parts(self.store.as_ptr().cast::<u8>(), self.nbytes) };
        Matrix::from_bytes(ty, bytes, rows, cols).unwrap()
    }

    fn inputs(&self) -> Vec<Input<'_>> {
        self.xs.iter().zip(&self.qs).map(|(x, q)| Input::new(x, q.view())).collect()
    }
}

fn bench_matvec(c: &mut Criterion) {
    let families: Vec<KernelFamily> = KernelFamily::all_supported();
    for &(ty, rows, cols) in SHAPES {
        let case = Case::new(ty, rows, cols);
        let nbytes = case.nbytes;
        let m = case.matrix(ty, rows, cols);
        let inputs = case.inputs();
        let mut group = c.benchmark_group(format!("{}_{rows}x{cols}", ty.name()));
        group.throughput(Throughput::Bytes(nbytes as u64));
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(1));
        group.sample_size(30);
        for &fam in &families {
            // The scalar specification only at W = 1: it is the fallback, not a contender.
            let widths = if fam == KernelFamily::SCALAR { 1..=1 } else { 1..=8 };
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

/// `DRAFTWISE_BENCH_ALTERNATE=REPS`: instead of criterion, time every
/// family against the scalar kernel in alternation (scalar, then each SIMD
/// family, repeated `REPS` times) at `W` = 1, 2, 4, 8, and print per family
/// the fastest sample (µs per call, weight GB/s), the speedup over the
/// scalar kernel's fastest sample, and the median over rounds of the
/// speedup within a round. Samples are thread CPU time, and on a shared
/// host ratios measured this way survive load changes that make sequential
/// criterion runs drift.
/// `DRAFTWISE_BENCH_FILTER` (comma-separated) keeps the shapes whose name
/// contains one of its parts; `DRAFTWISE_BENCH_WIDTHS` (comma-separated,
/// each 1..=8) replaces the widths 1, 2, 4, 8.
fn alternate(reps: usize) {
    let filter = std::env::var("DRAFTWISE_BENCH_FILTER").unwrap_or_default();
    let widths: Vec<usize> = match std::env::var("DRAFTWISE_BENCH_WIDTHS") {
        Ok(v) => v
            .split(',')
            .map(|w| match w.trim().parse() {
                Ok(w @ 1..=8) => w,
                _ => panic!("DRAFTWISE_BENCH_WIDTHS={v:?}: each width is an integer in 1..=8"),
            })
            .collect(),
        Err(_) => vec![1, 2, 4, 8],
    };
    let families = KernelFamily::all_supported();
    println!("shape W: family, fastest of {reps} alternating rounds (speedup over scalar: fastest; median per round)");
    for &(ty, rows, cols) in SHAPES {
        let name = format!("{}_{rows}x{cols}", ty.name());
        if !filter.split(',').any(|f| name.contains(f)) {
            continue;
        }
        let case = Case::new(ty, rows, cols);
        let m = case.matrix(ty, rows, cols);
        let inputs = case.inputs();
        for &w in &widths {
            let mut out = vec![0.0f32; w * rows];
            let mut time = |fam: KernelFamily| {
                // About 3 ms of work per sample, timed in this thread's CPU
                // time: time the scheduler gives to other processes is not
                // the kernel's.
                let t = thread_cpu_seconds();
                let mut calls = 0u32;
                while thread_cpu_seconds() - t < 3e-3 {
                    matmul_rows_with(fam, true, &m, black_box(&inputs[..w]), 0, &mut out);
                    calls += 1;
                }
                (thread_cpu_seconds() - t) / calls as f64
            };
            let mut samples = vec![Vec::new(); families.len()];
            for _ in 0..reps {
                for (k, &fam) in families.iter().enumerate() {
                    samples[k].push(time(fam));
                }
            }
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let mut line = format!("{name} W={w}:");
            for k in 0..families.len() {
                let us = min(&samples[k]) * 1e6;
                let best = min(&samples[0]) / min(&samples[k]);
                let ratio = median(samples[0].iter().zip(&samples[k]).map(|(s, f)| s / f).collect());
                let gbs = case.nbytes as f64 / min(&samples[k]) * 1e-9;
                line += &format!("  {} {us:.1} µs {gbs:.1} GB/s ({best:.1}x; {ratio:.1}x)", families[k].name());
            }
            println!("{line}");
        }
    }
}

/// CPU time consumed by the calling thread, in seconds (Linux
/// `CLOCK_THREAD_CPUTIME_ID`; elsewhere wall time since first use).
fn thread_cpu_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        #[repr(C)]
        struct Timespec {
            sec: i64,
            nsec: i64,
        }
        unsafe extern "C" {
            fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut ts = Timespec { sec: 0, nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec (64-bit Linux layout:
        // two 64-bit fields), and clock_gettime writes nothing else.
        let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        ts.sec as f64 + ts.nsec as f64 * 1e-9
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64()
    }
}

criterion_group!(benches, bench_matvec);

fn main() {
    if let Some(reps) = std::env::var("DRAFTWISE_BENCH_ALTERNATE").ok().and_then(|v| v.parse().ok()) {
        alternate(reps);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
