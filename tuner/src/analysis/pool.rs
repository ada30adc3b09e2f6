//! Decisions on every record of a key: the pooled rounds of the key's
//! records of one verify fingerprint ([`pool`] → [`Pooled`]) and the
//! hysteresis that keeps an entry's width until the pooled data show it
//! credibly slower than another ([`hysteresis`] → [`Verdict`]).
//!
//! The model (docs/records.md, "Pooled decisions"): a round's log ratio of
//! width w in record j is `mu_w + b_jw + e`, where `e` is the round's
//! noise (process and request; the record's own t interval) and `b_jw` a
//! between-sweep term: two days' or two hosts' sweeps of one key are not
//! one sample (the host's state, the day's neighbours). Per width, each
//! record contributes its mean log ratio `y_j` with variance `v_j =
//! s_j^2 / R_j`; the between-sweep variance `tau^2` is the DerSimonian-Laird
//! moment estimate (0 when the records agree within their own noise), and
//! the pooled log ratio is the mean weighted by `1 / (v_j + tau^2)`, its
//! interval a t interval on the records' within-record degrees of freedom.
//! Ties and differences are pooled the same way from each record's paired
//! per-round differences (the same brackets cancel). The rule on the pooled
//! numbers is the record's rule ([`crate::analysis::decision::DECISION_RULE`]).
use crate::data::plan::SpeculativeArm;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::analysis::estimate::t_quantile;
use crate::analysis::summary::Summary;

/// A new choice replaces the entry's width only when it is credibly faster
/// than the entry's width by more than this (the lower end of the pooled
/// 95 % interval of their ratio above `1 + margin`). 3 %: what neighbouring
/// widths differ by in the committed records, and what the issue's
/// stability criterion calls "within": widths closer than it are not worth
/// a reviewer's diff.
pub const HYSTERESIS_MARGIN: f64 = 0.03;

/// The one-sided confidence with which the pooled data must show the
/// entry's width slower than the new choice by more than the margin (the
/// lower end of a one-sided 92.5 % t interval). One-sided, because only one
/// direction moves the entry. 92.5 % is where the two aims of the stability
/// simulation (`tuner/tests/stability.rs`, docs/records.md) both hold at a
/// 3 % process spread: widths within 3 % of each other keep the entry
/// through five sweeps proposed in turn in at least 95 % of trials (95 %
/// keeps it in 99 %, 90 % in 94.5-97.5 %), and a width 10 % faster than
/// the entry's is adopted within two sweeps in at least 90 % (95 %: 87 %;
/// 90 %: 92 %).
pub const HYSTERESIS_CONFIDENCE: f64 = 0.925;

/// The widening (log) a width's rounds carry into the pool: the record's
/// own drift widening (the bias a linear drift of its bracket disagreement
/// could cause) and, for a drifted record (`drifted`; pooled only when its
/// decision survives the drift, [`crate::analysis::decision::DRIFT_SURVIVAL_RULE`]), at
/// least half the gap between its ratios against either bracket alone: the
/// bias were either bracket the truth.
pub fn widening(w: &crate::analysis::summary::WidthSummary, drifted: bool) -> f64 {
    let own = w.ratio.as_ref().map_or(0.0, |r| r.drift_widening_log);
    match (&w.ratio_vs_open, &w.ratio_vs_close) {
        (Some(o), Some(c)) if drifted => own.max((o.ratio.ln() - c.ratio.ln()).abs() / 2.0),
        _ => own,
    }
}

/// One record's rounds, as the pool reads them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecordRounds {
    /// `records/<folder>` (or any label, in simulation).
    pub record: String,
    pub date: String,
    /// width → `(round, ln ratio)` for each complete round.
    pub rounds: BTreeMap<SpeculativeArm, Vec<(usize, f64)>>,
    /// width → the record's drift widening (log), added to both ends.
    pub widen: BTreeMap<SpeculativeArm, f64>,
    /// Widths that are not measurements in this record.
    pub not_measured: BTreeSet<SpeculativeArm>,
}

