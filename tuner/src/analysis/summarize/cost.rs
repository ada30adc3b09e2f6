//! The verify-cost curves of a sweep ([`crate::data::verify_cost`]).
use std::collections::BTreeMap;

use crate::data::raw::{RawFile, RawLine};
use crate::data::verify_cost::{CostCurve, CostPoint, CostRun};

/// The curves of a sweep's first `n_rounds` rounds, one per context length
/// of its design; a round's latest attempt is its measurement.
pub fn curves(raw: &RawFile, n_rounds: usize) -> Vec<CostCurve> {
    let mut latest: BTreeMap<(usize, usize), &CostRun> = BTreeMap::new();
    for l in &raw.lines {
        if let RawLine::Cost(c) = l
            && latest.get(&(c.context, c.round)).is_none_or(|p| p.attempt <= c.attempt)
        {
            latest.insert((c.context, c.round), c);
        }
    }
    let mut out = Vec::new();
    for &context in &raw.header.settings.design.cost_contexts {
        let mut ok: Vec<&CostRun> = Vec::new();
        let mut missing = Vec::new();
        for round in 0..n_rounds {
            match latest.get(&(context, round)) {
                Some(c) if c.ok && !c.relative.is_empty() => ok.push(c),
                Some(c) => missing.push((round, c.error.clone().unwrap_or_else(|| "no measurement".into()))),
                None => missing.push((round, "not run (the sweep ended or was resumed past it)".into())),
            }
        }
        let n_rows = ok.iter().map(|c| c.relative.len()).min().unwrap_or(0);
        let points = (0..n_rows)
            .filter_map(|i| {
                let per: Vec<(usize, f64)> = ok.iter().map(|c| (c.round, c.relative[i].ln())).collect();
                crate::analysis::estimate::interval(&per, 0.0).map(|e| CostPoint {
                    rows: i + 1,
                    relative: e.ratio,
                    interval: e.interval,
                    per_round: e.per_round,
                })
            })
            .collect();
        let mut ones: Vec<f64> = ok.iter().filter_map(|c| c.one_row_s).map(|s| s * 1e3).collect();
        ones.sort_by(f64::total_cmp);
        let one_row_ms = (!ones.is_empty()).then(|| {
            let m = ones.len() / 2;
            if ones.len() % 2 == 1 { ones[m] } else { (ones[m - 1] + ones[m]) / 2.0 }
        });
        out.push(CostCurve { context, rounds: ok.len(), one_row_ms, points, missing });
    }
    out
}
