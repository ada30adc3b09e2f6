//! How per-source results combine into one verdict, and how an unknown
//! source is accepted.
//!
//! Policy (fail closed):
//! - any `halt` → **halt**: the host must not be measured until an operator
//!   acts (today: the driver's `NV_ERR_NO_MEMORY` budget is spent).
//! - else any `wait`, or any `unknown` that was not accepted → **wait**.
//!   An unknown is a wait, not a halt, because several sources are unknown
//!   only transiently (a process list racing exits, journald restarting);
//!   re-checking is cheap, and `--wait` gives up with the reasons after its
//!   timeout. It is never a pass.
//! - else **pass**. Unknown sources the operator accepted with
//!   `--accept-unknown SOURCE` are listed in `accepted_unknown`, with the
//!   reason they were unknown, so the record shows what was not checked.
use serde::{Deserialize, Serialize};

use crate::host::reading::Reading;

/// A gate source, as named on the command line (`--accept-unknown nvrm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Processes using CPU now.
    Cpu,
    /// Other model processes (inference engines, another runtime).
    Foreign,
    /// NVIDIA GPUs through NVML.
    Gpu,
    /// The driver's NV_ERR_NO_MEMORY count in the kernel log.
    Nvrm,
    /// MemAvailable.
    Memory,
}

impl Source {
    pub const ALL: [Source; 5] = [Source::Cpu, Source::Foreign, Source::Gpu, Source::Nvrm, Source::Memory];

    pub fn name(self) -> &'static str {
        match self {
            Source::Cpu => "cpu",
            Source::Foreign => "foreign",
            Source::Gpu => "gpu",
            Source::Nvrm => "nvrm",
            Source::Memory => "memory",
        }
    }
}

/// One source's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Wait,
    Halt,
    /// The source could not be read; blocks unless accepted.
    Unknown,
}

impl Status {
    /// The status as the reports print it (its serialised name).
    pub fn word(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Wait => "wait",
            Status::Halt => "halt",
            Status::Unknown => "unknown",
        }
    }
}

/// One source's result, its reasons, and what was read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check<R> {
    pub status: Status,
    /// Why the status is not `pass` (empty when it is). Each reason says how
    /// to clear it.
    pub reasons: Vec<String>,
    pub reading: Reading<R>,
}

impl<R> Check<R> {
    pub fn pass(reading: R) -> Self {
        Check { status: Status::Pass, reasons: Vec::new(), reading: Reading::ok(reading) }
    }

    /// The source could not be read at all.
    pub fn unknown(source: Source, why: impl Into<String>) -> Self {
        let why = why.into();
        Check {
            status: Status::Unknown,
            reasons: vec![unknown_reason(source, &why)],
            reading: Reading::unavailable(why),
        }
    }
}

/// The text of an unknown source's reason, naming the flag that accepts it.
pub fn unknown_reason(source: Source, why: &str) -> String {
    format!(
        "{} unknown: {why}; fix the source, or pass `--accept-unknown {}` to measure without it",
        source.name(),
        source.name()
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Pass,
    Wait,
    Halt,
}

impl Decision {
    /// The decision as the reports print it (its serialised name; `tuner
    /// gate`'s headline upper-cases it).
    pub fn word(self) -> &'static str {
        match self {
            Decision::Pass => "pass",
            Decision::Wait => "wait",
            Decision::Halt => "halt",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub source: Source,
    pub status: Status,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcceptedUnknown {
    pub source: Source,
    /// Why the source was unknown when it was accepted.
    pub reasons: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    /// Every blocking reason (halt, wait and unaccepted unknown), in source order.
    pub reasons: Vec<Reason>,
    /// What `--accept-unknown` asked for.
    pub accept_unknown_requested: Vec<Source>,
    /// The accepted sources that were in fact unknown on this check: these
    /// were not checked, and the verdict passed anyway.
    pub accepted_unknown: Vec<AcceptedUnknown>,
}

/// Combines per-source results. `results` is (source, status, reasons).
pub fn decide(results: &[(Source, Status, &[String])], accept: &[Source]) -> Verdict {
    let mut reasons = Vec::new();
    let mut accepted_unknown = Vec::new();
    let (mut halt, mut wait) = (false, false);
    for &(source, status, texts) in results {
        let blocking = match status {
            Status::Pass => false,
            Status::Halt => {
                halt = true;
                true
            }
            Status::Wait => {
                wait = true;
                true
            }
            Status::Unknown if accept.contains(&source) => {
                accepted_unknown.push(AcceptedUnknown { source, reasons: texts.to_vec() });
                false
            }
            Status::Unknown => {
                wait = true;
                true
            }
        };
        if blocking {
            reasons.extend(texts.iter().map(|t| Reason { source, status, text: t.clone() }));
        }
    }
    let decision = if halt {
        Decision::Halt
    } else if wait {
        Decision::Wait
    } else {
        Decision::Pass
    };
    let mut requested = accept.to_vec();
    requested.sort();
    requested.dedup();
    Verdict { decision, reasons, accept_unknown_requested: requested, accepted_unknown }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn an_unaccepted_unknown_waits_and_an_accepted_one_passes_on_record() {
        let why = r("nvrm unknown: no log");
        let v = decide(&[(Source::Nvrm, Status::Unknown, &why)], &[]);
        assert_eq!(v.decision, Decision::Wait);
        assert_eq!(v.reasons[0].source, Source::Nvrm);
        let v = decide(&[(Source::Nvrm, Status::Unknown, &why)], &[Source::Nvrm]);
        assert_eq!(v.decision, Decision::Pass);
        assert_eq!(v.accepted_unknown, vec![AcceptedUnknown { source: Source::Nvrm, reasons: why.clone() }]);
        assert_eq!(v.accept_unknown_requested, vec![Source::Nvrm]);
    }

    #[test]
    fn accepting_one_source_does_not_accept_another() {
        let why = r("x");
        let v = decide(&[(Source::Memory, Status::Unknown, &why)], &[Source::Cpu]);
        assert_eq!(v.decision, Decision::Wait);
        assert!(v.accepted_unknown.is_empty());
    }

    #[test]
    fn halt_wins_over_wait_and_acceptance_never_clears_a_wait() {
        let w = r("busy");
        let h = r("budget");
        let v =
            decide(&[(Source::Cpu, Status::Wait, &w), (Source::Nvrm, Status::Halt, &h)], &[Source::Cpu, Source::Nvrm]);
        assert_eq!(v.decision, Decision::Halt);
        assert_eq!(v.reasons.len(), 2);
    }
}
