//! Rules over the requests of one width, one round, or one arm's startup:
//! which data measured speculation, which round drifted, which arm was no
//! classic baseline or ran inexact.
use runtime::events::Startup;

use crate::analysis::estimate::DriftTest;

/// The counts of one width's recorded requests that [`not_a_measurement`] reads.
#[derive(Clone, Debug, Default)]
pub struct WidthRequests<'a> {
    pub requests: usize,
    pub declined: usize,
    /// The reason of the first decline, shown with the count.
    pub first_decline: Option<&'a str>,
    pub without_diagnostics: usize,
    pub zero_round_requests: usize,
    /// Requests with a missing, non-finite or implausible rate, or one its counts and times do not give
    /// (`crate::analysis::summary::rate`).
    pub invalid_rate_requests: usize,
}

/// Why a width is not a measurement of speculation, if it is not: no
/// complete arm, a request that declined to classic decoding or carries no
/// diagnostics (its rate is classic decoding's), every request at zero
/// speculative rounds, or a request without a valid rate. The first that
/// applies is named; `served` says which rate the last one means.
pub fn not_a_measurement(w: &WidthRequests<'_>, served: bool) -> Option<String> {
    let n = w.requests;
    if n == 0 {
        Some("no complete arm".to_string())
    } else if w.declined > 0 {
        Some(format!(
            "{} of {n} requests declined to classic decoding ({})",
            w.declined,
            w.first_decline.unwrap_or_default()
        ))
    } else if w.without_diagnostics > 0 {
        Some(format!("{} of {n} requests have no speculative diagnostics", w.without_diagnostics))
    } else if w.zero_round_requests == n {
        Some(format!("every one of its {n} requests ran zero speculative rounds"))
    } else if w.invalid_rate_requests > 0 {
        Some(format!(
            "{} of {n} requests have a missing, non-finite or implausible (outside {:.0e}..={:.0e} tok/s, or not \
             its own counts and times) {}",
            w.invalid_rate_requests,
            crate::analysis::summary::MIN_PLAUSIBLE_TOK_PER_S,
            crate::analysis::summary::MAX_PLAUSIBLE_TOK_PER_S,
            if served { "end-to-end rate" } else { "decode rate (no token after the first, or a bad time)" }
        ))
    } else {
        None
    }
}

/// A round's drift verdict, from its drift test (`None`: a bracket side is missing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundVerdict {
    /// The drift lies credibly beyond the tolerance ([`crate::analysis::estimate::DRIFT_TOLERANCE`]).
    pub drifted: bool,
    /// The test could be run: both its standard errors were estimable.
    pub judgeable: bool,
    /// A bracket side is missing (the round did not finish).
    pub incomplete: bool,
}

pub fn round_verdict(test: Option<&DriftTest>) -> RoundVerdict {
    RoundVerdict {
        drifted: test.is_some_and(|t| t.drifted),
        judgeable: test.is_some_and(|t| t.se_log.is_some() && t.se_process_log.is_some()),
        incomplete: test.is_none(),
    }
}

/// How a classic arm speculated, if it did (`drafter: source of the
/// width`). A classic arm must decode classically: a runtime whose policy
/// turned speculation on would not be the baseline.
pub fn classic_arm_speculated(st: &Startup) -> Option<String> {
    (st.drafter != "none").then(|| format!("{}: {}", st.drafter, st.width_from))
}

/// The arm forfeited exactness (`allow_inexact`) or failed its
/// block-vs-chain probe: its outputs prove nothing about exactness.
pub fn ran_inexact(st: &Startup) -> bool {
    st.allow_inexact || st.exactness_probe.as_ref().is_some_and(|p| !p.passed)
}
