//! The sweep ledger: one line per sweep, finished or halted, kept or not,
//! in `records/ledger.jsonl` beside the record folders. A record folder can
//! be deleted; its ledger line stays (committed), so no sweep disappears
//! without a trace, and `tuner propose` shows a key's earlier sweeps and
//! which of them chose otherwise.
//!
//! A line names the folder relative to `records/`, the key (its phrase), the
//! verify-path fingerprint, the decision, the sha256 of raw.jsonl and the
//! outcome. The ledger is appended to, never rewritten.

use crate::data::bounded::BoundedError;
use crate::output::printable::printable;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The ledger's file name, in the `records/` folder.
pub const LEDGER_FILE: &str = "ledger.jsonl";

/// The ledger's schema version.
pub const LEDGER_SCHEMA_VERSION: u32 = 1;

/// Largest ledger read (a line is a few hundred bytes: tens of thousands of
/// sweeps).
pub const MAX_LEDGER_BYTES: u64 = 16 << 20;

/// One sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerLine {
    pub schema_version: u32,
    /// The record folder, relative to `records/`.
    pub folder: String,
    /// The sweep's date (`YYYY-MM-DD`), when the record could be read.
    pub date: Option<String>,
    /// The policy key's phrase; `None` when the record has no key.
    pub key: Option<String>,
    pub verify_fingerprint: Option<String>,
    /// `width 2`, `off`, or why there is no decision.
    pub decision: String,
    pub ratio: Option<f64>,
    pub ratio_interval: Option<[f64; 2]>,
    /// sha256 of raw.jsonl as it was when the line was written.
    pub raw_sha256: Option<String>,
    /// `complete`, `halted (<kind>)`, `no record (<why>)`, or a hand-written
    /// account of a sweep that ended otherwise.
    pub outcome: String,
    pub at_unix_ms: u64,
}

/// Errors reading or writing the ledger, naming the file and line.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is more than {MAX_LEDGER_BYTES} bytes, over the limit")]
    TooBig { path: PathBuf },
    #[error("{path}:{line}: not a ledger line: {why}")]
    Malformed { path: PathBuf, line: usize, why: String },
}

/// The `records/` folder that holds `dir` (its nearest ancestor named
/// `records`), and `dir` relative to it; `None` for a folder elsewhere.
pub fn records_of(dir: &Path) -> Option<(PathBuf, String)> {
    let abs = dir.canonicalize().ok()?;
    let records = abs.ancestors().skip(1).find(|a| a.file_name().is_some_and(|n| n == "records"))?;
    let rel = abs.strip_prefix(records).ok()?;
    let parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    Some((records.to_path_buf(), parts.join("/")))
}

/// Appends `line` to `records/ledger.jsonl`.
pub fn append(records: &Path, line: &LedgerLine) -> Result<(), LedgerError> {
    let path = records.join(LEDGER_FILE);
    let io = |source| LedgerError::Io { path: path.clone(), source };
    let mut text = serde_json::to_string(line).expect("a ledger line serializes");
    text.push('\n');
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_data().map_err(io)
}

/// Every line of the ledger in `records/` (none when it does not exist).
pub fn read(records: &Path) -> Result<Vec<LedgerLine>, LedgerError> {
    let path = records.join(LEDGER_FILE);
    // A regular file only, capped on what is read (a FIFO or a symlink to a
    // device reports 0 bytes and never ends).
    let bytes = match crate::data::bounded::read_capped(&path, MAX_LEDGER_BYTES) {
        Ok(b) => b,
        Err(BoundedError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(BoundedError::Io(source)) => return Err(LedgerError::Io { path, source }),
        Err(BoundedError::TooBig { .. }) => return Err(LedgerError::TooBig { path }),
    };
    let text = String::from_utf8(bytes).map_err(|_| LedgerError::Malformed {
        path: path.clone(),
        line: 0,
        why: "not UTF-8".into(),
    })?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line: LedgerLine = serde_json::from_str(l).map_err(|e| LedgerError::Malformed {
            path: path.clone(),
            line: i + 1,
            why: e.to_string(),
        })?;
        out.push(line);
    }
    Ok(out)
}

