//! `Reading<T>`: a value read from the host, or an explicit null with the
//! reason it could not be read. Every optional source in the gate and the
//! identity is one of these, so "absent" never reads as zero, empty or
//! infinite (a missing reading taken as 0 would pass a gate it should fail).
use serde::{Deserialize, Serialize};

/// A value from one source, or `null` with why. Exactly one of the two
/// fields is non-null; both are always serialised, so a consumer can tell
/// "the value is null" from "the field was forgotten".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reading<T> {
    pub value: Option<T>,
    pub unavailable_reason: Option<String>,
}

impl<T> Reading<T> {
    pub fn ok(value: T) -> Self {
        Reading { value: Some(value), unavailable_reason: None }
    }

    pub fn unavailable(reason: impl Into<String>) -> Self {
        Reading { value: None, unavailable_reason: Some(reason.into()) }
    }

    pub fn from_result<E: std::fmt::Display>(r: Result<T, E>) -> Self {
        match r {
            Ok(v) => Self::ok(v),
            Err(e) => Self::unavailable(e.to_string()),
        }
    }

    pub fn as_ref(&self) -> Reading<&T> {
        Reading { value: self.value.as_ref(), unavailable_reason: self.unavailable_reason.clone() }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        Reading { value: self.value.map(f), unavailable_reason: self.unavailable_reason }
    }

    /// The reason, or a generic one if a value is missing without one
    /// (which the constructors never produce).
    pub fn reason(&self) -> &str {
        self.unavailable_reason.as_deref().unwrap_or("no value and no reason recorded")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_reading_serialises_an_explicit_null_and_its_reason() {
        let r: Reading<u64> = Reading::unavailable("no such file");
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j, serde_json::json!({"value": null, "unavailable_reason": "no such file"}));
        let ok = serde_json::to_value(Reading::ok(3u64)).unwrap();
        assert_eq!(ok, serde_json::json!({"value": 3, "unavailable_reason": null}));
    }
}
