//! The identity of this build, as reported in `startup` events and by
//! `runtime build-info --json` (which the tuner records).
use serde::{Deserialize, Serialize};

/// What was built, from which source, with which compiler.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: String,
    /// `git rev-parse HEAD` at build time, or "unknown".
    pub git_commit: String,
    /// "true", "false" or "unknown": tracked files differed from HEAD.
    pub git_dirty: String,
    /// Cargo features compiled in (e.g. `cuda`).
    pub features: Vec<String>,
    pub rustc: String,
    pub profile: String,
    /// CUDA architectures compiled ahead of time; empty when none.
    pub cuda_archs: Vec<String>,
    /// [`crate::policy::KERNEL_FINGERPRINT`]: policy entries record it.
    #[serde(default)]
    pub kernel_fingerprint: String,
}

impl BuildInfo {
    pub fn current() -> Self {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: env!("DRAFTWISE_GIT_COMMIT").to_string(),
            git_dirty: env!("DRAFTWISE_GIT_DIRTY").to_string(),
            features: if cfg!(feature = "cuda") { vec!["cuda".to_string()] } else { Vec::new() },
            rustc: env!("DRAFTWISE_RUSTC_VERSION").to_string(),
            profile: env!("DRAFTWISE_BUILD_PROFILE").to_string(),
            cuda_archs: Vec::new(),
            kernel_fingerprint: crate::policy::KERNEL_FINGERPRINT.to_string(),
        }
    }
}
