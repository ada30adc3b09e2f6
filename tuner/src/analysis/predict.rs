//! Predicted ratios (issue 54): an acceptance profile ([`policy::profile`])
//! replayed on a host's verify-cost curves, arm by arm, through the
//! runtime's own adaptive controller, with an interval that carries three
//! uncertainties, each on the log scale:
//!
//! - **the cost curve's**: one curve a process, as a sweep measures it (the
//!   process is the unit of replication); each process's curves give one
//!   predicted ratio per arm, and their t interval is the curve's part;
//! - **the profile's**: the prompts are a sample of their task types; a
//!   bootstrap that redraws each type's prompts (with replacement, 2,000
//!   draws, a fixed seed) over the mean curve gives its part (the standard
//!   deviation of the draws' log ratios, times 1.96);
//! - **the model's**: what the replay leaves out (the drafter's lookup,
//!   sampling, a step's after-effects), measured on the committed sweeps
//!   ([`crate::analysis::predict_error`]): the root mean square of the log
//!   errors of every measured arm, times 1.96.
//!
//! The three halves add in quadrature around the geometric mean of the
//! processes' predictions. The rule then mirrors the sweep's: the best
//! fixed width, the widths within [`PREDICT_TIE`] of it tied, the narrowest
//! tied width chosen, or the adaptive draft length when it is within the
//! tie of the best fixed width; a choice whose interval does not lie
//! wholly above 1.0 is `off`.
use serde::{Deserialize, Serialize};

use policy::adaptive::CostModel;
use policy::profile::{Profile, Replayed, Schedule};
use policy::table::CostCurve;

use crate::analysis::estimate;
use crate::data::plan::SpeculativeArm;

/// Predictions within this share of the best fixed width's are tied.
pub const PREDICT_TIE: f64 = 0.02;
/// Bootstrap draws of the profile's prompts.
pub const BOOTSTRAP_DRAWS: usize = 2000;
/// The normal quantile of a two-sided 95 % interval.
pub const Z95: f64 = 1.959_963_985;

/// One arm's prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmPrediction {
    pub arm: SpeculativeArm,
    /// Speculative over classic, the geometric mean over the processes' curves.
    pub ratio: f64,
    /// The 95 % interval, all three parts.
    pub interval: (f64, f64),
    /// `(process, ratio)`: each cost process's curves alone.
    pub per_process: Vec<(usize, f64)>,
    /// The three half-widths on the log scale: curve, profile, model.
    pub half_cost: f64,
    pub half_profile: f64,
    pub half_model: f64,
    /// Tokens a verify pass emitted in the replay (rounds that drafted).
    pub emitted_per_verify: Option<f64>,
}

/// The prediction for a set of arms, and the choice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub arms: Vec<ArmPrediction>,
    /// The widest fixed width: the adaptive arm's cap.
    pub cap: usize,
    pub best_fixed: Option<SpeculativeArm>,
    pub tied: Vec<SpeculativeArm>,
    /// The chosen arm; `None` is off.
    pub choice: Option<SpeculativeArm>,
    /// The arm the choice rests on (the choice, or the arm found not above 1.0).
    pub chosen_arm: Option<SpeculativeArm>,
    pub why: String,
    /// The model-error term used (root mean square log error) and the
    /// number of measured arms it came from.
    pub model_error_log: f64,
    pub model_error_arms: usize,
}

impl Prediction {
    pub fn arm(&self, a: SpeculativeArm) -> Option<&ArmPrediction> {
        self.arms.iter().find(|p| p.arm == a)
    }
}

/// The schedule a record's arm runs.
pub fn schedule(arm: SpeculativeArm, cap: usize) -> Schedule {
    match arm {
        SpeculativeArm::Fixed(w) => Schedule::Fixed(w.get()),
        SpeculativeArm::Adaptive => Schedule::Adaptive { cap },
    }
}

/// The pointwise geometric mean of several processes' curves, per context
/// (the rows every process measured).
pub fn mean_curves(processes: &[Vec<CostCurve>]) -> Vec<CostCurve> {
    let mut contexts: Vec<usize> = processes.iter().flatten().map(|c| c.context).collect();
    contexts.sort_unstable();
    contexts.dedup();
    let mut out = Vec::new();
    for ctx in contexts {
        let at: Vec<&CostCurve> = processes.iter().flatten().filter(|c| c.context == ctx).collect();
        let rows = at.iter().map(|c| c.relative.len()).min().unwrap_or(0);
        if rows < 2 {
            continue;
        }
        let relative =
            (0..rows).map(|i| (at.iter().map(|c| c.relative[i].ln()).sum::<f64>() / at.len() as f64).exp()).collect();
        out.push(CostCurve { context: ctx, relative });
    }
    out
}

