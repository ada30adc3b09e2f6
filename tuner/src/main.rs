//! `tuner`: measures draft widths on this host. A thin shell over the
//! `tuner` library: parse the command line, call the library, print, and
//! map the outcome to an exit code (see `tuner::exit`).
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use runtime::policy::DrafterKind;
use tuner::gate::{self, Decision, GateConfig, GateRun, Source, Status};
use tuner::identity::{self, IdentityOptions};
use tuner::raw::HaltKind;
use tuner::sweep::{Outcome, SweepOptions};

/// Measure speculative draft widths on this host and write records and policy entries.
#[derive(Parser)]
#[command(name = "tuner", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check that this host is fit to measure on now: CPU contention, foreign
    /// model processes, GPU, the NVIDIA driver's NV_ERR_NO_MEMORY count and
    /// available memory. Exit 0 pass, 3 wait (or --wait ran out), 4 halt, 1 error.
    Gate(GateArgs),
    /// Print this host's identity: OS, kernel, CPU and kernel family, memory,
    /// NVIDIA driver and GPUs, nvcc, the runtime's build, rustc, model hashes.
    Identity(IdentityArgs),
    /// Measure draft widths: classic-bracketed rounds of fresh runtime
    /// processes, raw data as it happens, then the record (record.md,
    /// summary.csv, plot.svg). Exit 0 complete, 3 the gate kept waiting (or an
    /// arm ran through contention on every attempt),
    /// 4 halted (gate or NVRM budget), 1 an arm failed or an error.
    Sweep(Box<SweepArgs>),
    /// Summarize a sweep folder: statistics, drift, identity, the decision;
    /// writes record.md, summary.csv and plot.svg.
    Summarize(SummarizeArgs),
    /// Write (or replace) the record's entry in policy/draft-block-width.toml,
    /// or refuse with the reason and the remedy (exit 5).
    Propose(ProposeArgs),
}

#[derive(clap::Args)]
struct GateArgs {
    /// Print one JSON object (the last report and how it was reached).
    #[arg(long)]
    json: bool,
    /// Re-check until the gate passes or halts, for at most SECONDS; then give
    /// up with the last reasons.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    wait: f64,
    /// Seconds between re-checks under --wait.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    interval: f64,
    #[command(flatten)]
    gate: GateOpts,
}

/// The gate's thresholds, shared by `gate` and `sweep`.
#[derive(clap::Args)]
struct GateOpts {
    /// Let an unreadable SOURCE pass; the acceptance is recorded in the verdict.
    #[arg(long, value_enum, value_name = "SOURCE", num_args = 1.., value_delimiter = ',')]
    accept_unknown: Vec<Source>,
    /// CPU sampling window.
    #[arg(long, value_name = "MS", default_value_t = GateConfig::default().cpu_window_ms)]
    cpu_window_ms: u64,
    /// A process above this share of one core (percent) is contention.
    #[arg(long, value_name = "PERCENT", default_value_t = GateConfig::default().cpu_threshold_pct)]
    cpu_threshold: f64,
    /// Host-wide CPU not this tuner's, in percent of one core, above which the
    /// host is contended even with no single process over --cpu-threshold
    /// (short-lived processes, hypervisor steal).
    #[arg(long, value_name = "PERCENT", default_value_t = GateConfig::default().host_cpu_threshold_pct)]
    host_cpu_threshold: f64,
    /// Wait while MemAvailable is below this.
    #[arg(long, value_name = "MIB", default_value_t = GateConfig::default().min_available_mib)]
    min_available_mib: u64,
    /// Halt when the NVIDIA driver's cumulative NV_ERR_NO_MEMORY count this boot reaches this.
    #[arg(long, value_name = "COUNT", default_value_t = GateConfig::default().nvrm_budget)]
    nvrm_budget: u64,
    /// Wait while an NV_ERR_NO_MEMORY was logged within this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = GateConfig::default().nvrm_window_s)]
    nvrm_window_s: f64,
    /// Wait while a GPU is at least this busy (percent).
    #[arg(long, value_name = "PERCENT", default_value_t = GateConfig::default().gpu_util_threshold_pct)]
    gpu_util_threshold: u32,
    /// Wait while a GPU has less free memory than this.
    #[arg(long, value_name = "MIB", default_value_t = GateConfig::default().gpu_min_free_mib)]
    gpu_min_free_mib: u64,
    /// Also treat PID and its descendants as this tuner's own (not contention).
    #[arg(long, value_name = "PID")]
    exclude_pid: Vec<u32>,
}

