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

use args::{
    CalibrateArgs, CheckArgs, Cli, Command, GateArgs, IdentityArgs, LedgerArgs, LedgerCommand, PredictErrorArgs,
    ProfileArgs, ProposeArgs, SummarizeArgs, SweepArgs, seconds,
};

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
        Command::Profile(a) => run_profile(*a),
        Command::PredictError(a) => run_predict_error(a),
        Command::Calibrate(a) => run_calibrate(*a),
        Command::Check(a) => run_check(*a),
        Command::Ledger(a) => run_ledger(a),
    }
}

fn run_ledger(a: LedgerArgs) -> anyhow::Result<ExitCode> {
    use tuner::output::printable::printable;
    match a.command {
        LedgerCommand::Show { records } => {
            for l in tuner::output::ledger::read(&records)? {
                let ratio = match (l.ratio, l.ratio_interval) {
                    (Some(r), Some([lo, hi])) => format!(" {r:.3} [{lo:.3}, {hi:.3}]"),
                    _ => String::new(),
                };
                // The ledger is a file anyone edits: escaped for the terminal.
                println!(
                    "{} {}{}: {}{ratio}; {}",
                    printable(l.date.as_deref().unwrap_or("undated")),
                    printable(&l.folder),
                    if l.backfilled { " [backfilled]" } else { "" },
                    printable(&l.decision),
                    printable(&l.outcome)
                );
            }
            Ok(ExitCode::from(tuner::exit::PASS))
        }
        LedgerCommand::Backfill { dirs } => {
            let mut code = tuner::exit::PASS;
            for d in dirs {
                match tuner::output::ledger::backfill(&d) {
                    Ok((records, line)) => {
                        tuner::output::ledger::append(&records, &line)?;
                        println!(
                            "backfilled records/{}: {} ({})",
                            printable(&line.folder),
                            printable(&line.decision),
                            line.raw_sha256.as_deref().unwrap_or_default()
                        );
                    }
                    Err(e) => {
                        eprintln!("tuner ledger backfill: refused: {}", printable(&e.to_string()));
                        code = tuner::exit::REFUSED;
                    }
                }
            }
            Ok(ExitCode::from(code))
        }
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
    if let Some(dir) = a.resume.take() {
        let o = tuner::sweep::driver::resume(&dir)?;
        return finish_sweep(&dir, o, json).map(ExitCode::from);
    }
    let counts = a.concurrencies()?;
    let n = counts.len();
    for (i, c) in counts.into_iter().enumerate() {
        let mut opts = SweepArgs { concurrency: c.to_string(), ..a.clone() }.options_at(c)?;
        // A list's later counts get a fresh folder of their own even when
        // an earlier run of the same day took the default name.
        if n > 1 {
            eprintln!("tuner sweep: concurrency {c} ({} of {n})", i + 1);
            opts.out = tuner::sweep::driver::default_out_dir(opts.drafter, c);
        }
        let o = tuner::sweep::driver::start(&opts)?;
        let done = finish_sweep(&opts.out, o, json)?;
        // The first sweep that did not pass ends the list: the host is
        // busy or an arm failed, and the later counts would meet the same.
        if done != tuner::exit::PASS {
            if i + 1 < n {
                eprintln!("tuner sweep: the counts after {c} were not swept");
            }
            return Ok(ExitCode::from(done));
        }
    }
    Ok(ExitCode::from(tuner::exit::PASS))
}

/// A sweep's record, profile and ledger line, and its exit code.
fn finish_sweep(dir: &std::path::Path, outcome: Outcome, json: bool) -> anyhow::Result<u8> {
    let dir = dir.to_path_buf();
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
            if matches!(outcome, Outcome::Complete) && s.concurrency > 1 {
                eprintln!(
                    "next: `tuner propose {}` writes the bucket entry for {} sequences at once (or says why it \
                     cannot)",
                    dir.display(),
                    s.concurrency
                );
            } else if matches!(outcome, Outcome::Complete) {
                eprintln!(
                    "next: `tuner propose {}` writes the policy entry from this record (or says why it cannot)",
                    dir.display()
                );
            }
        }
        Err(e) => eprintln!("tuner sweep: no record written: {e:#}"),
    }
    // A complete sweep's acceptance profile, made here when none is
    // committed (it decodes, seconds to a minute): what its predictions and
    // `tuner predict-error` replay (docs/predictions.md).
    if matches!(outcome, Outcome::Complete) && summary.is_ok() {
        match sweep_profile(&dir) {
            Ok(Some(path)) => eprintln!("profile: {} (commit it with the record)", path.display()),
            Ok(None) => {}
            Err(e) => eprintln!("tuner sweep: no acceptance profile made: {e:#}"),
        }
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
    Ok(match outcome {
        Outcome::Complete => {
            summary?;
            tuner::exit::PASS
        }
        Outcome::Halted(HaltKind::GateTimeout | HaltKind::Contention) => tuner::exit::WAIT,
        Outcome::Halted(HaltKind::Gate | HaltKind::NvrmBudget) => tuner::exit::HALT,
        Outcome::Halted(HaltKind::ArmFailed) => tuner::exit::ERROR,
    })
}

