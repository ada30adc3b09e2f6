//! Choosing the next token from logits: greedy (the default, and the mode
//! the exactness contract is about) or seeded temperature / top-k / top-p
//! sampling.

use serde::{Deserialize, Serialize};

/// Sampling settings. `temperature == 0` means greedy.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose mass reaches `top_p`.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks ranges; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!("temperature {} must be a finite number >= 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        Ok(())
    }
}

/// The index of the largest logit; ties go to the lowest index, so greedy
/// decoding is a pure function of the logits. NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// SplitMix64 (Steele, Lea & Flood 2014): a small, seedable generator whose
/// stream is fixed by the seed alone.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The filtered, normalised distribution sampling draws from: (token,
/// probability) pairs, most likely first.
pub fn distribution(logits: &[f32], p: &SamplingParams) -> Vec<(u32, f64)> {
    let mut cand: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_nan())
        .map(|(i, &v)| (i as u32, v as f64 / p.temperature as f64))
        .collect();
    cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 {
        cand.truncate(p.top_k);
    }
    let max = cand.first().map_or(0.0, |c| c.1);
    let mut sum = 0.0;
    for c in cand.iter_mut() {
        c.1 = (c.1 - max).exp();
        sum += c.1;
    }
    for c in cand.iter_mut() {
        c.1 /= sum;
    }
    if p.top_p < 1.0 {
        let mut mass = 0.0;
        let mut keep = cand.len();
        for (i, c) in cand.iter().enumerate() {
            mass += c.1;
            if mass >= p.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        cand.truncate(keep);
        let s: f64 = cand.iter().map(|c| c.1).sum();
        for c in cand.iter_mut() {
            c.1 /= s;
        }
    }
    cand
}

/// Draws from `dist` with one uniform number.
pub fn draw(dist: &[(u32, f64)], rng: &mut Rng) -> u32 {
    let u = rng.next_f64();
    let mut acc = 0.0;
    for &(t, pr) in dist {
        acc += pr;
        if u < acc {
            return t;
        }
    }
    dist.last().map_or(0, |d| d.0)
}

/// Picks the next token: argmax when greedy, else a seeded draw.
pub fn sample(logits: &[f32], p: &SamplingParams, rng: &mut Rng) -> u32 {
    if p.is_greedy() { argmax(logits) } else { draw(&distribution(logits, p), rng) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_breaks_ties_toward_the_lowest_index_and_ignores_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN]), 1);
    }

    #[test]
    fn same_seed_draws_the_same_tokens() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.7).sin()).collect();
        let p = SamplingParams { temperature: 0.8, top_k: 20, top_p: 0.9, seed: 7 };
        let run = || {
            let mut r = Rng::new(p.seed);
            (0..20).map(|_| sample(&logits, &p, &mut r)).collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.1f32, 2.0, 1.9];
        let p = SamplingParams { temperature: 1.0, top_k: 1, top_p: 1.0, seed: 1 };
        let mut r = Rng::new(1);
        for _ in 0..10 {
            assert_eq!(sample(&logits, &p, &mut r), 1);
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_the_mass() {
        let logits = [10.0f32, 0.0, 0.0, 0.0];
        let d = distribution(&logits, &SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.5, seed: 0 });
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0, 0);
    }

    #[test]
    fn invalid_settings_name_themselves() {
        let p = SamplingParams { top_p: 0.0, ..Default::default() };
        assert!(p.validate().unwrap_err().contains("top_p"));
    }
}
