//! `raw.jsonl`: the sweep's raw data, one JSON object per line, written as it
//! happens and flushed per line (docs/records.md documents every field).
//!
//! Principal types: [`RawLine`] (the tagged line kinds), [`RawWriter`]
//! (append + flush per line), [`read_raw`] (a capped, line-numbered reader
//! that tolerates only the one partial line an interrupted write leaves at
//! the end).
use crate::data::plan::SpeculativeArm;
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use runtime::events::{Outcome, ServedTimings, SpeculationReport, SpeculativeDiagnostics, Startup};
use serde::{Deserialize, Serialize};

pub use crate::data::plan::{AutoRounds, Bracket, Design, PlannedArm};
use crate::host::gate::{GateConfig, GateRun, Source};
use crate::host::identity::Identity;

/// Version of the raw.jsonl layout; bump on any change of meaning.
pub const RAW_SCHEMA_VERSION: u32 = 2;
/// The oldest layout still read: version 1 lacks only fields that have
/// serde defaults here (bracket arms and bursts, contention during an arm),
/// so committed version-1 records can be summarized under today's rules.
pub const RAW_SCHEMA_VERSION_MIN: u32 = 1;

/// Longest raw.jsonl line read back (a request line holds its token ids:
/// a few KiB; a header holds the identity: tens of KiB).
pub const MAX_RAW_LINE_BYTES: usize = 16 << 20;
/// Largest raw.jsonl read back (a default sweep writes about 2 MiB).
pub const MAX_RAW_BYTES: u64 = 1 << 30;
/// Most lines of raw.jsonl read back: a default sweep writes about 1,700
/// (104 arms of a start, a startup, twelve requests and an end), a long
/// `--rounds auto` or served sweep a few times that. Each line is held in
/// at most about 1.2 KiB (its boxed variant), so this bounds the memory of
/// a crafted file of tiny lines at about 250 MiB.
pub const MAX_RAW_LINES: usize = 200_000;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
// The large variants are boxed: a line in memory takes the enum's size
// (now the small variants' size) plus its own variant's, not the largest
// variant's 2 KiB, so a file of many tiny lines costs memory in proportion
// to what it holds (with `MAX_RAW_LINES`). Serialized the same (serde
// writes a box as its contents): committed files read and re-summarize
// byte for byte.
pub enum RawLine {
    Sweep(Box<SweepHeader>),
    Resume(ResumeMark),
    ArmStart(Box<ArmStart>),
    Startup(Box<ArmStartup>),
    Request(Box<RequestRow>),
    ArmEnd(Box<ArmEnd>),
    Halt(Halt),
    /// `--rounds auto`: the sweep stopped adding rounds (before `done`).
    Settled(Settled),
    /// A verify-cost process after a round ([`crate::data::verify_cost`]).
    Cost(Box<crate::data::verify_cost::CostRun>),
    Done(Done),
}

macro_rules! boxed_line {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for RawLine {
            fn from(x: $ty) -> Self {
                RawLine::$variant(Box::new(x))
            }
        }
    )*};
}
boxed_line!(
    Sweep(SweepHeader),
    ArmStart(ArmStart),
    Startup(ArmStartup),
    Request(RequestRow),
    ArmEnd(ArmEnd),
    Cost(crate::data::verify_cost::CostRun)
);

/// A prompt of the set and its task type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptTag {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// The settings of a sweep, exactly as run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub target: PathBuf,
    pub drafter: policy::DrafterKind,
    pub drafter_model: Option<PathBuf>,
    /// The drafter settings every speculative arm was given explicitly;
    /// null in records written before settings were passed.
    #[serde(default)]
    pub drafter_settings: Option<policy::DrafterSettings>,
    /// Widths, rounds, passes, tokens and threads; flattened, so its fields
    /// stand between `drafter_settings` and `prompts` as raw.jsonl lays them out.
    #[serde(flatten)]
    pub design: Design,
    /// The copy every arm read (`prompts.jsonl` in the record folder).
    pub prompts: PathBuf,
    /// Where the copy came from (`--prompts`, or the shipped default).
    pub prompts_source: String,
    pub prompts_sha256: String,
    pub runtime: PathBuf,
    pub gate: GateConfig,
    /// How long the gate before an arm may wait for the host to quieten.
    pub gate_wait_s: f64,
    pub gate_interval_s: f64,
    /// `tuner sweep --served`: each arm is a `runtime serve` process fed
    /// streamed HTTP requests; null for `runtime generate` arms (and in
    /// records written before served sweeps existed).
    #[serde(default)]
    pub served: Option<ServedSettings>,
    /// `--precision`: the K-quant activation precision every arm runs at
    /// (`int8`, `int16`); absent: the runtime's default, which its startup
    /// events name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
}

