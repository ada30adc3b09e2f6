//! `tuner propose`: turns a record into an entry of
//! `policy/draft-block-width.toml`, or refuses with the reason and the fix.
//!
//! The table is read and the result validated with the runtime's own
//! compiler ([`runtime::policy::table::compile`], the one `build.rs` runs),
//! so a proposed table is one the build accepts.
use std::path::{Path, PathBuf};

use runtime::policy::table::{self, RecordCheck};
use runtime::policy::{DrafterKind, TABLE_FILE};

use crate::summary::Summary;

/// Why a record cannot become an entry. Each message ends with the remedy.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the sweep is incomplete ({0}); finish it with `tuner sweep --resume DIR`, then `tuner summarize DIR`")]
    Incomplete(String),
    #[error("the record's key is unknown: {0}; re-run the sweep with one runtime build and one target")]
    Key(String),
    #[error(
        "the host drifted: round(s) {0} have opening and closing classic brackets that do not overlap, so no \
         ratio in the record is clean; re-run `tuner sweep` on a quiet host"
    )]
    Drift(String),
    #[error(
        "drift cannot be ruled out: round(s) {0} have fewer than 5 classic samples per bracket, too few for the \
         bracket check; re-run with more prompts or --bursts"
    )]
    DriftUnjudged(String),
    #[error(
        "output differs from classic decoding ({0}); speculation is not exact on this build: fix the runtime \
         (see `runtime generate --drafter ... --json` exactness_probe) before measuring widths"
    )]
    Inexact(String),
    #[error(
        "gate source(s) were accepted as unknown before arm(s) {0}: the host was not fully checked; re-run the \
         sweep without `--accept-unknown` on a host where every gate source can be read"
    )]
    AcceptedUnknown(String),
    #[error(
        "the chosen width {width} is not a measurement ({why}); a declined or zero-round arm measured classic \
         decoding: fix the drafter or the probe, then re-run the sweep"
    )]
    NotAMeasurement { width: usize, why: String },
    #[error(
        "the decision is `off`, but width(s) {0} were not measurements, so `off` is not shown for every width; \
         fix them and re-run the sweep"
    )]
    OffWithoutMeasurements(String),
    #[error("no decision: {0}; the record has no complete speculative arm with its brackets")]
    NoDecision(String),
    #[error("{dir} is not under {root}/records/; move the record folder there (entries cite records/<folder>)")]
    NotUnderRecords { dir: String, root: String },
    #[error("no policy table found above {0}: pass `--table PATH` (policy/draft-block-width.toml in the repository)")]
    NoTable(String),
    #[error("{0}")]
    Table(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Checks every refusal condition; `Ok` means the record may become an entry.
pub fn check(s: &Summary) -> Result<(), Refusal> {
    if !s.complete {
        let why = s.halt.as_ref().map_or_else(
            || format!("{} of {} arms complete", s.arms_complete, s.arms_planned),
            |h| format!("halted before arm {}: {}", h.arm, h.message),
        );
        return Err(Refusal::Incomplete(why));
    }
    if let Some(k) = &s.key_problem {
        return Err(Refusal::Key(k.clone()));
    }
    if s.drift {
        let r: Vec<String> = s.rounds.iter().filter(|r| r.drifted).map(|r| (r.round + 1).to_string()).collect();
        return Err(Refusal::Drift(r.join(", ")));
    }
    if s.drift_unjudged {
        let r: Vec<String> =
            s.rounds.iter().filter(|r| !r.incomplete && !r.judgeable).map(|r| (r.round + 1).to_string()).collect();
        return Err(Refusal::DriftUnjudged(r.join(", ")));
    }
    if !s.identical || !s.inexact_arms.is_empty() {
        let n: usize = s.widths.iter().map(|w| w.differences.len()).sum();
        let mut why = format!("{n} speculative and {} classic request(s) differ", s.bracket_differences.len());
        if let Some(d) = s.widths.iter().flat_map(|w| &w.differences).next() {
            why.push_str(&format!(
                "; first: width {} prompt {} at token {}",
                d.width.map_or("classic".into(), |w| w.to_string()),
                d.prompt_id,
                d.first_differing_token
            ));
        }
        if !s.inexact_arms.is_empty() {
            why.push_str(&format!("; arms {:?} ran inexact (allow_inexact or a failed probe)", s.inexact_arms));
        }
        return Err(Refusal::Inexact(why));
    }
    if !s.accepted_unknown.is_empty() {
        let a: Vec<String> =
            s.accepted_unknown.iter().map(|a| format!("{} ({})", a.arm, a.sources.join(", "))).collect();
        return Err(Refusal::AcceptedUnknown(a.join(", ")));
    }
    match s.decision.width {
        Some(w) => {
            if let Some(why) = s.widths.iter().find(|x| x.width == w).and_then(|x| x.not_a_measurement.clone()) {
                return Err(Refusal::NotAMeasurement { width: w, why });
            }
        }
        None => {
            if s.decision.ratio.is_none() {
                return Err(Refusal::NoDecision(s.decision.why.clone()));
            }
            let bad: Vec<String> =
                s.widths.iter().filter(|w| w.not_a_measurement.is_some()).map(|w| w.width.to_string()).collect();
            if !bad.is_empty() {
                return Err(Refusal::OffWithoutMeasurements(bad.join(", ")));
            }
        }
    }
    Ok(())
}

/// The table above `dir`: the first ancestor holding `policy/draft-block-width.toml`.
pub fn find_table(dir: &Path) -> Result<PathBuf, Refusal> {
    let start = dir.canonicalize().map_err(|source| Refusal::Io { path: dir.to_path_buf(), source })?;
    start
        .ancestors()
        .map(|a| a.join(TABLE_FILE))
        .find(|p| p.is_file())
        .ok_or_else(|| Refusal::NoTable(start.display().to_string()))
}

/// A one-line TOML basic string (TOML 1.0, "Basic strings").
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A short host identity for the entry's `host` field.
pub fn short_host(raw: &crate::raw::RawFile) -> String {
    let id = &raw.header.identity;
    let mut parts = vec![id.cpu.model.value.clone().unwrap_or_else(|| id.cpu.arch.clone())];
    if let Some(n) = id.cpu.threads_available.value {
        parts.push(format!("{n} threads available"));
    }
    if let Some(g) = id.nvidia.value.as_ref().and_then(|n| n.gpus.value.as_ref()) {
        parts.extend(g.iter().filter_map(|g| g.name.value.clone()));
    }
    if let Some(os) = &id.os.value {
        parts.push(os.clone());
    }
    if let Some(k) = &id.kernel_release.value {
        parts.push(format!("Linux {k}"));
    }
    parts.join(", ")
}

/// The entry's text.
pub fn entry_text(raw: &crate::raw::RawFile, s: &Summary, record: &str) -> Result<String, Refusal> {
    let (Some(device), Some(quant), Some(fp)) = (&s.device_class, &s.target_quant, &s.kernel_fingerprint) else {
        return Err(Refusal::Key(s.key_problem.clone().unwrap_or_else(|| "missing".into())));
    };
    let (Some(ratio), Some((lo, hi))) = (s.decision.ratio, s.decision.ratio_interval) else {
        return Err(Refusal::NoDecision(s.decision.why.clone()));
    };
    // Rounded outward, so the written interval still contains the written ratio.
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let (ratio, lo, hi) = (r3(ratio), (lo * 1000.0).floor() / 1000.0, (hi * 1000.0).ceil() / 1000.0);
    let width = match s.decision.width {
        Some(w) => w.to_string(),
        None => "\"off\"".to_string(),
    };
    let note = format!(
        "tuner propose: {}{}; {} rounds x {} bursts x {} prompts per arm, widths {:?}",
        if s.served { "served sweep (end-to-end tok/s of streamed requests): " } else { "" },
        s.decision.why,
        raw.header.settings.rounds,
        raw.header.settings.bursts,
        raw.header.prompts.len(),
        raw.header.settings.widths
    );
    Ok(format!(
        "[[entry]]\ndrafter = {}\ndevice_class = {}\ntarget_quant = {}\nblock_size = {width}\nrecord = {}\ndate = {}\n\
         ratio = {ratio}\nratio_interval = [{lo}, {hi}]\nhost = {}\nkernel_fingerprint = {}\nnote = {}\n",
        toml_str(&s.drafter),
        toml_str(device),
        toml_str(quant),
        toml_str(record),
        s.date,
        toml_str(&short_host(raw)),
        toml_str(fp),
        toml_str(&note),
    ))
}

/// The new table text: the entry for the key replaced, or appended.
pub fn replace_entry(old: &str, tbl: &table::Table, key: (DrafterKind, &str, &str), entry: &str) -> String {
    let lines: Vec<&str> = old.split_inclusive('\n').collect();
    let existing = tbl.lookup(key.0, key.1, key.2).and_then(|e| e.line);
    match existing {
        Some(start) => {
            let start = start - 1;
            // The entry runs to the next `[[entry]]` header (or the end), less trailing blank lines.
            let next = tbl
                .entries
                .iter()
                .filter_map(|e| e.line)
                .filter(|l| l - 1 > start)
                .min()
                .map_or(lines.len(), |l| l - 1);
            let mut end = next;
            while end > start + 1 && lines[end - 1].trim().is_empty() {
                end -= 1;
            }
            let mut out: String = lines[..start].concat();
            out.push_str(entry);
            out.push_str(&lines[end..].concat());
            out
        }
        None => {
            let mut out = old.to_string();
            if !out.ends_with('\n') && !out.is_empty() {
                out.push('\n');
            }
            out.push('\n');
            out.push_str(entry);
            out
        }
    }
}

/// A diff of one changed region: common lines trimmed, three lines of context.
pub fn diff(old: &str, new: &str, name: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let pre = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..].iter().rev().zip(b[pre..].iter().rev()).take_while(|(x, y)| x == y).count();
    if pre == a.len() && pre == b.len() {
        return format!("{name}: unchanged\n");
    }
    let mut out = format!("--- a/{name}\n+++ b/{name}\n@@ line {} @@\n", pre.saturating_sub(3) + 1);
    for l in &a[pre.saturating_sub(3)..pre] {
        out.push_str(&format!(" {l}\n"));
    }
    for l in &a[pre..a.len() - suf] {
        out.push_str(&format!("-{l}\n"));
    }
    for l in &b[pre..b.len() - suf] {
        out.push_str(&format!("+{l}\n"));
    }
    for l in a[a.len() - suf..].iter().take(3) {
        out.push_str(&format!(" {l}\n"));
    }
    out
}

