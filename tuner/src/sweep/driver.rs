//! `tuner sweep`: runs the bracketed arm plan and writes `raw.jsonl` and
//! `logs/` as it goes (docs/records.md).
//!
//! Principal items: [`SweepOptions`] (what the operator asked for),
//! [`plan`] (the arm order), [`start`] and [`resume`] (gate, NVRM
//! projection, one fresh runtime process per arm, raw lines), [`Outcome`].
//!
//! One arm's run is [`crate::sweep::arm`]; the rules that halt the sweep or re-run
//! an arm are [`crate::analysis::rules::arm`].
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use policy::DrafterKind;

use crate::analysis::rules;
use crate::data::plan::{
    MAX_AUTO_BUDGET_S, MAX_BRACKET_ARMS, MAX_BURSTS, MAX_ROUNDS, MAX_THREADS, MAX_TOKENS_PER_REQUEST, MAX_WARMUP,
};
use crate::data::raw::{
    ArmEnd, ArmStart, Done, Halt, HaltKind, PlannedArm, PromptTag, RawLine, ResumeMark, SweepHeader, read_raw,
};
use crate::data::verify_cost;
use crate::data::writer::RawWriter;
use crate::host::gate::{Decision, Gate, GateConfig};
use crate::host::identity::{self, IdentityOptions};
use crate::sweep::arm;

/// Largest prompt set read.
pub const MAX_PROMPTS_BYTES: u64 = 16 << 20;

/// The shipped default prompt set, `prompts/sweep.jsonl`: 12 prompts of
/// `prompts/mixed.jsonl`, two per task type, compiled in so the default
/// sweep runs from any directory. docs/records.md has the time arithmetic.
pub const DEFAULT_PROMPTS_JSONL: &str = include_str!("../../../prompts/sweep.jsonl");

/// Attempts of one arm, in one run of the sweep, before contention during
/// the arm halts it (each attempt is kept in raw.jsonl).
pub const MAX_CONTENTION_ATTEMPTS: usize = 3;

/// `records/<date>-<device class>-<host class>-<drafter>[-c<N>]` (`:`
/// becomes `-`; two CPUs of one kernel family are two keys, so the folder
/// names both; `-c<N>` for a served sweep at `--concurrency N` above 1), with
/// `-2`, `-3`, ... when that folder exists.
pub fn default_out_dir(drafter: DrafterKind, concurrency: usize) -> PathBuf {
    let device = kernels::dispatch::selected().map_or_else(|_| "unknown".to_string(), |s| s.family.device_class());
    let host = runtime::policy::host_class_here();
    let base = format!(
        "records/{}-{}-{host}-{drafter}{}",
        utc_date(now_ms()),
        device.replace(':', "-"),
        concurrency_suffix(concurrency)
    );
    let mut p = PathBuf::from(&base);
    let mut n = 2;
    while p.exists() {
        p = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    p
}

/// The record folder's mark of a served sweep's load: `-c<N>` above one
/// client, nothing at one (the folders of idle measurements keep their names).
pub fn concurrency_suffix(concurrency: usize) -> String {
    if concurrency > 1 { format!("-c{concurrency}") } else { String::new() }
}

/// What `tuner sweep` was asked to do (after defaults).
#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub target: PathBuf,
    pub drafter: DrafterKind,
    pub drafter_model: Option<PathBuf>,
    /// Complete settings for the drafter, passed to every speculative arm.
    pub drafter_settings: policy::DrafterSettings,
    /// Widths, rounds, passes, tokens and threads, recorded as given.
    pub design: crate::data::raw::Design,
    /// `None`: the shipped default set ([`DEFAULT_PROMPTS_JSONL`]).
    pub prompts: Option<PathBuf>,
    pub out: PathBuf,
    pub runtime: PathBuf,
    pub gate: GateConfig,
    pub gate_wait: Duration,
    pub gate_interval: Duration,
    /// `--served`: arms are `runtime serve` processes fed streamed requests.
    pub served: Option<crate::data::raw::ServedSettings>,
    /// `--precision` for every arm (`None`: the runtime's default).
    pub precision: Option<String>,
}

/// How a sweep ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every arm ran.
    Complete,
    /// Stopped with a halt line in raw.jsonl.
    Halted(HaltKind),
}