/// `--rounds auto` stopped after `rounds` complete rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settled {
    pub at_unix_ms: u64,
    /// Complete rounds: the plan's arms of later rounds were never run.
    pub rounds: usize,
    /// Why it stopped: the rule was met, the maximum, or the budget.
    pub reason: String,
    /// The rule was met (false: the maximum or the budget stopped it).
    pub settled: bool,
}

/// The served mode's timeouts (`--health-timeout`, `--stop-timeout`,
/// `--request-timeout`) and its load (`--concurrency`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServedSettings {
    /// From starting the server to `GET /health` answering 200.
    pub health_timeout_s: f64,
    /// From SIGTERM to exit, before SIGKILL.
    pub stop_timeout_s: f64,
    /// One streamed request, from connecting to `data: [DONE]`.
    pub request_timeout_s: f64,
    /// Client threads sending each pass's prompts at once (at most this many
    /// requests in flight); the server runs with `--parallel` this. Records
    /// written before `--concurrency` existed sent one at a time: 1.
    #[serde(default = "one_client")]
    pub concurrency: usize,
}

fn one_client() -> usize {
    1
}

/// The most `--concurrency` a served sweep takes: far past the
/// concurrencies a policy entry would be keyed on (issue 55 asks for 1, 2,
/// 4), and few enough client threads and sockets for any host.
pub const MAX_CONCURRENCY: usize = 64;

impl ServedSettings {
    /// Every bound on the served settings, whether typed as flags or read
    /// back from a record's header (`--resume`); the error names the flag.
    pub fn check(&self) -> Result<(), String> {
        for (flag, x) in [
            ("--health-timeout", self.health_timeout_s),
            ("--stop-timeout", self.stop_timeout_s),
            ("--request-timeout", self.request_timeout_s),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(format!("{flag} {x}: give a positive number of seconds"));
            }
        }
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(format!(
                "--concurrency {} is out of range 1..={MAX_CONCURRENCY} (concurrent clients of each served arm)",
                self.concurrency
            ));
        }
        Ok(())
    }
}

/// First line of raw.jsonl.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepHeader {
    pub raw_schema_version: u32,
    pub events_schema_version: u32,
    pub tuner_version: String,
    pub started_at_unix_ms: u64,
    /// UTC date of the start, `YYYY-MM-DD`.
    pub date: String,
    pub settings: Settings,
    pub prompts: Vec<PromptTag>,
    pub plan: Vec<PlannedArm>,
    pub identity: Identity,
}

/// `tuner sweep --resume` continued the sweep here.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResumeMark {
    pub at_unix_ms: u64,
    /// Arms already complete, not run again.
    pub completed_arms: Vec<usize>,
    /// Bytes of a partial last line (an interrupted write) cut off before appending.
    pub dropped_partial_line_bytes: usize,
}

/// Written before an arm's process starts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmStart {
    pub arm: usize,
    /// 0 for the first run of this arm, 1 after a resume re-ran it, ...
    pub attempt: usize,
    pub round: usize,
    pub width: Option<SpeculativeArm>,
    pub bracket: Option<Bracket>,
    pub started_at_unix_ms: u64,
    /// The program and every argument.
    pub argv: Vec<String>,
    /// The complete environment the process was given (nothing else is inherited).
    pub env: BTreeMap<String, String>,
    /// The gate checked just before (after any waiting).
    pub gate: GateRun,
    /// NV_ERR_NO_MEMORY count this boot before the arm; null when not applicable or unreadable.
    pub nvrm_before: Option<u64>,
    /// The projection that let the arm start: `nvrm_before + worst_delta * arms_left`.
    pub nvrm_projected: Option<u64>,
}

/// The arm's `startup` event, verbatim.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmStartup {
    pub arm: usize,
    pub attempt: usize,
    pub startup: Startup,
}

