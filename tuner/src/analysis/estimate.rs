//! The sweep's estimators: per-round ratios with the process (the arm) as the
//! unit of replication, the drift test, and the tie rule of the decision.
//!
//! Principal items: [`ArmLevels`] (one arm's per-prompt log rates, the
//! input), [`estimate`] (→ [`Estimates`]), [`RatioEstimate`], [`DriftTest`],
//! [`TieTest`], and the constants the rules are fixed by
//! ([`DRIFT_TOLERANCE`], [`DRIFT_FALSE_ALARM`] and its two shares,
//! [`DRIFT_TO_DETECT`], [`INTERVAL_LEVEL`]).
//!
//! Why this shape (docs/records.md, "The statistics"):
//!
//! - Requests inside one process share its speed (page placement, clock,
//!   neighbours), so a request is not an independent replicate: the variance
//!   that matters lies between processes. Each *round* (its own classic
//!   brackets and one process per width) yields one ratio per width, and
//!   the interval of a width comes from the spread of those ratios across
//!   rounds: a Student t interval on log ratios, `R - 1` degrees of
//!   freedom for `R` rounds. Log, because speed factors multiply; t,
//!   because `R` is small and the round-to-round variance is estimated.
//! - Within a round a ratio is paired by prompt: an arm's level for a
//!   prompt is the mean log rate over its bursts; the round's baseline for
//!   that prompt is the mean of the opening and closing brackets' levels
//!   (each bracket side the mean of its arms); the round's log ratio is the
//!   mean over prompts of level minus baseline (a geometric mean of paired
//!   ratios), so the prompt mix cancels.
//! - Drift of a round is the closing side's level minus the opening side's,
//!   paired by prompt. Under no drift its variance is `V_b (1/m_o + 1/m_c)`,
//!   where `V_b` is the variance of one bracket arm's level (process and
//!   request noise together) and `m` the arms of a side. `V_b` is estimated
//!   from the spread of the arms within each side (they ran back to back);
//!   the statistic is then Student t on that many degrees of freedom. A
//!   round has drifted when `|ln drift| - t * se > ln(1 + DRIFT_TOLERANCE)`,
//!   `t` the `1 - ROUND_DRIFT_FALSE_ALARM / (2 R)` quantile (Bonferroni over
//!   `R` rounds). Such a test only catches large steps: at the process
//!   spreads these hosts show (5-13 %) a handful of bracket arms cannot tell
//!   a 10 % step of one round from noise.
//! - The sweep's drift test is the one sized to a 10 % drift: the weighted
//!   mean of the rounds' drifts against its standard error, no tolerance, at
//!   `SWEEP_DRIFT_FALSE_ALARM`. It catches the drift that moves every ratio
//!   of the record the same way (a host that slows inside each round, a
//!   closing bracket that always follows a heavy arm); a single round's step
//!   is, for the decision, one round's outlier, which the t interval over
//!   rounds already carries. Each test states the smallest slowdown it
//!   flags with `DRIFT_POWER` ([`detectable_slowdown`]).
//! - Bracket disagreement too small to call drift still widens the
//!   interval: a linear drift of size `D_k` over round `k` puts the bias
//!   `D_k (pos_k - 1/2)` into a width that ran at fraction `pos_k` of the
//!   round; the mean of those biases over rounds, in absolute value, is
//!   added to both ends of the width's interval.
//! - Ties: width `w` is tied with the best width `b` when the t interval of
//!   the paired difference `L_kw - L_kb` over rounds (the same brackets
//!   cancel) reaches 0 or above.
use crate::data::plan::SpeculativeArm;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::data::raw::Bracket;

/// Nominal level of every interval in a record.
pub const INTERVAL_LEVEL: f64 = 0.95;

/// Drift a round may show before it is called drift: 2 %. Below it, the
/// widening above moves an interval's ends by at most 1 % (the largest
/// `|pos - 1/2|` is 1/2), a tenth of the half-width a default sweep states
/// on this host; above it, a ratio against one bracket differs from one
/// against the other by as much as neighbouring widths differ in the
/// committed records (2-4 %), so the decision could turn on which bracket
/// is believed. Smaller would cost power at no gain: the tolerance is also
/// what lets a 15 % step be caught 90 % of the time (docs/records.md).
pub const DRIFT_TOLERANCE: f64 = 0.02;

/// The chance, per sweep, of calling drift where there is none, at most,
/// over both tests: [`ROUND_DRIFT_FALSE_ALARM`] for the per-round tests
/// together (each round's at that over the rounds: Bonferroni) and the rest
/// for the sweep's test. The bound holds whatever the process spread (the
/// round tests' tolerance only lowers it).
pub const DRIFT_FALSE_ALARM: f64 = 0.05;

/// The per-round tests' share of [`DRIFT_FALSE_ALARM`]. Small, because a
/// round test only ever catches large steps (with three to ten bracket arms
/// a side its power for a 10 % step is low at the spreads these hosts show:
/// docs/records.md), while the sweep's test is the one sized to catch a 10 %
/// drift; most of the false-alarm budget buys that test's power.
pub const ROUND_DRIFT_FALSE_ALARM: f64 = 0.005;

/// The sweep test's share: with the rounds' share, a nominal 4 %, so that
/// the 5 % bound holds with room for the approximations (the simulation
/// measures it).
pub const SWEEP_DRIFT_FALSE_ALARM: f64 = 0.035;

/// The power at which a record states the smallest drift its plan detects.
pub const DRIFT_POWER: f64 = 0.90;

