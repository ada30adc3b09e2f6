//! Which committed records `tuner propose` pools ([`gather_pool`]): every
//! record of the key and verify fingerprint under `records/` that is
//!
//! - a real directory of the repository (neither it nor its raw.jsonl a
//!   symbolic link: a link can lead out of the repository, or make one
//!   sweep two folders);
//! - the sweep its ledger line hashed ([`crate::output::ledger::vouched`]:
//!   a raw.jsonl edited after its line, or a folder no line names, is not);
//! - one sweep once (its start time and its raw hash: a copy of a folder,
//!   under any name, counts once, or its rounds would narrow the interval
//!   they widen);
//! - a record the rules accept alone (measurement, plan, build).
//!
//! Every record of the key left out is named with why ([`LeftOut`]): in
//! `propose`'s output in full, and in the entry's note in short.
use std::collections::BTreeSet;
use std::path::Path;

use policy::PolicyKey;

use crate::analysis::pool::RecordRounds;
use crate::analysis::rules::{Allow, Refusal, check, record_key};
use crate::analysis::summary::Summary;
use crate::output::ledger::LedgerLine;

/// Record folders read when pooling, at most (a typo'd root must not read a disk).
pub const MAX_POOL_FOLDERS: usize = 4096;

/// One sweep, as the pool tells sweeps apart: its start time (raw.jsonl's
/// header) and the sha256 of its raw.jsonl. Two folders that share either
/// are one sweep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepId {
    pub started_at_unix_ms: u64,
    pub raw_sha256: String,
}

/// A record of `records/` left out of the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    /// `records/<folder>`.
    pub record: String,
    /// A few words for the entry's note.
    pub short: String,
    /// The whole reason, with its remedy.
    pub why: String,
}

/// The pool's records, and those left out.
pub type Gathered = (Vec<RecordRounds>, Vec<LeftOut>);

/// A pooled candidate before duplicates are removed.
struct Candidate {
    rounds: RecordRounds,
    sweep: SweepId,
    /// The ledger line that vouches for it (the proposed record sorts first).
    line: usize,
}

