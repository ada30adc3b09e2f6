//! The measurement steps: each complete arm's log rates per prompt and the
//! estimators over them ([`estimates`]), the classic brackets of each round
//! and their drift verdicts ([`rounds`]), every output against classic
//! ([`Identity`]), each width's numbers and its tie with the best
//! ([`widths`]), and the rates by prompt type ([`by_type`]).
use crate::data::plan::SpeculativeArm;
use std::collections::BTreeMap;

use crate::analysis::estimate::{self, ArmLevels, Estimates};
use crate::analysis::rules;
use crate::analysis::stats::{Stats, median, stats};
use crate::analysis::summary::{Difference, OkArms, RoundBrackets, TypeRatio, TypeRow, WidthSummary, rate};
use crate::data::raw::{Bracket, RawFile, RequestRow};

/// Each complete arm's log rates per prompt, the estimators over all
/// prompts, and the per-type ratios (the estimators over each type's
/// prompts).
pub(super) fn estimates(
    raw: &RawFile,
    reqs: &[&RequestRow],
    ok_arms: &OkArms<'_>,
    n_rounds: usize,
) -> (Estimates, Vec<TypeRatio>) {
    let h = &raw.header;
    let widths = &h.settings.design.widths;
    let prompt_ids: Vec<String> = h.prompts.iter().map(|p| p.id.clone()).collect();
    let mut position: BTreeMap<usize, usize> = BTreeMap::new();
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    for a in &h.plan {
        let n = seen.entry(a.round).or_default();
        position.insert(a.index, *n);
        *n += 1;
    }
    let mut levels: BTreeMap<usize, ArmLevels> = BTreeMap::new();
    for a in h.plan.iter().filter(|a| a.round < n_rounds && ok_arms.contains_key(&a.index)) {
        let l = ArmLevels {
            arm: a.index,
            round: a.round,
            width: a.width,
            bracket: a.bracket,
            position: position[&a.index],
            logs: BTreeMap::new(),
        };
        levels.insert(a.index, l);
    }
    for r in reqs {
        if let (Some(l), Some(x)) = (levels.get_mut(&r.arm), rate(r)) {
            l.logs.entry(r.prompt_id.clone()).or_default().push(x.ln());
        }
    }
    let levels: Vec<ArmLevels> = levels.into_values().collect();
    let est = estimate::estimate(&levels, widths, &prompt_ids);
    let mut type_ratios = Vec::new();
    for k in prompt_types(raw) {
        let ids: Vec<String> = h.prompts.iter().filter(|p| p.kind == k).map(|p| p.id.clone()).collect();
        for (w, r) in estimate::estimate(&levels, widths, &ids).ratio {
            type_ratios.push(TypeRatio { prompt_type: k.to_string(), width: w, ratio: r.ratio });
        }
    }
    (est, type_ratios)
}

