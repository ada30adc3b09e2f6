//! The descriptive statistics of every measurement in the project, one
//! rule each: the median, the outlier flag, and a distribution-free
//! interval for a median. `runtime bench` (its throughput, verify-cost and
//! width-curve samples) and the tuner (its per-request rates, `tuner::stats`)
//! both call these, so "median" and "outlier" mean one thing everywhere.
//!
//! The unit of replication is the caller's to state, and it decides what an
//! interval means:
//! - `runtime bench`: a sample is one repetition inside one process; the
//!   median's interval ([`median_ci95`]) covers the repetitions of that
//!   process only, not the spread between processes.
//! - the tuner: a sample is one request inside one arm (one process);
//!   requests of one process are not independent replicates, so the tuner
//!   states no interval from here. Its intervals come from
//!   `tuner::estimate`, with the arm as the unit.
//!
//! Outliers are flagged, never dropped: every statistic is over all samples.

/// The factor that scales a median absolute deviation to the standard
/// deviation of a normal sample.
pub const MAD_TO_SD: f64 = 1.4826;

/// A sample further than this many scaled MADs ([`MAD_TO_SD`] × MAD) from
/// the median is flagged as an outlier: the modified z-score threshold of
/// Iglewicz and Hoaglin (1993), about 5.2 raw MADs.
pub const OUTLIER_MADS: f64 = 3.5;

/// The sorted copy of a sample.
///
/// # Panics
/// On a NaN among the samples (callers filter non-finite values).
fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN samples"));
    s
}

/// The median of an already sorted, non-empty sample: the middle value, or
/// the mean of the two middle values.
fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

/// The median of a non-empty sample; NaN for an empty one.
///
/// # Panics
/// On a NaN among the samples.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    median_sorted(&sorted(xs))
}

/// Indices (into `xs`, in order) of the samples more than [`OUTLIER_MADS`]
/// scaled MADs from the median. None when the MAD is 0 (over half the
/// samples equal): the scale is then unknown, and nothing is flagged.
pub fn outliers(xs: &[f64]) -> Vec<usize> {
    if xs.is_empty() {
        return Vec::new();
    }
    let med = median(xs);
    let devs: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    let mad = MAD_TO_SD * median(&devs);
    if mad <= 0.0 {
        return Vec::new();
    }
    devs.iter().enumerate().filter(|(_, d)| **d > OUTLIER_MADS * mad).map(|(i, _)| i).collect()
}

/// A 95% distribution-free interval for the median of a non-empty sample,
/// from order statistics: the ranks n/2 ∓ 1.96·√n/2 (the normal
/// approximation to the binomial). With fewer than six samples it is the
/// full range.
///
/// # Panics
/// On an empty sample or a NaN among the samples.
pub fn median_ci95(xs: &[f64]) -> (f64, f64) {
    let s = sorted(xs);
    let n = s.len();
    if n < 6 {
        return (s[0], s[n - 1]);
    }
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let lo = ((n as f64 / 2.0 - half).floor().max(1.0) as usize).min(n) - 1;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).clamp(1, n) - 1;
    (s[lo], s[hi])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_sample_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn outliers_are_beyond_three_and_a_half_scaled_mads() {
        // Median 10, MAD 1 (scaled 1.4826): the cut is 10 ± 5.19.
        let xs = [9.0, 10.0, 11.0, 10.0, 9.0, 11.0, 15.1, 15.3, 4.7];
        assert_eq!(outliers(&xs), vec![7, 8]);
        // Over half the samples equal: MAD 0, nothing flagged.
        assert!(outliers(&[5.0, 5.0, 5.0, 9.0]).is_empty());
        assert!(outliers(&[]).is_empty());
    }

    #[test]
    fn the_median_interval_is_the_range_below_six_samples_and_order_statistics_above() {
        assert_eq!(median_ci95(&[3.0, 1.0, 2.0]), (1.0, 3.0));
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        // n = 20: ranks 10 ∓ 4.38 → the 5th and 15th values.
        assert_eq!(median_ci95(&xs), (5.0, 15.0));
    }
}
