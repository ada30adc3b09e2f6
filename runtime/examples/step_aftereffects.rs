//! What a one-token decode step costs after other work on this host: after
//! a chain of one-token steps (the baseline), after a verify block of five
//! rows (as a plain step inside the speculative loop follows a round), and
//! after 300 ms of arithmetic in registers on every thread (no memory
//! touched).
//! A control times a fixed dependent integer loop after the same burn: the
//! core clock.
//!
//! `cargo run --release -p runtime --example step_aftereffects -- MODEL.gguf [THREADS]`
//!
//! Each line is one mode: the mean milliseconds of the step (or the control
//! loop) at each of 24 positions after the cache is built, over 8 runs.

use runtime::engine::Engine;
use runtime::model::forward::{LogitRows, Session};
use std::time::{Duration, Instant};

const STEPS: usize = 24;
const RUNS: usize = 8;
const PROMPT: &str = "Correct the spelling mistakes in this paragraph and return the corrected paragraph: \
    The lighthouse stood on the edge of the clif, its light sweeping acros the dark water every few seconds.";

/// Multiply-adds on 96 floats held in registers and L1, for `d`.
fn burn(d: Duration) {
    let t = Instant::now();
    let mut a = [1.0f32; 96];
    let b = std::hint::black_box(0.9999f32);
    while t.elapsed() < d {
        for _ in 0..100_000 {
            for v in a.iter_mut() {
                *v = v.mul_add(b, 1e-4);
            }
        }
        a = std::hint::black_box(a);
    }
}

/// A fixed dependent integer loop: its time moves only with the core clock.
fn control() {
    let mut x = 1u64;
    for i in 0..2_000_000u64 {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().expect("usage: step_aftereffects MODEL.gguf [THREADS]"));
    let threads: usize = args.next().map_or(2, |t| t.parse().expect("THREADS is a number"));
    let loaded = runtime::model::load(&path).expect("model loads");
    let fam = kernels::dispatch::KernelFamily::best();
    let eng = Engine::new(loaded, fam, threads).expect("engine starts");
    let ids = eng.loaded.tokenizer.encode(PROMPT).expect("prompt encodes");
    let model = &eng.loaded.model;
    for mode in ["chain", "after-block", "after-burn", "control-after-burn"] {
        let mut ms = [0.0f64; STEPS];
        for _ in 0..RUNS {
            // The cache is built one token at a time, so no run starts from
            // a prefill's dense multi-row passes.
            let mut s = Session::new(&model.config);
            eng.install(|| {
                for &t in &ids {
                    model.forward(fam, &mut s, &[t], LogitRows::Last).expect("forward");
                }
            });
            if mode.ends_with("burn") {
                let hs: Vec<_> =
                    (0..threads).map(|_| std::thread::spawn(|| burn(Duration::from_millis(300)))).collect();
                hs.into_iter().for_each(|h| h.join().expect("burn thread"));
            }
            eng.install(|| {
                for m in ms.iter_mut() {
                    if mode == "after-block" {
                        let base = s.len();
                        model.forward(fam, &mut s, &[42, 43, 44, 45, 46], LogitRows::All).expect("forward");
                        s.truncate(base + 1);
                    }
                    let t0 = Instant::now();
                    if mode == "control-after-burn" {
                        control();
                    } else {
                        model.forward(fam, &mut s, &[42], LogitRows::Last).expect("forward");
                    }
                    *m += t0.elapsed().as_secs_f64() * 1e3 / RUNS as f64;
                }
            });
        }
        let mean = ms.iter().sum::<f64>() / STEPS as f64;
        let row: Vec<String> = ms.iter().map(|m| format!("{m:.2}")).collect();
        println!("{mode:>18}: mean {mean:.2} ms | {}", row.join(" "));
    }
}
