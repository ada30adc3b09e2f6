//! The adaptive draft length (issue 36): per request, before each verify
//! pass, how many tokens to draft, from the acceptance seen so far in the
//! request and the verify pass's measured cost on this host.
//!
//! A round that drafts `n` tokens emits `1 + (accepted drafts)` tokens and
//! costs one pass of `n + 1` rows. With `a_i` the chance that draft token
//! `i` is accepted given that the ones before it were, the expected tokens
//! of the round are `E(n) = 1 + a_0 + a_0·a_1 + ... + a_0···a_{n-1}`, and
//! its cost is `C(n) = relative(context, n + 1) + n·d` passes of one row
//! (`relative` from the entry's curve, [`CostModel`]; `d` a drafted token's
//! own cost, 0 for the weight-free drafters). [`Controller::choose`] takes
//! the `n` in `0..=cap` with the most tokens per unit of cost, `E(n) /
//! C(n)`; `n = 0` is a plain step, `E(0) / C(0) = 1`. Ties go to the shorter
//! draft.
//!
//! The `a_i` are estimated per position ([`Acceptance`]): each round that
//! drafted at least `i + 1` tokens and accepted the first `i` says whether
//! token `i` was accepted. Every round that drafted decays every
//! position's evidence by [`DECAY`] (so the last few rounds dominate), and
//! the tested positions gain their verdicts. Position `i`'s estimate
//! shrinks its evidence toward position `i - 1`'s estimate, worth
//! [`PRIOR_WEIGHT`] observations (position 0 toward [`PRIOR`], worth
//! [`PRIOR_START_WEIGHT`] at first and fading like evidence, so a drafter
//! that is never right is soon estimated near 0): a position
//! never tested borrows the one before it (acceptance rarely rises along a
//! draft), and one tested long ago drifts back to it as its evidence
//! fades. Without that fading, one early miss at a deep position would cap
//! the draft for the rest of the request: a position the controller no
//! longer drafts is never tested again.
//!
//! A request whose drafts stop paying drafts nothing, and would never learn
//! that they pay again: after [`PROBE_AFTER`] plain steps in a row the
//! controller drafts once anyway, one token (the cheapest probe), so it
//! recovers within a bounded cost: at most one pass of two rows in every
//! `PROBE_AFTER + 1`.
//!
//! Which tokens come out never depends on the choice: greedy speculative
//! output equals classic output at every draft length, so the controller
//! may choose anything (the decode loop's contract, not this module's).
//!
//! The runtime's decode loop asks a [`Controller`] per round when the
//! schedule is adaptive (`runtime/src/speculative/schedule.rs`): an entry that
//! chose it (`adaptive = true`), or `--adaptive on`.

use crate::table::CostCurve;

/// Decay of the acceptance evidence: every round that drafted multiplies
/// each position's evidence by this (memory of about two rounds: a request's
/// acceptance comes in runs, copied stretches and edit points, and the
/// draft should follow them).
pub const DECAY: f64 = 0.5;
/// The acceptance assumed before any observation: optimistic. A drafter
/// that proposes something is mostly right (the ngram drafter on the four
/// prompt sets, given that it proposed: 0.79–0.90 at the first position,
/// `runtime/examples/accept_trace.rs`), short requests are over before a
/// cautious start has learned that (a 24-token copy runs three rounds), and
/// a wrong guess costs one dear round before the evidence outweighs it.
/// Chosen by replaying the controller on those traces
/// (`scripts/bench/replay-adaptive.py`, docs/performance.md "Adaptive draft
/// length"): against 0.5, 0.9 lifted the geometric mean over task types
/// from 0.972 to 0.993 of the best fixed width per type, with free writing
/// unchanged (0.999 of classic).
pub const PRIOR: f64 = 0.9;
/// How many observations the prior at position 0 is worth at the start of
/// a request (it fades like evidence).
pub const PRIOR_START_WEIGHT: f64 = 2.0;
/// How many observations a position's pull toward the position before it
/// is worth.
pub const PRIOR_WEIGHT: f64 = 1.0;
/// Plain steps in a row after which one token is drafted regardless.
pub const PROBE_AFTER: usize = 8;

