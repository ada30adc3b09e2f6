//! What a record states: the [`Summary`] of a sweep and its parts, built by
//! [`crate::analysis::summarize`] (which sits above the rules that read these types).
//!
//! Principal items: [`Summary`], [`DECISION_RULE`]
//! and [`DECISION_RULE_SERVED`] (fixed here, printed in every record before
//! the results), [`decide`], [`rate`] (the statistic: decode tok/s, or
//! end-to-end tok/s in a served sweep), [`DataProblem`] (raw data that is
//! not what the plan says, each named with its line and remedy).
//! The estimators (per-round ratios, drift, ties) are in [`crate::analysis::estimate`];
//! the record, CSV and plot writers in [`crate::output::record`].
//!
//! The unit of replication is the arm (one runtime process): each round
//! gives one ratio per width, paired by prompt against that round's own
//! brackets, and a width's interval comes from the spread across rounds.
use crate::data::plan::SpeculativeArm;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::estimate::{DriftTest, RatioEstimate, SweepDriftTest, TieTest};
use crate::analysis::stats::Stats;
use crate::data::raw::{ArmEnd, Bracket, Halt, RequestRow};

/// The fastest rate a request may report, in tok/s: past it the clock or
/// the row is broken, not the engine fast. One decode stream of today's
/// fastest engines on the fastest accelerators runs at 10^3-10^4 tok/s
/// (this host: 100-500); 10^6 leaves two orders of magnitude above that
/// and is still far below what a broken timer gives (a decode timed at 1 ns
/// a token reads 10^9).
pub const MAX_PLAUSIBLE_TOK_PER_S: f64 = 1e6;

/// The slowest rate a request may report, in tok/s: below it the clock or
/// the row is broken, not the engine slow. The slowest committed record
/// decodes at 6.5 tok/s and a 70B model on a small CPU at 0.1-1; 10^-3
/// (one token in 17 minutes) leaves two orders of magnitude below that,
/// and refuses the denormals (5e-324) that "positive" let through.
pub const MIN_PLAUSIBLE_TOK_PER_S: f64 = 1e-3;

/// How far a row's rate may sit from what its own counts and times give
/// (relative): the runtime divides the same two numbers, so only rounding
/// separates them (committed records: under 1e-15).
const RATE_AGREEMENT: f64 = 1e-6;

/// A request's sample: its end-to-end tok/s in a served sweep, else the
/// runtime's decode tok/s; `None` when there is none (no token after the
/// first, or none at all), it is not a finite number in
/// [[`MIN_PLAUSIBLE_TOK_PER_S`], [`MAX_PLAUSIBLE_TOK_PER_S`]], or the row's
/// rates disagree with its own counts and times ([`rate_inconsistency`]).
pub fn rate(r: &RequestRow) -> Option<f64> {
    match &r.served {
        Some(s) => s.e2e_tok_per_s,
        None => r.outcome.decode_tok_per_s,
    }
    .filter(|x| plausible(*x) && rate_inconsistency(r).is_none())
}

fn plausible(tok_per_s: f64) -> bool {
    tok_per_s.is_finite() && (MIN_PLAUSIBLE_TOK_PER_S..=MAX_PLAUSIBLE_TOK_PER_S).contains(&tok_per_s)
}

