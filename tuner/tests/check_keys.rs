//! Which entry `tuner check` addresses, through a fake runtime that only
//! answers `policy explain`: one model has an entry per activation
//! precision and per bucket of concurrent sequences, and `check --all`
//! (a fleet's nightly job) must check each of them, not the idle int8
//! entry three times. It once did: the key came from `policy explain` at
//! the runtime's default precision and one sequence, so a stale int16
//! entry was reported "exit 0" while it stayed stale. A runtime that keys
//! the entry otherwise is refused, never checked in its place.
mod common;

use std::process::Output;

use common::{Fixture, empty_table, text};

const FORMATS: [&str; 2] = ["q4_k", "q6_k"];

/// Answers `policy explain` with `explain.json`, its `@P@` the
/// `--precision` given (int8 when none, or always when `ignore-precision`
/// exists), or fails at a precision P where `fail-P` exists; logs every
/// call; anything else fails.
const SCRIPT: &str = r#"#!/bin/sh
D="$(dirname "$0")"
echo "$@" >> "$D/calls"
P=int8
prev=""
for a in "$@"; do
  if [ "$prev" = "--precision" ] && [ ! -f "$D/ignore-precision" ]; then P="$a"; fi
  prev="$a"
done
if [ -f "$D/fail-$P" ]; then echo "fake runtime: cannot explain at $P" >&2; exit 1; fi
if [ "$1" = "policy" ] && [ "$2" = "explain" ]; then sed "s/@P@/$P/" "$D/explain.json"; exit 0; fi
echo "fake runtime: unexpected call: $*" >&2
exit 1
"#;

struct Scene {
    f: Fixture,
    cache: std::path::PathBuf,
    /// The entries' keys as the table prints them: int8 idle, int16 idle,
    /// int8 at four sequences.
    keys: Vec<String>,
}

fn device() -> String {
    kernels::dispatch::selected().expect("a kernel family").family.device_class()
}

/// This build's verify-path fingerprint for the fake target's formats on `device`.
fn fingerprint(device: &str) -> String {
    runtime::policy::verify_fingerprint(&policy::DeviceClass::parse(device).unwrap(), Some(&FORMATS.map(String::from)))
}

fn entry(precision: &str, concurrency: usize, sha: &str) -> String {
    let device = device();
    let host = common::host_class();
    let fp = fingerprint(&device);
    let bucket = if concurrency > 1 { format!("concurrency = {concurrency}\n") } else { String::new() };
    format!(
        r#"
[[entry]]
drafter = "ngram"
device_class = "{device}"
host_class = "{host}"
target_quant = "q4_k"
target_quant_format = "gguf"
threads = 2
{bucket}precision = "{precision}"
model = {{ architecture = "qwen2", parameters = 1777088000, file = "m.gguf", sha256 = "{sha}" }}
prompts = {{ name = "prompts/sweep.jsonl", sha256 = "c8e867dabef149addfc929ffbfd5bd6ffec17e7bc09d1164bc092ae0587cd931" }}
drafter_settings = {{ ngram_min = 3, ngram_max = 4 }}
weight_formats = ["q4_k", "q6_k"]
width = 3
record = "records/x-{precision}-c{concurrency}"
pooled = ["records/x-{precision}-c{concurrency}"]
date = 2026-12-07
ratio = 1.15
ratio_interval = [1.1, 1.2]
emitted_per_verify = 2.0
host = "a host"
verify_fingerprint = "{fp}"
verify_cost = [{{ context = 64, relative = [1.0, 1.1, 1.2, 1.3] }}]
"#
    )
}

fn scene() -> Scene {
    let f = Fixture::scratch(SCRIPT, "", "records/check");
    let cache = f.root.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("m.gguf"), b"a model, as far as the cache goes").unwrap();
    let sha = tuner::host::identity::sha256_file(&cache.join("m.gguf")).unwrap();
    let device = device();
    let fp = fingerprint(&device);
    let explain = serde_json::json!({
        "target_quant": {"class": "q4_k", "format": "gguf"},
        "weight_formats": FORMATS, "threads": 2, "precision": "@P@",
        "model": {"architecture": "qwen2", "parameters": 1777088000u64},
        "verify_fingerprint": fp, "device_class": device, "host_class": common::host_class(),
    });
    std::fs::write(f.fake.join("explain.json"), explain.to_string() + "\n").unwrap();
    let table = empty_table() + &entry("int8", 1, &sha) + &entry("int16", 1, &sha) + &entry("int8", 4, &sha);
    std::fs::write(f.root.join("policy/draft-block-width.toml"), &table).unwrap();
    let t = policy::table::compile(policy::TABLE_FILE, &table, policy::table::RecordCheck::Skip).unwrap();
    let keys = t.entries.iter().map(|e| e.key.to_string()).collect();
    Scene { f, cache, keys }
}

