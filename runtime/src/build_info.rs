//! The identity of this build, as reported in `startup` events and by
//! `runtime build-info --json` (which the tuner records).
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// What was built, from which source, with which compiler.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: String,
    /// `git rev-parse HEAD` at build time, or "unknown".
    pub git_commit: String,
    /// Whether tracked files differed from HEAD (`"true"`, `"false"` or
    /// `"unknown"` in JSON).
    pub git_dirty: GitDirty,
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
            git_dirty: GitDirty::from_name(env!("DRAFTWISE_GIT_DIRTY")),
            features: if cfg!(feature = "cuda") { vec!["cuda".to_string()] } else { Vec::new() },
            rustc: env!("DRAFTWISE_RUSTC_VERSION").to_string(),
            profile: env!("DRAFTWISE_BUILD_PROFILE").to_string(),
            cuda_archs: Vec::new(),
            kernel_fingerprint: crate::policy::KERNEL_FINGERPRINT.to_string(),
        }
    }
}

/// Whether the build's tracked files differed from HEAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitDirty {
    /// `"false"`: the build is of HEAD exactly.
    Clean,
    /// `"true"`: tracked files had changes not in HEAD.
    Dirty,
    /// `"unknown"`: git could not say (no repository, no git). Any other
    /// name reads as this too, so an identity from another build still reads.
    Unknown,
}

impl GitDirty {
    pub fn as_str(self) -> &'static str {
        match self {
            GitDirty::Clean => "false",
            GitDirty::Dirty => "true",
            GitDirty::Unknown => "unknown",
        }
    }

    /// The name `build.rs` passes (and JSON holds).
    pub fn from_name(s: &str) -> Self {
        match s {
            "false" => GitDirty::Clean,
            "true" => GitDirty::Dirty,
            _ => GitDirty::Unknown,
        }
    }
}

impl fmt::Display for GitDirty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for GitDirty {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for GitDirty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(GitDirty::from_name(&String::deserialize(d)?))
    }
}
