//! How speculation and the draft width are chosen, all of it.
//!
//! With a drafter named (`--drafter KIND`), the width resolves in order, the
//! first that gives a width deciding:
//! 1. an operator override: `--draft-block-size`, then
//!    `DRAFTWISE_DRAFT_BLOCK_SIZE` (both set and different: the flag wins and
//!    the provenance says so; an unparseable value is an error);
//! 2. a width the drafter checkpoint declares ([`super::declared`]);
//! 3. a measured entry of the compiled table for (drafter kind, device
//!    class, *target* quantization class, CPU threads) whose verify-path
//!    fingerprint is this build's for the key and whose drafter settings are
//!    the ones asked for (a stale or differently-set entry is reported, never
//!    used);
//! 4. the per-kind constant ([`DrafterKind::default_block_size`]).
//!
//! With no drafter named, [`Resolver::auto`] asks the table: a fresh entry
//! of a weight-free drafter (one without a checkpoint: ngram, layerskip, suffix) for
//! this key whose interval lies wholly above 1.0 turns speculation on with
//! that drafter, width and settings (the fastest, when several do); anything
//! else keeps classic decoding and says why. `--drafter none` is classic
//! without asking.
//!
//! Every step is evaluated and reported (`policy explain` prints them), and
//! exactly one is marked as the one that decided. Every fallback names the
//! device class, the quantization class (or why it is unknown, with the file
//! and field) and the thread count.

use super::declared::Declared;
use super::kind::{DeclarationSource, DrafterKind, DrafterSettings};
use super::quant::QuantClass;
use super::table::{Entry, Table, Width, parse_width};
use serde::Serialize;
use std::fmt;

/// The operator's environment override.
pub const BLOCK_SIZE_ENV: &str = "DRAFTWISE_DRAFT_BLOCK_SIZE";
/// The operator's command-line override.
pub const BLOCK_SIZE_FLAG: &str = "--draft-block-size";

/// What a policy key is made of, besides the drafter.
#[derive(Clone, Copy, Debug)]
pub struct Host<'a> {
    /// `cpu:x86_64-avx512vnni`, `cuda:sm_90`, ...
    pub device_class: &'a str,
    /// The target's class: the key never uses the drafter's.
    pub target_quant: &'a QuantClass,
    /// Worker threads (part of the key on CPU device classes only).
    pub threads: usize,
    /// The storage formats of the target's weight matrices (which kernels
    /// run); `None` when not known (every format's kernels count).
    pub weight_formats: Option<&'a [String]>,
}

impl Host<'_> {
    /// The thread count as the key holds it: `None` on CUDA devices.
    pub fn key_threads(&self) -> Option<usize> {
        self.device_class.starts_with("cpu:").then_some(self.threads)
    }
}

/// Everything resolution depends on besides the table and the fingerprint.
#[derive(Clone, Copy, Debug)]
pub struct ResolveInput<'a> {
    pub drafter: DrafterKind,
    /// Step 2's finding ([`super::declared::read_declared`]).
    pub declared: &'a Declared,
    pub host: Host<'a>,
    /// The drafter settings the operator gave (unset fields: not given).
    pub settings: &'a DrafterSettings,
    /// `--draft-block-size` as given.
    pub flag: Option<&'a str>,
    /// `DRAFTWISE_DRAFT_BLOCK_SIZE` as set ([`env_override`]).
    pub env: Option<&'a str>,
}

/// An override that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{BLOCK_SIZE_FLAG} {value:?}: {problem}")]
    BadFlag { value: String, problem: String },
    #[error("{BLOCK_SIZE_ENV}={value:?}: {problem}; fix it or unset it (`unset {BLOCK_SIZE_ENV}`)")]
    BadEnv { value: String, problem: String },
    #[error("{BLOCK_SIZE_ENV} is not valid Unicode; fix it or unset it")]
    EnvNotUnicode,
}

