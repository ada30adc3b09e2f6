//! How speculation and the draft width are chosen, all of it.
//!
//! With a drafter named (`--drafter KIND`), the width resolves in order, the
//! first that gives a width deciding:
//! 1. an operator override: `--draft-width`, then `DRAFTWISE_DRAFT_WIDTH`
//!    (both set and different: the flag wins and the provenance says so; an
//!    unparseable value is an error);
//! 2. a width the drafter checkpoint declares ([`crate::declared`]);
//! 3. the table's entry for this run's [`PolicyKey`] whose drafter settings
//!    are the ones asked for, in this order of what it rests on (the
//!    provenance says which): a sweep of this key with this build's
//!    verify-path fingerprint for it (`measured`); a sweep of an earlier
//!    build that `tuner check` re-checked on this one (`measured,
//!    re-checked on this build`: [`Entry::fresh_for`]); a prediction for
//!    this host from a committed acceptance profile and a cost curve
//!    measured here (`predicted`, `tuner calibrate`), only if its whole
//!    interval is above 1.0; without one, an entry of the same measurement
//!    (drafter, device class, quantization, threads) measured on another
//!    CPU or another model, only if its whole interval is above 1.0 (never
//!    a prediction: it is for its own host), and said so ("measured on
//!    amd-zen5, this host is amd-zen4"); a stale or differently-set entry
//!    is reported, never used;
//! 4. the per-kind constant ([`DrafterKind::default_width`]).
//!
//! With no drafter named, [`Resolver::auto`] asks the table the same way for
//! every weight-free drafter (one without a checkpoint: ngram, layerskip,
//! suffix): an entry that applies and whose interval lies wholly above 1.0
//! turns speculation on with that drafter, width and settings (the fastest,
//! when several do); anything else keeps classic decoding and says why.
//! `--drafter none` is classic without asking.
//!
//! Every step is evaluated and reported (`policy explain` prints them), and
//! exactly one is marked as the one that decided. Every fallback names the
//! key it looked for ([`PolicyKey`]'s phrase), or why there is none.

use crate::declared::Declared;
use crate::drafting::Drafting;
use crate::host::HostClass;
use crate::key::{DeviceClass, ModelClass, PolicyKey, at_threads};
use crate::kind::{DeclarationSource, DrafterKind, DrafterSettings};
use crate::quant::QuantClass;
use crate::table::{Entry, Table};
use crate::width::{self, Width};
use serde::Serialize;
use std::fmt;

/// The operator's environment override.
pub const WIDTH_ENV: &str = "DRAFTWISE_DRAFT_WIDTH";
/// The override's name before schema 3, still read when [`WIDTH_ENV`] is unset.
pub const WIDTH_ENV_OLD: &str = "DRAFTWISE_DRAFT_BLOCK_SIZE";
/// The operator's command-line override.
pub const WIDTH_FLAG: &str = "--draft-width";

/// This run, as a policy key sees it (everything but the drafter).
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    pub device: &'a DeviceClass,
    /// The CPU this process runs on.
    pub host: &'a HostClass,
    /// The target's class: the key never uses the drafter's.
    pub quant: &'a QuantClass,
    /// The target's architecture and parameter count.
    pub model: &'a ModelClass,
    /// The target's file name, for the provenance (`None`: not known).
    pub file: Option<&'a str>,
    /// Worker threads (part of the key on CPU device classes only).
    pub threads: usize,
    /// The K-quant matrices' activation precision this run multiplies at,
    /// when it changes anything (`None`: no K-quant matrix), on the CPU and
    /// on CUDA alike.
    pub precision: Option<crate::key::Precision>,
    /// The storage formats of the target's weight matrices (which kernels
    /// run); `None` when not known (every format's kernels count).
    pub weight_formats: Option<&'a [String]>,
}

impl Run<'_> {
    /// The thread count as the key holds it: `None` on CUDA devices.
    pub fn key_threads(&self) -> Option<usize> {
        self.device.is_cpu().then_some(self.threads)
    }

    /// The key for `drafter`, or `None` when the target's quantization is
    /// unknown (then there is no key).
    pub fn key(&self, drafter: DrafterKind) -> Option<PolicyKey> {
        (!self.quant.is_unknown()).then(|| PolicyKey {
            drafter,
            device: self.device.clone(),
            host: self.host.clone(),
            quant: self.quant.class.clone(),
            precision: self.precision,
            model: self.model.clone(),
            threads: self.key_threads(),
            concurrency: 1,
        })
    }
}