/// One recorded (non-warm-up) request: where it ran (arm, round, prompt,
/// burst, gate), then the runtime's own record of it, flattened in.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequestRow {
    pub arm: usize,
    pub attempt: usize,
    pub round: usize,
    pub width: Option<SpeculativeArm>,
    pub bracket: Option<Bracket>,
    /// The drafter the process ran, from the event that followed the
    /// completion (empty for a request no such event followed).
    pub drafter: String,
    pub prompt_id: String,
    pub prompt_type: String,
    /// Which burst (recorded pass over the prompt set) of the arm.
    pub burst: usize,
    /// The `completion` event's measured part (its token ids are kept so
    /// identity failures can name the first differing token).
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The `speculative_diagnostics` or `declined` event that followed it.
    #[serde(flatten)]
    pub speculation: RowSpeculation,
    /// The arm's NV_ERR_NO_MEMORY count before it started (`arm_end` has the count after).
    pub nvrm_before: Option<u64>,
    /// The arm's gate decision and the sources it accepted as unknown.
    pub gate_decision: crate::host::gate::Decision,
    pub gate_accepted_unknown: Vec<Source>,
    /// Served sweeps only: what the client measured (absent for generate arms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<ServedSample>,
}

impl RequestRow {
    /// Attaches the event that followed this request's completion.
    pub fn join(&mut self, s: SpeculationReport) {
        self.drafter = s.drafter().to_string();
        self.speculation = match s {
            SpeculationReport::Diagnostics(d) => RowSpeculation::Diagnostics(d),
            SpeculationReport::Declined(d) => RowSpeculation::Declined(d.reason),
        };
    }
}

/// What a raw row keeps of the event that followed a request's completion.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "SpeculationFields", into = "SpeculationFields")]
#[allow(clippy::large_enum_variant)] // one per request line: size is irrelevant
pub enum RowSpeculation {
    /// No event followed: a classic arm (or a speculative arm that wrote
    /// none, which is not a measurement of speculation).
    #[default]
    None,
    /// `speculative_diagnostics`, verbatim.
    Diagnostics(SpeculativeDiagnostics),
    /// `declined`: the request ran classic decoding, for this reason.
    Declined(String),
}

impl RowSpeculation {
    pub fn diagnostics(&self) -> Option<&SpeculativeDiagnostics> {
        match self {
            RowSpeculation::Diagnostics(d) => Some(d),
            _ => None,
        }
    }

    pub fn declined_reason(&self) -> Option<&str> {
        match self {
            RowSpeculation::Declined(r) => Some(r),
            _ => None,
        }
    }
}

/// [`RowSpeculation`] as raw.jsonl writes it (docs/records.md): the two
/// flags repeat what the options say, for readers of the JSON.
#[derive(Clone, Serialize, Deserialize)]
struct SpeculationFields {
    diagnostics: Option<SpeculativeDiagnostics>,
    diagnostics_present: bool,
    declined: bool,
    declined_reason: Option<String>,
}

impl From<RowSpeculation> for SpeculationFields {
    fn from(s: RowSpeculation) -> Self {
        let declined = s.declined_reason().is_some();
        let (diagnostics, declined_reason) = match s {
            RowSpeculation::None => (None, None),
            RowSpeculation::Diagnostics(d) => (Some(d), None),
            RowSpeculation::Declined(r) => (None, Some(r)),
        };
        SpeculationFields { diagnostics_present: diagnostics.is_some(), diagnostics, declined, declined_reason }
    }
}

impl From<SpeculationFields> for RowSpeculation {
    fn from(f: SpeculationFields) -> Self {
        match (f.diagnostics, f.declined) {
            (Some(d), _) => RowSpeculation::Diagnostics(d),
            (None, true) => RowSpeculation::Declined(f.declined_reason.unwrap_or_default()),
            (None, false) => RowSpeculation::None,
        }
    }
}