/// Every committed record of `key` with fingerprint `fp` directly under
/// `root/records` that the pool may read (the module's rules), as pool
/// rounds, and every record left out with why. `this` (`records/<folder>`,
/// summarized as `s`, its sweep `this_sweep`) is the record proposed: the
/// caller has checked it against the `ledger` and it is always pooled, and
/// of a sweep in two folders it is the one kept.
#[allow(clippy::too_many_arguments)] // each is one of the proposal's facts
pub fn gather_pool(
    root: &Path,
    this: &str,
    this_sweep: &SweepId,
    s: &Summary,
    key: &PolicyKey,
    fp: &str,
    allow: Allow,
    ledger: &[LedgerLine],
) -> Result<Gathered, Refusal> {
    let dir = root.join("records");
    let io = |source| Refusal::Io { path: dir.clone(), source };
    let mut left: Vec<LeftOut> = Vec::new();
    let out = |left: &mut Vec<LeftOut>, record: &str, short: &str, why: String| {
        left.push(LeftOut { record: record.to_string(), short: short.to_string(), why })
    };
    let mut names: Vec<String> = Vec::new();
    let mut seen = 0usize;
    for e in std::fs::read_dir(&dir).map_err(io)? {
        let e = e.map_err(io)?;
        seen += 1;
        if seen > MAX_POOL_FOLDERS {
            return Err(Refusal::Table(format!("{} holds more than {MAX_POOL_FOLDERS} entries", dir.display())));
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = format!("records/{name}");
        // The entry itself, not what it leads to.
        let t = e.file_type().map_err(io)?;
        let raw = e.path().join("raw.jsonl");
        if t.is_symlink() {
            // Only a link that leads to a record is one the pool would have read.
            if raw.is_file() {
                let to = std::fs::read_link(e.path()).map_or_else(|_| "?".into(), |p| p.display().to_string());
                out(
                    &mut left,
                    &rel,
                    "a symbolic link",
                    format!(
                        "a symbolic link (to {to}), not a folder of the repository: only real directories under \
                         records/ are pooled; commit the record folder itself"
                    ),
                );
            }
            continue;
        }
        if !t.is_dir() {
            continue;
        }
        match std::fs::symlink_metadata(&raw) {
            // A folder without raw.jsonl is no sweep (a calibration's record).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => out(&mut left, &rel, "cannot be read", format!("its raw.jsonl cannot be read: {e}")),
            Ok(m) if m.file_type().is_symlink() => out(
                &mut left,
                &rel,
                "raw.jsonl is a symbolic link",
                "its raw.jsonl is a symbolic link, not the file the sweep wrote: only a record's own files are \
                 pooled; commit the file itself"
                    .into(),
            ),
            Ok(_) => names.push(name),
        }
    }
    names.sort();
    let mut candidates: Vec<Candidate> = Vec::new();
    for n in names {
        let rel = format!("records/{n}");
        if rel == this {
            candidates.push(Candidate { rounds: RecordRounds::of(&rel, s), sweep: this_sweep.clone(), line: 0 });
            continue;
        }
        let (raw, sha) = match crate::data::raw::read_raw_with_sha256(&dir.join(&n).join("raw.jsonl")) {
            Ok(x) => x,
            Err(e) => {
                out(&mut left, &rel, "cannot be read", format!("its raw.jsonl cannot be read: {e}"));
                continue;
            }
        };
        let other = match crate::analysis::summarize::summarize_with(&raw, false) {
            Ok(o) => o,
            Err(e) => {
                out(&mut left, &rel, "cannot be summarized", format!("it cannot be summarized: {e:#}"));
                continue;
            }
        };
        if record_key(&other).ok().as_ref() != Some(key) || other.verify_fingerprint.as_deref() != Some(fp) {
            continue;
        }
        let line = match crate::output::ledger::vouched(ledger, &n, &sha) {
            Ok(i) => i,
            Err(u) => {
                let short = match u {
                    crate::output::ledger::Unvouched::NoLine => "not in the ledger",
                    crate::output::ledger::Unvouched::Edited { .. } => "raw.jsonl edited after its ledger line",
                };
                out(&mut left, &rel, short, u.to_string());
                continue;
            }
        };
        // A record the rules would refuse alone does not count in a pool
        // either, under the same `--allow-*` flags: its data, its plan and
        // its build (a dirty build is code no commit holds). One of another
        // concurrency has another key, and is never among them.
        let why = check(&other)
            .err()
            .or_else(|| {
                crate::analysis::rules::plan::check_plan(
                    &other,
                    raw.header.settings.design.bracket_arms,
                    allow.weak_plan,
                )
                .err()
            })
            .or_else(|| if allow.dirty { None } else { crate::analysis::rules::check_build(&raw).err() });
        match why {
            Some(r) => out(&mut left, &rel, "refused alone", r.to_string()),
            None => candidates.push(Candidate {
                rounds: RecordRounds::of(&rel, &other),
                sweep: SweepId { started_at_unix_ms: raw.header.started_at_unix_ms, raw_sha256: sha },
                // After the proposed record: the first line that vouched.
                line: line + 1,
            }),
        }
    }
    if !candidates.iter().any(|c| c.rounds.record == this) {
        candidates.push(Candidate { rounds: RecordRounds::of(this, s), sweep: this_sweep.clone(), line: 0 });
    }
    // One sweep once: the proposed record first, then the sweep's earliest
    // vouched folder (the original; a copy's line came later).
    candidates.sort_by(|a, b| (a.line, &a.rounds.record).cmp(&(b.line, &b.rounds.record)));
    let mut starts: BTreeSet<u64> = BTreeSet::new();
    let mut hashes: BTreeSet<String> = BTreeSet::new();
    let mut kept: Vec<(SweepId, String)> = Vec::new();
    let mut pooled: Vec<RecordRounds> = Vec::new();
    for c in candidates {
        let raw_sha = c.sweep.raw_sha256.to_ascii_lowercase();
        if starts.contains(&c.sweep.started_at_unix_ms) || hashes.contains(&raw_sha) {
            let first = kept
                .iter()
                .find(|(k, _)| {
                    k.started_at_unix_ms == c.sweep.started_at_unix_ms || k.raw_sha256.eq_ignore_ascii_case(&raw_sha)
                })
                .map_or_else(String::new, |(_, r)| r.clone());
            out(
                &mut left,
                &c.rounds.record,
                &format!("the same sweep as {first}"),
                format!(
                    "the same sweep as {first} (started at {} ms, raw.jsonl sha256 {}): a sweep's rounds count \
                     once, whatever folders hold them; remove the copy",
                    c.sweep.started_at_unix_ms, c.sweep.raw_sha256
                ),
            );
            continue;
        }
        starts.insert(c.sweep.started_at_unix_ms);
        hashes.insert(raw_sha);
        kept.push((c.sweep, c.rounds.record.clone()));
        pooled.push(c.rounds);
    }
    pooled.sort_by(|a, b| a.record.cmp(&b.record));
    left.sort_by(|a, b| a.record.cmp(&b.record));
    Ok((pooled, left))
}

/// The left-out records as the entry's note names them:
/// `records/a (not in the ledger), records/b (refused alone)`.
pub fn note_text(left: &[LeftOut]) -> String {
    left.iter().map(|l| format!("{} ({})", l.record, l.short)).collect::<Vec<_>>().join(", ")
}
