//! How the draft width is chosen, all of it.
//!
//! In order, the first that gives a width decides:
//! 1. an operator override: `--draft-block-size`, then
//!    `DRAFTWISE_DRAFT_BLOCK_SIZE` (both set and different: the flag wins and
//!    the provenance says so; an unparseable value is an error);
//! 2. a width the drafter checkpoint declares ([`super::declared`]);
//! 3. a measured entry of the compiled table for (drafter kind, device
//!    class, *target* quantization class) whose kernel fingerprint is this
//!    build's (a stale entry is reported, never used);
//! 4. the per-kind constant ([`DrafterKind::default_block_size`]).
//!
//! Every step is evaluated and reported (`policy explain` prints them), and
//! exactly one is marked as the one that decided. The fallback names what it
//! was keyed on, so an unmeasured device, an unclassifiable target and a
//! stale measurement read differently.

use super::declared::Declared;
use super::kind::{DeclarationSource, DrafterKind};
use super::quant::QuantClass;
use super::table::{Entry, Table, Width, parse_width};
use serde::Serialize;
use std::fmt;

/// The operator's environment override.
pub const BLOCK_SIZE_ENV: &str = "DRAFTWISE_DRAFT_BLOCK_SIZE";
/// The operator's command-line override.
pub const BLOCK_SIZE_FLAG: &str = "--draft-block-size";

/// Everything resolution depends on besides the table and the fingerprint.
#[derive(Clone, Copy, Debug)]
pub struct ResolveInput<'a> {
    pub drafter: DrafterKind,
    /// Step 2's finding ([`super::declared::read_declared`]).
    pub declared: &'a Declared,
    /// `cpu:x86_64-avx512vnni`, `cuda:sm_90`, ...
    pub device_class: &'a str,
    /// The target's class: the key never uses the drafter's.
    pub target_quant: &'a QuantClass,
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

/// Why the per-kind constant applied.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fallback {
    /// The table has no entry for the key.
    NoMeasurement { device_class: String, target_quant: String },
    /// The target could not be classified, so there is no key.
    UnknownQuant { why: String },
    /// The entry for the key was measured with other kernels.
    Stale {
        device_class: String,
        target_quant: String,
        entry_fingerprint: String,
        build_fingerprint: String,
        record: String,
    },
}

/// Where a width came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Provenance {
    /// No drafter: classic decoding only.
    NoDrafter,
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

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provenance::NoDrafter => write!(f, "speculation off: no drafter"),
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
            Provenance::Measured { entry: e } => {
                let key = format!(
                    "for {} on {} with {} {} target",
                    e.drafter,
                    e.device_class,
                    article(&e.target_quant),
                    e.target_quant
                );
                let [lo, hi] = e.ratio_interval;
                match e.block_size {
                    Width::Blocks(_) => write!(
                        f,
                        "measured {key}: {:.2}x classic [{lo:.2}, {hi:.2}] ({}, {})",
                        e.ratio, e.record, e.date
                    ),
                    Width::Off => write!(
                        f,
                        "measured off {key}: speculation ran {:.2}x classic [{lo:.2}, {hi:.2}] ({}, {})",
                        e.ratio, e.record, e.date
                    ),
                }
            }
            Provenance::Default { drafter, block_size, fallback } => {
                write!(f, "per-kind default {block_size}: ")?;
                match fallback {
                    Fallback::NoMeasurement { device_class, target_quant } => write!(
                        f,
                        "no measurement for {device_class} with {} {target_quant} target (drafter {drafter})",
                        article(target_quant)
                    ),
                    Fallback::UnknownQuant { why } => write!(f, "target quantization unknown ({why})"),
                    Fallback::Stale { device_class, target_quant, entry_fingerprint, build_fingerprint, record } => {
                        write!(
                            f,
                            "the entry for {device_class} with {} {target_quant} target (drafter {drafter}) is stale: \
                             measured with kernel fingerprint {entry_fingerprint}, this build has \
                             {build_fingerprint} ({record})",
                            article(target_quant)
                        )
                    }
                }
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
    /// `None` when there is no drafter.
    pub drafter: Option<DrafterKind>,
    /// Drafted tokens per verify; `None` is off (no drafter, or `off`).
    pub block_size: Option<usize>,
    /// The provenance in words (the `startup` event's `block_size_from`).
    pub block_size_from: String,
    pub provenance: Provenance,
    pub steps: Vec<Step>,
}

