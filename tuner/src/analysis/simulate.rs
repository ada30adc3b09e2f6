//! Synthetic sweeps with a known truth, for calibrating the summarizer:
//! [`SimConfig`] (the truth and the noise), [`sweep`] (→ a [`RawFile`] with
//! exactly the lines `tuner sweep` writes), [`calibrate`] (runs many sweeps
//! through the real [`crate::analysis::summarize::summarize`] and counts coverage and
//! drift verdicts).
//!
//! The generator's model of a request's rate (docs/records.md, "Calibration"):
//! `base_p * ratio_w * f_a * e_r * slow`, where `base_p` is the prompt's
//! speed (prompts differ by about 20 %), `ratio_w` the width's true ratio to
//! classic (1 for classic arms), `f_a = exp(N(0, process_spread))` the
//! arm's process factor, `e_r = exp(N(0, request_noise))` the request's
//! noise, and `slow` a slowdown (or speedup) applied to every arm of one
//! round's closing bracket side, or of every round's (the drift under test).
use std::collections::BTreeMap;

use runtime::events::{FinishReason, Outcome, SpeculativeDiagnostics, Startup, Usage};

use crate::data::plan::SpeculativeArm;
use crate::data::raw::{
    ArmEnd, ArmStart, ArmStartup, Bracket, Design, Done, PromptTag, RawFile, RawLine, RequestRow, RowSpeculation,
    Settings, SweepHeader,
};
use crate::host::gate::GateRun;

/// The truth and the noise of a synthetic sweep, and its plan.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Width → true ratio to classic.
    pub truth: BTreeMap<usize, f64>,
    pub rounds: usize,
    pub bursts: usize,
    pub bracket_arms: usize,
    pub bracket_bursts: usize,
    pub prompts: usize,
    /// Standard deviation of ln(process factor).
    pub process_spread: f64,
    /// Standard deviation of ln(request noise).
    pub request_noise: f64,
    /// `(round, fraction)`: every closing-bracket arm of that round runs
    /// `1 - fraction` as fast.
    pub close_slowdown: Option<(usize, f64)>,
    /// Every closing-bracket arm of every round runs `1 - fraction` as fast
    /// (a systematic drift: the host slows inside each round).
    pub close_slowdown_every_round: Option<f64>,
    /// Every closing-bracket arm of every round runs `1 / (1 - fraction)` as
    /// fast: the mirror image, in logs, of a slowdown of the same fraction
    /// (0.9: ten times the speed, as 0.9 slower is a tenth of it).
    pub close_speedup_every_round: Option<f64>,
    /// The host slows steadily through every round: an arm at fraction
    /// `pos` of its round (0 the first arm, 1 the last) runs
    /// `1 - fraction · pos` as fast, speculative arms too, so a width's true
    /// ratio is against classic at its own place in the round (between the
    /// brackets).
    pub slowdown_through_round: Option<f64>,
    /// `--rounds auto` with `(min, max)` rounds: `rounds` is then the
    /// maximum, and [`calibrate`] applies the stopping rule after each round
    /// from the minimum on (time is not simulated: no budget).
    pub auto: Option<(usize, usize)>,
    pub seed: u64,
}

impl SimConfig {
    /// The default sweep plan ([`crate::sweep::driver`] defaults, 12 prompts) over a
    /// truth shaped like the committed records: a peak at width 2, slower
    /// beyond.
    pub fn default_plan(process_spread: f64, request_noise: f64, seed: u64) -> SimConfig {
        let truth = [1.12, 1.15, 1.12, 1.08, 1.05, 1.01, 0.97, 0.93];
        SimConfig {
            truth: truth.iter().enumerate().map(|(i, r)| (i + 1, *r)).collect(),
            rounds: crate::data::plan::DEFAULT_ROUNDS,
            bursts: crate::data::plan::DEFAULT_BURSTS,
            bracket_arms: crate::data::plan::DEFAULT_BRACKET_ARMS,
            bracket_bursts: crate::data::plan::DEFAULT_BRACKET_BURSTS,
            prompts: 12,
            process_spread,
            request_noise,
            close_slowdown: None,
            close_slowdown_every_round: None,
            close_speedup_every_round: None,
            slowdown_through_round: None,
            auto: None,
            seed,
        }
    }
}

/// SplitMix64 (Steele, Lea & Flood 2014) and Box-Muller normals: small,
/// seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// What every synthetic sweep shares: a header (with a real identity of
/// this host, read once) and a gate run.
pub struct Template {
    header: SweepHeader,
    gate: GateRun,
}