/// Where a row's rates disagree with its own counts and times, if they do:
/// `decode_tokens` against its token ids, `decode_tok_per_s` against
/// `decode_tokens / decode_ms`, `prefill_tok_per_s` against `prompt_tokens /
/// prefill_ms`, and in a served row `e2e_tok_per_s` against
/// `completion_tokens / e2e_ms` and the server's decode rate against its
/// own time. A rate edited alone (or a clock that lied to one field) reads
/// as a problem, not as a sample.
pub fn rate_inconsistency(r: &RequestRow) -> Option<String> {
    let o = &r.outcome;
    let expected_tokens = o.token_ids.len().saturating_sub(1);
    if o.decode_tokens != expected_tokens {
        return Some(format!(
            "decode_tokens {} is not the row's {} token ids less the first",
            o.decode_tokens,
            o.token_ids.len()
        ));
    }
    let check = |name: &str, got: Option<f64>, tokens: usize, ms: f64, counts: &str| -> Option<String> {
        let want = (tokens > 0 && ms.is_finite() && ms > 0.0).then(|| tokens as f64 * 1e3 / ms);
        match (got, want) {
            (None, None) => None,
            (Some(g), Some(w)) if (g - w).abs() <= RATE_AGREEMENT * w => None,
            (g, w) => Some(format!(
                "{name} {} is not its own {counts} ({tokens} tokens in {ms} ms: {})",
                g.map_or("null".into(), |g| format!("{g:e}")),
                w.map_or("no rate".into(), |w| format!("{w:e} tok/s"))
            )),
        }
    };
    let decode =
        check("decode_tok_per_s", o.decode_tok_per_s, o.decode_tokens, o.decode_ms, "decode_tokens / decode_ms");
    let prefill = (o.usage.prompt_tokens > 0)
        .then(|| {
            check(
                "prefill_tok_per_s",
                Some(o.prefill_tok_per_s),
                o.usage.prompt_tokens,
                o.prefill_ms,
                "usage.prompt_tokens / prefill_ms",
            )
        })
        .flatten();
    let served = r.served.as_ref().and_then(|s| {
        check(
            "served.e2e_tok_per_s",
            s.e2e_tok_per_s,
            o.usage.completion_tokens,
            s.e2e_ms,
            "usage.completion_tokens / served.e2e_ms",
        )
        .or_else(|| {
            s.server.as_ref().and_then(|t| {
                check(
                    "served.server.decode_tok_per_s",
                    t.decode_tok_per_s,
                    o.usage.completion_tokens.saturating_sub(1),
                    t.decode_ms,
                    "completion tokens after the first / served.server.decode_ms",
                )
            })
        })
    });
    decode.or(prefill).or(served)
}

/// Identity of one request's output against the classic reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub arm: usize,
    pub width: Option<SpeculativeArm>,
    pub bracket: Option<Bracket>,
    pub prompt_id: String,
    pub burst: usize,
    /// Index of the first token that differs (the shorter length when one is
    /// a prefix of the other).
    pub first_differing_token: usize,
    pub text_identical: bool,
}

/// One round's classic brackets and the drift verdict.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundBrackets {
    pub round: usize,
    /// Per-request rates of the opening and closing sides (descriptive).
    pub open: Option<Stats>,
    pub close: Option<Stats>,
    /// The drift test ([`crate::analysis::estimate::DriftTest`]); null when a side is missing.
    pub test: Option<DriftTest>,
    /// The drift is credibly beyond the tolerance.
    pub drifted: bool,
    /// The test could be run (both sides, two prompts paired, and the
    /// process spread estimable from the sweep).
    pub judgeable: bool,
    /// A bracket side is missing (the round did not finish).
    pub incomplete: bool,
}

/// The batches a set of served requests ran in, from each response's
/// `draftwise.batch` (`runtime serve --parallel`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchSummary {
    /// Requests whose response said its batches.
    pub requests: usize,
    /// Sequences per forward pass (the request itself included): the mean
    /// over those requests of each one's mean over its passes.
    pub mean_sequences: f64,
    /// The most sequences one pass of one of them carried.
    pub widest: usize,
}

impl BatchSummary {
    /// The batches of `rows`' served requests; `None` when none said them.
    pub fn of<'r>(rows: impl Iterator<Item = &'r RequestRow>) -> Option<BatchSummary> {
        let batches: Vec<&runtime::events::ServedBatch> =
            rows.filter_map(|r| r.served.as_ref()?.server.as_ref()?.batch.as_ref()).collect();
        let means: Vec<f64> = batches.iter().map(|b| b.mean_sequences).filter(|x| x.is_finite()).collect();
        if means.is_empty() {
            return None;
        }
        Some(BatchSummary {
            requests: means.len(),
            mean_sequences: means.iter().sum::<f64>() / means.len() as f64,
            widest: batches.iter().map(|b| b.widest).max().unwrap_or(0),
        })
    }
}

