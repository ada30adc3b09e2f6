//! NVIDIA GPUs through NVML (nvml-wrapper): other processes on each device,
//! utilization, free memory.
//!
//! "No NVML library and no `/proc/driver/nvidia`" is the fact *no NVIDIA
//! driver*: on a CPU host the check passes and says so. NVML failing while
//! the driver is loaded, or failing for any other reason, is `unknown`.
//!
//! Unverified here: everything past a successful `Nvml::init()` was compiled
//! but has not run on this project's CPU-only machines.
use std::collections::BTreeSet;
use std::path::Path;

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};

use super::verdict::{Check, Source, Status, unknown_reason};
use crate::host::reading::Reading;

/// Present when the NVIDIA kernel module is loaded.
pub const PROC_DRIVER_NVIDIA: &str = "/proc/driver/nvidia";

/// Whether an NVIDIA driver is loaded on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverPresence {
    Loaded,
    Absent,
    Unknown,
}

/// Why `Nvml::init()` failed, reduced to what the gate decides on.
#[derive(Clone, Debug, PartialEq)]
pub enum NvmlInitFailure {
    /// `libnvidia-ml.so.1` could not be loaded (or NVML says its library is missing).
    LibraryMissing(String),
    /// The library loaded but reports no driver.
    DriverNotLoaded(String),
    Other(String),
}

impl NvmlInitFailure {
    pub fn from_error(e: &NvmlError) -> Self {
        let s = e.to_string();
        match e {
            NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => Self::LibraryMissing(s),
            NvmlError::DriverNotLoaded => Self::DriverNotLoaded(s),
            _ => Self::Other(s),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// `compute` or `graphics`.
    pub kind: String,
    pub used_mib: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuDevice {
    pub index: u32,
    pub name: Reading<String>,
    pub utilization_gpu_pct: Reading<u32>,
    pub memory_free_mib: Reading<u64>,
    pub memory_total_mib: Reading<u64>,
    pub processes: Reading<Vec<GpuProcess>>,
}

/// What the GPU check is computed from.
#[derive(Clone, Debug, PartialEq)]
pub enum GpuInput {
    NoDriver { evidence: String },
    Unknown { reason: String },
    Devices { driver_version: Reading<String>, devices: Vec<GpuDevice> },
}

/// Whose work a device's utilization can be. Before an arm no work of this
/// tuner runs, so any utilization is someone else's. While an arm runs, the
/// arm's own runtime keeps the device busy (a decode loop holds an H200 at
/// 80–90%), so utilization is recorded but not judged: foreign work then
/// shows as a process on the device that is not this tuner's, as low free
/// memory, or, where NVML cannot see other containers' processes, in the
/// gate before the next arm and in the round's closing classic brackets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuWork {
    #[default]
    NoneOfOurs,
    ArmRunning,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub driver: DriverPresence,
    /// Why the driver is believed loaded or absent.
    pub evidence: String,
    pub driver_version: Reading<String>,
    pub devices: Vec<GpuDevice>,
    pub util_threshold_pct: u32,
    pub min_free_mib: u64,
    /// `arm_running`: utilization was read while an arm ran and not judged.
    #[serde(default)]
    pub work: GpuWork,
}

/// Decides what a failed `Nvml::init()` means, given whether
/// `/proc/driver/nvidia` exists.
pub fn from_init_failure(f: &NvmlInitFailure, proc_driver_present: bool) -> GpuInput {
    match (f, proc_driver_present) {
        (NvmlInitFailure::LibraryMissing(e) | NvmlInitFailure::DriverNotLoaded(e), false) => GpuInput::NoDriver {
            evidence: format!("no NVIDIA driver: NVML did not initialise ({e}) and {PROC_DRIVER_NVIDIA} is absent"),
        },
        (NvmlInitFailure::LibraryMissing(e) | NvmlInitFailure::DriverNotLoaded(e), true) => GpuInput::Unknown {
            reason: format!(
                "the NVIDIA driver is loaded ({PROC_DRIVER_NVIDIA} exists) but NVML cannot be used: {e}; \
                 install the driver's libnvidia-ml.so.1 matching the kernel module"
            ),
        },
        (NvmlInitFailure::Other(e), _) => GpuInput::Unknown { reason: format!("NVML failed to initialise: {e}") },
    }
}

/// Whether a driver is loaded, from the GPU probe and `/proc/driver/nvidia`.
pub fn driver_presence(input: &GpuInput, proc_driver_present: bool) -> DriverPresence {
    match input {
        _ if proc_driver_present => DriverPresence::Loaded,
        GpuInput::Devices { .. } => DriverPresence::Loaded,
        GpuInput::NoDriver { .. } => DriverPresence::Absent,
        GpuInput::Unknown { .. } => DriverPresence::Unknown,
    }
}

pub fn proc_driver_present() -> bool {
    Path::new(PROC_DRIVER_NVIDIA).exists()
}

/// Initialises NVML, classifying a failure.
pub fn init() -> Result<Nvml, NvmlInitFailure> {
    Nvml::init().map_err(|e| NvmlInitFailure::from_error(&e))
}

const MIB: u64 = 1 << 20;

/// Reads every device through NVML. Compiled here; runs only where NVML loads.
pub fn probe(proc_driver_present: bool) -> GpuInput {
    let nvml = match init() {
        Ok(n) => n,
        Err(f) => return from_init_failure(&f, proc_driver_present),
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            return GpuInput::Unknown { reason: format!("NVML device count: {e}") };
        }
    };
    let mut devices = Vec::new();
    for index in 0..count {
        let dev = match nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                return GpuInput::Unknown { reason: format!("NVML device {index}: {e}") };
            }
        };
        let mem = dev.memory_info();
        let processes = (|| -> Result<Vec<GpuProcess>, NvmlError> {
            let mut out = Vec::new();
            for (kind, list) in
                [("compute", dev.running_compute_processes()?), ("graphics", dev.running_graphics_processes()?)]
            {
                out.extend(list.into_iter().map(|p| GpuProcess {
                    pid: p.pid,
                    kind: kind.to_string(),
                    used_mib: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b / MIB),
                        UsedGpuMemory::Unavailable => None,
                    },
                }));
            }
            Ok(out)
        })();
        devices.push(GpuDevice {
            index,
            name: Reading::from_result(dev.name()),
            utilization_gpu_pct: Reading::from_result(dev.utilization_rates().map(|u| u.gpu)),
            memory_free_mib: Reading::from_result(mem.as_ref().map(|m| m.free / MIB).map_err(|e| e.to_string())),
            memory_total_mib: Reading::from_result(mem.as_ref().map(|m| m.total / MIB).map_err(|e| e.to_string())),
            processes: Reading::from_result(processes),
        });
    }
    GpuInput::Devices { driver_version: Reading::from_result(nvml.sys_driver_version()), devices }
}

