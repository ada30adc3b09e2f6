//! `GET /metrics`: the server's counters in the Prometheus text exposition
//! format (version 0.0.4): requests by outcome, prompt and completion
//! tokens, time-to-first-token and per-token latency histograms, the queue,
//! connections, and the speculative counters (drafted, accepted, the
//! resolved width). Written by hand: a handful of counters and two
//! histograms do not need a metrics crate.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Upper bounds of the time-to-first-token buckets, seconds.
pub const TTFT_BUCKETS_S: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];
/// Upper bounds of the per-output-token latency buckets, seconds.
pub const TOKEN_BUCKETS_S: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Upper bounds of the rows-per-pass buckets of the server's batches.
pub const ROWS_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
/// Upper bounds of the sequences-per-pass buckets.
pub const SEQUENCES_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0];

/// Draft positions counted per position: the widest width.
pub const MAX_POSITIONS: usize = policy::MAX_WIDTH;

/// A cumulative histogram with fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// (count per bucket, the +Inf bucket last; sum; count).
    state: Mutex<(Vec<u64>, f64, u64)>,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, state: Mutex::new((vec![0; bounds.len() + 1], 0.0, 0)) }
    }

    pub fn observe(&self, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0[i] += 1;
        s.1 += v;
        s.2 += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, n) in self.bounds.iter().zip(&s.0) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.2);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", s.1, s.2);
    }
}

/// Token and latency counters, updated by the engine thread per finished request.
#[derive(Debug)]
pub struct Metrics {
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub drafted_tokens: AtomicU64,
    pub accepted_tokens: AtomicU64,
    /// Target passes that carried a draft (verify passes), the tokens they
    /// emitted, and the passes with an empty draft (plain steps).
    pub verify_passes: AtomicU64,
    pub verify_tokens: AtomicU64,
    pub plain_steps: AtomicU64,
    /// `accepted_by_position[i]`: verify passes whose draft token `i` was
    /// accepted (positions past the width stay 0).
    pub accepted_by_position: [AtomicU64; MAX_POSITIONS],
    /// `draft_lengths[n]`: target passes whose round asked the drafter for
    /// `n` tokens (0: a plain step the adaptive schedule chose).
    pub draft_lengths: [AtomicU64; MAX_POSITIONS + 1],
    /// Requests refused 400/404/413 (bad input).
    pub invalid: AtomicU64,
    /// Queue wait plus prefill: until the first token is emitted.
    pub ttft_s: Histogram,
    /// Decode time over the tokens after the first, per request.
    pub per_token_s: Histogram,
    /// From the request's arrival to its last token (waiting, tokenizing,
    /// prefill, decode and a log-probability pass), per completed request.
    pub e2e_s: Histogram,
    /// Time in the wait queue before the engine took the request up.
    pub queue_s: Histogram,
    /// Rows of each batched pass (every sequence's rows together).
    pub batch_rows: Histogram,
    /// Sequences with rows in each batched pass.
    pub batch_sequences: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
            drafted_tokens: AtomicU64::new(0),
            accepted_tokens: AtomicU64::new(0),
            verify_passes: AtomicU64::new(0),
            verify_tokens: AtomicU64::new(0),
            plain_steps: AtomicU64::new(0),
            accepted_by_position: std::array::from_fn(|_| AtomicU64::new(0)),
            draft_lengths: std::array::from_fn(|_| AtomicU64::new(0)),
            invalid: AtomicU64::new(0),
            ttft_s: Histogram::new(TTFT_BUCKETS_S),
            per_token_s: Histogram::new(TOKEN_BUCKETS_S),
            e2e_s: Histogram::new(TTFT_BUCKETS_S),
            queue_s: Histogram::new(TTFT_BUCKETS_S),
            batch_rows: Histogram::new(ROWS_BUCKETS),
            batch_sequences: Histogram::new(SEQUENCES_BUCKETS),
        }
    }
}

/// Counters for `/health` and `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    /// Refused because the queue was full.
    pub rejected: AtomicU64,
    /// Ran past their deadline (`--request-timeout-secs`), answered 408.
    pub timed_out: AtomicU64,
    /// Refused 429: too many requests preparing (`--max-preparing`).
    pub too_many_preparing: AtomicU64,
    /// Refused 429: the client already had its share waiting (`--max-waiting-per-client`).
    pub over_client_share: AtomicU64,
    /// Refused 401 (`--api-key`).
    pub unauthorized: AtomicU64,
    /// Open connections now.
    pub connections: AtomicU64,
    /// Connections refused 503: every open one had a request running.
    pub connections_refused: AtomicU64,
    /// Connections closed to admit a new one at `--max-connections`.
    pub evicted: AtomicU64,
    /// Connections closed with 408: the request head was too slow.
    pub header_timeouts: AtomicU64,
    /// Connections closed because a request body was slower than `--body-timeout-ms`.
    pub body_timeouts: AtomicU64,
    /// Keep-alive connections closed after `--idle-timeout-ms` without a request.
    pub idle_closed: AtomicU64,
    /// Tokens, latencies and speculation counters (`/metrics`).
    pub metrics: Metrics,
    /// Requests decoding now (the sequences of the batch).
    pub running: AtomicUsize,
}