/// Each prompt replayed alone: `(tokens, cost)` per prompt.
fn per_prompt(profile: &Profile, schedule: Schedule, cost: &CostModel) -> Result<Vec<Replayed>, String> {
    (0..profile.traces.len()).map(|i| policy::profile::replay_all(profile, schedule, cost, &[i])).collect()
}

fn total(rs: &[Replayed]) -> Replayed {
    let mut sum = Replayed::default();
    for r in rs {
        sum += *r;
    }
    sum
}

fn ratio_of(rs: &[Replayed]) -> f64 {
    total(rs).ratio()
}

/// A small deterministic generator for the bootstrap (xorshift64*).
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % n.max(1)
    }
}

/// The bootstrap's standard deviation of the log ratio: each task type's
/// prompts redrawn with replacement, `draws` times.
pub fn profile_sd_log(profile: &Profile, per: &[Replayed], draws: usize) -> f64 {
    let types = profile.task_types();
    let groups: Vec<Vec<usize>> =
        types.iter().map(|t| (0..profile.traces.len()).filter(|&i| &profile.traces[i].task == t).collect()).collect();
    let mut rng = Draws(0x5eed_1234_abcd_0001);
    let mut logs = Vec::with_capacity(draws);
    for _ in 0..draws {
        let mut sum = Replayed::default();
        for g in &groups {
            for _ in 0..g.len() {
                sum += per[g[rng.below(g.len())]];
            }
        }
        logs.push(sum.ratio().ln());
    }
    let m = logs.iter().sum::<f64>() / logs.len().max(1) as f64;
    let var = logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (logs.len().max(2) - 1) as f64;
    var.sqrt()
}

/// Predicts every arm of `arms` from `profile` on `processes` (one set of
/// curves per cost process, at least two), with `model_error_log` (and the
/// arms it came from) as the model's part.
pub fn predict(
    profile: &Profile,
    processes: &[(usize, Vec<CostCurve>)],
    arms: &[SpeculativeArm],
    (model_error_log, model_error_arms): (f64, usize),
) -> Result<Prediction, String> {
    if processes.len() < 2 {
        return Err(format!(
            "{} cost process(es) measured; a prediction's interval needs at least two",
            processes.len()
        ));
    }
    let cap = arms.iter().filter_map(|a| a.width()).map(|w| w.get()).max().unwrap_or(1);
    let models: Vec<(usize, CostModel)> = processes
        .iter()
        .map(|(k, c)| CostModel::new(c).map(|m| (*k, m)).ok_or_else(|| format!("process {k}: no curve of two rows")))
        .collect::<Result<_, _>>()?;
    let curves: Vec<Vec<CostCurve>> = processes.iter().map(|(_, c)| c.clone()).collect();
    let mean = CostModel::new(&mean_curves(&curves)).ok_or("the processes share no curve of two rows")?;
    let half_model = Z95 * model_error_log;
    let mut out = Vec::new();
    for &arm in arms {
        let s = schedule(arm, cap);
        let mut per_process = Vec::new();
        for (k, m) in &models {
            per_process.push((*k, ratio_of(&per_prompt(profile, s, m)?).ln()));
        }
        let est = estimate::interval(&per_process, 0.0).ok_or("no process gave a ratio")?;
        let m_log = est.ratio.ln();
        let half_cost = est.interval.map_or(f64::INFINITY, |(lo, _)| m_log - lo.ln());
        let per_mean = per_prompt(profile, s, &mean)?;
        let half_profile = Z95 * profile_sd_log(profile, &per_mean, BOOTSTRAP_DRAWS);
        let half = (half_cost.powi(2) + half_profile.powi(2) + half_model.powi(2)).sqrt();
        let sum = total(&per_mean);
        out.push(ArmPrediction {
            arm,
            ratio: est.ratio,
            interval: ((m_log - half).exp(), (m_log + half).exp()),
            per_process: est.per_round,
            half_cost,
            half_profile,
            half_model,
            emitted_per_verify: (sum.rounds > 0).then(|| (sum.accepted + sum.rounds) as f64 / sum.rounds as f64),
        });
    }
    Ok(choose(out, cap, (model_error_log, model_error_arms)))
}

