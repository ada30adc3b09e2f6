//! One sampled view of the host's processes, shared by the CPU and the
//! foreign-model checks, and the set of processes that are "us".
//!
//! CPU shares come from two sysinfo refreshes `window` apart, so they are the
//! use *now*, not the lifetime average `ps` prints.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};

/// Longest command line kept per process (arguments beyond are dropped).
pub const MAX_CMDLINE_ARGS: usize = 256;

/// A process as the checks see it. Built from sysinfo on a live host, or
/// written out in a test.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessEntry {
    pub pid: u32,
    pub ppid: Option<u32>,
    /// The kernel's `comm` (at most 15 bytes on Linux).
    pub name: String,
    /// Full path of the executable when readable.
    pub exe: Option<String>,
    pub cmdline: Vec<String>,
    /// Share of one core over the sampling window, in percent (may exceed
    /// 100 for a multi-threaded process).
    pub cpu_pct: f64,
}

/// `roots` and every process whose parent chain reaches one of them.
/// Chains are followed at most `pairs.len()` steps, so a pid cycle (pid reuse
/// racing the snapshot) cannot loop.
pub fn descendants_of(entries: &[ProcessEntry], roots: &[u32]) -> BTreeSet<u32> {
    let parent: BTreeMap<u32, u32> = entries.iter().filter_map(|e| e.ppid.map(|pp| (e.pid, pp))).collect();
    let roots: BTreeSet<u32> = roots.iter().copied().collect();
    let mut out = roots.clone();
    for e in entries {
        let mut cur = e.pid;
        for _ in 0..=entries.len() {
            if roots.contains(&cur) {
                out.insert(e.pid);
                break;
            }
            match parent.get(&cur) {
                Some(&p) if p != cur => cur = p,
                _ => break,
            }
        }
    }
    out
}

/// Samples every process's CPU share over `window` (at least sysinfo's
/// minimum update interval). Threads are not listed separately: a process's
/// share already includes its threads.
pub fn sample(window: Duration) -> Result<Vec<ProcessEntry>, String> {
    let window = window.max(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
    let mut sys = System::new().map_err(|e| format!("sysinfo: {e}"))?;
    let kind = ProcessRefreshKind::nothing()
        .with_cpu()
        .with_cmd(UpdateKind::OnlyIfNotSet)
        .with_exe(UpdateKind::OnlyIfNotSet)
        .without_tasks();
    sys.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
    std::thread::sleep(window);
    sys.refresh_processes_specifics(ProcessesToUpdate::All, true, kind);
    let own = std::process::id();
    let entries: Vec<ProcessEntry> = sys
        .processes()
        .values()
        .filter(|p| p.thread_kind().is_none())
        .map(|p| ProcessEntry {
            pid: p.pid().as_u32(),
            ppid: p.parent().map(|pp| pp.as_u32()),
            name: p.name().to_string_lossy().into_owned(),
            exe: p.exe().map(|e| e.to_string_lossy().into_owned()),
            cmdline: p.cmd().iter().take(MAX_CMDLINE_ARGS).map(|a| a.to_string_lossy().into_owned()).collect(),
            cpu_pct: f64::from(p.cpu_usage()),
        })
        .collect();
    // We are running, so an empty list or one without us means /proc was
    // not readable, not that the host is idle.
    if !entries.iter().any(|e| e.pid == own) {
        return Err(format!(
            "the process list ({} entries) does not include this process (pid {own}): /proc is not readable",
            entries.len()
        ));
    }
    Ok(entries)
}

#[cfg(test)]
pub(crate) fn entry(pid: u32, ppid: u32, name: &str, cmdline: &[&str], cpu_pct: f64) -> ProcessEntry {
    ProcessEntry {
        pid,
        ppid: Some(ppid),
        name: name.to_string(),
        exe: None,
        cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
        cpu_pct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_include_grandchildren_but_not_siblings_or_ancestors() {
        let ps = vec![
            entry(1, 0, "init", &[], 0.0),
            entry(10, 1, "shell", &[], 0.0),
            entry(20, 10, "tuner", &[], 0.0),
            entry(30, 20, "runtime", &[], 0.0),
            entry(40, 30, "worker", &[], 0.0),
            entry(50, 10, "sibling", &[], 0.0),
        ];
        let d = descendants_of(&ps, &[20]);
        assert_eq!(d, BTreeSet::from([20, 30, 40]));
    }

    #[test]
    fn a_parent_cycle_does_not_hang_the_walk() {
        let ps = vec![entry(5, 6, "a", &[], 0.0), entry(6, 5, "b", &[], 0.0)];
        assert_eq!(descendants_of(&ps, &[99]), BTreeSet::from([99]));
    }

    #[test]
    fn a_live_sample_includes_this_process() {
        let ps = sample(Duration::from_millis(250)).unwrap();
        assert!(ps.iter().any(|p| p.pid == std::process::id()));
    }
}
