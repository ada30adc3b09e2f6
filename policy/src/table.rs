//! The policy table compiler: `policy/draft-block-width.toml` (schema 3,
//! documented in `policy/README.md`) → a validated [`Table`].
//!
//! `runtime/build.rs` runs [`compile`] on the table with the record check
//! on, so a table that does not compile fails the build with a message
//! naming the file, the entry and the problem; the runtime runs it again on
//! the bytes the build validated. `tuner propose` compiles what it writes
//! with it. Tests call it on bad inputs.

use crate::drafting::Drafting;
use crate::host::HostClass;
use crate::key::{DeviceClass, MAX_CONCURRENCY, MAX_THREADS, ModelClass, PRECISION_FORMATS, PolicyKey};
use crate::kind::{DrafterKind, DrafterSettings};
use crate::width::{MAX_WIDTH, Width};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path};

/// The schema version this compiler reads.
pub const SCHEMA_VERSION: u32 = 3;

/// The most weight formats an entry may list.
const MAX_FORMATS: usize = 32;

/// Hex digits of a verify-path fingerprint (64 bits of sha256).
pub const FINGERPRINT_LEN: usize = 16;

/// Biggest table the compiler reads (a table is reviewed by hand: a few
/// hundred entries at most).
pub const MAX_TABLE_BYTES: usize = 1 << 20;

/// Most `[[entry]]` tables the compiler reads: a real entry is about 700
/// bytes, so [`MAX_TABLE_BYTES`] holds some 1,500 of them; past this count
/// the table is headers without entries, not a table to review.
pub const MAX_ENTRIES: usize = 4096;

/// The measured model file, for reviewers and the provenance: its file name
/// (no directories: a record names models by name and sha256) and sha256.
/// Its architecture and parameter count are in the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelFile {
    pub file: String,
    pub sha256: String,
}

/// The prompt set an entry was measured on: its name (a path relative to
/// the repository, or the name the tuner gave it) and the sha256 of its
/// bytes. Not part of the key: the entry's ratio is this workload's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PromptSet {
    pub name: String,
    pub sha256: String,
}

/// The cost of a verify pass at one context length, as a sweep measured
/// it: `relative[i]` is a pass of `i + 1` rows over a one-row pass (so
/// `relative[0]` is 1), the geometric mean over the sweep's rounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostCurve {
    /// Positions in the cache before the pass (the prompt's length).
    pub context: usize,
    pub relative: Vec<f64>,
}

impl CostCurve {
    /// `context 64: 2 rows 1.08x, 3 rows 1.15x, ...` (a one-row pass is 1).
    pub fn describe(&self) -> String {
        let rows: Vec<String> =
            self.relative.iter().enumerate().skip(1).map(|(i, x)| format!("{} rows {x:.2}x", i + 1)).collect();
        format!("context {}: {}", self.context, rows.join(", "))
    }
}

/// The most cost curves an entry may carry.
pub const MAX_COST_CURVES: usize = 4;
/// The longest context a cost curve may name.
pub const MAX_COST_CONTEXT: usize = 1 << 20;
/// The largest relative cost a curve may state (a pass of 33 rows costing
/// 1,000 one-row passes is not a measurement of this engine).
pub const MAX_RELATIVE_COST: f64 = 1000.0;

/// What an entry's width rests on: a sweep of this key (`measured`, the
/// default, written without the field), or a prediction for this host from
/// a committed acceptance profile and a verify-cost curve measured here
/// (`basis = "predicted"`, `tuner calibrate`; issue 54).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    #[default]
    Measured,
    Predicted,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Measured => "measured",
            Basis::Predicted => "predicted",
        }
    }
}

/// The acceptance profile a predicted entry was replayed from: its path
/// under `profiles/` and the sha256 of its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProfileFile {
    pub name: String,
    pub sha256: String,
}

/// What a build says about the table's stale entries (entries this build's
/// verify-path fingerprint for their key does not make fresh, see
/// [`Entry::fresh_for`]): one warning per stale entry of the host class the
/// build runs on, whose default this build will not use; the stale entries
/// of other host classes only counted, in one `quiet` line (no build on this
/// host runs them, and `runtime policy explain` names each). When the
/// build's host class cannot be read, that one line is a warning too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleReport {
    /// Lines for `cargo:warning`.
    pub warnings: Vec<String>,
    /// The other host classes' stale entries in one line, for the build
    /// script's own log (shown by `cargo build -vv`).
    pub quiet: Option<String>,
}

/// [`StaleReport`] of `entries`, each with this build's fingerprint for its
/// key, for a build on `host` (or why its class could not be read). `file`
/// names the table in each line.
pub fn stale_report<'a>(
    file: &str,
    entries: impl IntoIterator<Item = (&'a Entry, String)>,
    host: Result<&HostClass, &str>,
) -> StaleReport {
    let mut report = StaleReport::default();
    let mut others: Vec<&str> = Vec::new();
    for (e, build_fp) in entries {
        if e.fresh_for(&build_fp) {
            continue;
        }
        if host.is_ok_and(|h| *h == e.key.host) {
            report.warnings.push(format!(
                "{file}: entry {} is stale (measured with verify-path fingerprint {}, this build has {build_fp} for \
                 its key); it is not used until it is re-measured (`tuner check` or `tuner sweep`)",
                e.key, e.verify_fingerprint
            ));
        } else {
            others.push(e.key.host.as_str());
        }
    }
    if others.is_empty() {
        return report;
    }
    let n = others.len();
    others.sort_unstable();
    others.dedup();
    let entries = if n == 1 { "entry" } else { "entries" };
    let line = match host {
        Ok(h) => format!(
            "{file}: {n} stale {entries} of other host classes than this one ({h}): {}; `runtime policy explain` \
             names each",
            others.join(", ")
        ),
        Err(why) => format!(
            "{file}: {n} stale {entries} (this build's host class could not be read: {why}) of host classes {}; \
             `runtime policy explain` names each",
            others.join(", ")
        ),
    };
    match host {
        Ok(_) => report.quiet = Some(line),
        Err(_) => report.warnings.push(line),
    }
    report
}

