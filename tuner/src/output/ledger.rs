//! The sweep ledger: one line per sweep, finished or halted, kept or not,
//! in `records/ledger.jsonl` beside the record folders. A record folder can
//! be deleted; its ledger line stays (committed), so no sweep disappears
//! without a trace, and `tuner propose` shows a key's earlier sweeps and
//! which of them chose otherwise.
//!
//! A line names the folder relative to `records/`, the key (its phrase), the
//! verify-path fingerprint, the decision, the sha256 of raw.jsonl and the
//! outcome. The ledger is appended to, never rewritten.
//!
//! The ledger is also what `tuner propose` pools by: a record is pooled only
//! when its raw.jsonl is the one its folder's latest ledger line hashed
//! ([`vouched`]). The records committed before the ledger existed have lines
//! written afterwards from the committed files, marked `backfilled`
//! ([`backfill`]).

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
    /// The line was written after the sweep, from its committed record, for
    /// a sweep that ran before the ledger existed ([`backfill`]): its hash is
    /// of the file as committed, not as the sweep left it. Absent (false) on
    /// every line a sweep wrote itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backfilled: bool,
}

/// The first day of the ledger: every sweep from it on wrote its own line
/// (or has one written by hand saying why not), so only records dated
/// before it may be [`backfill`]ed.
pub const LEDGER_STARTED: &str = "2026-12-03";

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

/// [`read`] of the ledger a proposal trusts: the repository's own file, not
/// a symbolic link (one can lead out of the repository, to a ledger no
/// review saw). None at all is an empty ledger, which vouches for nothing.
pub fn read_own(records: &Path) -> Result<Vec<LedgerLine>, LedgerError> {
    let path = records.join(LEDGER_FILE);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => Err(LedgerError::Malformed {
            path,
            line: 0,
            why: "a symbolic link, not the repository's own ledger: commit the file itself".into(),
        }),
        _ => read(records),
    }
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
            let backfilled = if l.backfilled { " [backfilled]" } else { "" };
            // The ledger is a file anyone edits: its text is escaped for the terminal.
            format!(
                "{} ({}){backfilled}: {}{ratio}, {}{differs}",
                printable(&l.folder),
                printable(l.date.as_deref().unwrap_or("undated")),
                printable(&l.decision),
                printable(&l.outcome)
            )
        })
        .collect()
}

/// Why the ledger does not vouch for a record's raw.jsonl ([`vouched`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unvouched {
    #[error(
        "no line of records/{LEDGER_FILE} hashes its raw.jsonl (a sweep writes its line as it ends): a copy, or a \
         folder made by hand; a sweep that ran before {LEDGER_STARTED} gets its line with `tuner ledger backfill \
         DIR`"
    )]
    NoLine,
    #[error(
        "its raw.jsonl (sha256 {file}) is not the one its latest line of records/{LEDGER_FILE} hashed ({ledger}): \
         it was edited after the sweep; re-run the sweep, or, for a deliberate edit, append a line by hand saying \
         what was edited (docs/records.md, \"The ledger\")"
    )]
    Edited { file: String, ledger: String },
}

/// Whether the ledger vouches for `folder`'s raw.jsonl, whose sha256 is
/// `raw_sha256`: the latest of the folder's lines that hashes a raw.jsonl
/// must hash exactly this one (a later line supersedes an earlier one's
/// hash, as the line of a deliberate edit does). The line's index when it
/// does.
pub fn vouched(lines: &[LedgerLine], folder: &str, raw_sha256: &str) -> Result<usize, Unvouched> {
    let latest = lines
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, l)| l.folder == folder)
        .find_map(|(i, l)| l.raw_sha256.as_deref().map(|h| (i, h)));
    match latest {
        None => Err(Unvouched::NoLine),
        Some((i, h)) if h.eq_ignore_ascii_case(raw_sha256) => Ok(i),
        Some((_, h)) => Err(Unvouched::Edited { file: raw_sha256.to_string(), ledger: h.to_string() }),
    }
}

/// Why [`backfill`] wrote no line.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    #[error("{0} is not a record folder under a records/ folder")]
    NotUnderRecords(PathBuf),
    #[error("{dir}: the record cannot be read: {why}")]
    Unreadable { dir: PathBuf, why: String },
    #[error(
        "records/{folder} already has a line in records/{LEDGER_FILE}: only a record outside the ledger is \
         backfilled (a deliberate edit of raw.jsonl gets a line by hand saying what was edited)"
    )]
    HasLine { folder: String },
    #[error(
        "records/{folder} is dated {date:?}, not before {LEDGER_STARTED}, the ledger's first day: its sweep wrote \
         its own line, or ran outside the tuner (then a line is added by hand saying so); nothing is backfilled"
    )]
    AfterLedger { folder: String, date: String },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The ledger line of a record committed before the ledger existed, built