fn one_client() -> usize {
    1
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WidthSummary {
    pub width: SpeculativeArm,
    pub arms: Vec<usize>,
    /// Per request: decode tok/s, or end-to-end tok/s in a served sweep ([`rate`]).
    pub tok_per_s: Option<Stats>,
    /// Served sweeps: per request, the client's time to first token.
    pub ttft_ms: Option<Stats>,
    /// Served sweeps: the batches its requests ran in.
    #[serde(default)]
    pub batch: Option<BatchSummary>,
    /// Against both brackets of each round (the decision uses this).
    pub ratio: Option<RatioEstimate>,
    pub ratio_vs_open: Option<RatioEstimate>,
    pub ratio_vs_close: Option<RatioEstimate>,
    /// Against the best width, paired by round.
    pub tie: Option<TieTest>,
    /// Pooled accepted / drafted over the recorded requests.
    pub acceptance: Option<f64>,
    /// Median over requests of tokens emitted per verify that carried a draft.
    pub emitted_per_verify: Option<f64>,
    /// Median over requests of verify ms per target pass.
    pub verify_ms_per_round: Option<f64>,
    pub requests: usize,
    pub declined: usize,
    pub without_diagnostics: usize,
    pub zero_round_requests: usize,
    /// Requests with a missing, non-finite or implausible (outside 1e-3..=1e6 tok/s) rate, or one its own
    /// counts and times do not give.
    pub invalid_rate_requests: usize,
    /// Why this width is not a measurement of speculation, if it is not.
    pub not_a_measurement: Option<String>,
    pub differences: Vec<Difference>,
}

#[cfg(test)]
impl WidthSummary {
    /// A width with a ratio and a tie test and nothing else measured (ten
    /// requests, no arms): the decision rule's input in unit tests.
    pub(crate) fn estimated(width: SpeculativeArm, ratio: Option<RatioEstimate>, tie: TieTest) -> WidthSummary {
        WidthSummary {
            width,
            arms: vec![],
            tok_per_s: None,
            ttft_ms: None,
            batch: None,
            ratio,
            ratio_vs_open: None,
            ratio_vs_close: None,
            tie: Some(tie),
            acceptance: None,
            emitted_per_verify: None,
            verify_ms_per_round: None,
            requests: 10,
            declined: 0,
            without_diagnostics: 0,
            zero_round_requests: 0,
            invalid_rate_requests: 0,
            not_a_measurement: None,
            differences: vec![],
        }
    }
}

/// Median decode tok/s per prompt type for one arm kind (classic: `None`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TypeRow {
    pub prompt_type: String,
    pub width: Option<SpeculativeArm>,
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Decision {
    /// `None` is `off`.
    pub width: Option<SpeculativeArm>,
    /// The width with the highest ratio, qualified or not.
    pub best_width: Option<SpeculativeArm>,
    /// The widths tied with the best (the best included), narrowest first.
    pub tied: Vec<SpeculativeArm>,
    /// The chosen width's ratio (for `off`: the best width's).
    pub ratio: Option<f64>,
    pub ratio_interval: Option<(f64, f64)>,
    pub why: String,
}

/// A width's ratio over one prompt type's prompts only (point estimate; the
/// plot's per-type series).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TypeRatio {
    pub prompt_type: String,
    pub width: SpeculativeArm,
    pub ratio: f64,
}

/// An arm attempt that ran through contention and was re-run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContentionRerun {
    pub arm: usize,
    pub attempt: usize,
    pub samples: usize,
    pub contended_samples: usize,
    pub reasons: Vec<String>,
}

/// Sources accepted as unknown by a gate before an arm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AcceptedUnknown {
    pub arm: usize,
    pub sources: Vec<crate::host::gate::Source>,
}