/// A re-check of the entry on a later build (`tuner check`): the build's
/// verify-path fingerprint for the key, the check's record and its date.
/// An entry is fresh for its own fingerprint and for its check's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub verify_fingerprint: String,
    pub record: String,
    pub date: String,
}

/// An entry's [`Drafting`] as its two fields: `width` (null for off) and
/// `adaptive`.
fn drafting_fields<S: serde::Serializer>(d: &Option<Drafting>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Fields {
        width: Option<Width>,
        adaptive: bool,
    }
    let (width, adaptive) = Drafting::fields(*d);
    Fields { width, adaptive }.serialize(s)
}

/// One measured entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    /// Everything the width depended on (see [`PolicyKey`]).
    pub key: PolicyKey,
    /// The format that declared the quantization class (`gguf`, `gptq`,
    /// `mlx`, ...), for the record; not part of the key.
    pub target_quant_format: Option<String>,
    /// The drafter settings it was measured with: the entry applies with
    /// exactly these, and a drafter taken from the policy uses them.
    pub drafter_settings: DrafterSettings,
    /// The storage formats of the measured target's weight matrices
    /// (lowercase ggml names): which kernels its fingerprint covers.
    pub weight_formats: Vec<String>,
    /// What the runs of this key draft; `None` is `off` (speculation lost).
    /// Written as `width = N` (fixed), `width = N` with `adaptive = true`
    /// (the adaptive draft length up to N: the sweep chose it over every
    /// fixed width, issue 36; it needs a `verify_cost` curve), or
    /// `width = "off"`. Serialized as the same two fields (`width`: a
    /// number or null, `adaptive`), so JSON readers of an entry see no change.
    #[serde(flatten, serialize_with = "drafting_fields")]
    pub drafting: Option<Drafting>,
    pub model: ModelFile,
    pub prompts: PromptSet,
    /// The record the width came from, relative to the repository root.
    pub record: String,
    /// Every record the width and ratio rest on (`tuner propose` pools the
    /// key's records of one verify fingerprint), `record` among them; empty
    /// in entries written from one record alone.
    pub pooled: Vec<String>,
    /// `YYYY-MM-DD` of the sweep.
    pub date: String,
    /// Speculative over classic decode tok/s at this width (the record's
    /// geometric mean over rounds).
    pub ratio: f64,
    /// The interval the record states for `ratio`, `[low, high]`.
    pub ratio_interval: [f64; 2],
    /// A short host identity (CPU or GPU, cores, OS) for humans.
    pub host: String,
    /// The verify-path fingerprint of the measuring build for this key.
    pub verify_fingerprint: String,
    /// The verify pass's cost against a one-row pass, per context length
    /// measured, increasing; empty in entries of sweeps that did not
    /// measure it.
    pub verify_cost: Vec<CostCurve>,
    /// Tokens a verify pass emitted at this width on the measured prompts
    /// (the record's median over requests): what a server's live traffic
    /// is compared with. `None` in older entries and `off` ones.
    pub emitted_per_verify: Option<f64>,
    /// Measured (a sweep) or predicted (a profile on this host's curve).
    pub basis: Basis,
    /// The profile of a predicted entry; `None` for a measured one.
    pub profile: Option<ProfileFile>,
    /// The latest re-check on another build, if any.
    pub check: Option<Check>,
    /// 1-based line of the entry's `[[entry]]` header, when known.
    pub line: Option<usize>,
}

impl Entry {
    /// Whether a speculating run of this entry is expected to beat classic
    /// decoding: a width, with an interval wholly above 1.0.
    pub fn beats_classic(&self) -> bool {
        self.drafting.is_some() && self.ratio_interval[0] > 1.0
    }

    /// Whether a build with `fingerprint` for the key may use the entry:
    /// the measuring build's, or the one a check re-blessed it for.
    pub fn fresh_for(&self, fingerprint: &str) -> bool {
        self.verify_fingerprint == fingerprint
            || self.check.as_ref().is_some_and(|c| c.verify_fingerprint == fingerprint)
    }

    /// `measured`, `measured, re-checked on this build (records/..., date)`
    /// or `predicted`, as provenance words say it for a build with
    /// `fingerprint`.
    pub fn basis_words(&self, fingerprint: &str) -> String {
        match (&self.check, self.basis) {
            (Some(c), b) if c.verify_fingerprint == fingerprint && self.verify_fingerprint != fingerprint => {
                format!("{}, re-checked on this build ({}, {})", b.as_str(), c.record, c.date)
            }
            (_, b) => b.as_str().to_string(),
        }
    }
}

/// A compiled table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Table {
    /// The file as named to the compiler (`policy/draft-block-width.toml`).
    pub file: String,
    pub schema_version: u32,
    pub entries: Vec<Entry>,
}

