//! Whether a sweep's plan could carry its decision, judged from the record:
//! a chosen width at the edge of the measured range says nothing about the
//! widths past it, and a gate looser than the defaults measured through
//! more contention than the defaults allow.
use super::Refusal;
use crate::analysis::summary::Summary;
use crate::data::plan::SpeculativeArm;
use crate::host::gate::GateConfig;

/// Refuses a decision for the widest width the sweep measured when that
/// width is not the largest a width may be: the best width may lie past the
/// range, so the record cannot tell.
pub fn check_range(s: &Summary, widths: &[SpeculativeArm]) -> Result<(), Refusal> {
    let Some(chosen) = s.decision.width else { return Ok(()) };
    let widest = widths.iter().copied().max().unwrap_or(chosen);
    if chosen == widest && widest.code() < policy::MAX_WIDTH && widths.len() > 1 {
        return Err(Refusal::WidestWidth { width: chosen, widths: widths.to_vec() });
    }
    Ok(())
}

/// Refuses a record whose sweep drift test cannot flag a systematic
/// [`crate::analysis::estimate::DRIFT_TO_DETECT`] drift with the stated power at its
/// measured spread (or has no such test: fewer than one judgeable round).
pub fn check_drift_power(s: &Summary, bracket_arms: usize) -> Result<(), Refusal> {
    let needed = s.bracket_arms_to_detect.map_or("N".to_string(), |m| {
        if m > crate::data::plan::MAX_BRACKET_ARMS {
            format!("{} (more than the maximum {}: add rounds)", m, crate::data::plan::MAX_BRACKET_ARMS)
        } else {
            m.to_string()
        }
    });
    match &s.sweep_drift {
        Some(d) if d.detectable <= crate::analysis::estimate::DRIFT_TO_DETECT => Ok(()),
        Some(d) => Err(Refusal::WeakDriftTest { detectable: d.detectable, bracket_arms, rounds: d.rounds, needed }),
        None => Err(Refusal::WeakDriftTest { detectable: 1.0, bracket_arms, rounds: 0, needed }),
    }
}

/// Refuses a record with an arm the gate read fewer than
/// [`crate::host::gate::during::MIN_IN_ARM_READINGS`] times while it ran.
pub fn check_watched(s: &Summary) -> Result<(), Refusal> {
    if s.unwatched_arms.is_empty() {
        return Ok(());
    }
    let arms: Vec<String> = s.unwatched_arms.iter().map(usize::to_string).collect();
    Err(Refusal::Unwatched { arms: arms.join(", ") })
}

/// Both plan checks above; with `allowed`, their refusals become the
/// returned overrides (for the warning and the entry's note).
pub fn check_plan(s: &Summary, bracket_arms: usize, allowed: bool) -> Result<Vec<String>, Refusal> {
    let mut out = Vec::new();
    for r in [check_watched(s), check_drift_power(s, bracket_arms)] {
        match r {
            Ok(()) => {}
            Err(e) if allowed => out.push(format!("--allow-weak-plan: {e}")),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Every gate threshold of `g` looser than the default's, in words
/// (empty: the gate was at least as strict as the default on every source).
pub fn looser_gate(g: &GateConfig) -> Vec<String> {
    let d = GateConfig::default();
    let mut out = Vec::new();
    if g.cpu_threshold_pct > d.cpu_threshold_pct {
        out.push(format!("--cpu-threshold {} (default {})", g.cpu_threshold_pct, d.cpu_threshold_pct));
    }
    if g.host_cpu_threshold_pct > d.host_cpu_threshold_pct {
        out.push(format!("--host-cpu-threshold {} (default {})", g.host_cpu_threshold_pct, d.host_cpu_threshold_pct));
    }
    if g.min_available_mib < d.min_available_mib {
        out.push(format!("--min-available-mib {} (default {})", g.min_available_mib, d.min_available_mib));
    }
    if g.nvrm_budget > d.nvrm_budget {
        out.push(format!("--nvrm-budget {} (default {})", g.nvrm_budget, d.nvrm_budget));
    }
    if g.gpu_util_threshold_pct > d.gpu_util_threshold_pct {
        out.push(format!(
            "GPU utilization threshold {}% (default {}%)",
            g.gpu_util_threshold_pct, d.gpu_util_threshold_pct
        ));
    }
    if g.gpu_min_free_mib < d.gpu_min_free_mib {
        out.push(format!("GPU free memory {} MiB (default {} MiB)", g.gpu_min_free_mib, d.gpu_min_free_mib));
    }
    if !g.accept_unknown.is_empty() {
        out.push(format!("--accept-unknown {:?}", g.accept_unknown));
    }
    out
}

/// Refuses a record swept with a gate looser than the defaults unless
/// `allowed`; `Ok(Some(..))` is the overridden refusal, for the warning
/// and the entry's note.
pub fn check_gate(g: &GateConfig, allowed: bool) -> Result<Option<String>, Refusal> {
    let loose = looser_gate(g);
    if loose.is_empty() {
        return Ok(None);
    }
    let r = Refusal::LooserGate(loose.join(", "));
    if allowed { Ok(Some(format!("--allow-loose-gate: {r}"))) } else { Err(r) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_looser_threshold_is_named_and_a_stricter_one_is_not() {
        assert!(looser_gate(&GateConfig::default()).is_empty());
        let strict = GateConfig { host_cpu_threshold_pct: 10.0, min_available_mib: 8192, ..GateConfig::default() };
        assert!(looser_gate(&strict).is_empty());
        let loose = GateConfig { host_cpu_threshold_pct: 90.0, min_available_mib: 512, ..GateConfig::default() };
        let l = looser_gate(&loose);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].contains("--host-cpu-threshold 90") && l[1].contains("--min-available-mib 512"), "{l:?}");
        assert!(matches!(check_gate(&loose, false), Err(Refusal::LooserGate(_))));
        assert!(check_gate(&loose, true).unwrap().unwrap().starts_with("--allow-loose-gate: "));
        assert_eq!(check_gate(&GateConfig::default(), false).unwrap(), None);
    }
}
