//! How many tokens each round of the speculative loop drafts: a fixed
//! width, or the adaptive draft length of issue 36, chosen before each
//! verify pass from the request's acceptance so far and the verify pass's
//! measured cost ([`crate::policy::adaptive`]).
//!
//! The choice never changes which tokens come out: greedy speculative
//! output equals classic output at every draft length, and a sampled
//! round's acceptance rule keeps the target distribution at any length
//! chosen from what came before it. Draft lengths depend only on the
//! tokens seen and fixed numbers (the cost curve, the drafter's
//! [`Drafter::step_cost`](super::drafter::Drafter::step_cost)), never on
//! timings, so a seeded run repeats itself.

use crate::policy::Width;
use crate::policy::adaptive::{Controller, CostModel, Share};
use ::policy::{Bucket, Drafting};

/// The draft length of every round of a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// Up to `width` drafted tokens every round.
    Fixed(Width),
    /// `0..=cap` drafted tokens, chosen per round ([`Controller`]).
    Adaptive { cap: Width, cost: CostModel },
}

impl From<Width> for Schedule {
    fn from(w: Width) -> Self {
        Schedule::Fixed(w)
    }
}

impl Schedule {
    /// The most tokens a round drafts.
    pub fn cap(&self) -> Width {
        match self {
            Schedule::Fixed(w) | Schedule::Adaptive { cap: w, .. } => *w,
        }
    }

    pub fn is_adaptive(&self) -> bool {
        matches!(self, Schedule::Adaptive { .. })
    }

    /// `4`, or `adaptive 0..=4`: for humans.
    pub fn label(&self) -> String {
        match self {
            Schedule::Fixed(w) => w.to_string(),
            Schedule::Adaptive { cap, .. } => format!("adaptive 0..={cap}"),
        }
    }

    /// The per-request state; `draft_cost` is a drafted token's cost in
    /// one-row target passes.
    pub(crate) fn start(&self, draft_cost: f64) -> Rounds {
        match self {
            Schedule::Fixed(w) => Rounds { cap: w.get(), controller: None, ladder: Vec::new() },
            Schedule::Adaptive { cap, cost } => Rounds {
                cap: cap.get(),
                controller: Some(Controller::new(cost.clone(), cap.get(), draft_cost)),
                ladder: Vec::new(),
            },
        }
    }
}

/// One request's draft lengths.
pub(crate) struct Rounds {
    cap: usize,
    controller: Option<Controller>,
    /// What to draft with several sequences in a pass: the policy's
    /// buckets (`policy::Bucket`); empty: the schedule at every
    /// concurrency.
    ladder: Vec<Bucket>,
}

/// What a round asks the drafter for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    pub draft: usize,
    /// The adaptive controller's probe after a run of plain steps.
    pub probe: bool,
}

impl Rounds {
    /// The draft length of the next round at `context` positions, when the
    /// request's limits leave room for `budget` drafted tokens.
    /// A round whose rows join other sequences' in one pass (`share`;
    /// [`Share::ALONE`] for a pass of its own): the adaptive length prices
    /// its rows at their marginal cost there ([`Controller::choose_shared`]);
    /// a fixed width ignores it.
    ///
    /// With a ladder ([`Rounds::set_ladder`]), a pass of `share.sequences +
    /// 1` sequences drafts what its bucket says: `off` a plain step, a fixed
    /// width that width, the adaptive length the controller (up to the
    /// bucket's width; a fixed one where the schedule has no controller).
    pub fn ask_shared(&mut self, context: usize, budget: usize, share: Share) -> Ask {
        match Bucket::for_sequences(&self.ladder, share.sequences + 1).map(|b| b.drafting) {
            None => {}
            Some(None) => return Ask { draft: 0, probe: false },
            Some(Some(Drafting::Fixed(w))) => return Ask { draft: w.get().min(budget), probe: false },
            Some(Some(Drafting::Adaptive { max })) => {
                let budget = budget.min(max.get());
                return match &mut self.controller {
                    None => Ask { draft: budget, probe: false },
                    Some(c) => {
                        let ch = c.choose_shared(context, budget, share);
                        Ask { draft: ch.draft, probe: ch.probe }
                    }
                };
            }
        }
        match &mut self.controller {
            None => Ask { draft: self.cap.min(budget), probe: false },
            Some(c) => {
                let ch = c.choose_shared(context, budget, share);
                Ask { draft: ch.draft, probe: ch.probe }
            }
        }
    }