/// The profile a sweep's record needs, when `profiles/` (beside its
/// `records/`) has none: made and written there; `None` when one exists.
fn sweep_profile(dir: &std::path::Path) -> anyhow::Result<Option<std::path::PathBuf>> {
    let Some((records, _)) = tuner::output::ledger::records_of(dir) else { return Ok(None) };
    let root = records.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let req = tuner::sweep::profile::request_for_record(dir, threads)?;
    let want = tuner::data::profile::Wanted {
        model_sha256: tuner::host::identity::sha256_file(&req.target).map_err(|e| anyhow::anyhow!("{e}"))?,
        drafter: req.drafter,
        settings: req.settings.clone(),
        prompts_sha256: runtime::events::sha256_hex(req.prompts_text.as_bytes()),
        max_tokens: req.max_tokens,
    };
    if tuner::data::profile::find(&root, &want).is_ok() {
        return Ok(None);
    }
    let p = tuner::sweep::profile::make(&req, &mut |_, _, _| {})?;
    let path = root.join(tuner::data::profile::PROFILES_DIR).join(tuner::data::profile::file_name(&p.header));
    std::fs::create_dir_all(path.parent().unwrap_or(&root))?;
    std::fs::write(&path, p.to_text())?;
    Ok(Some(path))
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

fn run_profile(a: ProfileArgs) -> anyhow::Result<ExitCode> {
    let out = a.out.clone();
    let req = a.request()?;
    let t0 = std::time::Instant::now();
    let p = tuner::sweep::profile::make(&req, &mut |i, n, t| {
        eprintln!("tuner profile: {}/{n} {} ({}): {} tokens", i + 1, t.id, t.task, t.out);
    })?;
    let path = out.unwrap_or_else(|| {
        std::path::Path::new(tuner::data::profile::PROFILES_DIR).join(tuner::data::profile::file_name(&p.header))
    });
    if let Some(parent) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, p.to_text())?;
    println!("wrote {} ({} prompts, {:.1} s)", path.display(), p.traces.len(), t0.elapsed().as_secs_f64());
    Ok(ExitCode::from(tuner::exit::PASS))
}

fn run_predict_error(a: PredictErrorArgs) -> anyhow::Result<ExitCode> {
    let rows = tuner::analysis::predict_error::table(&a.root).map_err(anyhow::Error::msg)?;
    if a.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", tuner::analysis::predict_error::markdown(&rows));
    }
    eprintln!("tuner predict-error: {}", tuner::analysis::predict_error::summary_line(&rows));
    Ok(ExitCode::from(tuner::exit::PASS))
}

