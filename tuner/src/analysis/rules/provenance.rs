//! Provenance rules: was the record measured by a clean build of this tree,
//! under this build's verify-path fingerprint, and is it no older than the
//! entry it would replace? Each refusal here has an `--allow-*` flag
//! ([`Allow`]); [`check_provenance`] applies them together.
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use policy::Entry;
use runtime::build_info::GitDirty;

use super::Refusal;
use crate::analysis::summary::Summary;
use crate::data::raw::{RawFile, RawLine};

/// Which refusals the operator overrode (`--allow-dirty`,
/// `--allow-stale-fingerprint`, `--allow-older`, `--allow-loose-gate`). The
/// default refuses all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allow {
    /// A dirty build, or one whose dirty state is unknown.
    pub dirty: bool,
    /// A kernel fingerprint other than this build's.
    pub stale_fingerprint: bool,
    /// A record dated before the entry it replaces.
    pub older: bool,
    /// A sweep whose gate was looser than the defaults (`--allow-loose-gate`).
    pub loose_gate: bool,
    /// A plan weaker than the rules (`--allow-weak-plan`): an arm read fewer
    /// than twice while it ran, or a drift test that cannot detect a 10 % drift.
    pub weak_plan: bool,
}

/// Sorted, deduplicated, comma-separated.
fn list<T: ToString + Ord>(xs: impl IntoIterator<Item = T>) -> String {
    xs.into_iter().collect::<BTreeSet<T>>().iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Refuses a record any of whose arms ran a dirty build, or a build whose
/// dirty state is unknown (anything but [`GitDirty::Clean`] is refused).
///
/// Every `startup` in raw.jsonl counts, failed attempts included: a resumed
/// sweep whose attempts ran different builds is not one build's measurement.
pub fn check_build(raw: &RawFile) -> Result<(), Refusal> {
    let mut dirty: BTreeMap<usize, &str> = BTreeMap::new();
    let mut unknown: BTreeMap<usize, &str> = BTreeMap::new();
    let mut any = false;
    for l in &raw.lines {
        if let RawLine::Startup(a) = l {
            any = true;
            let b = &a.startup.build;
            match b.git_dirty {
                GitDirty::Clean => {}
                GitDirty::Dirty => {
                    dirty.insert(a.arm, &b.git_commit);
                }
                GitDirty::Unknown => {
                    unknown.insert(a.arm, "null (unknown)");
                }
            }
        }
    }
    if !dirty.is_empty() {
        return Err(Refusal::DirtyBuild { arms: list(dirty.keys()), commits: list(dirty.values()) });
    }
    if !unknown.is_empty() {
        let why = format!(
            "`build.git_dirty` is {} in their startup events: git could not say when the runtime was built",
            list(unknown.values())
        );
        return Err(Refusal::DirtyUnknown { arms: list(unknown.keys()), why });
    }
    if !any {
        return Err(Refusal::DirtyUnknown { arms: "none".into(), why: "raw.jsonl has no startup event".into() });
    }
    Ok(())
}

/// This build's verify-path fingerprint for the record's key (device class
/// and weight formats): the runtime library this tuner links is built from
/// the same tree as the table will be compiled into.
pub fn current_fingerprint(s: &Summary) -> Option<String> {
    let device = policy::DeviceClass::parse(s.device_class.as_deref()?).ok()?;
    Some(runtime::policy::verify_fingerprint(&device, s.weight_formats.as_deref()))
}

/// Refuses a record measured under another verify-path fingerprint than
/// `current` ([`current_fingerprint`]). The record's fingerprint is the one
/// every complete arm's `startup` reported ([`Summary::verify_fingerprint`]).
pub fn check_fingerprint(s: &Summary, current: &str) -> Result<(), Refusal> {
    match &s.verify_fingerprint {
        Some(fp) if fp == current => Ok(()),
        Some(fp) => Err(Refusal::StaleFingerprint { record: fp.clone(), current: current.to_string() }),
        None => Err(Refusal::Key(s.key_problem.clone().unwrap_or_else(|| "no verify-path fingerprint".into()))),
    }
}

/// `YYYY-MM-DD` with a plausible month and day (the shape the table compiler
/// accepts), so dates compare as strings.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && digits(0..4)
        && digits(5..7)
        && digits(8..10)
        && (1..=12).contains(&s[5..7].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&s[8..10].parse::<u32>().unwrap_or(0))
}

/// Refuses a record strictly older than the entry it would replace
/// (`existing`, the table's entry for the record's key, if any).
///
/// Tie rule: a record of the same date as the entry is allowed. The table
/// keeps only the day, so two sweeps of one day cannot be ordered from it;
/// the usual case is a re-run that supersedes the morning's, and the diff
/// shows the reviewer what is replaced.
pub fn check_not_older(s: &Summary, existing: Option<&Entry>) -> Result<(), Refusal> {
    if !is_date(&s.date) {
        return Err(Refusal::BadDate(s.date.clone()));
    }
    match existing {
        // The compiler checked the entry's date has the same shape, so the
        // string order is the date order.
        Some(e) if s.date.as_str() < e.date.as_str() => Err(Refusal::Older {
            record_date: s.date.clone(),
            key: e.key.to_string(),
            entry_record: e.record.clone(),
            entry_date: e.date.clone(),
        }),
        _ => Ok(()),
    }
}

/// The provenance checks, each unless `allow` overrides it: the build was
/// clean ([`check_build`]), its kernel fingerprint is `current`
/// ([`check_fingerprint`]), and the record is not older than `existing`
/// ([`check_not_older`]). Returns the refusals that were overridden, with the
/// flag that overrode each, for the operator to see.
pub fn check_provenance(
    raw: &RawFile,
    s: &Summary,
    existing: Option<&Entry>,
    current_fingerprint: &str,
    allow: Allow,
) -> Result<Vec<String>, Refusal> {
    let mut overridden = Vec::new();
    let checks: [(Result<(), Refusal>, bool, &str); 3] = [
        (check_build(raw), allow.dirty, "--allow-dirty"),
        (check_fingerprint(s, current_fingerprint), allow.stale_fingerprint, "--allow-stale-fingerprint"),
        (check_not_older(s, existing), allow.older, "--allow-older"),
    ];
    for (result, allowed, flag) in checks {
        match result {
            Ok(()) => {}
            // A damaged date or an unknown key is not a judgement a flag can override.
            Err(r @ (Refusal::BadDate(_) | Refusal::Key(_))) => return Err(r),
            Err(r) if allowed => overridden.push(format!("{flag}: {r}")),
            Err(r) => return Err(r),
        }
    }
    Ok(overridden)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_compare_only_when_well_formed() {
        assert!(is_date("2026-11-29"));
        for bad in ["2026-13-01", "2026-1-01", "26-11-29", "2026-11-29T00:00:00", ""] {
            assert!(!is_date(bad), "{bad}");
        }
    }
}