impl GateOpts {
    fn config(self) -> GateConfig {
        GateConfig {
            cpu_window_ms: self.cpu_window_ms,
            cpu_threshold_pct: self.cpu_threshold,
            host_cpu_threshold_pct: self.host_cpu_threshold,
            min_available_mib: self.min_available_mib,
            nvrm_budget: self.nvrm_budget,
            nvrm_window_s: self.nvrm_window_s,
            gpu_util_threshold_pct: self.gpu_util_threshold,
            gpu_min_free_mib: self.gpu_min_free_mib,
            accept_unknown: self.accept_unknown,
            exclude_roots: self.exclude_pid,
            ..GateConfig::default()
        }
    }
}

#[derive(clap::Args)]
// A flag given twice takes the last value (so a wrapper can override defaults).
#[command(args_override_self = true)]
struct SweepArgs {
    /// The target model (GGUF file, Hugging Face directory, or a known model's name, as
    /// `runtime --model` takes it); default: the embedded default model, fetched on first use.
    /// `--target` is its other name.
    #[arg(short = 'm', long = "model", alias = "target", value_name = "MODEL")]
    target: Option<PathBuf>,
    /// Drafter kind: ngram, suffix, layerskip or draft-model.
    #[arg(long, default_value = "ngram")]
    drafter: String,
    /// The draft checkpoint for `--drafter draft-model`.
    #[arg(long, value_name = "PATH")]
    drafter_model: Option<PathBuf>,
    /// `ngram`: shortest pattern looked up, passed to every arm and recorded
    /// (a policy entry applies with exactly these settings).
    #[arg(long, default_value_t = runtime::spec::drafter::DEFAULT_NGRAM_MIN)]
    ngram_min: usize,
    /// `ngram`: longest pattern looked up.
    #[arg(long, default_value_t = runtime::spec::drafter::DEFAULT_NGRAM_MAX)]
    ngram_max: usize,
    /// `suffix`: shortest match that drafts, passed to every arm and recorded.
    #[arg(long, default_value_t = runtime::spec::drafter::DEFAULT_SUFFIX_MIN_MATCH)]
    suffix_min_match: usize,
    /// `suffix`: longest match looked for.
    #[arg(long, default_value_t = runtime::spec::drafter::DEFAULT_SUFFIX_MAX_MATCH)]
    suffix_max_match: usize,
    /// `suffix`: the agreement, in (0, 1], below which a draft stops.
    #[arg(long, default_value_t = runtime::spec::drafter::DEFAULT_SUFFIX_MIN_PROB)]
    suffix_min_prob: f64,
    /// `layerskip`: the layers the drafter runs, a list like 0,1,2,3 (required
    /// for --drafter layerskip, so the record states them).
    #[arg(long, value_name = "LIST")]
    layerskip_layers: Option<String>,
    /// Draft widths: a range `1-8` or a list `1,2,4`.
    #[arg(long, value_name = "LIST", default_value = "1-8")]
    widths: String,
    /// Rounds; each opens and closes with classic arms. The round is the
    /// unit of every interval (at least 2; docs/records.md). `auto`: from
    /// the default number up to --auto-max-rounds, stopping when the
    /// decision is settled or the time budget would be passed.
    #[arg(long, value_name = "N|auto", default_value_t = tuner::plan::DEFAULT_ROUNDS.to_string())]
    rounds: String,
    /// `--rounds auto`: the most rounds.
    #[arg(long, value_name = "N", default_value_t = tuner::plan::DEFAULT_AUTO_MAX_ROUNDS)]
    auto_max_rounds: usize,
    /// `--rounds auto`: the fewest rounds.
    #[arg(long, value_name = "N", default_value_t = tuner::plan::DEFAULT_ROUNDS)]
    auto_min_rounds: usize,
    /// `--rounds auto`: no round starts that would end past this many seconds of the sweep.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::plan::DEFAULT_AUTO_BUDGET_S)]
    auto_budget: f64,
    /// Recorded passes over the prompt set per speculative arm.
    #[arg(long, default_value_t = tuner::plan::DEFAULT_BURSTS)]
    bursts: usize,
    /// Classic arms on each side of a round.
    #[arg(long, default_value_t = tuner::plan::DEFAULT_BRACKET_ARMS)]
    bracket_arms: usize,
    /// Recorded passes over the prompt set per classic bracket arm.
    #[arg(long, default_value_t = tuner::plan::DEFAULT_BRACKET_BURSTS)]
    bracket_bursts: usize,
    /// Unrecorded warm-up passes per arm (excluded from every statistic).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Tokens generated per request.
    #[arg(long, default_value_t = tuner::plan::DEFAULT_MAX_TOKENS)]
    max_tokens: usize,
    /// Prompt set (JSONL, each line tagged with its `type`); default: the
    /// shipped prompts/sweep.jsonl (compiled into the tuner).
    #[arg(long, value_name = "FILE")]
    prompts: Option<PathBuf>,
    /// Worker threads per arm (default: the CPUs available here).
    #[arg(long)]
    threads: Option<usize>,
    /// Record folder (default: records/<date>-<device class>-<host class>-<drafter>, with -2, -3, ... when taken).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The runtime binary (default: `runtime` beside this executable).
    #[arg(long, value_name = "PATH")]
    runtime: Option<PathBuf>,
    /// Print the summary as one JSON object at the end.
    #[arg(long)]
    json: bool,
    /// Continue the interrupted or halted sweep in DIR with its recorded settings
    /// (the other sweep flags are ignored).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// How long the gate before each arm waits for a quiet host before the sweep stops.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    gate_wait: f64,
    /// Seconds between gate re-checks while waiting.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    gate_interval: f64,
    /// Measure through the server: each arm is a `runtime serve` process on a
    /// free loopback port, sent every prompt as a streamed request; widths are
    /// ranked by end-to-end tok/s, and time to first token is recorded.
    #[arg(long)]
    served: bool,
    /// --served: how long a server may take from start to answering GET /health.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::arm::served::DEFAULT_HEALTH_TIMEOUT_S, requires = "served")]
    health_timeout: f64,
    /// --served: how long a server may take to exit after SIGTERM before SIGKILL.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::arm::served::DEFAULT_STOP_TIMEOUT_S, requires = "served")]
    stop_timeout: f64,
    /// --served: the limit of one streamed request, from connecting to `data: [DONE]`.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::arm::served::DEFAULT_REQUEST_TIMEOUT_S, requires = "served")]
    request_timeout: f64,
    #[command(flatten)]
    gate: GateOpts,
}