impl RecordRounds {
    pub fn of(record: &str, s: &Summary) -> RecordRounds {
        let mut rounds = BTreeMap::new();
        let mut widen = BTreeMap::new();
        let mut not_measured = BTreeSet::new();
        for w in &s.widths {
            if w.not_a_measurement.is_some() {
                not_measured.insert(w.width);
            }
            if let Some(r) = &w.ratio {
                rounds.insert(w.width, r.per_round.iter().map(|(k, x)| (*k, x.ln())).collect());
                widen.insert(w.width, widening(w, s.drift));
            }
        }
        RecordRounds { record: record.to_string(), date: s.date.clone(), rounds, widen, not_measured }
    }

    /// Paired per-round `ln ratio_a - ln ratio_b` over the rounds both have.
    fn paired(&self, a: SpeculativeArm, b: SpeculativeArm) -> Vec<f64> {
        let (Some(xa), Some(xb)) = (self.rounds.get(&a), self.rounds.get(&b)) else { return Vec::new() };
        let mb: BTreeMap<usize, f64> = xb.iter().copied().collect();
        xa.iter().filter_map(|(k, x)| Some(x - mb.get(k)?)).collect()
    }
}

/// A pooled estimate in log space.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PooledLog {
    pub mean: f64,
    pub se: f64,
    /// The between-sweep variance estimate (0: the records agree).
    pub tau2: f64,
    /// Degrees of freedom of the t quantile: the records' `R_j - 1` summed.
    pub df: usize,
    pub records: usize,
    pub rounds: usize,
}

impl PooledLog {
    pub fn low(&self) -> f64 {
        self.mean - t_quantile(self.df) * self.se
    }

    pub fn high(&self) -> f64 {
        self.mean + t_quantile(self.df) * self.se
    }

    /// The lower end of the one-sided [`HYSTERESIS_CONFIDENCE`] interval.
    pub fn one_sided_low(&self) -> f64 {
        self.mean - crate::analysis::estimate::t_quantile_at(HYSTERESIS_CONFIDENCE, self.df) * self.se
    }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn var(xs: &[f64]) -> Option<f64> {
    (xs.len() >= 2).then(|| {
        let m = mean(xs);
        xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64
    })
}

/// One quantity's per-record samples, ready to pool: each record's mean and
/// count, and the within-record variance pooled over the records (one plan,
/// one noise: 4 rounds alone give a variance on 3 degrees of freedom, too
/// noisy to weight by). Records with fewer than two values are left out.
#[derive(Clone, Debug)]
struct Family {
    items: Vec<(f64, usize)>,
    within: f64,
    /// Degrees of freedom of `within` (the t quantile's).
    df: usize,
}

impl Family {
    fn of(samples: &[Vec<f64>]) -> Option<Family> {
        let kept: Vec<&Vec<f64>> = samples.iter().filter(|xs| xs.len() >= 2).collect();
        if kept.is_empty() {
            return None;
        }
        let (ss, df) = kept
            .iter()
            .fold((0.0, 0usize), |(s, d), xs| (s + var(xs).unwrap_or(0.0) * (xs.len() - 1) as f64, d + xs.len() - 1));
        let within = (ss / df.max(1) as f64).max(1e-12);
        Some(Family { items: kept.iter().map(|xs| (mean(xs), xs.len())).collect(), within, df })
    }