/// The systematic drift every record's plan must detect with
/// [`DRIFT_POWER`] (a closing side this much slower than the opening one in
/// every round); `tuner propose` refuses a record whose stated detectable
/// drift is larger, and names the bracket arms that would reach it.
pub const DRIFT_TO_DETECT: f64 = 0.10;

/// The largest drift, in logs and in either direction, that a drifted
/// record may survive ([`crate::analysis::decision::DRIFT_SURVIVAL_RULE`]):
/// the tolerance plus the 95 % range of the difference between two single
/// bracket arms of the plan at its own measured variance `v` (one bracket
/// arm's level, process and request noise; `df` its degrees of freedom),
/// `ln(1 + DRIFT_TOLERANCE) + t_df sqrt(2 v)`.
///
/// Why this size: survival rests on the truth lying between the two
/// one-sided baselines and the choice not depending on which is believed.
/// A closing side further from the opening side than two of the plan's own
/// processes ever are without drift is no longer a host that leaned during
/// the round: it is another host (a closing bracket at a tenth of the
/// speed), and whatever the rule chooses against either side, the widths
/// ran somewhere between two machines. It is symmetric: a closing side that
/// ran faster is bounded exactly as one that ran slower. At the default plan
/// it lies near 14 % at a 3 % process spread and 28 % at 7.5 %
/// (docs/records.md, "A decision that survives the drift").
pub fn survivable_drift_log(v: f64, df: usize) -> f64 {
    (1.0 + DRIFT_TOLERANCE).ln() + t_quantile(df) * (2.0 * v.max(0.0)).sqrt()
}

/// One arm's data: the log of each recorded request's rate, per prompt.
#[derive(Clone, Debug)]
pub struct ArmLevels {
    pub arm: usize,
    pub round: usize,
    pub width: Option<SpeculativeArm>,
    pub bracket: Option<Bracket>,
    /// Position of the arm in its round's plan (0 = first).
    pub position: usize,
    /// prompt id → ln(rate) of each recorded request.
    pub logs: BTreeMap<String, Vec<f64>>,
}

impl ArmLevels {
    /// Mean log rate of a prompt (the arm's level for it).
    fn level(&self, p: &str) -> Option<f64> {
        let xs = self.logs.get(p)?;
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    }

    /// The arm's level over the given prompts (mean of its per-prompt levels).
    fn level_over(&self, prompts: &[String]) -> Option<f64> {
        let xs: Option<Vec<f64>> = prompts.iter().map(|p| self.level(p)).collect();
        xs.filter(|x| !x.is_empty()).map(|x| mean(&x))
    }

    /// Within-prompt sum of squares of the log rates and its degrees of freedom.
    fn within_ss(&self) -> (f64, usize) {
        self.logs.values().filter(|xs| xs.len() >= 2).fold((0.0, 0), |(ss, df), xs| {
            let m = mean(xs);
            (ss + xs.iter().map(|x| (x - m).powi(2)).sum::<f64>(), df + xs.len() - 1)
        })
    }

    /// The request-noise variance of the arm's level over `prompts`, given
    /// the per-request variance `v`: `v * mean(1 / n_p) / P`.
    fn request_part(&self, v: f64, prompts: &[String]) -> f64 {
        let inv: Vec<f64> = prompts
            .iter()
            .filter_map(|p| self.logs.get(p).filter(|x| !x.is_empty()).map(|x| 1.0 / x.len() as f64))
            .collect();
        if inv.is_empty() { 0.0 } else { v * mean(&inv) / inv.len() as f64 }
    }
}

/// A ratio and its interval, from per-round log ratios.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatioEstimate {
    /// exp(mean over rounds of the round's log ratio): a geometric mean.
    pub ratio: f64,
    /// The nominal 95 % interval; null with fewer than two rounds (no
    /// spread between processes to estimate).
    pub interval: Option<(f64, f64)>,
    /// Rounds that gave a ratio (the n of the interval).
    pub rounds: usize,
    /// Each round's ratio, in round order (`(round, ratio)`).
    pub per_round: Vec<(usize, f64)>,
    /// Standard deviation of the per-round log ratios (null with one round).
    pub sd_log: Option<f64>,
    /// Added to both ends of the interval in log space for bracket
    /// disagreement too small to call drift (0 when the brackets agree).
    pub drift_widening_log: f64,
}

/// How far past 1.0 an interval's end must lie to count as above (or below)
/// it: a ratio of identical rates computes as `exp(mean of ln x - ln x)`,
/// which rounding can put at 1.0000000000000002. 1e-9 is far below any
/// difference a sweep resolves (its intervals are percents wide).
pub const ONE_BY_ROUNDING: f64 = 1e-9;

/// `lo` lies above 1.0 by more than rounding.
pub fn wholly_above_one(lo: f64) -> bool {
    lo > 1.0 + ONE_BY_ROUNDING
}

/// `hi` lies below 1.0 by more than rounding.
pub fn wholly_below_one(hi: f64) -> bool {
    hi < 1.0 - ONE_BY_ROUNDING
}

impl RatioEstimate {
    /// The interval lies wholly above 1.0 (by more than rounding).
    pub fn above_one(&self) -> bool {
        self.interval.is_some_and(|(lo, _)| wholly_above_one(lo))
    }

    /// The interval lies wholly below 1.0 (by more than rounding).
    pub fn below_one(&self) -> bool {
        self.interval.is_some_and(|(_, hi)| wholly_below_one(hi))
    }
}