impl AcceptedUnknown {
    /// The sources as `--accept-unknown` names them, comma-separated.
    pub fn source_names(&self) -> String {
        self.sources.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub date: String,
    pub drafter: policy::DrafterKind,
    /// A served sweep (`tuner sweep --served`): the rates are end-to-end tok/s.
    pub served: bool,
    /// Concurrent clients per served arm (`--concurrency`; 1 for a generate
    /// sweep and for records before the flag). Above 1 the record is evidence
    /// of the width under load, and `tuner propose` writes no entry from it.
    #[serde(default = "one_client")]
    pub concurrency: usize,
    /// Served sweeps: the batches every measured request ran in (the server's
    /// `draftwise.batch`); null when no response carried one.
    #[serde(default)]
    pub batch: Option<BatchSummary>,
    /// From the arms' `startup` events (must agree across arms).
    pub device_class: Option<String>,
    pub target_quant: Option<String>,
    /// The format that declared the target's class (`gguf`, `gptq`, ...).
    #[serde(default)]
    pub target_quant_format: Option<String>,
    /// The arms' thread count: part of a CPU key.
    #[serde(default)]
    pub threads: Option<usize>,
    /// The speculative arms' drafter settings: part of the entry.
    #[serde(default)]
    pub drafter_settings: Option<policy::DrafterSettings>,
    /// The target's weight formats: which kernels the fingerprint covers.
    #[serde(default)]
    pub weight_formats: Option<Vec<String>>,
    /// The whole build's verify-path fingerprint (build identity).
    pub kernel_fingerprint: Option<String>,
    /// The verify-path fingerprint of the key (what an entry records).
    #[serde(default)]
    pub verify_fingerprint: Option<String>,
    /// The CPU class of the host: the arms' `host_class`, else (records
    /// before events schema 2) the class of the identity's CPU signature.
    #[serde(default)]
    pub host_class: Option<String>,
    /// How the host class was found (for the record and `propose`).
    #[serde(default)]
    pub host_class_from: Option<String>,
    /// The target's architecture and parameter count (the key's model part).
    #[serde(default)]
    pub model: Option<policy::ModelClass>,
    /// The target's file name and sha256, from the identity.
    #[serde(default)]
    pub model_file: Option<(String, String)>,
    /// Why the record's key is not known, when it is not.
    pub key_problem: Option<String>,
    /// The record's policy key, typed once by the summarizer from the parts
    /// above (the key its entry goes under, by which records pool and the
    /// ledger groups them), or why there is none. Not serialized: the JSON
    /// states the parts.
    #[serde(skip, default = "not_summarized")]
    pub key: Result<policy::PolicyKey, String>,
    pub complete: bool,
    pub halt: Option<Halt>,
    /// `--rounds auto`: where and why it stopped adding rounds.
    pub auto_rounds: Option<crate::data::raw::Settled>,
    /// Wall time from the sweep's start to its `done` line (resumes and
    /// waits included); null before it is done.
    pub duration_s: Option<f64>,
    pub arms_planned: usize,
    pub arms_complete: usize,
    /// Arms whose latest attempt failed or never ended.
    pub arms_failed: Vec<ArmEnd>,
    /// Recorded requests the plan expects of a speculative and of a bracket arm.
    pub expected_requests_per_arm: usize,
    pub expected_requests_per_bracket_arm: usize,
    pub decision_rule: String,
    pub classic: Option<Stats>,
    /// Served sweeps: the classic requests' time to first token.
    pub classic_ttft_ms: Option<Stats>,
    /// Served sweeps: the batches the classic requests ran in.
    #[serde(default)]
    pub classic_batch: Option<BatchSummary>,
    pub rounds: Vec<RoundBrackets>,
    /// Complete rounds (both bracket sides): the n of every interval.
    pub complete_rounds: usize,
    /// Some round drifted, or the sweep as a whole ([`Summary::sweep_drift`]).
    pub drift: bool,
    /// The sweep's drift test over every complete round together.
    #[serde(default)]
    pub sweep_drift: Option<SweepDriftTest>,
    /// Bracket arms a side that would bring the sweep test's detectable
    /// drift to [`estimate::DRIFT_TO_DETECT`] at this record's measured
    /// variance and rounds (the remedy `propose` names when it is larger).
    #[serde(default)]
    pub bracket_arms_to_detect: Option<usize>,
    /// Some complete round could not be judged for drift.
    pub drift_unjudged: bool,
    /// Drift tolerance, and the chance per sweep of a false drift verdict
    /// the test is built to stay under.
    pub drift_tolerance: f64,
    pub drift_false_alarm: f64,
    /// Estimated sd of one request's log rate within an arm and prompt.
    pub request_noise: Option<f64>,
    /// Estimated spread between processes (sd of an arm's log level) and
    /// its degrees of freedom.
    pub process_spread: Option<f64>,
    pub process_spread_df: usize,
    /// Raw data that does not match the plan or is inconsistent.
    pub data_problems: Vec<DataProblem>,
    /// Arm attempts measured through contention (each re-run).
    pub contention_reruns: Vec<ContentionRerun>,
    /// Host readings the gate took while the complete arms ran, and how
    /// many complete arms had fewer than
    /// [`crate::host::gate::during::MIN_IN_ARM_READINGS`] (version-1 records: all).
    pub during_arm_samples: usize,
    pub arms_without_during_check: usize,
    /// Those arms, by index.
    #[serde(default)]
    pub unwatched_arms: Vec<usize>,
    pub widths: Vec<WidthSummary>,
    pub by_type: Vec<TypeRow>,
    pub type_ratios: Vec<TypeRatio>,
    /// Classic requests whose output differs from the first classic output of the prompt.
    pub bracket_differences: Vec<Difference>,
    pub identical: bool,
    /// Arms whose runtime forfeited exactness (`allow_inexact`) or failed its probe.
    pub inexact_arms: Vec<usize>,
    pub accepted_unknown: Vec<AcceptedUnknown>,
    pub decision: Decision,
    /// A drifted record's decision against each bracket alone; null when
    /// the record did not drift ([`crate::analysis::decision::DRIFT_SURVIVAL_RULE`]).
    #[serde(default)]
    pub drift_survival: Option<DriftSurvival>,
    /// How often a replicate sweep would choose the same width, and the
    /// expected regret of the choice (a bootstrap over the rounds).
    #[serde(default)]
    pub stability: Option<Stability>,
    /// Requests with no valid rate: each makes its width not a measurement
    /// (a classic one is a data problem).
    pub requests_without_rate: usize,
    /// The verify pass's cost against a one-row pass, per context length of
    /// the design ([`crate::data::verify_cost`]); empty when the sweep did not measure it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_cost: Vec<crate::data::verify_cost::CostCurve>,
}

/// Arms whose latest attempt ended ok: arm → (attempt, its `arm_end`).
pub(crate) type OkArms<'a> = BTreeMap<usize, (usize, &'a ArmEnd)>;