/// A proposal that failed: a file that could not be read or written
/// (missing, no permission, a full disk) is an error (exit 1), not a
/// verdict on the record; one read but refused for its content (too large,
/// not UTF-8) is a refusal (exit 5), as is every rule's refusal.
fn propose_failed(e: tuner::output::propose::ProposeError) -> anyhow::Result<ExitCode> {
    use tuner::output::propose::ProposeError;
    match e {
        ProposeError::Refused(tuner::analysis::rules::Refusal::Io { path, source })
            if source.kind() != std::io::ErrorKind::InvalidData =>
        {
            eprintln!("tuner propose: error: {}: {source}", path.display());
            Ok(ExitCode::from(tuner::exit::ERROR))
        }
        ProposeError::Refused(r) => {
            eprintln!("tuner propose: refused: {r}");
            Ok(ExitCode::from(tuner::exit::REFUSED))
        }
        e => Err(e.into()),
    }
}

/// `tuner propose` of a calibration record: the predicted entry.
fn propose_predicted(a: &ProposeArgs, allow: tuner::analysis::rules::Allow) -> anyhow::Result<ExitCode> {
    match tuner::output::predicted::propose(&a.dir, a.table.as_deref(), a.dry_run, allow) {
        Ok(p) => {
            for o in &p.overridden {
                eprintln!("tuner propose: warning: overridden by {o}");
            }
            if let Some(r) = &p.replaced {
                eprintln!("tuner propose: the predicted entry {r}");
            }
            eprintln!("tuner propose: predicted: {}", p.why);
            print!("{}", p.diff);
            if p.written {
                println!("wrote {}", p.table.display());
            } else {
                println!("dry run: {} not written", p.table.display());
            }
            Ok(ExitCode::from(tuner::exit::PASS))
        }
        Err(e) => propose_failed(e),
    }
}

fn run_check(a: CheckArgs) -> anyhow::Result<ExitCode> {
    if a.all {
        return run_check_all(&a);
    }
    let (runtime, target, drafter, drafter_model) = a.resolved()?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let which = Which { precision: a.precision()?, concurrency: a.concurrency()?, expected: None };
    check_one(&a, runtime, target, drafter, drafter_model, threads, &which, a.out.clone()).map(ExitCode::from)
}

/// Which entry of a model, drafter and thread count a check addresses:
/// the entry's activation precision (`runtime --precision`; `None`, the
/// runtime's default) and its bucket of concurrent sequences (1: the idle
/// entry, measured one sequence at a time). `--all` also gives the entry's
/// whole key: a check that would key its runs otherwise (the runtime here
/// classifies the model, the precision or the host differently) is refused,
/// never run on a neighbouring entry.
struct Which {
    precision: Option<policy::Precision>,
    concurrency: usize,
    expected: Option<policy::PolicyKey>,
}