/// An environment override as set: which variable, and its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvWidth {
    pub name: &'static str,
    pub value: String,
}

/// Everything resolution depends on besides the table and the fingerprint.
#[derive(Clone, Copy, Debug)]
pub struct ResolveInput<'a> {
    pub drafter: DrafterKind,
    /// Step 2's finding.
    pub declared: &'a Declared,
    pub run: Run<'a>,
    /// The drafter settings the operator gave (unset fields: not given).
    pub settings: &'a DrafterSettings,
    /// `--draft-width` as given.
    pub flag: Option<&'a str>,
    /// The environment override as set ([`env_override`]).
    pub env: Option<&'a EnvWidth>,
}

/// An override that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{WIDTH_FLAG} {value:?}: {problem}")]
    BadFlag { value: String, problem: String },
    #[error("{name}={value:?}: {problem}; fix it or unset it (`unset {name}`)")]
    BadEnv { name: &'static str, value: String, problem: String },
    #[error("{0} is not valid Unicode; fix it or unset it")]
    EnvNotUnicode(&'static str),
    #[error(
        "{WIDTH_ENV}={new:?} and {WIDTH_ENV_OLD}={old:?} disagree; {WIDTH_ENV_OLD} is the old name of \
         {WIDTH_ENV}: unset it"
    )]
    EnvDisagree { new: String, old: String },
}

/// The width override from the process environment: `DRAFTWISE_DRAFT_WIDTH`,
/// else its old name `DRAFTWISE_DRAFT_BLOCK_SIZE` (both set: they must agree).
pub fn env_override() -> Result<Option<EnvWidth>, PolicyError> {
    let read = |name: &'static str| match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(PolicyError::EnvNotUnicode(name)),
    };
    match (read(WIDTH_ENV)?, read(WIDTH_ENV_OLD)?) {
        (Some(new), Some(old)) if new.trim() != old.trim() => Err(PolicyError::EnvDisagree { new, old }),
        (Some(value), _) => Ok(Some(EnvWidth { name: WIDTH_ENV, value })),
        (None, Some(value)) => Ok(Some(EnvWidth { name: WIDTH_ENV_OLD, value })),
        (None, None) => Ok(None),
    }
}

/// A thread count and the record measured at it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeasuredAt {
    pub threads: Option<usize>,
    pub record: String,
}

/// An entry of the same measurement made on another CPU or model, and why
/// it does not stand in for this run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Elsewhere {
    pub host: HostClass,
    pub model: ModelClass,
    pub record: String,
    pub why: String,
}

/// Why no measured entry decided. Each names the key it looked for.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fallback {
    /// The table has no entry for the measurement at any thread count, host
    /// or model.
    NoMeasurement { key: PolicyKey },
    /// Entries exist for the device and quantization, at other thread counts.
    OtherThreads { key: PolicyKey, measured: Vec<MeasuredAt> },
    /// The target could not be classified, so there is no key.
    UnknownQuant {
        device: DeviceClass,
        host: HostClass,
        threads: Option<usize>,
        why: String,
        file: Option<String>,
        field: Option<String>,
    },
    /// The entry for the key was measured with other verify-path code, or on
    /// a target with other weight formats.
    Stale {
        key: PolicyKey,
        entry_fingerprint: String,
        build_fingerprint: String,
        entry_formats: Vec<String>,
        target_formats: Option<Vec<String>>,
        record: String,
    },
    /// The entry was measured with other drafter settings than those asked for.
    OtherSettings { key: PolicyKey, differences: Vec<String>, record: String },
    /// Only entries of another CPU or model exist, and none may stand in.
    Elsewhere { key: PolicyKey, measured: Vec<Elsewhere> },
    /// No drafter named, and the entry says speculation loses here.
    Off { entry: Entry },
    /// No drafter named, and the entry's interval reaches 1.0.
    NotAboveClassic { entry: Entry },
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

/// The flags of `tuner check` that address `key`'s entry beside the
/// model's others (the model itself is `-m`, which the key does not name):
/// its drafter where not the default (ngram), its thread count, its
/// precision where not the default (int8) and its bucket of concurrent
/// sequences above one.
fn check_flags(key: &PolicyKey) -> String {
    let mut f = String::new();
    if key.drafter != crate::DrafterKind::Ngram {
        f += &format!(" --drafter {}", key.drafter.as_str());
    }
    if let Some(t) = key.threads {
        f += &format!(" -t {t}");
    }
    if let Some(p) = key.precision.filter(|p| *p != crate::key::Precision::Int8) {
        f += &format!(" --precision {}", p.as_str());
    }
    if key.concurrency > 1 {
        f += &format!(" --concurrency {}", key.concurrency);
    }
    f
}

