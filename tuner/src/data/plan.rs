//! The sweep's design: what a sweep runs and how often ([`Design`]), its
//! defaults and bounds, and the arm plan those numbers give ([`plan`]).
//! Below both the raw data (which records the design) and the sweep (which
//! runs it), so neither reaches into the other for it.
use policy::{Drafting, Width};
use serde::{Deserialize, Serialize};

/// Default tokens per request (docs/records.md, "How long a sweep takes").
pub const DEFAULT_MAX_TOKENS: usize = 48;

/// The default plan spends its budget on rounds, not bursts: the variance
/// that matters lies between processes, and only more processes shrink it.
/// With 8 widths, the adaptive arm and 12 prompts: 4 x (9 + 2 x 9) = 108
/// arms, 9–12 minutes on the 2-core hosts with a warm-up pass per arm
/// (docs/records.md, "How long a default sweep takes"), less without.
pub const DEFAULT_ROUNDS: usize = 4;
/// Unrecorded warm-up passes per arm: none. A runtime process is warm
/// before its first request (the weights are read and repacked at load, the
/// exactness probe runs the kernels), and the committed records show it: in
/// the 52 with a warm-up pass (SmolLM2, Gemma 3, the Qwen2.5-Coder 1.5B alone
/// and with its draft model; Intel, Zen 2, Zen 4, Zen 5 and H200 hosts) an arm's
/// recorded pass ran at 0.980–1.042 of its warm-up pass (per-record medians
/// over arms), and what the warm-up changed in a speculative-to-classic ratio,
/// over all 3,238 arms, is 1.0007 [0.9956, 1.0057]: it moved no decision and
/// took half of every arm's requests (docs/records.md, "The warm-up pass";
/// `scripts/warmup-effect.py`). `--warmup N` still runs N.
pub const DEFAULT_WARMUP: usize = 0;
/// Recorded passes per speculative arm: one. A second pass halves only the
/// request part of a round's ratio variance, which on this host is under a
/// third of the process part; the budget buys rounds instead.
pub const DEFAULT_BURSTS: usize = 1;
/// Classic arms per bracket side: nine, so that the sweep's drift test
/// flags a 10 % systematic drift in at least 90 % of sweeps at a 12 %
/// process spread (the largest these hosts showed; eight fall just short),
/// and a side's variance estimate has 8 degrees of freedom, free of drift (the arms of a side run
/// back to back). The simulation behind the choice is in docs/records.md
/// ("Choosing the bracket plan"): per second of sweep, more arms of one
/// pass beat fewer of four, since a pass costs about as much as the
/// process's start and the process noise does not shrink with passes.
pub const DEFAULT_BRACKET_ARMS: usize = 9;
/// Recorded passes per bracket arm: one (above).
pub const DEFAULT_BRACKET_BURSTS: usize = 1;

/// Upper bounds on what an operator may type (a sweep beyond them would run
/// for days; a typo must not).
pub const MAX_ROUNDS: usize = 64;
pub const MAX_BURSTS: usize = 64;
pub const MAX_BRACKET_ARMS: usize = 16;
pub const MAX_WARMUP: usize = 16;
pub const MAX_TOKENS_PER_REQUEST: usize = 4096;
pub const MAX_THREADS: usize = 1024;

/// `--rounds auto` defaults: from the fixed default up to twice it, within
/// the 15 minutes a default sweep may take on this host.
pub const DEFAULT_AUTO_MAX_ROUNDS: usize = 8;
pub const DEFAULT_AUTO_BUDGET_S: f64 = 900.0;
/// The longest time budget an operator may give `--rounds auto` (a day).
pub const MAX_AUTO_BUDGET_S: f64 = 86_400.0;

/// What one speculative arm of a sweep drafts: a fixed width, or the
/// adaptive draft length (issue 36: the runtime chooses each round's draft
/// length in `0..=cap` with `--adaptive on`, `cap` the design's widest fixed
/// width, [`Design::adaptive_cap`], from the verify-cost curves the sweep
/// has measured so far). [`SpeculativeArm::drafting`] gives the policy's
/// [`Drafting`] it runs. `Option<SpeculativeArm>` is an arm of the plan,
/// `None` the classic arms.
///
/// Written as a number wherever a record stores it (raw.jsonl, the
/// summary's JSON and CSV, the plot's axis): a fixed width as itself, the
/// adaptive arm as 0, which no fixed width is ([`SpeculativeArm::code`]);
/// so every record written before this type reads back, and re-summarizes,
/// byte for byte. Ordered as those numbers are: the adaptive arm first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "usize", try_from = "usize")]
pub enum SpeculativeArm {
    Adaptive,
    Fixed(Width),
}