/// One round's drift: closing over opening bracket, paired by prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriftTest {
    pub round: usize,
    /// Closing side's level over the opening side's (1.0 = no drift).
    pub drift: f64,
    /// 95 % interval of `drift` (request and process noise); null when the
    /// round cannot be judged (fewer than two prompts paired).
    pub interval: Option<(f64, f64)>,
    /// Standard error of ln(drift), and its two parts (the process part is
    /// null when the sweep has too few widths or rounds to estimate it).
    pub se_log: Option<f64>,
    pub se_request_log: Option<f64>,
    pub se_process_log: Option<f64>,
    /// The t quantile the verdict used (Bonferroni over the rounds) and the
    /// degrees of freedom of the variance behind `se_log`.
    pub critical_t: Option<f64>,
    pub df: usize,
    /// Prompts paired.
    pub prompts: usize,
    /// Bracket arms on the opening and closing sides.
    pub open_arms: usize,
    pub close_arms: usize,
    /// `|ln drift| - critical_t * se_log > ln(1 + DRIFT_TOLERANCE)`.
    pub drifted: bool,
    /// The smallest slowdown of this round's closing side the test flags
    /// with [`DRIFT_POWER`], as a fraction (0.25 = a closing side 25 %
    /// slower); null when the round cannot be judged.
    #[serde(default)]
    pub detectable: Option<f64>,
}

/// The sweep's drift test: the closing sides against the opening sides over
/// every complete round together (the systematic drift, the one that moves
/// every ratio of the record the same way).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepDriftTest {
    /// exp of the weighted mean over rounds of ln(close / open), each round
    /// weighted by `1 / (1/m_open + 1/m_close)`.
    pub drift: f64,
    pub interval: (f64, f64),
    pub se_log: f64,
    pub df: usize,
    /// The t quantile of the verdict (at [`SWEEP_DRIFT_FALSE_ALARM`], two-sided).
    pub critical_t: f64,
    pub rounds: usize,
    /// `|ln drift| > critical_t * se_log` (no tolerance: a systematic drift
    /// that is credibly not zero biases every width by half of it).
    pub drifted: bool,
    /// The smallest systematic slowdown of the closing sides the test flags
    /// with [`DRIFT_POWER`], as a fraction.
    pub detectable: f64,
}

/// The slowdown fraction `1 - exp(-(tolerance + (t + z_power) * se))`: the
/// smallest the test flags with [`DRIFT_POWER`] (normal approximation of
/// the power; docs/records.md checks it by simulation).
pub fn detectable_slowdown(tolerance_log: f64, critical_t: f64, se_log: f64) -> f64 {
    let z = statrs::distribution::Normal::new(0.0, 1.0).map_or(1.2816, |n| n.inverse_cdf(DRIFT_POWER));
    1.0 - (-(tolerance_log + (critical_t + z) * se_log)).exp()
}

/// Bracket arms a side that bring the sweep's detectable drift to
/// `target` (a slowdown fraction) over `rounds` rounds, given the variance
/// `v` of one bracket arm's level and the critical t: the smallest `m` with
/// `(t + z) sqrt(2 v / (m R)) <= -ln(1 - target)`.
pub fn bracket_arms_for(v: f64, rounds: usize, critical_t: f64, target: f64) -> usize {
    let z = statrs::distribution::Normal::new(0.0, 1.0).map_or(1.2816, |n| n.inverse_cdf(DRIFT_POWER));
    let need = -(1.0 - target).ln() / (critical_t + z);
    let m = 2.0 * v / (need * need * rounds.max(1) as f64);
    if m.is_finite() { (m.ceil() as usize).max(1) } else { usize::MAX }
}

/// A width against the best width, paired by round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TieTest {
    pub width: SpeculativeArm,
    /// Ratio of this width's ratio to the best's (geometric mean over rounds).
    pub vs_best: f64,
    pub low: f64,
    pub high: f64,
    /// Not credibly below the best: `high >= 1.0`.
    pub tied: bool,
}

/// Everything the estimators say about a sweep.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimates {
    /// Per width, against the mean of both brackets (the decision uses this).
    pub ratio: BTreeMap<SpeculativeArm, RatioEstimate>,
    pub ratio_vs_open: BTreeMap<SpeculativeArm, RatioEstimate>,
    pub ratio_vs_close: BTreeMap<SpeculativeArm, RatioEstimate>,
    pub drift: Vec<DriftTest>,
    /// The sweep's test over every complete round (null below one judgeable round).
    pub sweep_drift: Option<SweepDriftTest>,
    /// Estimated variance of one arm's log level between processes
    /// (`s_p^2`), and how many degrees of freedom it rests on.
    pub process_variance_log: Option<f64>,
    pub process_variance_df: usize,
    /// The process spread as a fraction (`sqrt(s_p^2)`).
    pub process_spread: Option<f64>,
    /// Estimated variance of one bracket arm's log level (process and request noise).
    pub bracket_arm_variance_log: Option<f64>,
    /// Estimated standard deviation of one request's log rate within an arm.
    pub request_noise: Option<f64>,
}

/// `t` quantile for `df` degrees of freedom (two-sided `INTERVAL_LEVEL`).
pub fn t_quantile(df: usize) -> f64 {
    t_quantile_at(0.5 + INTERVAL_LEVEL / 2.0, df)
}

