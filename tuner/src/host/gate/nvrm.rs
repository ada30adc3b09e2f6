//! The NVIDIA driver's `NV_ERR_NO_MEMORY` count in the kernel log.
//!
//! Why: a driver that has started failing allocations skews every later
//! measurement and can take the host down; its errors only ever accumulate
//! within a boot, so the cumulative count is compared with a budget (halt),
//! and errors inside a recent window are a burst (wait).
//!
//! Sources, in order of preference: `/dev/kmsg` (non-blocking read of the
//! records still in the ring buffer), `journalctl -k -b` (the journal keeps
//! the whole boot even after the ring buffer wraps), `dmesg` (the ring buffer
//! again, through another door). A source *covers the boot* when it starts at
//! the boot's first record; one that does not (the ring buffer rotated, the
//! journal started late, the output was capped) gives only a lower bound on
//! the cumulative count, which is `unknown` unless the lower bound alone
//! already reaches the budget.
//!
//! What counts: a kernel-origin line whose message begins `NVRM:` and
//! contains `NV_ERR_NO_MEMORY`. Lines from user space that mention the string
//! (written to `/dev/kmsg` with a non-kernel facility, or a journal line with
//! another identifier), and kernel lines from other subsystems, do not.
//!
//! No NVIDIA driver loaded: the count is not applicable (the error can only be
//! logged by the driver), and the log is not read. See docs/gate-and-identity.md.
use std::io::Read;
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::gpu::DriverPresence;
use super::verdict::{Check, Source, Status, unknown_reason};
use crate::host::reading::Reading;

/// Largest log text kept from one source; more is a lower bound.
pub const MAX_LOG_BYTES: usize = 64 << 20;
/// A line longer than this is malformed (kmsg records are at most ~1 KiB).
pub const MAX_LINE_BYTES: usize = 16 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    Kmsg,
    Journal,
    Dmesg,
}

impl LogSource {
    pub fn describe(self) -> &'static str {
        match self {
            LogSource::Kmsg => "/dev/kmsg",
            LogSource::Journal => "journalctl -k -b --no-pager -o short-monotonic",
            LogSource::Dmesg => "dmesg",
        }
    }
}

/// The text one source gave.
#[derive(Clone, Debug, PartialEq)]
pub struct RawLog {
    pub text: String,
    /// The source had more than [`MAX_LOG_BYTES`]; the tail is missing.
    pub truncated: bool,
}

/// What the NVRM check is computed from.
#[derive(Clone, Debug)]
pub struct NvrmInput {
    pub driver: DriverPresence,
    pub uptime_s: Result<f64, String>,
    /// Sources in the order tried, each with its text or why it was unreadable.
    pub logs: Vec<(LogSource, Result<RawLog, String>)>,
    /// The cumulative count an earlier check of this gate saw; a smaller count
    /// now means the log lost lines in between.
    pub previous_cumulative: Option<u64>,
}

/// One parsed line.
#[derive(Clone, Debug, PartialEq)]
struct Line<'a> {
    /// kmsg sequence number.
    seq: Option<u64>,
    /// Seconds since boot, from the kernel's timestamp.
    ts_s: f64,
    /// Logged by the kernel (not written into the log by a user process).
    kernel: bool,
    msg: &'a str,
}

enum Parsed<'a> {
    Line(Line<'a>),
    /// Metadata or a continuation: neither a record nor malformed.
    Skip,
    Malformed,
}

/// `PRI,SEQ,TS_US,FLAGS[,...];MESSAGE` (Documentation/ABI/testing/dev-kmsg);
/// continuation lines (` KEY=VALUE`) start with a space.
fn parse_kmsg_line(l: &str) -> Parsed<'_> {
    if l.starts_with(' ') {
        return Parsed::Skip;
    }
    let Some((prefix, msg)) = l.split_once(';') else {
        return Parsed::Malformed;
    };
    let mut f = prefix.split(',');
    let (Some(pri), Some(seq), Some(ts)) = (f.next(), f.next(), f.next()) else {
        return Parsed::Malformed;
    };
    let (Ok(pri), Ok(seq), Ok(ts_us)) = (pri.parse::<u32>(), seq.parse::<u64>(), ts.parse::<u64>()) else {
        return Parsed::Malformed;
    };
    // Facility 0 is the kernel; user space writing to /dev/kmsg gets facility 1 (user).
    Parsed::Line(Line { seq: Some(seq), ts_s: ts_us as f64 / 1e6, kernel: pri >> 3 == 0, msg })
}

