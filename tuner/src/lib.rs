//! `tuner`: measures draft widths on this host and refuses measurements it
//! cannot trust. Folders by role in the pipeline (docs/layout.md): a reader
//! knows from the folder whether a file looks at the host, holds data,
//! reasons over it, runs processes or writes for a reviewer. Arrows point
//! down this list only: `sweep` and `output` use `analysis`, which uses
//! `data`, which uses `host`; none imports back (`scripts/import-circles.py
//! tuner/src` in CI finds no circle).
//!
//! - [`host`]: is this host fit to measure on, and what is it?
//!   - [`host::gate`]: the gate ([`host::gate::GateConfig`],
//!     [`host::gate::GateReport`], [`host::gate::Gate`]; `gate::check(&cfg)`
//!     for library use), its readers and verdict, the watch during an arm.
//!   - [`host::identity`]: the host, toolchain and runtime build
//!     ([`host::identity::Identity`]).
//!   - [`host::procfs`]: capped readers and parsers for the `/proc` files used.
//!   - [`host::reading`]: [`host::reading::Reading`], a value or an explicit
//!     null with its reason.
//! - [`data`]: what a sweep writes and reads back.
//!   - [`data::plan`]: the design (`Design`: widths, rounds, passes,
//!     brackets), its defaults and bounds, and the arm plan it gives.
//!   - [`data::raw`]: `raw.jsonl` ([`data::raw::RawLine`]) and its reader.
//!   - [`data::writer`]: [`data::writer::RawWriter`], raw.jsonl appended
//!     line by line under the record's path names.
//!   - [`data::path_names`]: paths as a record names them, and back.
//!   - [`data::verify_cost`]: the verify-cost curve's raw line, summary types,
//!     flag bounds and report reader.
//!   - [`data::streamed`]: one streamed completion as the client saw it.
//! - [`analysis`]: raw data to a decision.
//!   - [`analysis::summary`]: the [`analysis::summary::Summary`] types.
//!   - [`analysis::decision`]: the one decision rule, the adaptive choice,
//!     drift survival and the auto-rounds stop.
//!   - [`analysis::estimate`]: per-round ratios (the process as the unit),
//!     the drift test, the tie test; [`analysis::stats`]: descriptive
//!     statistics; [`analysis::stability`]: how often a replicate repeats
//!     the choice; [`analysis::pool`]: every record of a key pooled.
//!   - [`analysis::rules`]: every reason an arm, width or record is not a
//!     measurement, and [`analysis::rules::Refusal`].
//!   - [`analysis::summarize`]: raw data → summary, applying the rules.
//!   - [`analysis::simulate`]: synthetic sweeps with known truth, for the
//!     calibration test.
//! - [`sweep`]: runs the processes.
//!   - [`sweep::driver`]: `tuner sweep`, the bracketed arm plan and its driver.
//!   - [`sweep::arm`]: one arm's process, logs and events
//!     ([`sweep::arm::generate`], [`sweep::arm::served`], [`sweep::arm::cost`]).
//!   - [`sweep::stream`] and [`sweep::http`]: one OpenAI streamed completion,
//!     timed from the client, over the loopback HTTP client.
//! - [`output`]: what a reviewer reads and commits.
//!   - [`output::record`]: `record.md`, `summary.csv`, `plot.svg`.
//!   - [`output::propose`]: the policy entry, or a refusal with its remedy.
//!   - [`output::ledger`]: every sweep's line, kept or not.
//! - [`exit`]: the process exit codes, one place.
pub mod analysis;
pub mod data;
pub mod host;
pub mod output;
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