#[derive(clap::Args)]
struct SummarizeArgs {
    /// The sweep folder (holding raw.jsonl).
    dir: PathBuf,
    /// Print the summary as one JSON object instead of the record.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct ProposeArgs {
    /// The sweep folder, under records/.
    dir: PathBuf,
    /// Show the diff without writing the table.
    #[arg(long)]
    dry_run: bool,
    /// The policy table (default: policy/draft-block-width.toml above DIR).
    #[arg(long, value_name = "PATH")]
    table: Option<PathBuf>,
    /// Propose a record whose arms ran a dirty build (`build.git_dirty`
    /// "true"), or one whose dirty state is "unknown".
    #[arg(long)]
    allow_dirty: bool,
    /// Propose a record measured under another kernel fingerprint than this
    /// build's (the entry is stale, and unused, until re-measured).
    #[arg(long)]
    allow_stale_fingerprint: bool,
    /// Replace an entry dated later than the record.
    #[arg(long)]
    allow_older: bool,
    /// Propose a record swept with a gate looser than the defaults (the entry's note says so).
    #[arg(long)]
    allow_loose_gate: bool,
    /// Propose a record whose plan is weaker than the rules ask (an arm read
    /// by the gate fewer than twice, or a drift test that cannot detect a 10%
    /// drift); the entry's note says so.
    #[arg(long)]
    allow_weak_plan: bool,
}