/// A prompt set's ids and task types, read with the runtime's parser (the
/// one every arm reads the set with).
pub fn prompt_tags(text: &str, origin: &Path) -> Result<Vec<PromptTag>> {
    let items = runtime::prompts::parse_prompts(text, origin)?;
    Ok(items.iter().map(|p| PromptTag { id: p.id.clone(), kind: p.task_type().to_string() }).collect())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `YYYY-MM-DD` (UTC) of a Unix time in milliseconds (Howard Hinnant's
/// days-to-civil algorithm).
pub fn utc_date(unix_ms: u64) -> String {
    let days = (unix_ms / 86_400_000) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Progress: a bar with ETA on a terminal, plain lines otherwise.
enum Progress {
    Bar(indicatif::ProgressBar),
    Lines { total: usize, done: usize },
}

impl Progress {
    fn new(total: usize, done: usize) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total as u64);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} arms, ETA {eta} {msg}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_position(done as u64);
            bar.reset_eta();
            Progress::Bar(bar)
        } else {
            Progress::Lines { total, done }
        }
    }

    fn message(&mut self, msg: &str) {
        match self {
            Progress::Bar(b) => b.set_message(msg.to_string()),
            Progress::Lines { total, done } => eprintln!("tuner sweep: [{done}/{total}] {msg}"),
        }
    }

    /// A line above the bar (printing beside it would break it).
    fn note(&self, msg: &str) {
        match self {
            Progress::Bar(b) => b.println(format!("tuner sweep: {msg}")),
            Progress::Lines { .. } => eprintln!("tuner sweep: {msg}"),
        }
    }

    fn arm_done(&mut self) {
        match self {
            Progress::Bar(b) => b.inc(1),
            Progress::Lines { done, .. } => *done += 1,
        }
    }

    fn finish(&mut self) {
        if let Progress::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}

fn sha256_bytes(b: &[u8]) -> String {
    runtime::events::sha256_hex(b)
}

/// Every bound and cross-check on what the operator asked for, before
/// anything is written.
fn check_options(opts: &SweepOptions) -> Result<()> {
    let d = &opts.design;
    if d.widths.is_empty() {
        bail!("--widths is empty; give at least one width, e.g. --widths 1-8");
    }
    // The adaptive arm is the one 0, last (the tuner puts it there).
    let fixed = match d.widths.split_last() {
        Some((&crate::data::plan::SpeculativeArm::Adaptive, rest)) => rest,
        _ => &d.widths[..],
    };
    if fixed.is_empty() {
        bail!("--widths is empty; give at least one width, e.g. --widths 1-8");
    }
    if fixed.iter().any(|w| w.is_adaptive()) {
        bail!("--widths: the adaptive arm runs once, after the fixed widths (--adaptive-arm on), not as a width");
    }
    if d.has_adaptive_arm() && d.cost_contexts.is_empty() {
        bail!(
            "the adaptive arm weighs the verify pass's measured cost, and --cost-contexts none measures none: give \
             cost contexts, or --adaptive-arm off"
        );
    }
    if opts.drafter == DrafterKind::DraftModel && opts.drafter_model.is_none() {
        bail!("--drafter draft-model needs --drafter-model PATH (the draft checkpoint)");
    }
    let kind = opts.drafter;
    opts.drafter_settings.check(kind).map_err(|e| anyhow::anyhow!("{kind} drafter settings: {e}"))?;
    for (flag, x, lo, hi) in [
        ("--rounds", d.rounds, 1, MAX_ROUNDS),
        ("--bursts", d.bursts, 1, MAX_BURSTS),
        ("--bracket-arms", d.bracket_arms, 1, MAX_BRACKET_ARMS),
        ("--bracket-bursts", d.bursts_of(None), 1, MAX_BURSTS),
        ("--warmup", d.warmup, 0, MAX_WARMUP),
        ("--threads", d.threads, 1, MAX_THREADS),
        ("--max-tokens", d.max_tokens, 1, MAX_TOKENS_PER_REQUEST),
    ] {
        if !(lo..=hi).contains(&x) {
            bail!("{flag} {x} is out of range {lo}..={hi}");
        }
    }
    verify_cost::check_contexts(&d.cost_contexts).map_err(anyhow::Error::msg)?;
    if let Some(a) = &d.auto_rounds {
        if !(2..=a.max_rounds).contains(&a.min_rounds) || a.max_rounds != d.rounds {
            bail!(
                "--rounds auto: the minimum ({}) must be at least 2 and at most the maximum ({})",
                a.min_rounds,
                a.max_rounds
            );
        }
        if !(a.budget_s.is_finite() && a.budget_s > 0.0 && a.budget_s <= MAX_AUTO_BUDGET_S) {
            bail!("--auto-budget {}: give seconds in (0, {MAX_AUTO_BUDGET_S}]", a.budget_s);
        }
    }
    if d.rounds < 2 {
        eprintln!(
            "tuner sweep: warning: --rounds {}: every interval comes from the spread between rounds, so a sweep of \
             one round states no interval and cannot be proposed",
            d.rounds
        );
    }
    if let Some(sv) = &opts.served {
        sv.check().map_err(anyhow::Error::msg)?;
    }
    for (flag, p) in [("--target", Some(&opts.target)), ("--drafter-model", opts.drafter_model.as_ref())] {
        if let Some(p) = p
            && !p.exists()
        {
            bail!("{flag} {}: no such file or directory", p.display());
        }
    }
    Ok(())
}

