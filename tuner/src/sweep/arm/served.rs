//! `tuner sweep --served`: one arm as a `runtime serve` process fed
//! streamed HTTP requests, measured from the client side (docs/records.md,
//! "Served sweeps").
//!
//! Principal items: [`serve_args`] (the server's command line: the arm's
//! settings, exactly as a generate arm gets them), [`run`] (start, learn
//! the port from the typed `startup` event, wait for `/health`, send every
//! pass over the prompt set as streamed requests, join each response to its
//! `completion` event, stop with SIGTERM then SIGKILL), [`stop_server`].
//!
//! The server's stdout is read on a thread: every line goes to the arm's
//! stdout log as emitted, and each parsed [`Event`] to the driver. Nothing
//! is read from its stderr (the human log), which goes to a file.
use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use runtime::events::{Completion, Event, ServedTimings, SpeculationReport, Startup};
use runtime::prompts::PromptItem;

use crate::analysis::rules::arm as rules;
use crate::data::raw::{ArmEnd, ArmStartup, RawLine, ServedSample, ServedSettings, ServerEnd, ServerStop, Settings};
use crate::data::writer::RawWriter;
use crate::sweep::stream::{self, Endpoint};

/// Default `--health-timeout`: model load, the exactness probe and binding
/// take seconds on a small model; a large one on a slow disk, a minute.
pub const DEFAULT_HEALTH_TIMEOUT_S: f64 = 120.0;
/// Default `--stop-timeout`: the server gives a running request 10 s
/// (`runtime::serve::SHUTDOWN_GRACE`) and exits; between arms none runs.
pub const DEFAULT_STOP_TIMEOUT_S: f64 = 15.0;
/// Default `--request-timeout`: one streamed request, start to `[DONE]`.
pub const DEFAULT_REQUEST_TIMEOUT_S: f64 = 300.0;

/// How long a response's `completion` event may lag behind its `[DONE]`:
/// the server writes the event before it answers, so only the pipe and the
/// reader thread lie between them.
const EVENT_WAIT: Duration = Duration::from_secs(10);
/// A speculative request's diagnostics (or decline) follow its completion
/// in the same write.
const EXTRA_WAIT: Duration = Duration::from_secs(2);
/// Between `/health` polls, and the limit of one poll.
const HEALTH_POLL: Duration = Duration::from_millis(100);
const HEALTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// After the server exits, how long its last stdout lines may take to arrive.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// The server's command line for one arm: the model, threads and
/// speculative flags of [`super::generate::arm_args`], on an any-port loopback
/// listener with typed events on stdout, with as many batch slots
/// (`--parallel`) as the sweep has concurrent clients, so no measured request
/// waits in the server's queue for a slot.
pub fn serve_args(s: &Settings, width: Option<crate::data::plan::SpeculativeArm>) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "serve".into(),
        "--json".into(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "0".into(),
        "--model".into(),
        s.target.display().to_string(),
        "--threads".into(),
        s.design.threads.to_string(),
        "--parallel".into(),
        concurrency(s).to_string(),
    ];
    if let Some(p) = &s.precision {
        a.extend(["--precision".to_string(), p.clone()]);
    }
    a.extend(super::drafter_args(s, width));
    a
}

/// The sweep's concurrent clients per arm (1 for a generate sweep).
pub fn concurrency(s: &Settings) -> usize {
    s.served.as_ref().map_or(1, |sv| sv.concurrency)
}

/// A line of the server's stdout, or why it could not be read or logged.
enum Line {
    Event(Box<Event>),
    Bad(String),
}

/// A log that never fails a read: the first write error is kept for the
/// reader to report, and reading (which the server's writes wait on) goes on.
struct LossyLog {
    file: super::NamedLog,
    failed: Option<std::io::Error>,
}

