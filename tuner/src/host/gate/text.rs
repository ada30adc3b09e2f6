//! The gate's report as text, for `tuner gate` (the JSON form is the
//! report itself, serialised).
use std::fmt::Write;

use super::{GateRun, Status};

/// The gate's verdict as `tuner gate` prints it: the decision, how it was
/// reached, a line per source with its reading, the reasons and the
/// sources accepted as unknown.
pub fn report_text(run: &GateRun) -> String {
    let mut out = String::new();
    let r = &run.report;
    let d = run.decision.word().to_ascii_uppercase();
    let how = if run.timed_out {
        format!(" (gave up after {} checks, {:.1} s: --wait ran out)", run.attempts, run.waited_ms as f64 / 1e3)
    } else if run.attempts > 1 {
        format!(" (after {} checks, {:.1} s)", run.attempts, run.waited_ms as f64 / 1e3)
    } else {
        String::new()
    };
    let _ = writeln!(out, "gate: {d}{how}");
    let c = &r.checks;
    let cpu = c.cpu.reading.value.as_ref().map_or_else(
        || c.cpu.reading.reason().to_string(),
        |v| {
            let top: Vec<String> =
                v.top.iter().take(3).map(|o| format!("{} pid {} {:.1}%", o.name, o.pid, o.cpu_pct)).collect();
            let busy = v.host.value.as_ref().map_or("?".into(), |h| {
                format!("{:.1}% of {} CPUs ({:.1}% of a core not ours)", h.busy_pct, h.n_cpus, h.not_ours_core_pct)
            });
            let top = if top.is_empty() { "none above 0%".to_string() } else { top.join(", ") };
            format!("host busy {busy} over {} ms; busiest: {top}", v.window_ms)
        },
    );
    let foreign = c.foreign.reading.value.as_ref().map_or_else(
        || c.foreign.reading.reason().to_string(),
        |v| {
            format!(
                "{} processes, {} python file lists read, {} model process(es) found",
                v.n_processes,
                v.n_files_scanned,
                v.found.len()
            )
        },
    );
    let gpu = c.gpu.reading.value.as_ref().map_or_else(
        || c.gpu.reading.reason().to_string(),
        |v| {
            if v.devices.is_empty() {
                v.evidence.clone()
            } else {
                format!("{} device(s), driver {}", v.devices.len(), v.driver_version.value.as_deref().unwrap_or("?"))
            }
        },
    );
    let nvrm = c.nvrm.reading.value.as_ref().map_or_else(
        || c.nvrm.reading.reason().to_string(),
        |v| match v.cumulative {
            Some(n) => format!(
                "{}{n} since boot, {} in the last {} s; {}",
                if v.cumulative_is_lower_bound { ">= " } else { "" },
                v.recent.map_or("?".into(), |x| x.to_string()),
                v.window_s,
                v.note
            ),
            None => v.note.clone(),
        },
    );
    let memory = c.memory.reading.value.as_ref().map_or_else(
        || c.memory.reading.reason().to_string(),
        |v| format!("{} MiB available (floor {} MiB)", v.available_mib, v.min_available_mib),
    );
    for (name, status, line) in [
        ("cpu", c.cpu.status, cpu),
        ("foreign", c.foreign.status, foreign),
        ("gpu", c.gpu.status, gpu),
        ("nvrm", c.nvrm.status, nvrm),
        ("memory", c.memory.status, memory),
    ] {
        let _ = writeln!(out, "  {name:<8} {:<8} {line}", Status::word(status));
    }
    if !r.verdict.reasons.is_empty() {
        out.push_str("reasons:\n");
        for x in &r.verdict.reasons {
            let _ = writeln!(out, "  - {}", x.text);
        }
    }
    for x in &r.verdict.accepted_unknown {
        let _ = writeln!(out, "accepted unknown (not checked): {}: {}", x.source.name(), x.reasons.join("; "));
    }
    out
}
