//! `tuner summarize`: from raw.jsonl to the numbers a record states.
//!
//! Principal items: [`summarize`] (raw → [`Summary`]), [`DECISION_RULE`]
//! and [`DECISION_RULE_SERVED`] (fixed here, printed in every record before
//! the results), [`decide`], [`rate`] (the statistic: decode tok/s, or
//! end-to-end tok/s in a served sweep).
//! The record, CSV and plot writers are in [`crate::record`].
//!
//! Ratios are paired: a speculative request's decode tok/s is divided by the
//! median classic decode tok/s of the *same prompt* in the *same round's*
//! bracket(s), so the prompt mix cancels and a slow drift across rounds does
//! not enter the ratio.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::raw::{ArmEnd, Bracket, Halt, RawFile, RawLine, RequestRow};
use crate::stats::{Stats, median, stats};

/// The part of the decision rule after its statistic, shared by the
/// generate and served forms.
macro_rules! rule_after_statistic {
    () => {
        " whose bootstrap 95% interval of the median lies wholly above 1.0. If no width qualifies, the entry \
is `off`. The rule is applied to every width; a chosen width that is not a measurement (declined, no \
diagnostics, or zero rounds in every request), a drifted host, output that differs from classic, or a gate \
source accepted as unknown makes `tuner propose` refuse the entry."
    };
}

/// The decision rule, fixed before any result is read.
pub const DECISION_RULE: &str = concat!(
    "Choose the draft width with the highest median ratio (speculative decode tok/s over the median classic \
decode tok/s of the same prompt in the same round's two classic brackets)",
    rule_after_statistic!()
);

/// The decision rule of a served sweep (`tuner sweep --served`): the same
/// rule over the statistic a client sees.
pub const DECISION_RULE_SERVED: &str = concat!(
    "Choose the draft width with the highest median ratio (speculative end-to-end tok/s of a streamed request \
through `runtime serve`, completion tokens over the time from writing the request to `data: [DONE]`, over the \
median classic end-to-end tok/s of the same prompt in the same round's two classic brackets)",
    rule_after_statistic!()
);

/// A request's sample: its end-to-end tok/s in a served sweep, else the
/// runtime's decode tok/s; `None` when there is none (no token after the
/// first, or none at all) or it is not a positive finite number.
pub fn rate(r: &RequestRow) -> Option<f64> {
    match &r.served {
        Some(s) => s.e2e_tok_per_s,
        None => r.decode_tok_per_s,
    }
    .filter(|x| x.is_finite() && *x > 0.0)
}

/// The largest chance of a false drift verdict at which the check is trusted
/// (n >= 5 samples per bracket: 2 / C(10, 5) = 0.008).
pub const MAX_FALSE_DRIFT_CHANCE: f64 = 0.01;

/// `2 / C(2n, n)`: the chance that n exchangeable samples all land on one
/// side of n others.
pub fn false_drift_chance(n: usize) -> f64 {
    let c: f64 = (1..=n).map(|i| (n + i) as f64 / i as f64).product();
    (2.0 / c).min(1.0)
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
    pub open: Option<Stats>,
    pub close: Option<Stats>,
    /// The range of the bracket's samples, each divided by the median of its
    /// prompt's samples in both brackets (so the prompt mix does not widen
    /// it). The ranges fail to overlap only when every opening sample is
    /// faster (or slower) than every closing one: under no drift that has
    /// probability 2 / C(2n, n) for n samples per bracket.
    pub open_range: Option<(f64, f64)>,
    pub close_range: Option<(f64, f64)>,
    /// Both brackets present, enough samples to judge, and their ranges do not overlap.
    pub drifted: bool,
    /// The chance that the ranges fail to overlap with no drift at all,
    /// `2 / C(2n, n)` for `n` samples in the smaller bracket.
    pub false_drift_chance: Option<f64>,
    /// `false_drift_chance` is at most [`MAX_FALSE_DRIFT_CHANCE`]: a
    /// non-overlap means drift, and an overlap rules out a drift larger
    /// than the brackets' spread. Below that n the check cannot tell.
    pub judgeable: bool,
    /// A bracket is missing (the round did not finish).
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
    /// Against both brackets of the round (the decision uses this).
    pub ratio: Option<Stats>,
    pub ratio_vs_open: Option<Stats>,
    pub ratio_vs_close: Option<Stats>,
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
    /// The width with the highest median ratio, qualified or not.
    pub best_width: Option<usize>,
    pub ratio: Option<f64>,
    pub ratio_interval: Option<(f64, f64)>,
    pub why: String,
}