/// What `propose` did.
pub struct Proposal {
    pub table: PathBuf,
    pub diff: String,
    pub written: bool,
}

/// Proposes the entry for the record in `dir`; writes the table unless `dry_run`.
pub fn propose(dir: &Path, table_path: Option<&Path>, dry_run: bool) -> anyhow::Result<Proposal> {
    let (raw, s) = crate::summary::summarize_dir(dir)?;
    check(&s)?;
    let table_path = match table_path {
        Some(p) => p.to_path_buf(),
        None => find_table(dir)?,
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Refusal::Io { path, source }
    };
    let table_abs = table_path.canonicalize().map_err(io(&table_path))?;
    let root =
        table_abs.parent().and_then(Path::parent).ok_or_else(|| Refusal::NoTable(table_abs.display().to_string()))?;
    let dir_abs = dir.canonicalize().map_err(io(dir))?;
    let record = match dir_abs.strip_prefix(root) {
        Ok(rel) if rel.starts_with("records") && rel.components().count() >= 2 => {
            rel.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/")
        }
        _ => {
            return Err(Refusal::NotUnderRecords {
                dir: dir_abs.display().to_string(),
                root: root.display().to_string(),
            }
            .into());
        }
    };
    let old = std::fs::read_to_string(&table_abs).map_err(io(&table_abs))?;
    let tbl = table::compile(TABLE_FILE, &old, RecordCheck::Skip).map_err(|e| Refusal::Table(e.to_string()))?;
    let drafter: DrafterKind =
        s.drafter.parse().map_err(|_| Refusal::Key(format!("drafter {:?} is not a drafter kind", s.drafter)))?;
    let entry = entry_text(&raw, &s, &record)?;
    let (Some(device), Some(quant)) = (s.device_class.as_deref(), s.target_quant.as_deref()) else {
        return Err(Refusal::Key(s.key_problem.clone().unwrap_or_default()).into());
    };
    let new = replace_entry(&old, &tbl, (drafter, device, quant), &entry);
    // The result must compile exactly as the build will compile it.
    let compiled = table::compile(TABLE_FILE, &new, RecordCheck::Under(root))
        .map_err(|e| Refusal::Table(format!("the proposed table does not compile: {e}")))?;
    if compiled.schema_version != tbl.schema_version {
        return Err(Refusal::Table("the schema version changed".into()).into());
    }
    let d = diff(&old, &new, TABLE_FILE);
    if !dry_run {
        let tmp = table_abs.with_extension("toml.tmp");
        std::fs::write(&tmp, &new).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &table_abs).map_err(io(&table_abs))?;
    }
    Ok(Proposal { table: table_abs, diff: d, written: !dry_run })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "schema_version = 1\n\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n\
target_quant = \"q4_1\"\nblock_size = 3\nrecord = \"records/a\"\ndate = 2026-01-01\nratio = 1.2\n\
ratio_interval = [1.1, 1.3]\nhost = \"h\"\nkernel_fingerprint = \"0123456789abcdef\"\n\n[[entry]]\n\
drafter = \"layerskip\"\ndevice_class = \"cpu:x86_64-avx2\"\ntarget_quant = \"q4_1\"\nblock_size = \"off\"\n\
record = \"records/b\"\ndate = 2026-01-01\nratio = 0.5\nratio_interval = [0.4, 0.6]\nhost = \"h\"\n\
kernel_fingerprint = \"0123456789abcdef\"\n";

    fn entry(w: &str) -> String {
        format!(
            "[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\ntarget_quant = \"q4_1\"\n\
             block_size = {w}\nrecord = \"records/c\"\ndate = 2026-11-29\nratio = 1.4\nratio_interval = [1.3, 1.5]\n\
             host = \"h\"\nkernel_fingerprint = \"0123456789abcdef\"\n"
        )
    }

    #[test]
    fn an_existing_key_is_replaced_in_place_and_others_are_kept() {
        let t = table::compile("t", TABLE, RecordCheck::Skip).unwrap();
        let new = replace_entry(TABLE, &t, (DrafterKind::Ngram, "cpu:x86_64-avx2", "q4_1"), &entry("5"));
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries.len(), 2);
        assert_eq!(c.entries[0].block_size, runtime::policy::Width::Blocks(5));
        assert_eq!(c.entries[0].record, "records/c");
        assert_eq!(c.entries[1].drafter, DrafterKind::Layerskip);
        let d = diff(TABLE, &new, "t");
        assert!(d.contains("-block_size = 3") && d.contains("+block_size = 5"), "{d}");
    }

    #[test]
    fn a_new_key_is_appended() {
        let t = table::compile("t", "schema_version = 1\n", RecordCheck::Skip).unwrap();
        let new = replace_entry(
            "schema_version = 1\n",
            &t,
            (DrafterKind::Ngram, "cpu:x86_64-avx2", "q4_1"),
            &entry("\"off\""),
        );
        let c = table::compile("t", &new, RecordCheck::Skip).unwrap();
        assert_eq!(c.entries[0].block_size, runtime::policy::Width::Off);
        assert_eq!(c.schema_version, 1);
    }

    #[test]
    fn strings_are_escaped_as_toml() {
        assert_eq!(toml_str("a \"b\"\n"), "\"a \\\"b\\\"\\n\"");
    }
}