/// from its files as committed (the key, decision and hash a sweep would
/// have written, the measurement rules' verdict in the outcome) and marked
/// `backfilled`, with the `records/` folder it goes to. Refused for a folder
/// the ledger already names, or a record not dated before [`LEDGER_STARTED`].
pub fn backfill(dir: &Path) -> Result<(PathBuf, LedgerLine), BackfillError> {
    let (records, folder) = records_of(dir).ok_or_else(|| BackfillError::NotUnderRecords(dir.to_path_buf()))?;
    if read(&records)?.iter().any(|l| l.folder == folder) {
        return Err(BackfillError::HasLine { folder });
    }
    let unreadable = |why: String| BackfillError::Unreadable { dir: dir.to_path_buf(), why };
    let (_, s) = crate::analysis::summarize::summarize_dir(dir).map_err(|e| unreadable(format!("{e:#}")))?;
    // ISO dates order as strings; a date that is not one is not before the ledger.
    let iso = s.date.len() == 10
        && s.date.bytes().enumerate().all(|(i, b)| if matches!(i, 4 | 7) { b == b'-' } else { b.is_ascii_digit() });
    if !iso || s.date.as_str() >= LEDGER_STARTED {
        return Err(BackfillError::AfterLedger { folder, date: s.date.clone() });
    }
    let ended = if s.complete { "complete" } else { "incomplete" };
    let outcome = format!("{ended} (backfilled: the sweep ran before the ledger existed; hashed as committed)");
    let (records, mut line) =
        for_sweep(dir, outcome, Ok(&s)).ok_or_else(|| BackfillError::NotUnderRecords(dir.to_path_buf()))?;
    if line.raw_sha256.is_none() {
        return Err(unreadable("raw.jsonl could not be hashed".into()));
    }
    line.backfilled = true;
    Ok((records, line))
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
            // Under load, the key's phrase says the concurrency (", 4
            // sequences at once"), so a key's history never sets a loaded
            // sweep beside the idle ones.
            key: crate::analysis::rules::record_key(s).ok().map(|k| k.to_string()),
            verify_fingerprint: s.verify_fingerprint.clone(),
            decision: decision_of(s),
            ratio: s.decision.ratio,
            ratio_interval: s.decision.ratio_interval.map(|(lo, hi)| [lo, hi]),
            raw_sha256,
            // A complete sweep whose record cannot become an entry says why:
            // its decision is the rule's, not a decision anyone may use.
            outcome: match crate::analysis::rules::check(s) {
                Ok(()) => outcome,
                Err(r) => format!("{outcome}; refused by the measurement rules: {r}"),
            },
            at_unix_ms,
            backfilled: false,
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
            backfilled: false,
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
            backfilled: false,
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
    fn every_committed_record_is_vouched_for_by_the_committed_ledger() {
        // No committed record outside the ledger: `propose` pools none that is.
        let records = Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
        let lines = read(&records).unwrap();
        let mut n = 0;
        for d in std::fs::read_dir(&records).unwrap().flatten() {
            let Ok(bytes) = std::fs::read(d.path().join("raw.jsonl")) else { continue };
            let name = d.file_name().to_string_lossy().into_owned();
            let sha = runtime::events::sha256_hex(&bytes);
            assert!(vouched(&lines, &name, &sha).is_ok(), "records/{name}: {:?}", vouched(&lines, &name, &sha));
            n += 1;
        }
        assert!(n >= 61, "{n} records");
        // The 18 of 2026-11-29 to 12-02 by backfilled lines.
        let backfilled: Vec<&LedgerLine> = lines.iter().filter(|l| l.backfilled).collect();
        assert_eq!(backfilled.len(), 18);
        assert!(backfilled.iter().all(|l| l.date.as_deref().is_some_and(|d| d < LEDGER_STARTED)));
    }

    #[test]
    fn the_latest_hash_of_a_folder_vouches_and_an_earlier_one_does_not() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let mut edited = line("x", "width 2");
        edited.raw_sha256 = Some(b.clone());
        let mut no_hash = line("x", "none (no record)");
        no_hash.raw_sha256 = None;
        // x hashed a, then b (a deliberate edit), then a line with no hash.
        let lines = [line("x", "width 2"), line("y", "width 2"), edited, no_hash];
        assert_eq!(vouched(&lines, "x", &b), Ok(2));
        assert_eq!(vouched(&lines, "x", &b.to_uppercase()), Ok(2));
        assert_eq!(vouched(&lines, "x", &a), Err(Unvouched::Edited { file: a.clone(), ledger: b.clone() }));
        assert_eq!(vouched(&lines, "y", &a), Ok(1));
        assert_eq!(vouched(&lines, "z", &a), Err(Unvouched::NoLine));
        // A line written before the field existed reads as not backfilled.
        let old = serde_json::to_string(&line("x", "width 2")).unwrap();
        assert!(!old.contains("backfilled"), "{old}");
        let back: LedgerLine = serde_json::from_str(&old).unwrap();
        assert!(!back.backfilled);
    }

    #[test]
    fn a_ledger_that_is_a_symbolic_link_is_not_the_repositorys_own() {
        let elsewhere = tempfile::tempdir().unwrap();
        append(elsewhere.path(), &line("x", "width 2")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join(LEDGER_FILE), dir.path().join(LEDGER_FILE)).unwrap();
        assert_eq!(read(dir.path()).unwrap().len(), 1, "read follows it");
        let e = read_own(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        assert_eq!(read_own(elsewhere.path()).unwrap().len(), 1);
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
