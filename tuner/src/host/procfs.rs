//! Readers and parsers for the few `/proc` files the gate and the identity
//! use: `/proc/stat` (host CPU time), `/proc/meminfo`, `/proc/uptime`,
//! `/proc/cpuinfo`, and the targets of `/proc/PID/fd` and `/proc/PID/maps`.
//!
//! Parsing is apart from reading so the parsers run on fixture text in tests.
//! Every read is capped: `/proc` files are small, and a file that is not
//! (or a path that is not a `/proc` file at all) must not exhaust memory.
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest `/proc` text file read (cpuinfo on a 512-thread host is ~1 MiB).
pub const MAX_PROC_FILE_BYTES: u64 = 4 << 20;
/// Most entries listed from one `/proc/PID/fd` directory or `maps` file.
pub const MAX_ENTRIES_PER_PROCESS: usize = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {what}")]
    Parse { path: PathBuf, what: String },
}

/// Reads a text file of at most `max_bytes`; longer files are truncated at
/// the cap (the parsers only need the leading part of every file read here).
pub fn read_capped(path: &Path, max_bytes: u64) -> Result<String, ProcError> {
    let err = |source| ProcError::Read { path: path.to_path_buf(), source };
    let f = std::fs::File::open(path).map_err(err)?;
    let mut buf = Vec::new();
    f.take(max_bytes).read_to_end(&mut buf).map_err(err)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Aggregate CPU time from the first (`cpu `) line of `/proc/stat`, in
/// USER_HZ ticks. `guest` and `guest_nice` are already inside `user`/`nice`
/// (proc(5)), so they are not added again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    /// idle + iowait
    pub idle: u64,
    /// `cpuN` lines: CPUs online.
    pub n_cpus: usize,
}

pub fn parse_proc_stat(text: &str) -> Result<CpuTimes, String> {
    let line = text.lines().find(|l| l.starts_with("cpu ")).ok_or("no aggregate `cpu ` line")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse::<u64>().map_err(|_| format!("field {f:?} is not a tick count")))
        .collect::<Result<_, _>>()?;
    if fields.len() < 4 {
        return Err(format!("`cpu ` line has {} fields, need at least 4", fields.len()));
    }
    // user nice system idle iowait irq softirq steal
    let total = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    let n_cpus = text
        .lines()
        .filter(|l| l.strip_prefix("cpu").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit())))
        .count();
    if n_cpus == 0 {
        return Err("no per-CPU `cpuN` lines".into());
    }
    Ok(CpuTimes { total, idle, n_cpus })
}

/// Percent of all CPUs busy between two `/proc/stat` samples (0–100), or
/// `None` when no tick elapsed or the counters went backwards. Steal (time a
/// hypervisor gave to someone else) counts as busy: it is contention too.
pub fn busy_percent(before: CpuTimes, after: CpuTimes) -> Option<f64> {
    let dt = after.total.checked_sub(before.total)?;
    let di = after.idle.checked_sub(before.idle)?;
    if dt == 0 || di > dt {
        return None;
    }
    Some(100.0 * (dt - di) as f64 / dt as f64)
}

/// One `/proc/meminfo` field in KiB (`MemAvailable:   23252388 kB`).
/// A missing field is `None`, never a default: kernels before 3.14 have no
/// `MemAvailable`, and that must read as unknown.
pub fn meminfo_kib(text: &str, field: &str) -> Result<Option<u64>, String> {
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != field {
            continue;
        }
        let mut it = rest.split_whitespace();
        let n = it.next().ok_or_else(|| format!("{field}: no value"))?;
        let n: u64 = n.parse().map_err(|_| format!("{field}: {n:?} is not a number"))?;
        return match it.next() {
            Some("kB") => Ok(Some(n)),
            other => Err(format!("{field}: unit {other:?}, expected kB")),
        };
    }
    Ok(None)
}

/// Seconds since boot: the first field of `/proc/uptime`.
pub fn parse_uptime(text: &str) -> Result<f64, String> {
    let f = text.split_whitespace().next().ok_or("empty")?;
    let s: f64 = f.parse().map_err(|_| format!("{f:?} is not a number of seconds"))?;
    if !s.is_finite() || s < 0.0 {
        return Err(format!("{s} is not a time since boot"));
    }
    Ok(s)
}

pub fn read_uptime_s() -> Result<f64, String> {
    let p = Path::new("/proc/uptime");
    let text = read_capped(p, 4096).map_err(|e| e.to_string())?;
    parse_uptime(&text).map_err(|e| format!("/proc/uptime: {e}"))
}

/// The first value of a `key : value` field in `/proc/cpuinfo`
/// (`model name` on x86, `Model`/`CPU part` elsewhere).
pub fn cpuinfo_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

