//! Models: loading (GGUF, or Hugging Face safetensors + config.json), the
//! forward pass over a KV cache (Llama and Gemma 3 blocks), and what the
//! runtime reports about the target.

pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod gguf_load;
pub mod hf;
pub mod forward;
pub mod weights;

pub use config::ModelConfig;
pub use forward::{Model, Session};

#[cfg(test)]
mod tests;

use crate::gguf::{GgufError, GgufFile};
use crate::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("architecture {0:?} is not supported (this engine runs: llama, mistral, qwen2, qwen3, gemma3)")]
    UnsupportedArchitecture(String),
    #[error("unsupported model feature: {0}")]
    Unsupported(String),
    #[error("tensor {0} is missing")]
    MissingTensor(String),
    #[error("tensor {tensor}: shape {got:?}, expected {expected:?}")]
    Shape { tensor: String, expected: Vec<u64>, got: Vec<u64> },
    #[error("tensor {tensor}: {source}")]
    Matrix { tensor: String, source: kernels::matvec::MatrixError },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
}

/// How the target's weights are quantized, and how that was decided (the
/// policy table keys on the class; the provenance keeps "unclassifiable"
/// apart from "unmeasured"). The classifier lives in [`crate::policy::quant`].
pub use crate::policy::quant::QuantClass;

/// What the runtime reports about a loaded target.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelInfo {
    pub path: PathBuf,
    /// `gguf` or `safetensors`.
    pub format: String,
    pub architecture: String,
    pub quant: QuantClass,
    pub n_layers: usize,
    pub dim: usize,
    pub vocab: usize,
    pub context_length: usize,
    /// The storage formats (lowercase ggml names) of the matrices the
    /// kernels read: the embedding, the layers' and the head. A policy key's
    /// fingerprint covers these formats' kernels.
    #[serde(default)]
    pub weight_formats: Vec<String>,
    /// Elements of every weight tensor (a tied head counted once): with the
    /// architecture, the model part of a policy key. 0 in events before
    /// schema 2.
    #[serde(default)]
    pub parameters: u64,
}


/// A model with its tokenizer, ready to run.
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
}

/// Loads a GGUF file, or a Hugging Face checkpoint directory (config.json,
/// model.safetensors, tokenizer.json).
pub fn load(path: &Path) -> Result<Loaded, ModelError> {
    if path.is_dir() {
        return hf::load_dir(path);
    }
    let file = Arc::new(GgufFile::open(path)?);
    let config = gguf_load::config_from_gguf(&file)?;
    let mut weights = gguf_load::weights_from_gguf(&file, &config)?;
    weights.repack();
    let quant = crate::policy::quant::classify_gguf(path, &file);
    let architecture = file.get_str("general.architecture")?.to_string();
    let mut tokenizer = Tokenizer::from_gguf(&file)?;
    tokenizer.use_builtin_template(&architecture);
    if tokenizer.vocab_size() > config.vocab {
        return Err(ModelError::Invalid {
            path: path.to_path_buf(),
            problem: format!("tokenizer has {} tokens but the embedding only {}", tokenizer.vocab_size(), config.vocab),
        });
    }
    let info = ModelInfo {
        path: path.to_path_buf(),
        format: "gguf".into(),
        architecture,
        quant,
        n_layers: config.n_layers,
        dim: config.dim,
        vocab: config.vocab,
        context_length: config.context_length,
        weight_formats: weights.formats(),
        parameters: gguf_load::parameters(&file),
    };
    Ok(Loaded { model: Model::new(config, weights), tokenizer, info })
}

/// Which rows of a block need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitRows {
    /// Only the block's last row (prefill, classic decode).
    Last,
    /// Every row (verify blocks, reference checks).
    All,
}

/// Why a forward pass was refused. Nothing was written to the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("token id {id} is outside the vocabulary (size {vocab})")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("context full: {have} cached + {adding} new positions exceed the model's context length {limit}")]
    ContextFull { have: usize, adding: usize, limit: usize },
    #[error("empty token block")]
    Empty,
    /// The CUDA device failed (or the session's cache lives elsewhere).
    #[error("CUDA device: {0}")]
    Device(String),
}

impl ModelInfo {
    /// The target as a policy key holds it.
    pub fn model_class(&self) -> crate::policy::ModelClass {
        crate::policy::ModelClass { architecture: self.architecture.clone(), parameters: self.parameters }
    }

    /// A GGUF file's tokenizer must list one token per embedding row (as
    /// llama.cpp requires): with fewer, the model can emit ids the tokenizer
    /// cannot decode, and they would vanish from the text. (Hugging Face
    /// checkpoints often pad the embedding past the tokenizer; the loader
    /// already refuses a tokenizer larger than the embedding.)
    pub fn check_vocabulary(&self, tokenizer_tokens: usize) -> Result<(), String> {
        if self.format == "gguf" && tokenizer_tokens != self.vocab {
            return Err(format!(
                "{}: the tokenizer has {tokenizer_tokens} tokens but the embedding has {} rows; \
                 tokenizer.ggml.tokens must list one token per embedding row",
                self.path.display(),
                self.vocab
            ));
        }
        Ok(())
    }
}