/// Sources accepted as unknown by a gate before an arm.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AcceptedUnknown {
    pub arm: usize,
    pub sources: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub date: String,
    pub drafter: String,
    /// A served sweep (`tuner sweep --served`): the rates are end-to-end tok/s.
    pub served: bool,
    /// From the arms' `startup` events (must agree across arms).
    pub device_class: Option<String>,
    pub target_quant: Option<String>,
    pub kernel_fingerprint: Option<String>,
    /// Why the record's key is not known, when it is not.
    pub key_problem: Option<String>,
    pub complete: bool,
    pub halt: Option<Halt>,
    pub arms_planned: usize,
    pub arms_complete: usize,
    /// Arms whose latest attempt failed or never ended.
    pub arms_failed: Vec<ArmEnd>,
    pub expected_requests_per_arm: usize,
    pub decision_rule: String,
    pub classic: Option<Stats>,
    /// Served sweeps: the classic requests' time to first token.
    pub classic_ttft_ms: Option<Stats>,
    pub rounds: Vec<RoundBrackets>,
    pub drift: bool,
    /// Some complete round has too few classic samples to judge drift.
    pub drift_unjudged: bool,
    pub widths: Vec<WidthSummary>,
    pub by_type: Vec<TypeRow>,
    /// Classic requests whose output differs from the first classic output of the prompt.
    pub bracket_differences: Vec<Difference>,
    pub identical: bool,
    /// Arms whose runtime forfeited exactness (`allow_inexact`) or failed its probe.
    pub inexact_arms: Vec<usize>,
    pub accepted_unknown: Vec<AcceptedUnknown>,
    pub decision: Decision,
    /// Requests with no decode tok/s (no token after the first), left out of the statistics.
    pub requests_without_rate: usize,
}

/// Arms whose latest attempt ended ok: arm → (attempt, its `arm_end`).
type OkArms<'a> = BTreeMap<usize, (usize, &'a ArmEnd)>;

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
            RawLine::Request(r) if ok.get(&r.arm).is_some_and(|(a, _)| *a == r.attempt) => Some(r),
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

fn range(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    Some((xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(f64::NEG_INFINITY, f64::max)))
}