impl Table {
    /// The entry for exactly this key, stale or not (the resolver decides).
    pub fn exact(&self, key: &PolicyKey) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == *key)
    }

    /// The entries of the same measurement (drafter, device, quantization,
    /// threads) on any host and model: what may stand in for a key with no
    /// entry of its own.
    pub fn same_measurement(&self, key: &PolicyKey) -> Vec<&Entry> {
        self.entries.iter().filter(|e| e.key.same_measurement(key)).collect()
    }

    /// The entries for (drafter, device, quantization) at any thread count:
    /// what a fallback names when the count differs.
    pub fn at_any_threads(&self, drafter: DrafterKind, device: &DeviceClass, quant: &str) -> Vec<&Entry> {
        self.entries
            .iter()
            .filter(|e| e.key.drafter == drafter && e.key.device == *device && e.key.quant == quant)
            .collect()
    }
}

/// Whether [`compile`] checks that record paths exist, and where from.
#[derive(Clone, Copy, Debug)]
pub enum RecordCheck<'a> {
    /// Record paths must exist relative to this directory (the repository root).
    Under(&'a Path),
    /// Shape only (the bytes were validated with `Under` at build time).
    Skip,
}

/// What is wrong with a table.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    TooBig {
        bytes: usize,
    },
    /// More than [`MAX_ENTRIES`] entries.
    TooManyEntries {
        entries: usize,
    },
    /// Not TOML (the parser's message carries line and column); TOML's own
    /// duplicate keys inside one table land here.
    Malformed(String),
    MissingSchemaVersion,
    UnknownSchemaVersion(String),
    /// Schema 1: entries without threads, drafter settings and formats.
    OldSchema(i64),
    /// Schema 2: entries keyed without the host's CPU and the model.
    Schema2,
    UnknownTopLevelKey(String),
    EntryNotATable,
    /// A field is missing, unknown or of the wrong type (serde's message).
    Field(String),
    BadValue {
        field: &'static str,
        problem: String,
    },
    WidthOutOfRange(String),
    UnknownDrafter(String),
    DuplicateKey {
        first: String,
    },
    MissingRecord {
        record: String,
        root: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::TooBig { bytes } => write!(f, "{bytes} bytes is over the limit of {MAX_TABLE_BYTES}"),
            Problem::TooManyEntries { entries } => write!(
                f,
                "{entries} entries is over the limit of {MAX_ENTRIES} (a table is reviewed by hand); remove the \
                 empty or repeated `[[entry]]` tables"
            ),
            Problem::Malformed(m) => write!(f, "malformed TOML: {}", m.trim_end()),
            Problem::MissingSchemaVersion => {
                write!(f, "schema_version is missing; add `schema_version = {SCHEMA_VERSION}` at the top")
            }
            Problem::UnknownSchemaVersion(v) => write!(
                f,
                "unknown schema_version {v}: this runtime compiles schema {SCHEMA_VERSION} \
                 (see policy/README.md); a newer table needs a newer runtime"
            ),
            Problem::OldSchema(v) => write!(
                f,
                "schema_version {v} is no longer compiled: its entries do not say the thread count, the drafter \
                 settings or the weight formats they were measured with, and their kernel-only fingerprints \
                 cannot be checked against this build. Migrate: set `schema_version = 2` and, in each entry, \
                 rename `kernel_fingerprint` to `verify_fingerprint` and add `threads` (CPU entries), \
                 `drafter_settings` and `weight_formats` from its record (policy/README.md, \"Migrating from \
                 schema 1\"), then to schema {SCHEMA_VERSION} (\"Migrating from schema 2\"); the migrated entries \
                 are stale until `tuner sweep` re-measures them, and `tuner propose` replaces them"
            ),
            Problem::Schema2 => write!(
                f,
                "schema_version 2 is no longer compiled: its entries are keyed without the CPU and the model \
                 they were measured on, so an entry measured on one processor would apply unchanged on \
                 another. Migrate: set `schema_version = {SCHEMA_VERSION}` and, in each entry, rename \
                 `block_size` to `width` and add `host_class` (the class of the record's CPU signature, as \
                 `tuner summarize` or `runtime policy explain` prints it), `model = {{ architecture, \
                 parameters, file, sha256 }}` and `prompts = {{ name, sha256 }}` from its record \
                 (policy/README.md, \"Migrating from schema 2\")"
            ),
            Problem::UnknownTopLevelKey(k) => {
                write!(f, "unknown top-level key {k:?}: a table holds `schema_version` and `[[entry]]` tables")
            }
            Problem::EntryNotATable => write!(f, "`entry` must be an array of tables, written `[[entry]]`"),
            Problem::Field(m) => write!(f, "{m}"),
            Problem::BadValue { field, problem } => write!(f, "{field}: {problem}"),
            Problem::WidthOutOfRange(m) => write!(f, "width {m}"),
            Problem::UnknownDrafter(d) => {
                write!(f, "drafter {d:?} is not a drafter kind; the kinds are {}", DrafterKind::names())
            }
            Problem::DuplicateKey { first } => {
                write!(
                    f,
                    "duplicate key: {first} has the same (drafter, device_class, host_class, target_quant, model \
                     architecture and parameters, threads); keep one"
                )
            }
            Problem::MissingRecord { record, root } => write!(
                f,
                "record {record:?} does not exist under {root}; commit the record with its entry \
                 (paths are relative to the repository root)"
            ),
        }
    }
}