/// `[   12.345678] rest` → (12.345678, rest).
fn bracketed_ts(l: &str) -> Option<(f64, &str)> {
    let l = l.strip_prefix('[')?;
    let (ts, rest) = l.split_once(']')?;
    let ts: f64 = ts.trim().parse().ok()?;
    (ts.is_finite() && ts >= 0.0).then_some((ts, rest.strip_prefix(' ').unwrap_or(rest)))
}

/// `dmesg` lines, plain (`[ts] msg`) or with `-x` (`kern  :warn  : [ts] msg`).
/// Plain lines cannot show their origin and are taken as the kernel's.
fn parse_dmesg_line(l: &str) -> Parsed<'_> {
    if l.trim().is_empty() {
        return Parsed::Skip;
    }
    let (kernel, rest) = if l.starts_with('[') {
        (true, l)
    } else {
        // `FACILITY:LEVEL: [` with padding spaces, e.g. `kern  :notice: [`.
        let Some(i) = l.find('[') else {
            return Parsed::Malformed;
        };
        let prefix = &l[..i];
        let parts: Vec<&str> = prefix.split(':').map(str::trim).collect();
        if parts.len() != 3 || parts[0].is_empty() || parts[1].is_empty() || !parts[2].is_empty() {
            return Parsed::Malformed;
        }
        (parts[0] == "kern", &l[i..])
    };
    match bracketed_ts(rest) {
        Some((ts_s, msg)) => Parsed::Line(Line { seq: None, ts_s, kernel, msg }),
        None => Parsed::Malformed,
    }
}

/// `journalctl -o short-monotonic`: `[   12.345678] host IDENT[PID]: msg`;
/// `-- ... --` lines are journalctl's own notes.
fn parse_journal_line(l: &str) -> Parsed<'_> {
    if l.starts_with("-- ") || l.trim().is_empty() {
        return Parsed::Skip;
    }
    let Some((ts_s, rest)) = bracketed_ts(l) else {
        return Parsed::Malformed;
    };
    let Some((_host, rest)) = rest.split_once(' ') else {
        return Parsed::Malformed;
    };
    let Some((ident, msg)) = rest.split_once(": ") else {
        return Parsed::Malformed;
    };
    Parsed::Line(Line { seq: None, ts_s, kernel: ident == "kernel", msg })
}

/// Whether a kernel line reports the driver's allocation failure.
fn is_nvrm_no_memory(line: &Line<'_>) -> bool {
    line.kernel && line.msg.trim_start().starts_with("NVRM:") && line.msg.contains("NV_ERR_NO_MEMORY")
}

/// One source's text, parsed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParsedLog {
    pub source: LogSource,
    pub n_records: usize,
    pub n_malformed: usize,
    pub first_ts_s: Option<f64>,
    /// The text starts at the boot's first record and nothing is missing.
    pub covers_boot: bool,
    /// Why `covers_boot` is what it is.
    pub coverage: String,
    /// Kernel timestamps (s since boot) of each NVRM NV_ERR_NO_MEMORY line.
    pub error_ts_s: Vec<f64>,
    /// Lines that look like an NVRM NV_ERR_NO_MEMORY report but could not be
    /// parsed: counted into the cumulative total (fail closed), never into
    /// the recent window.
    pub n_untimed_errors: usize,
}

impl ParsedLog {
    pub fn cumulative(&self) -> u64 {
        (self.error_ts_s.len() + self.n_untimed_errors) as u64
    }

