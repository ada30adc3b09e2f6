//! CPU contention: is anything other than the tuner and its children using
//! CPU now?
//!
//! Two readings over the same window:
//! - per process: each process's share of one core (sysinfo, two refreshes
//!   `window` apart); a process at or over the threshold is named.
//! - host: busy percent of all CPUs from `/proc/stat` deltas. Short-lived
//!   processes (a build's compiler jobs, each alive for less than the window)
//!   are invisible to the per-process sampling, and so is hypervisor steal;
//!   host busy minus the tuner's own share catches both.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::process::ProcessEntry;
use super::verdict::{Check, Source, Status, unknown_reason};
use crate::host::reading::Reading;

/// Host-wide CPU over the window, from `/proc/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    /// Busy share of all CPUs, 0–100 (steal counts as busy).
    pub busy_pct: f64,
    pub n_cpus: usize,
}

/// What the CPU check is computed from.
#[derive(Clone, Debug)]
pub struct CpuInput {
    /// The sampled process list, or why it could not be read.
    pub processes: Result<Vec<ProcessEntry>, String>,
    pub host: Reading<HostCpu>,
    pub window_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offender {
    pub pid: u32,
    pub name: String,
    /// Share of one core over the window, percent.
    pub cpu_pct: f64,
    pub over_threshold: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCpuReading {
    pub busy_pct: f64,
    pub n_cpus: usize,
    /// Busy time of all CPUs in percent of one core (busy_pct × n_cpus).
    pub busy_core_pct: f64,
    /// `busy_core_pct` less the tuner's and its descendants' share: CPU used
    /// by anything else, including processes too short-lived to sample.
    pub not_ours_core_pct: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuReading {
    pub window_ms: u64,
    /// Per process, percent of one core.
    pub threshold_pct: f64,
    /// Host-wide CPU not ours, percent of one core.
    pub host_threshold_pct: f64,
    pub host: Reading<HostCpuReading>,
    pub n_processes: usize,
    /// The tuner and its descendants, left out of the check.
    pub excluded_pids: Vec<u32>,
    /// The busiest non-excluded processes, busiest first (at most `top_n`
    /// with a non-zero share, plus every one over the threshold).
    pub top: Vec<Offender>,
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn evaluate(
    input: &CpuInput,
    threshold_pct: f64,
    host_threshold_pct: f64,
    top_n: usize,
    excluded: &BTreeSet<u32>,
) -> Check<CpuReading> {
    let procs = match &input.processes {
        Ok(p) => p,
        Err(why) => return Check::unknown(Source::Cpu, why.clone()),
    };
    let mut others: Vec<&ProcessEntry> = procs.iter().filter(|p| !excluded.contains(&p.pid)).collect();
    others.sort_by(|a, b| b.cpu_pct.total_cmp(&a.cpu_pct).then(a.pid.cmp(&b.pid)));
    let top: Vec<Offender> = others
        .iter()
        .enumerate()
        .take_while(|(i, p)| *i < top_n || p.cpu_pct >= threshold_pct)
        .filter(|(_, p)| p.cpu_pct > 0.0)
        .map(|(_, p)| Offender {
            pid: p.pid,
            name: p.name.clone(),
            cpu_pct: round1(p.cpu_pct),
            over_threshold: p.cpu_pct >= threshold_pct,
        })
        .collect();
    let mut reasons: Vec<String> = top
        .iter()
        .filter(|o| o.over_threshold)
        .map(|o| {
            format!(
                "cpu: pid {} ({}) used {:.1}% of a core over {} ms (threshold {threshold_pct}%); \
                 wait for it to finish, or raise `--cpu-threshold`",
                o.pid, o.name, o.cpu_pct, input.window_ms
            )
        })
        .collect();
    let ours_pct: f64 = procs.iter().filter(|p| excluded.contains(&p.pid)).map(|p| p.cpu_pct).sum();
    let host = input.host.clone().map(|h| {
        let busy_core_pct = h.busy_pct * h.n_cpus as f64;
        HostCpuReading {
            busy_pct: round1(h.busy_pct),
            n_cpus: h.n_cpus,
            busy_core_pct: round1(busy_core_pct),
            not_ours_core_pct: round1((busy_core_pct - ours_pct).max(0.0)),
        }
    });
    let mut status = if reasons.is_empty() { Status::Pass } else { Status::Wait };
    match &host.value {
        // Only when no single process explains the load: then the reason
        // "not attributable to one process" is accurate.
        Some(h) if reasons.is_empty() && h.not_ours_core_pct >= host_threshold_pct => {
            status = Status::Wait;
            reasons.push(format!(
                "cpu: the host was {:.1}% busy over {} ms ({:.1}% of one core not this tuner's) \
                 with no single process over {threshold_pct}%: short-lived processes (a build?) \
                 or hypervisor steal (threshold {host_threshold_pct}% of one core); wait, or \
                 raise `--host-cpu-threshold`",
                h.busy_pct, input.window_ms, h.not_ours_core_pct
            ));
        }
        Some(_) => {}
        None if status == Status::Pass => {
            status = Status::Unknown;
            reasons.push(unknown_reason(Source::Cpu, &format!("host CPU busy: {}", host.reason())));
        }
        None => {}
    }
    let mut excluded_pids: Vec<u32> = procs.iter().map(|p| p.pid).filter(|p| excluded.contains(p)).collect();
    excluded_pids.sort();
    let reading = CpuReading {
        window_ms: input.window_ms,
        threshold_pct,
        host_threshold_pct,
        host,
        n_processes: procs.len(),
        excluded_pids,
        top,
    };
    Check { status, reasons, reading: Reading::ok(reading) }
}

#[cfg(test)]
mod tests {
    use super::super::process::entry;
    use super::*;

    fn quiet_host() -> Reading<HostCpu> {
        Reading::ok(HostCpu { busy_pct: 2.0, n_cpus: 2 })
    }

    fn input(ps: Vec<ProcessEntry>) -> CpuInput {
        CpuInput { processes: Ok(ps), host: quiet_host(), window_ms: 1000 }
    }

    #[test]
    fn a_busy_foreign_process_waits_and_is_named_by_pid_and_share() {
        let ps = vec![entry(1, 0, "init", &[], 0.1), entry(777, 1, "sh", &["sh", "-c"], 99.4)];
        let c = evaluate(&input(ps), 20.0, 50.0, 5, &BTreeSet::from([500]));
        assert_eq!(c.status, Status::Wait);
        assert!(c.reasons[0].contains("pid 777 (sh) used 99.4%"), "{:?}", c.reasons);
        let top = &c.reading.value.unwrap().top;
        assert_eq!(top[0].pid, 777);
        assert!(top[0].over_threshold);
    }

    #[test]
    fn the_tuner_and_its_children_are_not_contention() {
        let ps = vec![entry(500, 1, "tuner", &[], 100.0), entry(501, 500, "runtime", &[], 180.0)];
        let excluded = super::super::process::descendants_of(&ps, &[500]);
        let mut i = input(ps);
        // The host is busy, but all of it is ours.
        i.host = Reading::ok(HostCpu { busy_pct: 70.0, n_cpus: 4 });
        let c = evaluate(&i, 20.0, 50.0, 5, &excluded);
        assert_eq!(c.status, Status::Pass, "{:?}", c.reasons);
        let r = c.reading.value.unwrap();
        assert_eq!(r.excluded_pids, vec![500, 501]);
        assert_eq!(r.host.value.unwrap().not_ours_core_pct, 0.0);
    }

    #[test]
    fn below_threshold_passes_and_top_offenders_are_still_reported() {
        let ps = vec![entry(2, 1, "kworker", &[], 2.0), entry(3, 1, "python", &[], 19.9)];
        let c = evaluate(&input(ps), 20.0, 50.0, 5, &BTreeSet::new());
        assert_eq!(c.status, Status::Pass);
        let top = c.reading.value.unwrap().top;
        assert_eq!(top.iter().map(|o| o.pid).collect::<Vec<_>>(), vec![3, 2]);
    }

    #[test]
    fn a_busy_host_with_no_visible_offender_waits_on_the_host_reading() {
        // A build's short-lived compiler jobs: /proc/stat saw them, the
        // per-process sample did not.
        let ps = vec![entry(2, 1, "make", &[], 1.0)];
        let mut i = input(ps);
        i.host = Reading::ok(HostCpu { busy_pct: 100.0, n_cpus: 2 });
        let c = evaluate(&i, 20.0, 50.0, 5, &BTreeSet::new());
        assert_eq!(c.status, Status::Wait);
        assert!(c.reasons[0].contains("--host-cpu-threshold"), "{:?}", c.reasons);
    }

    #[test]
    fn an_unreadable_process_list_is_unknown_not_idle() {
        let i = CpuInput {
            processes: Err("/proc not mounted".into()),
            host: Reading::unavailable("/proc/stat unreadable"),
            window_ms: 1000,
        };
        let c = evaluate(&i, 20.0, 50.0, 5, &BTreeSet::new());
        assert_eq!(c.status, Status::Unknown);
        assert!(c.reasons[0].contains("--accept-unknown cpu"), "{:?}", c.reasons);
        assert!(c.reading.value.is_none());
    }

    #[test]
    fn an_unreadable_host_reading_is_unknown_even_with_a_quiet_process_list() {
        let mut i = input(vec![entry(2, 1, "kworker", &[], 0.5)]);
        i.host = Reading::unavailable("cannot read /proc/stat: Permission denied");
        let c = evaluate(&i, 20.0, 50.0, 5, &BTreeSet::new());
        assert_eq!(c.status, Status::Unknown);
        assert!(c.reasons[0].contains("/proc/stat"), "{:?}", c.reasons);
    }
}
