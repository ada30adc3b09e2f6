//! One verify-cost process of a sweep ([`crate::data::verify_cost`]): its command line
//! and its run.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use anyhow::Result;

use crate::data::raw::Settings;
use crate::data::verify_cost::{COST_REPS, CostRun, MAX_REPORT_BYTES, read_report};

/// Rows of the widest pass timed: the widest width's verify pass.
pub fn max_rows(s: &Settings) -> usize {
    s.design.adaptive_cap().verify_rows()
}

/// The cost process's command line: the arms' model and threads.
pub fn cost_args(s: &Settings, context: usize) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "bench".into(),
        "--json".into(),
        "--verify-cost".into(),
        "--model".into(),
        s.target.display().to_string(),
        "--threads".into(),
        s.design.threads.to_string(),
        "--prompt-tokens".into(),
        context.to_string(),
        "--max-rows".into(),
        max_rows(s).to_string(),
        "--reps".into(),
        COST_REPS.to_string(),
        "--warmup".into(),
        "1".into(),
    ];
    if let Some(p) = &s.precision {
        a.extend(["--precision".to_string(), p.clone()]);
    }
    a
}

/// Runs one cost process (logs `logs/cost-rNN-cC-attempt-K.{stdout.jsonl,
/// stderr.log}` under `dir`) and reads its report; the line says whether
/// it is a measurement. `Err` only for the tuner's own I/O.
pub fn run(
    dir: &Path,
    (round, context, attempt): (usize, usize, usize),
    argv: &[String],
    env: &BTreeMap<String, String>,
    names: &std::sync::Arc<crate::data::path_names::PathNames>,
    rows: usize,
) -> Result<CostRun> {
    let stem = format!("cost-r{round:02}-c{context}-attempt-{attempt}");
    let logged = super::spawn_logged(dir, &stem, argv, env, names)?;
    let mut line = CostRun::not_run(round, context, attempt, String::new(), String::new());
    line.argv = argv.to_vec();
    line.stdout_log = logged.stdout_log;
    line.stderr_log = logged.stderr_log.clone();
    let stderr_log = logged.stderr_log;
    let super::Started { mut child, stdout_log: mut out_file, stderr, t0 } = match logged.started {
        Ok(s) => s,
        Err(why) => {
            line.error = Some(why);
            return Ok(line);
        }
    };
    let mut bytes = Vec::new();
    if let Some(out) = child.stdout.take() {
        out.take(MAX_REPORT_BYTES + 1).read_to_end(&mut bytes)?;
    }
    out_file.write_all(&bytes)?;
    // Past the cap the process may block on a full pipe: end it.
    if bytes.len() as u64 > MAX_REPORT_BYTES {
        let _ = child.kill();
    }
    let status = child.wait()?;
    stderr.finish();
    line.duration_ms = t0.elapsed().as_millis() as u64;
    let verdict = if bytes.len() as u64 > MAX_REPORT_BYTES {
        Err(format!("more than {MAX_REPORT_BYTES} bytes on stdout"))
    } else if !status.success() {
        Err(format!("the cost process exited with {status} (its log: {stderr_log})"))
    } else {
        read_report(&bytes, rows)
    };
    match verdict {
        Ok((one_row_s, relative)) => {
            line.ok = true;
            line.one_row_s = Some(one_row_s);
            line.relative = relative;
            line.error = None;
        }
        Err(why) => line.error = Some(why),
    }
    Ok(line)
}