    /// Errors at or after `now_s - window_s`.
    pub fn recent(&self, now_s: f64, window_s: f64) -> u64 {
        self.error_ts_s.iter().filter(|&&t| t >= now_s - window_s).count() as u64
    }
}

pub fn parse(source: LogSource, raw: &RawLog) -> ParsedLog {
    let mut p = ParsedLog {
        source,
        n_records: 0,
        n_malformed: 0,
        first_ts_s: None,
        covers_boot: false,
        coverage: String::new(),
        error_ts_s: Vec::new(),
        n_untimed_errors: 0,
    };
    let mut first: Option<(Option<u64>, f64, bool)> = None;
    let mut last_seq: Option<u64> = None;
    let mut seq_gap: Option<(u64, u64)> = None;
    for l in raw.text.lines() {
        let parsed = if l.len() > MAX_LINE_BYTES {
            Parsed::Malformed
        } else {
            match source {
                LogSource::Kmsg => parse_kmsg_line(l),
                LogSource::Journal => parse_journal_line(l),
                LogSource::Dmesg => parse_dmesg_line(l),
            }
        };
        match parsed {
            Parsed::Skip => {}
            Parsed::Malformed => {
                p.n_malformed += 1;
                if l.contains("NVRM:") && l.contains("NV_ERR_NO_MEMORY") {
                    p.n_untimed_errors += 1;
                }
            }
            Parsed::Line(line) => {
                p.n_records += 1;
                if first.is_none() {
                    first = Some((line.seq, line.ts_s, line.msg.starts_with("Linux version")));
                }
                if let Some(s) = line.seq {
                    if let Some(prev) = last_seq
                        && s != prev + 1
                        && seq_gap.is_none()
                    {
                        seq_gap = Some((prev, s));
                    }
                    last_seq = Some(s);
                }
                if is_nvrm_no_memory(&line) {
                    p.error_ts_s.push(line.ts_s);
                }
            }
        }
    }
    p.first_ts_s = first.map(|f| f.1);
    (p.covers_boot, p.coverage) = match first {
        None => (false, "no kernel log records".to_string()),
        Some(_) if raw.truncated => (false, format!("output capped at {MAX_LOG_BYTES} bytes: later lines are missing")),
        Some((Some(seq), _, _)) if seq != 0 => (
            false,
            format!("the ring buffer rotated: the first record is #{seq}, so {seq} earlier records were overwritten"),
        ),
        Some(_) if seq_gap.is_some() => {
            let (a, b) = seq_gap.unwrap_or_default();
            (false, format!("records #{} to #{} were overwritten while reading", a + 1, b.saturating_sub(1)))
        }
        Some((Some(_), _, _)) => (true, "starts at record #0".to_string()),
        Some((None, ts, linux)) if ts <= 0.001 || linux => {
            (true, format!("starts at the boot's first line ({ts:.6} s)"))
        }
        Some((None, ts, _)) => (
            false,
            format!("the first line is {ts:.6} s after boot: earlier lines were rotated away or never collected"),
        ),
    };
    p
}