impl Write for LossyLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Err(e) = self.file.write_all(buf) {
            self.failed.get_or_insert(e);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads the server's stdout on a thread: each line into `log` as emitted,
/// each parsed event to the returned channel, which closes at end of file.
fn spawn_reader(stdout: std::process::ChildStdout, log: super::NamedLog) -> Receiver<Line> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(stdout);
        let mut log = LossyLog { file: log, failed: None };
        while let Ok(Some(line)) = super::next_line(&mut r, &mut log) {
            if let Some(e) = log.failed.take() {
                let _ = tx.send(Line::Bad(format!("writing the stdout log: {e}")));
            }
            let msg = match line {
                super::Line::Event(e) => Line::Event(e),
                bad => Line::Bad(bad.problem().unwrap_or_default()),
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });
    rx
}

/// The server's events, gathered by response id as they arrive (a
/// response's events may arrive before or after the tuner reads its end).
struct Events {
    rx: Receiver<Line>,
    startup: Option<Startup>,
    completions: HashMap<String, Completion>,
    /// `speculative_diagnostics` or `declined`, by `prompt_id`.
    extras: HashMap<String, SpeculationReport>,
    bad: Vec<String>,
    closed: bool,
}

impl Events {
    fn new(rx: Receiver<Line>) -> Self {
        Events {
            rx,
            startup: None,
            completions: HashMap::new(),
            extras: HashMap::new(),
            bad: Vec::new(),
            closed: false,
        }
    }

    /// Takes in one line, waiting at most `wait`; false when none came.
    fn pump(&mut self, wait: Duration) -> bool {
        if self.closed {
            return false;
        }
        let line = match self.rx.recv_timeout(wait) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => return false,
            Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                return false;
            }
        };
        match line {
            Line::Bad(why) => self.bad.push(why),
            Line::Event(e) => match *e {
                Event::Startup(s) if self.startup.is_none() => self.startup = Some(s),
                Event::Startup(_) => self.bad.push("a second startup event".into()),
                Event::Completion(c) => {
                    if let Some(old) = self.completions.insert(c.prompt_id.clone(), c) {
                        self.bad.push(format!("two completion events for response {}", old.prompt_id));
                    }
                }
                ev => {
                    if let Some(sp) = SpeculationReport::from_event(ev) {
                        self.extras.insert(sp.request().0.to_string(), sp);
                    }
                }
            },
        }
        true
    }

    /// The completion event of response `id` (waiting up to [`EVENT_WAIT`])
    /// and, when `extra`, the diagnostics or decline that follow it.
    fn take(&mut self, id: &str, extra: bool) -> (Option<Completion>, Option<SpeculationReport>) {
        let deadline = Instant::now() + EVENT_WAIT;
        while !self.completions.contains_key(id) && wait_left(deadline).is_some_and(|w| self.pump(w) || !self.closed) {}
        let Some(c) = self.completions.remove(id) else { return (None, None) };
        if extra {
            let deadline = Instant::now() + EXTRA_WAIT;
            while !self.extras.contains_key(id) && wait_left(deadline).is_some_and(|w| self.pump(w) || !self.closed) {}
        }
        (Some(c), self.extras.remove(id))
    }
}

fn wait_left(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left.min(Duration::from_millis(100)))
}

