//! draftwise `runtime`: an LLM inference engine with a speculative decoder.
//!
//! Principal types: [`gguf::GgufFile`] (GGUF reader), [`model::Model`]
//! (weights + config + forward pass) and [`model::Session`] (KV cache),
//! [`tokenizer::Tokenizer`] (byte-level BPE and chat templates),
//! [`engine::Engine`] (classic decoding on a thread pool) and
//! [`events::Event`] (the typed JSONL schema shared with the tuner),
//! [`checkpoint`] (what a checkpoint's files say: its quantization class
//! and declared width), [`policy`] (the compiled draft-width table and this
//! build's verify-path fingerprints; the policy types are the `policy`
//! crate's) and [`serve`] (the OpenAI-compatible HTTP server).

pub mod batch;
pub mod bench;
pub mod build_info;
pub mod checkpoint;
pub mod commands;
pub mod device;
pub mod engine;
pub mod events;
pub mod exit;
pub mod fetch;
pub mod gguf;
pub mod limits;
pub mod model;
pub mod open;
pub mod penalty;
pub mod policy;
pub mod pool;
pub mod precheck;
pub mod profile;
pub mod prompts;
pub mod request;
pub mod sampling;
pub mod sandbox;
pub mod sequence;
pub mod serve;
pub mod speculative;
pub mod tokenizer;

#[cfg(test)]
mod test_models;
/// The policy tests' helpers (entries, tables, one resolution's input),
/// shared with the policy crate's integration tests.
#[cfg(test)]
#[path = "../../policy/tests/common/mod.rs"]
mod test_policy;
#[cfg(test)]
mod wiring_tests;