/// Starts a new sweep in `opts.out` (which must not hold a raw.jsonl).
pub fn start(opts: &SweepOptions) -> Result<Outcome> {
    check_options(opts)?;
    let raw_path = opts.out.join("raw.jsonl");
    if raw_path.exists() {
        bail!(
            "{} exists: continue it with `tuner sweep --resume {}`, or choose another --out",
            raw_path.display(),
            opts.out.display()
        );
    }
    std::fs::create_dir_all(opts.out.join("logs")).with_context(|| format!("creating {}", opts.out.display()))?;
    let (prompts_bytes, prompts_source) = match &opts.prompts {
        Some(p) => (
            read_capped(p, MAX_PROMPTS_BYTES)?,
            crate::data::path_names::name_of(
                p,
                &crate::data::path_names::repo_root(&opts.out).unwrap_or_default(),
                false,
            ),
        ),
        None => {
            (DEFAULT_PROMPTS_JSONL.as_bytes().to_vec(), "prompts/sweep.jsonl (compiled into the tuner)".to_string())
        }
    };
    let prompts_text =
        String::from_utf8(prompts_bytes.clone()).with_context(|| format!("{prompts_source}: not UTF-8"))?;
    let prompts = prompt_tags(&prompts_text, Path::new(&prompts_source))?;
    // Copy the prompt set into the record: the record is self-contained, and
    // every arm reads the copy whose hash is recorded.
    let prompts_copy = opts.out.join("prompts.jsonl");
    std::fs::write(&prompts_copy, &prompts_bytes).with_context(|| format!("writing {}", prompts_copy.display()))?;
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let settings = crate::data::raw::Settings {
        target: abs(&opts.target),
        drafter: opts.drafter,
        drafter_model: opts.drafter_model.as_deref().map(abs),
        drafter_settings: Some(opts.drafter_settings.clone()),
        design: opts.design.clone(),
        prompts: abs(&prompts_copy),
        prompts_source,
        prompts_sha256: sha256_bytes(&prompts_bytes),
        runtime: abs(&opts.runtime),
        gate: opts.gate.clone(),
        gate_wait_s: opts.gate_wait.as_secs_f64(),
        gate_interval_s: opts.gate_interval.as_secs_f64(),
        served: opts.served.clone(),
        precision: opts.precision.clone(),
    };
    let mut models = vec![settings.target.clone()];
    models.extend(settings.drafter_model.clone());
    eprintln!("tuner sweep: identifying the host and hashing the model(s)");
    let identity = identity::collect(&IdentityOptions { runtime: Some(settings.runtime.clone()), models });
    if let Some(m) = identity.models.iter().find(|m| m.sha256.value.is_none()) {
        bail!("{}: {}", m.path, m.sha256.reason());
    }
    let started = now_ms();
    let header = SweepHeader {
        raw_schema_version: crate::data::raw::RAW_SCHEMA_VERSION,
        events_schema_version: runtime::events::SCHEMA_VERSION,
        tuner_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at_unix_ms: started,
        date: utc_date(started),
        plan: settings.design.plan(),
        settings,
        prompts,
        identity,
    };
    let mut w =
        RawWriter::open(&raw_path)?.with_names(crate::data::path_names::PathNames::for_sweep(&opts.out, &header));
    w.write(&RawLine::from(header.clone()))?;
    drive(&opts.out, &header, w, &[], &[])
}

/// Continues the sweep in `dir`: arms with a successful `arm_end` are kept;
/// the rest run (again), with the same settings.
pub fn resume(dir: &Path) -> Result<Outcome> {
    let raw_path = dir.join("raw.jsonl");
    let dropped = crate::data::writer::drop_partial_tail(&raw_path)?;
    let raw = read_raw(&raw_path)?;
    if raw.lines.iter().any(|l| matches!(l, RawLine::Done(_))) {
        bail!("{} is complete (it has a `done` line); nothing to resume", raw_path.display());
    }
    let done = completed_arms(&raw.lines);
    let deltas: Vec<u64> = raw
        .lines
        .iter()
        .filter_map(|l| match l {
            RawLine::ArmEnd(e) if e.ok => e.nvrm_delta,
            _ => None,
        })
        .collect();
    let attempts: Vec<usize> = raw
        .lines
        .iter()
        .filter_map(|l| match l {
            RawLine::ArmStart(s) => Some(s.arm),
            _ => None,
        })
        .collect();
    // The header names its files portably; find them on this machine.
    let header = crate::data::path_names::resolve(dir, &raw.header)?;
    let mut w = RawWriter::open(&raw_path)?.with_names(crate::data::path_names::PathNames::for_sweep(dir, &header));
    w.write(&RawLine::Resume(ResumeMark {
        at_unix_ms: now_ms(),
        completed_arms: done.clone(),
        dropped_partial_line_bytes: dropped,
    }))?;
    eprintln!(
        "tuner sweep: resuming {}: {} of {} arms complete{}",
        dir.display(),
        done.len(),
        raw.header.plan.len(),
        if dropped > 0 { format!(", cut a partial last line of {dropped} bytes") } else { String::new() }
    );
    drive(dir, &header, w, &deltas, &attempts)
}

/// Arms whose latest attempt ended ok.
pub fn completed_arms(lines: &[RawLine]) -> Vec<usize> {
    let mut last: BTreeMap<usize, bool> = BTreeMap::new();
    for l in lines {
        match l {
            RawLine::ArmStart(s) => {
                last.insert(s.arm, false);
            }
            RawLine::ArmEnd(e) => {
                last.insert(e.arm, e.ok);
            }
            _ => {}
        }
    }
    last.into_iter().filter(|(_, ok)| *ok).map(|(a, _)| a).collect()
}

