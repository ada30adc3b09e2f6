//! Speculative decoding: drafters propose tokens, the target verifies them
//! in one multi-row pass, and greedy output stays byte-identical to classic
//! decoding by construction.
//!
//! - [`DrafterKind`], [`drafter::Drafter`] and its kinds ([`drafter::NgramDrafter`],
//!   [`drafter::SuffixDrafter`], [`drafter::ModelDrafter`] for `layerskip` and `draft-model`);
//! - [`decode`]: the loop ([`crate::engine::Engine::generate_speculative`]) and its [`decode::SpecStats`];
//! - [`schedule`]: how many tokens each round drafts (a fixed width, or the adaptive length);
//! - [`probe`]: the block-vs-chain exactness probe run before speculating.

pub mod decode;
pub mod drafter;
pub mod probe;
pub mod schedule;
pub mod setup;

/// Drafter kinds are defined with the policy that keys on them.
pub use crate::policy::DrafterKind;