/// A served request as the client saw it (docs/records.md, "Served sweeps").
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServedSample {
    /// `/v1/completions` (a `prompt`) or `/v1/chat/completions` (`messages`).
    pub endpoint: String,
    /// The response id; the server's `completion` event names it as `prompt_id`.
    pub response_id: String,
    /// Time to first token: from writing the request to the first chunk
    /// carrying a choice.
    pub ttft_ms: f64,
    /// From writing the request to `data: [DONE]`.
    pub e2e_ms: f64,
    /// `usage.completion_tokens / (e2e_ms / 1000)`: the statistic a served
    /// sweep ranks widths by. Null with no completion token.
    pub e2e_tok_per_s: Option<f64>,
    /// `data:` events received, `[DONE]` included.
    pub chunks: usize,
    /// The response's `draftwise` object, without its token ids (they are
    /// the row's `token_ids`).
    pub server: Option<ServedTimings>,
}

/// How an arm's process ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmEnd {
    pub arm: usize,
    pub attempt: usize,
    /// Exited 0 and every line was an event.
    pub ok: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub requests: usize,
    pub warmup_requests: usize,
    /// stdout lines that were not events (the arm is then not ok).
    pub bad_lines: usize,
    pub nvrm_after: Option<u64>,
    pub nvrm_delta: Option<u64>,
    /// What went wrong, with where to look.
    pub error: Option<String>,
    pub stdout_log: String,
    pub stderr_log: String,
    /// Served sweeps only: the server's address, readiness and how it was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerEnd>,
    /// What the gate saw while the arm ran (null in version-1 records). An
    /// arm with contended readings is not ok: the sweep re-runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<crate::host::gate::during::DuringArm>,
}

/// How a served arm's server ran and ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerEnd {
    pub pid: u32,
    /// From the `startup` event's `server.address`; null if it never came.
    pub address: Option<String>,
    /// From starting the process to `GET /health` answering 200; null if it never did.
    pub ready_ms: Option<u64>,
    pub stop: ServerStop,
    /// From the stop signal to the exit.
    pub stop_ms: Option<u64>,
}

/// How the server process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerStop {
    /// It had exited before the tuner stopped it (a crash, or a refusal at startup).
    ExitedEarly,
    /// It exited after SIGTERM, within `stop_timeout_s`.
    Sigterm,
    /// It was still running `stop_timeout_s` after SIGTERM: SIGKILL.
    Sigkill,
}

impl ArmEnd {
    /// An arm that has not ended well (yet): nothing counted, `ok` false.
    pub fn pending(arm: usize, attempt: usize, stdout_log: String, stderr_log: String) -> Self {
        ArmEnd {
            arm,
            attempt,
            ok: false,
            exit_code: None,
            signal: None,
            duration_ms: 0,
            requests: 0,
            warmup_requests: 0,
            bad_lines: 0,
            nvrm_after: None,
            nvrm_delta: None,
            error: None,
            stdout_log,
            stderr_log,
            server: None,
            contention: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HaltKind {
    /// The projected NV_ERR_NO_MEMORY count would reach the budget.
    NvrmBudget,
    /// The gate said halt.
    Gate,
    /// The gate still said wait when `--gate-wait` ran out.
    GateTimeout,
    /// An arm's process failed.
    ArmFailed,
    /// Every allowed attempt of an arm ran through contention.
    Contention,
}

/// The sweep stopped before its plan was done.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Halt {
    pub halt: HaltKind,
    /// The arm that was not started (or that failed).
    pub arm: usize,
    pub at_unix_ms: u64,
    pub message: String,
    pub nvrm_current: Option<u64>,
    pub nvrm_worst_arm_delta: Option<u64>,
    pub arms_left: Option<usize>,
    pub nvrm_projected: Option<u64>,
    pub nvrm_budget: Option<u64>,
}

/// The plan is complete.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Done {
    pub at_unix_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: more than {MAX_RAW_BYTES} bytes, over the limit")]
    TooBig { path: PathBuf },
    #[error("{path}:{line}: line is over {MAX_RAW_LINE_BYTES} bytes")]
    LineTooLong { path: PathBuf, line: usize },
    #[error(
        "{path}: more than {MAX_RAW_LINES} lines (a default sweep writes about 1,700); this is not a sweep's \
         raw.jsonl, or a sweep far beyond any plan this tuner runs"
    )]
    TooManyLines { path: PathBuf },
    #[error("{path}:{line}: not a raw.jsonl line: {source}")]
    Malformed { path: PathBuf, line: usize, source: serde_json::Error },
    #[error("{path}: empty; a sweep's first line is its `sweep` header")]
    Empty { path: PathBuf },
    #[error("{path}:1: the first line must be the `sweep` header")]
    NoHeader { path: PathBuf },
    #[error("{path}: raw schema version {found}; this tuner reads {RAW_SCHEMA_VERSION_MIN}..={RAW_SCHEMA_VERSION}")]
    Version { path: PathBuf, found: u32 },
}