impl SpeculativeArm {
    /// A fixed width of `n` (the error says the range).
    pub fn fixed(n: usize) -> Result<SpeculativeArm, String> {
        Width::new(n).map(SpeculativeArm::Fixed)
    }

    /// The number a record stores: the width, 0 for the adaptive arm.
    pub fn code(self) -> usize {
        match self {
            SpeculativeArm::Adaptive => 0,
            SpeculativeArm::Fixed(w) => w.get(),
        }
    }

    pub fn is_adaptive(self) -> bool {
        self == SpeculativeArm::Adaptive
    }

    /// The fixed width, `None` for the adaptive arm.
    pub fn width(self) -> Option<Width> {
        match self {
            SpeculativeArm::Adaptive => None,
            SpeculativeArm::Fixed(w) => Some(w),
        }
    }

    /// The arm that runs a table entry's choice.
    pub fn of(d: Drafting) -> SpeculativeArm {
        match d {
            Drafting::Adaptive { .. } => SpeculativeArm::Adaptive,
            Drafting::Fixed(w) => SpeculativeArm::Fixed(w),
        }
    }

    /// What the arm's runtime drafts, the adaptive arm up to `cap`.
    pub fn drafting(self, cap: Width) -> Drafting {
        match self {
            SpeculativeArm::Adaptive => Drafting::Adaptive { max: cap },
            SpeculativeArm::Fixed(w) => Drafting::Fixed(w),
        }
    }
}

/// The arm a record's number names (0 is the adaptive arm); panics on a
/// number no arm has. For literals in tests.
#[doc(hidden)]
pub fn arm(n: usize) -> SpeculativeArm {
    SpeculativeArm::try_from(n).unwrap_or_else(|e| panic!("{n} names no arm: {e}"))
}

/// [`arm`] of each number.
#[doc(hidden)]
pub fn arms(ns: &[usize]) -> Vec<SpeculativeArm> {
    ns.iter().map(|&n| arm(n)).collect()
}

impl From<SpeculativeArm> for usize {
    fn from(a: SpeculativeArm) -> usize {
        a.code()
    }
}

impl TryFrom<usize> for SpeculativeArm {
    type Error = String;
    fn try_from(n: usize) -> Result<SpeculativeArm, String> {
        if n == 0 { Ok(SpeculativeArm::Adaptive) } else { SpeculativeArm::fixed(n) }
    }
}

impl std::fmt::Display for SpeculativeArm {
    /// As a record writes it for people: the number, or `adaptive`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpeculativeArm::Adaptive => f.write_str("adaptive"),
            SpeculativeArm::Fixed(w) => write!(f, "{w}"),
        }
    }
}

/// Which classic bracket of its round an arm is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bracket {
    Open,
    Close,
}

/// One arm of the plan: a fresh runtime process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedArm {
    pub index: usize,
    /// 0-based round.
    pub round: usize,
    /// What it drafts; `None` is classic decoding.
    pub width: Option<SpeculativeArm>,
    /// For classic arms: which bracket of the round.
    pub bracket: Option<Bracket>,
}

