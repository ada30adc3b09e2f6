//! `tuner summarize`: from raw.jsonl to the numbers a record states.
//!
//! Principal items: [`summarize`] (raw → [`Summary`]), [`DECISION_RULE`]
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
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::estimate::{self, ArmLevels, DriftTest, RatioEstimate, SweepDriftTest, TieTest};
use crate::raw::{ArmEnd, Bracket, Halt, RawFile, RawLine, RequestRow};
use crate::rules::{self, DataProblem};
use crate::stats::{Stats, median, stats};

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
    match d.width {
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
}

/// Arms whose latest attempt ended ok: arm → (attempt, its `arm_end`).
pub(crate) type OkArms<'a> = BTreeMap<usize, (usize, &'a ArmEnd)>;

/// The requests of the latest attempt of each arm whose attempt ended ok.
fn complete_requests(raw: &RawFile) -> (Vec<&RequestRow>, OkArms<'_>, Vec<ArmEnd>) {
    let mut latest: BTreeMap<usize, usize> = BTreeMap::new();
    let mut ends: BTreeMap<(usize, usize), &ArmEnd> = BTreeMap::new();
    for l in &raw.lines {
        match l {
            RawLine::ArmStart(s) => {
                latest.insert(s.arm, s.attempt);
            }
            RawLine::ArmEnd(e) => {
                ends.insert((e.arm, e.attempt), e);
            }
            _ => {}
        }
    }
    let mut ok: OkArms<'_> = BTreeMap::new();
    let mut failed = Vec::new();
    for (&arm, &attempt) in &latest {
        match ends.get(&(arm, attempt)) {
            Some(e) if e.ok => {
                ok.insert(arm, (attempt, *e));
            }
            Some(e) => failed.push((*e).clone()),
            None => failed.push(ArmEnd {
                error: Some("the arm never ended (the sweep was interrupted)".into()),
                ..ArmEnd::pending(arm, attempt, String::new(), String::new())
            }),
        }
    }
    let reqs = raw
        .lines
        .iter()
        .filter_map(|l| match l {
            RawLine::Request(r) if ok.get(&r.arm).is_some_and(|(a, _)| *a == r.attempt) => Some(&**r),
            _ => None,
        })
        .collect();
    (reqs, ok, failed)
}

fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// Applies [`DECISION_RULE`] to the widths (their ratios and tie tests
/// already computed). Widths that are not measurements are left out here
/// and make `propose` refuse, since under the tie rule any width can change
/// the decision.
pub fn decide(widths: &[WidthSummary]) -> Decision {
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

/// Summarizes a sweep directory's raw.jsonl.
pub fn summarize_dir(dir: &Path) -> Result<(RawFile, Summary)> {
    let raw = crate::raw::read_raw(&dir.join("raw.jsonl"))?;
    let s = summarize(&raw)?;
    Ok((raw, s))
}

pub fn summarize(raw: &RawFile) -> Result<Summary> {
    summarize_with(raw, true)
}

/// [`summarize`], with or without the bootstrap of the decision's stability
/// (the calibration's thousands of synthetic sweeps go without: it is the
/// slow part, and they measure the rest).
pub fn summarize_with(raw: &RawFile, with_stability: bool) -> Result<Summary> {
    let h = &raw.header;
    let st = &h.settings.design;
    // `--rounds auto` may have stopped before the plan's last round: the
    // arms of later rounds are not part of the sweep.
    let settled_line = raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Settled(x) => Some(x.clone()),
        _ => None,
    });
    let n_rounds = settled_line.as_ref().map_or(st.rounds, |x| x.rounds.min(st.rounds));
    let plan_len = h.plan.iter().filter(|a| a.round < n_rounds).count();
    let (mut reqs, ok_arms, arms_failed) = complete_requests(raw);
    reqs.retain(|r| r.round < n_rounds);
    let plan_by_index: BTreeMap<usize, &crate::raw::PlannedArm> = h.plan.iter().map(|a| (a.index, a)).collect();
    for r in &reqs {
        match plan_by_index.get(&r.arm) {
            Some(p) if p.width == r.width && p.round == r.round && p.bracket == r.bracket => {}
            _ => bail!("raw.jsonl: a request of arm {} does not match the plan in the header", r.arm),
        }
    }
    let data_problems = rules::data_problems(raw, &ok_arms);

    // The record's key and validity, from the startup events of complete arms.
    let mut device = BTreeSet::new();
    let mut quant = BTreeSet::new();
    let mut fingerprint = BTreeSet::new();
    let mut verify_fp = BTreeSet::new();
    let mut quant_format = BTreeSet::new();
    let mut threads = BTreeSet::new();
    let mut settings = BTreeSet::new();
    let mut formats = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let mut models = BTreeSet::new();
    let mut inexact_arms = Vec::new();
    let mut not_classic: Vec<String> = Vec::new();
    let speculative_arm: BTreeSet<usize> = h.plan.iter().filter(|a| a.width.is_some()).map(|a| a.index).collect();
    for l in &raw.lines {
        if let RawLine::Startup(s) = l
            && ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
        {
            device.insert(s.startup.device_class.clone());
            quant.insert(s.startup.target.quant.class.clone());
            fingerprint.insert(s.startup.kernel_fingerprint.clone());
            verify_fp.insert(s.startup.verify_fingerprint.clone());
            quant_format.insert(s.startup.target.quant.format.clone().unwrap_or_default());
            threads.insert(s.startup.threads.to_string());
            formats.insert(s.startup.target.weight_formats.join(","));
            hosts.insert(s.startup.host_class.clone().unwrap_or_default());
            models.insert(format!("{} {}", s.startup.target.architecture, s.startup.target.parameters));
            if speculative_arm.contains(&s.arm) {
                let d = s.startup.drafter_settings.as_ref().map(|d| serde_json::to_string(d).unwrap_or_default());
                settings.insert(d.unwrap_or_default());
            } else if let Some(how) = rules::classic_arm_speculated(&s.startup) {
                not_classic.push(format!("{} ({how})", s.arm));
            }
            if rules::ran_inexact(&s.startup) {
                inexact_arms.push(s.arm);
            }
        }
    }
    let one = |set: &BTreeSet<String>, what: &str, problems: &mut Vec<String>| -> Option<String> {
        match set.len() {
            1 => set.iter().next().cloned(),
            0 => {
                problems.push(format!("no complete arm reported its {what}"));
                None
            }
            _ => {
                problems.push(format!("arms disagree on the {what}: {set:?}"));
                None
            }
        }
    };
    let mut key_problems = Vec::new();
    let device_class = one(&device, "device class", &mut key_problems);
    let target_quant = one(&quant, "target quantization class", &mut key_problems);
    let kernel_fingerprint = one(&fingerprint, "kernel fingerprint", &mut key_problems);
    if !not_classic.is_empty() {
        key_problems.push(format!(
            "classic arm(s) did not decode classically: {}; their rates are no baseline",
            not_classic.join("; ")
        ));
    }
    // Fields the runtime reports since the schema-2 policy table: empty in
    // older records, which then have no key a schema-2 entry can hold.
    let newer = |v: Option<String>, what: &str, problems: &mut Vec<String>| -> Option<String> {
        match v {
            Some(x) if x.is_empty() => {
                problems.push(format!(
                    "the arms report no {what} (recorded by a runtime older than the schema-2 policy table); \
                     re-measure with this build"
                ));
                None
            }
            other => other,
        }
    };
    let verify_fingerprint = newer(
        one(&verify_fp, "verify-path fingerprint", &mut key_problems),
        "verify-path fingerprint",
        &mut key_problems,
    );
    let weight_formats = newer(one(&formats, "weight formats", &mut key_problems), "weight formats", &mut key_problems)
        .map(|f| f.split(',').map(str::to_string).collect::<Vec<_>>());
    let target_quant_format = one(&quant_format, "quantization format", &mut key_problems).filter(|f| !f.is_empty());
    let threads = one(&threads, "thread count", &mut key_problems).and_then(|t| t.parse::<usize>().ok());
    let drafter_settings =
        newer(one(&settings, "drafter settings", &mut key_problems), "drafter settings", &mut key_problems)
            .and_then(|d| serde_json::from_str::<runtime::policy::DrafterSettings>(&d).ok());
    let (host_class, host_class_from) = match one(&hosts, "host class", &mut key_problems) {
        Some(c) if !c.is_empty() => (Some(c), Some("the arms' startup events".to_string())),
        Some(_) => match h.identity.cpu.signature.value.as_deref().and_then(runtime::policy::HostClass::from_signature)
        {
            Some(c) => {
                (Some(c.to_string()), Some("the identity's CPU signature (the arms predate events schema 2)".into()))
            }
            None => {
                key_problems.push(
                    "the record names no CPU: its arms report no host class (events before schema 2) and its \
                     identity has no CPU signature; re-measure with this build"
                        .into(),
                );
                (None, None)
            }
        },
        None => (None, None),
    };
    let model = match one(&models, "target model (architecture and parameter count)", &mut key_problems) {
        Some(m) => match m.rsplit_once(' ').map(|(a, p)| (a.to_string(), p.parse::<u64>().unwrap_or(0))) {
            Some((architecture, parameters)) if parameters > 0 => {
                Some(runtime::policy::ModelClass { architecture, parameters })
            }
            _ => {
                key_problems.push(
                    "the arms report no parameter count (events before schema 2); re-measure with this build".into(),
                );
                None
            }
        },
        None => None,
    };
    let model_file = h.identity.models.first().and_then(|m| {
        let name = std::path::Path::new(&m.path).file_name()?.to_str()?.to_string();
        Some((name, m.sha256.value.clone()?))
    });
    if model_file.is_none() {
        key_problems.push("the identity has no sha256 of the target model".into());
    }
    if let (Some(want), Some(got)) = (&h.settings.drafter_settings, &drafter_settings)
        && want != got
    {
        key_problems.push(format!(
            "the speculative arms ran with drafter settings {} but the sweep passed {}",
            got.describe(),
            want.describe()
        ));
    }

    let served = h.settings.served.is_some();
    let ttft = |rs: &mut dyn Iterator<Item = &&RequestRow>| -> Option<Stats> {
        let xs: Vec<f64> = rs.filter_map(|r| r.served.as_ref().map(|s| s.ttft_ms)).filter(|x| x.is_finite()).collect();
        stats(&xs)
    };
    let requests_without_rate = reqs.iter().filter(|r| rate(r).is_none()).count();

    // Each complete arm's log rates per prompt: the estimators' input.
    let prompt_ids: Vec<String> = h.prompts.iter().map(|p| p.id.clone()).collect();
    let mut position: BTreeMap<usize, usize> = BTreeMap::new();
    {
        let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
        for a in &h.plan {
            let n = seen.entry(a.round).or_default();
            position.insert(a.index, *n);
            *n += 1;
        }
    }
    let mut levels: BTreeMap<usize, ArmLevels> = BTreeMap::new();
    for a in h.plan.iter().filter(|a| a.round < n_rounds && ok_arms.contains_key(&a.index)) {
        levels.insert(
            a.index,
            ArmLevels {
                arm: a.index,
                round: a.round,
                width: a.width,
                bracket: a.bracket,
                position: position[&a.index],
                logs: BTreeMap::new(),
            },
        );
    }
    for r in &reqs {
        if let (Some(l), Some(x)) = (levels.get_mut(&r.arm), rate(r)) {
            l.logs.entry(r.prompt_id.clone()).or_default().push(x.ln());
        }
    }
    let levels: Vec<ArmLevels> = levels.into_values().collect();
    let est = estimate::estimate(&levels, &st.widths, &prompt_ids);
    let mut type_ratios = Vec::new();
    {
        let mut kinds: Vec<&str> = h.prompts.iter().map(|p| p.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            let ids: Vec<String> = h.prompts.iter().filter(|p| p.kind == k).map(|p| p.id.clone()).collect();
            for (w, r) in estimate::estimate(&levels, &st.widths, &ids).ratio {
                type_ratios.push(TypeRatio { prompt_type: k.to_string(), width: w, ratio: r.ratio });
            }
        }
    }

    let mut rounds = Vec::new();
    for round in 0..n_rounds {
        let side = |b: Bracket| -> Vec<f64> {
            reqs.iter().filter(|r| r.round == round && r.bracket == Some(b)).filter_map(|r| rate(r)).collect()
        };
        let (open_all, close_all) = (side(Bracket::Open), side(Bracket::Close));
        if open_all.is_empty()
            && close_all.is_empty()
            && !h.plan.iter().any(|a| a.round == round && ok_arms.contains_key(&a.index))
        {
            continue;
        }
        let test = est.drift.iter().find(|d| d.round == round).cloned();
        let v = rules::round_verdict(test.as_ref());
        rounds.push(RoundBrackets {
            round,
            open: stats(&open_all),
            close: stats(&close_all),
            drifted: v.drifted,
            judgeable: v.judgeable,
            incomplete: v.incomplete,
            test,
        });
    }
    let complete_rounds = rounds.iter().filter(|r| !r.incomplete).count();
    let sweep_drift = est.sweep_drift.clone();
    let drift = rounds.iter().any(|r| r.drifted) || sweep_drift.as_ref().is_some_and(|d| d.drifted);
    let bracket_arms_to_detect = match (&sweep_drift, est.bracket_arm_variance_log) {
        (Some(d), Some(v)) => Some(estimate::bracket_arms_for(v, d.rounds, d.critical_t, estimate::DRIFT_TO_DETECT)),
        _ => None,
    };
    let drift_unjudged = rounds.iter().any(|r| !r.incomplete && !r.judgeable);
    let classic_all: Vec<f64> = reqs.iter().filter(|r| r.width.is_none()).filter_map(|r| rate(r)).collect();

    // Greedy identity: every output against the first classic output of its prompt.
    let mut reference: BTreeMap<&str, &RequestRow> = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.width.is_none()) {
        reference.entry(r.prompt_id.as_str()).or_insert(r);
    }
    let diff_of = |r: &RequestRow| -> Option<Difference> {
        let c = reference.get(r.prompt_id.as_str())?;
        let pos = first_difference(&c.outcome.token_ids, &r.outcome.token_ids);
        let text_identical = c.outcome.text_sha256 == r.outcome.text_sha256;
        (pos.is_some() || !text_identical).then(|| Difference {
            arm: r.arm,
            width: r.width,
            bracket: r.bracket,
            prompt_id: r.prompt_id.clone(),
            burst: r.burst,
            first_differing_token: pos.unwrap_or(0),
            text_identical,
        })
    };
    let bracket_differences: Vec<Difference> =
        reqs.iter().filter(|r| r.width.is_none()).filter_map(|r| diff_of(r)).collect();

    let mut widths = Vec::new();
    for &w in &st.widths {
        let mine: Vec<&&RequestRow> = reqs.iter().filter(|r| r.width == Some(w)).collect();
        let arms: Vec<usize> =
            h.plan.iter().filter(|a| a.width == Some(w) && ok_arms.contains_key(&a.index)).map(|a| a.index).collect();
        let rates: Vec<f64> = mine.iter().filter_map(|r| rate(r)).collect();
        let diags: Vec<&runtime::events::SpeculativeDiagnostics> =
            mine.iter().filter_map(|r| r.speculation.diagnostics()).collect();
        let drafted: usize = diags.iter().map(|d| d.drafted).sum();
        let accepted: usize = diags.iter().map(|d| d.accepted).sum();
        let epv: Vec<f64> = diags.iter().filter_map(|d| d.emitted_per_verify).collect();
        let vpr: Vec<f64> = diags.iter().filter_map(|d| d.verify_ms_per_round).collect();
        let declined = mine.iter().filter(|r| r.speculation.declined_reason().is_some()).count();
        let without_diagnostics = mine.iter().filter(|r| r.speculation.diagnostics().is_none()).count();
        let zero_round_requests = diags.iter().filter(|d| d.rounds == 0).count();
        let invalid_rate_requests = mine.len() - rates.len();
        let not_a_measurement = rules::not_a_measurement(
            &rules::WidthRequests {
                requests: mine.len(),
                declined,
                first_decline: mine.iter().find_map(|r| r.speculation.declined_reason()),
                without_diagnostics,
                zero_round_requests,
                invalid_rate_requests,
            },
            served,
        );
        widths.push(WidthSummary {
            width: w,
            arms,
            tok_per_s: stats(&rates),
            ttft_ms: ttft(&mut mine.iter().copied()),
            ratio: est.ratio.get(&w).cloned(),
            ratio_vs_open: est.ratio_vs_open.get(&w).cloned(),
            ratio_vs_close: est.ratio_vs_close.get(&w).cloned(),
            tie: None,
            acceptance: (drafted > 0).then(|| accepted as f64 / drafted as f64),
            emitted_per_verify: (!epv.is_empty()).then(|| median(&epv)),
            verify_ms_per_round: (!vpr.is_empty()).then(|| median(&vpr)),
            requests: mine.len(),
            declined,
            without_diagnostics,
            zero_round_requests,
            invalid_rate_requests,
            not_a_measurement,
            differences: mine.iter().filter_map(|r| diff_of(r)).collect(),
        });
    }
    // Ties against the best width that is a measurement.
    let best = widths
        .iter()
        .filter(|w| w.not_a_measurement.is_none())
        .filter_map(|w| w.ratio.as_ref().map(|r| (w.width, r.ratio)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(w, _)| w);
    if let Some(b) = best {
        let measured = |x: usize| widths.iter().any(|w| w.width == x && w.not_a_measurement.is_none());
        for t in estimate::ties(&est, b, measured) {
            if let Some(w) = widths.iter_mut().find(|w| w.width == t.width) {
                w.tie = Some(t);
            }
        }
    }

    let mut by_type = Vec::new();
    let mut types: Vec<&str> = h.prompts.iter().map(|p| p.kind.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let arm_kinds: Vec<Option<usize>> =
        std::iter::once(None).chain(h.settings.design.widths.iter().map(|w| Some(*w))).collect();
    for t in &types {
        for k in &arm_kinds {
            let xs: Vec<f64> =
                reqs.iter().filter(|r| r.prompt_type == *t && r.width == *k).filter_map(|r| rate(r)).collect();
            if let Some(s) = stats(&xs) {
                by_type.push(TypeRow {
                    prompt_type: t.to_string(),
                    width: *k,
                    n: s.n,
                    median: s.median,
                    min: s.min,
                    max: s.max,
                });
            }
        }
    }

    let mut accepted_unknown = Vec::new();
    for l in &raw.lines {
        if let RawLine::ArmStart(s) = l
            && ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
            && !s.gate.report.verdict.accepted_unknown.is_empty()
        {
            accepted_unknown.push(AcceptedUnknown {
                arm: s.arm,
                sources: s.gate.report.verdict.accepted_unknown.iter().map(|a| a.source).collect(),
            });
        }
    }
    let halt = raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Halt(h) => Some(h.clone()),
        _ => None,
    });
    let mut contention_reruns = Vec::new();
    for l in &raw.lines {
        if let RawLine::ArmEnd(e) = l
            && let Some(c) = &e.contention
            && c.contended()
        {
            contention_reruns.push(ContentionRerun {
                arm: e.arm,
                attempt: e.attempt,
                samples: c.samples,
                contended_samples: c.contended_samples,
                reasons: c.reasons.clone(),
            });
        }
    }
    let during_arm_samples = ok_arms.values().filter_map(|(_, e)| e.contention.as_ref()).map(|c| c.samples).sum();
    let unwatched_arms: Vec<usize> = ok_arms
        .iter()
        .filter(|(_, (_, e))| {
            e.contention.as_ref().is_none_or(|c| c.samples < crate::gate::during::MIN_IN_ARM_READINGS)
        })
        .map(|(a, _)| *a)
        .collect();
    let arms_without_during_check = unwatched_arms.len();
    let complete = raw.lines.iter().any(|l| matches!(l, RawLine::Done(_)))
        && h.plan.iter().filter(|a| a.round < n_rounds).all(|a| ok_arms.contains_key(&a.index));
    let identical = bracket_differences.is_empty() && widths.iter().all(|w| w.differences.is_empty());
    let decision = decide(&widths);
    let stability =
        if with_stability { crate::stability::stability(&widths, decision.width, h.started_at_unix_ms) } else { None };
    Ok(Summary {
        date: h.date.clone(),
        drafter: h.settings.drafter,
        served,
        device_class,
        target_quant,
        target_quant_format,
        threads,
        drafter_settings,
        weight_formats,
        kernel_fingerprint,
        verify_fingerprint,
        host_class,
        host_class_from,
        model,
        model_file,
        key_problem: (!key_problems.is_empty()).then(|| key_problems.join("; ")),
        complete,
        halt: if complete { None } else { halt },
        arms_planned: plan_len,
        duration_s: raw.lines.iter().rev().find_map(|l| match l {
            RawLine::Done(d) => Some(d.at_unix_ms.saturating_sub(h.started_at_unix_ms) as f64 / 1e3),
            _ => None,
        }),
        auto_rounds: settled_line,
        arms_complete: ok_arms.len(),
        arms_failed,
        expected_requests_per_arm: h.prompts.len() * st.bursts_of(Some(1)),
        expected_requests_per_bracket_arm: h.prompts.len() * st.bursts_of(None),
        decision_rule: if served { DECISION_RULE_SERVED } else { DECISION_RULE }.to_string(),
        classic: stats(&classic_all),
        classic_ttft_ms: ttft(&mut reqs.iter().filter(|r| r.width.is_none())),
        rounds,
        complete_rounds,
        drift,
        sweep_drift,
        bracket_arms_to_detect,
        drift_unjudged,
        drift_tolerance: estimate::DRIFT_TOLERANCE,
        drift_false_alarm: estimate::DRIFT_FALSE_ALARM,
        request_noise: est.request_noise,
        process_spread: est.process_spread,
        process_spread_df: est.process_variance_df,
        data_problems,
        contention_reruns,
        during_arm_samples,
        arms_without_during_check,
        unwatched_arms,
        widths,
        by_type,
        type_ratios,
        bracket_differences,
        identical,
        inexact_arms,
        accepted_unknown,
        decision,
        stability,
        requests_without_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(width: usize, ratio: f64, lo: f64, hi: f64, tied: bool) -> WidthSummary {
        WidthSummary {
            width,
            arms: vec![],
            tok_per_s: None,
            ttft_ms: None,
            ratio: Some(RatioEstimate {
                ratio,
                interval: Some((lo, hi)),
                rounds: 4,
                per_round: vec![],
                sd_log: Some(0.01),
                drift_widening_log: 0.0,
            }),
            ratio_vs_open: None,
            ratio_vs_close: None,
            tie: Some(TieTest { width, vs_best: 1.0, low: 0.9, high: if tied { 1.01 } else { 0.99 }, tied }),
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

    #[test]
    fn implausible_rates_are_no_measurement_and_a_data_problem() {
        // Every rate 1e308 tok/s: a ratio of 1.0 to the last bit, whose
        // interval rounding once put "wholly above 1.0".
        let t = crate::simulate::Template::new();
        let mut raw = crate::simulate::sweep(&t, &crate::simulate::SimConfig::default_plan(0.03, 0.11, 7));
        for l in raw.lines.iter_mut() {
            if let crate::raw::RawLine::Request(r) = l {
                r.outcome.decode_tok_per_s = Some(1e308);
            }
        }
        let s = summarize_with(&raw, false).unwrap();
        assert!(s.widths.iter().all(|w| w.not_a_measurement.as_deref().is_some_and(|m| m.contains("implausible"))));
        assert!(s.data_problems.iter().any(|p| p.what.contains("has no valid rate")), "{:?}", s.data_problems);
        assert_eq!(s.decision.width, None, "{:?}", s.decision);
        // One just under the ceiling is a rate (the ceiling, not finiteness, refused them).
        let mut r = raw.lines.iter().find_map(|l| match l {
            crate::raw::RawLine::Request(r) => Some(r.clone()),
            _ => None,
        });
        let r = r.as_mut().unwrap();
        r.outcome.decode_tok_per_s = Some(MAX_PLAUSIBLE_TOK_PER_S);
        assert_eq!(rate(r), Some(MAX_PLAUSIBLE_TOK_PER_S));
        r.outcome.decode_tok_per_s = Some(MAX_PLAUSIBLE_TOK_PER_S * 1.01);
        assert_eq!(rate(r), None);
    }

    #[test]
    fn an_interval_at_one_by_rounding_is_not_above_or_below_it() {
        let e = |lo: f64, hi: f64| crate::estimate::RatioEstimate {
            ratio: 1.0,
            interval: Some((lo, hi)),
            rounds: 4,
            per_round: vec![],
            sd_log: Some(0.0),
            drift_widening_log: 0.0,
        };
        let up = 1.0000000000000002;
        assert!(!e(up, up).above_one());
        assert!(!e(1.0 - 1e-16, 1.0 - 1e-16).below_one());
        assert!(e(1.001, 1.2).above_one() && e(0.8, 0.999).below_one());
    }

    #[test]
    fn the_rule_takes_the_narrowest_tied_width_whose_interval_is_above_one() {
        // Width 3 is best; 1 is tied but its interval reaches 1.0; 2 is tied and above.
        let d = decide(&[ws(1, 1.10, 0.98, 1.2, true), ws(2, 1.20, 1.12, 1.30, true), ws(3, 1.25, 1.1, 1.4, true)]);
        assert_eq!(d.width, Some(2));
        assert_eq!(d.best_width, Some(3));
        assert_eq!(d.tied, vec![1, 2, 3]);
        assert_eq!(d.ratio, Some(1.20));
        // A width credibly below the best is not taken, however narrow.
        let d = decide(&[ws(1, 1.10, 1.05, 1.15, false), ws(2, 1.20, 1.12, 1.30, true)]);
        assert_eq!(d.width, Some(2));
        assert_eq!(d.tied, vec![2]);
    }

    #[test]
    fn no_qualified_width_is_off_with_the_best_ratio() {
        let d = decide(&[ws(1, 0.9, 0.85, 0.95, false), ws(2, 1.02, 0.97, 1.08, true)]);
        assert_eq!(d.width, None);
        assert_eq!(d.best_width, Some(2));
        assert!(d.why.contains("no width"), "{}", d.why);
        assert_eq!(decide(&[]).width, None);
    }

    #[test]
    fn a_width_that_is_not_a_measurement_is_never_the_best_or_chosen() {
        let mut bad = ws(1, 1.5, 1.4, 1.6, true);
        bad.not_a_measurement = Some("declined".into());
        let d = decide(&[bad, ws(2, 1.2, 1.1, 1.3, true)]);
        assert_eq!((d.width, d.best_width), (Some(2), Some(2)));
    }

    #[test]
    fn first_difference_names_the_token_or_the_shorter_length() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
