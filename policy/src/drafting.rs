//! [`Drafting`]: what a speculative run drafts each round, the one type for
//! the choice from the table to the tuner's arms: a fixed draft length, or
//! the adaptive one (each round's length chosen in `0..=max` from the
//! request's acceptance and the measured verify cost, [`crate::adaptive`]).
//! Where speculation may also be off (a table entry), the value is
//! `Option<Drafting>`, `None` for off.
//!
//! The table keeps its field names: `width = N` is `Fixed(N)`, `width = N`
//! with `adaptive = true` is `Adaptive { max: N }`, `width = "off"` is
//! `None` ([`Drafting::from_fields`], [`Drafting::fields`]), so no entry
//! changes.

use std::fmt;

use crate::width::Width;

/// Drafted tokens per round: fixed, or chosen per round up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Drafting {
    /// `width` drafted tokens every round (fewer only when the drafter has
    /// fewer to offer).
    Fixed(Width),
    /// `0..=max` drafted tokens, chosen per round.
    Adaptive { max: Width },
}

impl Drafting {
    /// The most tokens a round drafts: the verify pass runs at most
    /// `max().verify_rows()` rows.
    pub fn max(self) -> Width {
        match self {
            Drafting::Fixed(w) | Drafting::Adaptive { max: w } => w,
        }
    }

    pub fn is_adaptive(self) -> bool {
        matches!(self, Drafting::Adaptive { .. })
    }

    /// From the table's and the events' two fields: a width (`None` for
    /// off) and whether it adapts. Adaptive with no width is an error (an
    /// `off` entry has no draft length to adapt).
    pub fn from_fields(width: Option<Width>, adaptive: bool) -> Result<Option<Drafting>, &'static str> {
        match (width, adaptive) {
            (None, true) => Err("an `off` entry has no draft length to adapt"),
            (None, false) => Ok(None),
            (Some(w), false) => Ok(Some(Drafting::Fixed(w))),
            (Some(w), true) => Ok(Some(Drafting::Adaptive { max: w })),
        }
    }

    /// "width 5", "the adaptive draft length (up to 8)", or "off".
    pub fn label(d: Option<Drafting>) -> String {
        d.map_or_else(|| "off".to_string(), |d| d.to_string())
    }

    /// The two fields back: (`width`, `adaptive`); `None` is off.
    pub fn fields(d: Option<Drafting>) -> (Option<Width>, bool) {
        (d.map(Drafting::max), d.is_some_and(Drafting::is_adaptive))
    }
}

impl fmt::Display for Drafting {
    /// "width 5", or "the adaptive draft length (up to 8)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drafting::Fixed(w) => write!(f, "width {w}"),
            Drafting::Adaptive { max } => write!(f, "the adaptive draft length (up to {max})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(n: usize) -> Width {
        Width::new(n).unwrap()
    }

    #[test]
    fn the_table_fields_round_trip_and_adaptive_off_is_refused() {
        for d in [None, Some(Drafting::Fixed(w(3))), Some(Drafting::Adaptive { max: w(8) })] {
            let (width, adaptive) = Drafting::fields(d);
            assert_eq!(Drafting::from_fields(width, adaptive), Ok(d));
        }
        assert!(Drafting::from_fields(None, true).is_err());
        assert_eq!(Drafting::Adaptive { max: w(8) }.max(), w(8));
        assert_eq!(Drafting::Fixed(w(2)).to_string(), "width 2");
    }
}
