//! The verify pass's cost in a sweep (docs/records.md, "Verify cost"): what
//! a pass of `R` rows costs against a one-row pass, at a short and a long
//! context, measured on the host the widths are measured on. It is the cost
//! model an adaptive drafter needs (how much a longer draft costs before it
//! is accepted), and the entry carries it (`verify_cost`).
//!
//! After each round's last arm, the sweep runs one `runtime bench
//! --verify-cost` process per context length of `--cost-contexts` (default
//! [`DEFAULT_COST_CONTEXTS`]), gated like an arm and watched for contention
//! like one; the process prefills that many tokens, then times passes of
//! `1..=max width + 1` rows, rotating the order each repetition. A process's
//! medians are one replicate: the unit of the curve's interval is the
//! process (one a round), as for the widths' ratios. A cost process that
//! fails or runs through contention does not stop the sweep: its line says
//! why, and the round's curve is missing (named in the record).
//!
//! The curve is the target's pass alone: a drafter that is a model of its
//! own (`draft-model`, `layerskip`) also pays its drafting, which the arms'
//! diagnostics time (`draft_s`).
//!
//! Here: the raw line ([`CostRun`]), the summary's types ([`CostCurve`]),
//! the bounds of `--cost-contexts` and the report reader; the process is
//! run by [`crate::sweep::arm::cost`] and the curves computed by
//! `crate::analysis::summarize::cost`.
use serde::{Deserialize, Serialize};

/// The default context lengths: 64 positions (the sweep's prompts are chat
/// requests of 30–150 tokens, where the weights dominate a row's cost) and
/// 2,048 (a long editing request, where each row also reads the attention
/// over two thousand cached positions: the case where the best width moves).
pub const DEFAULT_COST_CONTEXTS: [usize; 2] = [64, 2048];
/// [`DEFAULT_COST_CONTEXTS`] as `tuner sweep --cost-contexts` defaults to it
/// (a test holds the two together).
pub const DEFAULT_COST_CONTEXTS_ARG: &str = "64,2048";
/// At most this many context lengths (an entry carries at most as many curves).
pub const MAX_COST_CONTEXTS: usize = policy::table::MAX_COST_CURVES;
/// The longest context a cost process is given (its prefill is paid every round).
pub const MAX_COST_CONTEXT: usize = 32_768;
/// Timed repetitions inside one cost process, after one warm-up.
pub const COST_REPS: usize = 3;
/// A cost process that ran through contention is run at most this many times a round.
pub const COST_ATTEMPTS: usize = 2;
/// The most stdout bytes read from a cost process (its one report line is a few KiB).
pub const MAX_REPORT_BYTES: u64 = 1 << 20;

/// One cost process: written after it ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CostRun {
    /// 0-based round it followed.
    pub round: usize,
    /// Positions prefilled before the timed passes.
    pub context: usize,
    /// 0 for the first run of this (round, context), 1 after contention, ...
    pub attempt: usize,
    pub started_at_unix_ms: u64,
    /// The program and every argument (empty when the gate kept it from running).
    pub argv: Vec<String>,
    /// The gate before it, as one line.
    pub gate: String,
    /// Exited 0 with a well-formed report and no contention.
    pub ok: bool,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub stdout_log: String,
    pub stderr_log: String,
    /// Median seconds of a one-row pass in this process.
    pub one_row_s: Option<f64>,
    /// `relative[i]`: the median pass of `i + 1` rows over the median
    /// one-row pass (so `relative[0]` is 1); empty when not ok.
    pub relative: Vec<f64>,
    /// What the gate saw while it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<crate::host::gate::during::DuringArm>,
}

impl CostRun {
    /// A line for a cost process the gate kept from running.
    pub fn not_run(round: usize, context: usize, attempt: usize, gate: String, why: String) -> CostRun {
        CostRun {
            round,
            context,
            attempt,
            started_at_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            argv: Vec::new(),
            gate,
            ok: false,
            error: Some(why),
            duration_ms: 0,
            stdout_log: String::new(),
            stderr_log: String::new(),
            one_row_s: None,
            relative: Vec::new(),
            contention: None,
        }
    }
}

/// `--cost-contexts 64,2048` (or `none`): sorted, each once, each
/// 1..=[`MAX_COST_CONTEXT`], at most [`MAX_COST_CONTEXTS`].
pub fn parse_contexts(s: &str) -> Result<Vec<usize>, String> {
    if s.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let n: usize = part.trim().parse().map_err(|_| format!("--cost-contexts: {part:?} is not a number"))?;
        out.push(n);
    }
    out.sort_unstable();
    out.dedup();
    check_contexts(&out)?;
    Ok(out)
}

/// The bounds of [`parse_contexts`], for options built in code too.
pub fn check_contexts(c: &[usize]) -> Result<(), String> {
    if c.len() > MAX_COST_CONTEXTS {
        return Err(format!("--cost-contexts: {} lengths; at most {MAX_COST_CONTEXTS}", c.len()));
    }
    if let Some(n) = c.iter().find(|&&n| n == 0 || n > MAX_COST_CONTEXT) {
        return Err(format!("--cost-contexts: {n} is not 1..={MAX_COST_CONTEXT} positions"));
    }
    if c.windows(2).any(|w| w[0] >= w[1]) {
        return Err("--cost-contexts: give increasing lengths, each once".into());
    }
    Ok(())
}