/// `DRAFTWISE_DRAFT_BLOCK_SIZE` from the process environment.
pub fn env_override() -> Result<Option<String>, PolicyError> {
    match std::env::var(BLOCK_SIZE_ENV) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(PolicyError::EnvNotUnicode),
    }
}

/// A thread count and the record measured at it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeasuredAt {
    pub threads: Option<usize>,
    pub record: String,
}

/// Why no measured entry decided. Each names the key it looked for.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fallback {
    /// The table has no entry for the key at any thread count.
    NoMeasurement { device_class: String, target_quant: String, threads: Option<usize> },
    /// Entries exist for the device and quantization, at other thread counts.
    OtherThreads { device_class: String, target_quant: String, threads: usize, measured: Vec<MeasuredAt> },
    /// The target could not be classified, so there is no key.
    UnknownQuant {
        device_class: String,
        threads: Option<usize>,
        why: String,
        file: Option<String>,
        field: Option<String>,
    },
    /// The entry for the key was measured with other verify-path code, or on
    /// a target with other weight formats.
    Stale {
        device_class: String,
        target_quant: String,
        threads: Option<usize>,
        entry_fingerprint: String,
        build_fingerprint: String,
        entry_formats: Vec<String>,
        target_formats: Option<Vec<String>>,
        record: String,
    },
    /// The entry was measured with other drafter settings than those asked for.
    OtherSettings {
        device_class: String,
        target_quant: String,
        threads: Option<usize>,
        differences: Vec<String>,
        record: String,
    },
    /// No drafter named, and the entry says speculation loses here.
    Off { entry: Entry },
    /// No drafter named, and the entry's interval reaches 1.0.
    NotAboveClassic { entry: Entry },
}

/// `for ngram on cpu:x86_64-avx2 with a q4_1 target at 2 threads`.
pub fn key_phrase(drafter: &str, device_class: &str, target_quant: &str, threads: Option<usize>) -> String {
    format!(
        "for {drafter} on {device_class} with {} {target_quant} target{}",
        article(target_quant),
        at_threads(threads)
    )
}

/// ` at 2 threads`, ` at 1 thread`, or nothing (a CUDA key).
fn at_threads(threads: Option<usize>) -> String {
    match threads {
        Some(1) => " at 1 thread".to_string(),
        Some(n) => format!(" at {n} threads"),
        None => String::new(),
    }
}

fn threads_list(m: &[MeasuredAt]) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|e| match e.threads {
            Some(1) => format!("1 thread ({})", e.record),
            Some(n) => format!("{n} threads ({})", e.record),
            None => format!("no thread count ({})", e.record),
        })
        .collect();
    parts.join(", ")
}

