//! `tuner check` (issue 54): whether an entry measured (or predicted) on an
//! earlier build still holds on this one, from a short sweep of this build
//! on the entry's host: the entry's arm and its two neighbours between
//! classic brackets, with the verify-cost processes of a sweep. Two tests,
//! both must pass:
//!
//! - **the verify pass's cost did not move**: over every point of the
//!   entry's `verify_cost` curves that the check timed too (each context,
//!   each pass of two rows up to the check's widest arm's), the mean of
//!   `|ln(check / entry)|` is at most
//!   [`CURVE_TOLERANCE`] (a real change of the verify path, such as
//!   `DRAFTWISE_MULTIROW=0` routing a block through one row at a time,
//!   moves it by far more: the tests show it);
//! - **the speed agrees**: the check's interval for the entry's arm
//!   overlaps the entry's interval, and no neighbour is credibly faster
//!   than the entry's arm (the arm is the check's best or tied with it, by
//!   the sweep's own tie test).
//!
//! An `off` entry (no arm beat classic credibly when it was measured, so
//! runs decode classically) is checked at widths 1 and 2, the arms whose
//! verify pass costs least: the cost test as above, and the check's own
//! decision must be `off` too (no arm's interval wholly above 1.0 by the
//! sweep's rule). A check cannot prove the entry's "nothing is faster"
//! with three rounds, only fail to refute it; the cost test is what
//! catches a changed verify path, and an `off` wrongly kept costs
//! classic decoding, never a slowdown against it.
//!
//! A check that passes re-blesses the entry for this build's fingerprint
//! (the entry gains `check = { verify_fingerprint, record, date }`); one
//! that fails says which test and by how much, and the entry stays unused
//! until a sweep.
use serde::Serialize;

use crate::analysis::summary::Summary;
use crate::data::plan::SpeculativeArm;

/// The largest mean log deviation of the verify-cost curve a check accepts
/// (about 12 %: three processes on a shared 2-core host scatter by about
/// 5 % a point).
pub const CURVE_TOLERANCE: f64 = 0.12;

/// The arms a check runs for an entry's drafting: the entry's arm and its
/// neighbours (an adaptive entry: the adaptive arm with the widest fixed
/// width and the one below it; the adaptive arm's cap stays the entry's).
pub fn arms_for(drafting: policy::Drafting) -> Vec<SpeculativeArm> {
    let fixed = |n: usize| SpeculativeArm::fixed(n).ok();
    match drafting {
        policy::Drafting::Fixed(w) => {
            let n = w.get();
            [n.checked_sub(1).filter(|&m| m >= 1), Some(n), Some(n + 1).filter(|&m| m <= policy::MAX_WIDTH)]
                .into_iter()
                .flatten()
                .filter_map(fixed)
                .collect()
        }
        policy::Drafting::Adaptive { max } => {
            let n = max.get();
            let mut a: Vec<SpeculativeArm> =
                [n.checked_sub(1).filter(|&m| m >= 1), Some(n)].into_iter().flatten().filter_map(fixed).collect();
            a.push(SpeculativeArm::Adaptive);
            a
        }
    }
}

/// The arms a check runs for an `off` entry: widths 1 and 2.
pub fn arms_for_off() -> Vec<SpeculativeArm> {
    [1, 2].into_iter().filter_map(|n| SpeculativeArm::fixed(n).ok()).collect()
}

/// The arms a check runs for an entry's drafting (`None`: off).
pub fn arms_of(drafting: Option<policy::Drafting>) -> Vec<SpeculativeArm> {
    drafting.map_or_else(arms_for_off, arms_for)
}

/// An arm as the verdicts name it: `width N` or `the adaptive arm`.
fn arm_name(a: SpeculativeArm) -> String {
    a.width().map_or_else(|| "the adaptive arm".to_string(), |n| format!("width {n}"))
}

/// The check's verdict on an entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Mean and largest `|ln(check / entry)|` over the curve points compared.
    pub curve_mean_log: Option<f64>,
    pub curve_max_log: Option<f64>,
    pub curve_points: usize,
    /// The check's ratio and interval for the entry's arm.
    pub ratio: Option<f64>,
    pub interval: Option<(f64, f64)>,
    pub best: Option<SpeculativeArm>,
    pub tied: Vec<SpeculativeArm>,
    /// Every failed test, in words; empty when the entry holds.
    pub failures: Vec<String>,
}