impl Template {
    /// Reads this host's identity and one gate report (a few hundred ms).
    pub fn new() -> Template {
        let identity = crate::host::identity::collect(&crate::host::identity::IdentityOptions {
            runtime: Some("/nonexistent/runtime".into()),
            models: vec![],
        });
        let cfg = crate::host::gate::GateConfig { cpu_window_ms: 10, ..crate::host::gate::GateConfig::default() };
        let report = crate::host::gate::check(&cfg);
        let gate = GateRun {
            schema_version: 1,
            decision: crate::host::gate::Decision::Pass,
            exit_code: 0,
            attempts: 1,
            waited_ms: 0,
            timeout_s: 0.0,
            timed_out: false,
            report: crate::host::gate::GateReport {
                verdict: crate::host::gate::Verdict { accepted_unknown: vec![], ..report.verdict.clone() },
                ..report
            },
        };
        let settings = Settings {
            target: "/sim/model.gguf".into(),
            drafter: policy::DrafterKind::Ngram,
            drafter_model: None,
            drafter_settings: Some(policy::DrafterSettings::ngram(3, 4)),
            design: Design {
                widths: vec![],
                rounds: 0,
                bursts: 0,
                bracket_arms: 1,
                bracket_bursts: None,
                auto_rounds: None,
                warmup: crate::data::plan::DEFAULT_WARMUP,
                max_tokens: 48,
                threads: 2,
                cost_contexts: vec![],
            },
            prompts: "/sim/prompts.jsonl".into(),
            prompts_source: "simulated".into(),
            prompts_sha256: String::new(),
            runtime: "/sim/runtime".into(),
            gate: cfg,
            gate_wait_s: 0.0,
            gate_interval_s: 1.0,
            served: None,
            precision: None,
        };
        let header = SweepHeader {
            raw_schema_version: crate::data::raw::RAW_SCHEMA_VERSION,
            events_schema_version: runtime::events::SCHEMA_VERSION,
            tuner_version: env!("CARGO_PKG_VERSION").into(),
            started_at_unix_ms: 0,
            date: "2026-12-01".into(),
            settings,
            prompts: vec![],
            plan: vec![],
            identity,
        };
        Template { header, gate }
    }
}

impl Default for Template {
    fn default() -> Self {
        Self::new()
    }
}

const TYPES: [&str; 6] = ["code", "edit", "free", "math", "qa", "summary"];

fn startup(width: Option<SpeculativeArm>) -> Startup {
    let v = serde_json::json!({
        "schema_version": runtime::events::SCHEMA_VERSION,
        "build": {"version": "0.1.0", "git_commit": "sim", "git_dirty": false, "features": [],
                  "rustc": "rustc", "profile": "release", "cuda_archs": [], "kernel_fingerprint": "0123456789abcdef"},
        "device_class": "cpu:x86_64-sim", "kernel_family": "sim", "kernel_family_forced": false, "threads": 2,
        "target": {"path": "/sim/model.gguf", "format": "gguf", "architecture": "llama",
                   "quant": {"class": "q4_1", "from": "simulated"}, "n_layers": 1, "dim": 1, "vocab": 1,
                   "context_length": 1, "weight_formats": ["q4_1", "q8_0"], "parameters": 134515008},
        "tokenizer": "gguf", "drafter": if width.is_some() { "ngram" } else { "none" },
        "drafter_from": if width.is_some() { "flag" } else { "none" },
        "drafter_settings": width.map(|_| serde_json::json!({"ngram_min": 3, "ngram_max": 4})),
        "width": width, "width_from": "--draft-width", "host_class": "amd-zen4",
        "kernel_fingerprint": "0123456789abcdef",
        "verify_fingerprint": "0123456789abcdef",
        "exactness_probe": width.map(|w| serde_json::json!({"width": w, "passed": true, "first_differing_row": null,
            "differing_bytes": 0, "compared_bytes": 1, "kernel_family": "sim", "threads": 2})),
        "allow_inexact": false,
        "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}, "max_tokens": 48
    });
    serde_json::from_value(v).expect("the simulated startup event has the runtime's shape")
}

fn diagnostics(prompt: &str, repeat: usize, width: usize) -> SpeculativeDiagnostics {
    SpeculativeDiagnostics {
        schema_version: runtime::events::SCHEMA_VERSION,
        prompt_id: prompt.into(),
        warmup: false,
        repeat,
        drafter: "ngram".into(),
        width: policy::Width::new(width).expect("simulated widths are in range"),
        rounds: 10,
        plain_steps: 10,
        drafted: 10 * width,
        accepted: 5 * width,
        acceptance_rate: Some(0.5),
        accepted_per_position: vec![5; width],
        emitted_per_verify: Some(1.0 + width as f64 / 2.0),
        draft_ms: 1.0,
        verify_ms: 10.0,
        accept_ms: 0.1,
        draft_ms_per_round: Some(0.05),
        verify_ms_per_round: Some(0.5),
        accept_ms_per_round: Some(0.005),
        plain_step_ms: 4.0,
        plain_step_ms_mean: Some(0.4),
        round_verify_ms: 6.0,
        round_verify_ms_mean: Some(0.6),
        sample_ms: 0.2,
        adaptive: false,
        draft_lengths: Vec::new(),
        probes: 0,
        emitted_in_rounds: 10 + 5 * width,
    }
}

