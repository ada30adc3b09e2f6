//! One arm of a sweep: a fresh runtime process with every setting on its
//! command line, read only through its typed events.
//!
//! Principal items: [`start`] (the logs and the process), [`next_line`]
//! (one capped stdout line, logged as read and parsed as an [`Event`]),
//! [`RowContext`] (what every request line of an arm shares), [`finish`]
//! (the exit status and verdict into the `arm_end`). The two kinds of arm
//! are [`generate`] (`runtime generate --json` over the prompt set) and
//! [`served`] (`runtime serve --json` fed streamed HTTP requests). The
//! rules that make an arm not a measurement are in [`crate::analysis::rules::arm`].
//!
//! Each arm is its own process because the variance between processes is
//! larger than the variance within one (the design's lesson from a harness
//! that measured n = 3 inside one server process).
pub mod cost;
pub mod generate;
pub mod served;

use crate::data::plan::SpeculativeArm;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use runtime::events::Event;

use crate::data::path_names::PathNames;
use crate::data::raw::{ArmEnd, Bracket, PlannedArm, RequestRow, RowSpeculation};

/// Longest stdout line accepted from the runtime (a completion with its
/// token ids and text is a few KiB).
pub const MAX_EVENT_LINE_BYTES: usize = 4 << 20;

/// Environment variables passed to each arm besides these prefixes. Nothing
/// else is inherited, so the recorded environment is the complete one.
const ENV_KEEP: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "LD_LIBRARY_PATH"];
const ENV_KEEP_PREFIXES: &[&str] = &["DRAFTWISE_", "CUDA_", "NVIDIA_", "RUST_"];
/// Never passed: the sweep sets the width by flag and never forfeits exactness.
const ENV_DROP: &[&str] = &["DRAFTWISE_DRAFT_WIDTH", "DRAFTWISE_DRAFT_BLOCK_SIZE", "DRAFTWISE_ALLOW_INEXACT"];

/// The complete environment an arm is given.
pub fn arm_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            (ENV_KEEP.contains(&k.as_str()) || ENV_KEEP_PREFIXES.iter().any(|p| k.starts_with(p)))
                && !ENV_DROP.contains(&k.as_str())
        })
        .collect()
}

/// The speculative flags of an arm, shared by the generate and served
/// command lines so both run the same settings: `--drafter none` for a
/// classic arm (without it the runtime's policy could speculate), and for a
/// speculative one the drafter, the width and every drafter setting.
pub fn drafter_args(s: &crate::data::raw::Settings, width: Option<SpeculativeArm>) -> Vec<String> {
    let Some(arm) = width else {
        return vec!["--drafter".into(), "none".into()];
    };
    let drafting = arm.drafting(s.design.adaptive_cap());
    let mut a: Vec<String> =
        vec!["--drafter".into(), s.drafter.to_string(), "--draft-width".into(), drafting.max().to_string()];
    // The adaptive arm's cost curves are the sweep's so far: the caller's
    // (`Driver::run`), appended after these.
    if drafting.is_adaptive() {
        a.extend(["--adaptive".into(), "on".into()]);
    }
    if let Some(d) = &s.drafter_settings {
        if let Some(n) = d.ngram_min {
            a.extend(["--ngram-min".into(), n.to_string()]);
        }
        if let Some(n) = d.ngram_max {
            a.extend(["--ngram-max".into(), n.to_string()]);
        }
        if let Some(l) = &d.layers {
            let list: Vec<String> = l.iter().map(usize::to_string).collect();
            // A one-layer list is written with a trailing comma so the
            // runtime reads it as a list, not as a count.
            let mut v = list.join(",");
            if list.len() == 1 {
                v.push(',');
            }
            a.extend(["--layerskip-layers".into(), v]);
        }
        if let Some(n) = d.suffix_min_match {
            a.extend(["--suffix-min-match".into(), n.to_string()]);
        }
        if let Some(n) = d.suffix_max_match {
            a.extend(["--suffix-max-match".into(), n.to_string()]);
        }
        if let Some(p) = d.suffix_min_prob {
            a.extend(["--suffix-min-prob".into(), p.to_string()]);
        }
    }
    if let Some(m) = &s.drafter_model {
        a.extend(["--drafter-model".into(), m.display().to_string()]);
    }
    a
}

