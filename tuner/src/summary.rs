//! What a record states: the [`Summary`] of a sweep and its parts, built by
//! [`crate::summarize`] (which sits above the rules that read these types).
//!
//! Principal items: [`Summary`], [`DECISION_RULE`]
//! and [`DECISION_RULE_SERVED`] (fixed here, printed in every record before
//! the results), [`decide`], [`rate`] (the statistic: decode tok/s, or
//! end-to-end tok/s in a served sweep), [`DataProblem`] (raw data that is
//! not what the plan says, each named with its line and remedy).
//! The estimators (per-round ratios, drift, ties) are in [`crate::estimate`];
//! the record, CSV and plot writers in [`crate::record`].
//!
//! The unit of replication is the arm (one runtime process): each round
//! gives one ratio per width, paired by prompt against that round's own
//! brackets, and a width's interval comes from the spread across rounds.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::estimate::{DriftTest, RatioEstimate, SweepDriftTest, TieTest};
use crate::raw::{ArmEnd, Bracket, Halt, RequestRow};
use crate::stats::Stats;

/// The part of the decision rule after its statistic, shared by the
/// generate and served forms.
macro_rules! rule_after_statistic {
    () => {
        ". A width's ratio is the geometric mean over rounds of its per-round ratio (each the geometric mean over \
prompts of its rate over the mean of the round's opening and closing brackets' rates for that prompt); its 95% \
interval is the Student t interval of the per-round log ratios (the process is the unit: one ratio per round), \
widened by the bias a linear drift of the measured bracket disagreement could cause. The best width is the one \
with the highest ratio. A width is tied with the best when the t interval of its per-round log ratio minus the \
best's, paired by round, reaches 0. The rule takes the narrowest tied width whose interval lies wholly above \
1.0 (narrowest: the least verify work and wasted drafts for the same speed); if no tied width qualifies, the \
entry is `off`. A sweep needs at least two complete rounds. Every width enters the rule; a width that is not a \
measurement (declined, no diagnostics, zero rounds in every request, missing or invalid rates), a drifted or \
unjudged round, raw data that does not match the plan, output that differs from classic, or a gate source \
accepted as unknown makes `tuner propose` refuse the entry."
    };
}

/// The decision rule, fixed before any result is read.
pub const DECISION_RULE: &str =
    concat!("Widths are compared by decode tok/s of `runtime generate` requests", rule_after_statistic!());

/// The rule's last sentence when the sweep ran the adaptive arm (issue
/// 36), appended to [`DECISION_RULE`] in such records only.
pub const ADAPTIVE_RULE: &str = " The adaptive arm (the runtime choosing each round's draft length, up to the \
widest width, from the request's acceptance and the verify-cost curves measured so far) enters the same \
estimates but not the choice of the best: the best and the ties are among the fixed widths, and the adaptive \
arm's tie test is against the best fixed width. The rule takes the adaptive arm when it is tied with or faster \
than the best fixed width and its interval lies wholly above 1.0; otherwise the fixed widths' choice stands.";

/// The decision rule of a served sweep (`tuner sweep --served`): the same
/// rule over the statistic a client sees.
pub const DECISION_RULE_SERVED: &str = concat!(
    "Widths are compared by end-to-end tok/s of streamed requests through `runtime serve` (completion tokens \
over the time from writing the request to `data: [DONE]`)",
    rule_after_statistic!()
);

/// The stopping rule of `--rounds auto`, fixed before the first round and
/// printed in the record.
pub const AUTO_ROUNDS_RULE: &str = "`--rounds auto` runs at least the minimum number of rounds and at most the \
maximum; after each round from the minimum on, it summarizes the data so far and stops when the decision is \
settled: a width is chosen whose interval lies wholly above 1.0 and every narrower width is credibly slower than \
the best (so the tie rule cannot take a narrower one), or no width is tied with the best and every width's \
interval lies wholly below 1.0 (`off`); a round that drifted, cannot be judged, or whose data has problems is \
never settled. It also stops before a round that would end past the time budget (projected from the longest \
round so far). Every interval is then computed exactly as for a fixed number of rounds; the calibration test \
runs this rule and checks the coverage it leaves.";

/// Whether `--rounds auto` may stop after these rounds ([`AUTO_ROUNDS_RULE`]).
pub fn settled(s: &Summary) -> Option<String> {
    if s.drift
        || s.drift_unjudged
        || !s.data_problems.is_empty()
        || s.widths.iter().any(|w| w.not_a_measurement.is_some())
    {
        return None;
    }
    let d = &s.decision;
    let adaptive = s.widths.iter().find(|x| x.width == crate::plan::ADAPTIVE_ARM);
    match d.width {
        // The adaptive arm stays chosen while it is credibly at least as
        // fast as the best fixed width.
        Some(crate::plan::ADAPTIVE_ARM) => adaptive
            .and_then(|a| a.tie.as_ref())
            .is_some_and(|t| t.low >= 1.0)
            .then(|| "the adaptive draft length is chosen with its interval above 1.0 and is credibly at least as fast as the best fixed width".to_string()),
        Some(w) => {
            let narrower_untied =
                s.widths.iter().filter(|x| x.width < w).all(|x| x.tie.as_ref().is_some_and(|t| !t.tied));
            narrower_untied.then(|| {
                format!("width {w} is chosen with its interval above 1.0 and every narrower width is credibly slower than the best")
            })
        }
        None => {
            let all_below = !s.widths.is_empty()
                && s.widths.iter().all(|x| x.ratio.as_ref().is_some_and(|r| r.below_one()))
                && d.tied.len() <= 1;
            all_below.then(|| "every width's interval lies wholly below 1.0: `off`".to_string())
        }
    }
}

