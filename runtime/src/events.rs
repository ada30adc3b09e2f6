//! The typed JSONL events the runtime writes with `--json`, and the only
//! thing the tuner reads from it (never free-form log text). One object per
//! line; the `event` field names the kind; every event carries
//! `schema_version`. Field names carry their units.

use crate::build_info::BuildInfo;
use crate::model::ModelInfo;
use crate::sampling::SamplingParams;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped whenever a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // one event per request: size is irrelevant
pub enum Event {
    Startup(Startup),
    Completion(Completion),
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
    pub target: ModelInfo,
    pub tokenizer: String,
    /// Drafter kind; `none` while only classic decoding exists.
    pub drafter: String,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
}

/// Token counts as the runtime measured them (OpenAI's `usage`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// One finished request.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Completion {
    pub schema_version: u32,
    pub prompt_id: String,
    /// Warm-up passes are reported but belong in no statistic.
    pub warmup: bool,
    /// Index of this pass among `--repeat` passes of the prompt (0-based).
    pub repeat: usize,
    pub usage: Usage,
    /// `stop` (end-of-generation token, not included) or `length`.
    pub finish_reason: String,
    pub text: String,
    pub token_ids: Vec<u32>,
    /// sha256 of `text` as UTF-8, lowercase hex.
    pub text_sha256: String,
    /// sha256 of the token ids as consecutive little-endian u32, lowercase hex.
    pub token_ids_sha256: String,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub total_ms: f64,
    /// One-token forward passes after the prefill.
    pub decode_steps: usize,
    /// `decode_steps / decode time`; null when there were no steps.
    pub decode_tok_per_s: Option<f64>,
    /// `prompt_tokens / prefill time`.
    pub prefill_tok_per_s: f64,
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
            usage: Usage { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
            finish_reason: "length".into(),
            text: "hi".into(),
            token_ids: vec![1, 2],
            text_sha256: sha256_hex(b"hi"),
            token_ids_sha256: token_ids_sha256(&[1, 2]),
            prefill_ms: 1.0,
            decode_ms: 2.0,
            total_ms: 3.0,
            decode_steps: 1,
            decode_tok_per_s: Some(500.0),
            prefill_tok_per_s: 3000.0,
        };
        let line = Event::Completion(c).to_line();
        assert!(line.starts_with("{\"event\":\"completion\""), "{line}");
        let back: Event = serde_json::from_str(&line).unwrap();
        assert!(matches!(back, Event::Completion(c) if c.token_ids == vec![1, 2]));
    }
}