/// The key's earlier sweeps with this fingerprint, other than `folder`, each
/// as one line for `propose` to print; those whose decision differs from
/// `decision` are marked.
pub fn history(lines: &[LedgerLine], key: &str, fingerprint: &str, folder: &str, decision: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.key.as_deref() == Some(key) && l.verify_fingerprint.as_deref() == Some(fingerprint))
        .filter(|l| l.folder != folder)
        .map(|l| {
            let ratio = match (l.ratio, l.ratio_interval) {
                (Some(r), Some([lo, hi])) => format!(" at {r:.3} [{lo:.3}, {hi:.3}]"),
                _ => String::new(),
            };
            let differs = if l.decision != decision { " — DISAGREES with this record" } else { "" };
            // The ledger is a file anyone edits: its text is escaped for the terminal.
            format!(
                "{} ({}): {}{ratio}, {}{differs}",
                printable(&l.folder),
                printable(l.date.as_deref().unwrap_or("undated")),
                printable(&l.decision),
                printable(&l.outcome)
            )
        })
        .collect()
}

/// The decision in a ledger's words: `width 2`, `off`, or `none (why)`.
pub fn decision_of(s: &crate::analysis::summary::Summary) -> String {
    match (s.decision.width, s.decision.ratio) {
        (Some(crate::data::plan::SpeculativeArm::Adaptive), _) => "adaptive".into(),
        (Some(w), _) => format!("width {w}"),
        (None, Some(_)) => "off".into(),
        (None, None) => format!("none ({})", s.decision.why),
    }
}

