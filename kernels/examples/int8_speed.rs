//! The K-quant mat-vec at both activation precisions, one thread, in
//! alternation: `cargo run --release -p kernels --example int8_speed [REPS]`.
//!
//! Shapes are the Qwen2.5-Coder-1.5B's (dim 1536, FFN 8960), repacked as the
//! runtime repacks them; random weights with sane scales. Prints the median
//! time per call of each arm over REPS alternating rounds and the ratio.

use kernels::act::ActRow;
use kernels::act8::ActRow8;
use kernels::dispatch::KernelFamily;
use kernels::matvec::{Input, matmul_rows_with};
use kernels::quant::GgmlType;
use std::time::Instant;

#[path = "common/mod.rs"]
mod common;
use common::{Rng, random_matrix};

fn main() {
    let reps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(15);
    let fam = KernelFamily::best();
    let mut rng = Rng::default();
    println!("family {}", fam.name());
    for (ty, rows, cols) in [
        (GgmlType::Q4K, 8960, 1536),
        (GgmlType::Q6K, 1536, 8960),
        (GgmlType::Q5K, 1536, 1536),
        (GgmlType::Q6K, 151936, 1536),
    ] {
        let (packed, _) = random_matrix(&mut rng, ty, rows, cols);
        let m = packed.matrix();
        for w in [1usize, 4, 8].into_iter().filter(|&w| rows < 100_000 || w == 1) {
            let xs: Vec<Vec<f32>> = (0..w).map(|_| (0..cols).map(|_| rng.unit()).collect()).collect();
            let q16: Vec<ActRow> = xs
                .iter()
                .map(|x| {
                    let mut q = ActRow::default();
                    q.quantize(x);
                    q
                })
                .collect();
            let q8: Vec<ActRow8> = xs
                .iter()
                .map(|x| {
                    let mut q = ActRow8::default();
                    q.quantize(x);
                    q
                })
                .collect();
            let in16: Vec<Input> = (0..w).map(|i| Input::new(&xs[i], q16[i].view())).collect();
            let in8: Vec<Input> = (0..w).map(|i| Input { x: &xs[i], q: q16[i].view(), q8: q8[i].view() }).collect();
            let mut out = vec![0.0f32; w * rows];
            let mut time = |inputs: &[Input]| {
                let t = Instant::now();
                matmul_rows_with(fam, true, &m, inputs, 0, &mut out);
                t.elapsed().as_secs_f64()
            };
            time(&in16);
            time(&in8);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                a.push(time(&in16));
                b.push(time(&in8));
            }
            a.sort_by(f64::total_cmp);
            b.sort_by(f64::total_cmp);
            let (ma, mb) = (a[reps / 2], b[reps / 2]);
            println!(
                "{:?} {rows}x{cols} W={w}: int16 {:.3} ms, int8 {:.3} ms, int16/int8 {:.2}x",
                ty,
                ma * 1e3,
                mb * 1e3,
                ma / mb
            );
        }
    }
}
