//! A decode step's mat-vecs streamed from memory, against a plain read of
//! as many bytes, one thread, in alternation:
//! `cargo run --release -p kernels --example int8_stream [ROUNDS] [LAYERS] [FAMILY] [FORMATS]`.
//!
//! Builds the K-quant matrices of LAYERS (default 28) layers of a
//! Qwen2.5-Coder-1.5B Q4_K_M (q, k, v, o, gate, up, down in the file's
//! formats; down and v in Q6_K in every layer, where the file has them so
//! in half its layers and Q4_K in the rest) plus its Q6_K head, repacked as
//! the runtime repacks them; random weights with sane scales; 1.031 GB at
//! 28 layers (the file's decode step reads 0.980), far past any cache. Each round runs three arms in rotating
//! order: one W = 1 pass over every matrix at 8-bit activations, the same
//! at 16-bit, and a sum of a buffer of the same size as 64-bit words (the
//! read ceiling, `runtime`'s `read_bandwidth` example's loop, over a buffer
//! on the pages the weights get: huge pages advised, or 4 KiB ones under
//! `DRAFTWISE_HUGE_PAGES=0`; `kernels::pages`). Prints each
//! arm's median time and GB/s over ROUNDS (default 7), and each pass's
//! share of the ceiling. FAMILY (`scalar`, `avx2`, `avx512vnni`) picks a
//! kernel family this CPU has (default: the best); FORMATS (`all`, `q4k`,
//! `q6k`) keeps only that format's matrices. ROUNDS is 1 to 1000,
//! LAYERS 1 to 64; a value outside or not a number is refused.

use kernels::act::ActRow;
use kernels::act8::ActRow8;
use kernels::dispatch::KernelFamily;
use kernels::matvec::{Input, matmul_rows_with};
use kernels::pages::WeightArena;
use kernels::quant::GgmlType;
use std::time::Instant;

#[path = "common/mod.rs"]
mod common;
use common::{Rng, random_matrix};

type Act = (Vec<f32>, ActRow, ActRow8);

fn view(a: &Act, int8: bool) -> Input<'_> {
    if int8 { Input { x: &a.0, q: a.1.view(), q8: a.2.view() } } else { Input::new(&a.0, a.1.view()) }
}

fn main() {
    let refuse = |msg: String| -> ! {
        eprintln!("int8_stream: {msg}");
        std::process::exit(2)
    };
    let arg = |i: usize, d: usize, max: usize, what: &str| match std::env::args().nth(i) {
        None => d,
        Some(s) => match s.parse::<usize>() {
            Ok(v) if (1..=max).contains(&v) => v,
            _ => refuse(format!("{what} {s:?} is not a whole number in 1..={max}")),
        },
    };
    let (rounds, layers) = (arg(1, 7, 1000, "ROUNDS"), arg(2, 28, 64, "LAYERS"));
    let supported = KernelFamily::all_supported();
    let fam = match std::env::args().nth(3) {
        None => KernelFamily::best(),
        Some(name) => supported.iter().copied().find(|f| f.name() == name).unwrap_or_else(|| {
            let names: Vec<&str> = supported.iter().map(|f| f.name()).collect();
            refuse(format!("no kernel family {name:?} on this CPU; it has {}", names.join(", ")))
        }),
    };
    let mut rng = Rng::default();
    let layer = [
        (GgmlType::Q4K, 1536, 1536),
        (GgmlType::Q4K, 256, 1536),
        (GgmlType::Q6K, 256, 1536),
        (GgmlType::Q4K, 1536, 1536),
        (GgmlType::Q4K, 8960, 1536),
        (GgmlType::Q4K, 8960, 1536),
        (GgmlType::Q6K, 1536, 8960),
    ];
    // FORMATS (the fourth argument): `all` (default), `q4k` or `q6k`: only
    // that format's matrices (the head is Q6_K).
    let only = match std::env::args().nth(4).as_deref() {
        None | Some("all") => None,
        Some("q4k") => Some(GgmlType::Q4K),
        Some("q6k") => Some(GgmlType::Q6K),
        Some(other) => refuse(format!("FORMATS {other:?} is not all, q4k or q6k")),
    };
    let shapes = (0..layers)
        .flat_map(|_| layer)
        .chain([(GgmlType::Q6K, 151936, 1536)])
        .filter(|&(ty, _, _)| only.is_none_or(|o| o == ty));
    let mut mats = Vec::new();
    let mut total = 0usize;
    for (ty, rows, cols) in shapes {
        let (packed, n) = random_matrix(&mut rng, ty, rows, cols);
        total += n;
        mats.push((packed, rows, cols));
    }
    let mut act = |cols: usize| {
        let x: Vec<f32> = (0..cols).map(|_| rng.unit()).collect();
        let mut q = ActRow::default();
        q.quantize(&x);
        let mut q8 = ActRow8::default();
        q8.quantize(&x);
        (x, q, q8)
    };
    let (a, b) = (act(1536), act(8960));
    // The read arm's buffer lives on the pages the weights do (huge pages
    // advised, or 4 KiB ones under DRAFTWISE_HUGE_PAGES=0): one arena.
    let arena = WeightArena::new(total);
    let region = arena.take(total).expect("an arena of the total's size");
    // SAFETY: the region's only reference while it is filled.
    let words: &mut [u64] = unsafe { arena.bytes_mut(&region).align_to_mut::<u64>().1 };
    for (i, w) in words.iter_mut().enumerate() {
        *w = i as u64;
    }
    let buf: &[u64] = words;
    let mut out = vec![0.0f32; 151936];
    let arms = ["read", "int8", "int16"];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); arms.len()];
    println!(
        "family {}, {layers} layers, {:.3} GB a pass, {rounds} rounds, pages {} ({} MiB of the read buffer on huge pages)",
        fam.name(),
        total as f64 / 1e9,
        arena.backing().name(),
        arena.huge_bytes().map_or("?".into(), |b| (b >> 20).to_string())
    );
    for r in 0..=rounds {
        for k in 0..arms.len() {
            let arm = (r + k) % arms.len();
            let t = Instant::now();
            if arm == 0 {
                let mut acc = [0u64; 8];
                for c in buf.chunks_exact(8) {
                    for (a, &w) in acc.iter_mut().zip(c) {
                        *a = a.wrapping_add(w);
                    }
                }
                std::hint::black_box(acc);
            } else {
                let (ia, ib) = (view(&a, arm == 1), view(&b, arm == 1));
                for (m, rows, cols) in &mats {
                    let inp = if *cols == 8960 { &ib } else { &ia };
                    matmul_rows_with(fam, true, &m.matrix(), std::slice::from_ref(inp), 0, &mut out[..*rows]);
                }
                std::hint::black_box(&out);
            }
            // Round 0 warms up.
            if r > 0 {
                times[arm].push(t.elapsed().as_secs_f64());
            }
        }
    }
    let med: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    for (k, name) in arms.iter().enumerate() {
        let (lo, hi) = (times[k][0], times[k][times[k].len() - 1]);
        print!(
            "{name:6} median {:7.2} ms ({:.2}..{:.2}), {:5.1} GB/s",
            med[k] * 1e3,
            lo * 1e3,
            hi * 1e3,
            total as f64 / med[k] / 1e9
        );
        if k > 0 {
            print!(", {:.0}% of the read", 100.0 * med[0] / med[k]);
        }
        println!();
    }
}