/// raw.jsonl read back.
#[derive(Clone, Debug)]
pub struct RawFile {
    pub header: SweepHeader,
    /// Every line after the header, in order.
    pub lines: Vec<RawLine>,
    /// The 1-based line number in raw.jsonl of each of `lines`.
    pub line_numbers: Vec<usize>,
    /// Bytes of a final line without a newline that did not parse (an
    /// interrupted write); ignored.
    pub partial_tail_bytes: usize,
}

/// Reads one line of at most `cap` bytes (newline excluded). `Ok(None)` at
/// end of file; `Err(true)` when the line is longer than `cap`. The flag in
/// the `Some` says whether the line ended with a newline.
fn read_line_capped(r: &mut impl BufRead, cap: usize, buf: &mut Vec<u8>) -> std::io::Result<Option<(bool, bool)>> {
    buf.clear();
    let n = r.by_ref().take(cap as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    let newline = buf.last() == Some(&b'\n');
    if newline {
        buf.pop();
    }
    let too_long = buf.len() > cap;
    if too_long {
        // Skip the rest of the line.
        let mut rest = Vec::new();
        loop {
            rest.clear();
            let m = r.by_ref().take(1 << 16).read_until(b'\n', &mut rest)?;
            if m == 0 || rest.last() == Some(&b'\n') {
                break;
            }
        }
    }
    Ok(Some((newline, too_long)))
}

/// Reads and checks raw.jsonl. Malformed lines are errors naming the line,
/// except a final line without a newline (what an interrupted write
/// leaves), which is counted in `partial_tail_bytes` and ignored.
pub fn read_raw(path: &Path) -> Result<RawFile, RawError> {
    // A regular file only, and the cap on the bytes read: a FIFO or a
    // symlink to a device reports 0 bytes and never ends.
    let f =
        crate::data::bounded::open_regular(path).map_err(|source| RawError::Io { path: path.to_path_buf(), source })?;
    parse_raw(path, &mut std::io::BufReader::new(f.take(MAX_RAW_BYTES + 1)))
}

/// [`read_raw`], and the sha256 of the very bytes it parsed (the whole file:
/// what the ledger's `raw_sha256` says of it). One read: the file cannot
/// change between the hash and the parse.
pub fn read_raw_with_sha256(path: &Path) -> Result<(RawFile, String), RawError> {
    let io = |source| RawError::Io { path: path.to_path_buf(), source };
    let f = crate::data::bounded::open_regular(path).map_err(io)?;
    let mut r = std::io::BufReader::new(Hashing { inner: f, sha: sha2::Sha256::default() }.take(MAX_RAW_BYTES + 1));
    let raw = parse_raw(path, &mut r)?;
    // The parse stops at a partial last line; the rest (none, or that line)
    // is hashed too. The cap still holds: `take` ends the read.
    std::io::copy(&mut r, &mut std::io::sink()).map_err(io)?;
    if r.get_ref().limit() == 0 {
        return Err(RawError::TooBig { path: path.to_path_buf() });
    }
    let hashing = r.into_inner().into_inner();
    Ok((raw, hex(&sha2::Digest::finalize(hashing.sha))))
}

/// A reader that hashes every byte it passes on.
struct Hashing<R> {
    inner: R,
    sha: sha2::Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        sha2::Digest::update(&mut self.sha, &buf[..n]);
        Ok(n)
    }
}

