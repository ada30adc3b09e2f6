//! The one decision rule and everything that applies it: [`DECISION_RULE`]
//! (and its served form and adaptive sentence, fixed before the first arm
//! and printed in every record), [`decide`] (the rule over the widths'
//! estimates, the adaptive arm's choice included), [`drift_survival`]
//! (whether a drifted record's choice holds against either bracket alone)
//! and [`settled`] (the `--rounds auto` stop). A reader asking "how does a
//! sweep decide?" reads this file; the estimates it takes are
//! [`crate::analysis::estimate`]'s, the types [`crate::analysis::summary`]'s.
use crate::analysis::estimate::RatioEstimate;
use crate::analysis::summary::{Decision, DriftSize, DriftSurvival, Summary, WidthSummary};
use crate::data::plan::SpeculativeArm;

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
    let adaptive = s.widths.iter().find(|x| x.width == crate::data::plan::SpeculativeArm::Adaptive);
    match d.width {
        // The adaptive arm stays chosen while it is credibly at least as
        // fast as the best fixed width.
        Some(crate::data::plan::SpeculativeArm::Adaptive) => adaptive
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

/// Applies [`DECISION_RULE`] to the widths (their ratios and tie tests
/// already computed). Widths that are not measurements are left out here
/// and make `propose` refuse, since under the tie rule any width can change
/// the decision.
pub fn decide(widths: &[WidthSummary]) -> Decision {
    let fixed: Vec<WidthSummary> = widths.iter().filter(|w| !w.width.is_adaptive()).cloned().collect();
    let d = decide_fixed(&fixed);
    match widths.iter().find(|w| w.width.is_adaptive()) {
        Some(a) => with_adaptive(d, a, &fixed),
        None => d,
    }
}

/// The adaptive arm against the fixed widths' decision `d`
/// ([`DECISION_RULE`]): chosen when it is a measurement, tied with or
/// better than the best fixed width (its tie test against it,
/// `crate::analysis::summarize::widths`), and its interval lies wholly above 1.0;
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
        width: Some(crate::data::plan::SpeculativeArm::Adaptive),
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
    let tied_widths: Vec<SpeculativeArm> = tied.iter().map(|(w, _)| w.width).collect();
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
    let list = tied_widths.iter().map(SpeculativeArm::to_string).collect::<Vec<_>>().join(", ");
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
pub const DRIFT_SURVIVAL_RULE: &str = "A record that drifted proposes its decision only when the drift is within \
what the plan's own spread explains and the decision survives it. Within the spread: no round's closing brackets, \
and not the sweep's as a whole, lie further from the opening ones, in either direction, than the 2% tolerance plus \
the 95% range of the difference between two single bracket arms at the record's own measured bracket-arm variance \
V (ln 1.02 + t sqrt(2V)); a larger drift is refused whatever the choice. Surviving: the rule above, applied with \
every width's ratio taken against the opening brackets alone and again against the closing brackets alone (the tie \
tests are paired by round, so the brackets cancel from them), makes the same choice both times (the same width, or \
off both times), each with an interval. The decision's interval then holds both one-sided intervals of its width, \
and when pooled the record's rounds carry half the gap between the two one-sided ratios as their drift widening.";

impl DriftSurvival {
    /// What the two one-sided decisions chose, in words.
    pub fn say(&self) -> String {
        let sides = format!(
            "against the opening brackets alone the rule takes {}, against the closing brackets alone {}",
            choice(&self.vs_open),
            choice(&self.vs_close)
        );
        match &self.size {
            Some(z) if !z.within => format!(
                "the drift is larger than the plan's own spread explains: in {} the closing brackets ran {:.3}x{} the \
                 opening ones' speed, wholly outside [{:.3}, {:.3}] (two of its bracket processes differ by less 95% \
                 of the time without drift, plus the 2% tolerance), so no choice survives it ({sides})",
                z.at,
                z.drift,
                z.interval.map_or_else(String::new, |(lo, hi)| format!(" [{lo:.3}, {hi:.3}]")),
                1.0 / z.explained_factor,
                z.explained_factor
            ),
            Some(_) => sides,
            None => format!("the plan's bracket-arm spread could not be estimated, so no drift is within it ({sides})"),
        }
    }
}

/// The record's largest drift over every round's test and the sweep's,
/// against `bound_log` ([`crate::analysis::estimate::survivable_drift_log`]);
/// `None` without a bound or a drift to weigh. A drift is measured with
/// noise, so its size is how far its 95 % interval lies from no drift (in
/// logs; 0 when the interval holds 1.0): a drift is beyond the bound when
/// its whole interval is, either way, and a round whose closing side is
/// merely noisy near the bound is not refused for it. Without an interval
/// the point is its size.
pub fn drift_size(
    rounds: &[crate::analysis::summary::RoundBrackets],
    sweep: Option<&crate::analysis::estimate::SweepDriftTest>,
    bound_log: Option<f64>,
) -> Option<DriftSize> {
    let bound = bound_log.filter(|b| b.is_finite())?;
    let each = rounds
        .iter()
        .filter_map(|r| r.test.as_ref().map(|t| (t.drift, t.interval, format!("round {}", r.round + 1))))
        .chain(sweep.map(|d| (d.drift, Some(d.interval), "the sweep".to_string())));
    // A drift or an end that is not a positive finite number is no drift the
    // bound can hold (a rate of 0 or infinity reached a ratio): the largest.
    let ln = |x: f64| if x.is_finite() && x > 0.0 { x.ln() } else { f64::INFINITY.copysign(x - 1.0) };
    let size = |d: f64, iv: Option<(f64, f64)>| match iv {
        Some((lo, hi)) => ln(lo).max(-ln(hi)).max(0.0),
        None => ln(d).abs(),
    };
    let (drift, interval, at) =
        each.max_by(|a, b| size(a.0, a.1).total_cmp(&size(b.0, b.1)).then(ln(a.0).abs().total_cmp(&ln(b.0).abs())))?;
    Some(DriftSize { drift, interval, at, explained_factor: bound.exp(), within: size(drift, interval) <= bound })
}

/// A decision's choice with its interval, in words.
fn choice(d: &Decision) -> String {
    let what = match d.width {
        Some(crate::data::plan::SpeculativeArm::Adaptive) => "the adaptive draft length".to_string(),
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
/// record's `decision`, and the drift's `size` ([`drift_size`]: nothing
/// survives a drift outside it, or one with no bound); and `decision` with
/// its interval widened to hold the one-sided intervals of its width (for
/// `off`, of the best width) when the choice survives.
pub fn drift_survival(
    widths: &[WidthSummary],
    decision: &Decision,
    size: Option<DriftSize>,
) -> (DriftSurvival, Decision) {
    let side = |pick: fn(&WidthSummary) -> Option<RatioEstimate>| {
        let ws: Vec<WidthSummary> = widths.iter().map(|w| WidthSummary { ratio: pick(w), ..w.clone() }).collect();
        decide(&ws)
    };
    let vs_open = side(|w| w.ratio_vs_open.clone());
    let vs_close = side(|w| w.ratio_vs_close.clone());
    let same = |d: &Decision| d.width == decision.width && d.ratio.is_some() && d.ratio_interval.is_some();
    let within = size.as_ref().is_some_and(|z| z.within);
    let survives = within && decision.ratio_interval.is_some() && same(&vs_open) && same(&vs_close);
    let mut widened = decision.clone();
    let shown = decision.width.or(decision.best_width);
    if survives && let Some(w) = widths.iter().find(|w| Some(w.width) == shown) {
        let ends =
            [&w.ratio_vs_open, &w.ratio_vs_close].into_iter().filter_map(|r| r.as_ref().and_then(|r| r.interval));
        widened.ratio_interval =
            ends.fold(decision.ratio_interval, |acc, (lo, hi)| acc.map(|(a, b)| (a.min(lo), b.max(hi))));
    }
    let s = DriftSurvival { vs_open, vs_close, survives, two_sided_interval: decision.ratio_interval, size };
    if survives {
        widened.why = format!(
            "{}; the host drifted and the choice survives it ({}), so its interval holds both",
            decision.why,
            s.say()
        );
    }
    (s, widened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::estimate::{TieTest, interval};
    use crate::data::plan::arm;

    /// A width whose rounds give these ratios against both brackets, the
    /// opening and the closing ones, tied with the best or not.
    fn width(w: usize, both: &[f64], open: &[f64], close: &[f64], tied: bool) -> WidthSummary {
        let est = |xs: &[f64]| interval(&xs.iter().enumerate().map(|(k, x)| (k, x.ln())).collect::<Vec<_>>(), 0.0);
        let tie = TieTest { width: arm(w), vs_best: 1.0, low: 0.9, high: if tied { 1.1 } else { 0.95 }, tied };
        WidthSummary {
            ratio_vs_open: est(open),
            ratio_vs_close: est(close),
            ..WidthSummary::estimated(arm(w), est(both), tie)
        }
    }

    /// A drift of `drift` (closing over opening) against a bound of 15 %.
    fn size(drift: f64) -> Option<DriftSize> {
        let bound = 1.15f64.ln();
        Some(DriftSize {
            drift,
            interval: None,
            at: "round 2".into(),
            explained_factor: bound.exp(),
            within: drift.ln().abs() <= bound,
        })
    }

    /// A drift the bound holds.
    fn small() -> Option<DriftSize> {
        size(1.05)
    }

    #[test]
    fn a_drift_beyond_the_plans_spread_survives_whatever_the_choice_in_either_direction() {
        // The first test's widths: the same choice against either bracket.
        let ws = [
            width(1, &[1.30, 1.32, 1.31], &[1.28, 1.29, 1.285], &[1.33, 1.36, 1.34], true),
            width(2, &[1.10, 1.12, 1.11], &[1.08, 1.09, 1.085], &[1.13, 1.16, 1.14], false),
        ];
        let d = decide(&ws);
        assert!(drift_survival(&ws, &d, small()).0.survives);
        // Closing brackets at a tenth of the speed, or ten times it: both refused.
        for drift in [0.1, 10.0, 0.8, 1.25] {
            let (s, widened) = drift_survival(&ws, &d, size(drift));
            assert!(!s.survives, "{drift}: {}", s.say());
            assert_eq!((s.vs_open.width, s.vs_close.width), (Some(arm(1)), Some(arm(1))), "the choice was the same");
            assert!(s.say().contains("larger than the plan's own spread explains"), "{}", s.say());
            assert!(s.say().contains(&format!("{drift:.3}x")), "{}", s.say());
            assert_eq!((widened.ratio_interval, &widened.why), (d.ratio_interval, &d.why));
        }
        // Just inside the bound either way: within.
        for drift in [1.149, 1.0 / 1.149] {
            assert!(drift_survival(&ws, &d, size(drift)).0.survives, "{drift}");
        }
        // No bound (the spread could not be estimated): nothing survives.
        let (s, _) = drift_survival(&ws, &d, None);
        assert!(!s.survives && s.say().contains("could not be estimated"), "{}", s.say());
    }

    #[test]
    fn the_drift_size_is_the_largest_of_the_rounds_and_the_sweep_either_way() {
        use crate::analysis::estimate::{DriftTest, SweepDriftTest};
        use crate::analysis::summary::RoundBrackets;
        let round = |k: usize, drift: f64| RoundBrackets {
            round: k,
            open: None,
            close: None,
            test: Some(DriftTest {
                round: k,
                drift,
                interval: None,
                se_log: None,
                se_request_log: None,
                se_process_log: None,
                critical_t: None,
                df: 0,
                prompts: 12,
                open_arms: 9,
                close_arms: 9,
                drifted: false,
                detectable: None,
            }),
            drifted: false,
            judgeable: true,
            incomplete: false,
        };
        let sweep = |drift: f64| SweepDriftTest {
            drift,
            interval: (drift, drift),
            se_log: 0.01,
            df: 10,
            critical_t: 2.0,
            rounds: 3,
            drifted: true,
            detectable: 0.05,
        };
        let bound = Some(1.2f64.ln());
        // A speedup of round 3 is larger in logs than a slowdown of round 1.
        let rs = [round(0, 0.9), round(1, 1.01), round(2, 1.15)];
        let z = drift_size(&rs, Some(&sweep(1.05)), bound).unwrap();
        assert_eq!((z.drift, z.at.as_str(), z.within), (1.15, "round 3", true));
        assert!((z.explained_factor - 1.2).abs() < 1e-12);
        // A tenth of the speed in round 2, or ten times it: outside.
        for far in [0.1, 10.0] {
            let rs = [round(0, 0.97), round(1, far), round(2, 1.02)];
            let z = drift_size(&rs, Some(&sweep(1.05)), bound).unwrap();
            assert_eq!((z.drift, z.at.as_str(), z.within), (far, "round 2", false));
        }
        // The sweep's, when it is the largest; no bound, no size.
        let z = drift_size(&[round(0, 1.01)], Some(&sweep(0.75)), bound).unwrap();
        assert_eq!((z.at.as_str(), z.within), ("the sweep", false));
        assert_eq!(drift_size(&[round(0, 1.01)], None, None), None);
        // A drift of zero speed is no drift a bound holds.
        assert!(!drift_size(&[round(0, 0.0)], None, bound).unwrap().within);
        // With an interval, the size is how far the whole interval lies from
        // no drift: a noisy round whose interval reaches inside the bound is
        // within, one wholly beyond it (either way) is not.
        let with = |drift: f64, lo: f64, hi: f64| {
            let mut r = round(1, drift);
            r.test.as_mut().unwrap().interval = Some((lo, hi));
            r
        };
        let z = drift_size(&[round(0, 1.01), with(1.3, 1.15, 1.45)], None, bound).unwrap();
        assert_eq!((z.at.as_str(), z.interval, z.within), ("round 2", Some((1.15, 1.45)), true));
        let z = drift_size(&[round(0, 1.01), with(1.4, 1.25, 1.55)], None, bound).unwrap();
        assert!(!z.within, "{z:?}");
        let z = drift_size(&[round(0, 1.01), with(0.7, 0.6, 0.8)], None, bound).unwrap();
        assert!(!z.within, "{z:?}");
        let z = drift_size(&[with(0.7, 0.6, 0.85)], None, bound).unwrap();
        assert!(z.within, "0.85 is inside 1/1.2: {z:?}");
    }

    #[test]
    fn a_choice_made_against_either_bracket_survives_with_both_intervals() {
        // Width 1 well above 1.0 against every baseline; width 2 slower.
        let ws = [
            width(1, &[1.30, 1.32, 1.31], &[1.28, 1.29, 1.285], &[1.33, 1.36, 1.34], true),
            width(2, &[1.10, 1.12, 1.11], &[1.08, 1.09, 1.085], &[1.13, 1.16, 1.14], false),
        ];
        let d = decide(&ws);
        assert_eq!(d.width, Some(arm(1)));
        let (s, widened) = drift_survival(&ws, &d, small());
        assert!(s.survives, "{}", s.say());
        assert_eq!((s.vs_open.width, s.vs_close.width), (Some(arm(1)), Some(arm(1))));
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
        assert_eq!(d.width, Some(arm(1)));
        let (s, widened) = drift_survival(&ws, &d, small());
        assert!(!s.survives, "{}", s.say());
        assert_eq!((s.vs_open.width, s.vs_close.width), (Some(arm(1)), None));
        assert!(s.say().contains("against the closing brackets alone off"), "{}", s.say());
        // Not widened, not re-worded: the record proposes nothing.
        assert_eq!(widened.ratio_interval, d.ratio_interval);
        assert_eq!(widened.why, d.why);
    }

    #[test]
    fn off_survives_only_when_both_sides_say_off() {
        let ws = [width(1, &[0.95, 0.97, 0.96], &[0.93, 0.95, 0.94], &[0.97, 0.99, 0.98], true)];
        let d = decide(&ws);
        assert_eq!((d.width, d.best_width), (None, Some(arm(1))));
        let (s, widened) = drift_survival(&ws, &d, small());
        assert!(s.survives, "{}", s.say());
        assert!(widened.ratio_interval.unwrap().1 >= ws[0].ratio_vs_close.as_ref().unwrap().interval.unwrap().1);
        // Against the opening side alone width 1 is faster: off does not survive.
        let ws = [width(1, &[0.99, 1.01, 1.0], &[1.05, 1.06, 1.055], &[0.94, 0.96, 0.95], true)];
        let d = decide(&ws);
        assert_eq!(d.width, None);
        let (s, _) = drift_survival(&ws, &d, small());
        assert!(!s.survives, "{}", s.say());
        assert_eq!(s.vs_open.width, Some(arm(1)));
    }
}
