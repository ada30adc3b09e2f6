//! `runtime bench`: prefill and decode throughput, the verify-cost curve,
//! and (with `--drafter`, in [`curve`]) the speculative width curve.
//!
//! Throughput mode runs `reps` repetitions after `warmup` discarded ones.
//! Each repetition starts a fresh session, prefills `prompt_tokens` tokens in
//! one forward pass (timed: prefill tok/s), then decodes `gen_tokens` tokens
//! one forward pass at a time, each next token the greedy choice (timed:
//! decode tok/s). End-of-generation tokens do not stop it: every repetition
//! does the same work. The prompt is a fixed pseudo-random token sequence
//! ([`bench_prompt`]), so any engine can be handed the same ids.
//!
//! Verify-cost mode (`--verify-cost`) prefills the prompt once, then for
//! each pass size `R = 1..=max_rows` times one forward pass of `R` rows with
//! logits for every row (the verify pass of a draft of `R - 1` tokens),
//! rolling the cache back after each. Pass sizes are visited in a different
//! rotation every repetition so that drift of the host spreads over all of
//! them; each size's median is reported relative to one row.
//!
//! Every raw sample is kept (and printed with `--json`); summaries give n,
//! median, min, max, a 95% interval for the median from order statistics,
//! and the samples further than [`stats::OUTLIER_MADS`] scaled median
//! absolute deviations from the median (flagged, never dropped). The rules
//! are [`stats`], the ones the tuner uses. The reports' types are the
//! event schema's ([`crate::events::bench`]), re-exported here.

pub mod curve;
pub mod stats;

use crate::engine::Engine;
use crate::model::Session;
use crate::model::forward::{ForwardError, LogitRows};

use crate::events::bench::BenchEventKind;
pub use crate::events::bench::{BENCH_SCHEMA_VERSION, BenchReport, BenchSpec, Rep, RowsCost, Summary};
use std::time::Instant;

impl Summary {
    /// Summarizes `samples` (kept in their original order).
    ///
    /// # Panics
    /// On no samples, or a NaN among them.
    pub fn of(samples: Vec<f64>) -> Self {
        assert!(!samples.is_empty(), "no samples");
        let n = samples.len();
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Summary {
            n,
            median: stats::median(&samples),
            min,
            max,
            median_ci95: stats::median_ci95(&samples),
            outliers: stats::outliers(&samples),
            samples,
        }
    }
}

/// The benchmark prompt: `n` pseudo-random ids in `first..vocab` from a fixed
/// generator (xorshift64, seed 0x5DEECE66D), identical on every run. Ids
/// below `first` (the special tokens of common vocabularies) are avoided.
pub fn bench_prompt(n: usize, vocab: usize, first: usize) -> Vec<u32> {
    let span = vocab.saturating_sub(first).max(1) as u64;
    let mut s = 0x5DEECE66Du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (first as u64 + s % span) as u32
        })
        .collect()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Runs the benchmark on `engine`'s pool. `model_name` is only reported.
pub fn run(engine: &Engine, model_name: &str, spec: &BenchSpec) -> Result<BenchReport, ForwardError> {
    let model = &engine.loaded.model;
    let cfg = &model.config;
    let fam = engine.family;
    let prompt = bench_prompt(spec.prompt_tokens.max(1), cfg.vocab, 256.min(cfg.vocab / 2));
    let mut report = BenchReport {
        schema_version: BENCH_SCHEMA_VERSION,
        event: BenchEventKind::Bench,
        model: model_name.to_string(),
        kernel_family: model.kernel_family_name(fam).to_string(),
        threads: engine.threads,
        multirow: kernels::dispatch::multirow_enabled(),
        pages: model.weights.pages(),
        spec: spec.clone(),
        prompt_ids: prompt.clone(),
        prefill_tok_per_s: None,
        decode_tok_per_s: None,
        reps: Vec::new(),
        verify_cost: Vec::new(),
    };
    engine.install(|| -> Result<(), ForwardError> {
        if let Some(max_w) = spec.verify_cost {
            report.verify_cost = verify_cost(engine, &prompt, max_w.max(1), spec)?;
            return Ok(());
        }
        for rep in 0..spec.warmup + spec.reps {
            let mut session = Session::new(cfg);
            let t0 = Instant::now();
            let mut logits = model.forward(fam, &mut session, &prompt, LogitRows::Last)?;
            let prefill_s = t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            for _ in 0..spec.gen_tokens {
                let next = argmax(&logits);
                logits = model.forward(fam, &mut session, &[next], LogitRows::Last)?;
            }
            let decode_s = t1.elapsed().as_secs_f64();
            if rep >= spec.warmup {
                report.reps.push(Rep {
                    prefill_s,
                    decode_s,
                    prefill_tok_per_s: prompt.len() as f64 / prefill_s,
                    decode_tok_per_s: if spec.gen_tokens > 0 { spec.gen_tokens as f64 / decode_s } else { 0.0 },
                });
            }
        }
        Ok(())
    })?;
    if !report.reps.is_empty() {
        report.prefill_tok_per_s = Some(Summary::of(report.reps.iter().map(|r| r.prefill_tok_per_s).collect()));
        if spec.gen_tokens > 0 {
            report.decode_tok_per_s = Some(Summary::of(report.reps.iter().map(|r| r.decode_tok_per_s).collect()));
        }
    }
    Ok(report)
}

