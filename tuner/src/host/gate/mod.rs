//! The host gate: is this host fit to measure on, now?
//!
//! Five sources, each read, judged and reported with its reading:
//! [`cpu`] (processes using CPU now), [`foreign`] (other model processes),
//! [`gpu`] (NVIDIA devices through NVML), [`nvrm`] (the driver's
//! `NV_ERR_NO_MEMORY` count in the kernel log) and [`memory`]
//! (`MemAvailable`). [`verdict`] combines them: pass, wait or halt, failing
//! closed on sources that cannot be read.
//!
//! Principal types: [`GateConfig`] (thresholds), [`GateInputs`] (everything
//! read from the host, as plain data: tests build it by hand), [`GateReport`]
//! (the serialisable result, embedded verbatim in sweep raw data), and
//! [`Gate`] (keeps what one check must remember for the next, for `--wait`
//! and for a sweep that gates before every arm).
//!
//! Library use: `gate::check(&GateConfig::default())` → [`GateReport`].
pub mod cpu;
pub mod during;
pub mod foreign;
pub mod gpu;
pub mod memory;
pub mod nvrm;
pub mod process;
pub mod text;
pub mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::host::procfs;
use crate::host::reading::Reading;
pub use verdict::{Check, Decision, Source, Status, Verdict};

/// Version of the [`GateReport`] JSON layout; bump on any breaking change.
pub const GATE_SCHEMA_VERSION: u32 = 1;

/// Thresholds and what the operator accepted. Serialised into every report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateConfig {
    /// CPU sampling window.
    pub cpu_window_ms: u64,
    /// A process above this share of one core (percent) is contention.
    pub cpu_threshold_pct: f64,
    /// Host-wide CPU not ours above this (percent of one core) is contention,
    /// even when no single process reaches `cpu_threshold_pct`.
    pub host_cpu_threshold_pct: f64,
    /// How many of the busiest processes to report.
    pub cpu_top_n: usize,
    pub min_available_mib: u64,
    /// Cumulative NV_ERR_NO_MEMORY count that halts.
    pub nvrm_budget: u64,
    /// An NV_ERR_NO_MEMORY inside this many seconds is a burst: wait.
    pub nvrm_window_s: f64,
    pub gpu_util_threshold_pct: u32,
    pub gpu_min_free_mib: u64,
    /// Unknown sources that do not block.
    pub accept_unknown: Vec<Source>,
    /// Processes that are "us" besides this one: they, this process, and
    /// all their descendants are left out of the CPU, foreign and GPU checks.
    pub exclude_roots: Vec<u32>,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            cpu_window_ms: 1000,
            cpu_threshold_pct: 20.0,
            host_cpu_threshold_pct: 50.0,
            cpu_top_n: 5,
            min_available_mib: 2048,
            nvrm_budget: 1,
            nvrm_window_s: 300.0,
            gpu_util_threshold_pct: 10,
            gpu_min_free_mib: 1024,
            accept_unknown: Vec::new(),
            exclude_roots: Vec::new(),
        }
    }
}

impl GateConfig {
    fn roots(&self) -> Vec<u32> {
        let mut r = self.exclude_roots.clone();
        r.push(std::process::id());
        r
    }
}

/// Everything the gate reads from the host, as plain data.
#[derive(Clone, Debug)]
pub struct GateInputs {
    pub cpu: cpu::CpuInput,
    pub foreign: foreign::ForeignInput,
    pub gpu: gpu::GpuInput,
    pub proc_driver_nvidia: bool,
    pub nvrm: nvrm::NvrmInput,
    pub meminfo: Result<String, String>,
    /// Pids left out of the process checks (the tuner and its descendants).
    pub excluded: BTreeSet<u32>,
    /// Whether an arm of this tuner is running while these were read (the
    /// in-arm monitor): the GPU's utilization is then its own work.
    pub gpu_work: gpu::GpuWork,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checks {
    pub cpu: Check<cpu::CpuReading>,
    pub foreign: Check<foreign::ForeignReading>,
    pub gpu: Check<gpu::GpuReading>,
    pub nvrm: Check<nvrm::NvrmReading>,
    pub memory: Check<memory::MemoryReading>,
}

/// One gate check: every source's reading and status, and the verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    pub schema_version: u32,
    pub checked_at_unix_ms: u64,
    /// How long reading the host took.
    pub duration_ms: u64,
    pub config: GateConfig,
    pub checks: Checks,
    pub verdict: Verdict,
}

