//! Speculative decoding's counters and its sampled acceptance rule. The
//! loop itself, and `Engine::decode_speculative`, are in
//! [`crate::sequence`] (classic decoding and the server's batches run the
//! same one): draft, one verify pass of the drafted rows, accept, roll back.
//!
//! How many tokens a round drafts is the [`Schedule`]'s: a fixed width, or
//! the adaptive length chosen per round (a round asked for 0 is a plain
//! step); either way the tokens that come out are the same.

use super::drafter::Proposal;
use crate::sampling::{Rng, draw};
use serde::{Deserialize, Serialize};

/// Per-request counters of the speculative loop.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecStats {
    /// Verify passes that carried at least one drafted token.
    pub rounds: usize,
    /// Target passes with an empty draft (plain decode steps).
    pub plain_steps: usize,
    pub drafted: usize,
    pub accepted: usize,
    /// `accepted_per_position[i]`: rounds whose draft token `i` was accepted.
    pub accepted_per_position: Vec<usize>,
    /// Tokens emitted by rounds (accepted drafts plus the round's own token).
    pub emitted_in_rounds: usize,
    pub draft_s: f64,
    /// Every target pass of the loop (`plain_s + round_verify_s`).
    pub verify_s: f64,
    pub accept_s: f64,
    /// The target passes of plain steps (one row, an empty draft): what a
    /// classic step costs, paid inside the loop.
    #[serde(default)]
    pub plain_s: f64,
    /// The target passes of rounds (a verify block with a draft).
    #[serde(default)]
    pub round_verify_s: f64,
    /// Sampling each round's first token from the pending logits.
    #[serde(default)]
    pub sample_s: f64,
    /// Each plain step as (tokens emitted before it, seconds of its pass):
    /// where in the generation it ran, so a benchmark can set it against
    /// the classic step at the same position (`bench::curve`). Not an event
    /// field.
    #[serde(skip)]
    pub plain_at: Vec<(usize, f64)>,
    /// `draft_lengths[n]`: target passes whose round asked the drafter for
    /// `n` tokens (0: the schedule chose a plain step), of those where the
    /// request's limits left room to draft. A fixed width asks for the
    /// width wherever the limits allow.
    #[serde(default)]
    pub draft_lengths: Vec<usize>,
    /// Rounds the adaptive schedule drafted only to probe, after a run of
    /// plain steps.
    #[serde(default)]
    pub probes: usize,
}

impl SpecStats {
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64)
    }

    pub fn emitted_per_verify(&self) -> Option<f64> {
        (self.rounds > 0).then(|| self.emitted_in_rounds as f64 / self.rounds as f64)
    }
}

/// Speculative sampling's test of draft token `j` against the target's
/// distribution `p` at that position: `Ok(d)` accepts it (probability
/// `min(1, p(d)/q(d))`), `Err(t)` rejects it and draws `t` from the residual
/// `max(0, p − q)`, renormalised. Either way the token's distribution is
/// exactly `p` (Leviathan et al. 2023, Theorem 1).
pub fn verify_sampled(p: &[(u32, f64)], proposal: &Proposal, j: usize, rng: &mut Rng) -> Result<u32, u32> {
    let d = proposal.tokens[j];
    let pd = p.iter().find(|(x, _)| *x == d).map_or(0.0, |(_, pr)| *pr);
    let qd = proposal.q_of(j);
    if qd > 0.0 && rng.next_f64() < (pd / qd).min(1.0) {
        return Ok(d);
    }
    let q = |t: u32| -> f64 {
        match &proposal.dists {
            None => f64::from(u8::from(t == d)),
            Some(dist) => dist[j].iter().find(|(x, _)| *x == t).map_or(0.0, |(_, pr)| *pr),
        }
    };
    let mut r: Vec<(u32, f64)> =
        p.iter().map(|&(t, pr)| (t, (pr - q(t)).max(0.0))).filter(|(_, pr)| *pr > 0.0).collect();
    let sum: f64 = r.iter().map(|(_, pr)| pr).sum();
    if sum <= 0.0 {
        // p ≤ q everywhere means p == q up to rounding: sample p itself.
        return Err(draw(p, rng));
    }
    for e in r.iter_mut() {
        e.1 /= sum;
    }
    Err(draw(&r, rng))
}

