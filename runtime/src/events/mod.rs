//! The typed JSONL events the runtime writes with `--json`, and the only
//! thing the tuner reads from it (never free-form log text). One object per
//! line; the `event` field names the kind; every event carries
//! `schema_version`. Field names carry their units.
//!
//! A finished request is one record: its [`Completion`] (whose measured
//! part, [`Outcome`], is what the tuner's raw rows flatten in) and, for a
//! speculative request, the [`SpeculationReport`] that follows it. `runtime serve`
//! answers with [`ServedTimings`] (the `draftwise` object of a response),
//! which the tuner reads back with the same type. `runtime bench --json`
//! prints a [`bench`] report.

pub mod bench;
mod served;

pub use crate::engine::FinishReason;
pub use served::{ServedBatch, ServedSpeculative, ServedTimings};

use crate::build_info::BuildInfo;
use crate::engine::{Engine, Generation};
use crate::model::ModelInfo;
use crate::sampling::SamplingParams;
use crate::speculative::decode::SpecStats;
use crate::speculative::probe::ProbeReport;
use kernels::dispatch;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped whenever a field changes meaning, type or disappears. 2:
/// `block_size` became `width` (and `block_size_from` `width_from`); the
/// startup event gained `host_class` and the target's `parameters`. 3:
/// `build.git_dirty` is a boolean (`null` when git could not say), not the
/// string `"true"` / `"false"` / `"unknown"`. Older events still read (the
/// old names are aliases, the old strings are parsed).
pub const SCHEMA_VERSION: u32 = 3;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // one event per request: size is irrelevant
pub enum Event {
    Startup(Startup),
    Completion(Completion),
    SpeculativeDiagnostics(SpeculativeDiagnostics),
    Declined(Declined),
}

fn default_true() -> bool {
    true
}

/// What this process is and how it will run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Startup {
    pub schema_version: u32,
    pub build: BuildInfo,
    /// Policy-table device class, e.g. `cpu:x86_64-avx512vnni`.
    pub device_class: String,
    pub kernel_family: String,
    /// Whether `DRAFTWISE_KERNELS` chose the family.
    pub kernel_family_forced: bool,
    pub threads: usize,
    /// Whether a multi-row call streams the weights once for all its rows
    /// (`false` under `DRAFTWISE_MULTIROW=0`: each row runs the single-row
    /// kernel, a control for the verify-cost curve).
    #[serde(default = "default_true")]
    pub multirow: bool,
    /// Where the target's repacked weights live: the pages asked for and
    /// the bytes on huge pages at startup ([`crate::model::weights::PagesReport`],
    /// `DRAFTWISE_HUGE_PAGES`); absent when no matrix is repacked and in
    /// events before the field (4 KiB pages from the heap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<crate::model::weights::PagesReport>,
    pub target: ModelInfo,
    pub tokenizer: String,
    /// Where the chat template came from: the model file, the
    /// architecture's built-in turn format (when the file has none), or
    /// none.
    #[serde(default)]
    pub chat_template: String,
    /// Drafter kind (`ngram`, `layerskip`, `draft-model`), or `none` for classic decoding.
    pub drafter: String,
    /// Who chose it: `flag` (`--drafter KIND`), `policy` (no `--drafter`:
    /// the measured table decided, on or off), `none` (`--drafter none`).
    #[serde(default)]
    pub drafter_from: String,
    /// The settings the drafter ran with; null without one.
    #[serde(default)]
    pub drafter_settings: Option<policy::DrafterSettings>,
    /// Drafted tokens per verify; null when speculation is off (no drafter,
    /// or a policy entry that says `off`).
    #[serde(default, alias = "block_size")]
    pub width: Option<policy::Width>,
    /// Where `width` came from ([`policy::Provenance`] in words):
    /// one sentence saying whether speculation runs and why, naming the
    /// entry's record and ratio or the key that had no measurement.
    #[serde(default, alias = "block_size_from")]
    pub width_from: String,
    /// Tokens a verify pass emitted at this width when the policy entry
    /// that chose it was measured (its `emitted_per_verify`); absent when
    /// no entry chose the width or it predates the field. `/metrics` sets
    /// live traffic against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_emitted_per_verify: Option<f64>,
    /// Each round's draft length is chosen per request in `0..=width` (the
    /// adaptive schedule), not fixed at `width`; absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adaptive: bool,
    /// Where the adaptive choice came from (`--adaptive on`, the entry, or
    /// why it is off); empty without a drafter.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub adaptive_from: String,
    /// The activation precision of the target's K-quant matrices (`int8`,
    /// `int16`: `--precision`); absent where it changes nothing (no K-quant
    /// matrix, a CUDA device) and in events before the field (which ran
    /// 16-bit activations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// What a server drafts with several sequences in a pass: the policy's
    /// buckets for this key, by increasing concurrency (`policy::Bucket`);
    /// absent when the width holds at every concurrency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub under_load: Vec<LoadBucket>,
    /// The CPU class of this host (the policy key's host part,
    /// [`policy::HostClass`]); null in events before schema 2, or
    /// when `/proc/cpuinfo` names no family and model.
    #[serde(default)]
    pub host_class: Option<String>,
    /// The verify-path fingerprint of the whole build
    /// ([`crate::policy::KERNEL_FINGERPRINT`]).
    #[serde(default)]
    pub kernel_fingerprint: String,
    /// This build's verify-path fingerprint for this process's key (device
    /// class and the target's weight formats): what a policy entry records.
    #[serde(default)]
    pub verify_fingerprint: String,
    /// The block-vs-chain exactness probe at the resolved width; null
    /// without a drafter.
    pub exactness_probe: Option<ProbeReport>,
    /// The operator forfeited exactness (`--allow-inexact` or
    /// `DRAFTWISE_ALLOW_INEXACT=1`): speculation runs even if the probe failed.
    pub allow_inexact: bool,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    /// The CUDA device forward passes run on (name, `sm_XY`, driver, NVRTC,
    /// kernel cache); absent when they run on the CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<crate::device::CudaReport>,
    /// `runtime serve` only: where it listens (the bound address, so `--port 0`
    /// is usable by a program) and the served model id; absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerInfo>,
}

