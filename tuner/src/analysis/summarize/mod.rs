//! `tuner summarize`: from raw.jsonl to the numbers a record states
//! ([`crate::analysis::summary::Summary`]), applying the rules ([`crate::analysis::rules`]) on
//! the way. The types of a summary, the decision rule and its application
//! ([`crate::analysis::decision::decide`]) are in [`crate::analysis::summary`], below the rules
//! that read them.
mod cost;
mod host;
mod key;
mod widths;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};

use crate::analysis::decision::{DECISION_RULE, DECISION_RULE_SERVED, decide, drift_survival};
use crate::analysis::estimate;
use crate::analysis::rules;
use crate::analysis::stats::stats;
use crate::analysis::summary::*;
use crate::data::raw::{ArmEnd, RawFile, RawLine, RequestRow};

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

/// Summarizes a sweep directory's raw.jsonl.
pub fn summarize_dir(dir: &Path) -> Result<(RawFile, Summary)> {
    let raw = crate::data::raw::read_raw(&dir.join("raw.jsonl"))?;
    let s = summarize(&raw)?;
    Ok((raw, s))
}

pub fn summarize(raw: &RawFile) -> Result<Summary> {
    summarize_with(raw, true)
}

/// The arms a summary covers: `--rounds auto` may have stopped before the
/// plan's last round, and the arms of later rounds are not part of the
/// sweep.
struct Scope<'a> {
    settled: Option<crate::data::raw::Settled>,
    n_rounds: usize,
    /// The plan's arms in those rounds.
    arms_planned: usize,
    /// The requests of the complete arms' latest attempts in those rounds.
    reqs: Vec<&'a RequestRow>,
    ok_arms: OkArms<'a>,
    arms_failed: Vec<ArmEnd>,
}

fn scope(raw: &RawFile) -> Result<Scope<'_>> {
    let h = &raw.header;
    let settled = raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Settled(x) => Some(x.clone()),
        _ => None,
    });
    let n_rounds = settled.as_ref().map_or(h.settings.design.rounds, |x| x.rounds.min(h.settings.design.rounds));
    let arms_planned = h.plan.iter().filter(|a| a.round < n_rounds).count();
    let (mut reqs, ok_arms, arms_failed) = complete_requests(raw);
    reqs.retain(|r| r.round < n_rounds);
    let plan_by_index: BTreeMap<usize, &crate::data::raw::PlannedArm> = h.plan.iter().map(|a| (a.index, a)).collect();
    for r in &reqs {
        match plan_by_index.get(&r.arm) {
            Some(p) if p.width == r.width && p.round == r.round && p.bracket == r.bracket => {}
            _ => bail!("raw.jsonl: a request of arm {} does not match the plan in the header", r.arm),
        }
    }
    Ok(Scope { settled, n_rounds, arms_planned, reqs, ok_arms, arms_failed })
}