/// A drifted record's decision against each bracket alone
/// ([`crate::analysis::decision::DRIFT_SURVIVAL_RULE`], [`crate::analysis::decision::drift_survival`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriftSurvival {
    /// The rule with every width's ratio against the opening brackets alone.
    pub vs_open: Decision,
    /// The rule with every width's ratio against the closing brackets alone.
    pub vs_close: Decision,
    /// The drift is within what the plan's spread explains ([`DriftSize`])
    /// and both one-sided decisions make the record's choice, each with an
    /// interval.
    pub survives: bool,
    /// The record's decision interval against both brackets, before it was
    /// widened to hold the one-sided ones (the decision states the widened).
    pub two_sided_interval: Option<(f64, f64)>,
    /// The record's largest drift against the largest its plan's spread
    /// explains; null when the spread could not be estimated (then nothing
    /// survives).
    #[serde(default)]
    pub size: Option<DriftSize>,
}

/// A drifted record's largest drift (a round's or the sweep's: the one whose
/// interval lies furthest from no drift) against the bound
/// [`crate::analysis::estimate::survivable_drift_log`] puts on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriftSize {
    /// Closing over opening brackets (1.0: no drift; 0.1: the closing side
    /// ran at a tenth of the speed) where `|ln drift|` is largest.
    pub drift: f64,
    /// Its 95 % interval (null when the test has none).
    pub interval: Option<(f64, f64)>,
    /// Where: `round 2` (1-based) or `the sweep`.
    pub at: String,
    /// The bound, as the factor either way: a drift inside `[1/factor,
    /// factor]` is within what the plan's spread explains.
    pub explained_factor: f64,
    /// Its interval reaches inside `[1/factor, factor]` (without one: the
    /// drift lies inside it).
    pub within: bool,
}

/// How often a replicate sweep would choose the same width (computed by
/// [`crate::analysis::stability::stability`]).
/// What the bootstrap says of a record's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stability {
    pub draws: usize,
    /// Rounds resampled (the record's complete rounds with ratios).
    pub rounds: usize,
    /// The share of draws that choose the record's width (`off` included).
    pub same: f64,
    /// What the draws chose: `(width or None for off, share)`, largest first.
    pub choices: Vec<(Option<SpeculativeArm>, f64)>,
    /// Mean over draws of `1 - ratio(record's choice) / ratio(draw's best)`.
    pub expected_regret: f64,
}

/// A summary read back from JSON has no typed key: the summarizer makes it.
fn not_summarized() -> Result<policy::PolicyKey, String> {
    Err("the summary was read back, not summarized".into())
}

/// Raw data that is not what the plan says: never dropped silently.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataProblem {
    /// raw.jsonl line, when one line is at fault.
    pub line: Option<usize>,
    pub arm: Option<usize>,
    pub what: String,
    pub remedy: String,
}