/// What each source gave, for the record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceAttempt {
    pub source: LogSource,
    /// `null` with the reason when the source could not be read.
    pub parsed: Reading<ParsedSummary>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParsedSummary {
    pub n_records: usize,
    pub n_malformed: usize,
    pub first_ts_s: Option<f64>,
    pub covers_boot: bool,
    pub coverage: String,
    pub cumulative: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvrmReading {
    pub driver: DriverPresence,
    /// False when no NVIDIA driver is loaded: nothing can log the error.
    pub applicable: bool,
    /// The source the counts come from.
    pub source: Option<LogSource>,
    /// Errors since boot (or since the oldest line still held, when
    /// `cumulative_is_lower_bound`).
    pub cumulative: Option<u64>,
    pub cumulative_is_lower_bound: bool,
    /// Errors within the last `window_s` seconds.
    pub recent: Option<u64>,
    pub window_s: f64,
    pub budget: u64,
    pub uptime_s: Option<f64>,
    pub last_error_ts_s: Option<f64>,
    pub sources: Vec<SourceAttempt>,
    pub note: String,
}

pub fn evaluate(input: &NvrmInput, budget: u64, window_s: f64) -> Check<NvrmReading> {
    let mut r = NvrmReading {
        driver: input.driver,
        applicable: input.driver != DriverPresence::Absent,
        source: None,
        cumulative: None,
        cumulative_is_lower_bound: false,
        recent: None,
        window_s,
        budget,
        uptime_s: input.uptime_s.as_ref().ok().copied(),
        last_error_ts_s: None,
        sources: Vec::new(),
        note: String::new(),
    };
    if !r.applicable {
        r.note = "no NVIDIA driver is loaded, so nothing can log NV_ERR_NO_MEMORY: not applicable, log not read".into();
        return Check::pass(r);
    }
    let mut parsed: Vec<ParsedLog> = Vec::new();
    for (source, raw) in &input.logs {
        let attempt = match raw {
            Ok(raw) => {
                let p = parse(*source, raw);
                let s = ParsedSummary {
                    n_records: p.n_records,
                    n_malformed: p.n_malformed,
                    first_ts_s: p.first_ts_s,
                    covers_boot: p.covers_boot,
                    coverage: p.coverage.clone(),
                    cumulative: p.cumulative(),
                };
                if p.n_records > 0 {
                    parsed.push(p);
                }
                Reading::ok(s)
            }
            Err(why) => Reading::unavailable(why.clone()),
        };
        r.sources.push(SourceAttempt { source: *source, parsed: attempt });
    }
    // The first source that covers the boot is authoritative; failing that,
    // the largest count any source holds is a lower bound.
    let best = parsed.iter().find(|p| p.covers_boot).or_else(|| parsed.iter().max_by_key(|p| p.cumulative()));
    let Some(best) = best else {
        let tried: Vec<String> = r
            .sources
            .iter()
            .map(|a| {
                format!("{}: {}", a.source.describe(), a.parsed.unavailable_reason.as_deref().unwrap_or("no records"))
            })
            .collect();
        let why = format!("no kernel log could be read ({})", tried.join("; "));
        r.note = why.clone();
        return Check {
            status: Status::Unknown,
            reasons: vec![unknown_reason(Source::Nvrm, &why)],
            reading: Reading::ok(r),
        };
    };
    let cumulative = best.cumulative();
    r.source = Some(best.source);
    r.cumulative = Some(cumulative);
    r.last_error_ts_s = best.error_ts_s.iter().copied().reduce(f64::max);
    let mut lower_bound_why = (!best.covers_boot).then(|| best.coverage.clone());
    if let Some(prev) = input.previous_cumulative
        && cumulative < prev
    {
        lower_bound_why =
            Some(format!("the count fell from {prev} to {cumulative} since the previous check: the log lost lines"));
        r.cumulative = Some(prev);
    }
    r.cumulative_is_lower_bound = lower_bound_why.is_some();
    let cumulative = r.cumulative.unwrap_or(cumulative);
    r.recent = input.uptime_s.as_ref().ok().map(|&now| best.recent(now, window_s));

    let mut reasons = Vec::new();
    if cumulative >= budget {
        let bound = if r.cumulative_is_lower_bound { "at least " } else { "" };
        reasons.push(format!(
            "nvrm: the NVIDIA driver logged {bound}{cumulative} NV_ERR_NO_MEMORY error(s) this boot ({}), \
             at or over the budget of {budget}; the count never decays: reboot the host, or raise `--nvrm-budget` \
             after reading the log",
            best.source.describe()
        ));
        r.note = "budget spent".into();
        return Check { status: Status::Halt, reasons, reading: Reading::ok(r) };
    }
    match r.recent {
        Some(n) if n > 0 => {
            reasons.push(format!(
                "nvrm: {n} NV_ERR_NO_MEMORY error(s) in the last {window_s} s; wait for the burst to pass"
            ));
            return Check { status: Status::Wait, reasons, reading: Reading::ok(r) };
        }
        Some(_) => {}
        None => {
            let why = format!(
                "cannot place errors in time: {}",
                input.uptime_s.as_ref().err().map_or("no uptime", |e| e.as_str())
            );
            r.note = why.clone();
            return Check {
                status: Status::Unknown,
                reasons: vec![unknown_reason(Source::Nvrm, &why)],
                reading: Reading::ok(r),
            };
        }
    }
    if let Some(why) = lower_bound_why {
        let why = format!(
            "the cumulative count {cumulative} from {} is only a lower bound ({why}), and no source covers the whole boot",
            best.source.describe()
        );
        r.note = why.clone();
        return Check {
            status: Status::Unknown,
            reasons: vec![unknown_reason(Source::Nvrm, &why)],
            reading: Reading::ok(r),
        };
    }
    r.note = format!("{} covers the boot: {}", best.source.describe(), best.coverage);
    Check { status: Status::Pass, reasons, reading: Reading::ok(r) }
}

/// Reads the records still in the kernel ring buffer through `/dev/kmsg`
/// without blocking: each `read` returns one record; `EAGAIN` means the
/// end; `EPIPE` means the next records were overwritten (the sequence gap
/// shows it to the parser).
pub fn read_kmsg() -> Result<RawLog, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .map_err(|e| format!("cannot open /dev/kmsg: {e}"))?;
    let mut text = String::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                if text.len() > MAX_LOG_BYTES {
                    return Ok(RawLog { text, truncated: true });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot read /dev/kmsg: {e}")),
        }
    }
    Ok(RawLog { text, truncated: false })
}