/// The verify pass's cost against a one-row pass, as a function of the
/// context length and the rows, from an entry's measured curves.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    /// Increasing contexts, each with `relative[rows - 1]`.
    curves: Vec<(usize, Vec<f64>)>,
}

impl CostModel {
    /// A model over `curves` (as an entry carries them); `None` when there
    /// is no curve with at least two pass sizes.
    pub fn new(curves: &[CostCurve]) -> Option<Self> {
        let mut c: Vec<(usize, Vec<f64>)> =
            curves.iter().filter(|c| c.relative.len() >= 2).map(|c| (c.context, c.relative.clone())).collect();
        c.sort_by_key(|(ctx, _)| *ctx);
        c.dedup_by_key(|(ctx, _)| *ctx);
        (!c.is_empty()).then_some(CostModel { curves: c })
    }

    /// One curve's cost of `rows` rows: measured, or past the widest pass
    /// measured, extended along its last step (a pass grows about linearly
    /// in its rows once the weights are shared).
    fn at(rel: &[f64], rows: usize) -> f64 {
        let rows = rows.max(1);
        if rows <= rel.len() {
            return rel[rows - 1];
        }
        let n = rel.len();
        let step = (rel[n - 1] - rel[n - 2]).max(0.0);
        rel[n - 1] + step * (rows - n) as f64
    }

    /// The cost of a pass of `rows` rows after `context` positions, against
    /// a one-row pass at that context: the curves' costs interpolated
    /// linearly in the context between the two measured around it, the
    /// nearest one's outside them.
    pub fn relative(&self, context: usize, rows: usize) -> f64 {
        let c = &self.curves;
        let i = c.partition_point(|(ctx, _)| *ctx <= context);
        if i == 0 {
            return Self::at(&c[0].1, rows);
        }
        if i == c.len() {
            return Self::at(&c[c.len() - 1].1, rows);
        }
        let ((c0, r0), (c1, r1)) = (&c[i - 1], &c[i]);
        let t = (context - c0) as f64 / (c1 - c0) as f64;
        let (a, b) = (Self::at(r0, rows), Self::at(r1, rows));
        a + (b - a) * t
    }
}

/// The per-position acceptance estimates of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Acceptance {
    /// Decayed sums of accepted (1) / rejected (0) verdicts per position,
    /// and their decayed weights.
    sum: Vec<f64>,
    weight: Vec<f64>,
    /// The weight of [`PRIOR`] at position 0, fading like evidence.
    prior_weight: f64,
}

impl Acceptance {
    /// Estimates for positions `0..cap`.
    pub fn new(cap: usize) -> Self {
        Acceptance { sum: vec![0.0; cap], weight: vec![0.0; cap], prior_weight: PRIOR_START_WEIGHT }
    }

    /// A round drafted `drafted` tokens and `accepted` of them were
    /// accepted (the first `accepted`, by the rule): positions
    /// `0..accepted` were accepted, position `accepted` rejected when it was
    /// drafted; later positions say nothing, and every position's earlier
    /// evidence fades by [`DECAY`].
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        let drafted = drafted.min(self.sum.len());
        let accepted = accepted.min(drafted);
        let tested = if accepted < drafted { accepted + 1 } else { accepted };
        self.prior_weight *= DECAY;
        for i in 0..self.sum.len() {
            self.sum[i] *= DECAY;
            self.weight[i] *= DECAY;
            if i < tested {
                self.sum[i] += if i < accepted { 1.0 } else { 0.0 };
                self.weight[i] += 1.0;
            }
        }
    }

    /// The estimates at positions `0..n` (at most the cap; past it, the
    /// last position's): each position's evidence shrunk toward the
    /// estimate before it ([`PRIOR`] for position 0).
    fn estimates(&self, n: usize) -> impl Iterator<Item = f64> + '_ {
        let mut prev = PRIOR;
        (0..n).map(move |i| {
            if let (Some(s), Some(w)) = (self.sum.get(i), self.weight.get(i)) {
                let k = if i == 0 { self.prior_weight } else { PRIOR_WEIGHT };
                prev = (s + k * prev) / (w + k);
            }
            prev
        })
    }

    /// The estimate at position `i`.
    pub fn at(&self, i: usize) -> f64 {
        self.estimates(i + 1).last().unwrap_or(PRIOR)
    }

    /// `E(n)`: the expected tokens a round drafting `n` emits.
    pub fn expected_tokens(&self, n: usize) -> f64 {
        let mut e = 1.0;
        let mut p = 1.0;
        for a in self.estimates(n) {
            p *= a;
            e += p;
        }
        e
    }
}