/// One synthetic sweep, as `tuner sweep` would have written it.
pub fn sweep(t: &Template, c: &SimConfig) -> RawFile {
    let mut rng = Rng(c.seed ^ 0xd1b5_4a32_d192_ed03);
    let widths: Vec<SpeculativeArm> =
        c.truth.keys().map(|&w| SpeculativeArm::try_from(w).expect("simulated widths are in range")).collect();
    let mut header = t.header.clone();
    header.settings.design.widths = widths.clone();
    header.settings.design.rounds = c.rounds;
    header.settings.design.bursts = c.bursts;
    header.settings.design.bracket_arms = c.bracket_arms;
    header.settings.design.bracket_bursts = Some(c.bracket_bursts);
    header.prompts = (0..c.prompts).map(|i| PromptTag { id: format!("p{i}"), kind: TYPES[i % 6].into() }).collect();
    header.plan = header.settings.design.plan();
    // Prompt speeds and outputs: fixed for the sweep.
    let base: Vec<f64> = (0..c.prompts).map(|_| 150.0 * (0.2 * rng.normal()).exp()).collect();
    let ids: Vec<Vec<u32>> = (0..c.prompts).map(|i| (0..8).map(|j| (100 * i + j) as u32).collect()).collect();
    let hashes: Vec<(String, String)> = ids
        .iter()
        .map(|v| {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            (runtime::events::sha256_hex(format!("{v:?}").as_bytes()), runtime::events::sha256_hex(&bytes))
        })
        .collect();
    // Each arm's place in its round, 0 to 1, in plan order.
    let mut place: BTreeMap<usize, f64> = BTreeMap::new();
    for k in 0..c.rounds {
        let arms: Vec<usize> = header.plan.iter().filter(|a| a.round == k).map(|a| a.index).collect();
        let last = arms.len().saturating_sub(1).max(1) as f64;
        place.extend(arms.iter().enumerate().map(|(i, a)| (*a, i as f64 / last)));
    }
    let mut lines = Vec::new();
    for a in &header.plan {
        let f = (c.process_spread * rng.normal()).exp()
            * c.slowdown_through_round.map_or(1.0, |frac| 1.0 - frac * place.get(&a.index).copied().unwrap_or(0.0));
        let slow = match (c.close_slowdown, a.bracket) {
            (Some((k, frac)), Some(Bracket::Close)) if k == a.round => 1.0 - frac,
            _ => 1.0,
        } * match (c.close_slowdown_every_round, a.bracket) {
            (Some(frac), Some(Bracket::Close)) => 1.0 - frac,
            _ => 1.0,
        } * match (c.close_speedup_every_round, a.bracket) {
            (Some(frac), Some(Bracket::Close)) => 1.0 / (1.0 - frac),
            _ => 1.0,
        };
        let ratio = a.width.map_or(1.0, |w| c.truth[&w.code()]);
        lines.push(RawLine::from(ArmStart {
            arm: a.index,
            attempt: 0,
            round: a.round,
            width: a.width,
            bracket: a.bracket,
            started_at_unix_ms: 0,
            argv: vec![],
            env: BTreeMap::new(),
            gate: t.gate.clone(),
            nvrm_before: None,
            nvrm_projected: None,
        }));
        lines.push(RawLine::from(ArmStartup { arm: a.index, attempt: 0, startup: startup(a.width) }));
        let bursts = if a.width.is_some() { c.bursts } else { c.bracket_bursts };
        let mut n = 0;
        for burst in 0..bursts {
            for (p, tag) in header.prompts.iter().enumerate() {
                let tok_s = base[p] * ratio * f * (c.request_noise * rng.normal()).exp() * slow;
                let decode_ms = 7.0 / tok_s * 1e3;
                lines.push(RawLine::from(RequestRow {
                    arm: a.index,
                    attempt: 0,
                    round: a.round,
                    width: a.width,
                    bracket: a.bracket,
                    drafter: if a.width.is_some() { "ngram".into() } else { "none".into() },
                    prompt_id: tag.id.clone(),
                    prompt_type: tag.kind.clone(),
                    burst,
                    outcome: Outcome {
                        usage: Usage { prompt_tokens: 5, completion_tokens: 8, total_tokens: 13 },
                        finish_reason: FinishReason::Length,
                        prefill_ms: 5.0,
                        decode_ms,
                        total_ms: 5.0 + decode_ms,
                        decode_steps: 7,
                        decode_tokens: 7,
                        decode_tok_per_s: Some(tok_s),
                        prefill_tok_per_s: 1000.0,
                        text_sha256: hashes[p].0.clone(),
                        token_ids_sha256: hashes[p].1.clone(),
                        token_ids: ids[p].clone(),
                    },
                    speculation: match a.width {
                        Some(w) => RowSpeculation::Diagnostics(diagnostics(&tag.id, burst, w.code())),
                        None => RowSpeculation::None,
                    },
                    nvrm_before: None,
                    gate_decision: crate::host::gate::Decision::Pass,
                    gate_accepted_unknown: vec![],
                    served: None,
                }));
                n += 1;
            }
        }
        lines.push(RawLine::from(ArmEnd {
            requests: n,
            ok: true,
            // The gate read the host three times while the arm ran, clean.
            contention: Some(crate::host::gate::during::DuringArm { samples: 3, ..Default::default() }),
            ..ArmEnd::pending(a.index, 0, String::new(), String::new())
        }));
    }
    lines.push(RawLine::Done(Done { at_unix_ms: 0 }));
    let line_numbers = (2..lines.len() + 2).collect();
    RawFile { header, lines, line_numbers, partial_tail_bytes: 0 }
}