/// `for ngram on ...`, with the drafter word replaced by `who` (a fallback
/// of several kinds names them all).
fn for_key(who: &str, key: &PolicyKey) -> String {
    let phrase = key.to_string();
    let rest = phrase.strip_prefix(key.drafter.as_str()).unwrap_or(&phrase);
    format!("for {who}{rest}")
}

impl Fallback {
    /// The fallback as a phrase; `who` names the drafter (or drafters) the
    /// key was looked up for.
    pub fn describe(&self, who: &str) -> String {
        match self {
            Fallback::NoMeasurement { key } => format!("no measurement {}", for_key(who, key)),
            Fallback::OtherThreads { key, measured } => format!(
                "no measurement {}: the table measured it at {} only",
                for_key(who, key),
                threads_list(measured)
            ),
            Fallback::UnknownQuant { device, host, threads, why, file, field } => {
                let read = match (file, field) {
                    (Some(f), Some(x)) => format!("; read {f}, field {x}"),
                    (Some(f), None) => format!("; read {f}"),
                    _ => String::new(),
                };
                format!(
                    "no key for {who} on {device} ({host}){}: target quantization unknown ({why}{read})",
                    at_threads(*threads)
                )
            }
            Fallback::Stale { key, entry_fingerprint, build_fingerprint, entry_formats, target_formats, record } => {
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
                     has {build_fingerprint} for the key{formats} ({record}); re-check it with `tuner check{}` (about \
                     two minutes) or re-measure with `tuner sweep`",
                    for_key(who, key),
                    check_flags(key)
                )
            }
            Fallback::OtherSettings { key, differences, record } => format!(
                "the entry {} was measured with other drafter settings: {} ({record})",
                for_key(who, key),
                differences.join(", ")
            ),
            Fallback::Elsewhere { key, measured } => {
                let list: Vec<String> = measured
                    .iter()
                    .map(|m| format!("on {} with a {} target: {} ({})", m.host, m.model, m.why, m.record))
                    .collect();
                format!(
                    "no measurement {}; measured elsewhere only, and an entry of another CPU or model applies \
                     only when it is fresh, has the settings asked for and its whole interval is above 1.0: {}",
                    for_key(who, key),
                    list.join("; ")
                )
            }
            Fallback::Off { entry: e } => {
                format!(
                    "measured off {}: {} ({}, {})",
                    for_key(e.key.drafter.as_str(), &e.key),
                    off_ran(e),
                    e.record,
                    e.date
                )
            }
            Fallback::NotAboveClassic { entry: e } => {
                let [lo, hi] = e.ratio_interval;
                format!(
                    "the {} entry {} gives width {} at {:.2}x classic, but its interval [{lo:.2}, {hi:.2}] reaches \
                     1.0 ({})",
                    e.basis.as_str(),
                    for_key(e.key.drafter.as_str(), &e.key),
                    width::label(e.drafting.map(Drafting::max)),
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
            Fallback::Off { .. } => 7,
            Fallback::NotAboveClassic { .. } => 6,
            Fallback::Stale { .. } => 5,
            Fallback::OtherSettings { .. } => 4,
            Fallback::Elsewhere { .. } => 3,
            Fallback::OtherThreads { .. } => 2,
            Fallback::UnknownQuant { .. } => 1,
            Fallback::NoMeasurement { .. } => 0,
        }
    }
}

/// How a measured entry relates to this run: which key the run has, and
/// its file name. The provenance says where they differ.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fit {
    /// This run's key.
    pub this: PolicyKey,
    /// This run's target file name, when known.
    pub this_file: Option<String>,
    /// What the entry rests on for this build, in provenance words
    /// (`measured`, `measured, re-checked on this build (...)`,
    /// `predicted`: [`Entry::basis_words`]).
    pub basis: String,
}

impl Fit {
    /// Whether the entry was measured on this CPU class and model class.
    pub fn exact(&self, e: &Entry) -> bool {
        e.key == self.this
    }

