//! The host step: what the gate and the during-arm watch say of the
//! complete arms (gate sources accepted as unknown, arms re-run for
//! contention, arms watched too little to judge).
use crate::analysis::summary::{AcceptedUnknown, ContentionRerun, OkArms};
use crate::data::raw::{RawFile, RawLine};

pub(super) struct Host {
    pub accepted_unknown: Vec<AcceptedUnknown>,
    pub contention_reruns: Vec<ContentionRerun>,
    pub during_arm_samples: usize,
    pub unwatched_arms: Vec<usize>,
}

pub(super) fn host(raw: &RawFile, ok_arms: &OkArms<'_>) -> Host {
    let mut accepted_unknown = Vec::new();
    let mut contention_reruns = Vec::new();
    for l in &raw.lines {
        match l {
            RawLine::ArmStart(s)
                if ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
                    && !s.gate.report.verdict.accepted_unknown.is_empty() =>
            {
                accepted_unknown.push(AcceptedUnknown {
                    arm: s.arm,
                    sources: s.gate.report.verdict.accepted_unknown.iter().map(|a| a.source).collect(),
                });
            }
            RawLine::ArmEnd(e) => {
                if let Some(c) = &e.contention
                    && c.contended()
                {
                    contention_reruns.push(ContentionRerun {
                        arm: e.arm,
                        attempt: e.attempt,
                        samples: c.samples,
                        contended_samples: c.contended_samples,
                        reasons: c.reasons.clone(),
                    });
                }
            }
            _ => {}
        }
    }
    let during_arm_samples = ok_arms.values().filter_map(|(_, e)| e.contention.as_ref()).map(|c| c.samples).sum();
    let unwatched_arms: Vec<usize> = ok_arms
        .iter()
        .filter(|(_, (_, e))| {
            e.contention.as_ref().is_none_or(|c| c.samples < crate::host::gate::during::MIN_IN_ARM_READINGS)
        })
        .map(|(a, _)| *a)
        .collect();
    Host { accepted_unknown, contention_reruns, during_arm_samples, unwatched_arms }
}
