//! The policy table as a file that `tuner propose` runs share: every run
//! that exits 0 has its entry in the table, however many run at once, and a
//! table that is not a regular file is refused, not read.
//!
//! The records are copies of the committed record `SCRATCH_RECORD` with the
//! startup fields this build's runtime reports (as `tests/propose.rs` gives
//! them), each at its own thread count: one key per record.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use policy::table::{self, RecordCheck};
use policy::{DeviceClass, TABLE_FILE};
use serde_json::Value;

const SCRATCH_RECORD: &str = "records/2026-12-02-cpu-x86_64-avx512vnni-ngram-3";
const HOST: &str = "amd-zen4";
const PARAMS: u64 = 134_515_008;
const FORMATS: [&str; 2] = ["q4_1", "q8_0"];
const DEVICE: &str = "cpu:x86_64-avx512vnni";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// This build's verify-path fingerprint for the record's key.
fn current() -> String {
    let formats: Vec<String> = FORMATS.iter().map(|f| f.to_string()).collect();
    runtime::policy::verify_fingerprint(&DeviceClass::parse(DEVICE).unwrap(), Some(&formats))
}

/// A line for `dir` in its records/ledger.jsonl, hashing its raw.jsonl as
/// it is now (as `tuner sweep` writes one when a sweep ends): `propose`
/// pools only records the ledger vouches for.
fn vouch(dir: &Path) {
    let (records, line) =
        tuner::output::ledger::for_sweep(dir, "complete".into(), Err("a test's copy of a record".into())).unwrap();
    tuner::output::ledger::append(&records, &line).unwrap();
}

/// A repository root holding `records/` and a table without entries.
struct Root {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Root {
    fn new() -> Root {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("records")).unwrap();
        std::fs::create_dir_all(root.join("policy")).unwrap();
        std::fs::write(root.join(TABLE_FILE), "# scratch table\nschema_version = 3\n").unwrap();
        Root { _tmp: tmp, root }
    }

    /// `records/<name>`: the scratch record as this build reports it, every
    /// arm at `threads` threads (its key's thread count).
    fn record(&self, name: &str, threads: usize) -> PathBuf {
        let dir = self.root.join("records").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let raw = std::fs::read_to_string(repo().join(SCRATCH_RECORD).join("raw.jsonl")).unwrap();
        let fp = current();
        let mut out = String::new();
        for l in raw.lines() {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["kind"] == "startup" {
                let st = &mut v["startup"];
                st["build"]["git_dirty"] = "false".into();
                st["verify_fingerprint"] = fp.as_str().into();
                st["target"]["weight_formats"] = serde_json::json!(FORMATS);
                st["target"]["quant"]["format"] = "gguf".into();
                st["target"]["parameters"] = PARAMS.into();
                st["host_class"] = HOST.into();
                st["threads"] = threads.into();
                let speculative = st["drafter"] != "none";
                st["drafter_from"] = if speculative { "flag" } else { "none" }.into();
                st["drafter_settings"] =
                    if speculative { serde_json::json!({"ngram_min": 3, "ngram_max": 4}) } else { Value::Null };
            }
            out.push_str(&v.to_string());
            out.push('\n');
        }
        std::fs::write(dir.join("raw.jsonl"), out).unwrap();
        vouch(&dir);
        dir
    }

    fn table(&self) -> String {
        std::fs::read_to_string(self.root.join(TABLE_FILE)).unwrap()
    }
}

/// `tuner propose DIR` with `flags` and `--allow-weak-plan` (the scratch
/// record was swept before the plan rules; `tests/propose.rs` tests them).
fn propose(dir: &Path, flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tuner"))
        .arg("propose")
        .arg(dir)
        .arg("--allow-weak-plan")
        .args(flags)
        .output()
        .expect("run tuner")
}

fn text(o: &Output) -> String {
    draftwise_tests::output_text(o)
}

#[test]
fn a_table_that_is_a_fifo_is_refused_without_waiting_for_a_writer() {
    let r = Root::new();
    let dir = r.record("r", 2);
    let table = r.root.join(TABLE_FILE);
    std::fs::remove_file(&table).unwrap();
    // A FIFO no one writes: opening it for reading would wait for a writer.
    let c = std::ffi::CString::new(table.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let o = propose(&dir, &["--dry-run", "--table", table.to_str().unwrap()]);
    // A file that cannot be read is an error (exit 1), not a refusal.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("a FIFO"), "{}", text(&o));
}

#[test]
fn eight_proposals_at_once_for_eight_keys_each_leave_their_entry() {
    // Eight records, one key each (threads 1..=8), proposed by eight
    // processes started together: every one that exits 0 must find its
    // entry in the table (each used to write the table it had read, and the
    // last rename won).
    let r = Root::new();
    let dirs: Vec<PathBuf> = (1..=8).map(|t| r.record(&format!("r{t}"), t)).collect();
    let children: Vec<_> = dirs
        .iter()
        .map(|d| {
            Command::new(env!("CARGO_BIN_EXE_tuner"))
                .arg("propose")
                .arg(d)
                .arg("--allow-weak-plan")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run tuner")
        })
        .collect();
    let outputs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for o in &outputs {
        assert!(o.status.success(), "{}", text(o));
    }
    let t = table::compile(TABLE_FILE, &r.table(), RecordCheck::Under(&r.root)).unwrap();
    let mut threads: Vec<Option<usize>> = t.entries.iter().map(|e| e.key.threads).collect();
    threads.sort();
    assert_eq!(threads, (1..=8).map(Some).collect::<Vec<_>>(), "{}", r.table());
    let records: std::collections::BTreeSet<&str> = t.entries.iter().map(|e| e.record.as_str()).collect();
    assert_eq!(records.len(), 8, "{records:?}");
    assert!(!r.root.join("policy/draft-block-width.toml.lock").exists(), "the lock file is removed");
}
