//! Every rule that decides whether data is a measurement, in one place.
//!
//! "Why was this arm, width or record refused?" is answered here:
//! - [`arm`]: an arm's run (exit, events, a served arm's agreement with its
//!   events, contention during it, the NV_ERR_NO_MEMORY projection before it).
//! - [`width`]: whether a width is a measurement of speculation, whether a
//!   round drifted or cannot be judged, and which startup events make an
//!   arm inexact or no classic baseline.
//! - [`data`]: raw data that is not what the plan says ([`DataProblem`]).
//! - [`key`]: the policy key a record gives, or why it gives none; a
//!   served record under load, which the key cannot tell from an idle one.
//! - [`measurement`]: the record-level refusals of `tuner propose` over a
//!   [`crate::analysis::summary::Summary`] ([`check`]).
//! - [`plan`]: whether the plan could carry its decision (a chosen width at
//!   the edge of the measured range; a gate looser than the defaults).
//! - [`provenance`]: the build, fingerprint and date refusals, each with an
//!   `--allow-*` flag ([`check_provenance`]).
//! - [`refusal`]: [`Refusal`], what each record-level rule returns, with
//!   its remedy.
//!
//! The statistics the rules read (ratios, intervals, the drift test) are
//! computed in [`crate::analysis::estimate`]; the decision among the widths that pass
//! is [`crate::analysis::decision::decide`].
pub mod arm;
pub mod data;
pub mod key;
pub mod measurement;
pub mod plan;
pub mod provenance;
pub mod refusal;
pub mod width;

pub use data::{DataProblem, data_problems};
pub use key::record_key;
pub use measurement::check;
pub use provenance::{Allow, check_build, check_fingerprint, check_not_older, check_provenance, current_fingerprint};
pub use refusal::Refusal;
pub use width::{RoundVerdict, WidthRequests, classic_arm_speculated, not_a_measurement, ran_inexact, round_verdict};
