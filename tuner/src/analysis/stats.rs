//! Descriptive sample statistics for records: n, median, range and MAD
//! outlier flags, by the rules of [`runtime::bench::stats`] (the ones
//! `runtime bench` uses). No interval here: requests inside one process are
//! not independent replicates, so an interval over requests would be
//! several times too narrow. Intervals come from [`crate::analysis::estimate`], with
//! the process (the arm) as the unit.
use serde::{Deserialize, Serialize};

pub use runtime::bench::stats::{OUTLIER_MADS, median};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// Samples more than [`OUTLIER_MADS`] scaled MADs from the median (kept, flagged).
    pub outliers: usize,
}

/// Stats of a sample; `None` when it is empty. Non-finite values must be
/// filtered out by the caller.
pub fn stats(xs: &[f64]) -> Option<Stats> {
    if xs.is_empty() {
        return None;
    }
    Some(Stats {
        n: xs.len(),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        median: median(xs),
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        outliers: runtime::bench::stats::outliers(xs).len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_flag_outliers_without_dropping_them() {
        let s = stats(&[10.0, 10.5, 9.5, 10.2, 9.8, 100.0]).unwrap();
        assert_eq!(s.n, 6);
        assert_eq!(s.outliers, 1);
        assert_eq!(s.max, 100.0);
        assert!(stats(&[]).is_none());
        let one = stats(&[3.0]).unwrap();
        assert_eq!((one.min, one.median, one.max), (3.0, 3.0, 3.0));
    }
}