impl Fallback {
    /// The fallback as a phrase; `drafter` names the drafter (or drafters)
    /// the key was looked up for.
    pub fn describe(&self, drafter: &str) -> String {
        match self {
            Fallback::NoMeasurement { device_class, target_quant, threads } => {
                format!("no measurement {}", key_phrase(drafter, device_class, target_quant, *threads))
            }
            Fallback::OtherThreads { device_class, target_quant, threads, measured } => format!(
                "no measurement {}: the table measured it at {} only",
                key_phrase(drafter, device_class, target_quant, Some(*threads)),
                threads_list(measured)
            ),
            Fallback::UnknownQuant { device_class, threads, why, file, field } => {
                let read = match (file, field) {
                    (Some(f), Some(x)) => format!("; read {f}, field {x}"),
                    (Some(f), None) => format!("; read {f}"),
                    _ => String::new(),
                };
                format!(
                    "no key for {drafter} on {device_class}{}: target quantization unknown ({why}{read})",
                    at_threads(*threads)
                )
            }
            Fallback::Stale {
                device_class,
                target_quant,
                threads,
                entry_fingerprint,
                build_fingerprint,
                entry_formats,
                target_formats,
                record,
            } => {
                let formats = match target_formats {
                    Some(t) if t != entry_formats => format!(
                        "; it measured a target with weight formats [{}], this one has [{}]",
                        entry_formats.join(", "),
                        t.join(", ")
                    ),
                    _ => String::new(),
                };
                format!(
                    "the entry {} is stale: measured with verify-path fingerprint {entry_fingerprint}, this build \
                     has {build_fingerprint} for the key{formats} ({record}); re-measure with `tuner sweep`",
                    key_phrase(drafter, device_class, target_quant, *threads)
                )
            }
            Fallback::OtherSettings { device_class, target_quant, threads, differences, record } => format!(
                "the entry {} was measured with other drafter settings: {} ({record})",
                key_phrase(drafter, device_class, target_quant, *threads),
                differences.join(", ")
            ),
            Fallback::Off { entry: e } => {
                let [lo, hi] = e.ratio_interval;
                format!(
                    "measured off {}: speculation ran {:.2}x classic [{lo:.2}, {hi:.2}] ({}, {})",
                    key_phrase(e.drafter.as_str(), &e.device_class, &e.target_quant, e.threads),
                    e.ratio,
                    e.record,
                    e.date
                )
            }
            Fallback::NotAboveClassic { entry: e } => {
                let [lo, hi] = e.ratio_interval;
                format!(
                    "the entry {} gives width {} at {:.2}x classic, but its interval [{lo:.2}, {hi:.2}] reaches \
                     1.0 ({})",
                    key_phrase(e.drafter.as_str(), &e.device_class, &e.target_quant, e.threads),
                    e.block_size,
                    e.ratio,
                    e.record
                )
            }
        }
    }

    /// How much a fallback tells an operator, for choosing the one to report
    /// when several drafters fell back: a measurement that says no beats a
    /// stale or differently-keyed one, which beats none.
    fn weight(&self) -> u8 {
        match self {
            Fallback::Off { .. } => 6,
            Fallback::NotAboveClassic { .. } => 5,
            Fallback::Stale { .. } => 4,
            Fallback::OtherSettings { .. } => 3,
            Fallback::OtherThreads { .. } => 2,
            Fallback::UnknownQuant { .. } => 1,
            Fallback::NoMeasurement { .. } => 0,
        }
    }
}

/// Where a width (or classic decoding) came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Provenance {
    /// `--drafter none`: classic decoding, the policy not asked.
    NoDrafter,
    /// No drafter named: the policy kept classic decoding. `drafter` is the
    /// kind whose entry gave the reason; `None` when no weight-free kind has
    /// an entry for the key.
    PolicyClassic {
        drafter: Option<DrafterKind>,
        fallback: Fallback,
    },
    /// No drafter named: the policy turned speculation on.
    PolicyOn {
        entry: Entry,
    },
    /// `--draft-block-size`; `env` is the environment value when it was set too.
    Flag {
        block_size: Width,
        env: Option<String>,
    },
    Env {
        block_size: Width,
    },
    Declared {
        block_size: usize,
        evidence: String,
    },
    Measured {
        entry: Entry,
    },
    Default {
        drafter: DrafterKind,
        block_size: usize,
        fallback: Fallback,
    },
}

/// `an nvfp4`, `a q4_1`: the article English uses before a class name read
/// letter by letter (or as a word, for `affine` and `unknown`).
fn article(class: &str) -> &'static str {
    let mut c = class.chars();
    let (first, second) = (c.next().unwrap_or('x'), c.next().unwrap_or('x'));
    let vowel = |ch: char| "aeiou".contains(ch);
    let an = match first {
        'a' | 'e' | 'i' | 'o' => true,
        'u' => class.starts_with("un"),
        // Read as letters (ef, aitch, el, em, en, ar, es, ex) unless they start a word.
        'f' | 'h' | 'l' | 'm' | 'n' | 'r' | 's' | 'x' => !vowel(second),
        _ => false,
    };
    if an { "an" } else { "a" }
}

