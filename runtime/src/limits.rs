//! Bounds on the numbers a user or a file gives the runtime (the drafter's
//! own settings are bounded where they are resolved, `spec/setup.rs`):
//! each check names the flag (or file) and the range it accepts, so a
//! refusal says how to fix it, and no value reaches an allocation or a loop
//! unchecked.

use std::time::Duration;

/// `--threads` above this many times the CPUs available is refused: past
/// that the engine only loses speed (each extra thread is a context switch
/// per parallel section), and a huge value would allocate per thread.
pub const MAX_THREADS_PER_CPU: usize = 4;

/// Reads `path` whole, refusing a file larger than `cap` bytes with a
/// message naming the file and the cap (a path to `/dev/zero` or a huge
/// file costs at most `cap + 1` bytes).
pub fn read_capped(path: &std::path::Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    f.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is larger than {cap} bytes, the most this runtime reads from such a file", path.display()),
        ));
    }
    Ok(buf)
}

/// Largest `--prompts` file read (a prompt set is a few kB to a few MB).
pub const MAX_PROMPT_FILE_BYTES: u64 = 64 << 20;

/// Largest Hugging Face `config.json` to read (real ones are a few kB). The
/// checkpoint loader (`model/hf.rs`) is to read it with [`read_capped`].
pub const MAX_CONFIG_JSON_BYTES: u64 = 16 << 20;

/// A `--prompts` file as text, read with [`MAX_PROMPT_FILE_BYTES`] as its cap.
pub fn read_prompt_file(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    let bytes = read_capped(path, MAX_PROMPT_FILE_BYTES).with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", path.display()))
}

/// The CPUs available to this process (at least 1).
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Checks `--threads` against the host: an error at 0 or above
/// [`MAX_THREADS_PER_CPU`] × `cpus`; `Ok(Some(warning))` above `cpus`.
pub fn check_threads(threads: usize, cpus: usize) -> Result<Option<String>, String> {
    let cpus = cpus.max(1);
    let most = cpus.saturating_mul(MAX_THREADS_PER_CPU);
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if threads > most {
        return Err(format!(
            "--threads {threads} is more than {MAX_THREADS_PER_CPU} per available CPU ({cpus} CPUs, so at most {most}); \
             give at most {cpus}, the CPUs this process may use"
        ));
    }
    if threads > cpus {
        return Ok(Some(format!(
            "--threads {threads} is more than the {cpus} CPUs available: threads will share CPUs and decoding slows \
             down; give at most {cpus}"
        )));
    }
    Ok(None)
}

/// The thread count to run with: the flag (checked, a warning logged) or
/// every available CPU.
pub fn resolve_threads(flag: Option<usize>) -> anyhow::Result<usize> {
    let cpus = available_cpus();
    match flag {
        None => Ok(cpus),
        Some(t) => match check_threads(t, cpus) {
            Ok(None) => Ok(t),
            Ok(Some(warning)) => {
                tracing::warn!("{warning}");
                Ok(t)
            }
            Err(e) => anyhow::bail!(e),
        },
    }
}

/// `generate --repeat` and `bench --reps`: recorded passes (a sweep uses 1,
/// a careful benchmark tens).
pub const MAX_PASSES: u64 = 10_000;

/// `generate --warmup` and `bench --warmup`: unrecorded passes first.
pub const MAX_WARMUP_PASSES: u64 = 1_000;

/// `bench --prompt-tokens`, `--gen-tokens` and the width curve's
/// `--max-tokens`, before the model's own context length (checked once the
/// model is open) is known: no allocation is sized by a larger number.
pub const MAX_BENCH_TOKENS: u64 = 1 << 20;

/// `bench --verify-cost --max-rows`: the most rows of a verify pass timed
/// (the policy's widest draft is 32, a pass of 33 rows; the curve past it is
/// still informative).
pub const MAX_VERIFY_ROWS: u64 = 256;

/// A number flag checked against `lo..=hi`, naming the flag when it is not.
pub fn check_range(flag: &str, v: u64, lo: u64, hi: u64) -> Result<u64, String> {
    if v < lo || v > hi {
        return Err(format!("{flag} {v} is out of range: give {lo} to {hi}"));
    }
    Ok(v)
}

/// A duration flag in milliseconds, checked against `lo..=hi` ms.
pub fn check_ms(flag: &str, ms: u64, lo: u64, hi: u64) -> Result<Duration, String> {
    check_range(flag, ms, lo, hi).map(Duration::from_millis)
}

/// `on` or `off`, as the `--adaptive` flags take them (`runtime` and
/// `tuner sweep --adaptive-arm`).
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: give on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_refused_at_zero_and_past_the_multiple_and_warned_past_the_cores() {
        assert!(check_threads(0, 2).is_err());
        assert_eq!(check_threads(2, 2), Ok(None));
        assert!(check_threads(3, 2).unwrap().unwrap().contains("more than the 2 CPUs"));
        assert!(check_threads(8, 2).unwrap().is_some());
        let e = check_threads(9, 2).unwrap_err();
        assert!(e.contains("at most 8") && e.contains("--threads 9"), "{e}");
        // No overflow on the largest values.
        assert!(check_threads(usize::MAX, usize::MAX).is_ok());
        assert!(check_threads(usize::MAX, 2).is_err());
    }

    #[test]
    fn a_capped_read_refuses_past_the_cap_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        std::fs::write(&p, vec![b'x'; 101]).unwrap();
        assert_eq!(read_capped(&p, 101).unwrap().len(), 101);
        let e = read_capped(&p, 100).unwrap_err().to_string();
        assert!(e.contains("big.json") && e.contains("100 bytes"), "{e}");
        // An endless file costs the cap, not the disk.
        if std::path::Path::new("/dev/zero").exists() {
            assert!(read_capped(std::path::Path::new("/dev/zero"), 1 << 20).is_err());
        }
    }

    #[test]
    fn ranges_name_the_flag() {
        assert_eq!(check_range("--x", 5, 1, 10), Ok(5));
        assert_eq!(check_range("--x", 0, 1, 10).unwrap_err(), "--x 0 is out of range: give 1 to 10");
        assert_eq!(check_ms("--t-ms", 100, 1, 1000), Ok(Duration::from_millis(100)));
    }
}