fn run_capture(program: &str, args: &[&str]) -> Result<RawLog, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{program} {} exited with {}: {}", args.join(" "), out.status, err.trim()));
    }
    let truncated = out.stdout.len() > MAX_LOG_BYTES;
    let bytes = &out.stdout[..out.stdout.len().min(MAX_LOG_BYTES)];
    Ok(RawLog { text: String::from_utf8_lossy(bytes).into_owned(), truncated })
}

pub fn read_journal() -> Result<RawLog, String> {
    run_capture("journalctl", &["-k", "-b", "--no-pager", "-o", "short-monotonic"])
}

/// `dmesg -x` shows each line's facility (so user-space lines are told
/// apart); busybox's dmesg lacks `-x`, so plain `dmesg` is the fallback.
pub fn read_dmesg() -> Result<RawLog, String> {
    run_capture("dmesg", &["-x"]).or_else(|e| run_capture("dmesg", &[]).map_err(|e2| format!("{e}; {e2}")))
}

/// Reads the sources in order of preference, stopping at the first that
/// covers the boot. Reads nothing when no driver is loaded.
pub fn collect(driver: DriverPresence) -> Vec<(LogSource, Result<RawLog, String>)> {
    let mut out = Vec::new();
    if driver == DriverPresence::Absent {
        return out;
    }
    for (source, read) in [
        (LogSource::Kmsg, read_kmsg as fn() -> Result<RawLog, String>),
        (LogSource::Journal, read_journal),
        (LogSource::Dmesg, read_dmesg),
    ] {
        let raw = read();
        let covers = raw.as_ref().is_ok_and(|r| parse(source, r).covers_boot);
        out.push((source, raw));
        if covers {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> RawLog {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        RawLog { text, truncated: false }
    }

    fn input(logs: Vec<(LogSource, Result<RawLog, String>)>, uptime: f64) -> NvrmInput {
        NvrmInput { driver: DriverPresence::Loaded, uptime_s: Ok(uptime), logs, previous_cumulative: None }
    }

    #[test]
    fn kmsg_counts_only_kernel_nvrm_lines_that_report_the_error() {
        let p = parse(LogSource::Kmsg, &fixture("kmsg_boot.txt"));
        // Fixture: 2 real NVRM NV_ERR_NO_MEMORY records; a user-space record
        // echoing the same text (facility 1), an nvidia-uvm line and an NVRM
        // line without the error don't count.
        assert_eq!(p.error_ts_s, vec![812.345678, 4000.5]);
        assert!(p.covers_boot, "{}", p.coverage);
        assert_eq!(p.n_malformed, 2, "two malformed lines in the fixture");
        assert_eq!(p.n_untimed_errors, 0);
    }

    #[test]
    fn a_rotated_kmsg_is_a_lower_bound_and_unknown_without_a_journal() {
        let p = parse(LogSource::Kmsg, &fixture("kmsg_rotated.txt"));
        assert!(!p.covers_boot);
        assert!(p.coverage.contains("rotated"), "{}", p.coverage);
        let c = evaluate(
            &input(
                vec![
                    (LogSource::Kmsg, Ok(fixture("kmsg_rotated.txt"))),
                    (LogSource::Journal, Err("journalctl: not found".into())),
                ],
                90_000.0,
            ),
            5,
            300.0,
        );
        assert_eq!(c.status, Status::Unknown, "{:?}", c.reasons);
        let r = c.reading.value.unwrap();
        assert!(r.cumulative_is_lower_bound);
        assert_eq!(r.cumulative, Some(1));
        assert!(c.reasons[0].contains("lower bound"), "{:?}", c.reasons);
    }

    #[test]
    fn a_rotated_kmsg_defers_to_a_journal_that_covers_the_boot() {
        let c = evaluate(
            &input(
                vec![
                    (LogSource::Kmsg, Ok(fixture("kmsg_rotated.txt"))),
                    (LogSource::Journal, Ok(fixture("journal_boot.txt"))),
                ],
                90_000.0,
            ),
            5,
            300.0,
        );
        assert_eq!(c.status, Status::Pass, "{:?}", c.reasons);
        let r = c.reading.value.unwrap();
        assert_eq!(r.source, Some(LogSource::Journal));
        // Journal fixture: 3 kernel NVRM errors; a python line echoing
        // "NVRM: ... NV_ERR_NO_MEMORY" is user space and not counted.
        assert_eq!(r.cumulative, Some(3));
        assert!(!r.cumulative_is_lower_bound);
        assert_eq!(r.recent, Some(0));
    }

    #[test]
    fn a_lower_bound_already_at_the_budget_halts() {
        let c = evaluate(&input(vec![(LogSource::Kmsg, Ok(fixture("kmsg_rotated.txt")))], 90_000.0), 1, 300.0);
        assert_eq!(c.status, Status::Halt);
        assert!(c.reasons[0].contains("at least 1"), "{:?}", c.reasons);
    }

    #[test]
    fn cumulative_at_or_over_budget_halts_and_a_recent_burst_under_budget_waits() {
        let log = || vec![(LogSource::Kmsg, Ok(fixture("kmsg_boot.txt")))];
        let c = evaluate(&input(log(), 4100.0), 2, 300.0);
        assert_eq!(c.status, Status::Halt);
        let c = evaluate(&input(log(), 4100.0), 10, 300.0);
        assert_eq!(c.status, Status::Wait, "error at 4000.5 s is within 300 s of 4100 s");
        assert_eq!(c.reading.value.unwrap().recent, Some(1));
        let c = evaluate(&input(log(), 9000.0), 10, 300.0);
        assert_eq!(c.status, Status::Pass, "{:?}", c.reasons);
    }

    #[test]
    fn a_count_that_falls_between_checks_is_a_lower_bound() {
        let mut i = input(vec![(LogSource::Journal, Ok(fixture("journal_boot.txt")))], 90_000.0);
        i.previous_cumulative = Some(7);
        let c = evaluate(&i, 100, 300.0);
        assert_eq!(c.status, Status::Unknown);
        let r = c.reading.value.unwrap();
        assert_eq!(r.cumulative, Some(7));
        assert!(r.cumulative_is_lower_bound);
    }

    #[test]
    fn dmesg_x_excludes_user_facility_lines_and_plain_dmesg_rotation_is_seen() {
        let p = parse(LogSource::Dmesg, &fixture("dmesg_x.txt"));
        assert!(p.covers_boot, "{}", p.coverage);
        assert_eq!(p.error_ts_s, vec![77.25]);
        let p = parse(LogSource::Dmesg, &fixture("dmesg_rotated.txt"));
        assert!(!p.covers_boot);
        assert_eq!(p.cumulative(), 1);
        assert_eq!(p.n_malformed, 1);
    }

    #[test]
    fn a_malformed_error_line_counts_toward_the_total_but_not_the_window() {
        let raw =
            RawLog { text: "0,0,0,-;Linux version 6\nbroken NVRM: x NV_ERR_NO_MEMORY\n".into(), truncated: false };
        let p = parse(LogSource::Kmsg, &raw);
        assert_eq!(p.cumulative(), 1);
        assert_eq!(p.recent(10.0, 300.0), 0);
    }

    #[test]
    fn every_source_unreadable_with_the_driver_loaded_is_unknown_and_blocks() {
        let c = evaluate(
            &input(
                vec![
                    (LogSource::Kmsg, Err("cannot open /dev/kmsg: Permission denied".into())),
                    (LogSource::Journal, Ok(RawLog { text: "-- No entries --\n".into(), truncated: false })),
                    (LogSource::Dmesg, Err("dmesg: read kernel buffer failed: Operation not permitted".into())),
                ],
                100.0,
            ),
            1,
            300.0,
        );
        assert_eq!(c.status, Status::Unknown);
        assert!(c.reasons[0].contains("--accept-unknown nvrm"), "{:?}", c.reasons);
        assert!(c.reasons[0].contains("Permission denied"));
        assert!(c.reasons[0].contains("no records"), "{:?}", c.reasons);
    }

    #[test]
    fn with_no_driver_the_count_is_not_applicable_and_passes() {
        let i =
            NvrmInput { driver: DriverPresence::Absent, uptime_s: Ok(1.0), logs: vec![], previous_cumulative: None };
        let c = evaluate(&i, 1, 300.0);
        assert_eq!(c.status, Status::Pass);
        let r = c.reading.value.unwrap();
        assert!(!r.applicable);
        assert_eq!(r.cumulative, None);
    }

    #[test]
    fn with_the_driver_state_unknown_the_log_is_still_required() {
        let i =
            NvrmInput { driver: DriverPresence::Unknown, uptime_s: Ok(1.0), logs: vec![], previous_cumulative: None };
        assert_eq!(evaluate(&i, 1, 300.0).status, Status::Unknown);
    }

    #[test]
    fn a_kmsg_sequence_gap_means_records_were_overwritten_while_reading() {
        let raw = RawLog { text: "6,0,0,-;Linux version 6\n6,1,10,-;a\n6,7,20,-;b\n".into(), truncated: false };
        let p = parse(LogSource::Kmsg, &raw);
        assert!(!p.covers_boot);
        assert!(p.coverage.contains("#2 to #6"), "{}", p.coverage);
    }

    #[test]
    fn the_live_kernel_log_parses_when_readable() {
        // Not every host lets us read it; when it does, records come back.
        if let Ok(raw) = read_kmsg() {
            let p = parse(LogSource::Kmsg, &raw);
            assert!(p.n_records > 0 || raw.text.is_empty(), "{}", p.coverage);
        }
    }

    #[test]
    fn a_capped_log_is_a_lower_bound() {
        let mut raw = fixture("journal_boot.txt");
        raw.truncated = true;
        let p = parse(LogSource::Journal, &raw);
        assert!(!p.covers_boot);
    }

    #[test]
    fn unknown_uptime_cannot_rule_out_a_burst() {
        let mut i = input(vec![(LogSource::Journal, Ok(fixture("journal_boot.txt")))], 0.0);
        i.uptime_s = Err("cannot read /proc/uptime".into());
        assert_eq!(evaluate(&i, 100, 300.0).status, Status::Unknown);
    }
}