/// The fastest rate a request may report, in tok/s: past it the clock or
/// the row is broken, not the engine fast. One decode stream of today's
/// fastest engines on the fastest accelerators runs at 10^3-10^4 tok/s
/// (this host: 100-500); 10^6 leaves two orders of magnitude above that
/// and is still far below what a broken timer gives (a decode timed at 1 ns
/// a token reads 10^9).
pub const MAX_PLAUSIBLE_TOK_PER_S: f64 = 1e6;

/// A request's sample: its end-to-end tok/s in a served sweep, else the
/// runtime's decode tok/s; `None` when there is none (no token after the
/// first, or none at all) or it is not a positive finite number at most
/// [`MAX_PLAUSIBLE_TOK_PER_S`].
pub fn rate(r: &RequestRow) -> Option<f64> {
    match &r.served {
        Some(s) => s.e2e_tok_per_s,
        None => r.outcome.decode_tok_per_s,
    }
    .filter(|x| x.is_finite() && *x > 0.0 && *x <= MAX_PLAUSIBLE_TOK_PER_S)
}

/// Identity of one request's output against the classic reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub arm: usize,
    pub width: Option<usize>,
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
    /// The drift test ([`crate::estimate::DriftTest`]); null when a side is missing.
    pub test: Option<DriftTest>,
    /// The drift is credibly beyond the tolerance.
    pub drifted: bool,
    /// The test could be run (both sides, two prompts paired, and the
    /// process spread estimable from the sweep).
    pub judgeable: bool,
    /// A bracket side is missing (the round did not finish).
    pub incomplete: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WidthSummary {
    pub width: usize,
    pub arms: Vec<usize>,
    /// Per request: decode tok/s, or end-to-end tok/s in a served sweep ([`rate`]).
    pub tok_per_s: Option<Stats>,
    /// Served sweeps: per request, the client's time to first token.
    pub ttft_ms: Option<Stats>,
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
    /// Requests with a missing, non-finite, non-positive or implausible (above 1e6 tok/s) rate.
    pub invalid_rate_requests: usize,
    /// Why this width is not a measurement of speculation, if it is not.
    pub not_a_measurement: Option<String>,
    pub differences: Vec<Difference>,
}

/// Median decode tok/s per prompt type for one arm kind (classic: `None`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TypeRow {
    pub prompt_type: String,
    pub width: Option<usize>,
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Decision {
    /// `None` is `off`.
    pub width: Option<usize>,
    /// The width with the highest ratio, qualified or not.
    pub best_width: Option<usize>,
    /// The widths tied with the best (the best included), narrowest first.
    pub tied: Vec<usize>,
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
    pub width: usize,
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
    pub sources: Vec<crate::gate::Source>,
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
    pub drafter: runtime::policy::DrafterKind,
    /// A served sweep (`tuner sweep --served`): the rates are end-to-end tok/s.
    pub served: bool,
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
    pub drafter_settings: Option<runtime::policy::DrafterSettings>,
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
    pub model: Option<runtime::policy::ModelClass>,
    /// The target's file name and sha256, from the identity.
    #[serde(default)]
    pub model_file: Option<(String, String)>,
    /// Why the record's key is not known, when it is not.
    pub key_problem: Option<String>,
    pub complete: bool,
    pub halt: Option<Halt>,
    /// `--rounds auto`: where and why it stopped adding rounds.
    pub auto_rounds: Option<crate::raw::Settled>,
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
    /// [`crate::gate::during::MIN_IN_ARM_READINGS`] (version-1 records: all).
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
    /// How often a replicate sweep would choose the same width, and the
    /// expected regret of the choice (a bootstrap over the rounds).
    #[serde(default)]
    pub stability: Option<crate::stability::Stability>,
    /// Requests with no valid rate: each makes its width not a measurement
    /// (a classic one is a data problem).
    pub requests_without_rate: usize,
    /// The verify pass's cost against a one-row pass, per context length of
    /// the design ([`crate::cost`]); empty when the sweep did not measure it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_cost: Vec<crate::cost::CostCurve>,
}

/// Arms whose latest attempt ended ok: arm → (attempt, its `arm_end`).
pub(crate) type OkArms<'a> = BTreeMap<usize, (usize, &'a ArmEnd)>;