/// Judges inputs read earlier. Pure: the same inputs give the same report
/// (apart from the timestamp).
pub fn evaluate(inputs: &GateInputs, cfg: &GateConfig) -> GateReport {
    let checks = Checks {
        cpu: cpu::evaluate(
            &inputs.cpu,
            cfg.cpu_threshold_pct,
            cfg.host_cpu_threshold_pct,
            cfg.cpu_top_n,
            &inputs.excluded,
        ),
        foreign: foreign::evaluate(&inputs.foreign, &inputs.excluded),
        gpu: gpu::evaluate(
            &inputs.gpu,
            inputs.proc_driver_nvidia,
            cfg.gpu_util_threshold_pct,
            cfg.gpu_min_free_mib,
            &inputs.excluded,
            inputs.gpu_work,
        ),
        nvrm: nvrm::evaluate(&inputs.nvrm, cfg.nvrm_budget, cfg.nvrm_window_s),
        memory: memory::evaluate(&inputs.meminfo, cfg.min_available_mib),
    };
    let verdict = verdict::decide(
        &[
            (Source::Cpu, checks.cpu.status, &checks.cpu.reasons),
            (Source::Foreign, checks.foreign.status, &checks.foreign.reasons),
            (Source::Gpu, checks.gpu.status, &checks.gpu.reasons),
            (Source::Nvrm, checks.nvrm.status, &checks.nvrm.reasons),
            (Source::Memory, checks.memory.status, &checks.memory.reasons),
        ],
        &cfg.accept_unknown,
    );
    GateReport {
        schema_version: GATE_SCHEMA_VERSION,
        checked_at_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        duration_ms: 0,
        config: cfg.clone(),
        checks,
        verdict,
    }
}

fn read_proc_stat() -> Result<procfs::CpuTimes, String> {
    let p = std::path::Path::new("/proc/stat");
    let text = procfs::read_capped(p, procfs::MAX_PROC_FILE_BYTES).map_err(|e| e.to_string())?;
    procfs::parse_proc_stat(&text).map_err(|e| format!("/proc/stat: {e}"))
}