#[derive(clap::Args)]
struct IdentityArgs {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// The runtime binary whose build identity to record (default: `runtime`
    /// beside this executable).
    #[arg(long, value_name = "PATH")]
    runtime: Option<PathBuf>,
    /// Model files to hash (sha256 and size).
    #[arg(long = "model", value_name = "PATH", num_args = 1..)]
    models: Vec<PathBuf>,
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tuner: error: {}", runtime::limits::error_chain(&e));
            ExitCode::from(tuner::exit::ERROR)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Gate(a) => run_gate(a),
        Command::Identity(a) => run_identity(a),
        Command::Sweep(a) => run_sweep(*a),
        Command::Summarize(a) => run_summarize(a),
        Command::Propose(a) => run_propose(a),
    }
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("{flag} {s}: not a number of seconds"))
}

fn run_gate(a: GateArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.gate.config();
    let timeout = seconds("--wait", a.wait)?;
    let interval = seconds("--interval", a.interval)?;
    let mut g = gate::Gate::new(cfg);
    let run = g.wait(timeout, interval, |r, waited| {
        eprintln!(
            "tuner gate: waiting ({:.0} s of {:.0} s): {}",
            waited.as_secs_f64(),
            timeout.as_secs_f64(),
            gate::summary_line(r)
        );
    });
    if a.json {
        println!("{}", serde_json::to_string(&run)?);
    } else {
        print_gate(&run);
    }
    Ok(ExitCode::from(run.exit_code))
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Wait => "wait",
        Status::Halt => "halt",
        Status::Unknown => "unknown",
    }
}

fn print_gate(run: &GateRun) {
    let r = &run.report;
    let d = match run.decision {
        Decision::Pass => "PASS",
        Decision::Wait => "WAIT",
        Decision::Halt => "HALT",
    };
    let how = if run.timed_out {
        format!(" (gave up after {} checks, {:.1} s: --wait ran out)", run.attempts, run.waited_ms as f64 / 1e3)
    } else if run.attempts > 1 {
        format!(" (after {} checks, {:.1} s)", run.attempts, run.waited_ms as f64 / 1e3)
    } else {
        String::new()
    };
    println!("gate: {d}{how}");
    let c = &r.checks;
    let cpu = c.cpu.reading.value.as_ref().map_or_else(
        || c.cpu.reading.reason().to_string(),
        |v| {
            let top: Vec<String> =
                v.top.iter().take(3).map(|o| format!("{} pid {} {:.1}%", o.name, o.pid, o.cpu_pct)).collect();
            let busy = v.host.value.as_ref().map_or("?".into(), |h| {
                format!("{:.1}% of {} CPUs ({:.1}% of a core not ours)", h.busy_pct, h.n_cpus, h.not_ours_core_pct)
            });
            let top = if top.is_empty() { "none above 0%".to_string() } else { top.join(", ") };
            format!("host busy {busy} over {} ms; busiest: {top}", v.window_ms)
        },
    );
    let foreign = c.foreign.reading.value.as_ref().map_or_else(
        || c.foreign.reading.reason().to_string(),
        |v| {
            format!(
                "{} processes, {} python file lists read, {} model process(es) found",
                v.n_processes,
                v.n_files_scanned,
                v.found.len()
            )
        },
    );
    let gpu = c.gpu.reading.value.as_ref().map_or_else(
        || c.gpu.reading.reason().to_string(),
        |v| {
            if v.devices.is_empty() {
                v.evidence.clone()
            } else {
                format!("{} device(s), driver {}", v.devices.len(), v.driver_version.value.as_deref().unwrap_or("?"))
            }
        },
    );
    let nvrm = c.nvrm.reading.value.as_ref().map_or_else(
        || c.nvrm.reading.reason().to_string(),
        |v| match v.cumulative {
            Some(n) => format!(
                "{}{n} since boot, {} in the last {} s; {}",
                if v.cumulative_is_lower_bound { ">= " } else { "" },
                v.recent.map_or("?".into(), |x| x.to_string()),
                v.window_s,
                v.note
            ),
            None => v.note.clone(),
        },
    );
    let memory = c.memory.reading.value.as_ref().map_or_else(
        || c.memory.reading.reason().to_string(),
        |v| format!("{} MiB available (floor {} MiB)", v.available_mib, v.min_available_mib),
    );
    for (name, status, line) in [
        ("cpu", c.cpu.status, cpu),
        ("foreign", c.foreign.status, foreign),
        ("gpu", c.gpu.status, gpu),
        ("nvrm", c.nvrm.status, nvrm),
        ("memory", c.memory.status, memory),
    ] {
        println!("  {name:<8} {:<8} {line}", status_word(status));
    }
    if !r.verdict.reasons.is_empty() {
        println!("reasons:");
        for x in &r.verdict.reasons {
            println!("  - {}", x.text);
        }
    }
    for x in &r.verdict.accepted_unknown {
        println!("accepted unknown (not checked): {}: {}", x.source.name(), x.reasons.join("; "));
    }
}