/// What `/metrics` reports besides the counters in [`Stats`].
pub struct Gauges<'a> {
    pub waiting: usize,
    pub running: usize,
    /// `--parallel`: sequences that may decode at once.
    pub slots: usize,
    pub drafter: &'a str,
    /// The resolved draft width; 0 when the server decodes classically.
    pub width: usize,
    /// The tokens per verify pass the policy entry that chose the width
    /// measured (`None`: no entry chose it, or it predates the field).
    pub entry_emitted_per_verify: Option<f64>,
    /// `draftwise_build_info`'s labels: this build's version and commit,
    /// and the kernel family it runs.
    pub version: &'a str,
    pub commit: &'a str,
    pub kernels: &'a str,
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
}

fn gauge(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

/// The exposition text.
pub fn render(stats: &Stats, g: &Gauges<'_>) -> String {
    let m = &stats.metrics;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut out = String::new();
    let name = "draftwise_requests_total";
    let _ = writeln!(out, "# HELP {name} Requests by outcome.\n# TYPE {name} counter");
    for (outcome, v) in [
        ("completed", load(&stats.completed)),
        ("cancelled", load(&stats.cancelled)),
        ("failed", load(&stats.failed)),
        ("timed_out", load(&stats.timed_out)),
        ("queue_full", load(&stats.rejected)),
        ("too_many_preparing", load(&stats.too_many_preparing)),
        ("over_client_share", load(&stats.over_client_share)),
        ("unauthorized", load(&stats.unauthorized)),
        ("invalid", load(&m.invalid)),
    ] {
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {v}");
    }
    counter(&mut out, "draftwise_prompt_tokens_total", "Prompt tokens of completed requests.", load(&m.prompt_tokens));
    counter(
        &mut out,
        "draftwise_completion_tokens_total",
        "Generated tokens of completed requests.",
        load(&m.completion_tokens),
    );
    m.ttft_s.render(&mut out, "draftwise_time_to_first_token_seconds", "Queue wait plus prefill, per request.");
    m.per_token_s.render(
        &mut out,
        "draftwise_time_per_output_token_seconds",
        "Decode time per token after the first, per request.",
    );
    m.e2e_s.render(
        &mut out,
        "draftwise_request_duration_seconds",
        "From arrival to the last token, per completed request.",
    );
    m.queue_s.render(&mut out, "draftwise_queue_wait_seconds", "Time waiting for the engine, per completed request.");
    gauge(&mut out, "draftwise_queue_waiting", "Requests waiting for the engine.", g.waiting as u64);
    gauge(&mut out, "draftwise_requests_running", "Requests decoding now (sequences in the batch).", g.running as u64);
    gauge(&mut out, "draftwise_batch_slots", "Sequences that may decode at once (--parallel).", g.slots as u64);
    m.batch_rows.render(&mut out, "draftwise_batch_rows", "Rows per forward pass, every running sequence's together.");
    m.batch_sequences.render(&mut out, "draftwise_batch_sequences", "Sequences with rows in each forward pass.");
    gauge(&mut out, "draftwise_connections_open", "Open HTTP connections.", load(&stats.connections));
    let name = "draftwise_connections_closed_total";
    let _ = writeln!(out, "# HELP {name} Connections the server closed or refused, by reason.\n# TYPE {name} counter");
    for (reason, v) in [
        ("header_timeout", load(&stats.header_timeouts)),
        ("body_timeout", load(&stats.body_timeouts)),
        ("idle_timeout", load(&stats.idle_closed)),
        ("evicted", load(&stats.evicted)),
        ("refused", load(&stats.connections_refused)),
    ] {
        let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {v}");
    }
    counter(&mut out, "draftwise_drafted_tokens_total", "Tokens the drafter proposed.", load(&m.drafted_tokens));
    counter(
        &mut out,
        "draftwise_accepted_tokens_total",
        "Drafted tokens the verifier accepted.",
        load(&m.accepted_tokens),
    );
    counter(&mut out, "draftwise_verify_passes_total", "Target passes that carried a draft.", load(&m.verify_passes));
    counter(
        &mut out,
        "draftwise_verify_tokens_total",
        "Tokens emitted by verify passes (accepted drafts plus each pass's own token).",
        load(&m.verify_tokens),
    );
    counter(
        &mut out,
        "draftwise_plain_steps_total",
        "Target passes with an empty draft (the drafter had nothing).",
        load(&m.plain_steps),
    );
    let name = "draftwise_accepted_by_position_total";
    let _ = writeln!(
        out,
        "# HELP {name} Verify passes whose draft token at this position (1 = first) was accepted.\n# TYPE {name} counter"
    );
    for (i, a) in m.accepted_by_position.iter().enumerate().take(g.width.clamp(1, MAX_POSITIONS)) {
        let _ = writeln!(out, "{name}{{position=\"{}\"}} {}", i + 1, load(a));
    }
    let name = "draftwise_draft_length_total";
    let _ = writeln!(
        out,
        "# HELP {name} Target passes whose round asked the drafter for this many tokens (0 = a plain step by \
         choice of the adaptive schedule).\n# TYPE {name} counter"
    );
    for (n, c) in m.draft_lengths.iter().enumerate().take(g.width.clamp(1, MAX_POSITIONS) + 1) {
        let _ = writeln!(out, "{name}{{length=\"{n}\"}} {}", load(c));
    }
    let (passes, tokens) = (load(&m.verify_passes), load(&m.verify_tokens));
    if passes > 0 {
        let name = "draftwise_tokens_per_verify";
        let _ = writeln!(
            out,
            "# HELP {name} Tokens per verify pass since the server started (verify tokens over verify passes).\n\
             # TYPE {name} gauge\n{name} {}",
            tokens as f64 / passes as f64
        );
    }
    if let Some(x) = g.entry_emitted_per_verify {
        let name = "draftwise_entry_tokens_per_verify";
        let _ = writeln!(
            out,
            "# HELP {name} Tokens per verify pass the policy entry that chose the width measured on its prompts; \
             live traffic far from it no longer matches the measurement.\n# TYPE {name} gauge\n{name} {x}"
        );
    }
    let name = "draftwise_draft_width";
    let _ = writeln!(
        out,
        "# HELP {name} The resolved draft width (0: classic decoding).\n# TYPE {name} gauge\n{name}{{drafter=\"{}\"}} {}",
        g.drafter, g.width
    );
    let name = "draftwise_build_info";
    let label = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = writeln!(
        out,
        "# HELP {name} This build (always 1).\n# TYPE {name} gauge\n{name}{{version=\"{}\",git_commit=\"{}\",kernels=\"{}\"}} 1",
        label(g.version),
        label(g.commit),
        label(g.kernels)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_an_inf_bucket() {
        let h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0, f64::NAN] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "h");
        assert!(out.contains("x_bucket{le=\"0.1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_count 4\n"), "{out}");
    }

    #[test]
    fn every_line_is_a_comment_or_a_sample() {
        let stats = Stats::default();
        stats.completed.store(3, Ordering::Relaxed);
        stats.metrics.e2e_s.observe(0.2);
        stats.metrics.verify_passes.store(5, Ordering::Relaxed);
        stats.metrics.verify_tokens.store(12, Ordering::Relaxed);
        stats.metrics.accepted_by_position[0].store(4, Ordering::Relaxed);
        stats.metrics.draft_lengths[0].store(7, Ordering::Relaxed);
        stats.metrics.draft_lengths[3].store(2, Ordering::Relaxed);
        let g = Gauges {
            waiting: 2,
            running: 1,
            slots: 1,
            drafter: "ngram",
            width: 3,
            entry_emitted_per_verify: Some(2.25),
            version: "0.1.0",
            commit: "abc",
            kernels: "avx2",
        };
        let text = render(&stats, &g);
        for line in text.lines() {
            assert!(
                line.starts_with("# HELP ")
                    || line.starts_with("# TYPE ")
                    || line.rsplit_once(' ').is_some_and(|(_, v)| v.parse::<f64>().is_ok()),
                "{line}"
            );
        }
        assert!(text.contains("draftwise_requests_total{outcome=\"completed\"} 3\n"));
        assert!(text.contains("draftwise_queue_waiting 2\n"));
        assert!(text.contains("draftwise_draft_width{drafter=\"ngram\"} 3\n"));
        // The speculative counters: per position up to the width, the live
        // tokens per verify pass beside the entry's.
        assert!(text.contains("draftwise_accepted_by_position_total{position=\"1\"} 4\n"), "{text}");
        assert!(text.contains("draftwise_accepted_by_position_total{position=\"3\"} 0\n"), "{text}");
        // The draft lengths asked for, 0 (plain steps by choice) to the width.
        assert!(text.contains("draftwise_draft_length_total{length=\"0\"} 7\n"), "{text}");
        assert!(text.contains("draftwise_draft_length_total{length=\"3\"} 2\n"), "{text}");
        assert!(!text.contains("length=\"4\""), "{text}");
        assert!(!text.contains("position=\"4\""), "{text}");
        assert!(text.contains("draftwise_verify_passes_total 5\n"), "{text}");
        assert!(text.contains("draftwise_tokens_per_verify 2.4\n"), "{text}");
        assert!(text.contains("draftwise_entry_tokens_per_verify 2.25\n"), "{text}");
        assert!(text.contains("draftwise_request_duration_seconds_bucket{le=\"0.25\"} 1\n"), "{text}");
        assert!(text.contains("draftwise_queue_wait_seconds_count 0\n"), "{text}");
        assert!(
            text.contains("draftwise_build_info{version=\"0.1.0\",git_commit=\"abc\",kernels=\"avx2\"} 1\n"),
            "{text}"
        );
    }
}