/// Reads the live host. Takes about `cfg.cpu_window_ms`.
pub fn collect(cfg: &GateConfig, previous_nvrm: Option<u64>) -> GateInputs {
    let stat_before = read_proc_stat();
    let processes = process::sample(Duration::from_millis(cfg.cpu_window_ms));
    let host = match (stat_before, read_proc_stat()) {
        (Ok(a), Ok(b)) => match procfs::busy_percent(a, b) {
            Some(busy_pct) => Reading::ok(cpu::HostCpu { busy_pct, n_cpus: b.n_cpus }),
            None => Reading::unavailable("/proc/stat counters did not advance"),
        },
        (Err(e), _) | (_, Err(e)) => Reading::unavailable(e),
    };
    let excluded = match &processes {
        Ok(ps) => process::descendants_of(ps, &cfg.roots()),
        Err(_) => cfg.roots().into_iter().collect(),
    };
    let mut files = BTreeMap::new();
    if let Ok(ps) = &processes {
        for p in ps.iter().filter(|p| !excluded.contains(&p.pid) && foreign::needs_file_scan(p)) {
            let listed = match procfs::open_and_mapped_files(p.pid) {
                // Exited since the sample: it holds no model any more.
                Err(procfs::ProcError::Read { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && !std::path::Path::new(&format!("/proc/{}", p.pid)).exists() =>
                {
                    Ok(Vec::new())
                }
                r => r.map_err(|e| e.to_string()),
            };
            files.insert(p.pid, listed);
        }
    }
    let proc_driver_nvidia = gpu::proc_driver_present();
    let gpu_input = gpu::probe(proc_driver_nvidia);
    let (driver, logs) = nvrm_logs(gpu::driver_presence(&gpu_input, proc_driver_nvidia));
    GateInputs {
        cpu: cpu::CpuInput { processes: processes.clone(), host, window_ms: cfg.cpu_window_ms },
        foreign: foreign::ForeignInput { processes, files },
        gpu: gpu_input,
        proc_driver_nvidia,
        nvrm: nvrm::NvrmInput { driver, uptime_s: procfs::read_uptime_s(), logs, previous_cumulative: previous_nvrm },
        meminfo: memory::read_meminfo(),
        excluded,
        gpu_work: gpu::GpuWork::NoneOfOurs,
    }
}

/// Environment variable naming a file read *instead of* the kernel log, in
/// `/dev/kmsg` format, with the driver taken as loaded: lets tests inject
/// NV_ERR_NO_MEMORY counts (a sweep records its whole environment, so a
/// record made with it says so).
pub const NVRM_LOG_ENV: &str = "DRAFTWISE_TUNER_NVRM_LOG";

/// Kernel-log texts, each with its source, as the NVRM check reads them.
type NvrmLogs = Vec<(nvrm::LogSource, Result<nvrm::RawLog, String>)>;

/// The driver presence and kernel-log texts the NVRM check reads.
fn nvrm_logs(driver: gpu::DriverPresence) -> (gpu::DriverPresence, NvrmLogs) {
    match std::env::var_os(NVRM_LOG_ENV) {
        Some(p) => {
            let p = std::path::PathBuf::from(p);
            let raw = procfs::read_capped(&p, nvrm::MAX_LOG_BYTES as u64)
                .map(|text| nvrm::RawLog { text, truncated: false })
                .map_err(|e| format!("{NVRM_LOG_ENV}: {e}"));
            (gpu::DriverPresence::Loaded, vec![(nvrm::LogSource::Kmsg, raw)])
        }
        None => (driver, nvrm::collect(driver)),
    }
}

/// Reads only the NV_ERR_NO_MEMORY count (no CPU window): what a sweep reads
/// after each arm.
pub fn nvrm_check(cfg: &GateConfig, previous: Option<u64>) -> Check<nvrm::NvrmReading> {
    let proc_driver_nvidia = gpu::proc_driver_present();
    let presence = match std::env::var_os(NVRM_LOG_ENV) {
        Some(_) => gpu::DriverPresence::Loaded,
        None => gpu::driver_presence(&gpu::probe(proc_driver_nvidia), proc_driver_nvidia),
    };
    let (driver, logs) = nvrm_logs(presence);
    let input = nvrm::NvrmInput { driver, uptime_s: procfs::read_uptime_s(), logs, previous_cumulative: previous };
    nvrm::evaluate(&input, cfg.nvrm_budget, cfg.nvrm_window_s)
}

/// A gate that remembers, between checks, what a single check cannot know:
/// the last NV_ERR_NO_MEMORY count (a smaller one later means the log lost
/// lines). A sweep keeps one for its whole run.
#[derive(Clone, Debug)]
pub struct Gate {
    pub config: GateConfig,
    last_nvrm_cumulative: Option<u64>,
}

impl Gate {
    pub fn new(config: GateConfig) -> Self {
        Gate { config, last_nvrm_cumulative: None }
    }

    /// The largest NV_ERR_NO_MEMORY count this gate has seen.
    pub fn last_nvrm_cumulative(&self) -> Option<u64> {
        self.last_nvrm_cumulative
    }

    /// Reads only the NV_ERR_NO_MEMORY count, remembering it like a check.
    pub fn nvrm_count(&mut self) -> Option<u64> {
        let c = nvrm_check(&self.config, self.last_nvrm_cumulative);
        let n = c.reading.value.as_ref().filter(|r| r.applicable).and_then(|r| r.cumulative);
        if let Some(n) = n {
            self.last_nvrm_cumulative = Some(self.last_nvrm_cumulative.map_or(n, |p| p.max(n)));
        }
        n
    }

    /// Reads the host and judges it.
    pub fn check(&mut self) -> GateReport {
        let t0 = Instant::now();
        let inputs = collect(&self.config, self.last_nvrm_cumulative);
        let mut report = evaluate(&inputs, &self.config);
        report.duration_ms = t0.elapsed().as_millis() as u64;
        if let Some(c) = report.checks.nvrm.reading.value.as_ref().and_then(|r| r.cumulative) {
            self.last_nvrm_cumulative = Some(self.last_nvrm_cumulative.map_or(c, |p| p.max(c)));
        }
        report
    }

    /// Checks until pass or halt, or until `timeout` has passed, re-checking
    /// every `interval`. `progress` is called after each check that waits
    /// and will be followed by another.
    pub fn wait(
        &mut self,
        timeout: Duration,
        interval: Duration,
        mut progress: impl FnMut(&GateReport, Duration),
    ) -> GateRun {
        let t0 = Instant::now();
        let mut attempts = 0;
        loop {
            let report = self.check();
            attempts += 1;
            let waited = t0.elapsed();
            let decision = report.verdict.decision;
            if decision != Decision::Wait || waited >= timeout {
                return GateRun {
                    schema_version: GATE_SCHEMA_VERSION,
                    decision,
                    exit_code: exit_code(decision),
                    attempts,
                    waited_ms: waited.as_millis() as u64,
                    timeout_s: timeout.as_secs_f64(),
                    timed_out: decision == Decision::Wait && !timeout.is_zero(),
                    report,
                };
            }
            progress(&report, waited);
            std::thread::sleep(interval.min(timeout - waited));
        }
    }
}

/// The process exit code for a decision (see [`crate::exit`]).
pub fn exit_code(d: Decision) -> u8 {
    match d {
        Decision::Pass => crate::exit::PASS,
        Decision::Wait => crate::exit::WAIT,
        Decision::Halt => crate::exit::HALT,
    }
}

/// What `tuner gate --json` prints: the last report of a (possibly waited)
/// gate, and how it got there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateRun {
    pub schema_version: u32,
    pub decision: Decision,
    pub exit_code: u8,
    pub attempts: u32,
    pub waited_ms: u64,
    /// `--wait`; 0 when the gate checked once.
    pub timeout_s: f64,
    /// Still waiting when `--wait` ran out.
    pub timed_out: bool,
    pub report: GateReport,
}

/// One check with a fresh [`Gate`].
pub fn check(cfg: &GateConfig) -> GateReport {
    Gate::new(cfg.clone()).check()
}

/// The one-line summary used for progress and text output.
pub fn summary_line(r: &GateReport) -> String {
    let d = r.verdict.decision.word();
    if r.verdict.reasons.is_empty() {
        return d.to_string();
    }
    let reasons: Vec<&str> = r.verdict.reasons.iter().map(|x| x.text.as_str()).collect();
    format!("{d}: {}", reasons.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::process::entry;
    use super::*;

    /// A quiet CPU host with no NVIDIA driver: everything readable.
    fn quiet_host() -> GateInputs {
        let procs = vec![entry(1, 0, "init", &["init"], 0.0), entry(500, 1, "tuner", &["tuner", "gate"], 3.0)];
        GateInputs {
            cpu: cpu::CpuInput {
                processes: Ok(procs.clone()),
                host: Reading::ok(cpu::HostCpu { busy_pct: 2.0, n_cpus: 2 }),
                window_ms: 1000,
            },
            foreign: foreign::ForeignInput { processes: Ok(procs), files: BTreeMap::new() },
            gpu: gpu::GpuInput::NoDriver { evidence: "libnvidia-ml.so.1 not found".into() },
            proc_driver_nvidia: false,
            nvrm: nvrm::NvrmInput {
                driver: gpu::DriverPresence::Absent,
                uptime_s: Ok(100.0),
                logs: vec![],
                previous_cumulative: None,
            },
            meminfo: Ok("MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n".into()),
            excluded: BTreeSet::from([500]),
            gpu_work: gpu::GpuWork::NoneOfOurs,
        }
    }

    /// A host with an NVIDIA driver whose NVML works and shows an idle GPU.
    fn quiet_gpu_host() -> GateInputs {
        let mut i = quiet_host();
        i.proc_driver_nvidia = true;
        i.gpu = gpu::GpuInput::Devices {
            driver_version: Reading::ok("570.86.15".into()),
            devices: vec![gpu::GpuDevice {
                index: 0,
                name: Reading::ok("NVIDIA H200".into()),
                utilization_gpu_pct: Reading::ok(0),
                memory_free_mib: Reading::ok(140_000),
                memory_total_mib: Reading::ok(143_771),
                processes: Reading::ok(vec![]),
            }],
        };
        i.nvrm.driver = gpu::DriverPresence::Loaded;
        i.nvrm.logs = vec![(
            nvrm::LogSource::Kmsg,
            Ok(nvrm::RawLog { text: "6,0,0,-;Linux version 6.8\n6,1,5000,-;NVRM: loading\n".into(), truncated: false }),
        )];
        i
    }

    fn cfg(accept: &[Source]) -> GateConfig {
        GateConfig { accept_unknown: accept.to_vec(), ..GateConfig::default() }
    }

    #[test]
    fn a_quiet_cpu_host_passes() {
        let r = evaluate(&quiet_host(), &cfg(&[]));
        assert_eq!(r.verdict.decision, Decision::Pass, "{}", summary_line(&r));
        assert!(!r.checks.nvrm.reading.value.as_ref().unwrap().applicable);
        let r = evaluate(&quiet_gpu_host(), &cfg(&[]));
        assert_eq!(r.verdict.decision, Decision::Pass, "{}", summary_line(&r));
    }

    /// Each source made unreadable: it blocks (wait) without acceptance, and
    /// passes with exactly its own `--accept-unknown`, which is recorded.
    fn unreadable_blocks_then_passes_when_accepted(source: Source, break_it: impl Fn(&mut GateInputs)) {
        let mut inputs = quiet_gpu_host();
        break_it(&mut inputs);
        let r = evaluate(&inputs, &cfg(&[]));
        assert_eq!(r.verdict.decision, Decision::Wait, "{source:?}: {}", summary_line(&r));
        assert!(r.verdict.reasons.iter().any(|x| x.source == source && x.status == Status::Unknown));
        assert!(summary_line(&r).contains(&format!("--accept-unknown {}", source.name())));
        let others: Vec<Source> = Source::ALL.into_iter().filter(|s| *s != source).collect();
        let r = evaluate(&inputs, &cfg(&others));
        assert_eq!(r.verdict.decision, Decision::Wait, "accepting the other sources must not clear {source:?}");
        let r = evaluate(&inputs, &cfg(&[source]));
        assert_eq!(r.verdict.decision, Decision::Pass, "{source:?}: {}", summary_line(&r));
        assert_eq!(r.verdict.accepted_unknown.len(), 1);
        assert_eq!(r.verdict.accepted_unknown[0].source, source);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["verdict"]["accepted_unknown"][0]["source"], source.name());
    }

    #[test]
    fn unreadable_cpu_blocks_unless_accepted() {
        unreadable_blocks_then_passes_when_accepted(Source::Cpu, |i| {
            i.cpu.processes = Err("sysinfo: cannot read /proc".into());
        });
    }

    #[test]
    fn unreadable_foreign_blocks_unless_accepted() {
        unreadable_blocks_then_passes_when_accepted(Source::Foreign, |i| {
            i.foreign.processes = Err("sysinfo: cannot read /proc".into());
        });
        unreadable_blocks_then_passes_when_accepted(Source::Foreign, |i| {
            let py = entry(900, 1, "python3", &["python3", "serve.py"], 0.0);
            i.foreign.processes.as_mut().unwrap().push(py);
            i.foreign.files.insert(900, Err("/proc/900/fd: Permission denied (os error 13)".into()));
        });
    }

    #[test]
    fn unreadable_gpu_blocks_unless_accepted() {
        unreadable_blocks_then_passes_when_accepted(Source::Gpu, |i| {
            i.gpu = gpu::from_init_failure(&gpu::NvmlInitFailure::LibraryMissing("dlopen failed".into()), true);
        });
    }

    #[test]
    fn unreadable_nvrm_blocks_unless_accepted() {
        unreadable_blocks_then_passes_when_accepted(Source::Nvrm, |i| {
            i.nvrm.logs = vec![
                (nvrm::LogSource::Kmsg, Err("cannot open /dev/kmsg: Permission denied".into())),
                (nvrm::LogSource::Journal, Err("cannot run journalctl: not found".into())),
                (nvrm::LogSource::Dmesg, Err("dmesg: Operation not permitted".into())),
            ];
        });
    }

    #[test]
    fn unreadable_memory_blocks_unless_accepted() {
        unreadable_blocks_then_passes_when_accepted(Source::Memory, |i| {
            i.meminfo = Err("cannot read /proc/meminfo: No such file or directory".into());
        });
    }

    #[test]
    fn a_spent_nvrm_budget_halts_even_when_everything_else_is_accepted() {
        let mut i = quiet_gpu_host();
        i.nvrm.logs = vec![(
            nvrm::LogSource::Kmsg,
            Ok(nvrm::RawLog {
                text: "6,0,0,-;Linux version 6.8\n3,1,5000000,-;NVRM: GPU0 failed with status NV_ERR_NO_MEMORY\n"
                    .into(),
                truncated: false,
            }),
        )];
        let r = evaluate(&i, &cfg(&Source::ALL));
        assert_eq!(r.verdict.decision, Decision::Halt);
    }

    #[test]
    fn the_report_serialises_with_a_schema_version_and_every_source() {
        let r = evaluate(&quiet_host(), &cfg(&[]));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["schema_version"], GATE_SCHEMA_VERSION);
        for s in Source::ALL {
            assert!(j["checks"][s.name()]["status"].is_string(), "{s:?}");
        }
        let back: GateReport = serde_json::from_value(j).unwrap();
        assert_eq!(back, r);
    }
}