/// A bucket of the `startup` event's `under_load`: from `sequences`
/// sequences in a pass on, draft `drafting` (`width 2`, `off`, ...), as
/// `record` measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadBucket {
    pub sequences: usize,
    pub drafting: String,
    pub record: String,
}

/// The `startup` event: this build, the device, the target and the
/// speculative configuration (`generate` and `serve` both write it).
pub fn startup_event(
    engine: &Engine,
    selection: &dispatch::Selection,
    decoding: &crate::speculative::setup::Decoding,
    sampling: SamplingParams,
    max_tokens: usize,
    cuda: Option<crate::device::CudaReport>,
) -> Startup {
    let spec = decoding.speculation.as_ref();
    let device_class = engine.loaded.model.device_class(selection.family);
    let verify_fingerprint = policy::DeviceClass::parse(&device_class)
        .map(|d| crate::policy::verify_fingerprint(&d, Some(&engine.loaded.info.weight_formats)))
        .unwrap_or_default();
    Startup {
        schema_version: SCHEMA_VERSION,
        build: BuildInfo::current(),
        device_class,
        kernel_family: engine.loaded.model.kernel_family_name(selection.family).into(),
        kernel_family_forced: selection.forced,
        threads: engine.threads,
        multirow: dispatch::multirow_enabled(),
        pages: engine.loaded.model.weights.pages(),
        target: engine.loaded.info.clone(),
        tokenizer: engine.loaded.tokenizer.source.clone(),
        chat_template: engine.loaded.tokenizer.chat_template_from.to_string(),
        drafter: spec.map_or("none".into(), |s| s.kind.to_string()),
        drafter_from: decoding.drafter_from().into(),
        drafter_settings: spec.map(|s| s.settings.clone()),
        width: spec.and_then(|s| s.width),
        host_class: Some(crate::policy::host_class_here().to_string()),
        width_from: decoding.resolution.width_from.clone(),
        entry_emitted_per_verify: decoding.resolution.entry().and_then(|e| e.emitted_per_verify),
        adaptive: spec.is_some_and(|s| s.cost.is_some()),
        adaptive_from: spec.map_or(String::new(), |s| s.adaptive_from.clone()),
        precision: crate::policy::key_precision(&engine.loaded.info.weight_formats, engine.loaded.model.precision())
            .map(|p| p.as_str().to_string()),
        under_load: spec
            .filter(|s| s.active_width().is_some())
            .map(|s| {
                s.ladder
                    .iter()
                    .map(|b| LoadBucket {
                        sequences: b.sequences,
                        drafting: policy::Drafting::label(b.drafting),
                        record: b.record.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        kernel_fingerprint: crate::policy::KERNEL_FINGERPRINT.into(),
        verify_fingerprint,
        exactness_probe: spec.and_then(|s| s.probe.clone()),
        allow_inexact: spec.is_some_and(|s| s.allow_inexact),
        sampling,
        max_tokens,
        cuda,
        server: None,
    }
}

/// The listening side of `runtime serve`, in its `startup` event.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerInfo {
    /// The bound socket address, `IP:port` (`[IPv6]:port`), with the port
    /// the system chose under `--port 0`.
    pub address: String,
    /// The id requests pass as `model`.
    pub model: String,
}

/// Token counts as the runtime measured them (OpenAI's `usage`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// One finished request, as the `completion` event carries it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Completion {
    pub schema_version: u32,
    pub prompt_id: String,
    /// Warm-up passes are reported but belong in no statistic.
    pub warmup: bool,
    /// Index of this pass among `--repeat` passes of the prompt (0-based).
    pub repeat: usize,
    pub text: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a finished request produced and how long it took: the part of a
/// [`Completion`] that a measurement keeps (the tuner's raw rows flatten it
/// in, in this field order).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub usage: Usage,
    /// `stop` (end-of-generation token, not included) or `length`.
    pub finish_reason: FinishReason,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub total_ms: f64,
    /// Target forward passes after the prefill (one per token in classic
    /// decoding; one per verify block in speculative decoding).
    pub decode_steps: usize,
    /// Tokens emitted after the first (which the prefill yields).
    pub decode_tokens: usize,
    /// `decode_tokens / decode time`; null when there were none.
    pub decode_tok_per_s: Option<f64>,
    /// `prompt_tokens / prefill time`.
    pub prefill_tok_per_s: f64,
    /// sha256 of the completion's text as UTF-8, lowercase hex.
    pub text_sha256: String,
    /// sha256 of the token ids as consecutive little-endian u32, lowercase hex.
    pub token_ids_sha256: String,
    pub token_ids: Vec<u32>,
}

impl Completion {
    /// The `completion` event of a decoded request whose token ids decode to `text`.
    pub fn new(prompt_id: &str, warmup: bool, repeat: usize, g: Generation, text: String) -> Self {
        let decode_tokens = g.token_ids.len().saturating_sub(1);
        Completion {
            schema_version: SCHEMA_VERSION,
            prompt_id: prompt_id.to_string(),
            warmup,
            repeat,
            outcome: Outcome {
                usage: Usage {
                    prompt_tokens: g.prompt_tokens,
                    completion_tokens: g.token_ids.len(),
                    total_tokens: g.prompt_tokens + g.token_ids.len(),
                },
                finish_reason: g.finish_reason,
                prefill_ms: g.prefill_s * 1e3,
                decode_ms: g.decode_s * 1e3,
                total_ms: (g.prefill_s + g.decode_s) * 1e3,
                decode_steps: g.decode_steps,
                decode_tokens,
                decode_tok_per_s: (decode_tokens > 0 && g.decode_s > 0.0).then(|| decode_tokens as f64 / g.decode_s),
                prefill_tok_per_s: g.prompt_tokens as f64 / g.prefill_s,
                text_sha256: sha256_hex(text.as_bytes()),
                token_ids_sha256: token_ids_sha256(&g.token_ids),
                token_ids: g.token_ids,
            },
            text,
        }
    }
}

// Defined beside the decoders that produce it; named here, where it is written.
impl FinishReason {
    /// The name in events and responses (OpenAI's `finish_reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What follows a speculative request's `completion`: the drafter's
/// diagnostics, or the reason it decoded classically instead.
#[derive(Clone, Debug)]
pub enum SpeculationReport {
    Diagnostics(SpeculativeDiagnostics),
    Declined(Declined),
}

impl SpeculationReport {
    /// The per-request event that is one, `None` for the others.
    pub fn from_event(e: Event) -> Option<Self> {
        match e {
            Event::SpeculativeDiagnostics(d) => Some(SpeculationReport::Diagnostics(d)),
            Event::Declined(d) => Some(SpeculationReport::Declined(d)),
            Event::Startup(_) | Event::Completion(_) => None,
        }
    }

    pub fn into_event(self) -> Event {
        match self {
            SpeculationReport::Diagnostics(d) => Event::SpeculativeDiagnostics(d),
            SpeculationReport::Declined(d) => Event::Declined(d),
        }
    }

    /// The request it follows: (`prompt_id`, `warmup`, `repeat`).
    pub fn request(&self) -> (&str, bool, usize) {
        match self {
            SpeculationReport::Diagnostics(d) => (&d.prompt_id, d.warmup, d.repeat),
            SpeculationReport::Declined(d) => (&d.prompt_id, d.warmup, d.repeat),
        }
    }

    pub fn drafter(&self) -> &str {
        match self {
            SpeculationReport::Diagnostics(d) => &d.drafter,
            SpeculationReport::Declined(d) => &d.drafter,
        }
    }

    pub fn diagnostics(&self) -> Option<&SpeculativeDiagnostics> {
        match self {
            SpeculationReport::Diagnostics(d) => Some(d),
            SpeculationReport::Declined(_) => None,
        }
    }
}

/// Per speculative request: what the drafter proposed and the target kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpeculativeDiagnostics {
    pub schema_version: u32,
    pub prompt_id: String,
    pub warmup: bool,
    pub repeat: usize,
    pub drafter: String,
    #[serde(alias = "block_size")]
    pub width: policy::Width,
    /// Verify passes that carried at least one drafted token (0 when the
    /// request ended before any round ran).
    pub rounds: usize,
    /// Target passes whose draft was empty (the drafter had nothing).
    pub plain_steps: usize,
    pub drafted: usize,
    pub accepted: usize,
    /// `accepted / drafted`; null when nothing was drafted.
    pub acceptance_rate: Option<f64>,
    /// Rounds in which draft position `i` was accepted.
    pub accepted_per_position: Vec<usize>,
    /// Tokens emitted per verify pass that carried a draft; null with no rounds.
    pub emitted_per_verify: Option<f64>,
    pub draft_ms: f64,
    pub verify_ms: f64,
    pub accept_ms: f64,
    /// Totals divided by `rounds + plain_steps` (every target pass); null with none.
    pub draft_ms_per_round: Option<f64>,
    pub verify_ms_per_round: Option<f64>,
    pub accept_ms_per_round: Option<f64>,
    /// Where the target passes' time went: plain steps (one row, nothing
    /// drafted; compare with a classic request's `decode_ms / decode_steps`)
    /// and the verify blocks of rounds, each in total and per pass (null
    /// with none); and sampling the first token of each step.
    #[serde(default)]
    pub plain_step_ms: f64,
    #[serde(default)]
    pub plain_step_ms_mean: Option<f64>,
    #[serde(default)]
    pub round_verify_ms: f64,
    #[serde(default)]
    pub round_verify_ms_mean: Option<f64>,
    #[serde(default)]
    pub sample_ms: f64,
    /// The draft lengths were chosen per round (the adaptive schedule, up
    /// to `width`), not fixed at `width`. Absent (false) in older events,
    /// as are the three fields after it (empty, zero): older records
    /// write back byte for byte.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adaptive: bool,
    /// `draft_lengths[n]`: target passes whose round asked for `n` drafted
    /// tokens (0: a plain step by choice).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draft_lengths: Vec<usize>,
    /// Adaptive rounds that drafted one token to probe after a run of
    /// plain steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub probes: usize,
    /// Tokens emitted by rounds (the integer behind `emitted_per_verify`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub emitted_in_rounds: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl SpeculativeDiagnostics {
    pub fn new(
        prompt_id: &str,
        warmup: bool,
        repeat: usize,
        drafter: &str,
        schedule: &crate::speculative::schedule::Schedule,
        s: &SpecStats,
    ) -> Self {
        let passes = s.rounds + s.plain_steps;
        let per = |t: f64| (passes > 0).then(|| t * 1e3 / passes as f64);
        SpeculativeDiagnostics {
            schema_version: SCHEMA_VERSION,
            prompt_id: prompt_id.to_string(),
            warmup,
            repeat,
            drafter: drafter.to_string(),
            width: schedule.cap(),
            rounds: s.rounds,
            plain_steps: s.plain_steps,
            drafted: s.drafted,
            accepted: s.accepted,
            acceptance_rate: s.acceptance_rate(),
            accepted_per_position: s.accepted_per_position.clone(),
            emitted_per_verify: s.emitted_per_verify(),
            draft_ms: s.draft_s * 1e3,
            verify_ms: s.verify_s * 1e3,
            accept_ms: s.accept_s * 1e3,
            draft_ms_per_round: per(s.draft_s),
            verify_ms_per_round: per(s.verify_s),
            accept_ms_per_round: per(s.accept_s),
            plain_step_ms: s.plain_s * 1e3,
            plain_step_ms_mean: (s.plain_steps > 0).then(|| s.plain_s * 1e3 / s.plain_steps as f64),
            round_verify_ms: s.round_verify_s * 1e3,
            round_verify_ms_mean: (s.rounds > 0).then(|| s.round_verify_s * 1e3 / s.rounds as f64),
            sample_ms: s.sample_s * 1e3,
            adaptive: schedule.is_adaptive(),
            draft_lengths: s.draft_lengths.clone(),
            probes: s.probes,
            emitted_in_rounds: s.emitted_in_rounds,
        }
    }
}

/// A speculative request that ran classic decoding instead, and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Declined {
    pub schema_version: u32,
    pub prompt_id: String,
    pub warmup: bool,
    pub repeat: usize,
    pub drafter: String,
    #[serde(alias = "block_size")]
    pub width: policy::Width,
    pub reason: String,
    /// The failed probe, when that is the reason.
    pub probe: Option<ProbeReport>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The token-id hash of [`Completion::token_ids_sha256`].
pub fn token_ids_sha256(ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    sha256_hex(&bytes)
}

impl Event {
    /// One JSON line (no trailing newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("events serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hash_is_over_little_endian_u32() {
        assert_eq!(token_ids_sha256(&[1]), sha256_hex(&[1, 0, 0, 0]));
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn completion_round_trips_with_event_tag() {
        let c = Completion {
            schema_version: SCHEMA_VERSION,
            prompt_id: "p".into(),
            warmup: false,
            repeat: 0,
            text: "hi".into(),
            outcome: Outcome {
                usage: Usage { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
                finish_reason: FinishReason::Length,
                prefill_ms: 1.0,
                decode_ms: 2.0,
                total_ms: 3.0,
                decode_steps: 1,
                decode_tokens: 1,
                decode_tok_per_s: Some(500.0),
                prefill_tok_per_s: 3000.0,
                text_sha256: sha256_hex(b"hi"),
                token_ids_sha256: token_ids_sha256(&[1, 2]),
                token_ids: vec![1, 2],
            },
        };
        let line = Event::Completion(c).to_line();
        assert!(line.starts_with("{\"event\":\"completion\""), "{line}");
        assert!(line.contains("\"finish_reason\":\"length\""), "{line}");
        let back: Event = serde_json::from_str(&line).unwrap();
        assert!(matches!(back, Event::Completion(c) if c.outcome.token_ids == vec![1, 2]));
    }
}
