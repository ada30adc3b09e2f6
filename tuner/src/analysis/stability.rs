//! How stable a record's decision is: a bootstrap over its rounds
//! ([`stability`] → [`Stability`]).
//!
//! A round is the unit of replication (its own brackets, one process per
//! width), so a replicate sweep is a draw of `R` rounds with replacement
//! from the record's `R`; each draw is decided by the record's own rule
//! ([`crate::analysis::decision::decide`], with the tie tests and intervals recomputed
//! from the drawn rounds' ratios, each width keeping its drift widening).
//! The record states how often a draw chooses the record's width, what the
//! draws choose, and the expected regret of the record's width: the mean
//! over draws of `1 - ratio(chosen) / ratio(best of the draw)`, the speed
//! given up against the best width if the draw were the truth (`off`
//! counts as a ratio of 1.0).
//!
//! With 4 rounds there are only 35 distinct draws (as multisets), so the
//! agreement is coarse; it is what the data can say, and `tuner propose`
//! pools records to say more (docs/records.md).
use std::collections::BTreeMap;

use crate::analysis::decision::decide;
use crate::analysis::estimate::{Estimates, interval, ties};
use crate::analysis::summary::{Stability, WidthSummary};
use crate::data::plan::SpeculativeArm;

/// Draws per record: the agreement's Monte Carlo error is then under one
/// point, and the draws cost milliseconds.
pub const DRAWS: usize = 2000;

/// SplitMix64: seeded, so a record re-summarizes to the same statement.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// One draw's widths: each width's ratio from the drawn rounds (a round
/// drawn twice counts twice, under a new index so pairing by round holds).
fn drawn(widths: &[WidthSummary], picks: &[usize]) -> Vec<WidthSummary> {
    let mut est = Estimates::default();
    for w in widths {
        let Some(r) = &w.ratio else { continue };
        let by_round: BTreeMap<usize, f64> = r.per_round.iter().map(|(k, x)| (*k, x.ln())).collect();
        let xs: Vec<(usize, f64)> =
            picks.iter().enumerate().filter_map(|(j, k)| by_round.get(k).map(|x| (j, *x))).collect();
        if let Some(e) = interval(&xs, r.drift_widening_log) {
            est.ratio.insert(w.width, e);
        }
    }
    let valid = |w: SpeculativeArm| widths.iter().any(|x| x.width == w && x.not_a_measurement.is_none());
    let best = est
        .ratio
        .iter()
        .filter(|(w, _)| valid(**w) && **w != crate::data::plan::SpeculativeArm::Adaptive)
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio));
    let tie = best.map(|(b, _)| ties(&est, *b, valid)).unwrap_or_default();
    widths
        .iter()
        .map(|w| WidthSummary {
            ratio: est.ratio.get(&w.width).cloned(),
            tie: tie.iter().find(|t| t.width == w.width).cloned(),
            ..w.clone()
        })
        .collect()
}

/// The bootstrap of a record's decision (`chosen`, None = off) over its
/// rounds; None with fewer than two rounds with ratios.
pub fn stability(widths: &[WidthSummary], chosen: Option<SpeculativeArm>, seed: u64) -> Option<Stability> {
    let mut rounds: Vec<usize> =
        widths.iter().filter_map(|w| w.ratio.as_ref()).flat_map(|r| r.per_round.iter().map(|(k, _)| *k)).collect();
    rounds.sort_unstable();
    rounds.dedup();
    if rounds.len() < 2 {
        return None;
    }
    let mut rng = Rng(seed ^ 0x5eed_5eed_5eed_5eed);
    let mut counts: BTreeMap<Option<SpeculativeArm>, usize> = BTreeMap::new();
    let mut regret = 0.0;
    for _ in 0..DRAWS {
        let picks: Vec<usize> = (0..rounds.len()).map(|_| rounds[rng.below(rounds.len())]).collect();
        let ws = drawn(widths, &picks);
        let d = decide(&ws);
        *counts.entry(d.width).or_default() += 1;
        let ratio_of = |w: Option<SpeculativeArm>| match w {
            None => Some(1.0),
            Some(w) => ws.iter().find(|x| x.width == w).and_then(|x| x.ratio.as_ref()).map(|r| r.ratio),
        };
        let best = ws
            .iter()
            .filter(|x| x.not_a_measurement.is_none())
            .filter_map(|x| x.ratio.as_ref().map(|r| r.ratio))
            .fold(1.0f64, f64::max);
        if let Some(r) = ratio_of(chosen) {
            regret += 1.0 - r / best;
        }
    }
    let n = DRAWS as f64;
    let mut choices: Vec<(Option<SpeculativeArm>, f64)> = counts.iter().map(|(w, c)| (*w, *c as f64 / n)).collect();
    choices.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(Stability {
        draws: DRAWS,
        rounds: rounds.len(),
        same: counts.get(&chosen).copied().unwrap_or(0) as f64 / n,
        choices,
        expected_regret: regret / n,
    })
}
