//! draftwise's draft-width policy, with no engine in it: what a measured
//! default is keyed on, how the table of them is compiled, and how one is
//! chosen for a run.
//!
//! - [`kind`]: [`DrafterKind`] and [`DrafterSettings`], the per-kind constants.
//! - [`width`]: [`Width`], drafted tokens per verify pass (`1..=32`; a verify
//!   pass runs `width + 1` rows), `Option<Width>` where `off` is possible.
//! - [`drafting`]: [`Drafting`], fixed or adaptive (`Option<Drafting>`
//!   where `off` is possible): the one drafting choice, table to tuner.
//! - [`key`]: [`PolicyKey`] (drafter, [`DeviceClass`], [`HostClass`], target
//!   quantization class, [`ModelClass`], threads), whose `Display` is the
//!   phrase every message uses.
//! - [`host`]: the host's CPU class from its signature.
//! - [`quant`]: [`QuantClass`], the target's class with its evidence (the
//!   classifier that reads model files is the runtime's).
//! - [`declared`]: [`Declared`], what a checkpoint declares.
//! - [`table`]: the schema-3 table compiler ([`table::compile`]), shared by
//!   `runtime/build.rs`, the runtime and `tuner propose`.
//! - [`fingerprint`]: the verify-path parts and their hashing.
//! - [`resolve`]: [`Resolver`], [`Resolution`] and [`Provenance`].
//! - [`adaptive`]: the per-request draft length from acceptance and the
//!   entry's measured verify cost: the controller the runtime's speculative
//!   loop runs (`runtime/src/speculative/schedule.rs`) for an adaptive entry
//!   or `--adaptive on`.
//! - [`profile`]: acceptance profiles (a drafter's acceptance at every
//!   position of a prompt set's greedy output) and their replay through the
//!   [`adaptive`] controller on a verify-cost curve: the prediction of
//!   `tuner calibrate` and the judge of the controller.

pub mod adaptive;
pub mod declared;
pub mod drafting;
pub mod fingerprint;
pub mod host;
pub mod key;
pub mod kind;
pub mod profile;
pub mod quant;
pub mod resolve;
pub mod table;
pub mod width;

pub use declared::Declared;
pub use drafting::Drafting;
pub use host::HostClass;
pub use key::{DeviceClass, MAX_CONCURRENCY, ModelClass, PolicyKey, Precision};
pub use kind::{DeclarationSource, DrafterKind, DrafterSettings, Probability};
pub use quant::QuantClass;
pub use resolve::{
    Bucket, EnvWidth, Fallback, Fit, PolicyError, Provenance, Resolution, ResolveInput, Resolver, Run, Step, StepKind,
    WIDTH_ENV, WIDTH_ENV_OLD, WIDTH_FLAG, env_override,
};
pub use table::{Entry, Table, TableError};
pub use width::{MAX_WIDTH, Width};

/// The table's path relative to the repository root.
pub const TABLE_FILE: &str = "policy/draft-block-width.toml";