/// A table that does not compile: the file, the entry (when the problem is
/// inside one) and the problem.
#[derive(Clone, Debug, PartialEq)]
pub struct TableError {
    pub file: String,
    /// `entry 2 (line 14) (ngram, cpu:x86_64-avx2, amd-zen4, q4_1)`, as far as known.
    pub entry: Option<String>,
    pub problem: Problem,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.entry {
            Some(e) => write!(f, "{}: {e}: {}", self.file, self.problem),
            None => write!(f, "{}: {}", self.file, self.problem),
        }
    }
}

impl std::error::Error for TableError {}

/// An entry as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    drafter: String,
    device_class: String,
    host_class: String,
    target_quant: String,
    width: toml::Value,
    model: RawModel,
    prompts: RawPrompts,
    record: String,
    #[serde(default)]
    pooled: Vec<String>,
    date: toml::Value,
    ratio: toml::Value,
    ratio_interval: Vec<toml::Value>,
    host: String,
    #[serde(default)]
    target_quant_format: Option<String>,
    #[serde(default)]
    threads: Option<toml::Value>,
    #[serde(default)]
    concurrency: Option<toml::Value>,
    #[serde(default)]
    precision: Option<String>,
    drafter_settings: toml::Value,
    weight_formats: Vec<toml::Value>,
    verify_fingerprint: String,
    #[serde(default)]
    verify_cost: Vec<toml::Value>,
    #[serde(default)]
    emitted_per_verify: Option<toml::Value>,
    #[serde(default)]
    adaptive: Option<toml::Value>,
    #[serde(default)]
    basis: Option<String>,
    #[serde(default)]
    profile: Option<RawProfile>,
    #[serde(default)]
    check: Option<RawCheck>,
    /// Free text for reviewers; not compiled in.
    #[serde(default)]
    #[allow(dead_code)]
    note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    name: String,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    verify_fingerprint: String,
    record: String,
    date: toml::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    architecture: String,
    parameters: toml::Value,
    file: String,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrompts {
    name: String,
    sha256: String,
}

/// The spans of the `[[entry]]` tables, for line numbers in messages.
#[derive(Deserialize)]
struct Spans {
    #[serde(default)]
    entry: Vec<toml::Spanned<toml::Table>>,
}

/// Compiles a table. `file` names it in messages; `text` is its content.
pub fn compile(file: &str, text: &str, records: RecordCheck<'_>) -> Result<Table, TableError> {
    let fail = |entry: Option<String>, problem: Problem| TableError { file: file.to_string(), entry, problem };
    if text.len() > MAX_TABLE_BYTES {
        return Err(fail(None, Problem::TooBig { bytes: text.len() }));
    }
    let doc: toml::Table = toml::from_str(text).map_err(|e| fail(None, Problem::Malformed(e.to_string())))?;

    // The version first: an unknown version may mean anything below.
    match doc.get("schema_version") {
        None => return Err(fail(None, Problem::MissingSchemaVersion)),
        Some(toml::Value::Integer(v)) if *v == i64::from(SCHEMA_VERSION) => {}
        Some(toml::Value::Integer(v)) if *v == 1 => return Err(fail(None, Problem::OldSchema(*v))),
        Some(toml::Value::Integer(2)) => return Err(fail(None, Problem::Schema2)),
        Some(v) => return Err(fail(None, Problem::UnknownSchemaVersion(v.to_string()))),
    }
    if let Some(k) = doc.keys().find(|k| *k != "schema_version" && *k != "entry") {
        return Err(fail(None, Problem::UnknownTopLevelKey(k.clone())));
    }
    let raw: Vec<toml::Table> = match doc.get("entry") {
        None => Vec::new(),
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|v| v.as_table().cloned().ok_or_else(|| fail(None, Problem::EntryNotATable)))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(fail(None, Problem::EntryNotATable)),
    };
    if raw.len() > MAX_ENTRIES {
        return Err(fail(None, Problem::TooManyEntries { entries: raw.len() }));
    }
    let newlines = NewLines::of(text);
    let lines: Vec<Option<usize>> = match toml::from_str::<Spans>(text) {
        Ok(s) if s.entry.len() == raw.len() => s.entry.iter().map(|e| Some(newlines.line_of(e.span()))).collect(),
        _ => vec![None; raw.len()],
    };

    // Each key's first entry, found in one lookup per entry (a scan of the
    // entries before it made the compiler quadratic in their count).
    let mut first_of: std::collections::HashMap<PolicyKey, usize> = std::collections::HashMap::new();
    let mut entries: Vec<Entry> = Vec::with_capacity(raw.len());
    for (i, (t, line)) in raw.into_iter().zip(lines).enumerate() {
        let mut label = match line {
            Some(l) => format!("entry {} (line {l})", i + 1),
            None => format!("entry {}", i + 1),
        };
        // Name the key in messages as soon as it can be read.
        let key_part = |k: &str| t.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
        if t.contains_key("drafter") || t.contains_key("device_class") || t.contains_key("target_quant") {
            let threads = t.get("threads").and_then(|v| v.as_integer()).and_then(|n| usize::try_from(n).ok());
            let threads = match threads {
                Some(1) => ", 1 thread".to_string(),
                Some(n) => format!(", {n} threads"),
                None => String::new(),
            };
            let at = match t.get("concurrency").and_then(|v| v.as_integer()) {
                Some(n) if n > 1 => format!(", {n} sequences at once"),
                _ => String::new(),
            };
            label = format!(
                "{label} ({}, {}, {}, {}{threads}{at})",
                key_part("drafter"),
                key_part("device_class"),
                key_part("host_class"),
                key_part("target_quant"),
            );
        }
        let e = entry(t, line, records).map_err(|p| fail(Some(label.clone()), p))?;
        if let Some(&idx) = first_of.get(&e.key) {
            let first = match entries[idx].line {
                Some(l) => format!("entry {} (line {l})", idx + 1),
                None => format!("entry {}", idx + 1),
            };
            return Err(fail(Some(label), Problem::DuplicateKey { first }));
        }
        first_of.insert(e.key.clone(), entries.len());
        entries.push(e);
    }
    Ok(Table { file: file.to_string(), schema_version: SCHEMA_VERSION, entries })
}

