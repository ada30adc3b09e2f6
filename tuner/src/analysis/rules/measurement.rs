//! Measurement rules over a summarized record: is it complete, of one key,
//! of clean raw data, of two or more rounds, free of drift, exact, fully
//! gated, and is every width a measurement? [`check`] applies them in the
//! order a reader should fix them.
use super::Refusal;
use crate::analysis::summary::Summary;

/// Checks every refusal condition on the measurement itself; `Ok` means the
/// record's numbers may become an entry ([`check_provenance`] checks the build).
pub fn check(s: &Summary) -> Result<(), Refusal> {
    if !s.complete {
        let why = s.halt.as_ref().map_or_else(
            || format!("{} of {} arms complete", s.arms_complete, s.arms_planned),
            |h| format!("halted before arm {}: {}", h.arm, h.message),
        );
        return Err(Refusal::Incomplete(why));
    }
    if let Some(k) = &s.key_problem {
        return Err(Refusal::Key(k.clone()));
    }
    if let Some(d) = s.data_problems.first() {
        let at = match (d.line, d.arm) {
            (Some(l), _) => format!("raw.jsonl:{l}: "),
            (None, Some(a)) => format!("arm {a}: "),
            _ => String::new(),
        };
        return Err(Refusal::DataProblems(format!(
            "{} problem(s); first: {at}{}; {}",
            s.data_problems.len(),
            d.what,
            d.remedy
        )));
    }
    if s.complete_rounds < 2 {
        return Err(Refusal::TooFewRounds(s.complete_rounds));
    }
    if s.drift && !s.drift_survival.as_ref().is_some_and(|d| d.survives) {
        let mut r: Vec<String> =
            s.rounds.iter().filter(|r| r.drifted).map(|r| format!("round {}", r.round + 1)).collect();
        if let Some(d) = s.sweep_drift.as_ref().filter(|d| d.drifted) {
            r.push(format!(
                "the sweep as a whole (closing sides {:.3} [{:.3}, {:.3}] of the opening sides over {} rounds)",
                d.drift, d.interval.0, d.interval.1, d.rounds
            ));
        }
        let survival = s.drift_survival.as_ref().map_or_else(
            || "the decision could not be tried against either bracket alone".to_string(),
            |d| format!("the decision does not survive it: {}", d.say()),
        );
        return Err(Refusal::Drift(format!("{}; {survival}", r.join("; "))));
    }
    if s.drift_unjudged {
        let r: Vec<String> =
            s.rounds.iter().filter(|r| !r.incomplete && !r.judgeable).map(|r| (r.round + 1).to_string()).collect();
        return Err(Refusal::DriftUnjudged(r.join(", ")));
    }
    if !s.identical || !s.inexact_arms.is_empty() {
        let n: usize = s.widths.iter().map(|w| w.differences.len()).sum();
        let mut why = format!("{n} speculative and {} classic request(s) differ", s.bracket_differences.len());
        if let Some(d) = s.widths.iter().flat_map(|w| &w.differences).next() {
            why.push_str(&format!(
                "; first: width {} prompt {} at token {}",
                d.width.map_or("classic".into(), |w| w.to_string()),
                d.prompt_id,
                d.first_differing_token
            ));
        }
        if !s.inexact_arms.is_empty() {
            why.push_str(&format!("; arms {:?} ran inexact (allow_inexact or a failed probe)", s.inexact_arms));
        }
        return Err(Refusal::Inexact(why));
    }
    if !s.accepted_unknown.is_empty() {
        let a: Vec<String> = s.accepted_unknown.iter().map(|a| format!("{} ({})", a.arm, a.source_names())).collect();
        return Err(Refusal::AcceptedUnknown(a.join(", ")));
    }
    if let Some(w) = s.decision.width
        && let Some(why) = s.widths.iter().find(|x| x.width == w).and_then(|x| x.not_a_measurement.clone())
    {
        return Err(Refusal::NotAMeasurement { width: w, why });
    }
    if s.decision.ratio.is_none() {
        return Err(Refusal::NoDecision(s.decision.why.clone()));
    }
    let bad: Vec<String> = s
        .widths
        .iter()
        .filter_map(|w| w.not_a_measurement.as_ref().map(|why| format!("{} ({why})", w.width)))
        .collect();
    if !bad.is_empty() {
        return Err(if s.decision.width.is_none() {
            Refusal::OffWithoutMeasurements(bad.join("; "))
        } else {
            Refusal::WidthsNotMeasured(bad.join("; "))
        });
    }
    Ok(())
}