    /// A paired difference's samples, one per record, with the variance of
    /// one round's difference taken from each record's whole width × round
    /// table (`noise`: `(variance of a round's difference, df)` per record,
    /// [`difference_noise`]) rather than from the pair's own rounds: every
    /// pair of widths of a record shares one arm noise, and 4 rounds alone
    /// leave a variance on 3 degrees of freedom (a t quantile of 2.35 for
    /// one-sided 95 %, against 1.72 on the 21 of 8 widths × 4 rounds; at
    /// the hysteresis's 92.5 %, 1.92 against 1.49).
    fn of_differences(samples: &[(Vec<f64>, (f64, usize))]) -> Option<Family> {
        let kept: Vec<&(Vec<f64>, (f64, usize))> =
            samples.iter().filter(|(xs, (_, df))| !xs.is_empty() && *df > 0).collect();
        if kept.is_empty() {
            return None;
        }
        let (ss, df) = kept.iter().fold((0.0, 0usize), |(s, d), (_, (v, df))| (s + v * *df as f64, d + df));
        let within = (ss / df as f64).max(1e-12);
        Some(Family { items: kept.iter().map(|(xs, _)| (mean(xs), xs.len())).collect(), within, df })
    }

    /// DerSimonian-Laird parts: `(Q, J - 1, C)`.
    fn dl(&self) -> (f64, usize, f64) {
        let w: Vec<f64> = self.items.iter().map(|(_, n)| *n as f64 / self.within).collect();
        let sw: f64 = w.iter().sum();
        let fixed = self.items.iter().zip(&w).map(|((y, _), w)| w * y).sum::<f64>() / sw;
        let q = self.items.iter().zip(&w).map(|((y, _), w)| w * (y - fixed).powi(2)).sum();
        (q, self.items.len() - 1, sw - w.iter().map(|w| w * w).sum::<f64>() / sw)
    }

    /// Each item's weight in the pooled mean, `1 / (v_j + tau^2)`.
    fn weights(&self, tau2: f64) -> Vec<f64> {
        self.items.iter().map(|(_, n)| 1.0 / (self.within / *n as f64 + tau2)).collect()
    }