/// `measured for ngram on ... at 2 threads (ngram_min 3, ngram_max 4): 1.17x
/// classic [1.12, 1.22] (records/..., 2026-12-01)`.
fn measured_phrase(e: &Entry) -> String {
    let [lo, hi] = e.ratio_interval;
    let key = key_phrase(e.drafter.as_str(), &e.device_class, &e.target_quant, e.threads);
    let settings = e.drafter_settings.describe();
    match e.block_size {
        Width::Blocks(_) => format!(
            "measured {key} ({settings}): {:.2}x classic [{lo:.2}, {hi:.2}] ({}, {})",
            e.ratio, e.record, e.date
        ),
        Width::Off => format!(
            "measured off {key} ({settings}): speculation ran {:.2}x classic [{lo:.2}, {hi:.2}] ({}, {})",
            e.ratio, e.record, e.date
        ),
    }
}

/// The weight-free drafter kinds, as a fallback names them.
fn weight_free_names() -> String {
    let names: Vec<&str> = DrafterKind::ALL
        .iter()
        .filter(|k| k.declaration_source() == DeclarationSource::None)
        .map(|k| k.as_str())
        .collect();
    format!("a weight-free drafter ({})", names.join(", "))
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provenance::NoDrafter => write!(f, "speculation off: --drafter none"),
            Provenance::PolicyClassic { drafter, fallback } => {
                let who = drafter.map_or_else(weight_free_names, |k| k.to_string());
                write!(f, "speculation off by the policy (no --drafter): {}", fallback.describe(&who))
            }
            Provenance::PolicyOn { entry } => {
                write!(f, "speculation on by the policy (no --drafter): {}", measured_phrase(entry))
            }
            Provenance::Flag { block_size, env: None } => write!(f, "{BLOCK_SIZE_FLAG} {block_size}"),
            Provenance::Flag { block_size, env: Some(e) } => {
                if parse_width(e).ok() == Some(*block_size) {
                    write!(f, "{BLOCK_SIZE_FLAG} {block_size} ({BLOCK_SIZE_ENV}={e} agrees)")
                } else {
                    write!(f, "{BLOCK_SIZE_FLAG} {block_size}, overriding {BLOCK_SIZE_ENV}={e}")
                }
            }
            Provenance::Env { block_size } => write!(f, "{BLOCK_SIZE_ENV}={block_size}"),
            Provenance::Declared { evidence, .. } => write!(f, "declared by the checkpoint: {evidence}"),
            Provenance::Measured { entry } => f.write_str(&measured_phrase(entry)),
            Provenance::Default { drafter, block_size, fallback } => {
                write!(f, "per-kind default {block_size}: {}", fallback.describe(drafter.as_str()))
            }
        }
    }
}

/// The resolution steps, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Flag,
    Env,
    Declared,
    Table,
    Default,
}

impl StepKind {
    pub fn label(self) -> &'static str {
        match self {
            StepKind::Flag => BLOCK_SIZE_FLAG,
            StepKind::Env => BLOCK_SIZE_ENV,
            StepKind::Declared => "declared by the checkpoint",
            StepKind::Table => "policy table",
            StepKind::Default => "per-kind constant",
        }
    }
}

/// One step: what it found, and whether it decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    pub step: StepKind,
    pub decided: bool,
    pub detail: String,
}

/// A resolved width with its provenance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resolution {
    /// `None`: classic decoding (no drafter, or the policy kept classic).
    pub drafter: Option<DrafterKind>,
    /// Drafted tokens per verify; `None` is off (no drafter, or `off`).
    pub block_size: Option<usize>,
    /// The provenance in words (the `startup` event's `block_size_from`).
    pub block_size_from: String,
    pub provenance: Provenance,
    /// The drafter settings a measured entry decided with (the runtime runs
    /// exactly these); `None` when no entry decided.
    pub drafter_settings: Option<DrafterSettings>,
    pub steps: Vec<Step>,
}

