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
    /// Whether tracked files differed from HEAD: a JSON boolean, `null`
    /// when git could not say (events before schema 3 hold the strings
    /// `"true"`, `"false"` or `"unknown"`, which still read).
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
        match self {
            GitDirty::Clean => s.serialize_bool(false),
            GitDirty::Dirty => s.serialize_bool(true),
            GitDirty::Unknown => s.serialize_none(),
        }
    }
}

/// What a `git_dirty` field may hold: the boolean (or `null`) written since
/// events schema 3, or the string of the versions before.
#[derive(Deserialize)]
#[serde(untagged)]
enum GitDirtyJson {
    Bool(bool),
    Name(String),
}

impl<'de> Deserialize<'de> for GitDirty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<GitDirtyJson>::deserialize(d)? {
            Some(GitDirtyJson::Bool(false)) => GitDirty::Clean,
            Some(GitDirtyJson::Bool(true)) => GitDirty::Dirty,
            Some(GitDirtyJson::Name(n)) => GitDirty::from_name(&n),
            None => GitDirty::Unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_dirty_is_a_json_boolean_and_the_old_strings_still_read() {
        for (v, json) in [(GitDirty::Clean, "false"), (GitDirty::Dirty, "true"), (GitDirty::Unknown, "null")] {
            assert_eq!(serde_json::to_string(&v).unwrap(), json);
            assert_eq!(serde_json::from_str::<GitDirty>(json).unwrap(), v);
        }
        for (json, v) in [
            (r#""false""#, GitDirty::Clean),
            (r#""true""#, GitDirty::Dirty),
            (r#""unknown""#, GitDirty::Unknown),
            (r#""maybe""#, GitDirty::Unknown),
        ] {
            assert_eq!(serde_json::from_str::<GitDirty>(json).unwrap(), v, "{json}");
        }
        assert!(serde_json::from_str::<GitDirty>("1").is_err(), "a number is not a dirty state");
        let b = BuildInfo::current();
        let j: serde_json::Value = serde_json::to_value(&b).unwrap();
        assert!(j["git_dirty"].is_boolean() || j["git_dirty"].is_null(), "{j}");
        assert_eq!(serde_json::from_value::<BuildInfo>(j).unwrap(), b);
    }
}