/// A started server; dropping it without [`stop_server`] kills it, so no
/// error path of the tuner leaves a server running.
struct Server {
    child: Option<Child>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut()
            && matches!(c.try_wait(), Ok(None))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Stops a server: nothing to do if it already exited; else SIGTERM, up to
/// `timeout` for it to exit, then SIGKILL. Returns how it ended, the
/// milliseconds from the signal to the exit, and its exit status.
pub fn stop_server(child: &mut Child, timeout: Duration) -> std::io::Result<(ServerStop, Option<u64>, ExitStatus)> {
    if let Some(st) = child.try_wait()? {
        return Ok((ServerStop::ExitedEarly, None, st));
    }
    let t = Instant::now();
    let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
    // SAFETY: kill(2) only sends a signal. `pid` is this process's child,
    // not yet reaped (`try_wait` saw it running and nothing else waits on
    // it), so the id cannot have been reused by another process.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        // ESRCH: it exited between try_wait and kill.
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok((ServerStop::Sigterm, Some(t.elapsed().as_millis() as u64), st));
        }
        if t.elapsed() >= timeout {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill()?;
    let st = child.wait()?;
    Ok((ServerStop::Sigkill, Some(t.elapsed().as_millis() as u64), st))
}

/// What one served arm needs besides the raw writer.
pub struct ServedArm<'a> {
    pub run: super::ArmRun<'a>,
    pub settings: &'a Settings,
    pub served: &'a ServedSettings,
    /// The record's prompt set, parsed as `runtime generate` parses it.
    pub prompts: &'a [PromptItem],
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

/// A step of an arm: `Err` ends the arm with that reason (a finding of the
/// arm, not an error of the tuner).
type Step<T> = std::result::Result<T, String>;

/// Runs one served arm: request lines into `w` as they complete; the
/// returned `arm_end` says whether the arm is a measurement and, if not, why.
/// The steps: the startup event, `/health`, the request passes, the stop.
pub fn run(a: &ServedArm<'_>, w: &mut RawWriter) -> Result<ArmEnd> {
    let run = &a.run;
    let (mut end, started) = super::start(run)?;
    let Some(super::Started { mut child, stdout_log: out_file, stderr, t0 }) = started else { return Ok(end) };
    let stderr_log = end.stderr_log.clone();
    let pid = child.id();
    let stdout = child.stdout.take();
    let mut server = Server { child: Some(child) };
    let Some(stdout) = stdout else {
        anyhow::bail!("the server's stdout was not captured");
    };
    let mut events = Events::new(spawn_reader(stdout, out_file));
    let mut info = ServerEnd { pid, address: None, ready_ms: None, stop: ServerStop::Sigterm, stop_ms: None };
    let mut problems: Vec<String> = Vec::new();
    let health_deadline = t0 + secs(a.served.health_timeout_s);
    let failure: Option<String> = 'run: {
        let Some(child) = server.child.as_mut() else { break 'run Some("the server process is gone".into()) };
        let startup = match await_startup(a, &mut events, child, health_deadline, &stderr_log) {
            Ok(s) => s,
            Err(why) => break 'run Some(why),
        };
        let served_info = startup.server.clone();
        w.write(&RawLine::from(ArmStartup { arm: run.arm.index, attempt: run.attempt, startup }))?;
        let Some(si) = served_info else {
            break 'run Some(
                "the startup event has no `server` address: this runtime predates `tuner sweep --served`; \
                 rebuild it (`cargo build --release -p runtime`)"
                    .into(),
            );
        };
        info.address = Some(si.address.clone());
        let addr = match loopback(&si.address) {
            Ok(addr) => addr,
            Err(why) => break 'run Some(why),
        };
        if let Err(why) = await_health(a, child, addr, health_deadline, &stderr_log) {
            break 'run Some(why);
        }
        info.ready_ms = Some(t0.elapsed().as_millis() as u64);
        send_passes(a, w, &mut events, addr, &si.model, &mut end, &mut problems)?.err()
    };
    // Stop it, whatever happened, and say how it ended.
    let stop_timeout = secs(a.served.stop_timeout_s);
    let stopped = match server.child.as_mut() {
        Some(c) => stop_server(c, stop_timeout).context("stopping the server")?,
        None => anyhow::bail!("the server process is gone"),
    };
    let (stop, stop_ms, status) = stopped;
    stderr.finish();
    info.stop = stop;
    info.stop_ms = stop_ms;
    // Its last lines (events of a request cut short) into the log, and counted.
    let drain = Instant::now() + DRAIN_WAIT;
    while !events.closed && Instant::now() < drain {
        events.pump(Duration::from_millis(50));
    }
    end.bad_lines = events.bad.len();
    let mut errors: Vec<String> = Vec::new();
    errors.extend(failure);
    errors.extend(rules::server_stop_problem(stop, &status, &stderr_log, a.served.stop_timeout_s));
    errors.extend(events.bad.iter().take(5).cloned());
    errors.extend(problems);
    if errors.is_empty() {
        errors.extend(rules::served_leftovers(events.completions.len(), end.requests));
    }
    end.server = Some(info);
    super::finish(&mut end, status, t0, errors);
    drop(server);
    Ok(end)
}