impl Resolution {
    fn new(drafter: Option<DrafterKind>, block_size: Option<usize>, provenance: Provenance, steps: Vec<Step>) -> Self {
        let drafter_settings = match &provenance {
            Provenance::Measured { entry } | Provenance::PolicyOn { entry } => Some(entry.drafter_settings.clone()),
            _ => None,
        };
        Resolution { drafter, block_size, block_size_from: provenance.to_string(), provenance, drafter_settings, steps }
    }

    /// `--drafter none`: classic decoding, the policy not asked.
    pub fn no_drafter() -> Self {
        Resolution::new(None, None, Provenance::NoDrafter, Vec::new())
    }

    /// Whether the policy chose the drafter (no `--drafter` given).
    pub fn by_policy(&self) -> bool {
        matches!(self.provenance, Provenance::PolicyOn { .. } | Provenance::PolicyClassic { .. })
    }

    /// One line for humans (stderr): the width and where it came from.
    pub fn summary(&self) -> String {
        match (self.drafter, self.block_size) {
            (None, _) => format!("classic decoding: {}", self.block_size_from),
            (Some(k), Some(n)) => format!("draft width {n} for {k}: {}", self.block_size_from),
            (Some(k), None) => format!("draft width off for {k}: {}", self.block_size_from),
        }
    }
}

/// What a step would decide: the provenance and the width (`None` is off).
type Candidate = (Provenance, Option<usize>);

/// This build's verify-path fingerprint for a key: (device class, weight
/// formats) → 16 hex digits.
pub type KeyFingerprint<'t> = &'t (dyn Fn(&str, Option<&[String]>) -> String + Sync);

/// Resolves against a given table and fingerprint (tests use their own; the
/// runtime uses [`Resolver::compiled`]).
#[derive(Clone, Copy)]
pub struct Resolver<'t> {
    pub table: &'t Table,
    pub fingerprint: KeyFingerprint<'t>,
}

impl fmt::Debug for Resolver<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver").field("table", &self.table.file).finish_non_exhaustive()
    }
}

fn compiled_fingerprint(device_class: &str, formats: Option<&[String]>) -> String {
    super::verify_fingerprint(device_class, formats)
}

impl Resolver<'static> {
    /// The table compiled into this binary and this build's fingerprints.
    pub fn compiled() -> Self {
        Resolver { table: super::compiled_table(), fingerprint: &compiled_fingerprint }
    }
}

/// Resolves with the compiled table (see [`Resolver::resolve`]).
pub fn resolve(input: &ResolveInput<'_>) -> Result<Resolution, PolicyError> {
    Resolver::compiled().resolve(input)
}

/// What the table holds for one drafter and a host: a usable entry, or why not.
// A value that lives for one lookup, once per drafter kind: boxing the
// fallback would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Lookup<'e> {
    Fresh(&'e Entry),
    Fallback(Fallback),
}

