//! Sample statistics for records: median, range, a seeded percentile
//! bootstrap interval of the median, and MAD outlier flags.
//!
//! Why a bootstrap of the median: per-request tok/s on a shared host is
//! skewed (stalls make a long low tail), so the median is the location, and
//! its sampling distribution has no simple closed form for small n
//! (Efron & Tibshirani 1993, ch. 13, percentile interval). The generator is
//! seeded from the sample count so a summary is reproducible byte for byte.
use serde::{Deserialize, Serialize};
use statrs::statistics::{Data, OrderStatistics};

/// Bootstrap resamples. 2000 keeps the Monte Carlo error of a 2.5 %
/// percentile well under the sampling error at the n a sweep collects.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Fixed seed: the same samples always give the same interval.
pub const BOOTSTRAP_SEED: u64 = 0x5eed_d4af_7915_e000;

/// A sample above this many scaled MADs from the median is flagged.
pub const OUTLIER_MADS: f64 = 3.5;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// Percentile-bootstrap 95 % interval of the median.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Samples more than [`OUTLIER_MADS`] scaled MADs from the median (kept, flagged).
    pub outliers: usize,
}

pub fn median(xs: &[f64]) -> f64 {
    Data::new(xs.to_vec()).median()
}

/// SplitMix64 (Steele, Lea & Flood 2014): small, fast, and good enough to
/// draw resample indices.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for n < 2^24).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// Percentile-bootstrap 95 % interval of the median.
pub fn bootstrap_median_ci(xs: &[f64], seed: u64) -> (f64, f64) {
    if xs.len() < 2 {
        let m = xs.first().copied().unwrap_or(f64::NAN);
        return (m, m);
    }
    let mut rng = SplitMix64(seed ^ (xs.len() as u64).wrapping_mul(0x9e37_79b9));
    let mut resample = vec![0.0; xs.len()];
    let mut medians = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for r in resample.iter_mut() {
            *r = xs[rng.below(xs.len())];
        }
        medians.push(Data::new(resample.as_mut_slice()).median());
    }
    let mut d = Data::new(medians);
    (d.quantile(0.025), d.quantile(0.975))
}

/// Stats of a sample; `None` when it is empty. Non-finite values must be
/// filtered out by the caller.
pub fn stats(xs: &[f64]) -> Option<Stats> {
    if xs.is_empty() {
        return None;
    }
    let med = median(xs);
    let devs: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    // 1.4826 scales the MAD to the standard deviation of a normal sample.
    let mad = 1.4826 * median(&devs);
    let outliers = if mad > 0.0 { devs.iter().filter(|d| **d > OUTLIER_MADS * mad).count() } else { 0 };
    let (ci_low, ci_high) = bootstrap_median_ci(xs, BOOTSTRAP_SEED);
    Some(Stats {
        n: xs.len(),
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        median: med,
        max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ci_low,
        ci_high,
        outliers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_is_reproducible_and_brackets_the_median() {
        let xs: Vec<f64> = (0..30).map(|i| 100.0 + ((i * 37) % 11) as f64).collect();
        let a = bootstrap_median_ci(&xs, BOOTSTRAP_SEED);
        let b = bootstrap_median_ci(&xs, BOOTSTRAP_SEED);
        assert_eq!(a, b);
        let m = median(&xs);
        assert!(a.0 <= m && m <= a.1, "{a:?} {m}");
        assert!(a.1 - a.0 < 10.0, "{a:?}");
        assert_ne!(bootstrap_median_ci(&xs, 1), (f64::NAN, f64::NAN));
    }

    #[test]
    fn a_wider_sample_gives_a_wider_interval() {
        let tight: Vec<f64> = (0..20).map(|i| 100.0 + (i % 3) as f64).collect();
        let wide: Vec<f64> = (0..20).map(|i| 100.0 + 10.0 * (i % 7) as f64).collect();
        let t = bootstrap_median_ci(&tight, 7);
        let w = bootstrap_median_ci(&wide, 7);
        assert!(w.1 - w.0 > t.1 - t.0);
    }

    #[test]
    fn stats_flag_outliers_without_dropping_them() {
        let s = stats(&[10.0, 10.5, 9.5, 10.2, 9.8, 100.0]).unwrap();
        assert_eq!(s.n, 6);
        assert_eq!(s.outliers, 1);
        assert_eq!(s.max, 100.0);
        assert!(stats(&[]).is_none());
        let one = stats(&[3.0]).unwrap();
        assert_eq!((one.ci_low, one.ci_high), (3.0, 3.0));
    }
}