/// The `p` quantile of Student's t with `df` degrees of freedom.
pub fn t_quantile_at(p: f64, df: usize) -> f64 {
    match StudentsT::new(0.0, 1.0, df.max(1) as f64) {
        Ok(t) => t.inverse_cdf(p),
        Err(_) => f64::INFINITY,
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn sample_sd(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs);
    Some((xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt())
}

/// A round: its bracket sides and its speculative arms.
struct Round<'a> {
    open: Vec<&'a ArmLevels>,
    close: Vec<&'a ArmLevels>,
    spec: Vec<&'a ArmLevels>,
    /// Plan positions of the sides' centres within the round.
    open_pos: f64,
    close_pos: f64,
}

impl Round<'_> {
    /// Mean level of a side for a prompt (every arm of the side must have it).
    fn side(arms: &[&ArmLevels], p: &str) -> Option<f64> {
        if arms.is_empty() {
            return None;
        }
        let xs: Option<Vec<f64>> = arms.iter().map(|a| a.level(p)).collect();
        xs.map(|xs| mean(&xs))
    }

    /// The round's log ratio of an arm against a baseline, over prompts
    /// present in both.
    fn log_ratio(&self, a: &ArmLevels, which: Option<Bracket>, prompts: &[String]) -> Option<f64> {
        let d: Vec<f64> = prompts
            .iter()
            .filter_map(|p| {
                let base = match which {
                    Some(Bracket::Open) => Self::side(&self.open, p)?,
                    Some(Bracket::Close) => Self::side(&self.close, p)?,
                    None => (Self::side(&self.open, p)? + Self::side(&self.close, p)?) / 2.0,
                };
                Some(a.level(p)? - base)
            })
            .collect();
        (!d.is_empty()).then(|| mean(&d))
    }

    /// Paired per-prompt drifts (close - open).
    fn drifts(&self, prompts: &[String]) -> Vec<f64> {
        prompts.iter().filter_map(|p| Some(Self::side(&self.close, p)? - Self::side(&self.open, p)?)).collect()
    }
}

/// t interval of per-round log ratios `(round, ln ratio)`, widened by `widen` in log space.
pub fn interval(per_round: &[(usize, f64)], widen: f64) -> Option<RatioEstimate> {
    if per_round.is_empty() {
        return None;
    }
    let xs: Vec<f64> = per_round.iter().map(|(_, x)| *x).collect();
    let m = mean(&xs);
    let sd = sample_sd(&xs);
    // One round has no spread to estimate: no interval.
    let half = sd.map(|s| t_quantile(xs.len() - 1) * s / (xs.len() as f64).sqrt());
    Some(RatioEstimate {
        ratio: m.exp(),
        interval: half.map(|h| ((m - h - widen).exp(), (m + h + widen).exp())),
        rounds: xs.len(),
        per_round: per_round.iter().map(|(k, x)| (*k, x.exp())).collect(),
        sd_log: sd,
        drift_widening_log: widen,
    })
}

/// Runs the estimators over the arms of a sweep. `widths` in plan order,
/// `prompts` the prompt ids of the set. The steps: the arms grouped into
/// rounds; per width, the per-round ratios against each baseline; the
/// request and bracket-arm noise; per round, the drift test; the sweep's
/// drift test over the rounds.
pub fn estimate(arms: &[ArmLevels], widths: &[SpeculativeArm], prompts: &[String]) -> Estimates {
    let rounds = group_rounds(arms);
    // Rounds with both sides: the only ones that give ratios.
    let complete: Vec<(&usize, &Round<'_>)> =
        rounds.iter().filter(|(_, r)| !r.open.is_empty() && !r.close.is_empty()).collect();
    // Paired per-prompt drifts of each complete round, computed once: the
    // widening of the ratios and the drift test both use them.
    let drifts: BTreeMap<usize, Vec<f64>> =
        complete.iter().map(|(k, r)| (**k, r.drifts(prompts))).filter(|(_, d)| !d.is_empty()).collect();
    let drift_log: BTreeMap<usize, f64> = drifts.iter().map(|(k, d)| (*k, mean(d))).collect();

    let mut est = Estimates::default();
    let l_both = width_ratios(&mut est, &complete, widths, prompts, &drift_log);

    // Per-request noise (variance of a log rate within an arm and prompt),
    // pooled over every arm with repeated prompts.
    let (ss, df) = arms.iter().map(|a| a.within_ss()).fold((0.0, 0), |(s, d), (s2, d2)| (s + s2, d + d2));
    let v_request = (df > 0).then(|| ss / df as f64);
    est.request_noise = v_request.map(f64::sqrt);

    let (v_bracket, q_bracket) = bracket_variance(&complete, &l_both, v_request, prompts);
    if let Some((v, df)) = v_bracket {
        let process = (v - q_bracket).max(0.0);
        est.process_variance_log = Some(process);
        est.process_variance_df = df;
        est.process_spread = Some(process.sqrt());
        est.bracket_arm_variance_log = Some(v);
    }

    let weighted = round_drifts(&mut est, &complete, &drifts, &drift_log, v_bracket, v_request, prompts);
    est.sweep_drift = sweep_drift(v_bracket, weighted);
    est
}

/// The arms by round, each round split into its bracket sides and its
/// speculative arms.
fn group_rounds(arms: &[ArmLevels]) -> BTreeMap<usize, Round<'_>> {
    let mut by_round: BTreeMap<usize, Vec<&ArmLevels>> = BTreeMap::new();
    for a in arms {
        by_round.entry(a.round).or_default().push(a);
    }
    let mut rounds: BTreeMap<usize, Round<'_>> = BTreeMap::new();
    for (k, list) in &by_round {
        let pick = |b: Option<Bracket>| -> Vec<&ArmLevels> {
            list.iter().copied().filter(|a| a.width.is_none() && a.bracket == b).collect()
        };
        let open = pick(Some(Bracket::Open));
        let close = pick(Some(Bracket::Close));
        let centre = |xs: &[&ArmLevels]| {
            if xs.is_empty() { f64::NAN } else { xs.iter().map(|a| a.position as f64).sum::<f64>() / xs.len() as f64 }
        };
        let (open_pos, close_pos) = (centre(&open), centre(&close));
        let spec = list.iter().copied().filter(|a| a.width.is_some()).collect();
        rounds.insert(*k, Round { open, close, spec, open_pos, close_pos });
    }
    rounds
}