/// What a sweep runs and how often: the numbers its arm plan and every
/// arm's command line follow from. Shared by what the operator asked for
/// (`tuner sweep`'s options) and what the raw data records ([`Settings`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Design {
    /// The fixed widths, then [`SpeculativeArm::Adaptive`] when the sweep
    /// runs the adaptive arm.
    pub widths: Vec<SpeculativeArm>,
    pub rounds: usize,
    /// Recorded passes over the prompt set per speculative arm (`runtime --repeat`).
    pub bursts: usize,
    /// Classic arms on each side of a round (version 1: always 1). Two
    /// halve the process noise of the drift test and of every ratio's baseline.
    #[serde(default = "one")]
    pub bracket_arms: usize,
    /// Recorded passes per classic bracket arm; null: `bursts` (version 1).
    #[serde(default)]
    pub bracket_bursts: Option<usize>,
    /// `--rounds auto`: `rounds` is then the maximum, and the sweep stops
    /// earlier when the rule of `AUTO_ROUNDS_RULE` (summary.rs) says so.
    #[serde(default)]
    pub auto_rounds: Option<AutoRounds>,
    /// Unrecorded passes first (`runtime --warmup`), excluded everywhere.
    pub warmup: usize,
    pub max_tokens: usize,
    pub threads: usize,
    /// Context lengths at which each round also measures the verify pass's
    /// cost (one `runtime bench --verify-cost` process each, after the
    /// round's arms: [`crate::data::verify_cost`]); empty: not measured, as in records
    /// written before it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cost_contexts: Vec<usize>,
}

impl Design {
    /// Recorded passes of an arm: bracket arms may run more than speculative ones.
    pub fn bursts_of(&self, width: Option<SpeculativeArm>) -> usize {
        match width {
            Some(_) => self.bursts,
            None => self.bracket_bursts.unwrap_or(self.bursts),
        }
    }

    /// Whether the sweep runs the adaptive arm.
    pub fn has_adaptive_arm(&self) -> bool {
        self.widths.contains(&SpeculativeArm::Adaptive)
    }

    /// The widest fixed width: the adaptive arm's cap (1 with none).
    pub fn adaptive_cap(&self) -> Width {
        self.widths.iter().filter_map(|w| w.width()).max().unwrap_or_else(|| Width::new(1).expect("1 is a width"))
    }

    /// The arm plan these numbers give ([`plan`]).
    pub fn plan(&self) -> Vec<PlannedArm> {
        plan(&self.widths, self.rounds, self.bracket_arms)
    }
}

/// The bounds of `--rounds auto`, fixed before the first arm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoRounds {
    pub min_rounds: usize,
    pub max_rounds: usize,
    /// No round is started that would end past this many seconds of the
    /// sweep (projected from the longest round so far).
    pub budget_s: f64,
}

fn one() -> usize {
    1
}

/// The arm plan: every round opens and closes with `bracket_arms` classic
/// arms; the widths run between them rotated by `round * len / rounds`
/// positions, so a time trend across the sweep does not line up with width.
pub fn plan(widths: &[SpeculativeArm], rounds: usize, bracket_arms: usize) -> Vec<PlannedArm> {
    let mut arms = Vec::new();
    for round in 0..rounds {
        let mut order = widths.to_vec();
        if !order.is_empty() {
            let shift = (round * order.len() / rounds.max(1)) % order.len();
            order.rotate_left(shift);
        }
        let mut push = |width, bracket| arms.push(PlannedArm { index: arms.len(), round, width, bracket });
        for _ in 0..bracket_arms {
            push(None, Some(Bracket::Open));
        }
        for w in order {
            push(Some(w), None);
        }
        for _ in 0..bracket_arms {
            push(None, Some(Bracket::Close));
        }
    }
    arms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_is_bracketed_and_the_width_order_rotates() {
        let p = plan(&arms(&[1, 2, 3, 4]), 2, 1);
        let widths: Vec<Option<usize>> = p.iter().map(|a| a.width.map(SpeculativeArm::code)).collect();
        assert_eq!(
            widths,
            vec![None, Some(1), Some(2), Some(3), Some(4), None, None, Some(3), Some(4), Some(1), Some(2), None]
        );
        assert_eq!(p[0].bracket, Some(Bracket::Open));
        assert_eq!(p[5].bracket, Some(Bracket::Close));
        assert_eq!(p[6].round, 1);
        assert!(p.iter().enumerate().all(|(i, a)| a.index == i));
        // Three rounds of three widths: each width in a different position each round.
        let p = plan(&arms(&[1, 2, 3]), 3, 1);
        let firsts: Vec<Option<usize>> = p.chunks(5).map(|r| r[1].width.map(SpeculativeArm::code)).collect();
        assert_eq!(firsts, vec![Some(1), Some(2), Some(3)]);
    }
}
