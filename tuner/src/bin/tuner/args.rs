//! `tuner`'s command line: the commands, their flags, and the flag logic
//! that turns them into the library's options (lists parsed, the target
//! resolved, drafter settings made complete).
use std::path::PathBuf;
use std::time::Duration;
use tuner::data::plan::SpeculativeArm;

use clap::{Parser, Subcommand};
use policy::DrafterKind;
use runtime::commands::drafter_flags::DrafterFlags;
use tuner::host::gate::{GateConfig, Source};
use tuner::host::identity;
use tuner::sweep::driver::SweepOptions;

/// Measure speculative draft widths on this host and write records and policy entries.
#[derive(Parser)]
#[command(name = "tuner", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Make an acceptance profile: decode a prompt set classic and greedy and
    /// record what the drafter would have drafted and had accepted at every
    /// point (no timing: any host, any load). Written under profiles/.
    Profile(Box<ProfileArgs>),
    /// The predictor measured: every committed sweep record's arms predicted
    /// from its own verify-cost curves and the committed profile, beside what
    /// it measured (the table docs/records.md holds).
    PredictError(PredictErrorArgs),
    /// A default for this host in about a minute: measure the verify pass's
    /// cost here (fresh processes, gated), replay the committed acceptance
    /// profile on it through the runtime's controller, and write a record
    /// whose `tuner propose` gives a predicted entry. Exit 0, or 1 on an error.
    Calibrate(Box<CalibrateArgs>),
    /// Re-check this host's entry on this build in about two minutes: a
    /// short sweep of the entry's width and its two neighbours between
    /// classic brackets, with the verify-cost processes; when the cost curve
    /// did not move and the speed agrees, the entry is re-blessed for this
    /// build's fingerprint (`check = {...}` in the entry). Exit 0 holds, 5
    /// refused (the entry then needs a sweep), 1 an error.
    Check(Box<CheckArgs>),
    /// The sweep ledger (records/ledger.jsonl): print its lines, or backfill
    /// the line of a record committed before the ledger existed.
    Ledger(LedgerArgs),
}

#[derive(clap::Args)]
pub struct LedgerArgs {
    #[command(subcommand)]
    pub command: LedgerCommand,
}

