//! The runtime's side of the draft-width policy: the table compiled into
//! this binary, this build's verify-path fingerprints, and this host's
//! class. The types, the table compiler and the resolver are the `policy`
//! crate's, imported from it directly (`policy::Width`); the readers that
//! take a key's parts from model files are [`crate::checkpoint`]'s.
//!
//! - [`compiled_table`]: the table this binary was built with;
//!   [`compiled_resolver`] (and [`resolve`]) resolve against it with this
//!   build's fingerprints.
//! - [`KERNEL_FINGERPRINT`] for the whole build, [`verify_fingerprint`] for
//!   one key, from each part's hash in [`PART_HASHES`].
//! - [`host_class_here`]: this host's CPU class, [`UNKNOWN_HOST`] when it
//!   has none.
//!
//! How the table gets in: `build.rs` compiles `policy/draft-block-width.toml`
//! with [`policy::table::compile`] (record paths checked against the
//! repository), fails the build on any problem, and copies the validated
//! bytes to `OUT_DIR`; this module embeds that copy with `include_str!` and
//! compiles it again on first use, without the record check (records are not
//! shipped with the binary). Embedding the copy, not the source file, means
//! the bytes in the binary are exactly the bytes that were validated.

use ::policy::fingerprint;
use ::policy::resolve::{PolicyError, Resolution, ResolveInput, Resolver};
use ::policy::{DeviceClass, HostClass, TABLE_FILE, Table};
use std::sync::OnceLock;

// Only for the verify-path files (`policy::fingerprint::VERIFY_PATH`), which
// still name these items as `crate::policy::...`: editing one of those files
// would stale every committed policy entry (their bytes are hashed) until
// `tuner check` can re-bless entries. New code imports the `policy` crate
// (and `crate::checkpoint` for the classifier) directly; drop each name here
// once no verify-path file uses it.
pub use ::policy::{DrafterKind, ModelClass, Width, adaptive, table};

/// The activation precision a run with these weight formats puts in its
/// key ([`::policy::key::key_precision`]): the model's own precision
/// where it changes anything (CPU or CUDA), else none.
pub fn key_precision(weight_formats: &[String], precision: kernels::act8::Precision) -> Option<::policy::Precision> {
    ::policy::key::key_precision(weight_formats, Some(precision.as_str())).ok().flatten()
}

/// The classifier entry points and class type the loaders reach as
/// `crate::policy::quant::...` (`model/mod.rs`, `model/hf.rs`, both on the
/// verify path; see above).
pub mod quant {
    pub use crate::checkpoint::quant::{classify_gguf, classify_hf_dir};
    pub use ::policy::quant::QuantClass;
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_policy::formats;
    use ::policy::table::{RecordCheck, compile};
    use std::path::{Path, PathBuf};

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
    }

    #[test]
    fn the_shipped_table_compiles_against_the_repository_and_is_the_one_compiled_in() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let text = std::fs::read_to_string(root.join(TABLE_FILE)).unwrap();
        let t = compile(TABLE_FILE, &text, RecordCheck::Under(root)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&t, compiled_table());
        assert_eq!(t.schema_version, 3);
    }

    #[test]
    fn the_build_fingerprints_are_the_parts_hashed_now() {
        use ::policy::fingerprint::{VERIFY_PATH, combine, part_hash};
        let root = workspace();
        let hashes: Vec<String> = VERIFY_PATH.iter().map(|p| part_hash(&root, p.path).unwrap()).collect();
        assert_eq!(hashes, PART_HASHES, "build.rs hashed other bytes than the tree has");
        let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
        assert_eq!(combine(&refs, |_| true), KERNEL_FINGERPRINT);
        assert_eq!(KERNEL_FINGERPRINT.len(), 16);
        assert!(KERNEL_FINGERPRINT.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let fp = verify_fingerprint(&DeviceClass::parse("cpu:x86_64-avx512vnni").unwrap(), Some(&formats()));
        assert_eq!(fp.len(), 16);
        assert_ne!(fp, KERNEL_FINGERPRINT, "a CPU key leaves the CUDA parts out");
    }
}
