//! The target's quantization class as the key holds it: the class, the
//! evidence in words, and the file and field that decided. The classifier
//! that reads model files (GGUF layer matrices, `config.json`, safetensors
//! headers) is the runtime's, beside the model code; it never fails and
//! always says why (`unknown` with the reason when nothing could be read).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The class of a target nobody could classify.
pub const UNKNOWN: &str = "unknown";

/// How the target's weights are quantized, and how that was decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantClass {
    /// Lowercase class (`q4_1`, `nvfp4`, `bf16`, ...) or `unknown`.
    pub class: String,
    /// The evidence in words, or why there is none.
    pub from: String,
    /// The file that was read.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// The field (or metadata key, or tensor set) that decided.
    #[serde(default)]
    pub field: Option<String>,
    /// The format that declared the class (`gguf`, `mlx`, `modelopt`,
    /// `compressed-tensors`, `gptq`, `awq`, `fp8`, `bitsandbytes`,
    /// `torch_dtype`, `safetensors`); not part of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

impl QuantClass {
    pub fn new(class: impl Into<String>, from: impl Into<String>, file: &Path, field: impl Into<String>) -> Self {
        QuantClass {
            class: class.into(),
            from: from.into(),
            file: Some(file.to_path_buf()),
            field: Some(field.into()),
            format: None,
        }
    }

    pub fn declared_by(mut self, format: &str) -> Self {
        self.format = Some(format.to_string());
        self
    }

    /// An unknown class with the reason (`from`) and the file it concerns.
    pub fn unknown(file: Option<&Path>, why: impl Into<String>) -> Self {
        QuantClass {
            class: UNKNOWN.into(),
            from: why.into(),
            file: file.map(Path::to_path_buf),
            field: None,
            format: None,
        }
    }

    /// An unknown class with the file and the field that could not be read.
    pub fn unknown_at(file: &Path, field: impl Into<String>, why: impl Into<String>) -> Self {
        QuantClass {
            class: UNKNOWN.into(),
            from: why.into(),
            file: Some(file.to_path_buf()),
            field: Some(field.into()),
            format: None,
        }
    }

    pub fn is_unknown(&self) -> bool {
        self.class == UNKNOWN
    }
}