/// Applies [`DECISION_RULE`] to the widths.
pub fn decide(widths: &[WidthSummary]) -> Decision {
    let with_ratio: Vec<(&WidthSummary, &Stats)> =
        widths.iter().filter_map(|w| w.ratio.as_ref().map(|r| (w, r))).collect();
    let best = with_ratio.iter().max_by(|a, b| a.1.median.total_cmp(&b.1.median));
    let qualified = with_ratio.iter().filter(|(_, r)| r.ci_low > 1.0).max_by(|a, b| a.1.median.total_cmp(&b.1.median));
    match (qualified, best) {
        (Some((w, r)), _) => Decision {
            width: Some(w.width),
            best_width: best.map(|b| b.0.width),
            ratio: Some(r.median),
            ratio_interval: Some((r.ci_low, r.ci_high)),
            why: format!(
                "width {} has the highest median ratio among the widths whose interval lies wholly above 1.0: \
                 {:.3} [{:.3}, {:.3}]",
                w.width, r.median, r.ci_low, r.ci_high
            ),
        },
        (None, Some((w, r))) => Decision {
            width: None,
            best_width: Some(w.width),
            ratio: Some(r.median),
            ratio_interval: Some((r.ci_low, r.ci_high)),
            why: format!(
                "no width's interval lies wholly above 1.0; the best median ratio is width {}: {:.3} [{:.3}, {:.3}]",
                w.width, r.median, r.ci_low, r.ci_high
            ),
        },
        (None, None) => Decision {
            width: None,
            best_width: None,
            ratio: None,
            ratio_interval: None,
            why: "no width has a ratio (no complete speculative arm with its brackets)".into(),
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
    let h = &raw.header;
    let (reqs, ok_arms, arms_failed) = complete_requests(raw);
    let plan_by_index: BTreeMap<usize, &crate::raw::PlannedArm> = h.plan.iter().map(|a| (a.index, a)).collect();
    for r in &reqs {
        match plan_by_index.get(&r.arm) {
            Some(p) if p.width == r.width && p.round == r.round && p.bracket == r.bracket => {}
            _ => bail!("raw.jsonl: a request of arm {} does not match the plan in the header", r.arm),
        }
    }

    // The record's key and validity, from the startup events of complete arms.
    let mut device = BTreeSet::new();
    let mut quant = BTreeSet::new();
    let mut fingerprint = BTreeSet::new();
    let mut inexact_arms = Vec::new();
    for l in &raw.lines {
        if let RawLine::Startup(s) = l
            && ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
        {
            device.insert(s.startup.device_class.clone());
            quant.insert(s.startup.target.quant.class.clone());
            fingerprint.insert(s.startup.kernel_fingerprint.clone());
            let probe_failed = s.startup.exactness_probe.as_ref().is_some_and(|p| !p.passed);
            if s.startup.allow_inexact || probe_failed {
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

    let served = h.settings.served.is_some();
    let ttft = |rs: &mut dyn Iterator<Item = &&RequestRow>| -> Option<Stats> {
        let xs: Vec<f64> = rs.filter_map(|r| r.served.as_ref().map(|s| s.ttft_ms)).filter(|x| x.is_finite()).collect();
        stats(&xs)
    };
    let requests_without_rate = reqs.iter().filter(|r| rate(r).is_none()).count();

    // Classic samples per (round, bracket, prompt).
    let mut classic: BTreeMap<(usize, Bracket, &str), Vec<f64>> = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.width.is_none()) {
        if let (Some(b), Some(x)) = (r.bracket, rate(r)) {
            classic.entry((r.round, b, r.prompt_id.as_str())).or_default().push(x);
        }
    }
    let prompt_ids: Vec<&str> = h.prompts.iter().map(|p| p.id.as_str()).collect();
    let bracket_median = |round: usize, b: Option<Bracket>, p: &str| -> Option<f64> {
        let xs: Vec<f64> = match b {
            Some(b) => classic.get(&(round, b, p)).cloned().unwrap_or_default(),
            None => [Bracket::Open, Bracket::Close]
                .iter()
                .flat_map(|b| classic.get(&(round, *b, p)).cloned().unwrap_or_default())
                .collect(),
        };
        (!xs.is_empty()).then(|| median(&xs))
    };

    let mut rounds = Vec::new();
    for round in 0..h.settings.rounds {
        let all = |b: Bracket| -> Vec<f64> {
            prompt_ids.iter().flat_map(|p| classic.get(&(round, b, *p)).cloned().unwrap_or_default()).collect()
        };
        // Each sample over its prompt's median in both brackets of the round.
        let norm = |b: Bracket| -> Vec<f64> {
            prompt_ids
                .iter()
                .filter_map(|p| {
                    let m = bracket_median(round, None, p)?;
                    Some(classic.get(&(round, b, *p))?.iter().map(|x| x / m).collect::<Vec<f64>>())
                })
                .flatten()
                .collect()
        };
        let (open_all, close_all) = (all(Bracket::Open), all(Bracket::Close));
        let (open_range, close_range) = (range(&norm(Bracket::Open)), range(&norm(Bracket::Close)));
        let incomplete = open_all.is_empty() || close_all.is_empty();
        let chance = (!incomplete).then(|| false_drift_chance(open_all.len().min(close_all.len())));
        let judgeable = chance.is_some_and(|c| c <= MAX_FALSE_DRIFT_CHANCE);
        // Below the judgeable n a non-overlap is as likely noise as drift: "cannot judge".
        let drifted = match (open_range, close_range) {
            (Some(o), Some(c)) if judgeable => o.1 < c.0 || c.1 < o.0,
            _ => false,
        };
        if open_all.is_empty()
            && close_all.is_empty()
            && !h.plan.iter().any(|a| a.round == round && ok_arms.contains_key(&a.index))
        {
            continue;
        }
        rounds.push(RoundBrackets {
            round,
            open: stats(&open_all),
            close: stats(&close_all),
            open_range,
            close_range,
            drifted,
            false_drift_chance: chance,
            judgeable,
            incomplete,
        });
    }
    let drift = rounds.iter().any(|r| r.drifted);
    let drift_unjudged = rounds.iter().any(|r| !r.incomplete && !r.judgeable);
    let classic_all: Vec<f64> = reqs.iter().filter(|r| r.width.is_none()).filter_map(|r| rate(r)).collect();

    // Greedy identity: every output against the first classic output of its prompt.
    let mut reference: BTreeMap<&str, &RequestRow> = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.width.is_none()) {
        reference.entry(r.prompt_id.as_str()).or_insert(r);
    }
    let diff_of = |r: &RequestRow| -> Option<Difference> {
        let c = reference.get(r.prompt_id.as_str())?;
        let pos = first_difference(&c.token_ids, &r.token_ids);
        let text_identical = c.text_sha256 == r.text_sha256;
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
    for &w in &h.settings.widths {
        let mine: Vec<&&RequestRow> = reqs.iter().filter(|r| r.width == Some(w)).collect();
        let arms: Vec<usize> =
            h.plan.iter().filter(|a| a.width == Some(w) && ok_arms.contains_key(&a.index)).map(|a| a.index).collect();
        let rates: Vec<f64> = mine.iter().filter_map(|r| rate(r)).collect();
        let ratio_vs = |b: Option<Bracket>| -> Vec<f64> {
            mine.iter().filter_map(|r| Some(rate(r)? / bracket_median(r.round, b, &r.prompt_id)?)).collect()
        };
        // The pooled ratio needs both brackets of the round.
        let both: Vec<f64> = mine
            .iter()
            .filter(|r| {
                bracket_median(r.round, Some(Bracket::Open), &r.prompt_id).is_some()
                    && bracket_median(r.round, Some(Bracket::Close), &r.prompt_id).is_some()
            })
            .filter_map(|r| Some(rate(r)? / bracket_median(r.round, None, &r.prompt_id)?))
            .collect();
        let diags: Vec<&runtime::events::SpeculativeDiagnostics> =
            mine.iter().filter_map(|r| r.diagnostics.as_ref()).collect();
        let drafted: usize = diags.iter().map(|d| d.drafted).sum();
        let accepted: usize = diags.iter().map(|d| d.accepted).sum();
        let epv: Vec<f64> = diags.iter().filter_map(|d| d.emitted_per_verify).collect();
        let vpr: Vec<f64> = diags.iter().filter_map(|d| d.verify_ms_per_round).collect();
        let declined = mine.iter().filter(|r| r.declined).count();
        let without_diagnostics = mine.iter().filter(|r| !r.diagnostics_present).count();
        let zero_round_requests = diags.iter().filter(|d| d.rounds == 0).count();
        let not_a_measurement = if mine.is_empty() {
            Some("no complete arm".to_string())
        } else if declined > 0 {
            let reason = mine.iter().find_map(|r| r.declined_reason.clone()).unwrap_or_default();
            Some(format!("{declined} of {} requests declined to classic decoding ({reason})", mine.len()))
        } else if without_diagnostics > 0 {
            Some(format!("{without_diagnostics} of {} requests have no speculative diagnostics", mine.len()))
        } else if zero_round_requests == mine.len() {
            Some(format!("every one of its {} requests ran zero speculative rounds", mine.len()))
        } else {
            None
        };
        widths.push(WidthSummary {
            width: w,
            arms,
            tok_per_s: stats(&rates),
            ttft_ms: ttft(&mut mine.iter().copied()),
            ratio: stats(&both),
            ratio_vs_open: stats(&ratio_vs(Some(Bracket::Open))),
            ratio_vs_close: stats(&ratio_vs(Some(Bracket::Close))),
            acceptance: (drafted > 0).then(|| accepted as f64 / drafted as f64),
            emitted_per_verify: (!epv.is_empty()).then(|| median(&epv)),
            verify_ms_per_round: (!vpr.is_empty()).then(|| median(&vpr)),
            requests: mine.len(),
            declined,
            without_diagnostics,
            zero_round_requests,
            not_a_measurement,
            differences: mine.iter().filter_map(|r| diff_of(r)).collect(),
        });
    }

    let mut by_type = Vec::new();
    let mut types: Vec<&str> = h.prompts.iter().map(|p| p.kind.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let arm_kinds: Vec<Option<usize>> =
        std::iter::once(None).chain(h.settings.widths.iter().map(|w| Some(*w))).collect();
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
                sources: s.gate.report.verdict.accepted_unknown.iter().map(|a| a.source.name().to_string()).collect(),
            });
        }
    }
    let halt = raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Halt(h) => Some(h.clone()),
        _ => None,
    });
    let complete = raw.lines.iter().any(|l| matches!(l, RawLine::Done(_))) && ok_arms.len() == h.plan.len();
    let identical = bracket_differences.is_empty() && widths.iter().all(|w| w.differences.is_empty());
    let decision = decide(&widths);
    Ok(Summary {
        date: h.date.clone(),
        drafter: h.settings.drafter.clone(),
        served,
        device_class,
        target_quant,
        kernel_fingerprint,
        key_problem: (!key_problems.is_empty()).then(|| key_problems.join("; ")),
        complete,
        halt: if complete { None } else { halt },
        arms_planned: h.plan.len(),
        arms_complete: ok_arms.len(),
        arms_failed,
        expected_requests_per_arm: h.prompts.len() * h.settings.bursts,
        decision_rule: if served { DECISION_RULE_SERVED } else { DECISION_RULE }.to_string(),
        classic: stats(&classic_all),
        classic_ttft_ms: ttft(&mut reqs.iter().filter(|r| r.width.is_none())),
        rounds,
        drift,
        drift_unjudged,
        widths,
        by_type,
        bracket_differences,
        identical,
        inexact_arms,
        accepted_unknown,
        decision,
        requests_without_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(width: usize, median: f64, lo: f64, hi: f64) -> WidthSummary {
        WidthSummary {
            width,
            arms: vec![],
            tok_per_s: None,
            ttft_ms: None,
            ratio: Some(Stats { n: 10, min: lo, median, max: hi, ci_low: lo, ci_high: hi, outliers: 0 }),
            ratio_vs_open: None,
            ratio_vs_close: None,
            acceptance: None,
            emitted_per_verify: None,
            verify_ms_per_round: None,
            requests: 10,
            declined: 0,
            without_diagnostics: 0,
            zero_round_requests: 0,
            not_a_measurement: None,
            differences: vec![],
        }
    }

    #[test]
    fn the_rule_takes_the_best_qualified_width_not_the_best_median() {
        // Width 3 has the best median but its interval reaches below 1.0.
        let d = decide(&[ws(1, 1.10, 1.05, 1.15), ws(2, 1.20, 1.12, 1.30), ws(3, 1.25, 0.95, 1.6)]);
        assert_eq!(d.width, Some(2));
        assert_eq!(d.best_width, Some(3));
        assert_eq!(d.ratio, Some(1.20));
    }

    #[test]
    fn no_qualified_width_is_off_with_the_best_ratio() {
        let d = decide(&[ws(1, 0.9, 0.85, 0.95), ws(2, 1.02, 0.97, 1.08)]);
        assert_eq!(d.width, None);
        assert_eq!(d.best_width, Some(2));
        assert!(d.why.contains("no width"), "{}", d.why);
        assert_eq!(decide(&[]).width, None);
    }

    #[test]
    fn the_false_drift_chance_is_two_over_the_central_binomial() {
        assert_eq!(false_drift_chance(1), 1.0);
        assert!((false_drift_chance(3) - 0.1).abs() < 1e-12);
        assert!((false_drift_chance(5) - 2.0 / 252.0).abs() < 1e-12);
        assert!(false_drift_chance(4) > MAX_FALSE_DRIFT_CHANCE && false_drift_chance(5) <= MAX_FALSE_DRIFT_CHANCE);
    }

    #[test]
    fn first_difference_names_the_token_or_the_shorter_length() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