    /// `; measured on amd-zen5, this host is amd-zen4 ...`: every way the
    /// entry's measurement is not this run, or nothing.
    pub fn differences(&self, e: &Entry) -> String {
        let mut out = Vec::new();
        if e.key.host != self.this.host {
            out.push(format!("measured on {}, this host is {}", e.key.host, self.this.host));
        }
        if e.key.model != self.this.model {
            let this_file = self.this_file.as_ref().map_or(String::new(), |f| format!(" ({f})"));
            out.push(format!(
                "measured on a {} target ({}), this one is {}{this_file}",
                e.key.model, e.model.file, self.this.model
            ));
        } else if let Some(f) = &self.this_file
            && *f != e.model.file
        {
            out.push(format!(
                "measured on {} (sha256 {}), this target is {f} with the same architecture and parameter count",
                e.model.file,
                &e.model.sha256[..12.min(e.model.sha256.len())]
            ));
        }
        if !self.exact(e) {
            out.push("an entry of another CPU or model applies only because its whole interval is above 1.0".into());
        }
        if out.is_empty() { String::new() } else { format!("; {}", out.join("; ")) }
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
        fit: Fit,
    },
    /// `--draft-width`; `env` is the environment override when it was set too.
    Flag {
        #[serde(with = "width::or_off")]
        width: Option<Width>,
        env: Option<EnvWidth>,
    },
    Env {
        name: &'static str,
        #[serde(with = "width::or_off")]
        width: Option<Width>,
    },
    Declared {
        width: Width,
        evidence: String,
    },
    Measured {
        entry: Entry,
        fit: Fit,
    },
    Default {
        drafter: DrafterKind,
        width: Width,
        fallback: Fallback,
    },
}

/// `measured for ngram on ... at 2 threads (ngram_min 3, ngram_max 4): 1.17x
/// classic [1.12, 1.22] (records/..., 2026-12-01)`, with how the entry's
/// measurement differs from this run.
fn measured_phrase(e: &Entry, fit: &Fit) -> String {
    let [lo, hi] = e.ratio_interval;
    let key = for_key(e.key.drafter.as_str(), &e.key);
    let settings = e.drafter_settings.describe();
    let differs = fit.differences(e);
    let basis = if fit.basis.is_empty() { "measured" } else { fit.basis.as_str() };
    // A prediction says what it was replayed from.
    let from = match &e.profile {
        Some(p) if e.basis == crate::table::Basis::Predicted => {
            format!(" from the acceptance profile {} on this host's verify-cost curve", p.name)
        }
        _ => String::new(),
    };
    match e.drafting.map(Drafting::max) {
        Some(_) => format!(
            "{basis} {key} ({settings}){from}: {:.2}x classic [{lo:.2}, {hi:.2}] ({}, {}){differs}",
            e.ratio, e.record, e.date
        ),
        None => format!("{basis} off {key} ({settings}){from}: {} ({}, {}){differs}", off_ran(e), e.record, e.date),
    }
}

/// What an `off` entry measured: its best width's ratio to classic, and,
/// when even that interval lies wholly above 1.0, why the entry is off all
/// the same (`tuner propose` kept an earlier `off` that the pooled data did
/// not credibly beat by its margin; the entry's note has the numbers).
fn off_ran(e: &Entry) -> String {
    let [lo, hi] = e.ratio_interval;
    let ran = format!("speculation ran {:.2}x classic [{lo:.2}, {hi:.2}]", e.ratio);
    if lo > 1.0 {
        format!(
            "{ran} at its best width, yet the entry is off: `tuner propose` kept an earlier off, which the \
             pooled records did not credibly beat by its margin (the entry's note says by how much)"
        )
    } else {
        ran
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
            Provenance::PolicyOn { entry, fit } => {
                write!(f, "speculation on by the policy (no --drafter): {}", measured_phrase(entry, fit))
            }
            Provenance::Flag { width: w, env: None } => write!(f, "{WIDTH_FLAG} {}", width::label(*w)),
            Provenance::Flag { width: w, env: Some(e) } => {
                if width::parse(&e.value).ok() == Some(*w) {
                    write!(f, "{WIDTH_FLAG} {} ({}={} agrees)", width::label(*w), e.name, e.value)
                } else {
                    write!(f, "{WIDTH_FLAG} {}, overriding {}={}", width::label(*w), e.name, e.value)
                }
            }
            Provenance::Env { name, width: w } => write!(f, "{name}={}", width::label(*w)),
            Provenance::Declared { evidence, .. } => write!(f, "declared by the checkpoint: {evidence}"),
            Provenance::Measured { entry, fit } => f.write_str(&measured_phrase(entry, fit)),
            Provenance::Default { drafter, width: w, fallback } => {
                write!(f, "per-kind default {w}: {}", fallback.describe(drafter.as_str()))
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
            StepKind::Flag => WIDTH_FLAG,
            StepKind::Env => WIDTH_ENV,
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
    pub width: Option<Width>,
    /// The provenance in words (the `startup` event's `width_from`).
    pub width_from: String,
    pub provenance: Provenance,
    /// The drafter settings a measured entry decided with (the runtime runs
    /// exactly these); `None` when no entry decided.
    pub drafter_settings: Option<DrafterSettings>,
    pub steps: Vec<Step>,
    /// What a server drafts when several sequences run at once: the
    /// buckets of the deciding entry's key ([`Bucket`]), by increasing
    /// concurrency; empty when no entry of this run's own key decided or
    /// none is measured under load (the width then holds at every
    /// concurrency).
    pub ladder: Vec<Bucket>,
    /// One line per bucket entry of the key, used or not and why (`policy
    /// explain`); empty when no entry decided.
    pub ladder_notes: Vec<String>,
}

/// An entry of the run's key measured with several sequences at once
/// (`tuner sweep --served --concurrency N`): from `sequences` sequences on,
/// a server drafts what it says.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    pub sequences: usize,
    /// `None` is off: classic steps at this concurrency.
    #[serde(serialize_with = "drafting_label")]
    pub drafting: Option<Drafting>,
    pub record: String,
}

fn drafting_label<S: serde::Serializer>(d: &Option<Drafting>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&Drafting::label(*d))
}

