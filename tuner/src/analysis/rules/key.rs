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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::simulate::{SimConfig, Template, sweep};
    use crate::data::raw::ServedSettings;

    fn summary(served: Option<usize>) -> Summary {
        let mut raw = sweep(&Template::new(), &SimConfig::default_plan(0.03, 0.11, 7));
        raw.header.settings.served = served.map(|concurrency| ServedSettings {
            health_timeout_s: 120.0,
            stop_timeout_s: 15.0,
            request_timeout_s: 300.0,
            concurrency,
        });
        crate::analysis::summarize::summarize_with(&raw, false).unwrap()
    }

    #[test]
    fn a_served_record_under_load_is_refused_an_entry_and_named_evidence() {
        let s = summary(Some(4));
        assert_eq!(s.concurrency, 4);
        let e = check_concurrency(&s).unwrap_err();
        assert!(matches!(e, Refusal::UnderLoad { concurrency: 4 }), "{e}");
        let e = e.to_string();
        assert!(e.contains("measured at concurrency 4") && e.contains("stands as evidence"), "{e}");
        assert!(e.contains("--concurrency 1"), "the remedy: {e}");
        // One client, served or not, is the idle measurement an entry is.
        assert!(check_concurrency(&summary(Some(1))).is_ok());
        assert!(check_concurrency(&summary(None)).is_ok());
    }
}