fn read_capped(p: &Path, cap: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = crate::data::bounded::open_regular(p).with_context(|| format!("opening {}", p.display()))?;
    let mut buf = Vec::new();
    f.take(cap + 1).read_to_end(&mut buf).with_context(|| format!("reading {}", p.display()))?;
    if buf.len() as u64 > cap {
        bail!("{}: over the limit of {cap} bytes", p.display());
    }
    Ok(buf)
}

fn halt_line(w: &mut RawWriter, h: Halt, progress: &mut Progress) -> Result<Outcome> {
    progress.note(&format!("halted before arm {}: {}", h.arm, h.message));
    let kind = h.halt;
    w.write(&RawLine::Halt(h))?;
    progress.finish();
    Ok(Outcome::Halted(kind))
}

/// Runs the arms of the plan that `raw.jsonl` does not yet hold as
/// complete, in order: for each, [`Driver::attempt`] until it passes, runs
/// again or halts the sweep, then [`Driver::round_end`].
fn drive(
    dir: &Path,
    header: &SweepHeader,
    w: RawWriter,
    prior_deltas: &[u64],
    prior_attempts: &[usize],
) -> Result<Outcome> {
    let done: Vec<usize> = match read_raw(&dir.join("raw.jsonl")) {
        Ok(r) => completed_arms(&r.lines),
        Err(_) => Vec::new(),
    };
    let todo: Vec<&PlannedArm> = header.plan.iter().filter(|a| !done.contains(&a.index)).collect();
    let mut d = Driver::new(dir, header, w, prior_deltas, prior_attempts, done.len())?;
    // A resumed sweep first measures the cost of the rounds it had finished
    // without it (an interruption between a round's last arm and its cost).
    let finished: Vec<usize> = (0..header.settings.design.rounds)
        .filter(|r| header.plan.iter().filter(|a| a.round == *r).all(|a| done.contains(&a.index)))
        .filter(|r| header.plan.iter().any(|a| a.round == *r))
        .collect();
    for r in finished {
        d.costs(r)?;
    }
    let mut clock = RoundClock::default();
    for (k, arm) in todo.iter().enumerate() {
        clock.arm_starts(arm.round);
        // The adaptive arm weighs the verify cost: its round's is measured
        // first (the processes run once a round whichever comes first).
        if arm.width == Some(crate::data::plan::SpeculativeArm::Adaptive) {
            d.costs(arm.round)?;
        }
        loop {
            match d.attempt(arm, todo.len() - k)? {
                Attempt::Passed => break,
                Attempt::Again => continue,
                Attempt::Halt(h) => return halt_line(&mut d.w, h, &mut d.progress),
            }
        }
        if d.last_of_round(arm) {
            d.costs(arm.round)?;
        }
        if let Some(stop) = d.round_end(arm, &mut clock)? {
            d.progress.note(&format!("--rounds auto: stopping after {} round(s): {}", stop.rounds, stop.reason));
            d.w.write(&RawLine::Settled(stop))?;
            break;
        }
    }
    d.w.write(&RawLine::Done(Done { at_unix_ms: now_ms() }))?;
    d.progress.finish();
    Ok(Outcome::Complete)
}

/// Per (round, context): the cost processes' attempts, and whether one was a measurement.
type CostAttempts = BTreeMap<(usize, usize), (usize, bool)>;
/// Per (round, context): a measurement's relative costs.
type CostCurves = BTreeMap<(usize, usize), Vec<f64>>;

/// The verify-cost lines raw.jsonl already holds, per (round, context):
/// how many attempts, and whether one was a measurement; and the
/// measurements' relative costs.
fn prior_costs(dir: &Path) -> (CostAttempts, CostCurves) {
    let mut out: BTreeMap<(usize, usize), (usize, bool)> = BTreeMap::new();
    let mut curves = BTreeMap::new();
    if let Ok(r) = read_raw(&dir.join("raw.jsonl")) {
        for l in &r.lines {
            if let RawLine::Cost(c) = l {
                let e = out.entry((c.round, c.context)).or_insert((0, false));
                e.0 = e.0.max(c.attempt + 1);
                e.1 |= c.ok;
                if c.ok {
                    curves.insert((c.round, c.context), c.relative.clone());
                }
            }
        }
    }
    (out, curves)
}

/// The adaptive arm's `--cost-curve` flags from the measured curves per
/// (round, context): per context, the geometric mean over the rounds of
/// each pass size (four decimals; a one-row pass is 1). Empty when none
/// was measured.
pub fn cost_curve_args(curves: &CostCurves) -> Vec<String> {
    let mut by_context: BTreeMap<usize, Vec<&Vec<f64>>> = BTreeMap::new();
    for ((_, context), rel) in curves {
        by_context.entry(*context).or_default().push(rel);
    }
    let mut out = Vec::new();
    for (context, rels) in by_context {
        let rows = rels.iter().map(|r| r.len()).min().unwrap_or(0);
        if rows < 2 {
            continue;
        }
        let values: Vec<String> = (0..rows)
            .map(|i| {
                let g = (rels.iter().map(|r| r[i].ln()).sum::<f64>() / rels.len() as f64).exp();
                if i == 0 { "1".to_string() } else { format!("{:.4}", g) }
            })
            .collect();
        out.extend(["--cost-curve".to_string(), format!("{context}={}", values.join(","))]);
    }
    out
}