/// The offsets of a text's newlines, found once: an entry's line is a
/// binary search, not a count from the start of the text for every entry
/// (which made the compiler quadratic in `[[entry]]` headers).
struct NewLines(Vec<usize>);

impl NewLines {
    fn of(text: &str) -> NewLines {
        NewLines(text.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i).collect())
    }

    /// The 1-based line of a span's start.
    fn line_of(&self, span: Range<usize>) -> usize {
        self.0.partition_point(|&n| n < span.start) + 1
    }
}

fn bad(field: &'static str, problem: impl Into<String>) -> Problem {
    Problem::BadValue { field, problem: problem.into() }
}

fn number(field: &'static str, v: &toml::Value) -> Result<f64, Problem> {
    let x = match v {
        toml::Value::Float(x) => *x,
        toml::Value::Integer(n) => *n as f64,
        other => return Err(bad(field, format!("{other} is not a number"))),
    };
    if x.is_finite() && x > 0.0 { Ok(x) } else { Err(bad(field, format!("{x} must be a positive number"))) }
}

/// Validates one entry's fields (everything but duplicates).
fn entry(t: toml::Table, line: Option<usize>, records: RecordCheck<'_>) -> Result<Entry, Problem> {
    // Named before serde's message, which would only say "unknown field".
    if t.contains_key("block_size") {
        return Err(bad(
            "block_size",
            "is the schema-2 name: write `width` (policy/README.md, \"Migrating from schema 2\")",
        ));
    }
    let r: RawEntry =
        toml::Value::Table(t).try_into().map_err(|e: toml::de::Error| Problem::Field(e.message().to_string()))?;
    let drafter: DrafterKind = r.drafter.parse().map_err(|_| Problem::UnknownDrafter(r.drafter.clone()))?;
    let device = DeviceClass::parse(&r.device_class).map_err(|p| bad("device_class", p))?;
    let host = HostClass::parse(&r.host_class).map_err(|p| bad("host_class", p))?;
    check_quant_class(&r.target_quant).map_err(|p| bad("target_quant", p))?;
    let width = match &r.width {
        toml::Value::Integer(n) => match usize::try_from(*n).ok().and_then(|n| Width::new(n).ok()) {
            Some(w) => Some(w),
            None => {
                return Err(Problem::WidthOutOfRange(format!(
                    "{n} is out of range: a width is 1..={MAX_WIDTH}, or \"off\""
                )));
            }
        },
        toml::Value::String(s) if s == "off" => None,
        other => {
            return Err(bad("width", format!("{other} is not a width: give an integer 1..={MAX_WIDTH} or \"off\"")));
        }
    };
    ModelClass::check_architecture(&r.model.architecture).map_err(|p| bad("model.architecture", p))?;
    let parameters = match &r.model.parameters {
        toml::Value::Integer(n) if *n > 0 => *n as u64,
        other => return Err(bad("model.parameters", format!("{other} is not a parameter count (a positive integer)"))),
    };
    check_file_name(&r.model.file).map_err(|p| bad("model.file", p))?;
    check_sha256(&r.model.sha256).map_err(|p| bad("model.sha256", p))?;
    check_prompt_name(&r.prompts.name).map_err(|p| bad("prompts.name", p))?;
    check_sha256(&r.prompts.sha256).map_err(|p| bad("prompts.sha256", p))?;
    check_record_path(&r.record).map_err(|p| bad("record", p))?;
    if let RecordCheck::Under(root) = records
        && !root.join(&r.record).exists()
    {
        return Err(Problem::MissingRecord { record: r.record.clone(), root: root.display().to_string() });
    }
    if r.pooled.len() > MAX_POOLED {
        return Err(bad("pooled", format!("lists {} records; at most {MAX_POOLED}", r.pooled.len())));
    }
    for p in &r.pooled {
        check_record_path(p).map_err(|e| bad("pooled", e))?;
        if let RecordCheck::Under(root) = records
            && !root.join(p).exists()
        {
            return Err(Problem::MissingRecord { record: p.clone(), root: root.display().to_string() });
        }
    }
    let date = match &r.date {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        other => return Err(bad("date", format!("{other} is not a date (YYYY-MM-DD)"))),
    };
    check_date(&date).map_err(|p| bad("date", p))?;
    let ratio = number("ratio", &r.ratio)?;
    let [lo, hi] = match r.ratio_interval.as_slice() {
        [lo, hi] => [number("ratio_interval", lo)?, number("ratio_interval", hi)?],
        other => return Err(bad("ratio_interval", format!("has {} values; give [low, high]", other.len()))),
    };
    if !(lo <= ratio && ratio <= hi) {
        return Err(bad("ratio_interval", format!("[{lo}, {hi}] does not contain ratio {ratio}")));
    }
    if r.host.trim().is_empty() {
        return Err(bad("host", "is empty; name the CPU or GPU, cores and OS"));
    }
    check_fingerprint(&r.verify_fingerprint).map_err(|p| bad("verify_fingerprint", p))?;
    if let Some(f) = &r.target_quant_format {
        check_quant_class(f).map_err(|p| bad("target_quant_format", p))?;
    }
    let threads = match (&r.threads, device.is_cpu()) {
        (Some(toml::Value::Integer(n)), true) if (1..=MAX_THREADS as i64).contains(n) => Some(*n as usize),
        (Some(v), true) => {
            return Err(bad("threads", format!("{v} is not a thread count: give an integer 1..={MAX_THREADS}")));
        }
        (None, true) => {
            return Err(bad("threads", "is missing: a CPU entry says the thread count it was measured at"));
        }
        (Some(_), false) => return Err(bad("threads", "is for CPU entries; a CUDA entry is keyed without it")),
        (None, false) => None,
    };
    let concurrency = match &r.concurrency {
        None => 1,
        Some(toml::Value::Integer(n)) if (1..=MAX_CONCURRENCY as i64).contains(n) => *n as usize,
        Some(v) => {
            return Err(bad(
                "concurrency",
                format!("{v} is not a count of sequences at once: give an integer 1..={MAX_CONCURRENCY}"),
            ));
        }
    };
    let drafter_settings: DrafterSettings = r
        .drafter_settings
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| bad("drafter_settings", e.message().to_string()))?;
    drafter_settings.check(drafter).map_err(|p| bad("drafter_settings", p))?;
    if r.weight_formats.is_empty() || r.weight_formats.len() > MAX_FORMATS {
        return Err(bad(
            "weight_formats",
            format!("has {} names; list the 1..={MAX_FORMATS} formats of the target's weights", r.weight_formats.len()),
        ));
    }
    let mut weight_formats = Vec::with_capacity(r.weight_formats.len());
    for v in &r.weight_formats {
        match v.as_str() {
            Some(f)
                if !f.is_empty() && f.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
            {
                weight_formats.push(f.to_string())
            }
            _ => return Err(bad("weight_formats", format!("{v} is not a format name (lowercase, e.g. q4_1)"))),
        }
    }
    weight_formats.sort();
    weight_formats.dedup();
    let verify_cost = cost_curves(&r.verify_cost)?;
    let emitted_per_verify = match &r.emitted_per_verify {
        None => None,
        Some(v) => {
            let x = number("emitted_per_verify", v)?;
            // A verify pass emits its own token and at most `width` drafts.
            let most = width.map_or(1.0, |w| (w.get() + 1) as f64);
            if !(1.0..=most).contains(&x) {
                return Err(bad(
                    "emitted_per_verify",
                    format!("{x} is not 1..={most} (the width's pass emits 1..=width + 1)"),
                ));
            }
            Some(x)
        }
    };
    let adaptive = match &r.adaptive {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(v) => return Err(bad("adaptive", format!("{v} is not true or false"))),
    };
    let drafting = Drafting::from_fields(width, adaptive).map_err(|why| bad("adaptive", why))?;
    if adaptive && !verify_cost.iter().any(|c| c.relative.len() >= 2) {
        return Err(bad(
            "adaptive",
            "the adaptive draft length needs a `verify_cost` curve of at least two pass sizes",
        ));
    }
    let basis = match r.basis.as_deref() {
        None | Some("measured") => Basis::Measured,
        Some("predicted") => Basis::Predicted,
        Some(other) => return Err(bad("basis", format!("{other:?} is not \"measured\" or \"predicted\""))),
    };
    let profile = match (&r.profile, basis) {
        (Some(p), Basis::Predicted) => {
            check_profile_path(&p.name).map_err(|e| bad("profile.name", e))?;
            check_sha256(&p.sha256).map_err(|e| bad("profile.sha256", e))?;
            if let RecordCheck::Under(root) = records
                && !root.join(&p.name).exists()
            {
                return Err(bad("profile.name", format!("{} does not exist under {}", p.name, root.display())));
            }
            Some(ProfileFile { name: p.name.clone(), sha256: p.sha256.clone() })
        }
        (None, Basis::Predicted) => {
            return Err(bad("profile", "a predicted entry names the acceptance profile it was replayed from"));
        }
        (Some(_), Basis::Measured) => {
            return Err(bad(
                "profile",
                "is for predicted entries (`basis = \"predicted\"`); a measured one has a record",
            ));
        }
        (None, Basis::Measured) => None,
    };
    if basis == Basis::Predicted && concurrency > 1 {
        return Err(bad(
            "concurrency",
            "a predicted entry is for an idle server (its profile replays one sequence); measure a bucket \
             with `tuner sweep --served --concurrency N`",
        ));
    }
    if basis == Basis::Predicted && verify_cost.is_empty() {
        return Err(bad("verify_cost", "a predicted entry carries the cost curve it was predicted on"));
    }
    let check = match &r.check {
        None => None,
        Some(c) => {
            check_fingerprint(&c.verify_fingerprint).map_err(|p| bad("check.verify_fingerprint", p))?;
            check_record_path(&c.record).map_err(|p| bad("check.record", p))?;
            if let RecordCheck::Under(root) = records
                && !root.join(&c.record).exists()
            {
                return Err(Problem::MissingRecord { record: c.record.clone(), root: root.display().to_string() });
            }
            let date = match &c.date {
                toml::Value::String(s) => s.clone(),
                toml::Value::Datetime(d) => d.to_string(),
                other => return Err(bad("check.date", format!("{other} is not a date (YYYY-MM-DD)"))),
            };
            check_date(&date).map_err(|p| bad("check.date", p))?;
            Some(Check { verify_fingerprint: c.verify_fingerprint.clone(), record: c.record.clone(), date })
        }
    };
    // The activation precision: on entries of targets with K-quant
    // matrices only (CPU or CUDA); absent there, the entry predates 8-bit
    // activations and was measured at 16 bits, the only precision then.
    let applies = crate::key::precision_applies(&weight_formats);
    let precision = match (&r.precision, applies) {
        (p, true) => crate::key::key_precision(&weight_formats, p.as_deref()).map_err(|e| bad("precision", e))?,
        (Some(_), false) => {
            return Err(bad(
                "precision",
                format!(
                    "changes nothing here: only entries of targets with {} matrices have an activation \
                     precision",
                    PRECISION_FORMATS.join(", ")
                ),
            ));
        }
        (None, false) => None,
    };
    let key = PolicyKey {
        drafter,
        device,
        host,
        quant: r.target_quant,
        precision,
        model: ModelClass { architecture: r.model.architecture, parameters },
        threads,
        concurrency,
    };
    Ok(Entry {
        key,
        target_quant_format: r.target_quant_format,
        drafter_settings,
        weight_formats,
        drafting,
        model: ModelFile { file: r.model.file, sha256: r.model.sha256 },
        prompts: PromptSet { name: r.prompts.name, sha256: r.prompts.sha256 },
        record: r.record,
        pooled: r.pooled,
        date,
        ratio,
        ratio_interval: [lo, hi],
        host: r.host,
        verify_fingerprint: r.verify_fingerprint,
        verify_cost,
        emitted_per_verify,
        basis,
        profile,
        check,
        line,
    })
}

