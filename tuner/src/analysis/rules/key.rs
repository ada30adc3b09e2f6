//! The policy key a record's summary gives (typed once by the summarizer,
//! [`crate::analysis::summary::Summary::key`]) as a refusal when it has none.
//! A served record at `--concurrency N` has a key at concurrency `N`: its
//! entry is a bucket of the idle key (`policy::key`), and it pools only with
//! records of its own concurrency.
use policy::PolicyKey;

use super::Refusal;
use crate::analysis::summary::Summary;

/// The record's policy key, or the refusal that says which part is missing.
pub fn record_key(s: &Summary) -> Result<PolicyKey, Refusal> {
    s.key.clone().map_err(Refusal::Key)
}