impl Scene {
    fn check(&self, extra: &[&str]) -> Output {
        let table = self.f.root.join("policy/draft-block-width.toml");
        let runtime = self.f.fake.join("runtime");
        let mut args = vec!["check", "--runtime", runtime.to_str().unwrap(), "--table", table.to_str().unwrap()];
        args.extend(extra);
        self.f.tuner(&args, &[("DRAFTWISE_CACHE_DIR", self.cache.to_str().unwrap())])
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.f.fake.join("calls")).unwrap_or_default()
    }
}

fn fresh_line(key: &str) -> String {
    format!("the entry for {key} is fresh for this build")
}

#[test]
fn check_all_addresses_each_entry_by_its_precision_and_bucket() {
    let s = scene();
    assert_eq!(s.keys.len(), 3);
    assert!(s.keys[1].contains("(int16 activations)") && s.keys[2].contains("4 sequences at once"), "{:?}", s.keys);
    let o = s.check(&["--all"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for k in &s.keys {
        assert!(out.contains(&fresh_line(k)), "no line for {k}:\n{out}");
        assert!(out.contains(&format!("{k}: exit 0")), "{out}");
    }
    // The runtime was asked at each entry's own precision.
    let calls = s.calls();
    assert_eq!(calls.matches("--precision int16").count(), 1, "{calls}");
    assert_eq!(calls.matches("--precision int8").count(), 2, "{calls}");
}

#[test]
fn a_runtime_that_keys_an_entry_otherwise_is_refused_not_checked_in_its_place() {
    let s = scene();
    std::fs::write(s.f.fake.join("ignore-precision"), "").unwrap();
    let o = s.check(&["--all"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(5), "{out}");
    assert!(
        out.contains(&format!("tuner check: refused: the entry is for {}, but this runtime keys", s.keys[1])),
        "{out}"
    );
    assert!(out.contains(&format!("{}: exit 5", s.keys[1])), "{out}");
    // The int8 entries still hold; the int16 one was never reported fresh.
    assert!(!out.contains(&fresh_line(&s.keys[1])), "{out}");
    assert!(out.contains(&format!("{}: exit 0", s.keys[0])), "{out}");
}

#[test]
fn one_check_takes_the_precision_and_the_bucket_as_flags_bounded() {
    let s = scene();
    let model = s.cache.join("m.gguf");
    let m = model.to_str().unwrap();
    for (flags, key) in
        [(&["--precision", "int16"][..], &s.keys[1]), (&["--concurrency", "4"][..], &s.keys[2]), (&[][..], &s.keys[0])]
    {
        let mut a = vec!["-m", m, "-t", "2"];
        a.extend(flags);
        let o = s.check(&a);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{flags:?}: {out}");
        assert!(out.contains(&fresh_line(key)), "{flags:?}: {out}");
    }
    for (flags, says) in [
        (&["--concurrency", "0"][..], "--concurrency 0 is out of range 1..=64"),
        (&["--concurrency", "65"][..], "--concurrency 65 is out of range 1..=64"),
        (&["--precision", "int4"][..], "--precision:"),
    ] {
        let mut a = vec!["-m", m, "-t", "2"];
        a.extend(flags);
        let o = s.check(&a);
        let out = text(&o);
        assert_ne!(o.status.code(), Some(0), "{flags:?}: {out}");
        assert!(out.contains(says), "{flags:?}: {out}");
    }
    // --all takes both from each entry: giving them is an error, before
    // the runtime is asked anything.
    let before = s.calls().lines().count();
    let o = s.check(&["--all", "--precision", "int16"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(s.calls().lines().count(), before, "{}", s.calls());
}

#[test]
fn a_runtime_that_ignores_the_precision_asked_for_is_refused_in_one_check_too() {
    let s = scene();
    std::fs::write(s.f.fake.join("ignore-precision"), "").unwrap();
    let m = s.cache.join("m.gguf");
    let o = s.check(&["-m", m.to_str().unwrap(), "-t", "2", "--precision", "int16"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(5), "{out}");
    assert!(out.contains("asked for the entry at int16 activations, but this runtime keys the run at int8"), "{out}");
    assert!(!out.contains(&fresh_line(&s.keys[0])), "the int8 entry stood in: {out}");
}

#[test]
fn a_bucket_whose_record_cannot_be_read_is_not_checked_unserved() {
    // The scene's records do not exist: a forced check of the bucket at 4
    // refuses before any arm runs (an idle entry would go on, unserved).
    let s = scene();
    let m = s.cache.join("m.gguf");
    let o = s.check(&["-m", m.to_str().unwrap(), "-t", "2", "--concurrency", "4", "--force"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(5), "{out}");
    assert!(out.contains("is a bucket, but its record (records/x-int8-c4) cannot be read"), "{out}");
    assert!(!s.calls().contains("serve"), "no arm ran: {}", s.calls());
}

#[test]
fn check_all_names_an_entry_s_error_and_goes_on_to_the_next() {
    let s = scene();
    std::fs::write(s.f.fake.join("fail-int16"), "").unwrap();
    let o = s.check(&["--all"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains(&format!("{}: error: ", s.keys[1])) && out.contains("cannot explain at int16"), "{out}");
    // The entries after it were still checked.
    assert!(out.contains(&format!("{}: exit 0", s.keys[2])), "{out}");
}