/// What every request line of one arm shares.
#[derive(Clone, Debug)]
pub struct RowContext {
    pub arm: usize,
    pub attempt: usize,
    pub round: usize,
    pub width: Option<SpeculativeArm>,
    pub bracket: Option<Bracket>,
    pub nvrm_before: Option<u64>,
    pub gate_decision: crate::host::gate::Decision,
    pub gate_accepted_unknown: Vec<crate::host::gate::Source>,
}

impl RowContext {
    /// A request line from a `completion` event; diagnostics or a decline
    /// ([`RequestRow::join`]) and served measurements are the caller's.
    pub fn row(&self, c: runtime::events::Completion, prompt_type: String, burst: usize) -> RequestRow {
        RequestRow {
            arm: self.arm,
            attempt: self.attempt,
            round: self.round,
            width: self.width,
            bracket: self.bracket,
            drafter: String::new(),
            prompt_id: c.prompt_id,
            prompt_type,
            burst,
            outcome: c.outcome,
            speculation: RowSpeculation::None,
            nvrm_before: self.nvrm_before,
            gate_decision: self.gate_decision,
            gate_accepted_unknown: self.gate_accepted_unknown.clone(),
            served: None,
        }
    }
}

impl RowContext {
    /// The context of `arm`'s attempt `attempt`, run after `gate_run` with
    /// the NV_ERR_NO_MEMORY count `nvrm_before`.
    pub fn new(
        arm: &PlannedArm,
        attempt: usize,
        gate_run: &crate::host::gate::GateRun,
        nvrm_before: Option<u64>,
    ) -> Self {
        RowContext {
            arm: arm.index,
            attempt,
            round: arm.round,
            width: arm.width,
            bracket: arm.bracket,
            nvrm_before,
            gate_decision: gate_run.decision,
            gate_accepted_unknown: gate_run.report.verdict.accepted_unknown.iter().map(|a| a.source).collect(),
        }
    }
}

/// What running one arm needs besides the raw writer.
pub struct ArmRun<'a> {
    pub dir: &'a Path,
    pub arm: &'a PlannedArm,
    pub attempt: usize,
    /// The full command line, the runtime first.
    pub argv: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    /// How the arm's logs name this machine's paths.
    pub names: &'a Arc<PathNames>,
    /// Prompt id → task type, from the record's prompt set.
    pub types: &'a BTreeMap<&'a str, &'a str>,
    pub rows: RowContext,
}

/// A prompt's task type in the record's prompt set (`types`: id → type).
pub fn prompt_type(types: &BTreeMap<&str, &str>, id: &str) -> String {
    types.get(id).map_or(runtime::prompts::UNTYPED, |t| *t).to_string()
}

/// A started arm: its process, with stdout piped and stderr copied into its
/// log by a thread.
pub struct Started {
    pub child: Child,
    /// Where the process's stdout goes as it is read.
    pub stdout_log: NamedLog,
    /// The thread copying the process's stderr into its log.
    pub stderr: StderrCopy,
    pub t0: Instant,
}

/// A log file of one process. Each write (a stdout line, a stderr line, a
/// cost report: every write is whole) is written with this machine's paths
/// named as raw.jsonl names them ([`PathNames::name_log`]), so a record's
/// `logs/` name no absolute path of the machine that made it either. A
/// line over the length cap is written in slices, each named alone.
pub struct NamedLog {
    file: File,
    names: Arc<PathNames>,
}

impl NamedLog {
    pub fn new(file: File, names: Arc<PathNames>) -> Self {
        NamedLog { file, names }
    }
}