/// The one-row median and the relative costs of rows `1..=rows` from a
/// `runtime bench --verify-cost --json` report (its last non-blank line).
pub fn read_report(bytes: &[u8], rows: usize) -> Result<(f64, Vec<f64>), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "stdout is not UTF-8".to_string())?;
    let Some(last) = text.lines().rev().find(|l| !l.trim().is_empty()) else {
        return Err("no report on stdout".into());
    };
    let r: runtime::bench::BenchReport =
        serde_json::from_str(last).map_err(|e| format!("the report does not parse: {e}"))?;
    if r.verify_cost.len() != rows || r.verify_cost.iter().enumerate().any(|(i, c)| c.rows != i + 1) {
        return Err(format!(
            "the report times {} pass sizes ({:?}); asked for 1..={rows} rows",
            r.verify_cost.len(),
            r.verify_cost.iter().map(|c| c.rows).collect::<Vec<_>>()
        ));
    }
    let relative: Vec<f64> = r.verify_cost.iter().map(|c| c.relative_to_one_row).collect();
    let one = r.verify_cost[0].seconds.median;
    if !(one.is_finite() && one > 0.0) || relative.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return Err("the report holds a time that is not a positive number".into());
    }
    Ok((one, relative))
}

/// One point of a cost curve: a pass of `rows` rows against a one-row pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostPoint {
    pub rows: usize,
    /// Geometric mean over the rounds' processes.
    pub relative: f64,
    /// t interval over the rounds (null below two).
    pub interval: Option<(f64, f64)>,
    /// `(round, relative)` per round.
    pub per_round: Vec<(usize, f64)>,
}

/// A context length's curve in a summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostCurve {
    pub context: usize,
    /// Rounds whose cost process is a measurement.
    pub rounds: usize,
    /// Median over those rounds of the one-row pass, in milliseconds.
    pub one_row_ms: Option<f64>,
    pub points: Vec<CostPoint>,
    /// Rounds without a measurement, and why (never dropped silently).
    pub missing: Vec<(usize, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_parsed_sorted_and_bounded() {
        assert_eq!(parse_contexts("2048,64").unwrap(), vec![64, 2048]);
        assert_eq!(parse_contexts("64, 64").unwrap(), vec![64]);
        assert!(parse_contexts("none").unwrap().is_empty());
        assert!(parse_contexts("0").unwrap_err().contains("not 1..="));
        assert!(parse_contexts("40000").unwrap_err().contains("not 1..="));
        assert!(parse_contexts("1,2,3,4,5").unwrap_err().contains("at most 4"));
        assert!(parse_contexts("64,x").unwrap_err().contains("\"x\" is not a number"));
        assert!(check_contexts(&[64, 32]).is_err());
        assert_eq!(parse_contexts(DEFAULT_COST_CONTEXTS_ARG).unwrap(), DEFAULT_COST_CONTEXTS);
    }

    /// A report in schema 1's field names (`width`, `relative_to_w1`), which
    /// still read: the tuner reads the reports of older runtimes too.
    fn report(widths: &[(usize, f64)]) -> String {
        let cost: Vec<String> = widths
            .iter()
            .map(|(w, s)| {
                format!(
                    "{{\"width\":{w},\"seconds\":{{\"n\":3,\"median\":{s},\"min\":{s},\"max\":{s},\
                     \"median_ci95\":[{s},{s}],\"outliers\":[],\"samples\":[{s},{s},{s}]}},\
                     \"relative_to_w1\":{}}}",
                    s / widths[0].1
                )
            })
            .collect();
        format!(
            "{{\"schema_version\":1,\"event\":\"bench\",\"model\":\"m\",\"kernel_family\":\"avx2\",\"threads\":2,\
             \"multirow\":true,\"spec\":{{\"prompt_tokens\":64,\"gen_tokens\":128,\"reps\":3,\"warmup\":1,\
             \"verify_cost\":{}}},\"prompt_ids\":[1],\"prefill_tok_per_s\":null,\"decode_tok_per_s\":null,\
             \"reps\":[],\"verify_cost\":[{}]}}\n",
            widths.len(),
            cost.join(",")
        )
    }

    #[test]
    fn a_report_gives_the_relative_costs_and_a_wrong_one_is_refused() {
        let ok = report(&[(1, 0.01), (2, 0.011), (3, 0.013)]);
        let (one, rel) = read_report(ok.as_bytes(), 3).unwrap();
        assert_eq!(one, 0.01);
        assert_eq!(rel.len(), 3);
        assert!((rel[1] - 1.1).abs() < 1e-12 && (rel[2] - 1.3).abs() < 1e-12, "{rel:?}");
        // Fewer pass sizes than asked, a gap, a bad number, no report: refused, saying why.
        assert!(read_report(ok.as_bytes(), 4).unwrap_err().contains("asked for 1..=4 rows"));
        let gap = report(&[(1, 0.01), (3, 0.013)]);
        assert!(read_report(gap.as_bytes(), 2).is_err());
        let negative = report(&[(1, 0.01), (2, -0.011)]);
        assert!(read_report(negative.as_bytes(), 2).unwrap_err().contains("positive"));
        assert!(read_report(b"\n\n", 2).unwrap_err().contains("no report"));
        assert!(read_report(b"{\"event\":\"bench\"}\n", 2).unwrap_err().contains("does not parse"));
    }
}
