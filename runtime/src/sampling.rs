//! Choosing the next token from logits: greedy (the default, and the mode
//! the exactness contract is about) or seeded sampling.
//!
//! The order, vLLM's (v1 `Sampler`: penalties, then temperature, then
//! min-p, then top-k and top-p): the penalties change the logits
//! ([`crate::penalty::History::apply`], from the tokens before the
//! position); greedy takes the argmax of those; sampling divides them by
//! the temperature, drops the tokens below `min_p` × the top token's
//! probability, keeps the `top_k` most likely, then the smallest set
//! reaching `top_p`, and draws. llama.cpp's default chain differs after the
//! penalties (top-k, top-p and min-p before the temperature, on the
//! temperature-1 distribution), so at a temperature other than 1 its
//! top-p and min-p keep other sets than these (docs/flags.md).

use serde::{Deserialize, Serialize};

/// Largest penalty window (`repeat_last_n`); `-1` (the whole context) is
/// the way to ask for more.
pub const MAX_PENALTY_WINDOW: usize = 1 << 20;
/// Largest `repetition_penalty` accepted (vLLM and llama.cpp set none; a
/// factor past this divides every repeated logit to nothing).
pub const MAX_REPETITION_PENALTY: f32 = 100.0;
/// Presence and frequency penalties lie in `-2..=2` (OpenAI's and vLLM's range).
pub const MAX_PRESENCE_FREQUENCY: f32 = 2.0;

/// Which earlier tokens the penalties count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PenaltyScope {
    /// llama.cpp's `repeat_last_n = n` (n ≥ 1; its default is 64): all three
    /// penalties count the last `n` tokens of the prompt and the output.
    Last(usize),
    /// llama.cpp's `repeat_last_n = -1`: all three count the whole prompt
    /// and output.
    Context,
    /// llama.cpp's `repeat_last_n = 0`: no penalty applies.
    Off,
    /// vLLM's (and the OpenAI routes' default): the repetition penalty
    /// counts the whole prompt and output, presence and frequency the
    /// whole output only.
    Vllm,
}

impl PenaltyScope {
    /// llama.cpp's default window.
    pub const LLAMA_DEFAULT: PenaltyScope = PenaltyScope::Last(64);

    /// llama.cpp's `repeat_last_n`: `-1` the whole context, `0` off, else
    /// the last `n` tokens (at most [`MAX_PENALTY_WINDOW`]).
    pub fn from_repeat_last_n(n: i64) -> Result<Self, String> {
        match n {
            -1 => Ok(PenaltyScope::Context),
            0 => Ok(PenaltyScope::Off),
            n if n > 0 && n as u64 <= MAX_PENALTY_WINDOW as u64 => Ok(PenaltyScope::Last(n as usize)),
            n => Err(format!(
                "repeat_last_n {n} must be -1 (the whole context), 0 (no penalty) or 1 to {MAX_PENALTY_WINDOW}"
            )),
        }
    }

    /// llama.cpp's `repeat_last_n` for this scope (`None` for vLLM's,
    /// which has no such number).
    pub fn repeat_last_n(&self) -> Option<i64> {
        match *self {
            PenaltyScope::Last(n) => Some(n as i64),
            PenaltyScope::Context => Some(-1),
            PenaltyScope::Off => Some(0),
            PenaltyScope::Vllm => None,
        }
    }
}

fn scope_default() -> PenaltyScope {
    PenaltyScope::LLAMA_DEFAULT
}

fn one() -> f32 {
    1.0
}

