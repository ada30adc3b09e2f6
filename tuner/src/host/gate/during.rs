//! The gate while an arm runs: [`Monitor`] samples the host on a thread
//! (foreign CPU share, foreign model processes, memory, GPUs) until the arm
//! ends, and [`DuringArm`] is what it saw, written into the arm's `arm_end`
//! line. An arm measured through contention is re-run by the sweep (bounded,
//! every attempt kept in raw.jsonl).
//!
//! The NV_ERR_NO_MEMORY count is not sampled here: it is read before and
//! after each arm and projected against the budget (the sweep's own check).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{GateConfig, Source, Status};

/// Pause between samples; each sample itself takes [`IN_ARM_WINDOW_MS`].
pub const SAMPLE_PAUSE: Duration = Duration::from_millis(250);

/// Pause from the arm's start to its first window: long enough for the
/// runtime's process to exist (its CPU time is then attributed to it).
pub const FIRST_PAUSE: Duration = Duration::from_millis(250);

/// The CPU window of an in-arm reading, at most (the sweep's gate window if
/// that is shorter). Shorter than the gate's 1 s before an arm so that every
/// arm, however short, is read at least [`MIN_IN_ARM_READINGS`] times: two
/// readings end 1.3 s after the start, and the shortest arm on record (a
/// 12-request width arm with its warm-up pass) takes about 2.4 s. The shares
/// are percentages of the window, so the thresholds mean the same; a shorter
/// window reads coarser (`/proc` counts 100 ticks a second per core).
pub const IN_ARM_WINDOW_MS: u64 = 400;

/// Readings an arm needs for the record to say the host was watched while it
/// ran; `tuner propose` refuses a record with an arm below it.
pub const MIN_IN_ARM_READINGS: usize = 2;

/// Reasons kept per arm (the first ones; the count is always complete).
const MAX_REASONS: usize = 8;

/// What the gate saw while an arm ran. An arm shorter than
/// [`FIRST_PAUSE`] plus one window has no reading (`samples` 0); the
/// record counts the arms with fewer than [`MIN_IN_ARM_READINGS`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DuringArm {
    /// Host readings taken while the arm ran.
    pub samples: usize,
    /// Readings in which a contention source (cpu, foreign, gpu, memory)
    /// said wait or halt.
    pub contended_samples: usize,
    /// The first reasons, each with the source that gave it.
    pub reasons: Vec<String>,
    /// The largest host-wide CPU share not ours (percent of one core).
    pub max_not_ours_core_pct: Option<f64>,
    /// The smallest MemAvailable seen (MiB).
    pub min_available_mib: Option<u64>,
}

impl DuringArm {
    pub fn contended(&self) -> bool {
        self.contended_samples > 0
    }
}

/// Sleeps `d` in slices, so that finishing is prompt.
fn pause(flag: &AtomicBool, d: Duration) {
    let mut slept = Duration::ZERO;
    while slept < d && !flag.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        slept += Duration::from_millis(50);
    }
}

/// A running sampler; [`Monitor::finish`] stops it and returns its readings.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<DuringArm>>,
}

impl Monitor {
    /// Starts sampling with the sweep's gate thresholds. The tuner and its
    /// descendants (the arm's runtime) are left out, as before an arm.
    pub fn start(cfg: &GateConfig) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let cfg = GateConfig { cpu_window_ms: cfg.cpu_window_ms.min(IN_ARM_WINDOW_MS), ..cfg.clone() };
        let handle = std::thread::Builder::new()
            .name("gate-during-arm".into())
            .spawn(move || {
                let mut d = DuringArm::default();
                // The first window starts once the arm's process is up: a
                // process that starts (or ends) inside a window has CPU time
                // the sampler cannot attribute to it, which would read as
                // foreign load.
                pause(&flag, FIRST_PAUSE);
                while !flag.load(Ordering::Relaxed) {
                    let inputs =
                        super::GateInputs { gpu_work: super::gpu::GpuWork::ArmRunning, ..super::collect(&cfg, None) };
                    // The arm ended inside this window: for the same reason, drop it.
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    let report = super::evaluate(&inputs, &cfg);
                    d.samples += 1;
                    let c = &report.checks;
                    if let Some(h) = c.cpu.reading.value.as_ref().and_then(|r| r.host.value.as_ref()) {
                        d.max_not_ours_core_pct =
                            Some(d.max_not_ours_core_pct.map_or(h.not_ours_core_pct, |m| m.max(h.not_ours_core_pct)));
                    }
                    if let Some(m) = c.memory.reading.value.as_ref() {
                        d.min_available_mib =
                            Some(d.min_available_mib.map_or(m.available_mib, |x| x.min(m.available_mib)));
                    }
                    let blocking: Vec<String> = [
                        (Source::Cpu, c.cpu.status, &c.cpu.reasons),
                        (Source::Foreign, c.foreign.status, &c.foreign.reasons),
                        (Source::Gpu, c.gpu.status, &c.gpu.reasons),
                        (Source::Memory, c.memory.status, &c.memory.reasons),
                    ]
                    .into_iter()
                    .filter(|(_, st, _)| matches!(st, Status::Wait | Status::Halt))
                    .flat_map(|(src, _, rs)| rs.iter().map(move |r| format!("{}: {r}", src.name())))
                    .collect();
                    if !blocking.is_empty() {
                        d.contended_samples += 1;
                        for r in blocking {
                            if d.reasons.len() < MAX_REASONS && !d.reasons.contains(&r) {
                                d.reasons.push(r);
                            }
                        }
                    }
                    pause(&flag, SAMPLE_PAUSE);
                }
                d
            })
            .ok();
        Monitor { stop, handle }
    }

    /// Stops sampling and returns what was seen (empty if the thread could
    /// not start: then `samples` is 0 and the record says so).
    pub fn finish(mut self) -> DuringArm {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}