#[derive(clap::Subcommand)]
pub enum LedgerCommand {
    /// Print every line of the ledger in RECORDS (default `records`), one a
    /// line, backfilled ones marked.
    Show {
        #[arg(default_value = "records")]
        records: PathBuf,
    },
    /// Append the ledger line of each record folder, built from its committed
    /// files and marked backfilled: only for a record dated before the
    /// ledger's first day (2026-12-03) that has no line yet. Exit 5 when one
    /// is refused (the others are still written).
    Backfill {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
}

#[derive(clap::Args)]
#[command(args_override_self = true)]
pub struct CheckArgs {
    /// The target model; default: the default model.
    #[arg(short = 'm', long = "model", alias = "target", value_name = "MODEL")]
    pub target: Option<PathBuf>,
    /// The drafter of the entry to check.
    #[arg(long, default_value = "ngram")]
    pub drafter: String,
    /// The draft checkpoint for `--drafter draft-model`.
    #[arg(long, value_name = "PATH")]
    pub drafter_model: Option<PathBuf>,
    /// A prompt set whose sha256 is the entry's (default: prompts/sweep.jsonl, compiled in).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Rounds of the short sweep (the unit of its interval).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Classic arms on each side of a round.
    #[arg(long, default_value_t = 2)]
    pub bracket_arms: usize,
    /// Check even an entry that is fresh for this build.
    #[arg(long)]
    pub force: bool,
    /// The activation precision of the entry to check (`int8`, `int16`;
    /// default: the runtime's, int8): a K-quant model has an entry for each.
    #[arg(long, value_name = "int8|int16")]
    pub precision: Option<String>,
    /// The entry's bucket of concurrent sequences (1..=64; default 1, the
    /// idle entry): a bucket above one is checked served, at that many
    /// clients, as its sweep ran.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Check every entry of this host class and device class whose model is
    /// in the model cache (what a fleet's nightly job runs); -m, --drafter,
    /// -t, --precision and --concurrency come from each entry.
    #[arg(long, conflicts_with_all = ["target", "drafter_model", "out", "precision", "concurrency"])]
    pub all: bool,
    /// Judge, but do not write the table.
    #[arg(long)]
    pub dry_run: bool,
    /// The policy table; default: policy/draft-block-width.toml above the working directory.
    #[arg(long, value_name = "PATH")]
    pub table: Option<PathBuf>,
    /// The record folder; default: records/<date>-<device>-<host>-<drafter>[-<model>]-check.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[arg(long, value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub gate_wait: f64,
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub gate_interval: f64,
    #[command(flatten)]
    pub gate: GateOpts,
}

impl CheckArgs {
    /// `--precision`, parsed.
    pub fn precision(&self) -> anyhow::Result<Option<policy::Precision>> {
        self.precision
            .as_deref()
            .map(policy::Precision::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--precision: {e}"))
    }

    /// `--concurrency`, bounded as a served sweep's.
    pub fn concurrency(&self) -> anyhow::Result<usize> {
        let max = tuner::data::raw::MAX_CONCURRENCY;
        match self.concurrency {
            None => Ok(1),
            Some(n) if (1..=max).contains(&n) => Ok(n),
            Some(n) => anyhow::bail!("--concurrency {n} is out of range 1..={max} (the entry's concurrent sequences)"),
        }
    }

    /// The runtime, the target and the drafter, resolved.
    pub fn resolved(&self) -> anyhow::Result<(PathBuf, PathBuf, DrafterKind, Option<PathBuf>)> {
        let runtime = match &self.runtime {
            Some(p) => p.clone(),
            None => identity::default_runtime_path().map_err(anyhow::Error::msg)?,
        };
        let target = match &self.target {
            Some(p) => runtime::fetch::resolve_model_arg(p, None)?,
            None => runtime::fetch::ensure_default_model(None)?,
        };
        let drafter_model = match &self.drafter_model {
            Some(p) => Some(runtime::fetch::resolve_model_arg(p, None)?),
            None => None,
        };
        Ok((runtime, target, drafter_kind(&self.drafter)?, drafter_model))
    }
}

#[derive(clap::Args)]
#[command(args_override_self = true)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub what: ForArgs,
    /// Tokens per request of the profile (a sweep's --max-tokens).
    #[arg(long, default_value_t = tuner::data::plan::DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// A profile file; default: the committed one under profiles/ that matches.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Widths predicted: a range `1-8` or a list; the adaptive arm (up to the widest) is added.
    #[arg(long, value_name = "LIST", default_value = "1-8")]
    pub widths: String,
    /// Cost processes per context (the unit of the curve's interval): 2..=32.
    #[arg(long, default_value_t = tuner::sweep::calibrate::DEFAULT_PROCESSES)]
    pub processes: usize,
    /// Context lengths of the verify-cost processes.
    #[arg(long, value_name = "LIST", default_value = tuner::data::verify_cost::DEFAULT_COST_CONTEXTS_ARG)]
    pub cost_contexts: String,
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// The record folder; default: records/<date>-<device>-<host>-<drafter>[-<model>]-calibrate.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The runtime binary; default: the one beside this tuner.
    #[arg(long, value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub gate_wait: f64,
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub gate_interval: f64,
    #[command(flatten)]
    pub gate: GateOpts,
}

impl CalibrateArgs {
    pub fn options(self) -> anyhow::Result<tuner::sweep::calibrate::CalibrateOptions> {
        let a = self;
        let runtime = match a.runtime {
            Some(p) => p,
            None => identity::default_runtime_path().map_err(anyhow::Error::msg)?,
        };
        let For { target, drafter, settings, drafter_model, prompts_text: text, prompts_name: name } =
            a.what.resolve()?;
        let mut widths = parse_widths(&a.widths)?;
        widths.push(SpeculativeArm::Adaptive);
        let out = match a.out {
            Some(o) => o,
            None => tuner::sweep::calibrate::default_out_dir(drafter, &target),
        };
        Ok(tuner::sweep::calibrate::CalibrateOptions {
            target,
            drafter,
            settings,
            drafter_model,
            prompts: tuner::analysis::calibration::Named { name, sha256: runtime::events::sha256_hex(text.as_bytes()) },
            max_tokens: a.max_tokens,
            profile: a.profile,
            root: std::env::current_dir()?,
            widths,
            processes: a.processes,
            contexts: tuner::data::verify_cost::parse_contexts(&a.cost_contexts).map_err(anyhow::Error::msg)?,
            threads: a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            runtime,
            out,
            gate: a.gate.config(),
            gate_wait: seconds("--gate-wait", a.gate_wait)?,
            gate_interval: seconds("--gate-interval", a.gate_interval)?,
        })
    }
}

#[derive(clap::Args)]
pub struct PredictErrorArgs {
    /// The repository root (records/ and profiles/ under it).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub root: PathBuf,
    /// Print the rows as JSON lines instead of the markdown table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct GateArgs {
    /// Print one JSON object (the last report and how it was reached).
    #[arg(long)]
    pub json: bool,
    /// Re-check until the gate passes or halts, for at most SECONDS; then give
    /// up with the last reasons.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub wait: f64,
    /// Seconds between re-checks under --wait.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub interval: f64,
    #[command(flatten)]
    pub gate: GateOpts,
}

/// The gate's thresholds, shared by `gate` and `sweep`.
#[derive(clap::Args, Clone)]
pub struct GateOpts {
    /// Let an unreadable SOURCE pass; the acceptance is recorded in the verdict.
    #[arg(long, value_enum, value_name = "SOURCE", num_args = 1.., value_delimiter = ',')]
    pub accept_unknown: Vec<Source>,
    /// CPU sampling window.
    #[arg(long, value_name = "MS", default_value_t = GateConfig::default().cpu_window_ms)]
    pub cpu_window_ms: u64,
    /// A process above this share of one core (percent) is contention.
    #[arg(long, value_name = "PERCENT", default_value_t = GateConfig::default().cpu_threshold_pct)]
    pub cpu_threshold: f64,
    /// Host-wide CPU not this tuner's, in percent of one core, above which the
    /// host is contended even with no single process over --cpu-threshold
    /// (short-lived processes, hypervisor steal).
    #[arg(long, value_name = "PERCENT", default_value_t = GateConfig::default().host_cpu_threshold_pct)]
    pub host_cpu_threshold: f64,
    /// Wait while MemAvailable is below this.
    #[arg(long, value_name = "MIB", default_value_t = GateConfig::default().min_available_mib)]
    pub min_available_mib: u64,
    /// Halt when the NVIDIA driver's cumulative NV_ERR_NO_MEMORY count this boot reaches this.
    #[arg(long, value_name = "COUNT", default_value_t = GateConfig::default().nvrm_budget)]
    pub nvrm_budget: u64,
    /// Wait while an NV_ERR_NO_MEMORY was logged within this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = GateConfig::default().nvrm_window_s)]
    pub nvrm_window_s: f64,
    /// Wait while a GPU is at least this busy (percent).
    #[arg(long, value_name = "PERCENT", default_value_t = GateConfig::default().gpu_util_threshold_pct)]
    pub gpu_util_threshold: u32,
    /// Wait while a GPU has less free memory than this.
    #[arg(long, value_name = "MIB", default_value_t = GateConfig::default().gpu_min_free_mib)]
    pub gpu_min_free_mib: u64,
    /// Also treat PID and its descendants as this tuner's own (not contention).
    #[arg(long, value_name = "PID")]
    pub exclude_pid: Vec<u32>,
}

impl GateOpts {
    pub fn config(self) -> GateConfig {
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

#[derive(clap::Args, Clone)]
// A flag given twice takes the last value (so a wrapper can override defaults).
#[command(args_override_self = true)]
pub struct SweepArgs {
    /// The target model (GGUF file, Hugging Face directory, or a known model's name, as
    /// `runtime --model` takes it); default: the embedded default model, fetched on first use.
    /// `--target` is its other name.
    #[arg(short = 'm', long = "model", alias = "target", value_name = "MODEL")]
    pub target: Option<PathBuf>,
    /// Drafter kind: ngram, suffix, layerskip or draft-model.
    #[arg(long, default_value = "ngram")]
    pub drafter: String,
    /// The draft checkpoint for `--drafter draft-model`.
    #[arg(long, value_name = "PATH")]
    pub drafter_model: Option<PathBuf>,
    /// The ngram and suffix settings, passed to every arm and recorded (a
    /// policy entry applies with exactly these settings).
    #[command(flatten)]
    pub drafter_flags: DrafterFlags,
    /// `layerskip`: the layers the drafter runs, a list like 0,1,2,3 (required
    /// for --drafter layerskip, so the record states them).
    #[arg(long, value_name = "LIST")]
    pub layerskip_layers: Option<String>,
    /// Draft widths: a range `1-8` or a list `1,2,4`.
    #[arg(long, value_name = "LIST", default_value = "1-8")]
    pub widths: String,
    /// Rounds; each opens and closes with classic arms. The round is the
    /// unit of every interval (at least 2; docs/records.md). `auto`: from
    /// the default number up to --auto-max-rounds, stopping when the
    /// decision is settled or the time budget would be passed.
    #[arg(long, value_name = "N|auto", default_value_t = tuner::data::plan::DEFAULT_ROUNDS.to_string())]
    pub rounds: String,
    /// `--rounds auto`: the most rounds.
    #[arg(long, value_name = "N", default_value_t = tuner::data::plan::DEFAULT_AUTO_MAX_ROUNDS)]
    pub auto_max_rounds: usize,
    /// `--rounds auto`: the fewest rounds.
    #[arg(long, value_name = "N", default_value_t = tuner::data::plan::DEFAULT_ROUNDS)]
    pub auto_min_rounds: usize,
    /// `--rounds auto`: no round starts that would end past this many seconds of the sweep.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::data::plan::DEFAULT_AUTO_BUDGET_S)]
    pub auto_budget: f64,
    /// Recorded passes over the prompt set per speculative arm.
    #[arg(long, default_value_t = tuner::data::plan::DEFAULT_BURSTS)]
    pub bursts: usize,
    /// Classic arms on each side of a round.
    #[arg(long, default_value_t = tuner::data::plan::DEFAULT_BRACKET_ARMS)]
    pub bracket_arms: usize,
    /// Recorded passes over the prompt set per classic bracket arm.
    #[arg(long, default_value_t = tuner::data::plan::DEFAULT_BRACKET_BURSTS)]
    pub bracket_bursts: usize,
    /// Unrecorded warm-up passes per arm (excluded from every statistic).
    /// None by default: a runtime process is warm before its first request
    /// (docs/records.md, "The warm-up pass").
    #[arg(long, default_value_t = tuner::data::plan::DEFAULT_WARMUP)]
    pub warmup: usize,
    /// Tokens generated per request.
    #[arg(long, default_value_t = tuner::data::plan::DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// Context lengths at which each round also times the verify pass of
    /// 1..=(widest width + 1) rows against a one-row pass (one `runtime bench
    /// --verify-cost` process each, after the round's arms; the entry carries
    /// the curve), or `none`. At most 4, each 1..=32768.
    #[arg(long, value_name = "LIST", default_value = tuner::data::verify_cost::DEFAULT_COST_CONTEXTS_ARG)]
    pub cost_contexts: String,
    /// Also run the adaptive arm in every round (the runtime choosing each
    /// round's draft length, up to the widest width, from the verify-cost
    /// curves measured so far): the rule chooses it where it is tied with
    /// or better than the best fixed width. `off` needs no cost curves.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = runtime::limits::parse_on_off, action = clap::ArgAction::Set)]
    pub adaptive_arm: bool,
    /// Prompt set (JSONL, each line tagged with its `type`); default: the
    /// shipped prompts/sweep.jsonl (compiled into the tuner).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// Worker threads per arm, as `runtime generate -t/--threads` (default: the CPUs available here).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Record folder (default: records/<date>-<device class>-<host class>-<drafter>, with -2, -3, ... when taken).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The runtime binary (default: `runtime` beside this executable).
    #[arg(long, value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    /// Print the summary as one JSON object at the end.
    #[arg(long)]
    pub json: bool,
    /// Continue the interrupted or halted sweep in DIR with its recorded settings
    /// (the other sweep flags are ignored).
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// How long the gate before each arm waits for a quiet host before the sweep stops.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub gate_wait: f64,
    /// Seconds between gate re-checks while waiting.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub gate_interval: f64,
    /// Measure through the server: each arm is a `runtime serve` process on a
    /// free loopback port, sent every prompt as a streamed request; widths are
    /// ranked by end-to-end tok/s, and time to first token is recorded.
    #[arg(long)]
    pub served: bool,
    /// --served: how long a server may take from start to answering GET /health.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::sweep::arm::served::DEFAULT_HEALTH_TIMEOUT_S, requires = "served")]
    pub health_timeout: f64,
    /// --served: how long a server may take to exit after SIGTERM before SIGKILL.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::sweep::arm::served::DEFAULT_STOP_TIMEOUT_S, requires = "served")]
    pub stop_timeout: f64,
    /// --served: the limit of one streamed request, from connecting to `data: [DONE]`.
    #[arg(long, value_name = "SECONDS", default_value_t = tuner::sweep::arm::served::DEFAULT_REQUEST_TIMEOUT_S, requires = "served")]
    pub request_timeout: f64,
    /// --served: concurrent clients per arm (1..=64), or a list (`1,2,4`): one
    /// sweep per count, one after another, each into its own folder (`-c<N>`
    /// above 1). Every pass over the prompt set is sent through N client
    /// threads, at most N requests in flight, to a server started with
    /// `--parallel N`; each request runs beside up to N-1 others. `tuner
    /// propose` writes a record at N > 1 as a bucket entry (`concurrency = N`)
    /// that a server uses when at least N sequences run.
    #[arg(long, value_name = "N[,N...]", default_value = "1", requires = "served")]
    pub concurrency: String,
    /// The K-quant activation precision every arm runs at (`runtime --precision`: int8 or int16;
    /// default: the runtime's, int8). Part of the record's key for targets with K-quant matrices.
    #[arg(long, value_name = "int8|int16")]
    pub precision: Option<String>,
    #[command(flatten)]
    pub gate: GateOpts,
}

#[derive(clap::Args)]
pub struct SummarizeArgs {
    /// The sweep folder (holding raw.jsonl).
    pub dir: PathBuf,
    /// Print the summary as one JSON object instead of the record.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct ProposeArgs {
    /// The sweep folder, under records/.
    pub dir: PathBuf,
    /// Show the diff without writing the table.
    #[arg(long)]
    pub dry_run: bool,
    /// The policy table (default: policy/draft-block-width.toml above DIR).
    #[arg(long, value_name = "PATH")]
    pub table: Option<PathBuf>,
    /// Propose a record whose arms ran a dirty build (`build.git_dirty`
    /// "true"), or one whose dirty state is "unknown".
    #[arg(long)]
    pub allow_dirty: bool,
    /// Propose a record measured under another kernel fingerprint than this
    /// build's (the entry is stale, and unused, until re-measured).
    #[arg(long)]
    pub allow_stale_fingerprint: bool,
    /// Replace an entry dated later than the record.
    #[arg(long)]
    pub allow_older: bool,
    /// Propose a record swept with a gate looser than the defaults (the entry's note says so).
    #[arg(long)]
    pub allow_loose_gate: bool,
    /// Propose a record whose plan is weaker than the rules ask (an arm read
    /// by the gate fewer than twice, or a drift test that cannot detect a 10%
    /// drift); the entry's note says so.
    #[arg(long)]
    pub allow_weak_plan: bool,
}

#[derive(clap::Args)]
pub struct ProfileArgs {
    /// Make the profile a sweep record needs: its model (by file name in the
    /// model cache, checked against the record's sha256), drafter, settings,
    /// prompts and token limit. The flags below are then not given.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["target", "drafter", "drafter_model", "prompts", "max_tokens"])]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub what: ForArgs,
    /// Tokens per request (a sweep's --max-tokens: the profile is for that limit).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Threads for the decoding (the output does not depend on them).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Where to write it; default: profiles/<model>-<drafter>-<settings>-<prompts>-<tokens>.jsonl.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

impl ProfileArgs {
    pub fn request(self) -> anyhow::Result<tuner::sweep::profile::ProfileRequest> {
        let a = self;
        let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if let Some(dir) = &a.record {
            return tuner::sweep::profile::request_for_record(dir, threads);
        }
        let f = a.what.resolve()?;
        Ok(tuner::sweep::profile::ProfileRequest {
            target: f.target,
            drafter: f.drafter,
            settings: f.settings,
            drafter_model: f.drafter_model,
            prompts_text: f.prompts_text,
            prompts_name: f.prompts_name,
            max_tokens: a.max_tokens.unwrap_or(tuner::data::plan::DEFAULT_MAX_TOKENS),
            threads,
        })
    }
}

/// The model, drafter and prompt set a profile or a calibration is for.
#[derive(clap::Args)]
pub struct ForArgs {
    /// The target model, as `tuner sweep --model` takes it; default: the default model.
    #[arg(short = 'm', long = "model", alias = "target", value_name = "MODEL")]
    pub target: Option<PathBuf>,
    /// Drafter kind: ngram, suffix, layerskip or draft-model (default ngram).
    #[arg(long)]
    pub drafter: Option<String>,
    /// The draft checkpoint for `--drafter draft-model`.
    #[arg(long, value_name = "PATH")]
    pub drafter_model: Option<PathBuf>,
    #[command(flatten)]
    pub drafter_flags: DrafterFlags,
    /// `layerskip`: the layers the drafter runs.
    #[arg(long, value_name = "LIST")]
    pub layerskip_layers: Option<String>,
    /// The prompt set (JSONL); default: prompts/sweep.jsonl, compiled in.
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
}

/// [`ForArgs`] resolved: the target, the drafter with complete settings,
/// a draft model, the prompt set's text and its name as an entry writes it.
pub struct For {
    pub target: PathBuf,
    pub drafter: DrafterKind,
    pub settings: policy::DrafterSettings,
    pub drafter_model: Option<PathBuf>,
    pub prompts_text: String,
    pub prompts_name: String,
}

impl ForArgs {
    pub fn resolve(self) -> anyhow::Result<For> {
        let a = self;
        let target = match a.target {
            Some(p) => runtime::fetch::resolve_model_arg(&p, None)?,
            None => runtime::fetch::ensure_default_model(None)?,
        };
        let drafter = drafter_kind(a.drafter.as_deref().unwrap_or("ngram"))?;
        let n_layers = if drafter == DrafterKind::Layerskip { target_layers(&target)? } else { 0 };
        let settings =
            drafter_settings(drafter, &a.drafter_flags, a.layerskip_layers.as_deref().map(|l| (l, n_layers)))?;
        let (prompts_text, prompts_name) = match &a.prompts {
            Some(p) => (
                runtime::limits::read_prompt_file(p)?,
                tuner::data::profile::entry_prompts_name(&p.display().to_string()),
            ),
            None => (tuner::sweep::driver::DEFAULT_PROMPTS_JSONL.to_string(), "prompts/sweep.jsonl".to_string()),
        };
        if drafter == DrafterKind::DraftModel && a.drafter_model.is_none() {
            anyhow::bail!("--drafter draft-model needs --drafter-model PATH");
        }
        let drafter_model = match a.drafter_model {
            Some(p) => Some(runtime::fetch::resolve_model_arg(&p, None)?),
            None => None,
        };
        Ok(For { target, drafter, settings, drafter_model, prompts_text, prompts_name })
    }
}

#[derive(clap::Args)]
pub struct IdentityArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The runtime binary whose build identity to record (default: `runtime`
    /// beside this executable).
    #[arg(long, value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    /// Model files to hash (sha256 and size).
    #[arg(long = "model", value_name = "PATH", num_args = 1..)]
    pub models: Vec<PathBuf>,
}

impl SweepArgs {
    /// `--concurrency` as counts: one (`4`) or a list (`1,2,4`), each
    /// 1..=64, in increasing order without repeats. A list with `--out` is
    /// refused: each count has its own folder.
    pub fn concurrencies(&self) -> anyhow::Result<Vec<usize>> {
        let s = &self.concurrency;
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let n: usize =
                part.parse().map_err(|_| anyhow::anyhow!("--concurrency {s:?}: {part:?} is not a count of clients"))?;
            let max = tuner::data::raw::MAX_CONCURRENCY;
            anyhow::ensure!(
                (1..=max).contains(&n),
                "--concurrency {n} is out of range 1..={max} (concurrent clients of each served arm)"
            );
            out.push(n);
        }
        anyhow::ensure!(out.len() <= 8, "--concurrency {s:?}: at most 8 counts in one run");
        out.sort_unstable();
        out.dedup();
        if out.len() > 1 && self.out.is_some() {
            anyhow::bail!("--concurrency {s:?} with --out: each count sweeps into its own folder; leave --out out");
        }
        Ok(out)
    }

    /// A new sweep's options from the flags, at `concurrency` clients: the
    /// runtime and the target resolved, every list parsed and checked as far
    /// as flags can be (the library checks the rest before anything is
    /// written).
    pub fn options_at(self, concurrency: usize) -> anyhow::Result<SweepOptions> {
        let a = self;
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
            None => tuner::sweep::driver::default_out_dir(drafter, if a.served { concurrency } else { 1 }),
        };
        let (rounds, auto_rounds) = match a.rounds.trim() {
            "auto" => (
                a.auto_max_rounds,
                Some(tuner::data::raw::AutoRounds {
                    min_rounds: a.auto_min_rounds,
                    max_rounds: a.auto_max_rounds,
                    budget_s: a.auto_budget,
                }),
            ),
            n => (
                n.parse::<usize>().map_err(|_| anyhow::anyhow!("--rounds {n:?}: give a number of rounds or `auto`"))?,
                None,
            ),
        };
        let opts = SweepOptions {
            target,
            drafter,
            drafter_settings: drafter_settings(
                drafter,
                &a.drafter_flags,
                a.layerskip_layers.as_deref().map(|l| (l, n_layers)),
            )?,
            drafter_model: a.drafter_model,
            design: tuner::data::raw::Design {
                widths: {
                    let mut w = parse_widths(&a.widths)?;
                    if a.adaptive_arm {
                        w.push(SpeculativeArm::Adaptive);
                    }
                    w
                },
                rounds,
                bursts: a.bursts,
                bracket_arms: a.bracket_arms,
                bracket_bursts: Some(a.bracket_bursts),
                auto_rounds,
                warmup: a.warmup,
                max_tokens: a.max_tokens,
                threads,
                cost_contexts: tuner::data::verify_cost::parse_contexts(&a.cost_contexts)
                    .map_err(anyhow::Error::msg)?,
            },
            prompts: a.prompts,
            out,
            runtime,
            gate: a.gate.config(),
            gate_wait: seconds("--gate-wait", a.gate_wait)?,
            gate_interval: seconds("--gate-interval", a.gate_interval)?,
            served: a.served.then_some(tuner::data::raw::ServedSettings {
                health_timeout_s: a.health_timeout,
                stop_timeout_s: a.stop_timeout,
                request_timeout_s: a.request_timeout,
                concurrency,
            }),
            precision: a
                .precision
                .map(|p| policy::Precision::parse(&p).map(|p| p.as_str().to_string()))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--precision: {e}"))?,
        };
        Ok(opts)
    }
}

pub fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("{flag} {s}: not a number of seconds"))
}