/// `tuner check --all`: every entry of this host class and device class
/// whose model (and draft model) is in the model cache, one after another;
/// the rest named with why. Exit 0 when every entry checked holds or is
/// fresh, else the worst code (5 a refusal, 1 an error).
fn run_check_all(a: &CheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = match &a.runtime {
        Some(p) => p.clone(),
        None => tuner::host::identity::default_runtime_path().map_err(anyhow::Error::msg)?,
    };
    let table_path = match &a.table {
        Some(p) => p.clone(),
        None => tuner::output::propose::find_table(&std::env::current_dir()?)?,
    };
    let text = tuner::output::propose::read_table(&table_path.canonicalize()?).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tbl = policy::table::compile(policy::TABLE_FILE, &text, policy::table::RecordCheck::Skip)?;
    let host = runtime::policy::host_class_here();
    let device = kernels::dispatch::selected().map_or_else(|_| "unknown".to_string(), |s| s.family.device_class());
    let cache = runtime::fetch::default_cache_dir()?;
    let root = table_path
        .canonicalize()?
        .parent()
        .and_then(std::path::Path::parent)
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let mut worst = tuner::exit::PASS;
    let mut said = Vec::new();
    for e in tbl.entries.iter().filter(|e| e.key.host.as_str() == host.as_str() && e.key.device.as_str() == device) {
        // A fresh entry needs no check; a stale one that cannot be checked
        // here fails the run (the fleet's gate), named.
        let fresh = e.fresh_for(&runtime::policy::verify_fingerprint(&e.key.device, Some(&e.weight_formats)));
        let skip = |why: String, said: &mut Vec<String>, worst: &mut u8| {
            said.push(format!("{}: {why}", e.key));
            if !fresh && *worst == tuner::exit::PASS {
                *worst = tuner::exit::REFUSED;
            }
        };
        let target = cache.join(&e.model.file);
        let ok_sha = tuner::host::identity::sha256_file(&target).is_ok_and(|h| h == e.model.sha256);
        if !ok_sha {
            said.push(format!(
                "{}: skipped: {} (sha256 {}) is not in the model cache; `runtime fetch-model`",
                e.key,
                e.model.file,
                &e.model.sha256[..12]
            ));
            continue;
        }
        // A draft model is named by its record's settings.
        let drafter_model = match tuner::data::raw::read_raw(&root.join(&e.record).join("raw.jsonl")) {
            Ok(raw) => raw.header.settings.drafter_model.and_then(|p| p.file_name().map(|n| cache.join(n))),
            Err(_) => None,
        };
        if e.key.drafter == policy::DrafterKind::DraftModel && drafter_model.is_none() {
            skip("skipped: its record names no draft model this host has".into(), &mut said, &mut worst);
            continue;
        }
        let threads = e.key.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        eprintln!("tuner check --all: {}", e.key);
        let which = Which { precision: e.key.precision, concurrency: e.key.concurrency, expected: Some(e.key.clone()) };
        // One entry's error (a record unreadable, a runtime that fails)
        // is named and the others are still checked.
        match check_one(a, runtime.clone(), target, e.key.drafter, drafter_model, threads, &which, None) {
            Ok(code) => {
                said.push(format!("{}: exit {code}", e.key));
                if code != tuner::exit::PASS && worst == tuner::exit::PASS {
                    worst = tuner::exit::REFUSED;
                }
            }
            Err(err) => {
                eprintln!("tuner check --all: {}: error: {err:#}", e.key);
                said.push(format!("{}: error: {err:#}", e.key));
                worst = 1;
            }
        }
    }
    if said.is_empty() {
        println!("no entry of this host class ({host}) and device class ({device}) in the table");
    }
    for l in said {
        println!("{l}");
    }
    Ok(ExitCode::from(worst))
}