impl Bucket {
    /// The bucket for `sequences` at once: the one of the highest
    /// concurrency not above it (`None`: fewer than every bucket's, so the
    /// run's own width holds).
    pub fn for_sequences(ladder: &[Bucket], sequences: usize) -> Option<&Bucket> {
        ladder.iter().filter(|b| b.sequences <= sequences).max_by_key(|b| b.sequences)
    }
}

impl Resolution {
    /// The measured entry the width came from, if one decided it.
    pub fn entry(&self) -> Option<&Entry> {
        match &self.provenance {
            Provenance::Measured { entry, .. } | Provenance::PolicyOn { entry, .. } => Some(entry),
            _ => None,
        }
    }

    fn new(drafter: Option<DrafterKind>, width: Option<Width>, provenance: Provenance, steps: Vec<Step>) -> Self {
        let drafter_settings = match &provenance {
            Provenance::Measured { entry, .. } | Provenance::PolicyOn { entry, .. } => {
                Some(entry.drafter_settings.clone())
            }
            _ => None,
        };
        Resolution {
            drafter,
            width,
            width_from: provenance.to_string(),
            provenance,
            drafter_settings,
            steps,
            ladder: Vec::new(),
            ladder_notes: Vec::new(),
        }
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
        match (self.drafter, self.width) {
            (None, _) => format!("classic decoding: {}", self.width_from),
            (Some(k), Some(n)) => format!("draft width {n} for {k}: {}", self.width_from),
            (Some(k), None) => format!("draft width off for {k}: {}", self.width_from),
        }
    }
}

/// What a step would decide: the provenance and the width (`None` is off).
type Candidate = (Provenance, Option<Width>);

/// This build's verify-path fingerprint for a key: (device class, weight
/// formats) → 16 hex digits.
pub type KeyFingerprint<'t> = &'t (dyn Fn(&DeviceClass, Option<&[String]>) -> String + Sync);

/// Resolves against a table and a build's fingerprints (the runtime passes
/// the compiled table and its own; tests their own).
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

/// What the table holds for one drafter and a run: a usable entry (and how
/// it fits), or why not.
// A value that lives for one lookup, once per drafter kind: boxing the
// fallback would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Lookup<'e> {
    Fresh(&'e Entry, Fit),
    Fallback(Fallback),
}