/// [`summarize`], with or without the bootstrap of the decision's stability
/// (the calibration's thousands of synthetic sweeps go without: it is the
/// slow part, and they measure the rest). The steps: the arms in scope, the
/// raw data against the plan, the key, the estimators, the rounds and their
/// drift, identity against classic, the widths, the rates by type, the
/// host, the decision.
pub fn summarize_with(raw: &RawFile, with_stability: bool) -> Result<Summary> {
    let h = &raw.header;
    let st = &h.settings.design;
    let sc = scope(raw)?;
    let data_problems = rules::data_problems(raw, &sc.ok_arms);
    let key = key::key(raw, &sc.ok_arms);
    let (est, type_ratios) = widths::estimates(raw, &sc.reqs, &sc.ok_arms, sc.n_rounds);
    let rounds = widths::rounds(raw, &sc.reqs, &sc.ok_arms, sc.n_rounds, &est);
    let sweep_drift = est.sweep_drift.clone();
    let bracket_arms_to_detect = match (&sweep_drift, est.bracket_arm_variance_log) {
        (Some(d), Some(v)) => Some(estimate::bracket_arms_for(v, d.rounds, d.critical_t, estimate::DRIFT_TO_DETECT)),
        _ => None,
    };
    let identity = widths::Identity::new(&sc.reqs);
    let classic_reqs = || sc.reqs.iter().copied().filter(|r| r.width.is_none());
    let bracket_differences: Vec<Difference> = classic_reqs().filter_map(|r| identity.difference(r)).collect();
    let widths = widths::widths(raw, &sc.reqs, &sc.ok_arms, &est, &identity);
    let host = host::host(raw, &sc.ok_arms);
    let complete = raw.lines.iter().any(|l| matches!(l, RawLine::Done(_)))
        && h.plan.iter().filter(|a| a.round < sc.n_rounds).all(|a| sc.ok_arms.contains_key(&a.index));
    let drifted = rounds.iter().any(|r| r.drifted) || sweep_drift.as_ref().is_some_and(|d| d.drifted);
    let (decision, drift_survival) = if drifted {
        let bound = est.bracket_arm_variance_log.map(|v| estimate::survivable_drift_log(v, est.process_variance_df));
        let size = crate::analysis::decision::drift_size(&rounds, sweep_drift.as_ref(), bound);
        let (s, d) = drift_survival(&widths, &decide(&widths), size);
        (d, Some(s))
    } else {
        (decide(&widths), None)
    };
    let stability = if with_stability {
        crate::analysis::stability::stability(&widths, decision.width, h.started_at_unix_ms)
    } else {
        None
    };
    let served = h.settings.served.is_some();
    let key_problem = (!key.problems.is_empty()).then(|| key.problems.join("; "));
    let concurrency = h.settings.served.as_ref().map_or(1, |sv| sv.concurrency);
    let policy_key = key.policy_key(h.settings.drafter, key_problem.as_deref(), concurrency);
    Ok(Summary {
        date: h.date.clone(),
        drafter: h.settings.drafter,
        served,
        concurrency,
        batch: crate::analysis::summary::BatchSummary::of(sc.reqs.iter().copied()),
        device_class: key.device_class,
        target_quant: key.target_quant,
        target_quant_format: key.target_quant_format,
        threads: key.threads,
        drafter_settings: key.drafter_settings,
        weight_formats: key.weight_formats,
        kernel_fingerprint: key.kernel_fingerprint,
        verify_fingerprint: key.verify_fingerprint,
        host_class: key.host_class,
        host_class_from: key.host_class_from,
        model: key.model,
        model_file: key.model_file,
        key: policy_key,
        key_problem,
        complete,
        halt: if complete { None } else { last_halt(raw) },
        arms_planned: sc.arms_planned,
        duration_s: raw.lines.iter().rev().find_map(|l| match l {
            RawLine::Done(d) => Some(d.at_unix_ms.saturating_sub(h.started_at_unix_ms) as f64 / 1e3),
            _ => None,
        }),
        auto_rounds: sc.settled,
        arms_complete: sc.ok_arms.len(),
        arms_failed: sc.arms_failed,
        expected_requests_per_arm: h.prompts.len() * st.bursts,
        expected_requests_per_bracket_arm: h.prompts.len() * st.bursts_of(None),
        decision_rule: {
            let rule = if served { DECISION_RULE_SERVED } else { DECISION_RULE };
            if raw.header.settings.design.has_adaptive_arm() {
                format!("{rule}{}", crate::analysis::decision::ADAPTIVE_RULE)
            } else {
                rule.to_string()
            }
        },
        classic: stats(&classic_reqs().filter_map(rate).collect::<Vec<f64>>()),
        classic_ttft_ms: widths::ttft(classic_reqs()),
        classic_batch: crate::analysis::summary::BatchSummary::of(classic_reqs()),
        complete_rounds: rounds.iter().filter(|r| !r.incomplete).count(),
        drift: drifted,
        drift_unjudged: rounds.iter().any(|r| !r.incomplete && !r.judgeable),
        rounds,
        sweep_drift,
        bracket_arms_to_detect,
        drift_tolerance: estimate::DRIFT_TOLERANCE,
        drift_false_alarm: estimate::DRIFT_FALSE_ALARM,
        request_noise: est.request_noise,
        process_spread: est.process_spread,
        process_spread_df: est.process_variance_df,
        data_problems,
        contention_reruns: host.contention_reruns,
        during_arm_samples: host.during_arm_samples,
        arms_without_during_check: host.unwatched_arms.len(),
        unwatched_arms: host.unwatched_arms,
        by_type: widths::by_type(raw, &sc.reqs),
        type_ratios,
        identical: bracket_differences.is_empty() && widths.iter().all(|w| w.differences.is_empty()),
        widths,
        bracket_differences,
        inexact_arms: key.inexact_arms,
        accepted_unknown: host.accepted_unknown,
        decision,
        drift_survival,
        stability,
        requests_without_rate: sc.reqs.iter().filter(|r| rate(r).is_none()).count(),
        verify_cost: cost::curves(raw, sc.n_rounds),
    })
}