/// `verify_cost = [{ context = 64, relative = [1.0, 1.1, ...] }, ...]`:
/// at most [`MAX_COST_CURVES`] curves, contexts 1..=[`MAX_COST_CONTEXT`]
/// and increasing, each with 2..=`MAX_WIDTH + 1` relative costs, the first
/// exactly 1, every one a positive number up to [`MAX_RELATIVE_COST`].
fn cost_curves(raw: &[toml::Value]) -> Result<Vec<CostCurve>, Problem> {
    if raw.len() > MAX_COST_CURVES {
        return Err(bad("verify_cost", format!("has {} curves; at most {MAX_COST_CURVES}", raw.len())));
    }
    let mut out: Vec<CostCurve> = Vec::with_capacity(raw.len());
    for v in raw {
        let Some(t) = v.as_table() else {
            return Err(bad("verify_cost", format!("{v} is not a table {{ context = N, relative = [...] }}")));
        };
        if let Some(k) = t.keys().find(|k| *k != "context" && *k != "relative") {
            return Err(bad("verify_cost", format!("unknown field `{k}` (a curve has `context` and `relative`)")));
        }
        let context = match t.get("context") {
            Some(toml::Value::Integer(n)) if (1..=MAX_COST_CONTEXT as i64).contains(n) => *n as usize,
            Some(other) => {
                return Err(bad("verify_cost", format!("context {other} is not 1..={MAX_COST_CONTEXT} positions")));
            }
            None => return Err(bad("verify_cost", "a curve has no `context`")),
        };
        if out.last().is_some_and(|c| c.context >= context) {
            return Err(bad("verify_cost", format!("context {context} does not increase on the curve before it")));
        }
        let values = match t.get("relative") {
            Some(toml::Value::Array(a)) => a,
            Some(other) => return Err(bad("verify_cost", format!("relative {other} is not an array of numbers"))),
            None => return Err(bad("verify_cost", format!("the curve at context {context} has no `relative`"))),
        };
        if !(2..=MAX_WIDTH + 1).contains(&values.len()) {
            return Err(bad(
                "verify_cost",
                format!(
                    "the curve at context {context} has {} values; give 2..={} (rows 1, 2, ...)",
                    values.len(),
                    MAX_WIDTH + 1
                ),
            ));
        }
        let mut relative = Vec::with_capacity(values.len());
        for x in values {
            let x = number("verify_cost", x)?;
            if x > MAX_RELATIVE_COST {
                return Err(bad("verify_cost", format!("relative cost {x} is above {MAX_RELATIVE_COST}")));
            }
            relative.push(x);
        }
        if relative[0] != 1.0 {
            return Err(bad(
                "verify_cost",
                format!(
                    "the curve at context {context} starts at {}: a one-row pass costs 1 by definition",
                    relative[0]
                ),
            ));
        }
        out.push(CostCurve { context, relative });
    }
    Ok(out)
}

