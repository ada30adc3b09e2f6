//! What a checkpoint says about itself, read from its files without loading
//! its weights: the parts of a policy key that come from model files. The
//! loaders (`crate::model`) call the classifier on the target they load;
//! `policy explain` and the speculative setup call both readers on paths.
//!
//! - [`quant`]: the target classifier (GGUF layer matrices, `config.json`,
//!   safetensors headers) → [`policy::QuantClass`], never failing, always
//!   with its evidence; [`classify_path`] for a file or directory.
//! - [`declared`]: the width a drafter checkpoint (or the target, for MTP
//!   heads) declares → [`policy::Declared`], resolution step 2;
//!   [`read_declared`].
//!
//! The types are the `policy` crate's; only the reading is here, beside the
//! GGUF and safetensors readers it shares with the loaders.

pub mod declared;
pub mod quant;

#[cfg(test)]
pub(crate) mod tests;

pub use declared::read_declared;
pub use quant::classify_path;
