//! Raw data to a decision, in the order a record is read: the summary's
//! types ([`summary`]), the estimators ([`estimate`], [`stats`]), the rules
//! that refuse ([`rules`]), the one decision rule ([`decision`]), how stable
//! it is ([`stability`]), the records of a key pooled ([`pool`]), the
//! summarizer that applies them ([`summarize`]) and the synthetic sweeps
//! that calibrate it ([`simulate`]); and the predicted ratios of an
//! acceptance profile on a host's verify-cost curves ([`predict`]), measured
//! against every committed sweep ([`predict_error`]).
pub mod calibration;
pub mod check;
pub mod decision;
pub mod estimate;
pub mod pool;
pub mod predict;
pub mod predict_error;
pub mod rules;
pub mod simulate;
pub mod stability;
pub mod stats;
pub mod summarize;
pub mod summary;
