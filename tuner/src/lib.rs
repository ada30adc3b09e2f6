//! `tuner`: measures draft widths on this host and refuses measurements it
//! cannot trust.
//!
//! Modules:
//! - [`gate`]: is the host fit to measure on now? ([`gate::GateConfig`],
//!   [`gate::GateReport`], [`gate::Gate`]; `gate::check(&cfg)` for library use).
//! - [`identity`]: what this host, toolchain and runtime build are
//!   ([`identity::Identity`]).
//! - [`reading`]: [`reading::Reading`], a value or an explicit null with its
//!   reason, used by both.
//! - [`procfs`]: capped readers and parsers for the `/proc` files used.
//! - [`sweep`]: `tuner sweep`, the bracketed arm plan and its driver.
//! - [`arm`]: one arm's process, logs and events ([`arm::generate`]: a
//!   `runtime generate` arm; [`arm::served`]: `tuner sweep --served`, an arm
//!   as a `runtime serve` process).
//! - [`rules`]: every reason an arm, width or record is not a measurement,
//!   and [`rules::Refusal`].
//! - [`stream`]: one OpenAI streamed completion, timed from the client.
//! - [`http`]: the loopback HTTP/1.1 client and server-sent-events reader.
//! - [`raw`]: `raw.jsonl`, the sweep's raw data ([`raw::RawLine`]).
//! - [`stats`]: descriptive statistics (median, range, MAD outlier flags).
//! - [`estimate`]: per-round ratios (the process as the unit), the drift
//!   test, the tie test.
//! - [`simulate`]: synthetic sweeps with known truth, for the calibration test.
//! - [`summary`]: raw data → [`summary::Summary`] and the decision rule.
//! - [`record`]: `record.md`, `summary.csv`, `plot.svg`.
//! - [`propose`]: the policy entry, or a refusal with its remedy.
//! - [`exit`]: the process exit codes, one place.
pub mod arm;
pub mod cost;
pub mod estimate;
pub mod gate;
pub mod http;
pub mod identity;
pub mod ledger;
pub mod plan;
pub mod pool;
pub mod portable;
pub mod procfs;
pub mod propose;
pub mod raw;
pub mod reading;
pub mod record;
pub mod rules;
pub mod simulate;
pub mod stability;
pub mod stats;
pub mod stream;
pub mod summarize;
pub mod summary;
pub mod sweep;

/// Exit codes of `tuner gate` (and of errors in any subcommand).
pub mod exit {
    /// The gate passed (or the subcommand succeeded).
    pub const PASS: u8 = 0;
    /// The tuner itself failed (an error message says why).
    pub const ERROR: u8 = 1;
    /// Usage error (clap's code).
    pub const USAGE: u8 = 2;
    /// The gate said wait, and `--wait` was not given or ran out.
    pub const WAIT: u8 = 3;
    /// The gate said halt (a sweep: it halted, with a halt line in raw.jsonl).
    pub const HALT: u8 = 4;
    /// `tuner propose` refused the record (the message says why and how to fix it).
    pub const REFUSED: u8 = 5;
}

/// Checks that a JSON document keeps the `Reading` contract everywhere: each
/// `{value, unavailable_reason}` object has exactly one of the two non-null,
/// and no other field is null. Used by the tests of `identity --json`.
#[doc(hidden)]
pub fn readings_complete(v: &serde_json::Value) -> Result<(), String> {
    fn walk(v: &serde_json::Value, path: &str, errs: &mut Vec<String>) {
        use serde_json::Value;
        match v {
            Value::Null => errs.push(format!("{path} is null outside a Reading")),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(x, &format!("{path}[{i}]"), errs)),
            Value::Object(o) if o.len() == 2 && o.contains_key("value") && o.contains_key("unavailable_reason") => {
                match (&o["value"], &o["unavailable_reason"]) {
                    (Value::Null, Value::String(r)) if !r.is_empty() => {}
                    (Value::Null, _) => errs.push(format!("{path} is null without a reason")),
                    (x, Value::Null) => walk(x, &format!("{path}.value"), errs),
                    _ => errs.push(format!("{path} has both a value and a reason")),
                }
            }
            Value::Object(o) => o.iter().for_each(|(k, x)| walk(x, &format!("{path}.{k}"), errs)),
            _ => {}
        }
    }
    let mut errs = Vec::new();
    walk(v, "$", &mut errs);
    if errs.is_empty() { Ok(()) } else { Err(errs.join("\n")) }
}