/// What many synthetic sweeps of one configuration gave.
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    pub sweeps: usize,
    /// Width → sweeps whose interval for it covered its true ratio.
    pub covered: BTreeMap<usize, usize>,
    /// Sweeps with any round flagged as drifted.
    pub drift_flagged: usize,
    /// Sweeps whose slowed round (if any) was flagged.
    pub slowed_round_flagged: usize,
    /// Sweeps whose sweep-level drift test flagged drift.
    pub sweep_test_flagged: usize,
    /// Sum over sweeps of the sweep test's stated detectable drift, and the
    /// sweeps that stated one.
    pub detectable_sum: f64,
    pub detectable_n: usize,
    /// Sum over sweeps of the measured process spread.
    pub spread_sum: f64,
    /// Chosen width (None = off) → sweeps.
    pub chosen: BTreeMap<Option<usize>, usize>,
    /// Drifted sweeps whose decision survives the drift
    /// ([`crate::analysis::decision::DRIFT_SURVIVAL_RULE`]), those of them whose
    /// decision interval (widened) covers the true ratio of the chosen
    /// width (for `off`, the best width), and their choices.
    pub survived: usize,
    pub survived_covered: usize,
    /// Of those, the sweeps whose entry interval (the record's rounds
    /// pooled alone, as `tuner propose` writes it) covers the same truth.
    pub survived_pooled_covered: usize,
    pub survived_chosen: BTreeMap<Option<usize>, usize>,
    /// Drifted sweeps whose drift lies beyond what the plan's spread
    /// explains ([`crate::analysis::summary::DriftSize`]): refused whatever
    /// the choice.
    pub beyond_spread: usize,
    /// `--rounds auto`: rounds at the stop → sweeps.
    pub stopped_after: BTreeMap<usize, usize>,
}

impl Calibration {
    /// The lowest coverage over the widths, as a fraction.
    pub fn min_coverage(&self) -> f64 {
        self.covered.values().copied().min().unwrap_or(0) as f64 / self.sweeps.max(1) as f64
    }

    pub fn drift_rate(&self) -> f64 {
        self.drift_flagged as f64 / self.sweeps.max(1) as f64
    }

    pub fn slowed_round_rate(&self) -> f64 {
        self.slowed_round_flagged as f64 / self.sweeps.max(1) as f64
    }

    /// Mean stated detectable drift (sweep test) over the sweeps.
    pub fn mean_detectable(&self) -> f64 {
        self.detectable_sum / self.detectable_n.max(1) as f64
    }

    /// `covered` as a share of the sweeps whose decision survived the drift
    /// (1 when none survived).
    fn of_survived(&self, covered: usize) -> f64 {
        if self.survived == 0 { 1.0 } else { covered as f64 / self.survived as f64 }
    }

    /// Of the sweeps whose decision survived the drift, the fraction whose
    /// decision interval covers the truth.
    pub fn survived_coverage(&self) -> f64 {
        self.of_survived(self.survived_covered)
    }