fn verify_cost(engine: &Engine, prompt: &[u32], max_w: usize, spec: &BenchSpec) -> Result<Vec<RowsCost>, ForwardError> {
    let model = &engine.loaded.model;
    let fam = engine.family;
    let mut session = Session::new(&model.config);
    let first = model.forward(fam, &mut session, prompt, LogitRows::Last)?;
    let base = session.len();
    // The block: the greedy continuation's first token, then fixed ids (the
    // cost of a verify pass does not depend on which tokens it holds).
    let block: Vec<u32> = std::iter::once(argmax(&first))
        .chain(bench_prompt(max_w, model.config.vocab, 256.min(model.config.vocab / 2)))
        .take(max_w)
        .collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); max_w];
    // Inner repeats make one sample at least ~2 ms at W = 1, so that timer
    // resolution and a single scheduler hiccup matter less.
    let probe = {
        let t = Instant::now();
        model.forward(fam, &mut session, &block[..1], LogitRows::All)?;
        session.truncate(base);
        t.elapsed().as_secs_f64()
    };
    let inner = ((2e-3 / probe.max(1e-6)).ceil() as usize).clamp(1, 64);
    for rep in 0..spec.warmup + spec.reps {
        for k in 0..max_w {
            let w = (k + rep) % max_w + 1;
            let t = Instant::now();
            for _ in 0..inner {
                model.forward(fam, &mut session, &block[..w], LogitRows::All)?;
                session.truncate(base);
            }
            if rep >= spec.warmup {
                samples[w - 1].push(t.elapsed().as_secs_f64() / inner as f64);
            }
        }
    }
    let sums: Vec<Summary> = samples.into_iter().map(Summary::of).collect();
    let w1 = sums[0].median;
    Ok(sums
        .into_iter()
        .enumerate()
        .map(|(i, s)| RowsCost { rows: i + 1, relative_to_one_row: s.median / w1, seconds: s })
        .collect())
}

/// `huge-advised, 93% on huge pages` / `4k` / `n/a`: the bench line's
/// account of where the weights lived.
fn pages_words(p: Option<&crate::model::weights::PagesReport>) -> String {
    match p {
        None => "n/a".into(),
        Some(p) => match p.huge_bytes {
            Some(h) if p.weight_bytes > 0 => {
                format!("{}, {:.0}% on huge pages", p.backing, 100.0 * h as f64 / p.weight_bytes as f64)
            }
            _ => p.backing.clone(),
        },
    }
}

/// The human-readable summary.
pub fn render(r: &BenchReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "model {} | kernels {} | threads {} | multirow {} | pages {} | prompt {} tok | gen {} tok | reps {} (+{} warm-up)",
        r.model,
        r.kernel_family,
        r.threads,
        if r.multirow { "on" } else { "off" },
        pages_words(r.pages.as_ref()),
        r.spec.prompt_tokens,
        r.spec.gen_tokens,
        r.spec.reps,
        r.spec.warmup
    );
    let line = |o: &mut String, name: &str, s: &Summary| {
        let _ = writeln!(
            o,
            "{name:>8} tok/s: median {:8.1}  min {:8.1}  max {:8.1}  95% CI [{:.1}, {:.1}]  n {}{}",
            s.median,
            s.min,
            s.max,
            s.median_ci95.0,
            s.median_ci95.1,
            s.n,
            if s.outliers.is_empty() { String::new() } else { format!("  outliers {:?}", s.outliers) }
        );
    };
    if let Some(s) = &r.prefill_tok_per_s {
        line(&mut o, "prefill", s);
    }
    if let Some(s) = &r.decode_tok_per_s {
        line(&mut o, "decode", s);
    }
    if !r.verify_cost.is_empty() {
        let _ = writeln!(o, "verify cost (one forward pass of R rows, logits for every row):");
        for w in &r.verify_cost {
            let _ = writeln!(
                o,
                "  R={:2}  median {:8.3} ms  min {:8.3}  max {:8.3}  x{:.2} of R=1  n {}{}",
                w.rows,
                w.seconds.median * 1e3,
                w.seconds.min * 1e3,
                w.seconds.max * 1e3,
                w.relative_to_one_row,
                w.seconds.n,
                if w.seconds.outliers.is_empty() {
                    String::new()
                } else {
                    format!("  outliers {:?}", w.seconds.outliers)
                }
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_keeps_samples_in_order_and_flags_a_far_outlier() {
        let s = Summary::of(vec![10.0, 11.0, 9.0, 10.5, 9.5, 100.0]);
        assert_eq!(s.samples, vec![10.0, 11.0, 9.0, 10.5, 9.5, 100.0]);
        assert_eq!((s.n, s.min, s.max), (6, 9.0, 100.0));
        assert_eq!(s.median, 10.25);
        assert_eq!(s.outliers, vec![5]);
        assert!(s.median_ci95.0 <= s.median && s.median <= s.median_ci95.1);
    }

    #[test]
    fn summary_of_few_samples_spans_the_range() {
        let s = Summary::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.median_ci95), (2.0, (1.0, 3.0)));
        assert!(s.outliers.is_empty());
    }

    #[test]
    fn bench_prompt_is_fixed_and_avoids_special_ids() {
        let a = bench_prompt(64, 49152, 256);
        assert_eq!(a, bench_prompt(64, 49152, 256));
        assert!(a.iter().all(|&t| (256..49152).contains(&(t as usize))));
        assert_eq!(bench_prompt(3, 49152, 256)[..], a[..3]);
    }
}