/// When each round started and the longest a finished round took (the
/// `--rounds auto` time budget's forecast).
#[derive(Default)]
struct RoundClock {
    started: BTreeMap<usize, Instant>,
    longest: Option<Duration>,
}

impl RoundClock {
    fn arm_starts(&mut self, round: usize) {
        self.started.entry(round).or_insert_with(Instant::now);
    }

    fn round_ends(&mut self, round: usize) -> Option<Duration> {
        if let Some(t) = self.started.get(&round) {
            let d = t.elapsed();
            self.longest = Some(self.longest.map_or(d, |l| l.max(d)));
        }
        self.longest
    }
}

/// What one attempt at an arm came to.
enum Attempt {
    Passed,
    /// Contention during the arm: run it again.
    Again,
    Halt(Halt),
}

/// The gate's word before an attempt, with the NVRM counts it read.
struct Cleared {
    gate_run: crate::host::gate::GateRun,
    nvrm_now: Option<u64>,
    projected: Option<u64>,
}

/// The sweep's state across arms: the writer, the progress display, the
/// gate, the worst NVRM delta an arm has caused, and each arm's attempts.
struct Driver<'a> {
    dir: &'a Path,
    header: &'a SweepHeader,
    w: RawWriter,
    progress: Progress,
    gate: Gate,
    worst_delta: Option<u64>,
    types: BTreeMap<&'a str, &'a str>,
    env: BTreeMap<String, String>,
    /// How the logs name this machine's paths: raw.jsonl's names and the
    /// arms' environment's ([`crate::data::path_names::PathNames::with_env`]).
    log_names: std::sync::Arc<crate::data::path_names::PathNames>,
    /// A served arm sends the prompts itself: the record's copy, read as `runtime generate` reads it.
    served_prompts: Vec<runtime::prompts::PromptItem>,
    prior_attempts: &'a [usize],
    attempts_here: BTreeMap<usize, usize>,
    /// Verify-cost lines so far per (round, context): attempts, and whether one was a measurement.
    costs: CostAttempts,
    /// The measured relative costs per (round, context), for the adaptive arm.
    curves: CostCurves,
    /// (round, context) whose cost processes this process has run (once each).
    costs_tried: std::collections::BTreeSet<(usize, usize)>,
}

impl<'a> Driver<'a> {
    fn new(
        dir: &'a Path,
        header: &'a SweepHeader,
        w: RawWriter,
        prior_deltas: &[u64],
        prior_attempts: &'a [usize],
        done: usize,
    ) -> Result<Self> {
        let s = &header.settings;
        let served_prompts = match &s.served {
            Some(sv) => {
                // A resumed header is read from a file: its bounds are checked again.
                sv.check().map_err(anyhow::Error::msg)?;
                let bytes = read_capped(&s.prompts, MAX_PROMPTS_BYTES)?;
                let text = String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", s.prompts.display()))?;
                runtime::prompts::parse_prompts(&text, &s.prompts)?
            }
            None => Vec::new(),
        };
        let (costs, curves) = prior_costs(dir);
        let env = arm::arm_env();
        let log_names =
            std::sync::Arc::new(crate::data::path_names::PathNames::for_sweep(dir, header).with_env(dir, &env));
        Ok(Driver {
            dir,
            header,
            w,
            progress: Progress::new(header.plan.len(), done),
            gate: Gate::new(s.gate.clone()),
            worst_delta: prior_deltas.iter().copied().max(),
            types: header.prompts.iter().map(|p| (p.id.as_str(), p.kind.as_str())).collect(),
            env,
            log_names,
            served_prompts,
            prior_attempts,
            attempts_here: BTreeMap::new(),
            costs,
            curves,
            costs_tried: Default::default(),
        })
    }

    /// Whether `arm` is the last of its round in the plan.
    fn last_of_round(&self, arm: &PlannedArm) -> bool {
        self.header.plan.iter().filter(|a| a.round == arm.round).map(|a| a.index).max() == Some(arm.index)
    }