fn run_identity(a: IdentityArgs) -> anyhow::Result<ExitCode> {
    let id = identity::collect(&IdentityOptions { runtime: a.runtime, models: a.models });
    if a.json {
        println!("{}", serde_json::to_string(&id)?);
    } else {
        print_flat(&serde_json::to_value(&id)?, "");
    }
    Ok(ExitCode::from(tuner::exit::PASS))
}

/// `a.b.c: value` lines; a null Reading prints as `null (reason)`.
fn print_flat(v: &serde_json::Value, path: &str) {
    use serde_json::Value;
    let key = |k: &str| {
        if path.is_empty() { k.to_string() } else { format!("{path}.{k}") }
    };
    match v {
        Value::Object(o) if o.len() == 2 && o.contains_key("value") && o.contains_key("unavailable_reason") => {
            match (&o["value"], &o["unavailable_reason"]) {
                (Value::Null, r) => {
                    println!("{path}: null ({})", r.as_str().unwrap_or("no reason"))
                }
                (x, _) => print_flat(x, path),
            }
        }
        Value::Object(o) => o.iter().for_each(|(k, x)| print_flat(x, &key(k))),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            let items: Vec<String> = a.iter().map(|x| x.as_str().map_or(x.to_string(), String::from)).collect();
            println!("{path}: [{}]", items.join(", "));
        }
        Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| print_flat(x, &format!("{path}[{i}]"))),
        Value::String(s) => println!("{path}: {s}"),
        x => println!("{path}: {x}"),
    }
}

