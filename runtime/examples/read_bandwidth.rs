//! How fast this host streams memory into the cores: the ceiling a one-token
//! decode step reaches, since it reads every weight byte once.
//!
//! `cargo run --release -p runtime --example read_bandwidth -- [MIB] [MAX_THREADS] [ROUNDS]`
//!
//! Allocates MIB MiB (default 256, well past any last-level cache here),
//! touches every page, then for 1..=MAX_THREADS threads (default: the CPUs
//! available) times ROUNDS (default 7) passes in which each thread sums its
//! own contiguous share as 64-bit words, and prints per thread count the
//! best and the median pass in GB/s (10^9 bytes). Thread counts alternate
//! round by round, so drift of a shared host falls on all of them.
//!
//! The buffer lives where the runtime's repacked weights do (a
//! `kernels::pages::WeightArena`): on huge pages where the system grants
//! them, on 4 KiB pages under `DRAFTWISE_HUGE_PAGES=0`, so each ceiling is
//! measured on the pages the decode it is set against streams from. The
//! first line says which ran.

use std::time::Instant;

/// Sums `words` eight lanes at a time (independent chains, so the loop is
/// bound by loads, not by the add latency).
fn sum_words(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    let tail: u64 = chunks.remainder().iter().fold(0, |s, &w| s.wrapping_add(w));
    acc.iter().fold(tail, |s, &a| s.wrapping_add(a))
}

/// One pass: `threads` threads each sum a contiguous share; seconds.
fn pass(buf: &[u64], threads: usize) -> f64 {
    let share = buf.len().div_ceil(threads);
    let t = Instant::now();
    let total = std::thread::scope(|s| {
        let hs: Vec<_> = buf.chunks(share).map(|c| s.spawn(move || sum_words(c))).collect();
        hs.into_iter().map(|h| h.join().expect("summing thread")).fold(0u64, u64::wrapping_add)
    });
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(total);
    secs
}

fn arg(i: usize, default: usize, max: usize, what: &str) -> usize {
    match std::env::args().nth(i) {
        None => default,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => {
                eprintln!("read_bandwidth: {what} {v:?}: expected an integer in 1..={max}");
                std::process::exit(2);
            }
        },
    }
}

fn main() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mib = arg(1, 256, 16384, "MIB");
    let max_threads = arg(2, cpus, 256, "MAX_THREADS");
    let rounds = arg(3, 7, 1000, "ROUNDS");
    let arena = kernels::pages::WeightArena::new(mib << 20);
    let region = arena.take(mib << 20).expect("an arena of that size");
    // SAFETY: the region's only reference while it is filled.
    let words: &mut [u64] = unsafe { arena.bytes_mut(&region).align_to_mut::<u64>().1 };
    // Every word written: the pages are backed before the first timed pass.
    for (i, w) in words.iter_mut().enumerate() {
        *w = i as u64;
    }
    let buf: &[u64] = words;
    let bytes = (buf.len() * 8) as f64;
    pass(buf, max_threads); // warm-up, discarded
    let mut secs = vec![Vec::with_capacity(rounds); max_threads];
    for _ in 0..rounds {
        for t in 1..=max_threads {
            secs[t - 1].push(pass(buf, t));
        }
    }
    println!(
        "{mib} MiB, {rounds} alternating rounds, {cpus} CPUs available, pages {} ({} MiB on huge pages)",
        arena.backing().name(),
        arena.huge_bytes().map_or("?".into(), |b| (b >> 20).to_string())
    );
    for (t, mut s) in secs.into_iter().enumerate() {
        s.sort_by(f64::total_cmp);
        println!(
            "{} thread(s): best {:.1} GB/s, median {:.1} GB/s",
            t + 1,
            bytes / s[0] * 1e-9,
            bytes / s[s.len() / 2] * 1e-9
        );
    }
}