impl Resolution {
    fn new(drafter: Option<DrafterKind>, block_size: Option<usize>, provenance: Provenance, steps: Vec<Step>) -> Self {
        Resolution { drafter, block_size, block_size_from: provenance.to_string(), provenance, steps }
    }

    /// Classic decoding only: no drafter, so no width.
    pub fn no_drafter() -> Self {
        Resolution::new(None, None, Provenance::NoDrafter, Vec::new())
    }

    /// One line for humans (stderr): the width and where it came from.
    pub fn summary(&self) -> String {
        match (self.drafter, self.block_size) {
            (None, _) => format!("draft width: off ({})", self.block_size_from),
            (Some(k), Some(n)) => format!("draft width {n} for {k}: {}", self.block_size_from),
            (Some(k), None) => format!("draft width off for {k}: {}", self.block_size_from),
        }
    }
}

/// What a step would decide: the provenance and the width (`None` is off).
type Candidate = (Provenance, Option<usize>);

/// Resolves against a given table and kernel fingerprint (tests use their
/// own; the runtime uses [`Resolver::compiled`]).
#[derive(Clone, Copy, Debug)]
pub struct Resolver<'t> {
    pub table: &'t Table,
    pub kernel_fingerprint: &'t str,
}

impl Resolver<'static> {
    /// The table compiled into this binary and this build's fingerprint.
    pub fn compiled() -> Self {
        Resolver { table: super::compiled_table(), kernel_fingerprint: super::KERNEL_FINGERPRINT }
    }
}

/// Resolves with the compiled table (see [`Resolver::resolve`]).
pub fn resolve(input: &ResolveInput<'_>) -> Result<Resolution, PolicyError> {
    Resolver::compiled().resolve(input)
}

impl Resolver<'_> {
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

        let quant = input.target_quant;
        let mut fallback =
            Fallback::NoMeasurement { device_class: input.device_class.to_string(), target_quant: quant.class.clone() };
        found.push(if quant.is_unknown() {
            fallback = Fallback::UnknownQuant { why: quant.from.clone() };
            (StepKind::Table, None, format!("no key: target quantization unknown ({})", quant.from))
        } else {
            let key = format!("({kind}, {}, {})", input.device_class, quant.class);
            match self.table.lookup(kind, input.device_class, &quant.class) {
                None => (
                    StepKind::Table,
                    None,
                    format!("no entry for {key} among the {} of {}", self.table.entries.len(), self.table.file),
                ),
                Some(e) if e.kernel_fingerprint != self.kernel_fingerprint => {
                    fallback = Fallback::Stale {
                        device_class: input.device_class.to_string(),
                        target_quant: quant.class.clone(),
                        entry_fingerprint: e.kernel_fingerprint.clone(),
                        build_fingerprint: self.kernel_fingerprint.to_string(),
                        record: e.record.clone(),
                    };
                    (
                        StepKind::Table,
                        None,
                        format!(
                            "entry {key} (width {}, {}) is stale: measured with kernel fingerprint {}, this build \
                             has {}; re-measure with `tuner sweep`",
                            e.block_size, e.record, e.kernel_fingerprint, self.kernel_fingerprint
                        ),
                    )
                }
                Some(e) => (
                    StepKind::Table,
                    Some((Provenance::Measured { entry: e.clone() }, e.block_size.block_size())),
                    format!("entry {key} gives {} ({}, {:.2}x classic)", e.block_size, e.record, e.ratio),
                ),
            }
        });

        let n = kind.default_block_size();
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
}