impl Resolver<'_> {
    /// This build's fingerprint for the host's key.
    pub fn key_fingerprint(&self, host: &Host<'_>) -> String {
        (self.fingerprint)(host.device_class, host.weight_formats)
    }

    /// Whether this build would use `e` for a target with the formats it
    /// was measured on (what `policy show` reports).
    pub fn is_fresh(&self, e: &Entry) -> bool {
        (self.fingerprint)(&e.device_class, Some(&e.weight_formats)) == e.verify_fingerprint
    }

    /// The table's answer for `kind` on `host` with `settings` asked for.
    fn lookup(&self, kind: DrafterKind, host: &Host<'_>, settings: &DrafterSettings) -> Lookup<'_> {
        let quant = host.target_quant;
        let device_class = host.device_class.to_string();
        let threads = host.key_threads();
        if quant.is_unknown() {
            return Lookup::Fallback(Fallback::UnknownQuant {
                device_class,
                threads,
                why: quant.from.clone(),
                file: quant.file.as_ref().map(|f| f.display().to_string()),
                field: quant.field.clone(),
            });
        }
        let target_quant = quant.class.clone();
        let Some(e) = self.table.lookup(kind, host.device_class, &quant.class, host.threads) else {
            let others = self.table.at_any_threads(kind, host.device_class, &quant.class);
            return Lookup::Fallback(match (others.is_empty(), threads) {
                (false, Some(threads)) => Fallback::OtherThreads {
                    device_class,
                    target_quant,
                    threads,
                    measured: others
                        .iter()
                        .map(|e| MeasuredAt { threads: e.threads, record: e.record.clone() })
                        .collect(),
                },
                _ => Fallback::NoMeasurement { device_class, target_quant, threads },
            });
        };
        let build = self.key_fingerprint(host);
        if e.verify_fingerprint != build {
            return Lookup::Fallback(Fallback::Stale {
                device_class,
                target_quant,
                threads,
                entry_fingerprint: e.verify_fingerprint.clone(),
                build_fingerprint: build,
                entry_formats: e.weight_formats.clone(),
                target_formats: host.weight_formats.map(<[String]>::to_vec),
                record: e.record.clone(),
            });
        }
        let differences = e.drafter_settings.differences(settings);
        if !differences.is_empty() {
            return Lookup::Fallback(Fallback::OtherSettings {
                device_class,
                target_quant,
                threads,
                differences,
                record: e.record.clone(),
            });
        }
        Lookup::Fresh(e)
    }

    /// The width for a named drafter (see the module docs for the order).
    pub fn resolve(&self, input: &ResolveInput<'_>) -> Result<Resolution, PolicyError> {
        let kind = input.drafter;
        // Both overrides parse before anything decides: a bad value is an
        // error even when the other one would win.
        let flag = match input.flag {
            Some(v) => Some(parse_width(v).map_err(|problem| PolicyError::BadFlag { value: v.into(), problem })?),
            None => None,
        };
        let env_raw = input.env.filter(|v| !v.trim().is_empty());
        let env = match env_raw {
            Some(v) => Some(parse_width(v).map_err(|problem| PolicyError::BadEnv { value: v.into(), problem })?),
            None => None,
        };

        // Each step's candidate (provenance + width) and its detail line.
        let mut found: Vec<(StepKind, Option<Candidate>, String)> = Vec::with_capacity(5);

        found.push(match flag {
            Some(w) => (
                StepKind::Flag,
                Some((Provenance::Flag { block_size: w, env: env_raw.map(str::to_string) }, w.block_size())),
                format!("gives {w}"),
            ),
            None => (StepKind::Flag, None, "not given".into()),
        });

        found.push(match (env, input.env) {
            (Some(w), Some(raw)) => {
                let vs = match flag {
                    Some(f) if f != w => format!("; differs from {BLOCK_SIZE_FLAG} {f}, which wins"),
                    Some(_) => format!("; agrees with {BLOCK_SIZE_FLAG}"),
                    None => String::new(),
                };
                (
                    StepKind::Env,
                    Some((Provenance::Env { block_size: w }, w.block_size())),
                    format!("{raw:?} gives {w}{vs}"),
                )
            }
            (_, Some(_)) => (StepKind::Env, None, "set but empty: treated as unset".into()),
            _ => (StepKind::Env, None, "not set".into()),
        });

        found.push(match (kind.declaration_source(), input.declared) {
            (DeclarationSource::None, _) => {
                (StepKind::Declared, None, format!("{kind} has no checkpoint to declare a width"))
            }
            (_, Declared::Width { block_size, evidence }) => (
                StepKind::Declared,
                Some((Provenance::Declared { block_size: *block_size, evidence: evidence.clone() }, Some(*block_size))),
                format!("{block_size}: {evidence}"),
            ),
            (_, Declared::Absent { why }) => (StepKind::Declared, None, why.clone()),
        });

        let fallback = match self.lookup(kind, &input.host, input.settings) {
            Lookup::Fresh(e) => {
                found.push((
                    StepKind::Table,
                    Some((Provenance::Measured { entry: e.clone() }, e.block_size.block_size())),
                    format!("entry {} gives {} ({}, {:.2}x classic)", e.key(), e.block_size, e.record, e.ratio),
                ));
                None
            }
            Lookup::Fallback(f) => {
                found.push((StepKind::Table, None, f.describe(kind.as_str())));
                Some(f)
            }
        };

        let n = kind.default_block_size();
        let fallback = fallback.unwrap_or_else(|| Fallback::NoMeasurement {
            device_class: input.host.device_class.to_string(),
            target_quant: input.host.target_quant.class.clone(),
            threads: input.host.key_threads(),
        });
        found.push((
            StepKind::Default,
            Some((Provenance::Default { drafter: kind, block_size: n, fallback }, Some(n))),
            format!("{n} for {kind}"),
        ));

        let decider = found.iter().position(|(_, c, _)| c.is_some()).unwrap_or(found.len() - 1);
        let mut decided = None;
        let mut steps = Vec::with_capacity(found.len());
        for (i, (step, cand, detail)) in found.into_iter().enumerate() {
            if i == decider {
                decided = cand;
            }
            steps.push(Step { step, decided: i == decider, detail });
        }
        let (provenance, block_size) = decided.expect("the per-kind constant always gives a width");
        Ok(Resolution::new(Some(kind), block_size, provenance, steps))
    }

    /// No drafter named: whether the policy speculates on `host`, with which
    /// weight-free drafter, width and settings, or why it keeps classic
    /// decoding. One step per weight-free kind; the one that decided is
    /// marked (none is, when classic decoding stays).
    pub fn auto(&self, host: &Host<'_>) -> Resolution {
        let mut steps = Vec::new();
        // The step (index) and entry of the fastest kind that qualifies.
        let mut best: Option<(usize, &Entry)> = None;
        let mut fallbacks: Vec<(DrafterKind, Fallback)> = Vec::new();
        for kind in DrafterKind::ALL.into_iter().filter(|k| k.declaration_source() == DeclarationSource::None) {
            let any = DrafterSettings::default();
            let detail = match self.lookup(kind, host, &any) {
                Lookup::Fresh(e) if e.beats_classic() => {
                    if best.is_none_or(|(_, b)| e.ratio > b.ratio) {
                        best = Some((steps.len(), e));
                    }
                    measured_phrase(e)
                }
                found => {
                    let f = match found {
                        Lookup::Fresh(e) if e.block_size == Width::Off => Fallback::Off { entry: e.clone() },
                        Lookup::Fresh(e) => Fallback::NotAboveClassic { entry: e.clone() },
                        Lookup::Fallback(f) => f,
                    };
                    let d = f.describe(kind.as_str());
                    fallbacks.push((kind, f));
                    d
                }
            };
            steps.push(Step { step: StepKind::Table, decided: false, detail: format!("{kind}: {detail}") });
        }
        if let Some((i, e)) = best {
            steps[i].decided = true;
            return Resolution::new(
                Some(e.drafter),
                e.block_size.block_size(),
                Provenance::PolicyOn { entry: e.clone() },
                steps,
            );
        }
        // The most telling reason; among equals, the first kind's.
        let mut chosen: Option<(DrafterKind, Fallback)> = None;
        for (k, f) in fallbacks {
            if chosen.as_ref().is_none_or(|(_, c)| f.weight() > c.weight()) {
                chosen = Some((k, f));
            }
        }
        let (kind, fallback) = match chosen {
            Some((k, f)) => (Some(k).filter(|_| f.weight() >= 2), f),
            None => (
                None,
                Fallback::NoMeasurement {
                    device_class: host.device_class.to_string(),
                    target_quant: host.target_quant.class.clone(),
                    threads: host.key_threads(),
                },
            ),
        };
        Resolution::new(None, None, Provenance::PolicyClassic { drafter: kind, fallback }, steps)
    }
}
