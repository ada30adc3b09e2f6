//! A generate arm: one `runtime generate --json` process over the record's
//! prompt set, its warm-up passes and bursts in one run ([`arm_args`],
//! [`run`]). Each request line is written as soon as its completion and
//! any diagnostics or decline that follow it have been read.
use std::io::BufReader;

use anyhow::{Result, bail};
use runtime::events::{Event, SpeculationReport};

use super::{ArmRun, Line, drafter_args, finish, next_line, prompt_type, start};
use crate::data::raw::{ArmEnd, ArmStartup, RawLine, RequestRow};
use crate::data::writer::RawWriter;

/// The runtime command line of one arm: every setting explicit.
pub fn arm_args(s: &crate::data::raw::Settings, width: Option<crate::data::plan::SpeculativeArm>) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "generate".into(),
        "--json".into(),
        "--model".into(),
        s.target.display().to_string(),
        "--prompts".into(),
        s.prompts.display().to_string(),
        "--max-tokens".into(),
        s.design.max_tokens.to_string(),
        "--threads".into(),
        s.design.threads.to_string(),
        "--repeat".into(),
        s.design.bursts_of(width).to_string(),
        "--warmup".into(),
        s.design.warmup.to_string(),
        "--temperature".into(),
        "0".into(),
        "--seed".into(),
        "0".into(),
    ];
    if let Some(p) = &s.precision {
        a.extend(["--precision".to_string(), p.clone()]);
    }
    a.extend(drafter_args(s, width));
    a
}

/// Runs one generate arm: request lines into `w` as they complete; the
/// returned `arm_end` says whether the arm is a measurement and, if not, why.
pub fn run(a: &ArmRun<'_>, w: &mut RawWriter) -> Result<ArmEnd> {
    let (mut end, started) = start(a)?;
    let Some(mut p) = started else { return Ok(end) };
    let Some(stdout) = p.child.stdout.take() else {
        bail!("the runtime's stdout was not captured");
    };
    let mut r = BufReader::new(stdout);
    // A completion waiting to see whether diagnostics or a decline follow it.
    let mut pending: Option<RequestRow> = None;
    let mut startup_seen = false;
    let mut problems: Vec<String> = Vec::new();
    let flush = |p: Option<RequestRow>, w: &mut RawWriter, n: &mut usize| -> Result<()> {
        if let Some(row) = p {
            w.write(&RawLine::from(row))?;
            *n += 1;
        }
        Ok(())
    };
    while let Some(line) = next_line(&mut r, &mut p.stdout_log)? {
        let ev = match line {
            Line::Event(e) => *e,
            bad => {
                end.bad_lines += 1;
                // Every oversize line is named; unparsable ones only the first few.
                if matches!(bad, Line::TooLong) || problems.len() < 5 {
                    problems.extend(bad.problem());
                }
                continue;
            }
        };
        match ev {
            Event::Startup(st) => {
                startup_seen = true;
                w.write(&RawLine::from(ArmStartup { arm: a.arm.index, attempt: a.attempt, startup: st }))?;
            }
            Event::Completion(c) => {
                flush(pending.take(), w, &mut end.requests)?;
                if c.warmup {
                    end.warmup_requests += 1;
                    continue;
                }
                let ty = prompt_type(a.types, &c.prompt_id);
                let burst = c.repeat;
                pending = Some(a.rows.row(c, ty, burst));
            }
            ev => {
                let Some(sp) = SpeculationReport::from_event(ev) else { continue };
                let (prompt_id, warmup, repeat) = sp.request();
                if warmup {
                    continue;
                }
                match pending.as_mut() {
                    Some(row) if row.prompt_id == prompt_id && row.burst == repeat => {
                        row.join(sp);
                        flush(pending.take(), w, &mut end.requests)?;
                    }
                    _ => {
                        end.bad_lines += 1;
                        problems.push(crate::analysis::rules::arm::orphan_report(&sp));
                    }
                }
            }
        }
    }
    flush(pending.take(), w, &mut end.requests)?;
    let status = p.child.wait()?;
    p.stderr.finish();
    crate::analysis::rules::arm::process_problems(&status, &end.stderr_log, startup_seen, end.requests, &mut problems);
    finish(&mut end, status, p.t0, problems);
    Ok(end)
}
