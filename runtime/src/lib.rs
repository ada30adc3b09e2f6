//! draftwise `runtime`: an LLM inference engine with a speculative decoder.
//!
//! Principal types: [`gguf::GgufFile`] (GGUF reader), [`model::Model`]
//! (weights + config + forward pass), [`tokenizer::Tokenizer`] (byte-level
//! BPE and chat templates), [`generate::Generator`] (classic decoding) and
//! [`events::Event`] (the typed JSONL schema shared with the tuner).

pub mod build_info;
pub mod fetch;
pub mod gguf;