    /// The verify-cost processes of `round` that raw.jsonl does not yet hold
    /// a measurement of ([`crate::data::verify_cost`]): each gated like an arm, run again
    /// (up to [`verify_cost::COST_ATTEMPTS`]) after contention, and written whatever
    /// came of it. A failure is the record's to state, not the sweep's halt.
    fn costs(&mut self, round: usize) -> Result<()> {
        let s = &self.header.settings;
        for &context in &s.design.cost_contexts {
            let (mut attempt, done) = self.costs.get(&(round, context)).copied().unwrap_or((0, false));
            if done || !self.costs_tried.insert((round, context)) {
                continue;
            }
            let what = format!("verify cost (round {}, context {context})", round + 1);
            for _ in 0..verify_cost::COST_ATTEMPTS {
                let gate_run = self.wait_gate(&what);
                let gate_line = crate::host::gate::summary_line(&gate_run.report);
                let line = if gate_run.decision != Decision::Pass {
                    let why = format!("not run: the gate said {gate_line}");
                    verify_cost::CostRun::not_run(round, context, attempt, gate_line, why)
                } else {
                    self.progress.message(&format!("{what}: running"));
                    let mut argv = vec![s.runtime.display().to_string()];
                    argv.extend(arm::cost::cost_args(s, context));
                    let monitor = crate::host::gate::during::Monitor::start(&s.gate);
                    let rows = arm::cost::max_rows(s);
                    let mut line =
                        arm::cost::run(self.dir, (round, context, attempt), &argv, &self.env, &self.log_names, rows)?;
                    let during = monitor.finish();
                    if line.ok
                        && let Some(why) = rules::arm::contention(&during)
                    {
                        line.ok = false;
                        line.error = Some(why);
                    }
                    line.gate = gate_line;
                    line.contention = Some(during);
                    line
                };
                self.w.write(&RawLine::from(line.clone()))?;
                attempt += 1;
                self.costs.insert((round, context), (attempt, line.ok));
                if line.ok {
                    self.curves.insert((round, context), line.relative.clone());
                }
                let contended = line.contention.as_ref().is_some_and(|c| c.contended());
                if line.ok || !contended {
                    if !line.ok {
                        self.progress.note(&format!("{what}: {}", line.error.as_deref().unwrap_or("failed")));
                    }
                    break;
                }
                self.progress.note(&format!("{what}: contention during the run; running it again"));
            }
        }
        Ok(())
    }

    /// One attempt at `arm`: the gate, the NVRM projection, the run, and
    /// the verdict on its end.
    fn attempt(&mut self, arm: &PlannedArm, arms_left: usize) -> Result<Attempt> {
        let what = match arm.width {
            Some(wd) => {
                format!("arm {} (round {}, width {})", arm.index, arm.round + 1, wd)
            }
            None => format!("arm {} (round {}, classic)", arm.index, arm.round + 1),
        };
        let cleared = match self.clear(arm, arms_left, &what) {
            Ok(c) => c,
            Err(h) => return Ok(Attempt::Halt(*h)),
        };
        // The halts after the run name the worst delta before it.
        let before = HaltAt {
            arm: arm.index,
            arms_left,
            nvrm_now: cleared.nvrm_now,
            worst: self.worst_delta,
            budget: self.header.settings.gate.nvrm_budget,
        };
        let attempt = self.prior_attempts.iter().filter(|&&a| a == arm.index).count()
            + self.attempts_here.get(&arm.index).copied().unwrap_or(0);
        *self.attempts_here.entry(arm.index).or_default() += 1;
        if arm.width == Some(crate::data::plan::SpeculativeArm::Adaptive) && cost_curve_args(&self.curves).is_empty() {
            let msg = format!(
                "{what}: the adaptive arm weighs the verify pass's cost, and no cost process of this sweep has \
                 measured it yet (raw.jsonl's `cost` lines say why); `tuner sweep --resume {}` measures it again",
                self.dir.display()
            );
            return Ok(Attempt::Halt(before.halt(HaltKind::ArmFailed, msg)));
        }
        let end = self.run(arm, attempt, &cleared, &what)?;
        let (ok, contended, error) = (end.ok, end.contended, end.error.unwrap_or_default());
        if !ok && contended {
            if self.attempts_here[&arm.index] < MAX_CONTENTION_ATTEMPTS {
                self.progress.note(&format!("{what}: contention during the arm ({error}); running it again"));
                return Ok(Attempt::Again);
            }
            let msg = format!(
                "{what}: {MAX_CONTENTION_ATTEMPTS} attempts all ran through contention (last: {error}); run `tuner \
                 sweep --resume {}` when the host is quiet",
                self.dir.display()
            );
            return Ok(Attempt::Halt(before.halt(HaltKind::Contention, msg)));
        }
        if !ok {
            let msg = format!(
                "{what} failed: {error}; fix the cause, then `tuner sweep --resume {}` reruns it",
                self.dir.display()
            );
            return Ok(Attempt::Halt(before.halt(HaltKind::ArmFailed, msg)));
        }
        self.progress.arm_done();
        Ok(Attempt::Passed)
    }

    /// The gate before `what` (an arm or a cost process), waited for as
    /// the settings allow, each wait noted.
    fn wait_gate(&mut self, what: &str) -> crate::host::gate::GateRun {
        let s = &self.header.settings;
        self.progress.message(&format!("{what}: gate"));
        let progress = &self.progress;
        self.gate.wait(
            Duration::from_secs_f64(s.gate_wait_s),
            Duration::from_secs_f64(s.gate_interval_s),
            |r, waited| {
                progress.note(&format!(
                    "gate before {what}: waiting ({:.0} s of {:.0} s): {}",
                    waited.as_secs_f64(),
                    s.gate_wait_s,
                    crate::host::gate::summary_line(r)
                ))
            },
        )
    }