/// Step 1: the typed startup event, which says what the server resolved
/// and where it listens.
fn await_startup(
    a: &ServedArm<'_>,
    events: &mut Events,
    child: &mut Child,
    deadline: Instant,
    stderr_log: &str,
) -> Step<Startup> {
    while events.startup.is_none() {
        if Instant::now() >= deadline {
            return Err(format!(
                "no startup event within {:.0} s of starting the server (--health-timeout); its log: {stderr_log}",
                a.served.health_timeout_s
            ));
        }
        if !events.pump(Duration::from_millis(100)) && events.closed {
            let status = child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
            return Err(format!("the server exited ({status}) before its startup event (stderr: {stderr_log})"));
        }
    }
    events.startup.clone().ok_or_else(|| "no startup event".to_string())
}

/// The server's address, which must be a loopback socket address.
fn loopback(address: &str) -> Step<SocketAddr> {
    match address.parse::<SocketAddr>() {
        Ok(x) if x.ip().is_loopback() => Ok(x),
        Ok(x) => Err(format!("the server listens on {x}, not loopback; the tuner starts it with --host 127.0.0.1")),
        Err(e) => Err(format!("the startup event's server.address {address:?}: {e}")),
    }
}

/// Step 2: ready when `/health` answers 200.
fn await_health(
    a: &ServedArm<'_>,
    child: &mut Child,
    addr: SocketAddr,
    deadline: Instant,
    stderr_log: &str,
) -> Step<()> {
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("the server exited ({st}) before it was healthy (stderr: {stderr_log})"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the server at {addr} did not answer GET /health with 200 within {:.0} s of starting \
                 (--health-timeout); its log: {stderr_log}",
                a.served.health_timeout_s
            ));
        }
        if let Ok((200, _)) = crate::sweep::http::get(addr, "/health", left.min(HEALTH_REQUEST_TIMEOUT)) {
            return Ok(());
        }
        std::thread::sleep(HEALTH_POLL.min(left));
    }
}

/// Step 3: the warm-up passes, then the bursts. Each pass sends every prompt
/// as a streamed request through [`ServedSettings::concurrency`] client
/// threads ([`send_pass`]); then, in file order, each response is joined to
/// its `completion` event and written to `w` as a request line, so the raw
/// rows keep one order whatever order the requests finished in.
fn send_passes(
    a: &ServedArm<'_>,
    w: &mut RawWriter,
    events: &mut Events,
    addr: SocketAddr,
    model: &str,
    end: &mut ArmEnd,
    problems: &mut Vec<String>,
) -> Result<Step<()>> {
    let (run, s) = (&a.run, a.settings);
    let arm = run.arm;
    let request_timeout = secs(a.served.request_timeout_s);
    for pass in 0..s.design.warmup + s.design.bursts_of(arm.width) {
        let warmup = pass < s.design.warmup;
        let what = |p: &PromptItem| {
            if warmup {
                format!("warm-up pass {} of prompt {}", pass + 1, p.id)
            } else {
                format!("burst {} of prompt {}", pass - s.design.warmup, p.id)
            }
        };
        let sent = send_pass(a.prompts, a.served.concurrency, |p| {
            stream::complete(addr, model, &p.kind, s.design.max_tokens, request_timeout)
        });
        for (p, got) in a.prompts.iter().zip(sent) {
            let what = what(p);
            let got = match got {
                Some(Ok(g)) => g,
                Some(Err(e)) => return Ok(Err(format!("{what}: {} {}: {e}", "POST", Endpoint::of(&p.kind).path()))),
                // Not sent: an earlier request of the pass failed, and is reported first.
                None => return Ok(Err(format!("{what}: not sent, a request of the pass failed"))),
            };
            let (completion, extra) = events.take(&got.id, arm.width.is_some());
            let Some(c) = completion else {
                return Ok(Err(format!(
                    "{what}: no `completion` event for response {} on the server's stdout within {} s",
                    got.id,
                    EVENT_WAIT.as_secs()
                )));
            };
            if warmup {
                end.warmup_requests += 1;
                continue;
            }
            let text_sha256 = runtime::events::sha256_hex(got.text.as_bytes());
            problems.extend(rules::served_disagreements(&what, &got, &c, &text_sha256));
            let prompt_type = super::prompt_type(run.types, &p.id);
            let mut row = run.rows.row(c, prompt_type, pass - s.design.warmup);
            row.prompt_id = p.id.clone();
            row.outcome.usage = got.usage.clone();
            row.outcome.finish_reason = got.finish_reason;
            row.outcome.text_sha256 = text_sha256;
            if let Some(sp) = extra {
                row.join(sp);
            }
            let e2e_s = got.e2e_ms / 1e3;
            row.served = Some(ServedSample {
                endpoint: Endpoint::of(&p.kind).path().to_string(),
                response_id: got.id.clone(),
                ttft_ms: got.ttft_ms,
                e2e_ms: got.e2e_ms,
                e2e_tok_per_s: (got.usage.completion_tokens > 0 && e2e_s > 0.0)
                    .then(|| got.usage.completion_tokens as f64 / e2e_s),
                chunks: got.chunks,
                // `batch` (the passes it ran in and how many sequences they
                // carried) stays: it is what the concurrency did to it.
                server: got.draftwise.map(|d| ServedTimings { token_ids: None, ..d }),
            });
            w.write(&RawLine::from(row))?;
            end.requests += 1;
        }
    }
    Ok(Ok(()))
}

