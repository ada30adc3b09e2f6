//! Runs the processes a sweep measures: the driver ([`driver`]: the
//! bracketed plan, the gate before each arm, resume), one arm ([`arm`]: a
//! `runtime generate`, `runtime serve` or verify-cost process), and the
//! client side of a served arm ([`stream`] over [`http`]).
pub mod arm;
pub mod driver;
pub mod http;
pub mod stream;