impl Write for NamedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.file.write_all(self.names.name_log(text).as_bytes())?,
            Err(_) => self.file.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The longest stderr slice copied at once (a longer line is copied in
/// slices, so a runaway line never sits in memory).
const STDERR_SLICE_BYTES: u64 = 64 << 10;

/// How long [`StderrCopy::finish`] waits for the copy to reach the end of
/// the stream once the process has exited.
const STDERR_FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The thread that copies a process's stderr into its log line by line.
/// It reads to the end of the stream even when the log cannot be written,
/// so the process never blocks on a full pipe.
pub struct StderrCopy {
    done: Option<std::sync::mpsc::Receiver<()>>,
}

impl StderrCopy {
    fn spawn(from: Option<std::process::ChildStderr>, mut log: NamedLog) -> StderrCopy {
        let Some(from) = from else { return StderrCopy { done: None } };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::new(from);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.by_ref().take(STDERR_SLICE_BYTES).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let _ = log.write_all(&buf);
                    }
                }
            }
            let _ = tx.send(());
        });
        StderrCopy { done: Some(rx) }
    }

    /// After the process has exited: waits (up to a bound: a grandchild
    /// could hold the stream open) until its last stderr line is in the log.
    pub fn finish(self) {
        if let Some(rx) = self.done {
            let _ = rx.recv_timeout(STDERR_FINISH_WAIT);
        }
    }
}

/// A process started by [`spawn_logged`]: its log paths (relative to the
/// record folder) and the process, or why it could not start.
pub struct Logged {
    pub stdout_log: String,
    pub stderr_log: String,
    pub started: std::result::Result<Started, String>,
}

/// Creates `logs/{stem}.stdout.jsonl` and `logs/{stem}.stderr.log` under
/// `dir` and starts `argv` with exactly `env`, stdin closed, stdout piped
/// and stderr copied into its log: every process of a sweep starts this
/// way. Both logs name paths by `names` ([`NamedLog`]).
pub fn spawn_logged(
    dir: &Path,
    stem: &str,
    argv: &[String],
    env: &BTreeMap<String, String>,
    names: &Arc<PathNames>,
) -> Result<Logged> {
    let stdout_log = format!("logs/{stem}.stdout.jsonl");
    let stderr_log = format!("logs/{stem}.stderr.log");
    std::fs::create_dir_all(dir.join("logs"))?;
    let err_file = File::create(dir.join(&stderr_log)).with_context(|| format!("creating {stderr_log}"))?;
    let out_file = File::create(dir.join(&stdout_log)).with_context(|| format!("creating {stdout_log}"))?;
    let t0 = Instant::now();
    let spawned = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let started = spawned
        .map(|mut child| {
            let stderr = StderrCopy::spawn(child.stderr.take(), NamedLog::new(err_file, names.clone()));
            Started { child, stdout_log: NamedLog::new(out_file, names.clone()), stderr, t0 }
        })
        .map_err(|e| format!("cannot start {}: {e}; pass the runtime with --runtime PATH", argv[0]));
    Ok(Logged { stdout_log, stderr_log, started })
}

/// Creates the arm's logs (`logs/arm-NNN-attempt-K.{stdout.jsonl,stderr.log}`
/// under `a.dir`) and starts `a.argv` with exactly `a.env`. Returns the pending
/// `arm_end` and the started process, or no process when it could not be
/// started (the `arm_end` then says why).
pub fn start(a: &ArmRun<'_>) -> Result<(ArmEnd, Option<Started>)> {
    let (arm, attempt) = (a.arm.index, a.attempt);
    let l = spawn_logged(a.dir, &format!("arm-{arm:03}-attempt-{attempt}"), a.argv, a.env, a.names)?;
    let mut end = ArmEnd::pending(arm, attempt, l.stdout_log, l.stderr_log);
    match l.started {
        Ok(s) => Ok((end, Some(s))),
        Err(why) => {
            end.error = Some(why);
            Ok((end, None))
        }
    }
}

/// A line of an arm's stdout.
pub enum Line {
    Event(Box<Event>),
    /// Longer than [`MAX_EVENT_LINE_BYTES`] (logged, not parsed).
    TooLong,
    /// Not an event: the parser's message.
    NotAnEvent(String),
}

impl Line {
    /// Why a line that is not an event is bad; `None` for an event.
    pub fn problem(&self) -> Option<String> {
        match self {
            Line::Event(_) => None,
            Line::TooLong => Some(format!("a stdout line over {MAX_EVENT_LINE_BYTES} bytes")),
            Line::NotAnEvent(e) => Some(format!("a stdout line is not an event ({e})")),
        }
    }
}

