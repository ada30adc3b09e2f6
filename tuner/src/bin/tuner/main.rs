//! `tuner`: measures draft widths on this host. A thin shell over the
//! `tuner` library: parse the command line ([`args`]), call the library,
//! print, and map the outcome to an exit code (see `tuner::exit`).
mod args;

use std::process::ExitCode;

use clap::Parser;
use tuner::data::raw::HaltKind;
use tuner::host::gate;
use tuner::host::identity::{self, IdentityOptions};
use tuner::sweep::driver::Outcome;

use args::{Cli, Command, GateArgs, IdentityArgs, ProposeArgs, SummarizeArgs, SweepArgs, seconds};

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tuner: error: {}", runtime::exit::error_chain(&e));
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
        print!("{}", gate::text::report_text(&run));
    }
    Ok(ExitCode::from(run.exit_code))
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

fn run_sweep(mut a: SweepArgs) -> anyhow::Result<ExitCode> {
    let json = a.json;
    let (dir, outcome) = match a.resume.take() {
        Some(dir) => {
            let o = tuner::sweep::driver::resume(&dir)?;
            (dir, o)
        }
        None => {
            let opts = a.options()?;
            let o = tuner::sweep::driver::start(&opts)?;
            (opts.out, o)
        }
    };
    // A halted sweep still gets its (incomplete) record, so the halt is reviewable.
    let summary = tuner::analysis::summarize::summarize_dir(&dir).and_then(|(raw, s)| {
        tuner::output::record::write_all(&dir, &raw, &s)?;
        Ok(s)
    });
    match &summary {
        Ok(s) if json => println!("{}", serde_json::to_string(s)?),
        Ok(s) => {
            println!("record: {}", dir.join("record.md").display());
            for c in tuner::output::record::conclusions(s) {
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
    match tuner::output::ledger::for_sweep(&dir, ended, summary.as_ref().map_err(|e| format!("{e:#}"))) {
        Some((records, line)) => match tuner::output::ledger::append(&records, &line) {
            // stderr: with --json, stdout holds the summary alone.
            Ok(()) => eprintln!("ledger: {}", records.join(tuner::output::ledger::LEDGER_FILE).display()),
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
    let (raw, s) = tuner::analysis::summarize::summarize_dir(&a.dir)?;
    if raw.partial_tail_bytes > 0 {
        eprintln!(
            "tuner summarize: ignored a partial last line of {} bytes in raw.jsonl (an interrupted write)",
            raw.partial_tail_bytes
        );
    }
    tuner::output::record::write_all(&a.dir, &raw, &s)?;
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        // The headline; the whole record is a file to read, not a screenful.
        println!("record: {}", a.dir.join("record.md").display());
        for c in tuner::output::record::conclusions(&s) {
            println!("  {c}");
        }
    }
    Ok(ExitCode::from(tuner::exit::PASS))
}

fn run_propose(a: ProposeArgs) -> anyhow::Result<ExitCode> {
    use tuner::analysis::rules::Allow;
    use tuner::output::propose::ProposeError;
    let allow = Allow {
        dirty: a.allow_dirty,
        stale_fingerprint: a.allow_stale_fingerprint,
        older: a.allow_older,
        loose_gate: a.allow_loose_gate,
        weak_plan: a.allow_weak_plan,
    };
    match tuner::output::propose::propose(&a.dir, a.table.as_deref(), a.dry_run, allow) {
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
            // Folder names are anyone's: escaped for the terminal.
            use tuner::output::printable::printable;
            for r in &p.pooled.records {
                eprintln!("  {}", printable(r));
            }
            for (r, why) in &p.excluded {
                eprintln!("  left out: {}: {}", printable(r), printable(why));
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
        Err(ProposeError::Refused(tuner::analysis::rules::Refusal::Io { path, source }))
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