/// `1-8` or `1,2,4` (or a mix: `1-3,6`).
fn parse_widths(s: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num =
            |x: &str| x.trim().parse::<usize>().map_err(|_| anyhow::anyhow!("--widths {s:?}: {x:?} is not a width"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b > runtime::policy::MAX_WIDTH {
                    anyhow::bail!("--widths {s:?}: {part} is not a range within 1..={}", runtime::policy::MAX_WIDTH);
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn run_sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let (dir, outcome) = match a.resume {
        Some(dir) => {
            let o = tuner::sweep::resume(&dir)?;
            (dir, o)
        }
        None => {
            let runtime = match a.runtime {
                Some(p) => p,
                None => identity::default_runtime_path().map_err(anyhow::Error::msg)?,
            };
            let target = match a.target {
                Some(p) => runtime::fetch::resolve_model_arg(&p, None)?,
                None => runtime::fetch::ensure_default_model(None)?,
            };
            let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let drafter = drafter_kind(&a.drafter)?;
            // layerskip's list is checked against the target's layers with
            // the runtime's own parser, before anything is written.
            let n_layers = if drafter == DrafterKind::Layerskip { target_layers(&target)? } else { 0 };
            let out = match a.out {
                Some(o) => o,
                None => tuner::sweep::default_out_dir(drafter),
            };
            let (rounds, auto_rounds) = match a.rounds.trim() {
                "auto" => (
                    a.auto_max_rounds,
                    Some(tuner::raw::AutoRounds {
                        min_rounds: a.auto_min_rounds,
                        max_rounds: a.auto_max_rounds,
                        budget_s: a.auto_budget,
                    }),
                ),
                n => (
                    n.parse::<usize>()
                        .map_err(|_| anyhow::anyhow!("--rounds {n:?}: give a number of rounds or `auto`"))?,
                    None,
                ),
            };
            let opts = SweepOptions {
                target,
                drafter,
                drafter_settings: drafter_settings(
                    drafter,
                    a.ngram_min,
                    a.ngram_max,
                    (a.suffix_min_match, a.suffix_max_match, a.suffix_min_prob),
                    a.layerskip_layers.as_deref().map(|l| (l, n_layers)),
                )?,
                drafter_model: a.drafter_model,
                design: tuner::raw::Design {
                    widths: parse_widths(&a.widths)?,
                    rounds,
                    bursts: a.bursts,
                    bracket_arms: a.bracket_arms,
                    bracket_bursts: Some(a.bracket_bursts),
                    auto_rounds,
                    warmup: a.warmup,
                    max_tokens: a.max_tokens,
                    threads,
                },
                prompts: a.prompts,
                out: out.clone(),
                runtime,
                gate: a.gate.config(),
                gate_wait: seconds("--gate-wait", a.gate_wait)?,
                gate_interval: seconds("--gate-interval", a.gate_interval)?,
                served: a.served.then_some(tuner::raw::ServedSettings {
                    health_timeout_s: a.health_timeout,
                    stop_timeout_s: a.stop_timeout,
                    request_timeout_s: a.request_timeout,
                }),
            };
            let o = tuner::sweep::start(&opts)?;
            (out, o)
        }
    };
    // A halted sweep still gets its (incomplete) record, so the halt is reviewable.
    let summary = tuner::summarize::summarize_dir(&dir).and_then(|(raw, s)| {
        tuner::record::write_all(&dir, &raw, &s)?;
        Ok(s)
    });
    match &summary {
        Ok(s) if a.json => println!("{}", serde_json::to_string(s)?),
        Ok(s) => {
            println!("record: {}", dir.join("record.md").display());
            for c in tuner::record::conclusions(s) {
                println!("  {c}");
            }
            if matches!(outcome, Outcome::Complete) {
                eprintln!(
                    "next: `tuner propose {}` writes the policy entry from this record (or says why it cannot)",
                    dir.display()
                );
            }
        }
        Err(e) => eprintln!("tuner sweep: no record written: {e:#}"),
    }
    // Every sweep leaves a ledger line, kept or not (records/ledger.jsonl).
    let ended = match &outcome {
        Outcome::Complete => "complete".to_string(),
        Outcome::Halted(k) => format!("halted ({k:?})"),
    };
    match tuner::ledger::for_sweep(&dir, ended, summary.as_ref().map_err(|e| format!("{e:#}"))) {
        Some((records, line)) => match tuner::ledger::append(&records, &line) {
            // stderr: with --json, stdout holds the summary alone.
            Ok(()) => eprintln!("ledger: {}", records.join(tuner::ledger::LEDGER_FILE).display()),
            Err(e) => eprintln!("tuner sweep: the ledger line was not written: {e}"),
        },
        None => eprintln!("tuner sweep: {} is not under a records/ folder: no ledger line written", dir.display()),
    }
    Ok(ExitCode::from(match outcome {
        Outcome::Complete => {
            summary?;
            tuner::exit::PASS
        }
        Outcome::Halted(HaltKind::GateTimeout | HaltKind::Contention) => tuner::exit::WAIT,
        Outcome::Halted(HaltKind::Gate | HaltKind::NvrmBudget) => tuner::exit::HALT,
        Outcome::Halted(HaltKind::ArmFailed) => tuner::exit::ERROR,
    }))
}

fn run_summarize(a: SummarizeArgs) -> anyhow::Result<ExitCode> {
    let (raw, s) = tuner::summarize::summarize_dir(&a.dir)?;
    if raw.partial_tail_bytes > 0 {
        eprintln!(
            "tuner summarize: ignored a partial last line of {} bytes in raw.jsonl (an interrupted write)",
            raw.partial_tail_bytes
        );
    }
    tuner::record::write_all(&a.dir, &raw, &s)?;
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        // The headline; the whole record is a file to read, not a screenful.
        println!("record: {}", a.dir.join("record.md").display());
        for c in tuner::record::conclusions(&s) {
            println!("  {c}");
        }
    }
    Ok(ExitCode::from(tuner::exit::PASS))
}

fn run_propose(a: ProposeArgs) -> anyhow::Result<ExitCode> {
    use tuner::propose::ProposeError;
    use tuner::rules::Allow;
    let allow = Allow {
        dirty: a.allow_dirty,
        stale_fingerprint: a.allow_stale_fingerprint,
        older: a.allow_older,
        loose_gate: a.allow_loose_gate,
        weak_plan: a.allow_weak_plan,
    };
    match tuner::propose::propose(&a.dir, a.table.as_deref(), a.dry_run, allow) {
        Ok(p) => {
            for o in &p.overridden {
                eprintln!("tuner propose: warning: overridden by {o}");
            }
            if !p.history.is_empty() {
                eprintln!(
                    "tuner propose: earlier sweeps of this key with this verify-path fingerprint (records/ledger.jsonl):"
                );
                for h in &p.history {
                    eprintln!("  {h}");
                }
            }
            eprintln!(
                "tuner propose: the pooled rule over {} record(s) of this key and fingerprint:",
                p.pooled.records.len()
            );
            for r in &p.pooled.records {
                eprintln!("  {r}");
            }
            for (r, why) in &p.excluded {
                eprintln!("  left out: {r}: {why}");
            }
            for w in &p.pooled.widths {
                eprintln!(
                    "  width {}: {:.3} [{:.3}, {:.3}] over {} round(s) of {} record(s), between-sweep sd {:.3}{}{}",
                    w.width,
                    w.ratio,
                    w.interval.0,
                    w.interval.1,
                    w.log.rounds,
                    w.log.records,
                    w.log.tau2.sqrt(),
                    if w.tied { ", tied with the best" } else { "" },
                    if w.not_measured { ", NOT A MEASUREMENT in some record" } else { "" }
                );
            }
            eprintln!("tuner propose: {}", p.verdict.say());
            print!("{}", p.diff);
            if p.written {
                println!("wrote {}", p.table.display());
                eprintln!(
                    "next: rebuild the runtime (`cargo build --release -p runtime`): the table is compiled in; \
                     `runtime policy explain -m MODEL` then shows the entry it resolves"
                );
            } else {
                println!("dry run: {} not written", p.table.display());
            }
            Ok(ExitCode::from(tuner::exit::PASS))
        }
        // A file that could not be read or written (missing, no permission,
        // a full disk) is a failure, not a verdict on the record: exit 1.
        // One read but refused for its content (too large, not UTF-8) is a refusal.
        Err(ProposeError::Refused(tuner::rules::Refusal::Io { path, source }))
            if source.kind() != std::io::ErrorKind::InvalidData =>
        {
            eprintln!("tuner propose: error: {}: {source}", path.display());
            Ok(ExitCode::from(tuner::exit::ERROR))
        }
        Err(ProposeError::Refused(r)) => {
            eprintln!("tuner propose: refused: {r}");
            Ok(ExitCode::from(tuner::exit::REFUSED))
        }
        Err(e) => Err(e.into()),
    }
}

/// The `--drafter` value as the runtime's kind; an unknown name is an error
/// naming the flag and the kinds there are.
fn drafter_kind(flag: &str) -> anyhow::Result<DrafterKind> {
    flag.parse().map_err(|e| anyhow::anyhow!("--drafter: {e}"))
}

/// The number of layers of the target, read by the runtime's own config
/// readers (a GGUF file's metadata, a checkpoint's config.json) without
/// loading the weights.
fn target_layers(target: &std::path::Path) -> anyhow::Result<usize> {
    let at = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", target.display());
    let config = if target.is_dir() {
        let path = target.join("config.json");
        let bytes = runtime::limits::read_capped(&path, runtime::limits::MAX_CONFIG_JSON_BYTES).map_err(|e| at(&e))?;
        // Its errors name config.json already.
        runtime::model::hf::config_from_json(&path, &bytes)?.0
    } else {
        let f = runtime::gguf::GgufFile::open(target).map_err(|e| at(&e))?;
        runtime::model::gguf_load::config_from_gguf(&f).map_err(|e| at(&e))?
    };
    Ok(config.n_layers)
}

/// The complete drafter settings of a sweep, from its flags; `layers` is
/// `--layerskip-layers` with the target's layer count.
fn drafter_settings(
    kind: DrafterKind,
    ngram_min: usize,
    ngram_max: usize,
    (suffix_min_match, suffix_max_match, suffix_min_prob): (usize, usize, f64),
    layers: Option<(&str, usize)>,
) -> anyhow::Result<runtime::policy::DrafterSettings> {
    use runtime::policy::DrafterSettings;
    Ok(match kind {
        DrafterKind::Ngram => DrafterSettings::ngram(ngram_min, ngram_max),
        DrafterKind::Suffix => {
            let s = DrafterSettings::suffix(suffix_min_match, suffix_max_match, suffix_min_prob);
            // Refused here, before any arm runs, rather than by every arm.
            s.check(kind)
                .map_err(|e| anyhow::anyhow!("--suffix-min-match/--suffix-max-match/--suffix-min-prob: {e}"))?;
            s
        }
        DrafterKind::Layerskip => {
            let Some((l, n_layers)) = layers else {
                anyhow::bail!(
                    "--drafter layerskip needs --layerskip-layers LIST (e.g. 0,1,2,3): the record states them"
                );
            };
            // The runtime's parser: a count K (the first K layers) or an
            // increasing list, every layer one the target has.
            DrafterSettings::layerskip(runtime::spec::setup::parse_layers(l, n_layers)?)
        }
        _ => DrafterSettings::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::{drafter_kind, drafter_settings, parse_widths};
    use runtime::policy::{DrafterKind, DrafterSettings};

    #[test]
    fn widths_parse_as_ranges_and_lists() {
        assert_eq!(parse_widths("1-8").unwrap(), (1..=8).collect::<Vec<_>>());
        assert_eq!(parse_widths("4,1-2, 4").unwrap(), vec![1, 2, 4]);
        assert!(parse_widths("8-1").is_err());
        assert!(parse_widths("1-99").is_err());
        assert!(parse_widths("two").unwrap_err().to_string().contains("not a width"));
    }

    const SUFFIX: (usize, usize, f64) = (2, 32, 0.5);

    #[test]
    fn drafter_flags_become_complete_settings() {
        assert_eq!(drafter_settings(DrafterKind::Ngram, 2, 5, SUFFIX, None).unwrap(), DrafterSettings::ngram(2, 5));
        assert_eq!(
            drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("0, 1,2", 30))).unwrap(),
            DrafterSettings::layerskip(vec![0, 1, 2])
        );
        assert_eq!(
            drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("5,", 30))).unwrap(),
            DrafterSettings::layerskip(vec![5])
        );
        // A bare count is the first K layers, as the runtime reads it.
        assert_eq!(
            drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("3", 30))).unwrap(),
            DrafterSettings::layerskip(vec![0, 1, 2])
        );
        assert!(drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("0", 30))).is_err());
        let e = drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, None).unwrap_err().to_string();
        assert!(e.contains("--layerskip-layers"), "{e}");
        assert!(
            drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("0,x", 30)))
                .unwrap_err()
                .to_string()
                .contains("\"x\"")
        );
        // The runtime's bounds: a layer the target lacks, a list out of order.
        let e = drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("5,999", 30))).unwrap_err().to_string();
        assert!(e.contains("layer 999 does not exist (the target has 30)"), "{e}");
        assert!(drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("3,1", 30))).is_err());
        assert!(drafter_settings(DrafterKind::Layerskip, 3, 4, SUFFIX, Some(("31", 30))).is_err());
        assert_eq!(drafter_settings(DrafterKind::DraftModel, 3, 4, SUFFIX, None).unwrap(), DrafterSettings::default());
        assert!(drafter_kind("nope").unwrap_err().to_string().starts_with("--drafter: "));
        assert_eq!(drafter_kind("draft-model").unwrap(), DrafterKind::DraftModel);
        assert_eq!(drafter_kind("suffix").unwrap(), DrafterKind::Suffix);
    }

    #[test]
    fn suffix_flags_become_checked_settings() {
        assert_eq!(
            drafter_settings(DrafterKind::Suffix, 3, 4, (3, 16, 0.25), None).unwrap(),
            DrafterSettings::suffix(3, 16, 0.25)
        );
        let e = drafter_settings(DrafterKind::Suffix, 3, 4, (0, 16, 0.5), None).unwrap_err().to_string();
        assert!(e.contains("suffix_min_match 0"), "{e}");
        let e = drafter_settings(DrafterKind::Suffix, 3, 4, (2, 16, 1.5), None).unwrap_err().to_string();
        assert!(e.contains("suffix_min_prob 1.5"), "{e}");
        // The suffix flags do not leak into other kinds' settings.
        assert_eq!(
            drafter_settings(DrafterKind::Ngram, 3, 4, (9, 9, 0.9), None).unwrap(),
            DrafterSettings::ngram(3, 4)
        );
    }
}