/// The per-request choice of the draft length.
#[derive(Clone, Debug)]
pub struct Controller {
    cost: CostModel,
    acceptance: Acceptance,
    cap: usize,
    /// A drafted token's own cost, in one-row passes (0: weight-free drafters).
    draft_cost: f64,
    plain_streak: usize,
}

/// The other sequences' part of a pass a round's rows join
/// ([`Controller::choose_shared`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Share {
    /// Their rows.
    pub rows: usize,
    /// Their sequences.
    pub sequences: usize,
}

impl Share {
    /// No other sequence: a pass of one's own.
    pub const ALONE: Share = Share { rows: 0, sequences: 0 };
}

/// What [`Controller::choose`] decided, and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// Tokens to draft: 0 is a plain step.
    pub draft: usize,
    /// Expected tokens per one-row pass of the choice.
    pub rate: f64,
    /// The choice is a probe after [`PROBE_AFTER`] plain steps.
    pub probe: bool,
}

impl Controller {
    /// Drafts of at most `cap` tokens, each costing `draft_cost` one-row passes.
    pub fn new(cost: CostModel, cap: usize, draft_cost: f64) -> Self {
        Controller {
            cost,
            acceptance: Acceptance::new(cap),
            cap,
            draft_cost: if draft_cost.is_finite() { draft_cost.max(0.0) } else { 0.0 },
            plain_streak: 0,
        }
    }

    /// The draft length for the next round at `context` positions, at most
    /// `budget` (what the request's token and context limits leave).
    pub fn choose(&mut self, context: usize, budget: usize) -> Choice {
        self.choose_shared(context, budget, Share::ALONE)
    }

    /// [`Controller::choose`] for a round whose rows share a pass with
    /// other sequences' (`share`): the length that gives the pass the most
    /// tokens per unit of its cost, the others' tokens counted one per
    /// sequence. A drafted row is priced at its marginal cost in that pass
    /// (the curve at the pass's total rows), so as the batch fills, a row
    /// must bring more expected tokens to be worth its place, and drafting
    /// shrinks. Alone ([`Share::ALONE`]) it is [`Controller::choose`]'s rule.
    pub fn choose_shared(&mut self, context: usize, budget: usize, share: Share) -> Choice {
        let cap = self.cap.min(budget);
        let others = share.sequences as f64;
        // Alone, a plain step is the unit every cost is measured against.
        let plain = if share.rows == 0 { 1.0 } else { (others + 1.0) / self.cost.relative(context, share.rows + 1) };
        let mut best = Choice { draft: 0, rate: 1.0, probe: false };
        let mut best_total = plain;
        for n in 1..=cap {
            let cost = self.cost.relative(context, share.rows + n + 1) + n as f64 * self.draft_cost;
            let total = (others + self.acceptance.expected_tokens(n)) / cost;
            if total > best_total {
                let rate = self.acceptance.expected_tokens(n)
                    / (self.cost.relative(context, n + 1) + n as f64 * self.draft_cost);
                best = Choice { draft: n, rate, probe: false };
                best_total = total;
            }
        }
        if best.draft == 0 && cap > 0 && self.plain_streak >= PROBE_AFTER {
            let cost = self.cost.relative(context, 2) + self.draft_cost;
            best = Choice { draft: 1, rate: self.acceptance.expected_tokens(1) / cost, probe: true };
        }
        self.plain_streak = if best.draft == 0 { self.plain_streak + 1 } else { 0 };
        best
    }

