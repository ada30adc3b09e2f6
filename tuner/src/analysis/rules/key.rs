//! The policy key a record's summary gives (typed once by the summarizer,
//! [`crate::analysis::summary::Summary::key`]) as a refusal when it has none,
//! and [`check_concurrency`]: a record the key cannot tell apart from an
//! idle measurement.
use policy::PolicyKey;

use super::Refusal;
use crate::analysis::summary::Summary;

/// The record's policy key, or the refusal that says which part is missing.
pub fn record_key(s: &Summary) -> Result<PolicyKey, Refusal> {
    s.key.clone().map_err(Refusal::Key)
}

/// A served record measured at more than one concurrent client
/// (`tuner sweep --served --concurrency N`) cannot become an entry: the key
/// has no concurrency yet, so its width would be resolved for an idle server,
/// the very case it was not measured in. Nor does it pool with the idle
/// records of its key. The record still stands as evidence of the width
/// under load.
pub fn check_concurrency(s: &Summary) -> Result<(), Refusal> {
    if s.served && s.concurrency > 1 {
        return Err(Refusal::UnderLoad { concurrency: s.concurrency });
    }
    Ok(())
}