/// The verify-cost curves an operator types (`runtime --cost-curve
/// CONTEXT=R1,R2,...`, one per context), under the bounds of an entry's
/// `verify_cost`: at most [`MAX_COST_CURVES`], contexts
/// 1..=[`MAX_COST_CONTEXT`] and distinct, 2..=`MAX_WIDTH + 1` values each,
/// the first exactly 1, every one positive and at most
/// [`MAX_RELATIVE_COST`]. Returned sorted by context.
pub fn parse_cost_curves(given: &[String]) -> Result<Vec<CostCurve>, String> {
    if given.len() > MAX_COST_CURVES {
        return Err(format!("--cost-curve given {} times; at most {MAX_COST_CURVES}", given.len()));
    }
    let mut out: Vec<CostCurve> = Vec::with_capacity(given.len());
    for g in given {
        let Some((ctx, values)) = g.split_once('=') else {
            return Err(format!("--cost-curve {g:?}: give CONTEXT=R1,R2,... (the relative cost of 1, 2, ... rows)"));
        };
        let context: usize = match ctx.trim().parse() {
            Ok(n) if (1..=MAX_COST_CONTEXT).contains(&n) => n,
            _ => return Err(format!("--cost-curve {g:?}: context {ctx:?} is not 1..={MAX_COST_CONTEXT} positions")),
        };
        let parts: Vec<&str> = values.split(',').collect();
        if !(2..=MAX_WIDTH + 1).contains(&parts.len()) {
            return Err(format!(
                "--cost-curve {g:?}: {} values; give 2..={} (rows 1, 2, ...)",
                parts.len(),
                MAX_WIDTH + 1
            ));
        }
        let mut relative = Vec::with_capacity(parts.len());
        for p in parts {
            match p.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_RELATIVE_COST => relative.push(x),
                _ => {
                    return Err(format!(
                        "--cost-curve {g:?}: {p:?} is not a relative cost (a positive number up to {MAX_RELATIVE_COST})"
                    ));
                }
            }
        }
        if relative[0] != 1.0 {
            return Err(format!("--cost-curve {g:?}: starts at {}; a one-row pass costs 1 by definition", relative[0]));
        }
        if out.iter().any(|c| c.context == context) {
            return Err(format!("--cost-curve: context {context} given twice"));
        }
        out.push(CostCurve { context, relative });
    }
    out.sort_by_key(|c| c.context);
    Ok(out)
}