#[cfg(test)]
mod tests {
    use super::*;
    use statrs::distribution::{ChiSquared, ContinuousCDF};

    /// Pearson's chi-square of observed counts against probabilities `p`.
    fn chi_square(counts: &[usize], p: &[f64], n: usize) -> f64 {
        counts.iter().zip(p).map(|(&o, &e)| (o as f64 - e * n as f64).powi(2) / (e * n as f64)).sum()
    }

    /// The emitted token's empirical distribution must match `p`: accepted
    /// drafts plus residual draws. A draft is drawn from the drafter's `q`
    /// each trial (a point mass proposes the same token every time). The
    /// test fails when the chi-square statistic passes the 0.999 quantile
    /// (one false alarm in a thousand seeds; the seed is fixed, so the
    /// outcome is stable).
    fn check(p: &[(u32, f64)], q: Option<Vec<(u32, f64)>>, point: u32, seed: u64) {
        let n = 40_000;
        let mut rng = Rng::new(seed);
        let mut counts = vec![0usize; p.len()];
        for _ in 0..n {
            let d = q.as_ref().map_or(point, |q| draw(q, &mut rng));
            let proposal = Proposal { tokens: vec![d], dists: q.clone().map(|q| vec![q]) };
            let t = match verify_sampled(p, &proposal, 0, &mut rng) {
                Ok(t) | Err(t) => t,
            };
            counts[p.iter().position(|(x, _)| *x == t).unwrap()] += 1;
        }
        let probs: Vec<f64> = p.iter().map(|(_, pr)| *pr).collect();
        let stat = chi_square(&counts, &probs, n);
        let limit = ChiSquared::new((p.len() - 1) as f64).unwrap().inverse_cdf(0.999);
        assert!(stat < limit, "chi-square {stat:.2} >= {limit:.2}: counts {counts:?} for p {probs:?}");
    }

    const P: [(u32, f64); 5] = [(0, 0.4), (1, 0.25), (2, 0.2), (3, 0.1), (4, 0.05)];

    #[test]
    fn point_mass_drafts_preserve_the_target_distribution() {
        for d in [0, 3, 4] {
            check(&P, None, d, 11 + d as u64);
        }
    }

    #[test]
    fn sampled_drafts_preserve_the_target_distribution() {
        check(&P, Some(vec![(4, 0.5), (3, 0.3), (0, 0.2)]), 0, 7);
        check(&P, Some(vec![(0, 0.1), (1, 0.1), (2, 0.1), (3, 0.1), (4, 0.6)]), 0, 8);
    }

    #[test]
    fn a_wrong_rule_fails_the_chi_square_check() {
        // Accepting every draft outright does not preserve p: the check
        // must notice, or it proves nothing.
        let q = vec![(4u32, 0.5), (3, 0.5)];
        let mut rng = Rng::new(3);
        let n = 40_000;
        let mut counts = vec![0usize; P.len()];
        for _ in 0..n {
            let d = draw(&q, &mut rng);
            counts[P.iter().position(|(x, _)| *x == d).unwrap()] += 1;
        }
        let probs: Vec<f64> = P.iter().map(|(_, pr)| *pr).collect();
        let limit = ChiSquared::new(4.0).unwrap().inverse_cdf(0.999);
        assert!(chi_square(&counts, &probs, n) > limit);
    }

    #[test]
    fn a_draft_the_target_never_emits_is_always_rejected() {
        let p = [(0u32, 0.5), (1, 0.5)];
        let mut rng = Rng::new(1);
        for _ in 0..100 {
            assert!(verify_sampled(&p, &Proposal { tokens: vec![9], dists: None }, 0, &mut rng).is_err());
        }
    }
}