    fn combine(&self, tau2: f64) -> PooledLog {
        let ws = self.weights(tau2);
        let sws: f64 = ws.iter().sum();
        PooledLog {
            mean: self.items.iter().zip(&ws).map(|((y, _), w)| w * y).sum::<f64>() / sws,
            se: (1.0 / sws).sqrt(),
            tau2,
            df: self.df.max(1),
            records: self.items.len(),
            rounds: self.items.iter().map(|(_, n)| n).sum(),
        }
    }
}

/// The between-sweep variance common to a family of quantities (every
/// width's ratio, or every width's difference from one width): the
/// DerSimonian-Laird moment estimate over all of them together, so that two
/// records give it as many degrees of freedom as there are widths rather
/// than one.
fn common_tau2(fams: &[&Family]) -> f64 {
    let (q, df, c) = fams.iter().map(|f| f.dl()).fold((0.0, 0usize, 0.0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
    if df == 0 || c <= 0.0 { 0.0 } else { ((q - df as f64) / c).max(0.0) }
}

/// Random-effects pooling of one quantity's per-record samples (each a
/// record's per-round values), its between-sweep variance estimated from it
/// alone.
pub fn pool_samples(samples: &[Vec<f64>]) -> Option<PooledLog> {
    let f = Family::of(samples)?;
    Some(f.combine(common_tau2(&[&f])))
}

/// The variance of one round's paired difference between two widths of a
/// record, and its degrees of freedom: twice the residual variance of the
/// record's width × round table over its measured widths
/// ([`crate::analysis::estimate::interaction_variance`]); without such a table (fewer
/// than two measured widths or two complete rounds), the pair's own sample
/// variance.
fn difference_noise(r: &RecordRounds, a: SpeculativeArm, b: SpeculativeArm) -> (f64, usize) {
    let measured: BTreeMap<SpeculativeArm, Vec<(usize, f64)>> =
        r.rounds.iter().filter(|(w, _)| !r.not_measured.contains(w)).map(|(w, x)| (*w, x.clone())).collect();
    let table = (measured.contains_key(&a) && measured.contains_key(&b))
        .then(|| crate::analysis::estimate::interaction_variance(&measured, None))
        .flatten();
    match table {
        Some((v, df)) => (2.0 * v, df),
        None => {
            let d = r.paired(a, b);
            (var(&d).unwrap_or(0.0), d.len().saturating_sub(1))
        }
    }
}

/// Every width's paired difference from `b`, pooled with one between-sweep
/// variance for them all: `a -> ln(ratio_a / ratio_b)`.
fn differences_from(records: &[RecordRounds], b: SpeculativeArm) -> BTreeMap<SpeculativeArm, PooledLog> {
    let widths: BTreeSet<SpeculativeArm> =
        records.iter().flat_map(|r| r.rounds.keys().copied()).filter(|w| *w != b).collect();
    let fams: Vec<(SpeculativeArm, Family)> = widths
        .into_iter()
        .filter_map(|a| {
            let samples: Vec<(Vec<f64>, (f64, usize))> = records
                .iter()
                .map(|r| (r.paired(a, b), difference_noise(r, a, b)))
                .filter(|(x, _)| !x.is_empty())
                .collect();
            Family::of_differences(&samples).map(|f| (a, f))
        })
        .collect();
    let tau2 = common_tau2(&fams.iter().map(|(_, f)| f).collect::<Vec<_>>());
    fams.into_iter().map(|(a, f)| (a, f.combine(tau2))).collect()
}

/// One width on the pooled data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PooledWidth {
    pub width: SpeculativeArm,
    pub ratio: f64,
    pub interval: (f64, f64),
    pub log: PooledLog,
    /// Against the pooled best, paired by round within each record.
    pub vs_best: Option<(f64, f64, f64)>,
    pub tied: bool,
    /// Not a measurement in some pooled record: never the best or chosen.
    pub not_measured: bool,
}

/// The rule on the pooled records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pooled {
    pub records: Vec<String>,
    pub widths: Vec<PooledWidth>,
    pub best: Option<SpeculativeArm>,
    /// The rule's choice on the pooled numbers (None: off).
    pub choice: Option<SpeculativeArm>,
}

impl Pooled {
    pub fn width(&self, w: SpeculativeArm) -> Option<&PooledWidth> {
        self.widths.iter().find(|x| x.width == w)
    }
}

/// The pooled ratio of `a` over `b` (paired by round in each record), in
/// logs, with the between-sweep variance common to every width's difference
/// from `b`.
pub fn difference(records: &[RecordRounds], a: SpeculativeArm, b: SpeculativeArm) -> Option<PooledLog> {
    differences_from(records, b).remove(&a)
}

/// The decision rule on the pooled records.
pub fn pool(records: &[RecordRounds]) -> Pooled {
    let widths: BTreeSet<SpeculativeArm> = records.iter().flat_map(|r| r.rounds.keys().copied()).collect();
    // Per width, the family of the records' rounds and, item by item, the
    // drift widening each record brings (the records `Family::of` keeps:
    // two rounds or more, in order).
    let fams: Vec<(SpeculativeArm, Family, Vec<f64>)> = widths
        .into_iter()
        .filter_map(|w| {
            let (samples, widen): (Vec<Vec<f64>>, Vec<f64>) = records
                .iter()
                .filter_map(|r| {
                    let xs = r.rounds.get(&w)?.iter().map(|(_, x)| *x).collect::<Vec<f64>>();
                    Some((xs, r.widen.get(&w).copied().unwrap_or(0.0)))
                })
                .unzip();
            let kept = samples.iter().zip(widen).filter(|(xs, _)| xs.len() >= 2).map(|(_, b)| b).collect();
            Family::of(&samples).map(|f| (w, f, kept))
        })
        .collect();
    let tau2 = common_tau2(&fams.iter().map(|(_, f, _)| f).collect::<Vec<_>>());
    let mut out: Vec<PooledWidth> = Vec::new();
    for (w, f, widen) in &fams {
        let log = f.combine(tau2);
        // A record's drift can move the pooled mean by its widening times
        // its weight in that mean: the bound on the pooled mean's bias is the
        // widenings weighted as the means are, not their plain mean (a
        // drifted record of many rounds among short clean ones moves the mean
        // by more than its share of the records).
        let weights = f.weights(tau2);
        let total: f64 = weights.iter().sum();
        let widen = if total > 0.0 { weights.iter().zip(widen).map(|(a, b)| a * b).sum::<f64>() / total } else { 0.0 };
        out.push(PooledWidth {
            width: *w,
            ratio: log.mean.exp(),
            interval: ((log.low() - widen).exp(), (log.high() + widen).exp()),
            log,
            vs_best: None,
            tied: false,
            not_measured: records.iter().any(|r| r.not_measured.contains(w)),
        });
    }
    // The best among the fixed widths; the adaptive arm (0, first in
    // width order) is tested against it and, tied and above 1.0, chosen
    // before any fixed width, as the record's rule does.
    let best = out
        .iter()
        .filter(|x| !x.not_measured && x.width != crate::data::plan::SpeculativeArm::Adaptive)
        .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
        .map(|x| x.width);
    if let Some(b) = best {
        let diffs = differences_from(records, b);
        for x in out.iter_mut() {
            if x.width == b {
                x.vs_best = Some((1.0, 1.0, 1.0));
                x.tied = true;
            } else if let Some(d) = diffs.get(&x.width) {
                x.vs_best = Some((d.mean.exp(), d.low().exp(), d.high().exp()));
                x.tied = !x.not_measured && d.high() >= 0.0;
            }
        }
    }
    let choice = out
        .iter()
        .filter(|x| x.tied && !x.not_measured)
        .find(|x| crate::analysis::estimate::wholly_above_one(x.interval.0))
        .map(|x| x.width);
    Pooled { records: records.iter().map(|r| r.record.clone()).collect(), widths: out, best, choice }
}

/// What `propose` does with the entry's width.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    /// No entry yet: the pooled choice.
    First { width: Option<SpeculativeArm> },
    /// The pooled choice is the entry's width: kept, evidence updated.
    Same { width: Option<SpeculativeArm> },
    /// The pooled choice differs but not credibly by more than the margin.
    Keep { width: Option<SpeculativeArm>, choice: Option<SpeculativeArm>, why: String },
    /// The pooled data show the entry's width credibly slower than the choice.
    Change { from: Option<SpeculativeArm>, to: Option<SpeculativeArm>, why: String },
}

