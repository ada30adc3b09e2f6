//! The draft width: how many tokens the drafter proposes before each verify
//! pass. One type from the table to the verify loop.
//!
//! A width `W` is `1..=MAX_WIDTH` drafted tokens; the verify pass that checks
//! them runs `W + 1` rows ([`Width::verify_rows`]: the last verified token
//! and the `W` drafts). Where speculation may also be switched off (a table
//! entry, an override), the value is `Option<Width>`, `None` read and written
//! as `"off"` ([`parse`], [`label`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The largest width an entry, an override or a declaration may give. A
/// verify pass is `width + 1` rows; DFlash checkpoints train 16-position
/// blocks (15 drafts), and past 32 drafted tokens the chance that the last
/// ones are accepted is negligible for every drafter kind we know.
pub const MAX_WIDTH: usize = 32;

/// Drafted tokens per verify pass, `1..=MAX_WIDTH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Width(u8);

impl Width {
    /// A width of `n` drafted tokens; the error says the range.
    pub fn new(n: usize) -> Result<Width, String> {
        if (1..=MAX_WIDTH).contains(&n) {
            Ok(Width(n as u8))
        } else if n == 0 {
            Err("0 is not a width; use \"off\" to disable speculation".into())
        } else {
            Err(format!("{n} is out of range: a width is 1..={MAX_WIDTH}, or \"off\""))
        }
    }

    /// Drafted tokens per verify pass.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }

    /// Rows of the verify pass that checks this many drafts: the last
    /// verified token plus the drafts.
    pub fn verify_rows(self) -> usize {
        self.get() + 1
    }
}

impl fmt::Display for Width {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Width {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::from(self.0))
    }
}

impl<'de> Deserialize<'de> for Width {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(d)?;
        Width::new(usize::try_from(n).unwrap_or(usize::MAX)).map_err(serde::de::Error::custom)
    }
}

/// `"off"` for `None`, the number otherwise.
pub fn label(w: Option<Width>) -> String {
    w.map_or_else(|| "off".to_string(), |w| w.to_string())
}

/// Parses a width as an operator writes it: `1..=MAX_WIDTH` or `off`
/// (`None`). The error says what is accepted.
pub fn parse(s: &str) -> Result<Option<Width>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match t.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!("{n} is out of range: a width is 1..={MAX_WIDTH}, or \"off\"")),
        Ok(n) => Width::new(usize::try_from(n).unwrap_or(usize::MAX)).map(Some).map_err(|e| format!("{s:?}: {e}")),
        Err(_) => Err(format!("{s:?} is not a width: give an integer 1..={MAX_WIDTH} or \"off\"")),
    }
}

/// Serde for `Option<Width>` written as a number or `"off"` (events and
/// the table).
pub mod or_off {
    use super::Width;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(w: &Option<Width>, s: S) -> Result<S::Ok, S::Error> {
        match w {
            Some(w) => s.serialize_u64(w.get() as u64),
            None => s.serialize_str("off"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_width_is_one_to_thirty_two_and_its_verify_pass_has_one_more_row() {
        assert!(Width::new(0).is_err());
        assert!(Width::new(MAX_WIDTH + 1).is_err());
        let w = Width::new(5).unwrap();
        assert_eq!((w.get(), w.verify_rows()), (5, 6));
        assert_eq!(parse("off"), Ok(None));
        assert_eq!(parse(" 32 "), Ok(Some(Width::new(32).unwrap())));
        for bad in ["0", "33", "-1", "x", "18446744073709551616"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(label(None), "off");
        assert_eq!(label(Some(w)), "5");
    }

    #[test]
    fn a_width_deserializes_only_in_range() {
        let ok: Width = serde_json::from_str("4").unwrap();
        assert_eq!(ok.get(), 4);
        assert!(serde_json::from_str::<Width>("0").is_err());
        assert!(serde_json::from_str::<Width>("99").is_err());
    }
}