    /// Waits for the gate and checks the NVRM projection; `Err` is the halt.
    fn clear(&mut self, arm: &PlannedArm, arms_left: usize, what: &str) -> std::result::Result<Cleared, Box<Halt>> {
        let s = &self.header.settings;
        let gate_run = self.wait_gate(what);
        let nvrm_now =
            gate_run.report.checks.nvrm.reading.value.as_ref().filter(|r| r.applicable).and_then(|r| r.cumulative);
        let at = HaltAt { arm: arm.index, arms_left, nvrm_now, worst: self.worst_delta, budget: s.gate.nvrm_budget };
        match gate_run.decision {
            Decision::Halt => {
                return Err(Box::new(at.halt(HaltKind::Gate, crate::host::gate::summary_line(&gate_run.report))));
            }
            Decision::Wait => {
                let msg = format!(
                    "the gate still said wait after {:.0} s ({}); run `tuner sweep --resume {}` when the host is quiet",
                    s.gate_wait_s,
                    crate::host::gate::summary_line(&gate_run.report),
                    self.dir.display()
                );
                return Err(Box::new(at.halt(HaltKind::GateTimeout, msg)));
            }
            Decision::Pass => {}
        }
        let projected = rules::arm::nvrm_projected(nvrm_now, self.worst_delta, arms_left);
        if let Some(msg) =
            rules::arm::nvrm_over_budget(projected, nvrm_now, self.worst_delta, arms_left, s.gate.nvrm_budget)
        {
            let mut h = at.halt(HaltKind::NvrmBudget, msg);
            h.nvrm_projected = projected;
            return Err(Box::new(h));
        }
        Ok(Cleared { gate_run, nvrm_now, projected })
    }

    /// Runs the arm's process once: its start and end lines in raw.jsonl,
    /// the NVRM delta, and contention during the run (which fails an arm
    /// that was otherwise ok).
    fn run(&mut self, arm: &PlannedArm, attempt: usize, c: &Cleared, what: &str) -> Result<RunEnd> {
        let s = &self.header.settings;
        let mut argv = vec![s.runtime.display().to_string()];
        match &s.served {
            Some(_) => argv.extend(arm::served::serve_args(s, arm.width)),
            None => argv.extend(arm::generate::arm_args(s, arm.width)),
        }
        if arm.width == Some(crate::data::plan::SpeculativeArm::Adaptive) {
            argv.extend(cost_curve_args(&self.curves));
        }
        self.w.write(&RawLine::from(ArmStart {
            arm: arm.index,
            attempt,
            round: arm.round,
            width: arm.width,
            bracket: arm.bracket,
            started_at_unix_ms: now_ms(),
            argv: argv.clone(),
            env: self.env.clone(),
            gate: c.gate_run.clone(),
            nvrm_before: c.nvrm_now,
            nvrm_projected: c.projected,
        }))?;
        self.progress.message(&format!("{what}: running"));
        let monitor = crate::host::gate::during::Monitor::start(&s.gate);
        let run = arm::ArmRun {
            dir: self.dir,
            arm,
            attempt,
            argv: &argv,
            env: &self.env,
            names: &self.log_names,
            types: &self.types,
            rows: arm::RowContext::new(arm, attempt, &c.gate_run, c.nvrm_now),
        };
        let end = match &s.served {
            Some(served) => {
                let a = arm::served::ServedArm { run, settings: s, served, prompts: &self.served_prompts };
                arm::served::run(&a, &mut self.w)?
            }
            None => arm::generate::run(&run, &mut self.w)?,
        };
        let nvrm_after = self.gate.nvrm_count();
        let nvrm_delta = match (c.nvrm_now, nvrm_after) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        if let Some(d) = nvrm_delta {
            self.worst_delta = Some(self.worst_delta.map_or(d, |x| x.max(d)));
        }
        let during = monitor.finish();
        let contended = during.contended();
        let mut end = ArmEnd { nvrm_after, nvrm_delta, contention: Some(during.clone()), ..end };
        if end.ok
            && let Some(why) = rules::arm::contention(&during)
        {
            end.ok = false;
            end.error = Some(why);
        }
        let out = RunEnd { ok: end.ok, contended, error: end.error.clone() };
        self.w.write(&RawLine::from(end))?;
        Ok(out)
    }

    /// After the last arm of a round under `--rounds auto`: whether the
    /// sweep stops here.
    fn round_end(&mut self, arm: &PlannedArm, clock: &mut RoundClock) -> Result<Option<crate::data::raw::Settled>> {
        let header = self.header;
        let Some(auto) = &header.settings.design.auto_rounds else { return Ok(None) };
        if header.plan.iter().filter(|a| a.round == arm.round).map(|a| a.index).max() != Some(arm.index) {
            return Ok(None);
        }
        let longest = clock.round_ends(arm.round);
        auto_stop(self.dir, auto, arm.round + 1, header.started_at_unix_ms, longest)
    }
}