/// Reads one line of an arm's stdout into `log` and parses it; blank lines
/// are skipped, `None` is the end of the stream. A line longer than
/// [`MAX_EVENT_LINE_BYTES`] is logged whole (in slices) and reported, never
/// held in memory.
pub fn next_line(r: &mut impl BufRead, log: &mut impl Write) -> std::io::Result<Option<Line>> {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = r.by_ref().take(MAX_EVENT_LINE_BYTES as u64 + 1).read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        log.write_all(&buf)?;
        if buf.len() > MAX_EVENT_LINE_BYTES {
            // Drain the rest of this line into the log.
            loop {
                buf.clear();
                let m = r.by_ref().take(1 << 16).read_until(b'\n', &mut buf)?;
                log.write_all(&buf)?;
                if m == 0 || buf.last() == Some(&b'\n') {
                    break;
                }
            }
            return Ok(Some(Line::TooLong));
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        return Ok(Some(match serde_json::from_slice::<Event>(&buf) {
            Ok(e) => Line::Event(Box::new(e)),
            Err(e) => Line::NotAnEvent(e.to_string()),
        }));
    }
}

/// Records how the arm's process ended and the arm's verdict: ok exactly
/// when `problems` is empty, else its error lists them.
pub fn finish(end: &mut ArmEnd, status: ExitStatus, t0: Instant, problems: Vec<String>) {
    use std::os::unix::process::ExitStatusExt;
    end.duration_ms = t0.elapsed().as_millis() as u64;
    end.exit_code = status.code();
    end.signal = status.signal();
    end.ok = problems.is_empty();
    if !end.ok {
        end.error = Some(problems.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::plan::{arm, arms};
    use crate::host::gate::GateConfig;
    use policy::{DrafterKind, DrafterSettings};

    /// One-round settings for `drafter`, width 2, one burst, no warm-up.
    fn settings(drafter: DrafterKind, d: DrafterSettings) -> crate::data::raw::Settings {
        crate::data::raw::Settings {
            target: "m.gguf".into(),
            drafter,
            drafter_model: None,
            drafter_settings: Some(d),
            design: crate::data::raw::Design {
                widths: arms(&[2]),
                rounds: 1,
                bursts: 1,
                bracket_arms: 1,
                bracket_bursts: None,
                auto_rounds: None,
                warmup: 0,
                max_tokens: 8,
                threads: 1,
                cost_contexts: vec![],
            },
            prompts: "p.jsonl".into(),
            prompts_source: "p.jsonl".into(),
            prompts_sha256: String::new(),
            runtime: "runtime".into(),
            gate: GateConfig::default(),
            gate_wait_s: 0.0,
            gate_interval_s: 1.0,
            served: None,
            precision: None,
        }
    }

    #[test]
    fn arms_get_explicit_settings_and_no_inexact_escape() {
        let mut s = settings(DrafterKind::Ngram, DrafterSettings::ngram(3, 4));
        s.design = crate::data::raw::Design {
            widths: arms(&[3]),
            bursts: 3,
            warmup: 1,
            max_tokens: 64,
            threads: 2,
            ..s.design
        };
        let a = generate::arm_args(&s, Some(arm(3))).join(" ");
        assert!(a.contains("--json") && a.contains("--draft-width 3") && a.contains("--threads 2"), "{a}");
        assert!(a.contains("--warmup 1") && a.contains("--repeat 3") && !a.contains("allow-inexact"), "{a}");
        assert!(a.ends_with("--drafter ngram --draft-width 3 --ngram-min 3 --ngram-max 4"), "{a}");
        // A classic arm says `--drafter none` (else the policy could turn
        // speculation on) and passes no speculative setting.
        let c = generate::arm_args(&s, None).join(" ");
        assert!(c.ends_with("--drafter none"), "{c}");
        assert_eq!(c.matches("--drafter").count(), 1, "{c}");
        assert!(!c.contains("--draft-width") && !c.contains("--ngram-"), "{c}");
        // A served arm runs the same model, threads and speculative settings.
        let v = served::serve_args(&s, Some(arm(3))).join(" ");
        assert!(v.starts_with("serve --json --host 127.0.0.1 --port 0 --model m.gguf --threads 2"), "{v}");
        assert!(v.ends_with("--drafter ngram --draft-width 3 --ngram-min 3 --ngram-max 4"), "{v}");
        let c = served::serve_args(&s, None).join(" ");
        assert!(c.ends_with("--threads 2 --parallel 1 --drafter none"), "{c}");
        // As many batch slots as the sweep has concurrent clients.
        let loaded = crate::data::raw::Settings {
            served: Some(crate::data::raw::ServedSettings {
                health_timeout_s: 1.0,
                stop_timeout_s: 1.0,
                request_timeout_s: 1.0,
                concurrency: 3,
            }),
            ..s.clone()
        };
        let c = served::serve_args(&loaded, None).join(" ");
        assert!(c.ends_with("--threads 2 --parallel 3 --drafter none"), "{c}");
        assert!(!c.contains("--draft-width") && !c.contains("--ngram-"), "{c}");
    }

    #[test]
    fn a_process_logs_name_this_machines_paths() {
        let d = tempfile::tempdir().unwrap();
        let names = Arc::new(PathNames::from_pairs(vec![("/srv/models/m.gguf".into(), "m.gguf".into())]));
        let script = r#"echo "loading model=/srv/models/m.gguf" >&2
echo '{"event":"startup","target":{"path":"/srv/models/m.gguf"},"kc":"/tmp/kc/a.cubin"}'
echo '{"event":"completion","text":"/srv/models/m.gguf"}'"#;
        let argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), script.into()];
        let l = spawn_logged(d.path(), "p", &argv, &BTreeMap::new(), &names).unwrap();
        let mut p = l.started.unwrap();
        let mut r = std::io::BufReader::new(p.child.stdout.take().unwrap());
        let mut lines = 0;
        while next_line(&mut r, &mut p.stdout_log).unwrap().is_some() {
            lines += 1;
        }
        assert_eq!(lines, 2);
        assert!(p.child.wait().unwrap().success());
        p.stderr.finish();
        let out = std::fs::read_to_string(d.path().join(&l.stdout_log)).unwrap();
        let err = std::fs::read_to_string(d.path().join(&l.stderr_log)).unwrap();
        assert_eq!(err, "loading model=m.gguf\n");
        assert!(!out.contains("/srv/") && !out.contains("/tmp/"), "{out}");
        assert!(out.contains(r#""path":"m.gguf""#) && out.contains(r#""kc":"a.cubin""#), "{out}");
        assert!(out.contains(r#""text":"m.gguf""#), "{out}");
    }

    #[test]
    fn a_grandchild_holding_stderr_open_does_not_hold_the_arm() {
        let d = tempfile::tempdir().unwrap();
        let names = Arc::new(PathNames::default());
        // The process exits at once; its background child keeps stderr open.
        let argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), "echo gone >&2; sleep 20 >&2 &".into()];
        let l = spawn_logged(d.path(), "g", &argv, &BTreeMap::new(), &names).unwrap();
        let mut p = l.started.unwrap();
        assert!(p.child.wait().unwrap().success());
        let t = Instant::now();
        p.stderr.finish();
        assert!(t.elapsed() < STDERR_FINISH_WAIT + std::time::Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(std::fs::read_to_string(d.path().join(&l.stderr_log)).unwrap(), "gone\n");
    }

    #[test]
    fn suffix_arms_get_every_suffix_setting() {
        let s = settings(DrafterKind::Suffix, DrafterSettings::suffix(2, 32, 0.5));
        assert_eq!(
            drafter_args(&s, Some(arm(3))).join(" "),
            "--drafter suffix --draft-width 3 --suffix-min-match 2 --suffix-max-match 32 --suffix-min-prob 0.5"
        );
    }

    #[test]
    fn layerskip_arms_get_their_layers_as_a_list() {
        let mut s = settings(DrafterKind::Layerskip, DrafterSettings::layerskip(vec![0, 1, 2]));
        let a = drafter_args(&s, Some(arm(2))).join(" ");
        assert_eq!(a, "--drafter layerskip --draft-width 2 --layerskip-layers 0,1,2");
        // One layer gets a trailing comma: the runtime reads a bare `5` as a count.
        s.drafter_settings = Some(DrafterSettings::layerskip(vec![5]));
        assert_eq!(
            drafter_args(&s, Some(arm(2))).join(" "),
            "--drafter layerskip --draft-width 2 --layerskip-layers 5,"
        );
        assert_eq!(drafter_args(&s, None), vec!["--drafter", "none"]);
    }
}
