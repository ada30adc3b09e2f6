//! `tuner`: measures draft widths on this host. A thin shell over the
//! `tuner` library: parse the command line, call the library, print, and
//! map the outcome to an exit code (see `tuner::exit`).
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tuner::gate::{self, Decision, GateConfig, GateRun, Source, Status};
use tuner::identity::{self, IdentityOptions};

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
            eprintln!("tuner: error: {e:#}");
            ExitCode::from(tuner::exit::ERROR)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Gate(a) => run_gate(a),
        Command::Identity(a) => run_identity(a),
    }
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("{flag} {s}: not a number of seconds"))
}

fn run_gate(a: GateArgs) -> anyhow::Result<ExitCode> {
    let cfg = GateConfig {
        cpu_window_ms: a.cpu_window_ms,
        cpu_threshold_pct: a.cpu_threshold,
        host_cpu_threshold_pct: a.host_cpu_threshold,
        min_available_mib: a.min_available_mib,
        nvrm_budget: a.nvrm_budget,
        nvrm_window_s: a.nvrm_window_s,
        gpu_util_threshold_pct: a.gpu_util_threshold,
        gpu_min_free_mib: a.gpu_min_free_mib,
        accept_unknown: a.accept_unknown,
        exclude_roots: a.exclude_pid,
        ..GateConfig::default()
    };
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
