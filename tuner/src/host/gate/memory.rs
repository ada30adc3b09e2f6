//! Available memory: `MemAvailable` from `/proc/meminfo` above a floor.
//! An unreadable file or a kernel without `MemAvailable` is unknown, never
//! "unlimited" and never `MemFree` silently substituted.
use serde::{Deserialize, Serialize};

use super::verdict::{Check, Source, Status};
use crate::host::procfs;
use crate::host::reading::Reading;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryReading {
    pub available_mib: u64,
    pub total_mib: Option<u64>,
    pub min_available_mib: u64,
}

/// `meminfo` is the text of `/proc/meminfo`, or why it could not be read.
pub fn evaluate(meminfo: &Result<String, String>, min_available_mib: u64) -> Check<MemoryReading> {
    let text = match meminfo {
        Ok(t) => t,
        Err(why) => return Check::unknown(Source::Memory, why.clone()),
    };
    let available = match procfs::meminfo_kib(text, "MemAvailable") {
        Ok(Some(kib)) => kib / 1024,
        Ok(None) => {
            return Check::unknown(Source::Memory, "/proc/meminfo has no MemAvailable field (kernel before 3.14?)");
        }
        Err(e) => return Check::unknown(Source::Memory, format!("/proc/meminfo: {e}")),
    };
    let total = procfs::meminfo_kib(text, "MemTotal").ok().flatten().map(|k| k / 1024);
    let reading = MemoryReading { available_mib: available, total_mib: total, min_available_mib };
    if available < min_available_mib {
        return Check {
            status: Status::Wait,
            reasons: vec![format!(
                "memory: {available} MiB available, below the floor of {min_available_mib} MiB; \
                 free memory, or lower `--min-available-mib`"
            )],
            reading: Reading::ok(reading),
        };
    }
    Check::pass(reading)
}

pub fn read_meminfo() -> Result<String, String> {
    procfs::read_capped(std::path::Path::new("/proc/meminfo"), procfs::MAX_PROC_FILE_BYTES).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enough_memory_passes_and_too_little_waits() {
        let t = Ok("MemTotal: 8388608 kB\nMemAvailable: 4194304 kB\n".to_string());
        assert_eq!(evaluate(&t, 2048).status, Status::Pass);
        let c = evaluate(&t, 8192);
        assert_eq!(c.status, Status::Wait);
        assert!(c.reasons[0].contains("4096 MiB available"), "{:?}", c.reasons);
    }

    #[test]
    fn unreadable_meminfo_or_a_missing_field_is_unknown_not_infinite() {
        let c = evaluate(&Err("cannot read /proc/meminfo: Permission denied".into()), 2048);
        assert_eq!(c.status, Status::Unknown);
        let c = evaluate(&Ok("MemTotal: 8388608 kB\nMemFree: 1 kB\n".into()), 2048);
        assert_eq!(c.status, Status::Unknown);
        assert!(c.reasons[0].contains("MemAvailable"));
    }
}
