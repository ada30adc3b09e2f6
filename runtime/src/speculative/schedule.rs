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
            Schedule::Fixed(w) => Rounds { cap: w.get(), controller: None },
            Schedule::Adaptive { cap, cost } => {
                Rounds { cap: cap.get(), controller: Some(Controller::new(cost.clone(), cap.get(), draft_cost)) }
            }
        }
    }
}

/// One request's draft lengths.
pub(crate) struct Rounds {
    cap: usize,
    controller: Option<Controller>,
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
    pub fn ask_shared(&mut self, context: usize, budget: usize, share: Share) -> Ask {
        match &mut self.controller {
            None => Ask { draft: self.cap.min(budget), probe: false },
            Some(c) => {
                let ch = c.choose_shared(context, budget, share);
                Ask { draft: ch.draft, probe: ch.probe }
            }
        }
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
}