/// How an arm's run ended, as the verdict needs it.
struct RunEnd {
    ok: bool,
    contended: bool,
    error: Option<String>,
}

/// Where a halt happens: the arm, the arms left, and the NVRM counts then.
struct HaltAt {
    arm: usize,
    arms_left: usize,
    nvrm_now: Option<u64>,
    worst: Option<u64>,
    /// The sweep's NVRM budget.
    budget: u64,
}

impl HaltAt {
    fn halt(&self, halt: HaltKind, message: String) -> Halt {
        Halt {
            halt,
            arm: self.arm,
            at_unix_ms: now_ms(),
            message,
            nvrm_current: self.nvrm_now,
            nvrm_worst_arm_delta: self.worst,
            arms_left: Some(self.arms_left),
            nvrm_projected: None,
            nvrm_budget: Some(self.budget),
        }
    }
}

/// Whether `--rounds auto` stops after `rounds` complete rounds
/// ([`crate::analysis::decision::AUTO_ROUNDS_RULE`]): the data so far is summarized as
/// if the sweep ended here.
fn auto_stop(
    dir: &Path,
    auto: &crate::data::raw::AutoRounds,
    rounds: usize,
    started_at_unix_ms: u64,
    longest_round: Option<Duration>,
) -> Result<Option<crate::data::raw::Settled>> {
    let mk =
        |reason: String, settled: bool| crate::data::raw::Settled { at_unix_ms: now_ms(), rounds, reason, settled };
    if rounds >= auto.max_rounds {
        return Ok(Some(mk(format!("the maximum of {} rounds", auto.max_rounds), false)));
    }
    if rounds < auto.min_rounds {
        return Ok(None);
    }
    let mut raw = read_raw(&dir.join("raw.jsonl"))?;
    raw.lines.push(RawLine::Settled(mk(String::new(), false)));
    raw.line_numbers.push(raw.line_numbers.last().map_or(2, |n| n + 1));
    let summary = crate::analysis::summarize::summarize(&raw)?;
    if let Some(why) = crate::analysis::decision::settled(&summary) {
        return Ok(Some(mk(why, true)));
    }
    let elapsed_s = now_ms().saturating_sub(started_at_unix_ms) as f64 / 1e3;
    if let Some(l) = longest_round
        && elapsed_s + l.as_secs_f64() > auto.budget_s
    {
        return Ok(Some(mk(
            format!(
                "the time budget: {elapsed_s:.0} s so far and a round takes up to {:.0} s, past {:.0} s",
                l.as_secs_f64(),
                auto.budget_s
            ),
            false,
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adaptive_arm_weighs_the_geometric_mean_of_the_curves_measured_so_far() {
        let mut c: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
        assert!(cost_curve_args(&c).is_empty(), "nothing measured: no flag");
        c.insert((0, 64), vec![1.0, 1.1, 1.2]);
        c.insert((1, 64), vec![1.0, 1.2, 1.4]);
        c.insert((0, 2048), vec![1.0, 1.5]);
        let a = cost_curve_args(&c);
        let g = |x: f64, y: f64| format!("{:.4}", (x * y).sqrt());
        assert_eq!(
            a,
            vec![
                "--cost-curve".to_string(),
                format!("64=1,{},{}", g(1.1, 1.2), g(1.2, 1.4)),
                "--cost-curve".to_string(),
                "2048=1,1.5000".to_string()
            ]
        );
        // What it writes, the runtime reads (its bounds, the first value 1).
        let given: Vec<String> = a.iter().skip(1).step_by(2).cloned().collect();
        let curves = policy::table::parse_cost_curves(&given).unwrap();
        assert_eq!(curves.len(), 2);
    }

    #[test]
    fn a_record_folder_under_load_says_its_concurrency() {
        assert_eq!(concurrency_suffix(1), "");
        assert_eq!(concurrency_suffix(4), "-c4");
        let d = default_out_dir(DrafterKind::Ngram, 2).display().to_string();
        assert!(d.starts_with("records/") && d.contains("-ngram-c2"), "{d}");
        let d = default_out_dir(DrafterKind::Ngram, 1).display().to_string();
        assert!(!d.contains("-ngram-c"), "{d}");
    }

    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(1_795_910_400_000), "2026-11-29");
    }

    #[test]
    fn prompt_tags_need_unique_ids_and_default_the_type() {
        let t = prompt_tags(
            "{\"id\":\"a\",\"type\":\"code\",\"prompt\":\"x\"}\n{\"id\":2,\"prompt\":\"y\"}\n",
            Path::new("p"),
        )
        .unwrap();
        assert_eq!(t[1], PromptTag { id: "2".into(), kind: "untyped".into() });
        assert!(prompt_tags("{\"id\":\"a\"}\n{\"id\":\"a\"}\n", Path::new("p")).is_err());
        assert!(prompt_tags("\n", Path::new("p")).is_err());
        assert!(prompt_tags("[1]\n", Path::new("p")).unwrap_err().to_string().contains("p:1"));
    }
}