/// The most records one entry may say it rests on.
pub const MAX_POOLED: usize = 64;

/// A model file's name: no directory (records name models by file name
/// and sha256, never by a path of the machine that measured them).
pub fn check_file_name(s: &str) -> Result<(), String> {
    if s.is_empty()
        || s.len() > 255
        || s.contains(['/', '\\'])
        || s == "."
        || s == ".."
        || s.chars().any(char::is_control)
    {
        return Err(format!("{s:?} is not a file name: give the model's file name alone, without a directory"));
    }
    Ok(())
}

/// A prompt set's name: a relative path or a plain name, never absolute.
pub fn check_prompt_name(s: &str) -> Result<(), String> {
    let p = Path::new(s);
    let relative = p.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if s.is_empty() || s.len() > 255 || !relative || s.contains('\\') || s.chars().any(char::is_control) {
        return Err(format!("{s:?} is not a prompt-set name: give a path relative to the repository, or a name"));
    }
    Ok(())
}

/// 64 lowercase hex digits.
pub fn check_sha256(s: &str) -> Result<(), String> {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(format!("{s:?} is not a sha256 (64 lowercase hex digits)"))
    }
}

/// A quantization class as the classifier spells it: lowercase letters,
/// digits, `_`, `-`, `+`; never `unknown` (nothing can be measured for a
/// target nobody could classify).
pub fn check_quant_class(s: &str) -> Result<(), String> {
    if s == "unknown" {
        return Err("\"unknown\" cannot be measured: classify the target first (runtime policy explain)".into());
    }
    let ok = !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-+".contains(&b));
    if ok { Ok(()) } else { Err(format!("{s:?} is not a quantization class (lowercase, e.g. q4_1, nvfp4, bf16)")) }
}

fn check_record_path(s: &str) -> Result<(), String> {
    let p = Path::new(s);
    let normal = p.components().all(|c| matches!(c, Component::Normal(_)));
    if !normal || !s.starts_with("records/") || s.len() <= "records/".len() {
        return Err(format!("{s:?} must be a relative path under records/ with no `..`"));
    }
    Ok(())
}

/// A profile's path: relative, under `profiles/`, ending in `.jsonl`.
fn check_profile_path(s: &str) -> Result<(), String> {
    let p = Path::new(s);
    let normal = p.components().all(|c| matches!(c, Component::Normal(_)));
    if !normal || !s.starts_with("profiles/") || !s.ends_with(".jsonl") || s.len() > 300 {
        return Err(format!("{s:?} is not a path under profiles/ ending in .jsonl"));
    }
    Ok(())
}

fn check_date(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let digits = |r: Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let shape = b.len() == 10 && b[4] == b'-' && b[7] == b'-' && digits(0..4) && digits(5..7) && digits(8..10);
    let month_day = shape && {
        let m: u32 = s[5..7].parse().unwrap_or(0);
        let d: u32 = s[8..10].parse().unwrap_or(0);
        (1..=12).contains(&m) && (1..=31).contains(&d)
    };
    if month_day { Ok(()) } else { Err(format!("{s:?} is not a date (YYYY-MM-DD)")) }
}

fn check_fingerprint(s: &str) -> Result<(), String> {
    if s.len() == FINGERPRINT_LEN && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a verify-path fingerprint ({FINGERPRINT_LEN} lowercase hex digits; `runtime policy explain` \
             prints this build's for a target)"
        ))
    }
}