    /// The round drafted `drafted` tokens (the drafter may find fewer than
    /// asked) and `accepted` were accepted.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        self.acceptance.observe(drafted, accepted);
    }

    pub fn acceptance(&self) -> &Acceptance {
        &self.acceptance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(context: usize, relative: &[f64]) -> CostCurve {
        CostCurve { context, relative: relative.to_vec() }
    }

    /// Cheap rows at a short context, dear ones at a long one.
    fn model() -> CostModel {
        CostModel::new(&[curve(2048, &[1.0, 1.5, 2.0, 2.5]), curve(64, &[1.0, 1.05, 1.1, 1.15])]).unwrap()
    }

    /// Alone, the shared rule is the plain one, choice for choice, over
    /// random acceptance histories; in a full pass whose rows grow dear,
    /// drafting shrinks, and a pass of cheap rows still drafts.
    #[test]
    fn a_shared_pass_prices_drafts_at_their_marginal_cost() {
        let dear = CostModel::new(&[curve(64, &[1.0, 1.05, 1.1, 1.15, 1.6, 2.1, 2.6, 3.1, 3.6])]).unwrap();
        let mut state = 7u64;
        for _ in 0..200 {
            let (mut a, mut b) = (Controller::new(dear.clone(), 6, 0.0), Controller::new(dear.clone(), 6, 0.0));
            for _ in 0..12 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (d, k) = (1 + (state >> 33) as usize % 6, (state >> 40) as usize % 7);
                let k = k.min(d);
                let (x, y) = (a.choose(64, 6), b.choose_shared(64, 6, Share::ALONE));
                assert_eq!(x, y);
                a.observe(d, k);
                b.observe(d, k);
            }
        }
        let sure = |c: &mut Controller| {
            for _ in 0..20 {
                c.observe(6, 6);
            }
        };
        let mut c = Controller::new(dear.clone(), 6, 0.0);
        sure(&mut c);
        let alone = c.choose(64, 6).draft;
        let mut c = Controller::new(dear.clone(), 6, 0.0);
        sure(&mut c);
        let full = c.choose_shared(64, 6, Share { rows: 4, sequences: 4 }).draft;
        assert!(alone >= 3 && full < alone, "alone {alone}, beside four sequences {full}");
        let cheap = CostModel::new(&[curve(64, &[1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16, 1.18])]).unwrap();
        let mut c = Controller::new(cheap, 6, 0.0);
        sure(&mut c);
        assert!(c.choose_shared(64, 6, Share { rows: 3, sequences: 3 }).draft >= 3, "cheap rows still pay");
    }

    #[test]
    fn the_cost_is_interpolated_in_the_context_and_extended_in_the_rows() {
        let m = model();
        assert_eq!(m.relative(64, 2), 1.05);
        assert_eq!(m.relative(10, 3), 1.1, "below the shortest context: its curve");
        assert_eq!(m.relative(100_000, 2), 1.5, "above the longest: its curve");
        let mid = m.relative(1056, 2);
        assert!((mid - 1.275).abs() < 1e-12, "{mid}");
        // Rows past the widest measured: along the last step.
        assert!((m.relative(64, 6) - 1.25).abs() < 1e-12);
        assert_eq!(m.relative(64, 1), 1.0);
        assert!(CostModel::new(&[curve(64, &[1.0])]).is_none());
        assert!(CostModel::new(&[]).is_none());
    }

    #[test]
    fn acceptance_is_a_decayed_mean_per_position_shrunk_toward_the_position_before() {
        let mut a = Acceptance::new(4);
        assert_eq!(a.at(0), PRIOR);
        assert_eq!(a.at(3), PRIOR, "nothing seen: the prior all along");
        assert_eq!(a.expected_tokens(0), 1.0);
        // Three drafted, two accepted: 0 and 1 hit, 2 missed, 3 untested.
        a.observe(3, 2);
        let k0 = PRIOR_START_WEIGHT * DECAY;
        let p0 = (1.0 + k0 * PRIOR) / (1.0 + k0);
        let p1 = (1.0 + PRIOR_WEIGHT * p0) / (1.0 + PRIOR_WEIGHT);
        let p2 = (0.0 + PRIOR_WEIGHT * p1) / (1.0 + PRIOR_WEIGHT);
        assert!((a.at(0) - p0).abs() < 1e-12 && (a.at(1) - p1).abs() < 1e-12, "{} {}", a.at(0), a.at(1));
        assert!((a.at(2) - p2).abs() < 1e-12, "{}", a.at(2));
        assert!((a.at(3) - p2).abs() < 1e-12, "untested: the position before it");
        let e = 1.0 + p0 + p0 * p1 + p0 * p1 * p2;
        assert!((a.expected_tokens(3) - e).abs() < 1e-12);
        // Every draft accepted for a while: the estimates approach 1.
        for _ in 0..40 {
            a.observe(4, 4);
        }
        assert!(a.at(3) > 0.9, "{}", a.at(3));
        // More drafted or accepted than the cap: clamped, no panic; past
        // the cap, the last position's estimate.
        a.observe(10, 12);
        assert_eq!(a.at(9), a.at(3));
    }

    #[test]
    fn a_miss_at_a_deep_position_fades_when_the_position_is_no_longer_drafted() {
        // Accepted at positions 0-2 every round, one early miss at 3.
        let mut a = Acceptance::new(4);
        for _ in 0..5 {
            a.observe(3, 3);
        }
        a.observe(4, 3);
        let after_miss = a.at(3);
        assert!(after_miss < 0.6 * a.at(2), "{after_miss} vs {}", a.at(2));
        // Rounds that draft three tokens, all accepted: position 3 is never
        // tested, and its estimate returns toward position 2's.
        for _ in 0..12 {
            a.observe(3, 3);
        }
        assert!(a.at(3) > 0.9 * a.at(2), "{} vs {}", a.at(3), a.at(2));
        // With rows cheap enough, the controller drafts past 3 again.
        let cost = CostModel::new(&[curve(64, &[1.0, 1.05, 1.1, 1.15, 1.2])]).unwrap();
        let mut c = Controller::new(cost, 4, 0.0);
        for _ in 0..5 {
            c.observe(3, 3);
        }
        c.observe(4, 3);
        let mut lengths = Vec::new();
        for _ in 0..12 {
            let n = c.choose(64, 4).draft;
            lengths.push(n);
            c.observe(n.min(3), n.min(3));
        }
        assert!(lengths.contains(&4), "never drafted past the early miss again: {lengths:?}");
    }

    #[test]
    fn long_drafts_where_they_are_accepted_and_cheap_plain_steps_where_not() {
        let mut c = Controller::new(model(), 3, 0.0);
        for _ in 0..20 {
            c.observe(3, 3);
        }
        assert_eq!(c.choose(64, 3).draft, 3, "accepted and cheap: the cap");
        assert_eq!(c.choose(64, 1).draft, 1, "the budget bounds it");
        // At 2,048 positions a row costs half a pass: three accepted
        // drafts (4 tokens for 2.5 passes) still pay, one does not at 50%.
        assert_eq!(c.choose(2048, 3).draft, 3);
        let mut c = Controller::new(model(), 3, 0.0);
        for _ in 0..20 {
            c.observe(1, 0);
        }
        let ch = c.choose(64, 3);
        assert_eq!((ch.draft, ch.rate), (0, 1.0), "never accepted: plain steps");
        // A model drafter's own cost makes drafting dearer.
        let mut c = Controller::new(model(), 3, 0.5);
        for _ in 0..20 {
            c.observe(3, 3);
        }
        assert_eq!(c.choose(2048, 3).draft, 0, "at 2,048 positions a drafted token's own cost eats the gain");
        assert!(c.choose(64, 3).draft >= 1, "where rows are cheap it still pays");
    }

    #[test]
    fn after_a_run_of_plain_steps_it_probes_with_one_token_and_can_recover() {
        let mut c = Controller::new(model(), 4, 0.0);
        for _ in 0..20 {
            c.observe(1, 0);
        }
        let choices: Vec<Choice> = (0..PROBE_AFTER + 1).map(|_| c.choose(2048, 4)).collect();
        assert!(choices[..PROBE_AFTER].iter().all(|x| x.draft == 0 && !x.probe), "{choices:?}");
        assert_eq!((choices[PROBE_AFTER].draft, choices[PROBE_AFTER].probe), (1, true));
        // The streak restarts after the probe.
        assert_eq!(c.choose(2048, 4).draft, 0);
        // Probes that are accepted bring drafting back.
        for _ in 0..6 {
            c.observe(1, 1);
        }
        assert!(c.choose(64, 4).draft >= 1);
        // No budget: no probe.
        let mut c = Controller::new(model(), 4, 0.0);
        for _ in 0..3 * PROBE_AFTER {
            assert_eq!(c.choose(64, 0).draft, 0);
        }
    }
}