/// The sweep's last halt line, if any.
fn last_halt(raw: &RawFile) -> Option<crate::data::raw::Halt> {
    raw.lines.iter().rev().find_map(|l| match l {
        RawLine::Halt(h) => Some(h.clone()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::estimate::{RatioEstimate, TieTest};
    use crate::data::plan::{SpeculativeArm, arm, arms};

    fn ws(width: SpeculativeArm, ratio: f64, lo: f64, hi: f64, tied: bool) -> WidthSummary {
        let r = RatioEstimate {
            ratio,
            interval: Some((lo, hi)),
            rounds: 4,
            per_round: vec![],
            sd_log: Some(0.01),
            drift_widening_log: 0.0,
        };
        let tie = TieTest { width, vs_best: 1.0, low: 0.9, high: if tied { 1.01 } else { 0.99 }, tied };
        WidthSummary::estimated(width, Some(r), tie)
    }

    #[test]
    fn an_interval_at_one_by_rounding_is_not_above_or_below_it() {
        let e = |lo: f64, hi: f64| crate::analysis::estimate::RatioEstimate {
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
        let d = decide(&[
            ws(arm(1), 1.10, 0.98, 1.2, true),
            ws(arm(2), 1.20, 1.12, 1.30, true),
            ws(arm(3), 1.25, 1.1, 1.4, true),
        ]);
        assert_eq!(d.width, Some(arm(2)));
        assert_eq!(d.best_width, Some(arm(3)));
        assert_eq!(d.tied, arms(&[1, 2, 3]));
        assert_eq!(d.ratio, Some(1.20));
        // A width credibly below the best is not taken, however narrow.
        let d = decide(&[ws(arm(1), 1.10, 1.05, 1.15, false), ws(arm(2), 1.20, 1.12, 1.30, true)]);
        assert_eq!(d.width, Some(arm(2)));
        assert_eq!(d.tied, arms(&[2]));
    }

    #[test]
    fn no_qualified_width_is_off_with_the_best_ratio() {
        let d = decide(&[ws(arm(1), 0.9, 0.85, 0.95, false), ws(arm(2), 1.02, 0.97, 1.08, true)]);
        assert_eq!(d.width, None);
        assert_eq!(d.best_width, Some(arm(2)));
        assert!(d.why.contains("no width"), "{}", d.why);
        assert_eq!(decide(&[]).width, None);
    }

    #[test]
    fn the_adaptive_arm_is_chosen_only_when_tied_with_the_best_fixed_width_and_above_one() {
        use crate::data::plan::SpeculativeArm::Adaptive as A;
        let fixed = || {
            vec![
                ws(arm(1), 1.10, 0.98, 1.2, true),
                ws(arm(2), 1.20, 1.12, 1.30, true),
                ws(arm(3), 1.25, 1.1, 1.4, true),
            ]
        };
        // Tied with the best fixed width (3) and above 1.0: chosen, though
        // its ratio is below the best's and width 2 qualifies.
        let mut w = fixed();
        w.push(ws(A, 1.22, 1.15, 1.30, true));
        let d = decide(&w);
        assert_eq!((d.width, d.best_width, d.ratio), (Some(A), Some(arm(3)), Some(1.22)));
        assert!(d.why.contains("the fixed widths alone: width 2"), "{}", d.why);
        assert!(d.why.contains("the best fixed width 3 (1.250)"), "{}", d.why);
        // Faster than every fixed width: still the best is the best fixed one.
        let mut w = fixed();
        w.push(ws(A, 1.40, 1.3, 1.5, true));
        let d = decide(&w);
        assert_eq!((d.width, d.best_width), (Some(A), Some(arm(3))));
        // Credibly slower than the best fixed width: the fixed choice stands, saying why.
        let mut w = fixed();
        w.push(ws(A, 1.15, 1.1, 1.2, false));
        let d = decide(&w);
        assert_eq!(d.width, Some(arm(2)));
        assert!(d.why.contains("the adaptive arm is not chosen: credibly slower"), "{}", d.why);
        // Tied but its interval reaches 1.0: not chosen.
        let mut w = fixed();
        w.push(ws(A, 1.1, 0.99, 1.3, true));
        assert_eq!(decide(&w).width, Some(arm(2)));
        // Not a measurement: not chosen, and named.
        let mut a = ws(A, 1.3, 1.2, 1.4, true);
        a.not_a_measurement = Some("declined".into());
        let mut w = fixed();
        w.push(a);
        let d = decide(&w);
        assert_eq!(d.width, Some(arm(2)));
        assert!(d.why.contains("not a measurement (declined)"), "{}", d.why);
        // The fixed widths off, the adaptive arm tied and above 1.0: chosen.
        let d = decide(&[ws(arm(1), 1.02, 0.97, 1.08, true), ws(A, 1.05, 1.01, 1.09, true)]);
        assert_eq!(d.width, Some(A));
        assert!(d.why.contains("the fixed widths alone: off"), "{}", d.why);
    }

    #[test]
    fn a_width_that_is_not_a_measurement_is_never_the_best_or_chosen() {
        let mut bad = ws(arm(1), 1.5, 1.4, 1.6, true);
        bad.not_a_measurement = Some("declined".into());
        let d = decide(&[bad, ws(arm(2), 1.2, 1.1, 1.3, true)]);
        assert_eq!((d.width, d.best_width), (Some(arm(2)), Some(arm(2))));
    }
}