/// The prompt set's task types, sorted, once each.
fn prompt_types(raw: &RawFile) -> Vec<&str> {
    let mut kinds: Vec<&str> = raw.header.prompts.iter().map(|p| p.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// Each round's classic brackets and its drift verdict (rounds with no
/// complete arm and no bracket rate are left out).
pub(super) fn rounds(
    raw: &RawFile,
    reqs: &[&RequestRow],
    ok_arms: &OkArms<'_>,
    n_rounds: usize,
    est: &Estimates,
) -> Vec<RoundBrackets> {
    let mut rounds = Vec::new();
    for round in 0..n_rounds {
        let side = |b: Bracket| -> Vec<f64> {
            reqs.iter().filter(|r| r.round == round && r.bracket == Some(b)).filter_map(|r| rate(r)).collect()
        };
        let (open_all, close_all) = (side(Bracket::Open), side(Bracket::Close));
        if open_all.is_empty()
            && close_all.is_empty()
            && !raw.header.plan.iter().any(|a| a.round == round && ok_arms.contains_key(&a.index))
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
    rounds
}

/// Greedy identity: every output against the first classic output of its prompt.
pub(super) struct Identity<'a> {
    reference: BTreeMap<&'a str, &'a RequestRow>,
}

impl<'a> Identity<'a> {
    pub(super) fn new(reqs: &[&'a RequestRow]) -> Self {
        let mut reference: BTreeMap<&str, &RequestRow> = BTreeMap::new();
        for r in reqs.iter().filter(|r| r.width.is_none()) {
            reference.entry(r.prompt_id.as_str()).or_insert(r);
        }
        Identity { reference }
    }

    /// How `r` differs from its prompt's classic output, if it does.
    pub(super) fn difference(&self, r: &RequestRow) -> Option<Difference> {
        let c = self.reference.get(r.prompt_id.as_str())?;
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
    }
}

pub(super) fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
}

/// Time to first token of the served requests among `rs`.
pub(super) fn ttft<'r>(rs: impl Iterator<Item = &'r RequestRow>) -> Option<Stats> {
    let xs: Vec<f64> = rs.filter_map(|r| r.served.as_ref().map(|s| s.ttft_ms)).filter(|x| x.is_finite()).collect();
    stats(&xs)
}

/// Each width's numbers, whether it is a measurement, its outputs against
/// classic, and its tie with the best width that is a measurement.
pub(super) fn widths(
    raw: &RawFile,
    reqs: &[&RequestRow],
    ok_arms: &OkArms<'_>,
    est: &Estimates,
    identity: &Identity<'_>,
) -> Vec<WidthSummary> {
    let h = &raw.header;
    let served = h.settings.served.is_some();
    let mut widths: Vec<WidthSummary> = h
        .settings
        .design
        .widths
        .iter()
        .map(|&w| {
            let mine: Vec<&RequestRow> = reqs.iter().copied().filter(|r| r.width == Some(w)).collect();
            let arms = h.plan.iter().filter(|a| a.width == Some(w) && ok_arms.contains_key(&a.index));
            width(w, arms.map(|a| a.index).collect(), &mine, est, identity, served)
        })
        .collect();
    // Ties against the best fixed width that is a measurement (the
    // adaptive arm is tested against it too, but is never the best).
    let best = widths
        .iter()
        .filter(|w| w.not_a_measurement.is_none() && w.width != crate::data::plan::SpeculativeArm::Adaptive)
        .filter_map(|w| w.ratio.as_ref().map(|r| (w.width, r.ratio)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(w, _)| w);
    if let Some(b) = best {
        let measured = |x: SpeculativeArm| widths.iter().any(|w| w.width == x && w.not_a_measurement.is_none());
        let ties = estimate::ties(est, b, measured);
        for t in ties {
            if let Some(w) = widths.iter_mut().find(|w| w.width == t.width) {
                w.tie = Some(t);
            }
        }
    }
    widths
}

/// One width's numbers from its requests `mine` (its tie comes later).
fn width(
    w: SpeculativeArm,
    arms: Vec<usize>,
    mine: &[&RequestRow],
    est: &Estimates,
    identity: &Identity<'_>,
    served: bool,
) -> WidthSummary {
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
    WidthSummary {
        width: w,
        arms,
        tok_per_s: stats(&rates),
        ttft_ms: ttft(mine.iter().copied()),
        batch: crate::analysis::summary::BatchSummary::of(mine.iter().copied()),
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
        differences: mine.iter().filter_map(|r| identity.difference(r)).collect(),
    }
}

/// The rates by prompt type and arm kind (classic, then each width).
pub(super) fn by_type(raw: &RawFile, reqs: &[&RequestRow]) -> Vec<TypeRow> {
    let mut by_type = Vec::new();
    let arm_kinds: Vec<Option<SpeculativeArm>> =
        std::iter::once(None).chain(raw.header.settings.design.widths.iter().map(|w| Some(*w))).collect();
    for t in prompt_types(raw) {
        for k in &arm_kinds {
            let xs: Vec<f64> =
                reqs.iter().filter(|r| r.prompt_type == t && r.width == *k).filter_map(|r| rate(r)).collect();
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
    by_type
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_names_the_token_or_the_shorter_length() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 9, 3]), Some(1));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