/// Lowercase hex, as `runtime::events::sha256_hex` writes a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines of raw.jsonl from `r`, which holds at most [`MAX_RAW_BYTES`] + 1
/// bytes of the file at `path` (named in errors).
fn parse_raw<R: Read>(path: &Path, r: &mut std::io::BufReader<std::io::Take<R>>) -> Result<RawFile, RawError> {
    let io = |source| RawError::Io { path: path.to_path_buf(), source };
    let too_big = |r: &std::io::BufReader<std::io::Take<R>>| r.get_ref().limit() == 0;
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    let mut line_numbers = Vec::new();
    let mut header: Option<SweepHeader> = None;
    let mut partial_tail_bytes = 0;
    let mut n = 0;
    while let Some((newline, too_long)) = read_line_capped(r, MAX_RAW_LINE_BYTES, &mut buf).map_err(io)? {
        if too_big(r) {
            return Err(RawError::TooBig { path: path.to_path_buf() });
        }
        n += 1;
        if too_long {
            return Err(RawError::LineTooLong { path: path.to_path_buf(), line: n });
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed: Result<RawLine, _> = serde_json::from_slice(&buf);
        let line = match parsed {
            Ok(l) => l,
            Err(_) if !newline => {
                partial_tail_bytes = buf.len();
                break;
            }
            Err(source) => return Err(RawError::Malformed { path: path.to_path_buf(), line: n, source }),
        };
        match (&header, line) {
            (None, RawLine::Sweep(h)) => {
                if !(RAW_SCHEMA_VERSION_MIN..=RAW_SCHEMA_VERSION).contains(&h.raw_schema_version) {
                    return Err(RawError::Version { path: path.to_path_buf(), found: h.raw_schema_version });
                }
                header = Some(*h);
            }
            (None, _) => return Err(RawError::NoHeader { path: path.to_path_buf() }),
            (Some(_), l) => {
                if lines.len() >= MAX_RAW_LINES {
                    return Err(RawError::TooManyLines { path: path.to_path_buf() });
                }
                lines.push(l);
                line_numbers.push(n);
            }
        }
    }
    if too_big(r) {
        return Err(RawError::TooBig { path: path.to_path_buf() });
    }
    match header {
        Some(header) => Ok(RawFile { header, lines, line_numbers, partial_tail_bytes }),
        None if n == 0 || partial_tail_bytes > 0 => Err(RawError::Empty { path: path.to_path_buf() }),
        None => Err(RawError::NoHeader { path: path.to_path_buf() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_settings_read_back_and_serialize_to_the_bytes_they_were_written_as() {
        let records = Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
        let mut checked = 0;
        for dir in std::fs::read_dir(&records).unwrap().flatten() {
            let Ok(text) = std::fs::read_to_string(dir.path().join("raw.jsonl")) else { continue };
            let first = text.lines().next().unwrap();
            let Ok(RawLine::Sweep(h)) = serde_json::from_str::<RawLine>(first) else {
                panic!("{}: the first line is not a sweep header", dir.path().display())
            };
            // A record written with every field of this layout must come
            // out as it was written; older ones read back with defaults.
            let keys = |v: serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
            let written: serde_json::Value = serde_json::from_str(first).unwrap();
            if keys(written["settings"].clone()) == keys(serde_json::to_value(&h.settings).unwrap()) {
                let again = format!("\"settings\":{},", serde_json::to_string(&h.settings).unwrap());
                assert!(first.contains(&again), "{}: {again}", dir.path().display());
                checked += 1;
            }
        }
        assert!(checked > 0, "no committed record has every settings field");
    }

    #[test]
    fn the_hash_read_with_the_raw_data_is_the_files_sha256_partial_tail_included() {
        let records = Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
        let dir = std::fs::read_dir(&records)
            .unwrap()
            .flatten()
            .map(|d| d.path())
            .find(|d| d.join("raw.jsonl").is_file())
            .expect("a committed record");
        let path = dir.join("raw.jsonl");
        let bytes = std::fs::read(&path).unwrap();
        let (raw, sha) = read_raw_with_sha256(&path).unwrap();
        assert_eq!(sha, runtime::events::sha256_hex(&bytes));
        assert_eq!(raw.lines.len(), read_raw(&path).unwrap().lines.len());
        // A partial last line is not parsed, and is hashed.
        let tmp = tempfile::tempdir().unwrap();
        let cut = tmp.path().join("raw.jsonl");
        let mut partial = bytes.clone();
        partial.extend_from_slice(b"{\"kind\":\"do");
        std::fs::write(&cut, &partial).unwrap();
        let (raw, sha) = read_raw_with_sha256(&cut).unwrap();
        assert_eq!((raw.partial_tail_bytes, sha), (11, runtime::events::sha256_hex(&partial)));
    }

    #[test]
    fn served_settings_without_a_concurrency_read_back_as_one_client_and_every_bound_is_checked() {
        let old = r#"{"health_timeout_s":120.0,"stop_timeout_s":15.0,"request_timeout_s":300.0}"#;
        let s: ServedSettings = serde_json::from_str(old).unwrap();
        assert_eq!(s.concurrency, 1);
        assert_eq!(s.check(), Ok(()));
        for n in [1, 2, MAX_CONCURRENCY] {
            assert_eq!(ServedSettings { concurrency: n, ..s.clone() }.check(), Ok(()), "{n}");
        }
        for n in [0, MAX_CONCURRENCY + 1, usize::MAX] {
            let e = ServedSettings { concurrency: n, ..s.clone() }.check().unwrap_err();
            assert!(e.starts_with(&format!("--concurrency {n} is out of range 1..=64")), "{e}");
        }
        let e = ServedSettings { request_timeout_s: f64::NAN, ..s.clone() }.check().unwrap_err();
        assert!(e.starts_with("--request-timeout NaN"), "{e}");
    }

    #[test]
    fn a_capped_reader_reports_long_lines_and_keeps_reading() {
        let text = b"short\n0123456789abcdef\nend";
        let mut r = std::io::Cursor::new(&text[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut r, 8, &mut buf).unwrap(), Some((true, false)));
        assert_eq!(buf, b"short");
        assert!(matches!(read_line_capped(&mut r, 8, &mut buf).unwrap(), Some((_, true))));
        assert_eq!(read_line_capped(&mut r, 8, &mut buf).unwrap(), Some((false, false)));
        assert_eq!(buf, b"end");
        assert_eq!(read_line_capped(&mut r, 8, &mut buf).unwrap(), None);
    }

    #[test]
    fn a_file_without_a_header_or_with_junk_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("raw.jsonl");
        std::fs::write(&p, "").unwrap();
        assert!(matches!(read_raw(&p), Err(RawError::Empty { .. })));
        std::fs::write(&p, "{\"kind\":\"done\",\"at_unix_ms\":1}\n").unwrap();
        assert!(matches!(read_raw(&p), Err(RawError::NoHeader { .. })));
        std::fs::write(&p, "not json\n{}\n").unwrap();
        let e = read_raw(&p).unwrap_err();
        assert!(matches!(e, RawError::Malformed { line: 1, .. }), "{e}");
        assert!(e.to_string().contains("raw.jsonl:1"), "{e}");
    }

    #[test]
    fn a_raw_file_that_never_ends_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        // A FIFO no one writes: the open would wait for a writer.
        let fifo = dir.path().join("raw.jsonl");
        crate::data::bounded::mkfifo(&fifo);
        let e = read_raw(&fifo).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        // A symlink to a device of endless bytes, whose metadata says 0.
        let zero = dir.path().join("zero.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_raw(&zero).unwrap_err().to_string();
        assert!(e.contains("a character device"), "{e}");
    }

    #[test]
    fn committed_request_lines_write_back_byte_for_byte() {
        // The row is the tuner's context around the runtime's flattened
        // record: its wire form must stay the one the committed records have.
        let records = Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
        let mut checked = 0;
        for dir in std::fs::read_dir(&records).unwrap() {
            let raw = dir.unwrap().path().join("raw.jsonl");
            let Ok(text) = std::fs::read_to_string(&raw) else { continue };
            // Older diagnostics lack fields that read back as their defaults
            // (and so write back longer); every other line must be exact.
            let current = |l: &&str| l.contains("\"diagnostics\":null") || l.contains("\"sample_ms\"");
            for line in text.lines().filter(|l| l.starts_with("{\"kind\":\"request\"")).filter(current) {
                let parsed: RawLine = serde_json::from_str(line).unwrap();
                // Events schema 2 renamed the diagnostics' `block_size` to
                // `width` (same place, same value); nothing else moves.
                let renamed = line.replace("\"block_size\":", "\"width\":");
                assert_eq!(serde_json::to_string(&parsed).unwrap(), renamed, "{}", raw.display());
                checked += 1;
            }
        }
        assert!(checked > 0, "no committed request lines under {}", records.display());
    }
}