/// The rule (module docs) over the arms' predictions.
pub fn choose(arms: Vec<ArmPrediction>, cap: usize, model: (f64, usize)) -> Prediction {
    let fixed: Vec<&ArmPrediction> = arms.iter().filter(|a| !a.arm.is_adaptive()).collect();
    let best = fixed.iter().max_by(|a, b| a.ratio.total_cmp(&b.ratio)).map(|a| (a.arm, a.ratio));
    let mut tied: Vec<SpeculativeArm> = match best {
        Some((_, r)) => fixed.iter().filter(|a| a.ratio >= r * (1.0 - PREDICT_TIE)).map(|a| a.arm).collect(),
        None => Vec::new(),
    };
    tied.sort_by_key(|a| a.code());
    let adaptive = arms.iter().find(|a| a.arm.is_adaptive());
    let pick = match (best, adaptive) {
        (Some((_, r)), Some(a)) if a.ratio >= r * (1.0 - PREDICT_TIE) => Some(a),
        (Some(_), _) => tied.first().and_then(|w| arms.iter().find(|a| a.arm == *w)),
        (None, a) => a,
    };
    let (choice, why) = match pick {
        None => (None, "no arm was predicted".to_string()),
        Some(p) => {
            let name = if p.arm.is_adaptive() {
                format!("the adaptive draft length (up to {cap})")
            } else {
                format!("width {}", p.arm)
            };
            let tied_list: Vec<String> = tied.iter().map(|a| a.to_string()).collect();
            let (lo, hi) = p.interval;
            let basis = match best {
                Some((b, r)) => format!(
                    "best fixed width {b} at {r:.3}, tied within {:.0}%: {}",
                    PREDICT_TIE * 100.0,
                    tied_list.join(", ")
                ),
                None => "no fixed width".into(),
            };
            if lo > 1.0 {
                (Some(p.arm), format!("{name} predicted at {:.3} [{lo:.3}, {hi:.3}] ({basis})", p.ratio))
            } else {
                (
                    None,
                    format!(
                        "off: {name} predicted at {:.3} [{lo:.3}, {hi:.3}], an interval not wholly above 1.0 ({basis})",
                        p.ratio
                    ),
                )
            }
        }
    };
    Prediction {
        cap,
        best_fixed: best.map(|(a, _)| a),
        tied,
        choice,
        chosen_arm: pick.map(|p| p.arm),
        why,
        model_error_log: model.0,
        model_error_arms: model.1,
        arms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::profile::{ModelRef, PROFILE_KIND, PROFILE_SCHEMA, ProfileHeader, PromptRef, Trace};

    /// A test profile's header: 48 tokens a request, proposals of up to 16.
    pub(super) fn header() -> ProfileHeader {
        ProfileHeader {
            kind: PROFILE_KIND.into(),
            schema: PROFILE_SCHEMA,
            model: ModelRef { file: "m.gguf".into(), sha256: "a".repeat(64) },
            drafter: "ngram".into(),
            drafter_settings: policy::DrafterSettings::ngram(3, 4),
            drafter_model: None,
            draft_cost: 0.0,
            prompts: PromptRef { name: "p.jsonl".into(), sha256: "b".repeat(64) },
            max_tokens: 48,
            lookahead: 16,
            made_by: "test".into(),
        }
    }

    fn profile(traces: Vec<Trace>) -> Profile {
        Profile { header: super::tests::header(), traces }
    }

    /// A prompt that copies `copy` tokens, then writes freely.
    fn trace(id: &str, task: &str, copy: usize) -> Trace {
        let out = 48;
        let avail: Vec<u8> = (0..out).map(|p| if p == 0 || p >= copy { 0 } else { (copy - p).min(16) as u8 }).collect();
        Trace { id: id.into(), task: task.into(), prompt_tokens: 40, out, avail: avail.clone(), agree: avail }
    }

    fn curves(step: f64) -> Vec<CostCurve> {
        vec![CostCurve { context: 64, relative: (0..9).map(|i| 1.0 + step * i as f64).collect() }]
    }

    fn arms() -> Vec<SpeculativeArm> {
        let mut a: Vec<SpeculativeArm> = (1..=8).map(|w| SpeculativeArm::fixed(w).unwrap()).collect();
        a.push(SpeculativeArm::Adaptive);
        a
    }

    #[test]
    fn cheap_passes_and_long_copies_predict_a_wide_draft_and_dear_ones_a_narrow_one() {
        let p =
            profile(vec![trace("a", "edit", 40), trace("b", "edit", 30), trace("c", "free", 1), trace("d", "free", 1)]);
        let cheap = [(0, curves(0.05)), (1, curves(0.052)), (2, curves(0.048))];
        let pr = predict(&p, &cheap, &arms(), (0.0, 0)).unwrap();
        let w8 = pr.arm(SpeculativeArm::fixed(8).unwrap()).unwrap();
        let w1 = pr.arm(SpeculativeArm::fixed(1).unwrap()).unwrap();
        assert!(w8.ratio > w1.ratio, "{pr:?}");
        assert!(pr.choice.is_some(), "{}", pr.why);
        // Each part of the interval is there: the curves differ, the prompts differ.
        assert!(w8.half_cost > 0.0 && w8.half_profile > 0.0 && w8.half_model == 0.0);
        assert!(w8.interval.0 < w8.ratio && w8.ratio < w8.interval.1);
        // Passes that cost a full row per row: drafting cannot pay; off.
        let dear = [(0, curves(1.0)), (1, curves(1.01))];
        let pr = predict(&p, &dear, &arms(), (0.0, 0)).unwrap();
        assert_eq!(pr.choice, None, "{}", pr.why);
        assert!(pr.why.starts_with("off:"), "{}", pr.why);
    }

    #[test]
    fn the_model_error_widens_every_interval_and_one_process_is_refused() {
        let p = profile(vec![trace("a", "edit", 40), trace("b", "edit", 20)]);
        let c = [(0, curves(0.05)), (1, curves(0.06))];
        let a = predict(&p, &c, &arms(), (0.0, 0)).unwrap();
        let b = predict(&p, &c, &arms(), (0.05, 40)).unwrap();
        for (x, y) in a.arms.iter().zip(&b.arms) {
            assert_eq!(x.ratio, y.ratio);
            assert!(y.interval.0 < x.interval.0 && y.interval.1 > x.interval.1);
        }
        assert!(predict(&p, &c[..1], &arms(), (0.0, 0)).unwrap_err().contains("at least two"));
    }
}

#[cfg(test)]
mod calibration {
    //! The curve's part of the interval, calibrated by simulation through
    //! the real code: processes' curves drawn around a known curve (each
    //! process's multi-row passes scaled by a shared factor and each point
    //! by its own, both log-normal), predicted with [`predict`], and the
    //! curve-part interval checked against the replay on the true curve.
    use super::*;
    use policy::profile::Trace;

    fn normal(s: &mut u64) -> f64 {
        let mut u = || {
            *s ^= *s << 13;
            *s ^= *s >> 7;
            *s ^= *s << 17;
            ((*s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let (a, b) = (u(), u());
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
    }

    #[test]
    fn the_curve_part_covers_the_true_ratio_about_95_percent_of_the_time() {
        let copy = |id: &str, n: usize| {
            let out = 48;
            let avail: Vec<u8> = (0..out).map(|p| if p == 0 || p >= n { 0 } else { (n - p).min(16) as u8 }).collect();
            Trace { id: id.into(), task: "edit".into(), prompt_tokens: 40, out, avail: avail.clone(), agree: avail }
        };
        let profile =
            Profile { header: super::tests::header(), traces: vec![copy("a", 40), copy("b", 12), copy("c", 24)] };
        let truth_curve = vec![CostCurve { context: 64, relative: (0..9).map(|i| 1.0 + 0.14 * i as f64).collect() }];
        let arms = [SpeculativeArm::fixed(3).unwrap(), SpeculativeArm::Adaptive];
        let truth: Vec<f64> = arms
            .iter()
            .map(|&a| {
                let m = CostModel::new(&truth_curve).unwrap();
                ratio_of(&per_prompt(&profile, schedule(a, 3), &m).unwrap())
            })
            .collect();
        let mut seed = 0x1234_5678_9abc_def1u64;
        let (mut covered, mut n) = (0, 0);
        for _ in 0..300 {
            let processes: Vec<(usize, Vec<CostCurve>)> = (0..4)
                .map(|k| {
                    let shared = 0.04 * normal(&mut seed);
                    let rel = truth_curve[0]
                        .relative
                        .iter()
                        .enumerate()
                        .map(|(i, x)| if i == 0 { 1.0 } else { x * (shared + 0.03 * normal(&mut seed)).exp() })
                        .collect();
                    (k, vec![CostCurve { context: 64, relative: rel }])
                })
                .collect();
            let p = predict(&profile, &processes, &arms, (0.0, 0)).unwrap();
            for (a, t) in p.arms.iter().zip(&truth) {
                let (lo, hi) = ((a.ratio.ln() - a.half_cost).exp(), (a.ratio.ln() + a.half_cost).exp());
                covered += usize::from(lo <= *t && *t <= hi);
                n += 1;
            }
        }
        let share = covered as f64 / n as f64;
        println!("the curve part covered the true ratio in {covered} of {n} ({:.1}%)", share * 100.0);
        assert!((0.91..=0.985).contains(&share), "coverage {share}");
    }
}