/// Sampling settings. `temperature == 0` means greedy.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose mass reaches `top_p`.
    pub top_p: f32,
    pub seed: u64,
    /// Keep the tokens whose probability (after the temperature) is at
    /// least `min_p` × the most likely token's; 0 keeps all.
    #[serde(default)]
    pub min_p: f32,
    /// llama.cpp's `repeat_penalty`, vLLM's `repetition_penalty`: a counted
    /// token's positive logit is divided by it, a negative one multiplied
    /// (Keskar et al. 2019, as both apply it); 1 is off.
    #[serde(default = "one")]
    pub repetition_penalty: f32,
    /// Subtracted once from a counted token's logit (OpenAI's
    /// `presence_penalty`); 0 is off.
    #[serde(default)]
    pub presence_penalty: f32,
    /// Subtracted per occurrence of a counted token (OpenAI's
    /// `frequency_penalty`); 0 is off.
    #[serde(default)]
    pub frequency_penalty: f32,
    /// Which earlier tokens the three penalties count.
    #[serde(default = "scope_default")]
    pub penalty_scope: PenaltyScope,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_scope: PenaltyScope::LLAMA_DEFAULT,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether any penalty changes a logit (a neutral request keeps no
    /// token history and pays nothing).
    pub fn penalized(&self) -> bool {
        self.penalty_scope != PenaltyScope::Off
            && (self.repetition_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0)
    }

    /// Checks ranges; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!("temperature {} must be a finite number >= 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p {} must be in [0, 1] (0 keeps every token)", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty <= MAX_REPETITION_PENALTY) {
            return Err(format!(
                "repetition_penalty {} must be in (0, {MAX_REPETITION_PENALTY}] (1 is off, above 1 discourages \
                 repeats)",
                self.repetition_penalty
            ));
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if !(-MAX_PRESENCE_FREQUENCY..=MAX_PRESENCE_FREQUENCY).contains(&v) {
                return Err(format!(
                    "{name} {v} must be in [-{MAX_PRESENCE_FREQUENCY}, {MAX_PRESENCE_FREQUENCY}] (0 is off)"
                ));
            }
        }
        if let PenaltyScope::Last(n) = self.penalty_scope
            && !(1..=MAX_PENALTY_WINDOW).contains(&n)
        {
            return Err(format!("repeat_last_n {n} must be -1, 0 or 1 to {MAX_PENALTY_WINDOW}"));
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
    let max = cand.first().map_or(0.0, |c| c.1);
    if p.min_p > 0.0 {
        // p_i ≥ min_p · p_max  ⇔  l_i/T ≥ l_max/T + ln(min_p): the same
        // set vLLM's softmax-then-compare keeps, without the softmax. The
        // top token always stays.
        let floor = max + (p.min_p as f64).ln();
        let keep = cand.iter().take_while(|c| c.1 >= floor).count().max(1);
        cand.truncate(keep);
    }
    if p.top_k > 0 {
        cand.truncate(p.top_k);
    }
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
        let p = SamplingParams { temperature: 0.8, top_k: 20, top_p: 0.9, seed: 7, ..Default::default() };
        let run = || {
            let mut r = Rng::new(p.seed);
            (0..20).map(|_| sample(&logits, &p, &mut r)).collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.1f32, 2.0, 1.9];
        let p = SamplingParams { temperature: 1.0, top_k: 1, top_p: 1.0, seed: 1, ..Default::default() };
        let mut r = Rng::new(1);
        for _ in 0..10 {
            assert_eq!(sample(&logits, &p, &mut r), 1);
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_the_mass() {
        let logits = [10.0f32, 0.0, 0.0, 0.0];
        let d = distribution(&logits, &SamplingParams { temperature: 1.0, top_p: 0.5, ..Default::default() });
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].0, 0);
    }

    #[test]
    fn invalid_settings_name_themselves() {
        let p = SamplingParams { top_p: 0.0, ..Default::default() };
        assert!(p.validate().unwrap_err().contains("top_p"));
        for (p, name) in [
            (SamplingParams { min_p: 1.5, ..Default::default() }, "min_p"),
            (SamplingParams { min_p: f32::NAN, ..Default::default() }, "min_p"),
            (SamplingParams { repetition_penalty: 0.0, ..Default::default() }, "repetition_penalty"),
            (SamplingParams { repetition_penalty: f32::INFINITY, ..Default::default() }, "repetition_penalty"),
            (SamplingParams { presence_penalty: 2.5, ..Default::default() }, "presence_penalty"),
            (SamplingParams { frequency_penalty: f32::NAN, ..Default::default() }, "frequency_penalty"),
            (SamplingParams { penalty_scope: PenaltyScope::Last(0), ..Default::default() }, "repeat_last_n"),
        ] {
            assert!(p.validate().unwrap_err().starts_with(name), "{p:?}");
        }
        assert_eq!(PenaltyScope::from_repeat_last_n(-1), Ok(PenaltyScope::Context));
        assert_eq!(PenaltyScope::from_repeat_last_n(0), Ok(PenaltyScope::Off));
        assert_eq!(PenaltyScope::from_repeat_last_n(64), Ok(PenaltyScope::Last(64)));
        for bad in [-2, MAX_PENALTY_WINDOW as i64 + 1, i64::MAX] {
            assert!(PenaltyScope::from_repeat_last_n(bad).unwrap_err().contains("repeat_last_n"), "{bad}");
        }
    }

    /// min-p keeps the tokens at least `min_p` times as likely as the top
    /// one, after the temperature. Logits ln 8, ln 4, ln 2, ln 1: at T = 1
    /// the probabilities are 8/15, 4/15, 2/15, 1/15 (shares of the top 1,
    /// 0.5, 0.25, 0.125), so min_p 0.24 keeps three, 0.3 two (renormalised
    /// 8/12 and 4/12), 0.1 all four. At T = 0.5 they become 64:16:4:1
    /// (shares 1, 0.25, 0.0625, ...), so 0.24 keeps two.
    #[test]
    fn min_p_keeps_tokens_above_its_share_of_the_top_probability_after_the_temperature() {
        let logits = [8f32.ln(), 4f32.ln(), 2f32.ln(), 0.0];
        let kept =
            |t: f32, m: f32| distribution(&logits, &SamplingParams { temperature: t, min_p: m, ..Default::default() });
        let d = kept(1.0, 0.3);
        assert_eq!(d.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1]);
        assert!((d[0].1 - 8.0 / 12.0).abs() < 1e-9 && (d[1].1 - 4.0 / 12.0).abs() < 1e-9, "{d:?}");
        assert_eq!(kept(1.0, 0.24).len(), 3);
        assert_eq!(kept(1.0, 0.1).len(), 4);
        assert_eq!(kept(0.5, 0.24).len(), 2);
        assert_eq!(kept(1.0, 0.0).len(), 4);
        // min_p 1 keeps the top token alone; greedy ignores min-p.
        assert_eq!(kept(1.0, 1.0).len(), 1);
        let g = SamplingParams { min_p: 0.9, ..Default::default() };
        assert_eq!(sample(&logits, &g, &mut Rng::new(0)), 0);
    }
}
