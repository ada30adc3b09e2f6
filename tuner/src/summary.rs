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

#[cfg(test)]
impl WidthSummary {
    /// A width with a ratio and a tie test and nothing else measured (ten
    /// requests, no arms): the decision rule's input in unit tests.
    pub(crate) fn estimated(width: usize, ratio: Option<RatioEstimate>, tie: TieTest) -> WidthSummary {
        WidthSummary {
            width,
            arms: vec![],
            tok_per_s: None,
            ttft_ms: None,
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
    /// A drifted record's decision against each bracket alone; null when
    /// the record did not drift ([`DRIFT_SURVIVAL_RULE`]).
    #[serde(default)]
    pub drift_survival: Option<DriftSurvival>,
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

/// The rule by which a drifted record may still propose its decision, as
/// records print it (docs/records.md, "A decision that survives the drift").
pub const DRIFT_SURVIVAL_RULE: &str = "A record that drifted proposes its decision only when the decision survives \
the drift: the rule above, applied with every width's ratio taken against the opening brackets alone and again \
against the closing brackets alone (the tie tests are paired by round, so the brackets cancel from them), makes the \
same choice both times (the same width, or off both times), each with an interval. The decision's interval then \
holds both one-sided intervals of its width, and when pooled the record's rounds carry half the gap between the \
two one-sided ratios as their drift widening.";

/// A drifted record's decision against each bracket alone
/// ([`DRIFT_SURVIVAL_RULE`], [`drift_survival`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DriftSurvival {
    /// The rule with every width's ratio against the opening brackets alone.
    pub vs_open: Decision,
    /// The rule with every width's ratio against the closing brackets alone.
    pub vs_close: Decision,
    /// Both make the record's choice, each with an interval.
    pub survives: bool,
    /// The record's decision interval against both brackets, before it was
    /// widened to hold the one-sided ones (the decision states the widened).
    pub two_sided_interval: Option<(f64, f64)>,
}

impl DriftSurvival {
    /// What the two one-sided decisions chose, in words.
    pub fn say(&self) -> String {
        format!(
            "against the opening brackets alone the rule takes {}, against the closing brackets alone {}",
            choice(&self.vs_open),
            choice(&self.vs_close)
        )
    }
}

/// A decision's choice with its interval, in words.
fn choice(d: &Decision) -> String {
    let what = match d.width {
        Some(crate::plan::ADAPTIVE_ARM) => "the adaptive draft length".to_string(),
        Some(w) => format!("width {w}"),
        None if d.ratio.is_some() => "off".to_string(),
        None => return format!("no decision ({})", d.why),
    };
    match (d.ratio, d.ratio_interval) {
        (Some(r), Some((lo, hi))) => format!("{what} ({r:.3} [{lo:.3}, {hi:.3}])"),
        (Some(r), None) => format!("{what} ({r:.3}, no interval)"),
        _ => what,
    }
}

/// [`DRIFT_SURVIVAL_RULE`]: the rule ([`decide`]) over `widths` with each
/// width's ratio against one bracket side, once per side, against the
/// record's `decision`; and `decision` with its interval widened to hold the
/// one-sided intervals of its width (for `off`, of the best width) when the
/// choice survives.
pub fn drift_survival(widths: &[WidthSummary], decision: &Decision) -> (DriftSurvival, Decision) {
    let side = |pick: fn(&WidthSummary) -> Option<RatioEstimate>| {
        let ws: Vec<WidthSummary> = widths.iter().map(|w| WidthSummary { ratio: pick(w), ..w.clone() }).collect();
        decide(&ws)
    };
    let vs_open = side(|w| w.ratio_vs_open.clone());
    let vs_close = side(|w| w.ratio_vs_close.clone());
    let same = |d: &Decision| d.width == decision.width && d.ratio.is_some() && d.ratio_interval.is_some();
    let survives = decision.ratio_interval.is_some() && same(&vs_open) && same(&vs_close);
    let mut widened = decision.clone();
    let shown = decision.width.or(decision.best_width);
    if survives && let Some(w) = widths.iter().find(|w| Some(w.width) == shown) {
        let ends =
            [&w.ratio_vs_open, &w.ratio_vs_close].into_iter().filter_map(|r| r.as_ref().and_then(|r| r.interval));
        widened.ratio_interval =
            ends.fold(decision.ratio_interval, |acc, (lo, hi)| acc.map(|(a, b)| (a.min(lo), b.max(hi))));
    }
    let s = DriftSurvival { vs_open, vs_close, survives, two_sided_interval: decision.ratio_interval };
    if survives {
        widened.why = format!(
            "{}; the host drifted and the choice survives it ({}), so its interval holds both",
            decision.why,
            s.say()
        );
    }
    (s, widened)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{TieTest, interval};

    /// A width whose rounds give these ratios against both brackets, the
    /// opening and the closing ones, tied with the best or not.
    fn width(w: usize, both: &[f64], open: &[f64], close: &[f64], tied: bool) -> WidthSummary {
        let est = |xs: &[f64]| interval(&xs.iter().enumerate().map(|(k, x)| (k, x.ln())).collect::<Vec<_>>(), 0.0);
        let tie = TieTest { width: w, vs_best: 1.0, low: 0.9, high: if tied { 1.1 } else { 0.95 }, tied };
        WidthSummary {
            ratio_vs_open: est(open),
            ratio_vs_close: est(close),
            ..WidthSummary::estimated(w, est(both), tie)
        }
    }

    #[test]
    fn a_choice_made_against_either_bracket_survives_with_both_intervals() {
        // Width 1 well above 1.0 against every baseline; width 2 slower.
        let ws = [
            width(1, &[1.30, 1.32, 1.31], &[1.28, 1.29, 1.285], &[1.33, 1.36, 1.34], true),
            width(2, &[1.10, 1.12, 1.11], &[1.08, 1.09, 1.085], &[1.13, 1.16, 1.14], false),
        ];
        let d = decide(&ws);
        assert_eq!(d.width, Some(1));
        let (s, widened) = drift_survival(&ws, &d);
        assert!(s.survives, "{}", s.say());
        assert_eq!((s.vs_open.width, s.vs_close.width), (Some(1), Some(1)));
        assert_eq!(s.two_sided_interval, d.ratio_interval);
        let (lo, hi) = widened.ratio_interval.unwrap();
        for r in [&ws[0].ratio, &ws[0].ratio_vs_open, &ws[0].ratio_vs_close] {
            let (a, b) = r.as_ref().unwrap().interval.unwrap();
            assert!(lo <= a && b <= hi, "[{lo}, {hi}] does not hold [{a}, {b}]");
        }
        assert_eq!(lo, ws[0].ratio_vs_open.as_ref().unwrap().interval.unwrap().0);
        assert_eq!(hi, ws[0].ratio_vs_close.as_ref().unwrap().interval.unwrap().1);
        assert!(widened.why.contains("survives"), "{}", widened.why);
        assert_eq!((widened.width, widened.ratio), (d.width, d.ratio));
    }

    #[test]
    fn a_choice_the_closing_brackets_alone_reverse_does_not_survive() {
        // Against the closing brackets alone width 1 is not credibly above 1.0
        // (one round's closing side ran fast), so the rule turns it off there.
        let ws = [
            width(1, &[1.10, 1.12, 1.11], &[1.15, 1.16, 1.155], &[1.05, 0.90, 1.07], true),
            width(2, &[1.02, 1.03, 1.025], &[1.06, 1.07, 1.065], &[0.97, 0.84, 0.99], false),
        ];
        let d = decide(&ws);
        assert_eq!(d.width, Some(1));
        let (s, widened) = drift_survival(&ws, &d);
        assert!(!s.survives, "{}", s.say());
        assert_eq!((s.vs_open.width, s.vs_close.width), (Some(1), None));
        assert!(s.say().contains("against the closing brackets alone off"), "{}", s.say());
        // Not widened, not re-worded: the record proposes nothing.
        assert_eq!(widened.ratio_interval, d.ratio_interval);
        assert_eq!(widened.why, d.why);
    }

    #[test]
    fn a_drifted_records_rounds_carry_half_the_one_sided_gap_into_the_pool() {
        let w = width(1, &[1.30, 1.32, 1.31], &[1.25, 1.27, 1.26], &[1.35, 1.37, 1.36], true);
        let (o, c) = (w.ratio_vs_open.as_ref().unwrap().ratio, w.ratio_vs_close.as_ref().unwrap().ratio);
        let half_gap = (c / o).ln() / 2.0;
        assert!((crate::pool::widening(&w, true) - half_gap).abs() < 1e-12);
        // Not drifted: the record's own widening only (none here).
        assert_eq!(crate::pool::widening(&w, false), 0.0);
        // A larger own widening stands.
        let mut wide = w.clone();
        wide.ratio.as_mut().unwrap().drift_widening_log = 0.2;
        assert_eq!(crate::pool::widening(&wide, true), 0.2);
    }

    #[test]
    fn off_survives_only_when_both_sides_say_off() {
        let ws = [width(1, &[0.95, 0.97, 0.96], &[0.93, 0.95, 0.94], &[0.97, 0.99, 0.98], true)];
        let d = decide(&ws);
        assert_eq!((d.width, d.best_width), (None, Some(1)));
        let (s, widened) = drift_survival(&ws, &d);
        assert!(s.survives, "{}", s.say());
        assert!(widened.ratio_interval.unwrap().1 >= ws[0].ratio_vs_close.as_ref().unwrap().interval.unwrap().1);
        // Against the opening side alone width 1 is faster: off does not survive.
        let ws = [width(1, &[0.99, 1.01, 1.0], &[1.05, 1.06, 1.055], &[0.94, 0.96, 0.95], true)];
        let d = decide(&ws);
        assert_eq!(d.width, None);
        let (s, _) = drift_survival(&ws, &d);
        assert!(!s.survives, "{}", s.say());
        assert_eq!(s.vs_open.width, Some(1));
    }
}