impl Resolver<'_> {
    /// This build's fingerprint for the run's key.
    pub fn key_fingerprint(&self, run: &Run<'_>) -> String {
        (self.fingerprint)(run.device, run.weight_formats)
    }

    /// Whether this build would use `e` for a target with the formats it
    /// was measured on (what `policy show` reports).
    pub fn is_fresh(&self, e: &Entry) -> bool {
        e.fresh_for(&(self.fingerprint)(&e.key.device, Some(&e.weight_formats)))
    }

    /// Why `e` (of another CPU or model) cannot stand in for this run, or
    /// `None` when it can.
    fn why_not_elsewhere(&self, e: &Entry, run: &Run<'_>, settings: &DrafterSettings) -> Option<String> {
        let build = self.key_fingerprint(run);
        if e.basis == crate::table::Basis::Predicted {
            return Some("a prediction, for its own host only".into());
        }
        if !e.fresh_for(&build) {
            return Some(format!("stale (fingerprint {}, this build {build})", e.verify_fingerprint));
        }
        let d = e.drafter_settings.differences(settings);
        if !d.is_empty() {
            return Some(format!("other drafter settings: {}", d.join(", ")));
        }
        if !e.beats_classic() {
            let [lo, hi] = e.ratio_interval;
            return Some(format!(
                "width {} at {:.2}x [{lo:.2}, {hi:.2}] is not wholly above 1.0",
                width::label(e.drafting.map(Drafting::max)),
                e.ratio
            ));
        }
        None
    }

    /// The table's answer for `kind` on `run` with `settings` asked for.
    fn lookup(&self, kind: DrafterKind, run: &Run<'_>, settings: &DrafterSettings) -> Lookup<'_> {
        let Some(key) = run.key(kind) else {
            let q = run.quant;
            return Lookup::Fallback(Fallback::UnknownQuant {
                device: run.device.clone(),
                host: run.host.clone(),
                threads: run.key_threads(),
                why: q.from.clone(),
                file: q.file.as_ref().map(|f| f.display().to_string()),
                field: q.field.clone(),
            });
        };
        let build = self.key_fingerprint(run);
        let fit_of = |e: &Entry| Fit {
            this: key.clone(),
            this_file: run.file.map(str::to_string),
            basis: e.basis_words(&build),
        };
        // A prediction for this host stands only when it beats classic
        // credibly; otherwise the search goes on (another host's
        // measurement, then the constant), and the prediction is named if
        // nothing else is found.
        let mut weak_prediction = None;
        if let Some(e) = self.table.exact(&key) {
            if !e.fresh_for(&build) {
                return Lookup::Fallback(Fallback::Stale {
                    key,
                    entry_fingerprint: e.verify_fingerprint.clone(),
                    build_fingerprint: build,
                    entry_formats: e.weight_formats.clone(),
                    target_formats: run.weight_formats.map(<[String]>::to_vec),
                    record: e.record.clone(),
                });
            }
            let differences = e.drafter_settings.differences(settings);
            if !differences.is_empty() {
                return Lookup::Fallback(Fallback::OtherSettings { key, differences, record: e.record.clone() });
            }
            if e.basis != crate::table::Basis::Predicted || e.beats_classic() {
                return Lookup::Fresh(e, fit_of(e));
            }
            weak_prediction = Some(e);
        }
        let elsewhere = self.table.same_measurement(&key);
        if let Some(e) = weak_prediction
            && !elsewhere.iter().any(|o| self.why_not_elsewhere(o, run, settings).is_none())
        {
            return Lookup::Fallback(Fallback::NotAboveClassic { entry: e.clone() });
        }
        if elsewhere.is_empty() {
            let others: Vec<&Entry> = self
                .table
                .at_any_threads(kind, run.device, &key.quant)
                .into_iter()
                .filter(|e| e.key.precision == key.precision && e.key.concurrency == 1)
                .collect();
            return Lookup::Fallback(if others.is_empty() || key.threads.is_none() {
                Fallback::NoMeasurement { key }
            } else {
                let measured =
                    others.iter().map(|e| MeasuredAt { threads: e.key.threads, record: e.record.clone() }).collect();
                Fallback::OtherThreads { key, measured }
            });
        }
        // The nearest entry that may stand in: this CPU first, then this
        // model, then the most credibly faster (highest lower bound).
        let usable = elsewhere.iter().filter(|e| self.why_not_elsewhere(e, run, settings).is_none()).max_by(|a, b| {
            let rank = |e: &Entry| (e.key.host == key.host, e.key.model == key.model);
            rank(a).cmp(&rank(b)).then(a.ratio_interval[0].total_cmp(&b.ratio_interval[0]))
        });
        match usable {
            Some(e) => Lookup::Fresh(e, fit_of(e)),
            None => Lookup::Fallback(Fallback::Elsewhere {
                measured: elsewhere
                    .iter()
                    .map(|e| Elsewhere {
                        host: e.key.host.clone(),
                        model: e.key.model.clone(),
                        record: e.record.clone(),
                        why: self.why_not_elsewhere(e, run, settings).unwrap_or_default(),
                    })
                    .collect(),
                key,
            }),
        }
    }

    /// The width for a named drafter (see the module docs for the order).
    pub fn resolve(&self, input: &ResolveInput<'_>) -> Result<Resolution, PolicyError> {
        let kind = input.drafter;
        // Both overrides parse before anything decides: a bad value is an
        // error even when the other one would win.
        let flag = match input.flag {
            Some(v) => Some(width::parse(v).map_err(|problem| PolicyError::BadFlag { value: v.into(), problem })?),
            None => None,
        };
        let env_set = input.env.filter(|e| !e.value.trim().is_empty());
        let env = match env_set {
            Some(e) => Some(width::parse(&e.value).map_err(|problem| PolicyError::BadEnv {
                name: e.name,
                value: e.value.clone(),
                problem,
            })?),
            None => None,
        };

        // Each step's candidate (provenance + width) and its detail line.
        let mut found: Vec<(StepKind, Option<Candidate>, String)> = Vec::with_capacity(5);

        found.push(match flag {
            Some(w) => (
                StepKind::Flag,
                Some((Provenance::Flag { width: w, env: env_set.cloned() }, w)),
                format!("gives {}", width::label(w)),
            ),
            None => (StepKind::Flag, None, "not given".into()),
        });

        found.push(match (env, input.env) {
            (Some(w), Some(e)) => {
                let vs = match flag {
                    Some(f) if f != w => format!("; differs from {WIDTH_FLAG} {}, which wins", width::label(f)),
                    Some(_) => format!("; agrees with {WIDTH_FLAG}"),
                    None => String::new(),
                };
                (
                    StepKind::Env,
                    Some((Provenance::Env { name: e.name, width: w }, w)),
                    format!("{}={:?} gives {}{vs}", e.name, e.value, width::label(w)),
                )
            }
            (_, Some(e)) => (StepKind::Env, None, format!("{} set but empty: treated as unset", e.name)),
            _ => (StepKind::Env, None, "not set".into()),
        });

        found.push(match (kind.declaration_source(), input.declared) {
            (DeclarationSource::None, _) => {
                (StepKind::Declared, None, format!("{kind} has no checkpoint to declare a width"))
            }
            (_, Declared::Width { width, evidence }) => (
                StepKind::Declared,
                Some((Provenance::Declared { width: *width, evidence: evidence.clone() }, Some(*width))),
                format!("{width}: {evidence}"),
            ),
            (_, Declared::Absent { why }) => (StepKind::Declared, None, why.clone()),
        });

        let fallback = match self.lookup(kind, &input.run, input.settings) {
            Lookup::Fresh(e, fit) => {
                let detail = format!(
                    "entry {} gives {} ({}, {:.2}x classic, on {} with prompts {}){}",
                    e.key,
                    width::label(e.drafting.map(Drafting::max)),
                    e.record,
                    e.ratio,
                    e.model.file,
                    e.prompts.name,
                    fit.differences(e)
                );
                found.push((
                    StepKind::Table,
                    Some((Provenance::Measured { entry: e.clone(), fit }, e.drafting.map(Drafting::max))),
                    detail,
                ));
                None
            }
            Lookup::Fallback(f) => {
                found.push((StepKind::Table, None, f.describe(kind.as_str())));
                Some(f)
            }
        };

        let n = kind.default_width();
        let fallback = match (fallback, input.run.key(kind)) {
            (Some(f), _) => f,
            (None, Some(key)) => Fallback::NoMeasurement { key },
            (None, None) => no_lookup_fallback(&input.run),
        };
        found.push((
            StepKind::Default,
            Some((Provenance::Default { drafter: kind, width: n, fallback }, Some(n))),
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
        let (provenance, w) = decided.expect("the per-kind constant always gives a width");
        let mut r = Resolution::new(Some(kind), w, provenance, steps);
        self.fill_ladder(&mut r, &input.run);
        Ok(r)
    }

    /// The buckets of the entry that decided `r` (module docs of
    /// [`crate::key`]): the entries of the same key at a concurrency above
    /// 1, when the deciding entry is this run's own (this host, this model)
    /// and measured (a prediction replays one sequence); each bucket fresh
    /// for this build and measured with the deciding entry's drafter
    /// settings, or named in the notes with why it is not used.
    fn fill_ladder(&self, r: &mut Resolution, run: &Run<'_>) {
        let Some(decided) = r.entry() else { return };
        let own = run.key(decided.key.drafter);
        let mut notes = Vec::new();
        let mut ladder = Vec::new();
        let buckets = self.table.entries.iter().filter(|e| e.key.concurrency > 1 && e.key.at(1) == decided.key);
        let build = self.key_fingerprint(run);
        for e in buckets {
            let at = e.key.concurrency;
            let why = if own.as_ref() != Some(&decided.key) {
                Some(format!("the width here comes from {} (another host or model)", decided.key))
            } else if !e.fresh_for(&build) {
                Some(format!(
                    "stale (fingerprint {}, this build {build}; `tuner check{}` re-checks it)",
                    e.verify_fingerprint,
                    check_flags(&e.key)
                ))
            } else if !e.drafter_settings.differences(&decided.drafter_settings).is_empty() {
                Some(format!(
                    "other drafter settings than the entry that decided: {}",
                    e.drafter_settings.differences(&decided.drafter_settings).join(", ")
                ))
            } else {
                None
            };
            match why {
                Some(w) => notes.push(format!("from {at} sequences at once: not used ({}): {w}", e.record)),
                None => {
                    notes.push(format!(
                        "from {at} sequences at once: {} ({}, {:.2}x classic [{:.2}, {:.2}])",
                        Drafting::label(e.drafting),
                        e.record,
                        e.ratio,
                        e.ratio_interval[0],
                        e.ratio_interval[1]
                    ));
                    ladder.push(Bucket { sequences: at, drafting: e.drafting, record: e.record.clone() });
                }
            }
        }
        ladder.sort_by_key(|b| b.sequences);
        notes.sort();
        if notes.is_empty() {
            notes.push(format!(
                "no entry of this key measured with several sequences at once: {} holds at every concurrency",
                Drafting::label(decided.drafting)
            ));
        }
        r.ladder = ladder;
        r.ladder_notes = notes;
    }

    /// No drafter named: whether the policy speculates on `run`, with which
    /// weight-free drafter, width and settings, or why it keeps classic
    /// decoding. One step per weight-free kind; the one that decided is
    /// marked (none is, when classic decoding stays).
    pub fn auto(&self, run: &Run<'_>) -> Resolution {
        let mut steps = Vec::new();
        // The step (index), entry and fit of the fastest kind that qualifies.
        let mut best: Option<(usize, &Entry, Fit)> = None;
        let mut fallbacks: Vec<(DrafterKind, Fallback)> = Vec::new();
        for kind in DrafterKind::ALL.into_iter().filter(|k| k.declaration_source() == DeclarationSource::None) {
            let any = DrafterSettings::default();
            let detail = match self.lookup(kind, run, &any) {
                Lookup::Fresh(e, fit) if e.beats_classic() => {
                    let d = measured_phrase(e, &fit);
                    if best.as_ref().is_none_or(|(_, b, _)| e.ratio > b.ratio) {
                        best = Some((steps.len(), e, fit));
                    }
                    d
                }
                found => {
                    let f = match found {
                        Lookup::Fresh(e, _) if e.drafting.is_none() => Fallback::Off { entry: e.clone() },
                        Lookup::Fresh(e, _) => Fallback::NotAboveClassic { entry: e.clone() },
                        Lookup::Fallback(f) => f,
                    };
                    let d = f.describe(kind.as_str());
                    fallbacks.push((kind, f));
                    d
                }
            };
            steps.push(Step { step: StepKind::Table, decided: false, detail: format!("{kind}: {detail}") });
        }
        if let Some((i, e, fit)) = best {
            steps[i].decided = true;
            let mut r = Resolution::new(
                Some(e.key.drafter),
                e.drafting.map(Drafting::max),
                Provenance::PolicyOn { entry: e.clone(), fit },
                steps,
            );
            self.fill_ladder(&mut r, run);
            return r;
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
            None => (None, no_lookup_fallback(run)),
        };
        Resolution::new(None, None, Provenance::PolicyClassic { drafter: kind, fallback }, steps)
    }
}

/// The fallback when no lookup ran: no key (unknown quantization), or no
/// measurement for the run's key.
fn no_lookup_fallback(run: &Run<'_>) -> Fallback {
    match run.key(DrafterKind::Ngram) {
        Some(key) => Fallback::NoMeasurement { key },
        None => Fallback::UnknownQuant {
            device: run.device.clone(),
            host: run.host.clone(),
            threads: run.key_threads(),
            why: run.quant.from.clone(),
            file: run.quant.file.as_ref().map(|f| f.display().to_string()),
            field: run.quant.field.clone(),
        },
    }
}
