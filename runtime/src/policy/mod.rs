//! The draft-width policy: the measured table compiled in, the target
//! classification it is keyed on, and the resolution that picks a width and
//! says where it came from.
//!
//! - [`kind`]: [`DrafterKind`] and the per-kind constants.
//! - [`table`]: the table compiler ([`table::compile`]) shared with
//!   `build.rs`; [`compiled_table`] is the table this binary was built with.
//! - [`quant`]: [`QuantClass`] and the classifier (GGUF, config.json).
//! - [`declared`]: widths a checkpoint declares.
//! - [`resolve`]: [`resolve()`], [`Resolution`] and [`Provenance`].
//! - [`fingerprint`]: the verify-path fingerprint: [`KERNEL_FINGERPRINT`]
//!   for the whole build, [`verify_fingerprint`] for one key.
//!
//! How the table gets in: `build.rs` compiles `policy/draft-block-width.toml`
//! with [`table::compile`] (record paths checked against the repository),
//! fails the build on any problem, and copies the validated bytes to
//! `OUT_DIR`; this module embeds that copy with `include_str!` and compiles
//! it again on first use, without the record check (records are not shipped
//! with the binary). Embedding the copy, not the source file, means the
//! bytes in the binary are exactly the bytes that were validated.

pub mod declared;
pub mod fingerprint;
pub mod kind;
pub mod quant;
pub mod resolve;
pub mod table;

#[cfg(test)]
pub(crate) mod tests;

pub use declared::{Declared, read_declared};
pub use kind::{DeclarationSource, DrafterKind, DrafterSettings, Probability};
pub use quant::{QuantClass, classify_path};
pub use resolve::{
    BLOCK_SIZE_ENV, BLOCK_SIZE_FLAG, Fallback, PolicyError, Provenance, Resolution, ResolveInput, Resolver, Step,
    StepKind, env_override, resolve,
};
pub use table::{Entry, MAX_BLOCK_SIZE, Table, TableError, Width};

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
/// `device_class` and to a target with these weight formats (`None`: not
/// known, so every format's parts).
pub fn verify_fingerprint(device_class: &str, weight_formats: Option<&[String]>) -> String {
    fingerprint::combine(&PART_HASHES, |p| fingerprint::applies(p, device_class, weight_formats))
}

/// The table's path relative to the repository root.
pub const TABLE_FILE: &str = "policy/draft-block-width.toml";

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