/// One entry's check (the key of `target`, `drafter`, `threads` and `which` here).
#[allow(clippy::too_many_arguments)]
fn check_one(
    a: &CheckArgs,
    runtime: std::path::PathBuf,
    target: std::path::PathBuf,
    drafter: policy::DrafterKind,
    drafter_model: Option<std::path::PathBuf>,
    threads: usize,
    which: &Which,
    out: Option<std::path::PathBuf>,
) -> anyhow::Result<u8> {
    use tuner::analysis::rules::Refusal;
    let precision = which.precision.map(|p| p.as_str());
    let explained = tuner::sweep::calibrate::explain(&runtime, &target, drafter, threads, precision)?;
    let mut key = explained.key(drafter)?;
    key.concurrency = which.concurrency;
    if let Some(want) = &which.expected
        && *want != key
    {
        eprintln!(
            "tuner check: refused: the entry is for {want}, but this runtime keys the same model, drafter, \
             threads and precision as {key}; the entry is not checked"
        );
        return Ok(tuner::exit::REFUSED);
    }
    if let (Some(want), Some(got)) = (which.precision, key.precision)
        && want != got
    {
        eprintln!(
            "tuner check: refused: asked for the entry at {want} activations, but this runtime keys the run at {got} \
             (it does not take --precision?); nothing is checked"
        );
        return Ok(tuner::exit::REFUSED);
    }
    let Some(fp) = explained.verify_fingerprint.clone() else {
        anyhow::bail!("the runtime gave no verify-path fingerprint for {key}");
    };
    let table_path = match &a.table {
        Some(p) => p.clone(),
        None => tuner::output::propose::find_table(&std::env::current_dir()?)?,
    };
    let table_abs = table_path.canonicalize()?;
    let root =
        table_abs.parent().and_then(std::path::Path::parent).map(std::path::Path::to_path_buf).unwrap_or_default();
    let old = tuner::output::propose::read_table(&table_abs).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tbl = policy::table::compile(policy::TABLE_FILE, &old, policy::table::RecordCheck::Skip)?;
    let Some(entry) = tbl.exact(&key).cloned() else {
        if key.concurrency > 1 {
            anyhow::bail!(
                "the table has no entry for {key}: `tuner sweep --served --concurrency {}` measures one",
                key.concurrency
            );
        }
        anyhow::bail!("the table has no entry for {key}: `tuner calibrate` predicts one, `tuner sweep` measures one");
    };
    if entry.fresh_for(&fp) && !a.force {
        println!(
            "the entry for {key} is fresh for this build ({}; fingerprint {fp}): nothing to check (--force checks it anyway)",
            entry.basis_words(&fp)
        );
        return Ok(tuner::exit::PASS);
    }
    let drafting = entry.drafting;
    if entry.verify_cost.is_empty() {
        eprintln!(
            "tuner check: refused: the entry for {key} ({}) carries no verify-cost curve to compare this build's \
             with (it predates them); re-measure it with `tuner sweep`",
            entry.record
        );
        return Ok(tuner::exit::REFUSED);
    }
    // The entry's workload: its prompt set (by sha256) and its token limit.
    let (prompts, text) = match &a.prompts {
        Some(p) => (Some(p.clone()), runtime::limits::read_prompt_file(p)?),
        None => (None, tuner::sweep::driver::DEFAULT_PROMPTS_JSONL.to_string()),
    };
    if runtime::events::sha256_hex(text.as_bytes()) != entry.prompts.sha256 {
        anyhow::bail!(
            "the entry was measured on {} (sha256 {}); give that set with --prompts",
            entry.prompts.name,
            entry.prompts.sha256
        );
    }
    let recorded = tuner::data::raw::read_raw(&root.join(&entry.record).join("raw.jsonl")).ok();
    let max_tokens = match &recorded {
        Some(raw) => raw.header.settings.design.max_tokens,
        None => tuner::analysis::calibration::read(&root.join(&entry.record))
            .map(|c| c.max_tokens)
            .unwrap_or(tuner::data::plan::DEFAULT_MAX_TOKENS),
    };
    // The entry's load: a served sweep's record is checked served, with
    // its record's clients and timeouts. A bucket is measured served or not
    // at all: one whose record cannot be read, or was not served, is not
    // checked (its interval is of another statistic than a check's).
    let served = recorded.as_ref().and_then(|r| r.header.settings.served.clone());
    if key.concurrency > 1 && served.is_none() {
        let why = if recorded.is_some() { "was not a served sweep" } else { "cannot be read" };
        eprintln!(
            "tuner check: refused: the entry for {key} is a bucket, but its record ({}) {why}: a bucket is checked \
             served as its sweep ran; re-measure it with `tuner sweep --served --concurrency {}`",
            entry.record, key.concurrency
        );
        return Ok(tuner::exit::REFUSED);
    }
    if let Some(sv) = &served
        && sv.concurrency != key.concurrency
    {
        eprintln!(
            "tuner check: refused: the entry for {key} names a record ({}) served at {} client(s), not {}",
            entry.record, sv.concurrency, key.concurrency
        );
        return Ok(tuner::exit::REFUSED);
    }
    let out = match out {
        Some(o) => o,
        None => tuner::sweep::calibrate::out_dir_with(drafter, &target, "check"),
    };
    let opts = tuner::sweep::driver::SweepOptions {
        target,
        drafter,
        drafter_model,
        drafter_settings: entry.drafter_settings.clone(),
        // The entry's own precision: a check measures what the entry did.
        precision: entry.key.precision.map(|p| p.as_str().to_string()),
        design: tuner::data::raw::Design {
            widths: tuner::analysis::check::arms_of(drafting),
            rounds: a.rounds,
            bursts: 1,
            bracket_arms: a.bracket_arms,
            bracket_bursts: Some(1),
            auto_rounds: None,
            warmup: 0,
            max_tokens,
            threads,
            cost_contexts: entry.verify_cost.iter().map(|c| c.context).collect(),
        },
        prompts,
        out: out.clone(),
        runtime,
        gate: a.gate.clone().config(),
        gate_wait: seconds("--gate-wait", a.gate_wait)?,
        gate_interval: seconds("--gate-interval", a.gate_interval)?,
        served,
    };
    // A re-blessing rests on a host as quiet as a sweep's: no looser gate.
    if let Err(r) = tuner::analysis::rules::plan::check_gate(&opts.gate, false)
        && !a.dry_run
    {
        eprintln!(
            "tuner check: refused: {r} (a check that re-blesses an entry runs with the default gate; --dry-run judges under a looser one)"
        );
        return Ok(tuner::exit::REFUSED);
    }
    let t0 = std::time::Instant::now();
    let outcome = tuner::sweep::driver::start(&opts)?;
    let summary = tuner::analysis::summarize::summarize_dir(&out).and_then(|(raw, s)| {
        tuner::output::record::write_all(&out, &raw, &s)?;
        Ok(s)
    });
    if let Some((records, line)) = tuner::output::ledger::for_sweep(
        &out,
        format!("check: {outcome:?}"),
        summary.as_ref().map_err(|e| format!("{e:#}")),
    ) && let Err(e) = tuner::output::ledger::append(&records, &line)
    {
        eprintln!("tuner check: the ledger line was not written: {e}");
    }
    let s = summary?;
    let verdict = tuner::analysis::check::judge(&entry, &s);
    std::fs::write(out.join("check.json"), serde_json::to_string_pretty(&verdict)? + "\n")?;
    let took = t0.elapsed().as_secs_f64();
    println!("record: {}", out.join("record.md").display());
    println!(
        "  verify cost: {} point(s), mean deviation {} from the entry's curve; {}: {} {}",
        verdict.curve_points,
        verdict.curve_mean_log.map_or("-".into(), |m| format!("{:.1}%", (m.exp() - 1.0) * 100.0)),
        SpeculativeArmName(drafting),
        verdict.ratio.map_or("-".into(), |r| format!("{r:.3}")),
        verdict.interval.map_or(String::new(), |(l, h)| format!(
            "[{l:.3}, {h:.3}] (entry: [{:.3}, {:.3}])",
            entry.ratio_interval[0], entry.ratio_interval[1]
        )),
    );
    println!("  {took:.0} s");
    if !verdict.holds() {
        for f in &verdict.failures {
            eprintln!("tuner check: refused: {f}");
        }
        eprintln!("tuner check: the entry for {key} stays unused on this build; re-measure it with `tuner sweep`");
        return Ok(tuner::exit::REFUSED);
    }
    let record = match out.canonicalize()?.strip_prefix(&root) {
        Ok(rel) if rel.starts_with("records") => rel.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/"),
        // A dry run elsewhere still shows the edit (under a placeholder name).
        _ if a.dry_run => "records/(dry-run)".to_string(),
        _ => {
            let r = Refusal::NotUnderRecords { dir: out.display().to_string(), root: root.display().to_string() };
            eprintln!("tuner check: holds, but {r}");
            return Ok(tuner::exit::REFUSED);
        }
    };
    let line = tuner::output::check::check_line(&fp, &record, &s.date);
    // The check ran for minutes: the table is read again under its lock
    // (`table_lock`), so another run's write in the meantime is kept, and
    // the line goes on the entry the check measured or nowhere.
    use tuner::output::table_lock::{LOCK_WAIT, TableLock, write_table};
    let lock = if a.dry_run { None } else { Some(TableLock::acquire(&table_abs, LOCK_WAIT)?) };
    let old = match &lock {
        Some(_) => tuner::output::propose::read_table(&table_abs).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => old,
    };
    let now = policy::table::compile(policy::TABLE_FILE, &old, policy::table::RecordCheck::Skip)?;
    if now.exact(&key) != Some(&entry) {
        anyhow::bail!(
            "the entry for {key} changed in {} while the check ran: run `tuner check` again",
            table_abs.display()
        );
    }
    let new = tuner::output::check::set_check(&old, &key, &line)?;
    let records = if a.dry_run { policy::table::RecordCheck::Skip } else { policy::table::RecordCheck::Under(&root) };
    policy::table::compile(policy::TABLE_FILE, &new, records)
        .map_err(|e| anyhow::anyhow!("the checked table does not compile: {e}"))?;
    print!("{}", tuner::output::propose::diff(&old, &new, policy::TABLE_FILE));
    if a.dry_run {
        println!("dry run: {} not written", table_abs.display());
    } else if let Some(lock) = &lock {
        write_table(lock, &table_abs, &new)?;
        println!("wrote {}: the entry holds on this build (fingerprint {fp})", table_abs.display());
    }
    Ok(tuner::exit::PASS)
}