/// Applies [`DECISION_RULE`] to the widths (their ratios and tie tests
/// already computed). Widths that are not measurements are left out here
/// and make `propose` refuse, since under the tie rule any width can change
/// the decision.
pub fn decide(widths: &[WidthSummary]) -> Decision {
    use crate::plan::ADAPTIVE_ARM;
    let fixed: Vec<WidthSummary> = widths.iter().filter(|w| w.width != ADAPTIVE_ARM).cloned().collect();
    let d = decide_fixed(&fixed);
    match widths.iter().find(|w| w.width == ADAPTIVE_ARM) {
        Some(a) => with_adaptive(d, a, &fixed),
        None => d,
    }
}

/// The adaptive arm against the fixed widths' decision `d`
/// ([`DECISION_RULE`]): chosen when it is a measurement, tied with or
/// better than the best fixed width (its tie test against it,
/// `crate::summarize::widths`), and its interval lies wholly above 1.0;
/// otherwise `d` stands and says why the adaptive arm was not chosen.
fn with_adaptive(d: Decision, a: &WidthSummary, fixed: &[WidthSummary]) -> Decision {
    let Some(best) = d.best_width else { return d };
    let Some(br) = fixed.iter().find(|w| w.width == best).and_then(|w| w.ratio.as_ref()).map(|r| r.ratio) else {
        return d;
    };
    if d.ratio_interval.is_none() {
        return d;
    }
    let not = |why: String| Decision { why: format!("{}; the adaptive arm is not chosen: {why}", d.why), ..d.clone() };
    if let Some(why) = &a.not_a_measurement {
        return not(format!("not a measurement ({why})"));
    }
    let (Some(r), Some(t)) = (&a.ratio, &a.tie) else {
        return not("no ratio or tie test".into());
    };
    let Some((lo, hi)) = r.interval else { return not("no interval".into()) };
    let vs = format!("{:.3} [{:.3}, {:.3}] of the best fixed width's", t.vs_best, t.low, t.high);
    if !t.tied {
        return not(format!("credibly slower than the best fixed width {best} ({vs})"));
    }
    if !r.above_one() {
        return not(format!("its interval {:.3} [{lo:.3}, {hi:.3}] does not lie wholly above 1.0", r.ratio));
    }
    let fixed = d.width.map_or("off".to_string(), |w| format!("width {w}"));
    Decision {
        width: Some(crate::plan::ADAPTIVE_ARM),
        best_width: d.best_width,
        tied: d.tied.clone(),
        ratio: Some(r.ratio),
        ratio_interval: r.interval,
        why: format!(
            "the adaptive draft length is tied with or faster than the best fixed width {best} ({br:.3}): {vs}, \
             and its interval lies wholly above 1.0: {:.3} [{lo:.3}, {hi:.3}] (the fixed widths alone: {fixed})",
            r.ratio
        ),
    }
}

/// [`decide`] over the fixed widths alone.
fn decide_fixed(widths: &[WidthSummary]) -> Decision {
    let valid: Vec<(&WidthSummary, &RatioEstimate)> = widths
        .iter()
        .filter(|w| w.not_a_measurement.is_none())
        .filter_map(|w| w.ratio.as_ref().map(|r| (w, r)))
        .collect();
    let best = valid.iter().max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio));
    let Some((bw, br)) = best else {
        return Decision {
            width: None,
            best_width: None,
            tied: vec![],
            ratio: None,
            ratio_interval: None,
            why: "no width has a ratio (no complete speculative arm with its brackets)".into(),
        };
    };
    let mut tied: Vec<&(&WidthSummary, &RatioEstimate)> =
        valid.iter().filter(|(w, _)| w.width == bw.width || w.tie.as_ref().is_some_and(|t| t.tied)).collect();
    tied.sort_by_key(|(w, _)| w.width);
    let tied_widths: Vec<usize> = tied.iter().map(|(w, _)| w.width).collect();
    let fmt = |r: &RatioEstimate| match r.interval {
        Some((lo, hi)) => format!("{:.3} [{lo:.3}, {hi:.3}]", r.ratio),
        None => format!("{:.3} (no interval: one round)", r.ratio),
    };
    if br.interval.is_none() {
        return Decision {
            width: None,
            best_width: Some(bw.width),
            tied: tied_widths,
            ratio: Some(br.ratio),
            ratio_interval: None,
            why: format!(
                "fewer than two complete rounds: no interval between processes (best width {}: {}); run at least \
                 two rounds",
                bw.width,
                fmt(br)
            ),
        };
    }
    let list = tied_widths.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    match tied.iter().find(|(_, r)| r.above_one()) {
        Some((w, r)) => Decision {
            width: Some(w.width),
            best_width: Some(bw.width),
            tied: tied_widths.clone(),
            ratio: Some(r.ratio),
            ratio_interval: r.interval,
            why: format!(
                "width {} is the narrowest of the widths tied with the best (width {}; tied: {list}) whose interval \
                 lies wholly above 1.0: {}",
                w.width,
                bw.width,
                fmt(r)
            ),
        },
        None => Decision {
            width: None,
            best_width: Some(bw.width),
            tied: tied_widths.clone(),
            ratio: Some(br.ratio),
            ratio_interval: br.interval,
            why: format!(
                "no width tied with the best (tied: {list}) has an interval wholly above 1.0; the best is width {}: {}",
                bw.width,
                fmt(br)
            ),
        },
    }
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
