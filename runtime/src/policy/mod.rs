//! The runtime's side of the draft-width policy: the table compiled into
//! this binary, this build's verify-path fingerprints, and the readers that
//! take a policy key's parts from model files. The types, the table compiler
//! and the resolver are the `policy` crate's (re-exported here).
//!
//! - [`quant`]: the target classifier (GGUF layer matrices, `config.json`,
//!   safetensors headers) → [`QuantClass`].
//! - [`declared`]: widths a checkpoint declares → [`Declared`].
//! - [`compiled_table`]: the table this binary was built with;
//!   [`compiled_resolver`] resolves against it with this build's
//!   fingerprints.
//! - [`KERNEL_FINGERPRINT`] for the whole build, [`verify_fingerprint`] for
//!   one key.
//!
//! How the table gets in: `build.rs` compiles `policy/draft-block-width.toml`
//! with [`policy::table::compile`] (record paths checked against the
//! repository), fails the build on any problem, and copies the validated
//! bytes to `OUT_DIR`; this module embeds that copy with `include_str!` and
//! compiles it again on first use, without the record check (records are not
//! shipped with the binary). Embedding the copy, not the source file, means
//! the bytes in the binary are exactly the bytes that were validated.

pub mod declared;
pub mod quant;

#[cfg(test)]
pub(crate) mod tests;

pub use ::policy::*;
pub use declared::read_declared;
pub use quant::classify_path;

use std::sync::OnceLock;

/// The verify-path fingerprint over every part (16 hex digits): the build's
/// identity; see [`fingerprint`] for what it covers. Entries record the
/// fingerprint of their own key, [`verify_fingerprint`].
pub const KERNEL_FINGERPRINT: &str = env!("DRAFTWISE_KERNEL_FINGERPRINT");

/// Each part's hash, in [`fingerprint::VERIFY_PATH`]'s order, as `build.rs`
/// computed it.
pub const PART_HASHES: [&str; fingerprint::VERIFY_PATH.len()] =
    include!(concat!(env!("OUT_DIR"), "/verify_path_hashes.rs"));

/// This build's verify-path fingerprint for a key: the parts that apply to
/// `device` and to a target with these weight formats (`None`: not known,
/// so every format's parts).
pub fn verify_fingerprint(device: &DeviceClass, weight_formats: Option<&[String]>) -> String {
    fingerprint::combine(&PART_HASHES, |p| fingerprint::applies(p, device.as_str(), weight_formats))
}

/// The table's bytes as `build.rs` validated them.
pub const COMPILED_TABLE_TOML: &str = include_str!(concat!(env!("OUT_DIR"), "/draft-block-width.toml"));

/// The table compiled into this binary.
pub fn compiled_table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        table::compile(TABLE_FILE, COMPILED_TABLE_TOML, table::RecordCheck::Skip)
            .unwrap_or_else(|e| panic!("build.rs validated this table, yet it does not compile: {e}"))
    })
}

/// The compiled table with this build's fingerprints.
pub fn compiled_resolver() -> Resolver<'static> {
    Resolver { table: compiled_table(), fingerprint: &verify_fingerprint }
}

/// Resolves a named drafter's width with the compiled table.
pub fn resolve(input: &ResolveInput<'_>) -> Result<Resolution, PolicyError> {
    compiled_resolver().resolve(input)
}

/// The class a host gets when `/proc/cpuinfo` names no CPU family and model
/// (another OS, a sandbox): it matches no measured entry, so only entries
/// whose whole interval is above 1.0 may stand in.
pub const UNKNOWN_HOST: &str = "unknown-cpu";

/// This host's CPU class, read once from `/proc/cpuinfo` (size-capped).
pub fn host_class_here() -> HostClass {
    static HOST: OnceLock<HostClass> = OnceLock::new();
    HOST.get_or_init(|| {
        HostClass::this_host().unwrap_or_else(|why| {
            tracing::debug!("host class: {why}; using {UNKNOWN_HOST}");
            HostClass::parse(UNKNOWN_HOST).expect("a valid class name")
        })
    })
    .clone()
}
