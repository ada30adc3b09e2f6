//! Rules over one arm's run: what makes an `arm_end` not ok (the process,
//! its events, a served arm's agreement with them, contention while it
//! ran), and the NV_ERR_NO_MEMORY projection that stops a sweep before an
//! arm. The sweep re-runs an arm that ran through contention and halts on
//! any other failure (`crate::sweep::driver`).
use std::process::ExitStatus;

use runtime::events::{Completion, SpeculationReport};

use crate::data::raw::ServerStop;
use crate::data::streamed::Streamed;
use crate::host::gate::during::DuringArm;

/// Adds the problems of a finished runtime process to `problems`: an
/// unsuccessful exit (first, as the likely cause of the rest), no `startup`
/// event, or no recorded request from a process that exited cleanly.
pub fn process_problems(
    status: &ExitStatus,
    stderr_log: &str,
    startup_seen: bool,
    requests: usize,
    problems: &mut Vec<String>,
) {
    if !status.success() {
        problems.insert(0, format!("the runtime exited with {status} (stderr: {stderr_log})"));
    }
    if !startup_seen {
        problems.push("no startup event".into());
    }
    if requests == 0 && status.success() {
        problems.push("no recorded requests".into());
    }
}

/// Diagnostics or a decline with no completion before them: the event
/// stream is not one request after another.
pub fn orphan_report(sp: &SpeculationReport) -> String {
    let (prompt_id, _, _) = sp.request();
    let (what, before) = match sp {
        SpeculationReport::Diagnostics(_) => ("diagnostics", "them"),
        SpeculationReport::Declined(_) => ("a decline", "it"),
    };
    format!("{what} for {prompt_id} with no completion before {before}")
}

/// Where a streamed response disagrees with its `completion` event: the
/// client's view must be the server's (same usage, text and token ids).
/// `text_sha256` is the hash of the streamed text; `what` names the request.
pub fn served_disagreements(what: &str, got: &Streamed, c: &Completion, text_sha256: &str) -> Vec<String> {
    let mut out = Vec::new();
    if got.usage != c.outcome.usage {
        out.push(format!(
            "{what}: the response's usage {:?} differs from its event's {:?}",
            got.usage, c.outcome.usage
        ));
    }
    if text_sha256 != c.outcome.text_sha256 {
        out.push(format!("{what}: the streamed text differs from the text of its completion event"));
    }
    let ids = got.draftwise.as_ref().and_then(|d| d.token_ids.as_ref());
    if ids.is_some_and(|ids| *ids != c.outcome.token_ids) {
        out.push(format!("{what}: the response's draftwise.token_ids differ from its event's"));
    }
    out
}

/// What is wrong with a served arm that otherwise ran clean: completion
/// events for responses the tuner never received (`unclaimed`: the server
/// decoded requests it was not sent), or no recorded request at all.
pub fn served_leftovers(unclaimed: usize, requests: usize) -> Option<String> {
    if unclaimed > 0 {
        Some(format!("{unclaimed} completion event(s) for responses the tuner never received"))
    } else if requests == 0 {
        Some("no recorded requests".into())
    } else {
        None
    }
}

/// What is wrong with how a server ended, if anything: only an exit with
/// success after SIGTERM is clean.
pub fn server_stop_problem(
    stop: ServerStop,
    status: &ExitStatus,
    stderr_log: &str,
    stop_timeout_s: f64,
) -> Option<String> {
    match stop {
        ServerStop::Sigterm if status.success() => None,
        ServerStop::Sigterm => Some(format!("the server exited with {status} after SIGTERM (stderr: {stderr_log})")),
        ServerStop::Sigkill => Some(format!(
            "the server was still running {stop_timeout_s:.0} s after SIGTERM (--stop-timeout): killed with SIGKILL"
        )),
        ServerStop::ExitedEarly => Some(format!("the server exited on its own ({status}; stderr: {stderr_log})")),
    }
}

/// Why an arm that otherwise ended ok is not a measurement because the host
/// was contended while it ran (the sweep runs it again).
pub fn contention(during: &DuringArm) -> Option<String> {
    during.contended().then(|| {
        format!(
            "contention during the arm ({} of {} host readings): {}",
            during.contended_samples,
            during.samples,
            during.reasons.join("; ")
        )
    })
}

/// The NV_ERR_NO_MEMORY count the rest of the sweep could reach: the
/// current count plus the worst delta any arm has caused, for every arm
/// still to run (this one included). `None` without a current count.
pub fn nvrm_projected(now: Option<u64>, worst_delta: Option<u64>, arms_left: usize) -> Option<u64> {
    now.map(|n| n + worst_delta.unwrap_or(0) * arms_left as u64)
}

/// Why the next arm must not start: the projected count reaches `budget`.
pub fn nvrm_over_budget(
    projected: Option<u64>,
    now: Option<u64>,
    worst_delta: Option<u64>,
    arms_left: usize,
    budget: u64,
) -> Option<String> {
    let p = projected.filter(|p| *p >= budget)?;
    Some(format!(
        "projected NV_ERR_NO_MEMORY count {p} (now {}, worst arm delta {}, {arms_left} arm(s) left) reaches the \
         budget of {budget}: not started. Read the kernel log; rerun with fewer arms or raise `--nvrm-budget` only \
         if the errors are understood",
        now.unwrap_or(0),
        worst_delta.unwrap_or(0),
    ))
}