/// One pass over `prompts` through `clients` threads: each thread takes the
/// next prompt not yet taken and sends it with `send`, so at most `clients`
/// requests are in flight and each runs beside up to `clients - 1` others.
/// The answers come back in prompt order. After a failure no thread takes
/// another prompt; the prompts never sent are `None`.
fn send_pass<T: Send, E: Send>(
    prompts: &[PromptItem],
    clients: usize,
    send: impl Fn(&PromptItem) -> std::result::Result<T, E> + Sync,
) -> Vec<Option<std::result::Result<T, E>>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let answers: Mutex<Vec<Option<std::result::Result<T, E>>>> =
        Mutex::new(std::iter::repeat_with(|| None).take(prompts.len()).collect());
    std::thread::scope(|scope| {
        for _ in 0..clients.clamp(1, prompts.len().max(1)) {
            scope.spawn(|| {
                while !failed.load(Ordering::Acquire) {
                    let i = next.fetch_add(1, Ordering::AcqRel);
                    let Some(p) = prompts.get(i) else { return };
                    let got = send(p);
                    if got.is_err() {
                        failed.store(true, Ordering::Release);
                    }
                    // A poisoned lock only means another client panicked,
                    // which the scope re-raises; the slots stay usable.
                    answers.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(got);
                }
            });
        }
    });
    answers.into_inner().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn prompts(n: usize) -> Vec<PromptItem> {
        (0..n)
            .map(|i| PromptItem {
                id: format!("p{i}"),
                kind: runtime::prompts::PromptKind::Text("x".into()),
                tag: None,
            })
            .collect()
    }

    #[test]
    fn a_pass_keeps_at_most_its_clients_in_flight_and_answers_in_prompt_order() {
        for clients in [1, 2, 3, 8] {
            let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let ps = prompts(7);
            let got = send_pass(&ps, clients, |p| {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
                now.fetch_sub(1, Ordering::SeqCst);
                Ok::<String, ()>(p.id.clone())
            });
            let ids: Vec<String> = got.into_iter().map(|g| g.unwrap().unwrap()).collect();
            assert_eq!(ids, (0..7).map(|i| format!("p{i}")).collect::<Vec<_>>(), "{clients} client(s)");
            // Seven prompts of 20 ms each: the clients are all busy at once.
            assert_eq!(most.load(Ordering::SeqCst), clients.min(7), "{clients} client(s)");
        }
    }

    #[test]
    fn after_a_failed_request_no_client_takes_another_prompt() {
        let ps = prompts(6);
        let got = send_pass(&ps, 1, |p| if p.id == "p2" { Err(p.id.clone()) } else { Ok(()) });
        assert!(matches!(got[..3], [Some(Ok(())), Some(Ok(())), Some(Err(_))]), "{got:?}");
        assert!(got[3..].iter().all(Option::is_none), "{got:?}");
    }
}