pub fn evaluate(
    input: &GpuInput,
    proc_driver_present: bool,
    util_threshold_pct: u32,
    min_free_mib: u64,
    excluded: &BTreeSet<u32>,
    work: GpuWork,
) -> Check<GpuReading> {
    let driver = driver_presence(input, proc_driver_present);
    let mut reading = GpuReading {
        driver,
        evidence: String::new(),
        driver_version: Reading::unavailable("no NVIDIA driver"),
        devices: Vec::new(),
        util_threshold_pct,
        min_free_mib,
        work,
    };
    let (driver_version, devices) = match input {
        GpuInput::NoDriver { evidence } => {
            reading.evidence = evidence.clone();
            return Check::pass(reading);
        }
        GpuInput::Unknown { reason } => return Check::unknown(Source::Gpu, reason.clone()),
        GpuInput::Devices { driver_version, devices } => (driver_version, devices),
    };
    reading.evidence = "NVML initialised".into();
    reading.driver_version = driver_version.clone();
    reading.devices = devices.clone();
    let (mut waits, mut unknowns) = (Vec::new(), Vec::new());
    for d in devices {
        let label = format!("GPU {} ({})", d.index, d.name.value.as_deref().unwrap_or("?"));
        match &d.processes.value {
            Some(ps) => {
                for p in ps.iter().filter(|p| !excluded.contains(&p.pid)) {
                    waits.push(format!(
                        "gpu: {label} has a {} process pid {} using {} MiB that is not this tuner's; wait for it to exit",
                        p.kind,
                        p.pid,
                        p.used_mib.map_or("?".to_string(), |m| m.to_string())
                    ));
                }
            }
            None => unknowns.push(format!("{label} processes: {}", d.processes.reason())),
        }
        match d.utilization_gpu_pct.value {
            Some(_) if work == GpuWork::ArmRunning => {}
            Some(u) if u >= util_threshold_pct => waits.push(format!(
                "gpu: {label} is {u}% utilized (threshold {util_threshold_pct}%); wait, or raise `--gpu-util-threshold`"
            )),
            Some(_) => {}
            None => unknowns.push(format!("{label} utilization: {}", d.utilization_gpu_pct.reason())),
        }
        match d.memory_free_mib.value {
            Some(f) if f < min_free_mib => waits.push(format!(
                "gpu: {label} has {f} MiB free, below {min_free_mib} MiB; wait, or lower `--gpu-min-free-mib`"
            )),
            Some(_) => {}
            None => unknowns.push(format!("{label} free memory: {}", d.memory_free_mib.reason())),
        }
    }
    let status = if !waits.is_empty() {
        Status::Wait
    } else if !unknowns.is_empty() {
        Status::Unknown
    } else {
        Status::Pass
    };
    let mut reasons = waits;
    if !unknowns.is_empty() {
        reasons.push(unknown_reason(Source::Gpu, &unknowns.join("; ")));
    }
    Check { status, reasons, reading: Reading::ok(reading) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DLOPEN: &str =
        "a libloading error occurred: libnvidia-ml.so.1: cannot open shared object file: No such file or directory";

    fn device(procs: Vec<GpuProcess>, util: u32, free: u64) -> GpuDevice {
        GpuDevice {
            index: 0,
            name: Reading::ok("NVIDIA H200".into()),
            utilization_gpu_pct: Reading::ok(util),
            memory_free_mib: Reading::ok(free),
            memory_total_mib: Reading::ok(143_771),
            processes: Reading::ok(procs),
        }
    }

    fn devices(d: GpuDevice) -> GpuInput {
        GpuInput::Devices { driver_version: Reading::ok("570.86.15".into()), devices: vec![d] }
    }

    #[test]
    fn nvml_absent_without_proc_driver_is_the_fact_no_driver_and_passes() {
        let input = from_init_failure(&NvmlInitFailure::LibraryMissing(DLOPEN.into()), false);
        assert!(matches!(input, GpuInput::NoDriver { .. }));
        let c = evaluate(&input, false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs);
        assert_eq!(c.status, Status::Pass);
        let r = c.reading.value.unwrap();
        assert_eq!(r.driver, DriverPresence::Absent);
        assert!(r.evidence.contains("libnvidia-ml.so.1"), "{}", r.evidence);
    }

    #[test]
    fn nvml_absent_with_the_driver_loaded_is_unknown_and_blocks() {
        let input = from_init_failure(&NvmlInitFailure::LibraryMissing(DLOPEN.into()), true);
        let c = evaluate(&input, true, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs);
        assert_eq!(c.status, Status::Unknown);
        assert!(c.reasons[0].contains("--accept-unknown gpu"));
        assert_eq!(driver_presence(&input, true), DriverPresence::Loaded);
    }

    #[test]
    fn any_other_nvml_failure_is_unknown() {
        let input = from_init_failure(&NvmlInitFailure::Other("Insufficient Permissions".into()), false);
        assert_eq!(evaluate(&input, false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs).status, Status::Unknown);
        assert_eq!(driver_presence(&input, false), DriverPresence::Unknown);
    }

    #[test]
    fn a_foreign_gpu_process_waits_and_ours_does_not() {
        let p = GpuProcess { pid: 4242, kind: "compute".into(), used_mib: Some(30_000) };
        let input = devices(device(vec![p], 0, 100_000));
        let c = evaluate(&input, false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs);
        assert_eq!(c.status, Status::Wait);
        assert!(c.reasons[0].contains("pid 4242"), "{:?}", c.reasons);
        let c = evaluate(&input, false, 10, 1024, &BTreeSet::from([4242]), GpuWork::NoneOfOurs);
        assert_eq!(c.status, Status::Pass, "{:?}", c.reasons);
    }

    #[test]
    fn high_utilization_or_low_free_memory_waits() {
        assert_eq!(
            evaluate(&devices(device(vec![], 55, 100_000)), false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs)
                .status,
            Status::Wait
        );
        assert_eq!(
            evaluate(&devices(device(vec![], 0, 500)), false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs).status,
            Status::Wait
        );
    }

    #[test]
    fn while_an_arm_runs_utilization_is_recorded_not_judged_but_foreign_processes_and_memory_are() {
        // The device check on an H200 (2026-12-04): every in-arm reading of a
        // classic arm saw 77-90% utilization, all of it the arm's own decode.
        let busy = devices(device(vec![], 85, 100_000));
        assert_eq!(evaluate(&busy, false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs).status, Status::Wait);
        let c = evaluate(&busy, false, 10, 1024, &BTreeSet::new(), GpuWork::ArmRunning);
        assert_eq!(c.status, Status::Pass, "{:?}", c.reasons);
        let r = c.reading.value.unwrap();
        assert_eq!((r.work, r.devices[0].utilization_gpu_pct.value), (GpuWork::ArmRunning, Some(85)));
        let p = GpuProcess { pid: 4242, kind: "compute".into(), used_mib: Some(30_000) };
        let foreign = devices(device(vec![p], 85, 100_000));
        assert_eq!(evaluate(&foreign, false, 10, 1024, &BTreeSet::new(), GpuWork::ArmRunning).status, Status::Wait);
        let full = devices(device(vec![], 85, 500));
        assert_eq!(evaluate(&full, false, 10, 1024, &BTreeSet::new(), GpuWork::ArmRunning).status, Status::Wait);
    }

    #[test]
    fn an_unreadable_device_field_is_unknown() {
        let mut d = device(vec![], 0, 100_000);
        d.processes = Reading::unavailable("Not Supported");
        let c = evaluate(&devices(d), false, 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs);
        assert_eq!(c.status, Status::Unknown);
    }

    #[test]
    fn on_this_host_the_live_probe_does_not_panic() {
        let input = probe(proc_driver_present());
        let _ = evaluate(&input, proc_driver_present(), 10, 1024, &BTreeSet::new(), GpuWork::NoneOfOurs);
    }
}