/// `1-8` or `1,2,4` (or a mix: `1-3,6`): the fixed widths, each 1..=32.
pub fn parse_widths(s: &str) -> anyhow::Result<Vec<SpeculativeArm>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num =
            |x: &str| x.trim().parse::<usize>().map_err(|_| anyhow::anyhow!("--widths {s:?}: {x:?} is not a width"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b > policy::MAX_WIDTH {
                    anyhow::bail!("--widths {s:?}: {part} is not a range within 1..={}", policy::MAX_WIDTH);
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    out.into_iter()
        .map(|w| {
            SpeculativeArm::fixed(w)
                .map_err(|_| anyhow::anyhow!("--widths: {w} is out of range 1..={}", policy::MAX_WIDTH))
        })
        .collect()
}

/// The `--drafter` value as the runtime's kind; an unknown name is an error
/// naming the flag and the kinds there are.
pub fn drafter_kind(flag: &str) -> anyhow::Result<DrafterKind> {
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

/// The complete drafter settings of a sweep, from its flags (unset: the
/// defaults); `layers` is
/// `--layerskip-layers` with the target's layer count.
fn drafter_settings(
    kind: DrafterKind,
    flags: &DrafterFlags,
    layers: Option<(&str, usize)>,
) -> anyhow::Result<policy::DrafterSettings> {
    use policy::DrafterSettings;
    Ok(match kind {
        DrafterKind::Ngram => {
            let (min, max) = flags.ngram_or_defaults();
            DrafterSettings::ngram(min, max)
        }
        DrafterKind::Suffix => {
            let (min_match, max_match, min_prob) = flags.suffix_or_defaults();
            let s = DrafterSettings::suffix(min_match, max_match, min_prob);
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
            DrafterSettings::layerskip(runtime::speculative::setup::parse_layers(l, n_layers)?)
        }
        _ => DrafterSettings::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::{drafter_kind, parse_widths};
    use policy::{DrafterKind, DrafterSettings};
    use runtime::commands::drafter_flags::DrafterFlags;

    /// [`super::drafter_settings`] with the ngram pair and the suffix triple given as flags.
    fn drafter_settings(
        kind: DrafterKind,
        ngram_min: usize,
        ngram_max: usize,
        (min_match, max_match, min_prob): (usize, usize, f64),
        layers: Option<(&str, usize)>,
    ) -> anyhow::Result<DrafterSettings> {
        let flags = DrafterFlags {
            ngram_min: Some(ngram_min),
            ngram_max: Some(ngram_max),
            suffix_min_match: Some(min_match),
            suffix_max_match: Some(max_match),
            suffix_min_prob: Some(min_prob),
        };
        super::drafter_settings(kind, &flags, layers)
    }

    /// `tuner sweep --served` with `extra` flags, parsed as the binary does.
    fn sweep_args(extra: &[&str]) -> super::SweepArgs {
        use clap::Parser;
        let argv = [&["tuner", "sweep", "--served"][..], extra].concat();
        match super::Cli::try_parse_from(argv).unwrap().command {
            super::Command::Sweep(a) => *a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn concurrency_parses_as_one_count_or_a_list_each_bounded() {
        assert_eq!(sweep_args(&[]).concurrencies().unwrap(), [1]);
        assert_eq!(sweep_args(&["--concurrency", "4,1, 2,4"]).concurrencies().unwrap(), [1, 2, 4]);
        for (bad, says) in
            [("0", "out of range 1..=64"), ("65", "out of range"), ("2,x", "not a count"), ("", "not a count")]
        {
            let e = sweep_args(&["--concurrency", bad]).concurrencies().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = sweep_args(&["--concurrency", "1,2,3,4,5,6,7,8,9"]).concurrencies().unwrap_err().to_string();
        assert!(e.contains("at most 8"), "{e}");
        let e = sweep_args(&["--concurrency", "1,2", "--out", "records/x"]).concurrencies().unwrap_err().to_string();
        assert!(e.contains("own folder"), "{e}");
        assert_eq!(sweep_args(&["--concurrency", "2", "--out", "records/x"]).concurrencies().unwrap(), [2]);
    }

    #[test]
    fn widths_parse_as_ranges_and_lists() {
        let codes = |s: &str| parse_widths(s).unwrap().iter().map(|w| w.code()).collect::<Vec<_>>();
        assert_eq!(codes("1-8"), (1..=8).collect::<Vec<_>>());
        assert_eq!(codes("4,1-2, 4"), vec![1, 2, 4]);
        assert!(parse_widths("0").unwrap_err().to_string().contains("0 is out of range"));
        assert!(parse_widths("33").unwrap_err().to_string().contains("33 is out of range"));
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
