//! Runs the processes a sweep measures: the driver ([`driver`]: the
//! bracketed plan, the gate before each arm, resume), one arm ([`arm`]: a
//! `runtime generate`, `runtime serve` or verify-cost process), and the
//! client side of a served arm ([`stream`] over [`http`]); and the
//! decoding, untimed, that makes an acceptance profile ([`profile`]); the
//! verify-cost processes of a calibration ([`calibrate`]).
pub mod arm;
pub mod calibrate;
pub mod driver;
pub mod http;
pub mod profile;
pub mod stream;
