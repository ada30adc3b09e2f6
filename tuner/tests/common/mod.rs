//! What the fake-runtime tests (`sweep.rs`, `served.rs`) share: the scratch
//! repository, the fake target's identity, the typed events the fake prints
//! and the tuner runner.
//!
//! Events are built as JSON and parsed back as `runtime::events::Event`
//! before they are written, so they have exactly the runtime's shape.
#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use draftwise_tests::{exclude_other_runtimes, fake_gate};
use runtime::events::Event;
use serde_json::{Value, json};

/// This build's identity (the whole verify path), as the fake reports it.
pub const FINGERPRINT: &str = runtime::policy::KERNEL_FINGERPRINT;
/// The fake target's weight formats.
pub const FORMATS: [&str; 2] = ["q4_1", "q8_0"];
/// The fake host's device class.
const DEVICE: &str = "cpu:x86_64-avx2";

/// This build's verify-path fingerprint for the fake arms' key: `propose`
/// refuses a record measured under another.
pub fn verify_fp() -> String {
    let device = policy::DeviceClass::parse(DEVICE).expect("a device class");
    runtime::policy::verify_fingerprint(&device, Some(&FORMATS.map(String::from)))
}

/// The fake host's CPU class (the arms report this host's, as the runtime does).
pub fn host_class() -> String {
    runtime::policy::host_class_here().to_string()
}

/// `v` as an event line; panics if it is not an `Event`.
pub fn ev(v: Value) -> String {
    let e: Event = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("not an Event ({e}): {v}"));
    e.to_line()
}

/// The build the fake reports (its `build-info` and every `startup`).
fn build_info() -> Value {
    json!({"version": "0.1.0", "git_commit": "abc", "git_dirty": "false", "features": [], "rustc": "rustc 1.95.0",
           "profile": "release", "cuda_archs": [], "kernel_fingerprint": FINGERPRINT})
}

/// The `startup` event of a `runtime generate` arm at `width` (`None`:
/// classic), greedy and 8 tokens; a served arm adjusts it before [`ev`].
pub fn startup(width: Option<usize>) -> Value {
    json!({
        "event": "startup", "schema_version": 2, "build": build_info(),
        "device_class": DEVICE, "kernel_family": "avx2", "kernel_family_forced": false, "threads": 2,
        "target": {"path": "/m.gguf", "format": "gguf", "architecture": "llama",
                   "quant": {"class": "q4_1", "from": "test", "format": "gguf"}, "n_layers": 30, "dim": 576,
                   "vocab": 49152, "context_length": 8192, "weight_formats": FORMATS, "parameters": 134515008},
        "tokenizer": "gguf", "drafter": if width.is_some() { "ngram" } else { "none" },
        "drafter_from": if width.is_some() { "flag" } else { "none" },
        "drafter_settings": width.map(|_| json!({"ngram_min": 3, "ngram_max": 4})),
        "width": width, "width_from": "--draft-width", "host_class": host_class(), "kernel_fingerprint": FINGERPRINT,
        "verify_fingerprint": verify_fp(),
        "exactness_probe": width.map(|w| json!({"width": w, "passed": true, "first_differing_row": null,
            "differing_bytes": 0, "compared_bytes": 100, "kernel_family": "avx2", "threads": 2})),
        "allow_inexact": false,
        "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}, "max_tokens": 8
    })
}

/// The text the fake decodes `ids` to.
pub fn text_of(ids: &[u32]) -> String {
    ids.iter().map(|i| format!("t{i} ")).collect()
}

/// A `completion` event of a 5-token prompt that produced `ids`, decoding
/// at `tok_s` after a 5 ms prefill.
pub fn completion(prompt_id: &str, warmup: bool, repeat: usize, ids: &[u32], tok_s: f64) -> String {
    let text = text_of(ids);
    let decode_tokens = ids.len() - 1;
    let decode_ms = decode_tokens as f64 / tok_s * 1e3;
    ev(json!({
        "event": "completion", "schema_version": 1, "prompt_id": prompt_id, "warmup": warmup, "repeat": repeat,
        "usage": {"prompt_tokens": 5, "completion_tokens": ids.len(), "total_tokens": 5 + ids.len()},
        "finish_reason": "length", "text": text, "token_ids": ids,
        "text_sha256": runtime::events::sha256_hex(text.as_bytes()),
        "token_ids_sha256": runtime::events::token_ids_sha256(ids),
        "prefill_ms": 5.0, "decode_ms": decode_ms, "total_ms": 5.0 + decode_ms,
        "decode_steps": decode_tokens, "decode_tokens": decode_tokens, "decode_tok_per_s": tok_s,
        "prefill_tok_per_s": 1000.0
    }))
}

/// The `speculative_diagnostics` after a completion: `rounds` rounds at
/// `width`, half the drafts accepted. Written as a version-1 event (its
/// old `block_size` name): the tuner still reads what older runtimes wrote.
pub fn diagnostics(prompt_id: &str, warmup: bool, repeat: usize, width: usize, rounds: usize) -> String {
    ev(json!({
        "event": "speculative_diagnostics", "schema_version": 1, "prompt_id": prompt_id, "warmup": warmup,
        "repeat": repeat, "drafter": "ngram", "block_size": width, "rounds": rounds, "plain_steps": 1,
        "drafted": rounds * width, "accepted": rounds * width / 2,
        "acceptance_rate": if rounds > 0 { json!(0.5) } else { json!(null) },
        "accepted_per_position": vec![rounds; width],
        "emitted_per_verify": if rounds > 0 { json!(1.0 + width as f64 / 2.0) } else { json!(null) },
        "draft_ms": 1.0, "verify_ms": 10.0, "accept_ms": 0.1,
        "draft_ms_per_round": 0.5, "verify_ms_per_round": 5.0, "accept_ms_per_round": 0.05
    }))
}