    /// [`Calibration::survived_coverage`] of the entry's (pooled) interval.
    pub fn survived_pooled_coverage(&self) -> f64 {
        self.of_survived(self.survived_pooled_covered)
    }

    pub fn mean_spread(&self) -> f64 {
        self.spread_sum / self.sweeps.max(1) as f64
    }
}

/// Runs `n` sweeps of `c` (seeds `c.seed + i`) through the real summarizer
/// on `threads` threads.
pub fn calibrate(t: &Template, c: &SimConfig, n: usize, threads: usize) -> Calibration {
    let threads = threads.max(1);
    let parts: Vec<Calibration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn(move || {
                    let mut cal = Calibration::default();
                    for i in (k..n).step_by(threads) {
                        let cfg = SimConfig { seed: c.seed.wrapping_add(i as u64), ..c.clone() };
                        let mut raw = sweep(t, &cfg);
                        let summarize = |raw: &RawFile| match crate::analysis::summarize::summarize_with(raw, false) {
                            Ok(s) => s,
                            Err(e) => panic!("the summarizer refused a synthetic sweep: {e}"),
                        };
                        let sum = match cfg.auto {
                            None => summarize(&raw),
                            Some((min, max)) => {
                                // As the sweep would: stop after the first round that settles it.
                                let mut k = min;
                                loop {
                                    raw.lines.push(RawLine::Settled(crate::data::raw::Settled {
                                        at_unix_ms: 0,
                                        rounds: k,
                                        reason: String::new(),
                                        settled: false,
                                    }));
                                    raw.line_numbers.push(raw.line_numbers.len() + 2);
                                    let s = summarize(&raw);
                                    if k >= max || crate::analysis::decision::settled(&s).is_some() {
                                        *cal.stopped_after.entry(k).or_default() += 1;
                                        break s;
                                    }
                                    k += 1;
                                }
                            }
                        };
                        cal.sweeps += 1;
                        for w in &sum.widths {
                            let truth = cfg.truth[&w.width.code()];
                            let hit = w
                                .ratio
                                .as_ref()
                                .and_then(|r| r.interval)
                                .is_some_and(|(lo, hi)| lo <= truth && truth <= hi);
                            *cal.covered.entry(w.width.code()).or_default() += usize::from(hit);
                        }
                        cal.drift_flagged += usize::from(sum.drift);
                        if let Some(d) = &sum.sweep_drift {
                            cal.sweep_test_flagged += usize::from(d.drifted);
                            cal.detectable_sum += d.detectable;
                            cal.detectable_n += 1;
                        }
                        cal.spread_sum += sum.process_spread.unwrap_or(0.0);
                        if let Some((k, _)) = cfg.close_slowdown {
                            cal.slowed_round_flagged +=
                                usize::from(sum.rounds.iter().any(|r| r.round == k && r.drifted));
                        }
                        *cal.chosen.entry(sum.decision.width.map(SpeculativeArm::code)).or_default() += 1;
                        cal.beyond_spread += usize::from(
                            sum.drift_survival.as_ref().is_some_and(|d| d.size.as_ref().is_none_or(|z| !z.within)),
                        );
                        if sum.drift_survival.as_ref().is_some_and(|d| d.survives) {
                            cal.survived += 1;
                            *cal.survived_chosen.entry(sum.decision.width.map(SpeculativeArm::code)).or_default() += 1;
                            let shown = sum.decision.width.or(sum.decision.best_width);
                            if let (Some(w), Some((lo, hi))) = (shown, sum.decision.ratio_interval) {
                                let truth = cfg.truth[&w.code()];
                                cal.survived_covered += usize::from(lo <= truth && truth <= hi);
                                // The entry `tuner propose` would write: the
                                // record's rounds pooled alone.
                                let pooled = crate::analysis::pool::pool(&[crate::analysis::pool::RecordRounds::of(
                                    "sim", &sum,
                                )]);
                                if let Some(p) = pooled.width(w) {
                                    let (lo, hi) = p.interval;
                                    cal.survived_pooled_covered += usize::from(lo <= truth && truth <= hi);
                                }
                            }
                        }
                    }
                    cal
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a calibration thread panicked")).collect()
    });
    let mut out = Calibration::default();
    for p in parts {
        out.sweeps += p.sweeps;
        for (w, x) in p.covered {
            *out.covered.entry(w).or_default() += x;
        }
        out.drift_flagged += p.drift_flagged;
        out.slowed_round_flagged += p.slowed_round_flagged;
        out.sweep_test_flagged += p.sweep_test_flagged;
        out.detectable_sum += p.detectable_sum;
        out.detectable_n += p.detectable_n;
        out.spread_sum += p.spread_sum;
        for (w, x) in p.chosen {
            *out.chosen.entry(w).or_default() += x;
        }
        out.survived += p.survived;
        out.survived_covered += p.survived_covered;
        out.survived_pooled_covered += p.survived_pooled_covered;
        out.beyond_spread += p.beyond_spread;
        for (w, x) in p.survived_chosen {
            *out.survived_chosen.entry(w).or_default() += x;
        }
        for (k, x) in p.stopped_after {
            *out.stopped_after.entry(k).or_default() += x;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::rules::Refusal;
    use crate::analysis::rules::plan::{check_drift_power, check_plan, check_watched};
    use crate::analysis::summary::Summary;
    use crate::data::plan::arm;
    use crate::data::raw::RawLine;

    fn summary_of(c: &SimConfig, edit: impl FnOnce(&mut crate::data::raw::RawFile)) -> Summary {
        let mut raw = crate::analysis::simulate::sweep(&Template::new(), c);
        edit(&mut raw);
        crate::analysis::summarize::summarize(&raw).unwrap()
    }

    #[test]
    // rules/plan.rs's plan checks, on simulated sweeps.
    fn a_plan_whose_drift_test_cannot_detect_ten_percent_is_refused_with_the_arms_it_needs() {
        let c = SimConfig::default_plan(0.06, 0.11, 7);
        let s = summary_of(&c, |_| {});
        let d = s.sweep_drift.as_ref().unwrap();
        assert!(d.detectable < crate::analysis::estimate::DRIFT_TO_DETECT, "{d:?}");
        assert!(check_drift_power(&s, c.bracket_arms).is_ok());
        // Two rounds of one bracket arm a side at the same spread cannot.
        let weak = SimConfig { rounds: 2, bracket_arms: 1, bracket_bursts: 2, bursts: 2, ..c };
        let s = summary_of(&weak, |_| {});
        match check_drift_power(&s, 1) {
            Err(Refusal::WeakDriftTest { detectable, bracket_arms: 1, rounds: 2, needed }) => {
                assert!(detectable > crate::analysis::estimate::DRIFT_TO_DETECT);
                assert!(needed.parse::<usize>().is_ok_and(|n| n > 1) || needed.contains("add rounds"), "{needed}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(check_plan(&s, 1, true).unwrap().len(), 1);
    }

    #[test]
    fn an_arm_read_fewer_than_twice_while_it_ran_is_refused() {
        let c = SimConfig::default_plan(0.06, 0.11, 8);
        assert!(check_watched(&summary_of(&c, |_| {})).is_ok());
        let s = summary_of(&c, |raw| {
            for l in &mut raw.lines {
                if let RawLine::ArmEnd(e) = l
                    && e.arm == 5
                {
                    e.contention.as_mut().unwrap().samples = 1;
                }
            }
        });
        match check_watched(&s) {
            Err(Refusal::Unwatched { arms }) => assert_eq!(arms, "5"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    // raw.rs's cap, tested here: the header comes from a simulated sweep.
    fn a_raw_file_of_more_tiny_lines_than_the_cap_is_refused_and_one_at_the_cap_reads() {
        // 31-byte lines, each of which once became a 2 KiB value: 2 M of
        // them (62 MB, under the byte cap) took 4.3 GB before this cap.
        let t = Template::new();
        let sim = sweep(&t, &SimConfig::default_plan(0.03, 0.05, 1));
        let header = serde_json::to_string(&crate::data::raw::RawLine::from(sim.header.clone())).unwrap();
        let tiny = "{\"kind\":\"done\",\"at_unix_ms\":1}\n";
        assert_eq!(tiny.len(), 31);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("raw.jsonl");
        std::fs::write(&p, format!("{header}\n{}", tiny.repeat(crate::data::raw::MAX_RAW_LINES))).unwrap();
        assert_eq!(crate::data::raw::read_raw(&p).unwrap().lines.len(), crate::data::raw::MAX_RAW_LINES);
        std::fs::write(&p, format!("{header}\n{}", tiny.repeat(crate::data::raw::MAX_RAW_LINES + 1))).unwrap();
        let e = crate::data::raw::read_raw(&p).unwrap_err();
        assert!(matches!(e, crate::data::raw::RawError::TooManyLines { .. }), "{e}");
        assert!(e.to_string().contains(&crate::data::raw::MAX_RAW_LINES.to_string()), "{e}");
        // A line holds its own variant, not the largest one's.
        assert!(
            std::mem::size_of::<crate::data::raw::RawLine>() <= 160,
            "{}",
            std::mem::size_of::<crate::data::raw::RawLine>()
        );
    }

    #[test]
    // summarize's ceiling on rates, on a simulated sweep.
    fn implausible_rates_are_no_measurement_and_a_data_problem() {
        // Every rate 1e308 tok/s: a ratio of 1.0 to the last bit, whose
        // interval rounding once put "wholly above 1.0".
        let t = crate::analysis::simulate::Template::new();
        let mut raw =
            crate::analysis::simulate::sweep(&t, &crate::analysis::simulate::SimConfig::default_plan(0.03, 0.11, 7));
        for l in raw.lines.iter_mut() {
            if let crate::data::raw::RawLine::Request(r) = l {
                r.outcome.decode_tok_per_s = Some(1e308);
            }
        }
        let s = crate::analysis::summarize::summarize_with(&raw, false).unwrap();
        assert!(s.widths.iter().all(|w| w.not_a_measurement.as_deref().is_some_and(|m| m.contains("implausible"))));
        assert!(s.data_problems.iter().any(|p| p.what.contains("has no valid rate")), "{:?}", s.data_problems);
        assert_eq!(s.decision.width, None, "{:?}", s.decision);
        // One just under the ceiling is a rate (the ceiling, not finiteness, refused them).
        let mut r = raw.lines.iter().find_map(|l| match l {
            crate::data::raw::RawLine::Request(r) => Some(r.clone()),
            _ => None,
        });
        let r = r.as_mut().unwrap();
        // The row's own counts and times give the rate, so only the bound refuses it.
        let at = |r: &mut crate::data::raw::RequestRow, tok_per_s: f64| {
            r.outcome.decode_ms = r.outcome.decode_tokens as f64 * 1e3 / tok_per_s;
            r.outcome.decode_tok_per_s = Some(tok_per_s);
        };
        at(r, crate::analysis::summary::MAX_PLAUSIBLE_TOK_PER_S);
        assert_eq!(crate::analysis::summary::rate(r), Some(crate::analysis::summary::MAX_PLAUSIBLE_TOK_PER_S));
        at(r, crate::analysis::summary::MAX_PLAUSIBLE_TOK_PER_S * 1.01);
        assert_eq!(crate::analysis::summary::rate(r), None);
    }

    #[test]
    // summarize's floor on rates and the agreement of a rate with its row, on a simulated sweep.
    fn denormal_and_inconsistent_rates_are_no_measurement_and_a_data_problem() {
        use crate::analysis::summary::{MIN_PLAUSIBLE_TOK_PER_S, rate, rate_inconsistency};
        let t = crate::analysis::simulate::Template::new();
        let raw =
            crate::analysis::simulate::sweep(&t, &crate::analysis::simulate::SimConfig::default_plan(0.03, 0.11, 7));
        let each_request = |raw: &mut crate::data::raw::RawFile,
                            f: &mut dyn FnMut(&mut crate::data::raw::RequestRow)| {
            for l in raw.lines.iter_mut() {
                if let crate::data::raw::RawLine::Request(r) = l {
                    f(r)
                }
            }
        };
        // A token in 32 years, with a time that gives it: positive, consistent, and no host's.
        let mut denormal = raw.clone();
        each_request(&mut denormal, &mut |r| {
            r.outcome.decode_ms = r.outcome.decode_tokens as f64 * 1e3 / 1e-9;
            r.outcome.decode_tok_per_s = Some(1e-9);
            assert_eq!(rate_inconsistency(r), None);
            assert_eq!(rate(r), None);
            // The smallest positive double: no finite time gives it.
            r.outcome.decode_tok_per_s = Some(5e-324);
            assert_eq!(rate(r), None);
            r.outcome.decode_tok_per_s = Some(1e-9);
        });
        let s = crate::analysis::summarize::summarize_with(&denormal, false).unwrap();
        assert!(s.widths.iter().all(|w| w.not_a_measurement.as_deref().is_some_and(|m| m.contains("implausible"))));
        assert!(s.data_problems.iter().any(|p| p.what.contains("has no valid rate")), "{:?}", s.data_problems);
        assert_eq!(s.decision.width, None, "{:?}", s.decision);
        // A plausible rate its own counts and times do not give: one width's
        // rows report twice their speed.
        let mut doubled = raw.clone();
        let mut n = 0;
        each_request(&mut doubled, &mut |r| {
            if r.width.is_some_and(|w| w.code() == 3) {
                r.outcome.decode_tok_per_s = r.outcome.decode_tok_per_s.map(|x| x * 2.0);
                assert!(rate_inconsistency(r).is_some_and(|w| w.contains("decode_tokens / decode_ms")));
                assert_eq!(rate(r), None);
                n += 1;
            }
        });
        assert!(n > 0);
        let s = crate::analysis::summarize::summarize_with(&doubled, false).unwrap();
        assert!(
            s.data_problems.iter().any(|p| p.what.contains("is not its own decode_tokens / decode_ms")),
            "{:?}",
            s.data_problems
        );
        let w3 = s.widths.iter().find(|w| w.width.code() == 3).unwrap();
        assert!(w3.not_a_measurement.is_some(), "{w3:?}");
        // decode_tokens edited to match an edited rate: the token ids still say otherwise.
        let mut r = match raw.lines.iter().find(|l| matches!(l, crate::data::raw::RawLine::Request(_))) {
            Some(crate::data::raw::RawLine::Request(r)) => r.clone(),
            _ => unreachable!(),
        };
        assert_eq!(rate_inconsistency(&r), None);
        r.outcome.decode_tokens *= 2;
        r.outcome.decode_tok_per_s = r.outcome.decode_tok_per_s.map(|x| x * 2.0);
        assert!(rate_inconsistency(&r).is_some_and(|w| w.contains("token ids")), "{:?}", rate_inconsistency(&r));
        // Just above the floor with a time that gives it is a rate.
        let mut r2 = r.clone();
        r2.outcome.decode_tokens /= 2;
        r2.outcome.decode_ms = r2.outcome.decode_tokens as f64 * 1e3 / MIN_PLAUSIBLE_TOK_PER_S;
        r2.outcome.decode_tok_per_s = Some(MIN_PLAUSIBLE_TOK_PER_S);
        assert_eq!(rate(&r2), Some(MIN_PLAUSIBLE_TOK_PER_S));
        r2.outcome.decode_ms *= 2.0;
        r2.outcome.decode_tok_per_s = Some(MIN_PLAUSIBLE_TOK_PER_S / 2.0);
        assert_eq!(rate(&r2), None);
    }

    #[test]
    // stability.rs's bootstrap, on simulated sweeps.
    fn a_clear_winner_is_stable_and_a_flat_truth_is_not() {
        let t = Template::new();
        let mut c = SimConfig::default_plan(0.03, 0.11, 11);
        c.truth = (1..=8).map(|w| (w, if w == 3 { 1.60 } else { 1.10 })).collect();
        let s = crate::analysis::summarize::summarize(&crate::analysis::simulate::sweep(&t, &c)).unwrap();
        assert_eq!(s.decision.width, Some(arm(3)), "{:?}", s.decision);
        let st = s.stability.as_ref().unwrap();
        assert!(st.same > 0.95, "{st:?}");
        assert!(st.expected_regret < 0.01, "{st:?}");
        // Every width at 1.02 at an 8 % spread: whether any interval clears
        // 1.0 is a coin toss, so replicates disagree.
        let mut c = SimConfig::default_plan(0.08, 0.11, 12);
        c.truth = (1..=8).map(|w| (w, 1.02)).collect();
        let s = crate::analysis::summarize::summarize(&crate::analysis::simulate::sweep(&t, &c)).unwrap();
        let st = s.stability.as_ref().unwrap();
        assert!(st.same < 0.95, "{st:?}");
        assert!((st.choices.iter().map(|c| c.1).sum::<f64>() - 1.0).abs() < 1e-9);
    }
}

/// A served record under load, on simulated sweeps: its key is a bucket.
#[cfg(test)]
mod under_load {
    use crate::analysis::rules::record_key;
    use crate::analysis::simulate::{SimConfig, Template, sweep};
    use crate::analysis::summary::Summary;
    use crate::data::raw::ServedSettings;

    fn summary(served: Option<usize>) -> Summary {
        let mut raw = sweep(&Template::new(), &SimConfig::default_plan(0.03, 0.11, 7));
        raw.header.settings.served = served.map(|concurrency| ServedSettings {
            health_timeout_s: 120.0,
            stop_timeout_s: 15.0,
            request_timeout_s: 300.0,
            concurrency,
        });
        crate::analysis::summarize::summarize_with(&raw, false).unwrap()
    }

    #[test]
    fn a_served_record_under_load_is_keyed_at_its_concurrency() {
        let s = summary(Some(4));
        assert_eq!(s.concurrency, 4);
        let k = record_key(&s).unwrap();
        assert_eq!(k.concurrency, 4);
        assert!(k.to_string().ends_with(", 4 sequences at once"), "{k}");
        // One client, served or not, is the idle key.
        assert_eq!(record_key(&summary(Some(1))).unwrap().concurrency, 1);
        assert_eq!(record_key(&summary(None)).unwrap().concurrency, 1);
        assert_eq!(record_key(&summary(Some(1))).unwrap(), k.at(1));
    }
}