/// The ledger line of the sweep in `dir` that ended with `outcome`, and the
/// `records/` folder it goes to; `None` when `dir` is not under one.
pub fn for_sweep(
    dir: &Path,
    outcome: String,
    summary: Result<&crate::analysis::summary::Summary, String>,
) -> Option<(PathBuf, LedgerLine)> {
    let (records, folder) = records_of(dir)?;
    let raw_sha256 = crate::data::bounded::read_capped(&dir.join("raw.jsonl"), crate::data::raw::MAX_RAW_BYTES)
        .ok()
        .map(|b| runtime::events::sha256_hex(&b));
    let at_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let line = match summary {
        Ok(s) => LedgerLine {
            schema_version: LEDGER_SCHEMA_VERSION,
            folder,
            date: Some(s.date.clone()),
            // Under load, the key's phrase says the concurrency, so a
            // key's history never sets a loaded sweep beside the idle ones.
            key: crate::analysis::rules::record_key(s).ok().map(|k| match s.served && s.concurrency > 1 {
                true => format!("{k} at concurrency {}", s.concurrency),
                false => k.to_string(),
            }),
            verify_fingerprint: s.verify_fingerprint.clone(),
            decision: decision_of(s),
            ratio: s.decision.ratio,
            ratio_interval: s.decision.ratio_interval.map(|(lo, hi)| [lo, hi]),
            raw_sha256,
            // A complete sweep whose record cannot become an entry says why:
            // its decision is the rule's, not a decision anyone may use.
            outcome: match crate::analysis::rules::check_concurrency(s).and_then(|()| crate::analysis::rules::check(s))
            {
                Ok(()) => outcome,
                Err(r) => format!("{outcome}; refused by the measurement rules: {r}"),
            },
            at_unix_ms,
        },
        Err(why) => LedgerLine {
            schema_version: LEDGER_SCHEMA_VERSION,
            folder,
            date: None,
            key: None,
            verify_fingerprint: None,
            decision: "none (no record)".into(),
            ratio: None,
            ratio_interval: None,
            raw_sha256,
            outcome: format!("{outcome}; no record: {why}"),
            at_unix_ms,
        },
    };
    Some((records, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(folder: &str, decision: &str) -> LedgerLine {
        LedgerLine {
            schema_version: LEDGER_SCHEMA_VERSION,
            folder: folder.into(),
            date: Some("2026-12-03".into()),
            key: Some("ngram on k".into()),
            verify_fingerprint: Some("0123456789abcdef".into()),
            decision: decision.into(),
            ratio: Some(1.2),
            ratio_interval: Some([1.1, 1.3]),
            raw_sha256: Some("a".repeat(64)),
            outcome: "complete".into(),
            at_unix_ms: 1,
        }
    }

    #[test]
    fn lines_append_and_read_back_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty(), "no ledger is an empty one");
        append(dir.path(), &line("a", "width 2")).unwrap();
        append(dir.path(), &line("b", "width 3")).unwrap();
        assert_eq!(read(dir.path()).unwrap(), vec![line("a", "width 2"), line("b", "width 3")]);
        std::fs::write(dir.path().join(LEDGER_FILE), "{\"schema_version\":1}\n").unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("ledger.jsonl:1: not a ledger line"), "{e}");
    }

    #[test]
    fn an_oversized_ledger_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join(LEDGER_FILE)).unwrap();
        f.set_len(MAX_LEDGER_BYTES + 1).unwrap();
        assert!(matches!(read(dir.path()), Err(LedgerError::TooBig { .. })));
    }

    #[test]
    fn a_ledger_that_never_ends_is_refused_not_read() {
        // A symlink to /dev/zero reports 0 bytes: only a cap on what is read sees it.
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(LEDGER_FILE)).unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a character device"), "{e}");
        // A FIFO no one writes: the open would wait for a writer.
        let dir = tempfile::tempdir().unwrap();
        crate::data::bounded::mkfifo(&dir.path().join(LEDGER_FILE));
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
    }

    #[test]
    fn history_lists_the_keys_earlier_sweeps_and_marks_those_that_disagree() {
        let mut other_key = line("c", "width 2");
        other_key.key = Some("ngram on another".into());
        let mut other_fp = line("d", "width 2");
        other_fp.verify_fingerprint = Some("ffffffffffffffff".into());
        let lines = [line("a", "width 2"), line("b", "width 3"), other_key, other_fp, line("this", "width 2")];
        let h = history(&lines, "ngram on k", "0123456789abcdef", "this", "width 2");
        assert_eq!(h.len(), 2, "{h:?}");
        assert!(h[0].starts_with("a (2026-12-03): width 2 at 1.200") && !h[0].contains("DISAGREES"), "{h:?}");
        assert!(h[1].starts_with("b (") && h[1].contains("DISAGREES"), "{h:?}");
    }

    #[test]
    fn history_escapes_what_the_ledger_says_before_it_reaches_a_terminal() {
        // A ledger line whose folder, date and outcome hold escape, bell
        // and newline bytes: printed raw they retitle the terminal and forge
        // a line of propose's output.
        let mut evil = line("x\u{1b}]0;title\u{7}\r\ntuner propose: wrote", "width 2\u{1b}[2K");
        evil.date = Some("2026\u{9b}31m".into());
        evil.outcome = "complete\u{202e}".into();
        let h = history(&[evil], "ngram on k", "0123456789abcdef", "this", "width 2");
        assert_eq!(h.len(), 1);
        assert!(!h[0].chars().any(|c| c.is_control() || c == '\u{202e}'), "{:?}", h[0]);
        assert!(h[0].starts_with("x\\u{1b}]0;title\\u{7}\\r\\ntuner propose: wrote (2026\\u{9b}31m)"), "{}", h[0]);
    }

    #[test]
    fn a_folder_is_named_relative_to_its_records_folder() {
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("records/2026-12-03-x");
        std::fs::create_dir_all(&rec).unwrap();
        let (records, rel) = records_of(&rec).unwrap();
        assert_eq!(rel, "2026-12-03-x");
        assert!(records.ends_with("records"));
        assert_eq!(records_of(dir.path()), None, "a folder outside records/ has no ledger");
    }
}