impl Verdict {
    /// The width the entry gets.
    pub fn width(&self) -> Option<SpeculativeArm> {
        match self {
            Verdict::First { width } | Verdict::Same { width } | Verdict::Keep { width, .. } => *width,
            Verdict::Change { to, .. } => *to,
        }
    }

    /// One sentence for the reviewer (and the entry's note).
    pub fn say(&self) -> String {
        let name = |w: &Option<SpeculativeArm>| {
            w.map_or("off".to_string(), |w| {
                if w == crate::data::plan::SpeculativeArm::Adaptive {
                    "the adaptive draft length".to_string()
                } else {
                    format!("width {w}")
                }
            })
        };
        match self {
            // One sentence for both, so that proposing a record again
            // writes the same bytes.
            Verdict::First { width } | Verdict::Same { width } => format!("{}: the pooled rule's choice", name(width)),
            Verdict::Keep { width, choice, why } => {
                format!("{} kept although the pooled rule would choose {}: {why}", name(width), name(choice))
            }
            Verdict::Change { from, to, why } => format!("{} replaces {}: {why}", name(to), name(from)),
        }
    }
}

/// Hysteresis: `current` is the entry's width (`None`: no entry; `Some(None)`: off).
pub fn hysteresis(current: Option<Option<SpeculativeArm>>, pooled: &Pooled, records: &[RecordRounds]) -> Verdict {
    let margin = (1.0 + HYSTERESIS_MARGIN).ln();
    let choice = pooled.choice;
    let wl = |w: SpeculativeArm| {
        if w == crate::data::plan::SpeculativeArm::Adaptive {
            "the adaptive arm".to_string()
        } else {
            format!("width {w}")
        }
    };
    let Some(cur) = current else { return Verdict::First { width: choice } };
    let nl = choice.map_or_else(|| "off".to_string(), wl);
    let cl = cur.map_or_else(|| "off".to_string(), wl);
    if cur == choice {
        return Verdict::Same { width: cur };
    }
    let pct = 100.0 * HYSTERESIS_MARGIN;
    let iv = |d: &PooledLog| format!("{:.3} [{:.3}, {:.3}]", d.mean.exp(), d.low().exp(), d.high().exp());
    match (cur, choice) {
        (Some(c), _) if pooled.width(c).is_none_or(|x| x.not_measured) => {
            Verdict::Change { from: cur, to: choice, why: format!("the pooled records have no measurement of {cl}") }
        }
        (Some(c), Some(n)) => match difference(records, n, c) {
            Some(d) if d.one_sided_low() > margin => Verdict::Change {
                from: cur,
                to: choice,
                why: format!(
                    "{nl} over {cl}, pooled: {} (one-sided {:.1}% lower end {:.3}) lies above {:.2}",
                    iv(&d),
                    100.0 * HYSTERESIS_CONFIDENCE,
                    d.one_sided_low().exp(),
                    1.0 + HYSTERESIS_MARGIN
                ),
            },
            Some(d) => Verdict::Keep {
                width: cur,
                choice,
                why: format!(
                    "{nl} over {cl}, pooled: {} (one-sided {:.1}% lower end {:.3}) does not lie above {:.2} \
                     ({cl} is not credibly {pct:.0}% slower)",
                    iv(&d),
                    100.0 * HYSTERESIS_CONFIDENCE,
                    d.one_sided_low().exp(),
                    1.0 + HYSTERESIS_MARGIN
                ),
            },
            None => Verdict::Keep { width: cur, choice, why: format!("no round measured widths {n} and {c} together") },
        },
        (Some(c), None) => {
            // To off only when the entry's width is credibly no faster than classic.
            let x = pooled.width(c).expect("checked above");
            if crate::analysis::estimate::wholly_below_one(x.interval.1) {
                Verdict::Change {
                    from: cur,
                    to: None,
                    why: format!(
                        "{cl}'s pooled ratio {:.3} [{:.3}, {:.3}] lies wholly below 1.0",
                        x.ratio, x.interval.0, x.interval.1
                    ),
                }
            } else {
                Verdict::Keep {
                    width: cur,
                    choice,
                    why: format!(
                        "{cl}'s pooled ratio {:.3} [{:.3}, {:.3}] does not lie wholly below 1.0",
                        x.ratio, x.interval.0, x.interval.1
                    ),
                }
            }
        }
        (None, Some(n)) => {
            let x = pooled.width(n).expect("the choice is a pooled width");
            let lo = x.interval.0;
            if lo > 1.0 + HYSTERESIS_MARGIN {
                Verdict::Change {
                    from: None,
                    to: Some(n),
                    why: format!(
                        "{nl}'s pooled ratio {:.3} [{lo:.3}, {:.3}] lies wholly above {:.2}",
                        x.ratio,
                        x.interval.1,
                        1.0 + HYSTERESIS_MARGIN
                    ),
                }
            } else {
                Verdict::Keep {
                    width: None,
                    choice,
                    why: format!(
                        "{nl}'s pooled ratio {:.3} [{lo:.3}, {:.3}] does not lie wholly above {:.2}",
                        x.ratio,
                        x.interval.1,
                        1.0 + HYSTERESIS_MARGIN
                    ),
                }
            }
        }
        (None, None) => Verdict::Same { width: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::plan::arm;

    fn rec(name: &str, rows: &[(usize, &[f64])]) -> RecordRounds {
        RecordRounds {
            record: name.into(),
            date: "2026-12-03".into(),
            rounds: rows
                .iter()
                .map(|(w, xs)| (arm(*w), xs.iter().enumerate().map(|(k, x)| (k, x.ln())).collect()))
                .collect(),
            widen: BTreeMap::new(),
            not_measured: BTreeSet::new(),
        }
    }

    #[test]
    fn records_that_agree_pool_without_a_between_sweep_term_and_ones_that_do_not_get_one() {
        let a = pool_samples(&[vec![0.10, 0.12, 0.11, 0.09], vec![0.11, 0.10, 0.12, 0.10]]).unwrap();
        assert_eq!(a.tau2, 0.0);
        assert_eq!((a.records, a.rounds, a.df), (2, 8, 6));
        assert!((a.mean - 0.10625).abs() < 0.005, "{a:?}");
        let b = pool_samples(&[vec![0.10, 0.12, 0.11, 0.09], vec![0.31, 0.30, 0.32, 0.30]]).unwrap();
        assert!(b.tau2 > 0.01, "{b:?}");
        // The between-sweep term widens the pooled interval past either record's.
        assert!(b.se > 0.05, "{b:?}");
    }

    #[test]
    fn a_difference_takes_its_noise_from_the_record_s_whole_width_round_table() {
        let mut r = rec(
            "records/a",
            &[(1, &[1.10, 1.12, 1.11, 1.13]), (2, &[1.13, 1.10, 1.14, 1.11]), (3, &[1.20, 1.21, 1.25, 1.22])],
        );
        let d = difference(std::slice::from_ref(&r), arm(2), arm(1)).unwrap();
        // (3 - 1)(4 - 1) degrees of freedom, not the pair's 3.
        assert_eq!((d.df, d.records, d.rounds), (6, 1, 4));
        let logs: BTreeMap<SpeculativeArm, Vec<(usize, f64)>> = r.rounds.clone();
        let (v, _) = crate::analysis::estimate::interaction_variance(&logs, None).unwrap();
        assert!((d.se - (2.0 * v / 4.0).sqrt()).abs() < 1e-12, "{d:?}");
        // A width that is not a measurement leaves the table: 2 widths, 3 df.
        r.not_measured.insert(arm(3));
        let d = difference(std::slice::from_ref(&r), arm(2), arm(1)).unwrap();
        assert_eq!(d.df, 3);
        let own = pool_samples(&[r.paired(arm(2), arm(1))]).unwrap();
        assert!((d.se - own.se).abs() < 1e-12, "{d:?} {own:?}");
    }

    #[test]
    fn the_entry_keeps_its_width_unless_another_is_credibly_faster_by_the_margin() {
        // Width 2 a little faster than width 1 in both records: the rule's
        // choice is the narrowest tied width, 1; an entry at 2 is kept.
        let r = [
            rec("records/a", &[(1, &[1.10, 1.12, 1.11, 1.13]), (2, &[1.13, 1.10, 1.14, 1.11])]),
            rec("records/b", &[(1, &[1.11, 1.10, 1.12, 1.11]), (2, &[1.10, 1.14, 1.11, 1.13])]),
        ];
        let p = pool(&r);
        assert_eq!(p.choice, Some(arm(1)), "{p:?}");
        let v = hysteresis(Some(Some(arm(2))), &p, &r);
        assert!(
            matches!(v, Verdict::Keep { width, choice, .. } if width == Some(arm(2)) && choice == Some(arm(1))),
            "{v:?}"
        );
        assert_eq!(hysteresis(None, &p, &r), Verdict::First { width: Some(arm(1)) });
        assert_eq!(hysteresis(Some(Some(arm(1))), &p, &r), Verdict::Same { width: Some(arm(1)) });
        // Width 3 20% faster than the entry's width 1, every round: changed.
        let r = [
            rec("records/a", &[(1, &[1.10, 1.12, 1.11, 1.13]), (3, &[1.32, 1.35, 1.33, 1.36])]),
            rec("records/b", &[(1, &[1.11, 1.10, 1.12, 1.11]), (3, &[1.33, 1.32, 1.35, 1.33])]),
        ];
        let p = pool(&r);
        assert_eq!(p.choice, Some(arm(3)));
        let v = hysteresis(Some(Some(arm(1))), &p, &r);
        assert!(matches!(v, Verdict::Change { from, to, .. } if from == Some(arm(1)) && to == Some(arm(3))), "{v:?}");
        assert!(v.say().contains("width 3 replaces width 1"), "{}", v.say());
        assert_eq!(Verdict::First { width: Some(arm(1)) }.say(), Verdict::Same { width: Some(arm(1)) }.say());
    }

    #[test]
    fn a_records_drift_widening_counts_by_its_weight_in_the_pooled_mean() {
        // A clean record of two rounds and a drifted one of eight that agree:
        // no between-sweep term, weights 2 : 8, so the drifted record's
        // widening moves the pooled interval by 8/10 of it, not by half.
        let clean = rec("records/a", &[(1, &[1.10, 1.12])]);
        let mut drifted = rec("records/b", &[(1, &[1.11, 1.10, 1.12, 1.11, 1.10, 1.12, 1.11, 1.11])]);
        drifted.widen.insert(arm(1), 0.1);
        let p = pool(&[clean.clone(), drifted.clone()]);
        let x = p.width(arm(1)).unwrap();
        assert_eq!(x.log.tau2, 0.0, "{x:?}");
        let widen = 0.1 * 8.0 / 10.0;
        assert!((x.interval.0.ln() - (x.log.low() - widen)).abs() < 1e-12, "{x:?}");
        assert!((x.interval.1.ln() - (x.log.high() + widen)).abs() < 1e-12, "{x:?}");
        // A record of one round is not in the mean, and brings no widening.
        let mut one = rec("records/c", &[(1, &[1.5])]);
        one.widen.insert(arm(1), 5.0);
        let q = pool(&[clean, drifted, one]);
        assert_eq!(q.width(arm(1)).unwrap().interval, x.interval);
    }

    #[test]
    fn a_drifted_records_rounds_carry_half_the_one_sided_gap_into_the_pool() {
        let est = |xs: &[f64]| {
            crate::analysis::estimate::interval(
                &xs.iter().enumerate().map(|(k, x)| (k, x.ln())).collect::<Vec<_>>(),
                0.0,
            )
        };
        let tie = crate::analysis::estimate::TieTest { width: arm(1), vs_best: 1.0, low: 0.9, high: 1.1, tied: true };
        let w = crate::analysis::summary::WidthSummary {
            ratio_vs_open: est(&[1.25, 1.27, 1.26]),
            ratio_vs_close: est(&[1.35, 1.37, 1.36]),
            ..crate::analysis::summary::WidthSummary::estimated(arm(1), est(&[1.30, 1.32, 1.31]), tie)
        };
        let (o, c) = (w.ratio_vs_open.as_ref().unwrap().ratio, w.ratio_vs_close.as_ref().unwrap().ratio);
        let half_gap = (c / o).ln() / 2.0;
        assert!((widening(&w, true) - half_gap).abs() < 1e-12);
        // Not drifted: the record's own widening only (none here).
        assert_eq!(widening(&w, false), 0.0);
        // A larger own widening stands.
        let mut wide = w.clone();
        wide.ratio.as_mut().unwrap().drift_widening_log = 0.2;
        assert_eq!(widening(&wide, true), 0.2);
    }
}