/// Files a process has open (`/proc/PID/fd/*` link targets) or mapped
/// (`/proc/PID/maps` path column). Model servers often mmap the weights and
/// close the descriptor (llama.cpp, safetensors), so both are needed.
pub fn open_and_mapped_files(pid: u32) -> Result<Vec<String>, ProcError> {
    let mut out = Vec::new();
    let fd_dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let entries = std::fs::read_dir(&fd_dir).map_err(|source| ProcError::Read { path: fd_dir.clone(), source })?;
    for e in entries.take(MAX_ENTRIES_PER_PROCESS) {
        // A descriptor closed between listing and readlink is not an error.
        let Ok(e) = e else { continue };
        if let Ok(t) = std::fs::read_link(e.path()) {
            out.push(t.to_string_lossy().into_owned());
        }
    }
    let maps = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = read_capped(&maps, 64 << 20)?;
    out.extend(parse_maps_paths(&text));
    out.sort();
    out.dedup();
    Ok(out)
}

/// The path column of `/proc/PID/maps` lines that map a file.
pub fn parse_maps_paths(text: &str) -> Vec<String> {
    text.lines()
        .take(MAX_ENTRIES_PER_PROCESS)
        .filter_map(|l| {
            // address perms offset dev inode [path]; the path may contain spaces.
            let mut rest = l;
            for _ in 0..5 {
                rest = rest.trim_start().split_once(char::is_whitespace)?.1;
            }
            let p = rest.trim();
            p.starts_with('/').then(|| p.trim_end_matches(" (deleted)").to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn proc_stat_busy_percent_is_the_non_idle_share_of_elapsed_ticks() {
        let a = parse_proc_stat(&fixture("proc_stat_a.txt")).unwrap();
        let b = parse_proc_stat(&fixture("proc_stat_b.txt")).unwrap();
        // Fixture: 200 ticks elapsed, 50 of them idle+iowait.
        assert_eq!(b.total - a.total, 200);
        assert_eq!(a.n_cpus, 2);
        assert_eq!(busy_percent(a, b), Some(75.0));
        assert_eq!(busy_percent(b, a), None, "counters going backwards is no reading");
        assert_eq!(busy_percent(a, a), None, "no elapsed ticks is no reading");
    }

    #[test]
    fn proc_stat_without_an_aggregate_line_or_with_junk_is_an_error() {
        assert!(parse_proc_stat("cpu0 1 2 3 4\n").is_err());
        assert!(parse_proc_stat("cpu  1 2 3 4\n").is_err(), "no per-CPU lines");
        assert!(parse_proc_stat("cpu  1 2 x 4\n").is_err());
        assert!(parse_proc_stat("cpu  1 2\n").is_err());
    }

    #[test]
    fn meminfo_reads_mem_available_in_kib_and_a_missing_field_is_none() {
        let t = fixture("meminfo.txt");
        assert_eq!(meminfo_kib(&t, "MemAvailable").unwrap(), Some(23_252_388));
        assert_eq!(meminfo_kib(&t, "MemTotal").unwrap(), Some(24_684_092));
        let old_kernel = fixture("meminfo_no_available.txt");
        assert_eq!(meminfo_kib(&old_kernel, "MemAvailable").unwrap(), None);
        assert!(meminfo_kib("MemAvailable: lots kB\n", "MemAvailable").is_err());
        assert!(meminfo_kib("MemAvailable: 5 pages\n", "MemAvailable").is_err());
    }

    #[test]
    fn uptime_is_the_first_field_and_rejects_junk() {
        assert_eq!(parse_uptime("542.76 373.63\n").unwrap(), 542.76);
        assert!(parse_uptime("").is_err());
        assert!(parse_uptime("-3 1").is_err());
        assert!(parse_uptime("NaN 1").is_err());
    }

    #[test]
    fn cpuinfo_model_name_is_found() {
        let t = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.10GHz\n";
        assert_eq!(cpuinfo_field(t, "model name").as_deref(), Some("Intel(R) Xeon(R) CPU @ 2.10GHz"));
        assert_eq!(cpuinfo_field(t, "Hardware"), None);
    }

    #[test]
    fn maps_paths_keep_spaces_and_drop_anonymous_mappings() {
        let t = fixture("proc_pid_maps.txt");
        let p = parse_maps_paths(&t);
        assert!(p.contains(&"/models/my model.gguf".to_string()), "{p:?}");
        assert!(p.contains(&"/usr/lib/x86_64-linux-gnu/libc.so.6".to_string()));
        assert!(p.contains(&"/tmp/gone.safetensors".to_string()), "deleted suffix stripped: {p:?}");
        assert!(!p.iter().any(|x| x.contains("[heap]") || x.contains("[stack]")));
    }

    #[test]
    fn reading_the_own_process_files_lists_the_executable_mapping() {
        let files = open_and_mapped_files(std::process::id()).unwrap();
        assert!(!files.is_empty());
    }
}