/// Per width, the per-round log ratios against both brackets' mean (widened
/// by the drift the arm's place in its round would bias it by), against the
/// opening and against the closing bracket, into `est`; returns the first
/// kind's per-round values by width.
fn width_ratios(
    est: &mut Estimates,
    complete: &[(&usize, &Round<'_>)],
    widths: &[SpeculativeArm],
    prompts: &[String],
    drift_log: &BTreeMap<usize, f64>,
) -> BTreeMap<SpeculativeArm, Vec<(usize, f64)>> {
    let mut l_both: BTreeMap<SpeculativeArm, Vec<(usize, f64)>> = BTreeMap::new();
    let mut bias: BTreeMap<SpeculativeArm, Vec<f64>> = BTreeMap::new();
    for &w in widths {
        let mut both = Vec::new();
        let mut vo = Vec::new();
        let mut vc = Vec::new();
        for (k, r) in complete {
            // One arm per width per round in the plan; take it if it is there.
            let Some(a) = r.spec.iter().find(|a| a.width == Some(w)) else { continue };
            if let Some(x) = r.log_ratio(a, None, prompts) {
                both.push((**k, x));
                if let Some(dk) = drift_log.get(k) {
                    let span = r.close_pos - r.open_pos;
                    let pos = if span > 0.0 { (a.position as f64 - r.open_pos) / span } else { 0.5 };
                    bias.entry(w).or_default().push(dk * (pos - 0.5));
                }
            }
            if let Some(x) = r.log_ratio(a, Some(Bracket::Open), prompts) {
                vo.push((**k, x));
            }
            if let Some(x) = r.log_ratio(a, Some(Bracket::Close), prompts) {
                vc.push((**k, x));
            }
        }
        let widen = bias.get(&w).map_or(0.0, |b| mean(b).abs());
        if let Some(e) = interval(&both, widen) {
            est.ratio.insert(w, e);
            l_both.insert(w, both);
        }
        if let Some(e) = interval(&vo, 0.0) {
            est.ratio_vs_open.insert(w, e);
        }
        if let Some(e) = interval(&vc, 0.0) {
            est.ratio_vs_close.insert(w, e);
        }
    }
    l_both
}

/// The variance of one bracket arm's level (process and request noise) with
/// its degrees of freedom, and the request noise's mean share of it.
///
/// With two or more arms a side it comes from the spread of the arms within
/// each side: they ran back to back, so drift does not enter, and for
/// normal levels it is independent of the side means, which makes the drift
/// statistic an exact t. With one arm a side (version-1 records) it comes
/// from the width × round interaction of the speculative arms' levels (the
/// round's baseline, and any drift, fall out of it), with their request
/// noise swapped for the brackets'.
fn bracket_variance(
    complete: &[(&usize, &Round<'_>)],
    l_both: &BTreeMap<SpeculativeArm, Vec<(usize, f64)>>,
    v_request: Option<f64>,
    prompts: &[String],
) -> (Option<(f64, usize)>, f64) {
    let within_sides: Option<(f64, usize)> = {
        let mut ss = 0.0;
        let mut df = 0;
        for (_, r) in complete {
            for side in [&r.open, &r.close] {
                if side.len() < 2 {
                    continue;
                }
                let ls: Option<Vec<f64>> = side.iter().map(|a| a.level_over(prompts)).collect();
                if let Some(ls) = ls {
                    let m = mean(&ls);
                    ss += ls.iter().map(|x| (x - m).powi(2)).sum::<f64>();
                    df += ls.len() - 1;
                }
            }
        }
        (df > 0).then(|| (ss / df as f64, df))
    };
    let bracket_request: Vec<f64> = match v_request {
        Some(v) => complete
            .iter()
            .flat_map(|(_, r)| r.open.iter().chain(&r.close).map(move |a| a.request_part(v, prompts)))
            .collect(),
        None => vec![],
    };
    let q_bracket = if bracket_request.is_empty() { 0.0 } else { mean(&bracket_request) };
    let v_bracket = within_sides.or_else(|| {
        spec_interaction(l_both, complete).map(|(v_s, df)| {
            let q_spec: Vec<f64> = match v_request {
                Some(v) => {
                    complete.iter().flat_map(|(_, r)| r.spec.iter().map(move |a| a.request_part(v, prompts))).collect()
                }
                None => vec![],
            };
            let q_s = if q_spec.is_empty() { 0.0 } else { mean(&q_spec) };
            ((v_s - q_s).max(0.0) + q_bracket, df)
        })
    });
    (v_bracket, q_bracket)
}

/// Drift per complete round, into `est.drift`: an exact t test (given
/// normal levels) on the bracket variance's degrees of freedom, Bonferroni
/// over the rounds so that a sweep without drift is flagged by them at most
/// `ROUND_DRIFT_FALSE_ALARM` of the time. Returns the sums the sweep's test
/// needs: (Σ w·drift, Σ w, rounds counted).
fn round_drifts(
    est: &mut Estimates,
    complete: &[(&usize, &Round<'_>)],
    drifts: &BTreeMap<usize, Vec<f64>>,
    drift_log: &BTreeMap<usize, f64>,
    v_bracket: Option<(f64, usize)>,
    v_request: Option<f64>,
    prompts: &[String],
) -> (f64, f64, usize) {
    let n_rounds = complete.len().max(1);
    let mut weighted = (0.0, 0.0, 0usize);
    for (k, r) in complete {
        let (Some(d), Some(&dk)) = (drifts.get(k), drift_log.get(k)) else { continue };
        let se = v_bracket.map(|(v, df)| ((v / r.open.len() as f64 + v / r.close.len() as f64).sqrt(), df));
        let (interval, drifted, critical) = match se {
            Some((se, df)) => {
                let crit = t_quantile_at(1.0 - ROUND_DRIFT_FALSE_ALARM / (2.0 * n_rounds as f64), df);
                let shown = t_quantile(df);
                (
                    Some(((dk - shown * se).exp(), (dk + shown * se).exp())),
                    dk.abs() - crit * se > (1.0 + DRIFT_TOLERANCE).ln(),
                    Some(crit),
                )
            }
            None => (None, false, None),
        };
        let se_req = v_request.map(|v| {
            let q = |side: &[&ArmLevels]| {
                side.iter().map(|a| a.request_part(v, prompts)).sum::<f64>() / (side.len() * side.len()) as f64
            };
            (q(&r.open) + q(&r.close)).sqrt()
        });
        let se_proc = est.process_variance_log.map(|p| (p / r.open.len() as f64 + p / r.close.len() as f64).sqrt());
        if se.is_some() && d.len() >= 2 {
            let w = 1.0 / (1.0 / r.open.len() as f64 + 1.0 / r.close.len() as f64);
            weighted = (weighted.0 + w * dk, weighted.1 + w, weighted.2 + 1);
        }
        let detectable = se.zip(critical).map(|((se, _), t)| detectable_slowdown((1.0 + DRIFT_TOLERANCE).ln(), t, se));
        est.drift.push(DriftTest {
            round: **k,
            drift: dk.exp(),
            interval,
            se_log: se.map(|s| s.0),
            se_request_log: se_req,
            se_process_log: se_proc,
            critical_t: critical,
            df: se.map_or(0, |s| s.1),
            prompts: d.len(),
            open_arms: r.open.len(),
            close_arms: r.close.len(),
            drifted,
            detectable,
        });
    }
    weighted
}

/// The sweep's test: the weighted mean of the rounds' drifts, whose
/// variance is `V / sum(w)` under no drift (rounds are independent).
fn sweep_drift(v_bracket: Option<(f64, usize)>, (sum, wsum, n): (f64, f64, usize)) -> Option<SweepDriftTest> {
    let (v, df) = v_bracket?;
    if n == 0 || wsum <= 0.0 {
        return None;
    }
    let d = sum / wsum;
    let se = (v / wsum).sqrt();
    let crit = t_quantile_at(1.0 - SWEEP_DRIFT_FALSE_ALARM / 2.0, df);
    let shown = t_quantile(df);
    Some(SweepDriftTest {
        drift: d.exp(),
        interval: ((d - shown * se).exp(), (d + shown * se).exp()),
        se_log: se,
        df,
        critical_t: crit,
        rounds: n,
        drifted: d.abs() > crit * se,
        detectable: detectable_slowdown(0.0, crit, se),
    })
}

/// Residual variance of the width × round interaction of the per-round log
/// ratios over the rounds where every width has one, and its degrees of
/// freedom; `None` below two widths or two rounds.
fn spec_interaction(
    l: &BTreeMap<SpeculativeArm, Vec<(usize, f64)>>,
    complete: &[(&usize, &Round<'_>)],
) -> Option<(f64, usize)> {
    let ks: Vec<usize> = complete.iter().map(|(k, _)| **k).collect();
    interaction_variance(l, Some(&ks))
}

/// Residual variance of the width × round interaction (the two-way
/// additive model `x_wk = mu_w + rho_k + e_wk`: a round's brackets move
/// every width of the round together) over the rounds where every width
/// has a value (among `rounds`, when given), and its degrees of freedom
/// `(W - 1)(R - 1)`; `None` below two widths or two such rounds. It
/// estimates the variance of one arm's noise `e`, which every pair of
/// widths shares: a paired per-round difference has variance twice it.
pub fn interaction_variance<W: Ord + Copy>(
    l: &BTreeMap<W, Vec<(usize, f64)>>,
    rounds: Option<&[usize]>,
) -> Option<(f64, usize)> {
    let ws: Vec<W> = l.keys().copied().collect();
    let first = ws.first()?;
    let candidates: Vec<usize> = match rounds {
        Some(r) => r.to_vec(),
        None => l[first].iter().map(|(k, _)| *k).collect(),
    };
    let ks: Vec<usize> =
        candidates.into_iter().filter(|k| ws.iter().all(|w| l[w].iter().any(|(kk, _)| kk == k))).collect();
    let (nw, nr) = (ws.len(), ks.len());
    if nw < 2 || nr < 2 {
        return None;
    }
    let cell = |w: W, k: usize| l[&w].iter().find(|(kk, _)| *kk == k).map_or(0.0, |(_, x)| *x);
    let grand = ws.iter().flat_map(|&w| ks.iter().map(move |&k| cell(w, k))).sum::<f64>() / (nw * nr) as f64;
    let wm: BTreeMap<W, f64> =
        ws.iter().map(|&w| (w, ks.iter().map(|&k| cell(w, k)).sum::<f64>() / nr as f64)).collect();
    let km: BTreeMap<usize, f64> =
        ks.iter().map(|&k| (k, ws.iter().map(|&w| cell(w, k)).sum::<f64>() / nw as f64)).collect();
    let ss: f64 = ws
        .iter()
        .flat_map(|&w| ks.iter().map(move |&k| (w, k)))
        .map(|(w, k)| (cell(w, k) - wm[&w] - km[&k] + grand).powi(2))
        .sum();
    let df = (nw - 1) * (nr - 1);
    Some((ss / df as f64, df))
}

/// The tie test of every width with a ratio against `best`, paired by round.
/// The variance of a round's paired difference is twice the residual
/// variance of the width × round table of the widths that are measurements
/// (`measured`; [`interaction_variance`]): every pair of widths shares one
/// arm noise, and the table gives it `(W - 1)(R - 1)` degrees of freedom
/// where the pair alone has `R - 1`. A width outside the table (not a
/// measurement, or too few rounds in common) is tested on its own pair.
pub fn ties(est: &Estimates, best: SpeculativeArm, measured: impl Fn(SpeculativeArm) -> bool) -> Vec<TieTest> {
    let Some(b) = est.ratio.get(&best) else { return Vec::new() };
    let bmap: BTreeMap<usize, f64> = b.per_round.iter().map(|(k, x)| (*k, x.ln())).collect();
    let logs: BTreeMap<SpeculativeArm, Vec<(usize, f64)>> = est
        .ratio
        .iter()
        .filter(|(w, _)| measured(**w))
        .map(|(w, e)| (*w, e.per_round.iter().map(|(k, x)| (*k, x.ln())).collect()))
        .collect();
    let table = if logs.contains_key(&best) { interaction_variance(&logs, None) } else { None };
    est.ratio
        .iter()
        .filter_map(|(&w, e)| {
            if w == best {
                return Some(TieTest { width: w, vs_best: 1.0, low: 1.0, high: 1.0, tied: true });
            }
            let d: Vec<(usize, f64)> =
                e.per_round.iter().filter_map(|(k, x)| Some((*k, x.ln() - bmap.get(k)?))).collect();
            let (vs_best, low, high) = match table.filter(|_| logs.contains_key(&w) && d.len() >= 2) {
                Some((v, df)) => {
                    let m = mean(&d.iter().map(|(_, x)| *x).collect::<Vec<_>>());
                    let h = t_quantile(df) * (2.0 * v / d.len() as f64).sqrt();
                    (m.exp(), (m - h).exp(), (m + h).exp())
                }
                None => {
                    let iv = interval(&d, 0.0)?;
                    let (low, high) = iv.interval?;
                    (iv.ratio, low, high)
                }
            };
            Some(TieTest { width: w, vs_best, low, high, tied: high >= 1.0 })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(
        arm: usize,
        round: usize,
        width: Option<usize>,
        bracket: Option<Bracket>,
        position: usize,
        level: f64,
    ) -> ArmLevels {
        let mut logs = BTreeMap::new();
        for (p, off) in [("a", 0.0), ("b", 0.3), ("c", -0.2)] {
            logs.insert(p.to_string(), vec![level + off + 0.01, level + off - 0.01]);
        }
        ArmLevels { arm, round, width: width.map(crate::data::plan::arm), bracket, position, logs }
    }

    fn prompts() -> Vec<String> {
        ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
    }

    /// A round: open, widths 1 and 2 at log ratios r1, r2, close (a step of d).
    fn round(k: usize, base: f64, r1: f64, r2: f64, d: f64) -> Vec<ArmLevels> {
        let i = k * 4;
        vec![
            arm(i, k, None, Some(Bracket::Open), 0, base),
            arm(i + 1, k, Some(1), None, 1, base + r1),
            arm(i + 2, k, Some(2), None, 2, base + r2),
            arm(i + 3, k, None, Some(Bracket::Close), 3, base + d),
        ]
    }

    #[test]
    fn the_ratio_is_the_geometric_mean_of_round_ratios_and_the_interval_their_t_interval() {
        let mut arms = round(0, 5.0, 0.10, 0.0, 0.0);
        arms.extend(round(1, 5.2, 0.20, 0.05, 0.0));
        arms.extend(round(2, 4.9, 0.15, 0.02, 0.0));
        let e = estimate(&arms, &crate::data::plan::arms(&[1, 2]), &prompts());
        let r = &e.ratio[&crate::data::plan::arm(1)];
        assert_eq!(r.rounds, 3);
        assert!((r.ratio - 0.15f64.exp()).abs() < 1e-12, "{r:?}");
        let half = t_quantile(2) * 0.05 / 3f64.sqrt();
        let (lo, hi) = r.interval.unwrap();
        assert!((lo.ln() - (0.15 - half)).abs() < 1e-9 && (hi.ln() - (0.15 + half)).abs() < 1e-9, "{r:?}");
        assert_eq!(r.drift_widening_log, 0.0);
        assert!(e.drift.iter().all(|d| !d.drifted && (d.drift - 1.0).abs() < 1e-12));
    }

    #[test]
    fn a_closing_bracket_far_off_is_drift_and_a_small_one_widens_the_interval() {
        // The widths differ by the same amount every round: no process noise.
        let mut arms = round(0, 5.0, 0.10, 0.0, 0.0);
        arms.extend(round(1, 5.2, 0.20, 0.10, -0.40));
        arms.extend(round(2, 4.9, 0.15, 0.05, 0.0));
        let e = estimate(&arms, &crate::data::plan::arms(&[1, 2]), &prompts());
        assert!(e.drift[1].drifted, "{:?}", e.drift[1]);
        assert!(!e.drift[0].drifted && !e.drift[2].drifted);
        let mut small = round(0, 5.0, 0.10, 0.0, 0.0);
        small.extend(round(1, 5.2, 0.20, 0.05, -0.02));
        small.extend(round(2, 4.9, 0.15, 0.02, 0.0));
        let s = estimate(&small, &crate::data::plan::arms(&[1, 2]), &prompts());
        assert!(!s.drift[1].drifted, "{:?}", s.drift[1]);
        assert!(s.ratio[&crate::data::plan::arm(1)].drift_widening_log > 0.0);
    }

    #[test]
    fn widths_not_credibly_below_the_best_are_tied() {
        let mut arms = round(0, 5.0, 0.10, 0.09, 0.0);
        arms.extend(round(1, 5.2, 0.20, 0.21, 0.0));
        arms.extend(round(2, 4.9, 0.15, 0.12, 0.0));
        let e = estimate(&arms, &crate::data::plan::arms(&[1, 2]), &prompts());
        let t = ties(&e, crate::data::plan::arm(1), |_| true);
        assert!(t.iter().all(|t| t.tied), "{t:?}");
        let mut arms = round(0, 5.0, 0.10, 0.00, 0.0);
        arms.extend(round(1, 5.2, 0.20, 0.11, 0.0));
        arms.extend(round(2, 4.9, 0.15, 0.04, 0.0));
        let e = estimate(&arms, &crate::data::plan::arms(&[1, 2]), &prompts());
        let t = ties(&e, crate::data::plan::arm(1), |_| true);
        assert!(!t.iter().find(|t| t.width == crate::data::plan::arm(2)).unwrap().tied, "{t:?}");
    }

    /// Per-round log ratios: width -> values of rounds 0, 1, ...
    fn est_of(rows: &[(usize, &[f64])]) -> Estimates {
        let mut e = Estimates::default();
        for (w, xs) in rows {
            let pr: Vec<(usize, f64)> = xs.iter().copied().enumerate().collect();
            e.ratio.insert(crate::data::plan::arm(*w), interval(&pr, 0.0).unwrap());
        }
        e
    }

    #[test]
    fn the_width_round_table_gives_the_residual_variance_of_an_additive_model() {
        // x_wk = mu_w + rho_k exactly: no residual.
        let l: BTreeMap<usize, Vec<(usize, f64)>> =
            [(1, vec![(0, 0.1), (1, 0.3), (2, 0.2)]), (2, vec![(0, 0.2), (1, 0.4), (2, 0.3)])].into();
        let (v, df) = interaction_variance(&l, None).unwrap();
        assert!(v.abs() < 1e-20 && df == 2, "{v} {df}");
        // One cell off by 0.06 in a 2 x 3 table: SS = 0.06^2 * (1/2)(2/3) = 0.0012 on 2 df.
        let l: BTreeMap<usize, Vec<(usize, f64)>> =
            [(1, vec![(0, 0.1), (1, 0.3), (2, 0.2)]), (2, vec![(0, 0.26), (1, 0.4), (2, 0.3)])].into();
        let (v, df) = interaction_variance(&l, None).unwrap();
        assert_eq!(df, 2);
        assert!((v - 0.0012 / 2.0).abs() < 1e-12, "{v}");
        // Rounds missing from a width drop out; a given round list is honoured.
        let l: BTreeMap<usize, Vec<(usize, f64)>> =
            [(1, vec![(0, 0.1), (1, 0.3), (2, 0.2)]), (2, vec![(0, 0.2), (2, 0.3)])].into();
        assert_eq!(interaction_variance(&l, None).map(|x| x.1), Some(1));
        assert_eq!(interaction_variance(&l, Some(&[0])), None);
    }

    #[test]
    fn a_tie_test_takes_its_variance_from_every_measured_width() {
        // Width 3 against the best, width 1: 0.05 lower with a round-to-round
        // wobble of 0.04 that the pair alone (2 df) cannot tell from noise,
        // while widths 1, 2 and 4 move with the rounds exactly: the table's
        // variance (6 df) says width 3 is credibly slower.
        let e = est_of(&[
            (1, &[0.20, 0.30, 0.25]),
            (2, &[0.19, 0.29, 0.24]),
            (3, &[0.11, 0.29, 0.20]),
            (4, &[0.18, 0.28, 0.23]),
        ]);
        let own = interval(&[(0, -0.09), (1, -0.01), (2, -0.05)], 0.0).unwrap();
        assert!(own.interval.unwrap().1 >= 1.0, "the pair alone is tied: {own:?}");
        let t = ties(&e, crate::data::plan::arm(1), |_| true);
        let t3 = t.iter().find(|t| t.width == crate::data::plan::arm(3)).unwrap();
        let (v, df) = interaction_variance(
            &e.ratio.iter().map(|(w, r)| (*w, r.per_round.iter().map(|(k, x)| (*k, x.ln())).collect())).collect(),
            None,
        )
        .unwrap();
        assert_eq!(df, 6);
        let h = t_quantile(6) * (2.0 * v / 3.0).sqrt();
        assert!((t3.high.ln() - (-0.05 + h)).abs() < 1e-9, "{t3:?}");
        assert!(!t3.tied, "{t3:?}");
        // A width that is not a measurement stays out of the table and is
        // tested on its own pair: width 3 is then tied.
        let t = ties(&e, crate::data::plan::arm(1), |w| w != crate::data::plan::arm(3));
        assert!(t.iter().find(|t| t.width == crate::data::plan::arm(3)).unwrap().tied, "{t:?}");
    }

    #[test]
    fn one_round_gives_no_interval() {
        let e = estimate(&round(0, 5.0, 0.1, 0.0, 0.0), &crate::data::plan::arms(&[1, 2]), &prompts());
        assert_eq!(e.ratio[&crate::data::plan::arm(1)].interval, None);
        assert!(!e.ratio[&crate::data::plan::arm(1)].above_one());
        assert!(e.process_variance_log.is_none());
    }
}