    /// Drafts by `ladder` when several sequences share a pass.
    pub fn set_ladder(&mut self, ladder: &[Bucket]) {
        self.ladder = ladder.to_vec();
    }

    /// The most tokens a round may draft, at any concurrency.
    pub fn cap(&self) -> usize {
        self.ladder.iter().filter_map(|b| b.drafting).map(|d| d.max().get()).fold(self.cap, usize::max)
    }

    /// A round's verdicts: `tested` drafted tokens were checked against the
    /// target (the rest of the draft was cut off by the request's end),
    /// the first `accepted` of them accepted.
    pub fn observe(&mut self, tested: usize, accepted: usize) {
        if let Some(c) = &mut self.controller {
            c.observe(tested, accepted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::table::CostCurve;

    fn cost() -> CostModel {
        CostModel::new(&[CostCurve { context: 64, relative: vec![1.0, 1.05, 1.1, 1.15, 1.2] }]).unwrap()
    }

    #[test]
    fn a_fixed_schedule_asks_for_its_width_within_the_budget() {
        let w = Width::new(4).unwrap();
        let mut r = Schedule::from(w).start(0.0);
        assert_eq!(r.ask_shared(10, 9, Share::ALONE), Ask { draft: 4, probe: false });
        assert_eq!(r.ask_shared(10, 2, Share::ALONE).draft, 2);
        r.observe(4, 0);
        assert_eq!(r.ask_shared(10, 9, Share::ALONE).draft, 4, "a fixed width does not learn");
        assert_eq!(Schedule::from(w).label(), "4");
    }

    #[test]
    fn an_adaptive_schedule_follows_the_acceptance() {
        let s = Schedule::Adaptive { cap: Width::new(4).unwrap(), cost: cost() };
        assert_eq!((s.cap().get(), s.label().as_str(), s.is_adaptive()), (4, "adaptive 0..=4", true));
        let mut r = s.start(0.0);
        for _ in 0..20 {
            r.observe(1, 0);
        }
        assert_eq!(r.ask_shared(64, 4, Share::ALONE).draft, 0, "drafts that never pass: plain steps");
        let mut r = s.start(0.0);
        for _ in 0..20 {
            r.observe(4, 4);
        }
        assert_eq!(r.ask_shared(64, 4, Share::ALONE).draft, 4);
        assert_eq!(r.ask_shared(64, 3, Share::ALONE).draft, 3, "the budget bounds it");
    }

    #[test]
    fn a_ladder_drafts_by_the_sequences_in_the_pass() {
        let w = |n| Some(Drafting::Fixed(Width::new(n).unwrap()));
        let bucket = |sequences, drafting| Bucket { sequences, drafting, record: "records/r".into() };
        let mut r = Schedule::from(Width::new(4).unwrap()).start(0.0);
        r.set_ladder(&[bucket(2, w(6)), bucket(4, None)]);
        let with = |others| Share { rows: others, sequences: others };
        assert_eq!(r.cap(), 6, "the widest bucket bounds a round's draft");
        assert_eq!(r.ask_shared(10, 9, Share::ALONE).draft, 4, "alone: the schedule's width");
        assert_eq!(r.ask_shared(10, 9, with(1)).draft, 6, "two sequences: the bucket at 2");
        assert_eq!(r.ask_shared(10, 5, with(2)).draft, 5, "the budget bounds a bucket's width");
        assert_eq!(r.ask_shared(10, 9, with(3)).draft, 0, "four sequences: off, a plain step");
        assert_eq!(r.ask_shared(10, 9, with(20)).draft, 0, "beyond the last bucket: the last");
        // An adaptive bucket on a fixed schedule drafts its width.
        let mut r = Schedule::from(Width::new(4).unwrap()).start(0.0);
        r.set_ladder(&[bucket(2, Some(Drafting::Adaptive { max: Width::new(3).unwrap() }))]);
        assert_eq!(r.ask_shared(10, 9, with(1)).draft, 3);
        // On an adaptive schedule, the controller within the bucket's width.
        let s = Schedule::Adaptive { cap: Width::new(4).unwrap(), cost: cost() };
        let mut r = s.start(0.0);
        r.set_ladder(&[bucket(2, Some(Drafting::Adaptive { max: Width::new(2).unwrap() }))]);
        for _ in 0..20 {
            r.observe(4, 4);
        }
        assert_eq!(r.ask_shared(64, 4, Share::ALONE).draft, 4);
        assert_eq!(r.ask_shared(64, 4, with(1)).draft, 2);
    }
}