/// A speculative request that declined to classic decoding.
pub fn declined(prompt_id: &str, warmup: bool, repeat: usize, width: usize) -> String {
    ev(json!({
        "event": "declined", "schema_version": 1, "prompt_id": prompt_id, "warmup": warmup, "repeat": repeat,
        "drafter": "ngram", "block_size": width, "reason": "the exactness probe failed at row 2", "probe": null
    }))
}

/// The repository's policy table without its entries (their records are
/// not in the scratch repository): its header, comments and schema version.
pub fn empty_table() -> String {
    let real = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy/draft-block-width.toml"))
        .unwrap();
    match real.find("\n[[entry]]") {
        Some(i) => real[..i + 1].to_string(),
        None => real,
    }
}

/// A scratch repository: an empty policy table, records/, and in `fake/`
/// a fake runtime, its build info, a model file, the prompt set and an
/// injected kernel log; `out` is the sweep's record folder. Each test
/// binary adds its own constructor and helpers.
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub fake: PathBuf,
    pub out: PathBuf,
}

impl Fixture {
    /// The repository with `script` as the fake runtime, `prompts` (JSONL)
    /// as the set and `out` (under the root) as the record folder.
    pub fn scratch(script: &str, prompts: &str, out: &str) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("policy")).unwrap();
        std::fs::create_dir_all(root.join("records")).unwrap();
        std::fs::write(root.join("policy/draft-block-width.toml"), empty_table()).unwrap();
        let fake = root.join("fake");
        std::fs::create_dir_all(&fake).unwrap();
        draftwise_tests::write_executable(&fake.join("runtime"), script);
        std::fs::write(fake.join("build-info.json"), build_info().to_string()).unwrap();
        std::fs::write(fake.join("model.gguf"), b"not really a model").unwrap();
        std::fs::write(fake.join("prompts.jsonl"), prompts).unwrap();
        std::fs::write(fake.join("kmsg"), "6,0,0,-;Linux version 6.8.0\n").unwrap();
        Fixture { out: root.join(out), _tmp: tmp, root, fake }
    }

    /// `--runtime`, `--target` and `--prompts` of the fake, and `--out`.
    pub fn base_args(&self) -> Vec<String> {
        let fake = self.fake.display();
        vec![
            "--runtime".into(),
            format!("{fake}/runtime"),
            "--target".into(),
            format!("{fake}/model.gguf"),
            "--prompts".into(),
            format!("{fake}/prompts.jsonl"),
            "--out".into(),
            self.out.display().to_string(),
            // The fake replays arms in order and has no `bench`: the
            // verify-cost processes and the adaptive arm (which weighs
            // them) run in the real sweep's test.
            "--cost-contexts".into(),
            "none".into(),
            "--adaptive-arm".into(),
            "off".into(),
        ]
    }

    /// `tuner sweep` of the fake over widths 1,2, two rounds of one bracket
    /// arm a side (arms C 1 2 C | C 2 1 C), `bursts` passes, `max_tokens`,
    /// two threads, the fake gate; then `extra` (a flag given twice takes
    /// the last value) and other sessions' runtimes excluded.
    pub fn fake_sweep(&self, bursts: usize, max_tokens: usize, extra: &[&str]) -> Output {
        let (b, m) = (bursts.to_string(), max_tokens.to_string());
        let (b, m) = (b.as_str(), m.as_str());
        let mut args = vec!["sweep".to_string()];
        args.extend(self.base_args());
        args.extend(
            ["--widths", "1,2", "--rounds", "2", "--bursts", b, "--bracket-arms", "1", "--bracket-bursts", b]
                .into_iter()
                // One warm-up pass (not the default): the fixtures emit one,
                // with absurd rates, to show it never reaches a statistic.
                .chain(["--max-tokens", m, "--threads", "2", "--warmup", "1"])
                .map(String::from),
        );
        args.extend(fake_gate().into_iter().chain(extra.iter().copied()).map(String::from));
        args.extend(exclude_other_runtimes());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.tuner(&refs, &[])
    }

    /// Runs the tuner with the fake kernel log. Sweeps in one test binary
    /// run one at a time: the gate watches the host while an arm runs, and
    /// another test's fake runtime is, to it, a foreign model process
    /// (contention).
    pub fn tuner(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        static SWEEPS: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = SWEEPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut c = Command::new(env!("CARGO_BIN_EXE_tuner"));
        c.args(args).env("DRAFTWISE_TUNER_NVRM_LOG", self.fake.join("kmsg"));
        for (k, v) in extra_env {
            c.env(k, v);
        }
        c.output().expect("run tuner")
    }
}

pub fn text(o: &Output) -> String {
    draftwise_tests::output_text(o)
}