impl Verdict {
    pub fn holds(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Judges `entry` by the check sweep's summary `s`.
pub fn judge(entry: &policy::Entry, s: &Summary) -> Verdict {
    let mut failures = Vec::new();
    // The curve: the check's geometric mean per point against the entry's.
    let mut devs = Vec::new();
    for ec in &entry.verify_cost {
        let Some(cc) = s.verify_cost.iter().find(|c| c.context == ec.context) else {
            failures.push(format!("the check measured no verify cost at context {}", ec.context));
            continue;
        };
        // The passes both measured: the check times up to its widest arm's
        // pass (the entry's width and the one above it), the rows the entry's
        // runs use.
        let before = devs.len();
        for (i, &old) in ec.relative.iter().enumerate().skip(1) {
            if let Some(p) = cc.points.iter().find(|p| p.rows == i + 1) {
                devs.push((p.relative / old).ln().abs());
            }
        }
        if devs.len() == before {
            failures.push(format!("the check measured no pass of two rows or more at context {}", ec.context));
        }
    }
    if entry.verify_cost.is_empty() {
        failures
            .push("the entry carries no verify-cost curve to compare with; re-measure it with `tuner sweep`".into());
    }
    let curve_mean_log = (!devs.is_empty()).then(|| devs.iter().sum::<f64>() / devs.len() as f64);
    let curve_max_log = devs.iter().copied().reduce(f64::max);
    if let Some(m) = curve_mean_log
        && m > CURVE_TOLERANCE
    {
        failures.push(format!(
            "the verify pass's cost moved: its curve differs from the entry's by {:.0}% on average (largest {:.0}%), \
             more than the {:.0}% a check accepts",
            (m.exp() - 1.0) * 100.0,
            (curve_max_log.unwrap_or(m).exp() - 1.0) * 100.0,
            (CURVE_TOLERANCE.exp() - 1.0) * 100.0
        ));
    }
    // What the check measured must be a measurement: every arm's output
    // byte-identical to classic, every arm a measurement of speculation
    // (none declined), the raw data as planned, no drift it does not
    // survive. A check that fails here says nothing either way; it is
    // refused, to be run again.
    for x in &s.widths {
        if let Some(why) = &x.not_a_measurement {
            failures.push(format!("the check's arm at {} is not a measurement: {why}", arm_name(x.width)));
        }
        if !x.differences.is_empty() {
            failures.push(format!(
                "the check's arm at {} gave output that differs from classic decoding ({} completion(s))",
                arm_name(x.width),
                x.differences.len()
            ));
        }
    }
    if !s.data_problems.is_empty() {
        failures.push(format!("the check's raw data has {} problem(s) (its record lists them)", s.data_problems.len()));
    }
    // Drift the decision survives (both one-sided decisions make the same
    // choice, the record's "survives the drift") is the sweep's own rule;
    // drift it does not survive leaves the check's numbers unfounded.
    if s.drift && !s.drift_survival.as_ref().is_some_and(|d| d.survives) {
        failures.push(
            "the check's classic brackets drifted and its decision does not survive it (its record says where): \
             run it again"
                .into(),
        );
    }
    // The speed of the entry's arm (an `off` entry: the check's best arm's).
    let arm = entry.drafting.map(SpeculativeArm::of);
    let w = arm.or(s.decision.best_width).and_then(|a| s.widths.iter().find(|x| x.width == a));
    let est = w.and_then(|x| x.ratio.as_ref());
    let (ratio, interval) = (est.map(|e| e.ratio), est.and_then(|e| e.interval));
    let [lo, hi] = entry.ratio_interval;
    match (arm, interval) {
        (None, _) => {
            if let Some(a) = s.decision.width {
                let a = arm_name(a);
                failures.push(format!(
                    "the entry is off, but the check chose {a}: {} [{}] ({}); re-measure it with `tuner sweep`",
                    s.decision.ratio.map_or("-".into(), |r| format!("{r:.3}")),
                    s.decision.ratio_interval.map_or("-".into(), |(l, h)| format!("{l:.3}, {h:.3}")),
                    s.decision.why
                ));
            }
            if s.decision.best_width.is_none() || interval.is_none() {
                failures.push("the check gave no interval for any arm (too few rounds, or no data)".into());
            }
        }
        (Some(a), None) => failures.push(format!("the check gave no interval for {a} (too few rounds, or no data)")),
        (Some(a), Some((clo, chi))) => {
            if chi < lo || clo > hi {
                failures.push(format!(
                    "{a} ran {:.3} [{clo:.3}, {chi:.3}] in the check, outside the entry's [{lo:.3}, {hi:.3}]",
                    ratio.unwrap_or(f64::NAN)
                ));
            }
            // The arm's own paired tie test against the check's best: the
            // decision's `tied` lists fixed widths only, so an adaptive
            // entry tied with the best fixed width is found here (until
            // 2026-12-07 it was not, and every adaptive entry was refused).
            let best = s.decision.best_width;
            let tied = w.and_then(|x| x.tie.as_ref()).is_some_and(|t| t.tied);
            if best != Some(a) && !tied && !s.decision.tied.contains(&a) && s.decision.width != Some(a) {
                failures.push(format!(
                    "{} is not the check's best nor tied with it: {} is credibly faster",
                    arm_name(a),
                    best.map_or("classic".into(), arm_name)
                ));
            }
        }
    }
    Verdict {
        curve_mean_log,
        curve_max_log,
        curve_points: devs.len(),
        ratio,
        interval,
        best: s.decision.best_width,
        tied: s.decision.tied.clone(),
        failures,
    }
}