/// An entry's drafting as a check names it (`None`: off, judged by the
/// check's best arm).
struct SpeculativeArmName(Option<policy::Drafting>);

impl std::fmt::Display for SpeculativeArmName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(policy::Drafting::Fixed(w)) => write!(f, "width {w}"),
            Some(policy::Drafting::Adaptive { max }) => write!(f, "the adaptive draft length (up to {max})"),
            None => write!(f, "off (the check's best arm)"),
        }
    }
}

fn run_calibrate(a: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let o = a.options()?;
    let c = tuner::sweep::calibrate::run(&o, &mut |m| eprintln!("tuner calibrate: {m}"))?;
    std::fs::write(o.out.join("record.md"), tuner::output::predicted::record_markdown(&c))?;
    println!("record: {}", o.out.join("record.md").display());
    println!("  {}", c.prediction.why);
    println!("  wall time {:.1} s ({} cost process(es) a context)", c.wall_s, c.processes.len());
    match tuner::output::ledger::records_of(&o.out) {
        Some((records, folder)) => {
            let sha = tuner::host::identity::sha256_file(&o.out.join(tuner::analysis::calibration::CALIBRATION_FILE))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let line = tuner::output::predicted::ledger_line(&c, &folder, sha);
            match tuner::output::ledger::append(&records, &line) {
                Ok(()) => eprintln!("ledger: {}", records.join(tuner::output::ledger::LEDGER_FILE).display()),
                Err(e) => eprintln!("tuner calibrate: the ledger line was not written: {e}"),
            }
        }
        None => {
            eprintln!("tuner calibrate: {} is not under a records/ folder: no ledger line written", o.out.display())
        }
    }
    eprintln!("next: `tuner propose {}` writes the predicted entry (or says why it cannot)", o.out.display());
    Ok(ExitCode::from(tuner::exit::PASS))
}

fn run_propose(a: ProposeArgs) -> anyhow::Result<ExitCode> {
    use tuner::analysis::rules::Allow;
    let allow = Allow {
        dirty: a.allow_dirty,
        stale_fingerprint: a.allow_stale_fingerprint,
        older: a.allow_older,
        loose_gate: a.allow_loose_gate,
        weak_plan: a.allow_weak_plan,
    };
    if tuner::analysis::calibration::is_calibration(&a.dir) {
        return propose_predicted(&a, allow);
    }
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
            for l in &p.excluded {
                eprintln!("  left out: {}: {}", printable(&l.record), printable(&l.why));
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
        Err(e) => propose_failed(e),
    }
}
