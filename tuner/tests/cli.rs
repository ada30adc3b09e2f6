//! End-to-end: the built `tuner` binary on this host. The host may be busy
//! (other builds, other sessions), so the idle-host verdict is not asserted
//! here; the JSON shape, exit codes, and the reaction to a CPU hog we start
//! are.
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn tuner(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tuner")).args(args).output().expect("run tuner")
}

fn json(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(s.trim()).unwrap_or_else(|e| {
        panic!("stdout is not one JSON object ({e}):\n{s}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr))
    })
}

/// A CPU-bound process started by the test (so not a descendant of the
/// tuner it runs), killed when dropped, even if the test fails.
struct Hog(Child);

impl Hog {
    fn start() -> Hog {
        let child =
            Command::new("sh").args(["-c", "while :; do :; done"]).stdin(Stdio::null()).spawn().expect("spawn sh");
        // Give it a moment to be scheduled before sampling.
        std::thread::sleep(Duration::from_millis(200));
        Hog(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const ALL: &str = "cpu,foreign,gpu,nvrm,memory";

#[test]
fn gate_json_has_a_schema_version_a_verdict_and_every_source() {
    let out = tuner(&["gate", "--json", "--cpu-window-ms", "300"]);
    let code = out.status.code().expect("exit code");
    let j = json(&out);
    assert_eq!(j["schema_version"], 1);
    assert_eq!(j["report"]["schema_version"], 1);
    let decision = j["decision"].as_str().unwrap();
    let want_code = match decision {
        "pass" => 0,
        "wait" => 3,
        "halt" => 4,
        d => panic!("decision {d:?}"),
    };
    assert_eq!(code, want_code, "exit code follows the decision");
    assert_eq!(j["exit_code"], want_code);
    assert_eq!(j["report"]["verdict"]["decision"], decision);
    assert_eq!(j["timed_out"], false);
    for s in ["cpu", "foreign", "gpu", "nvrm", "memory"] {
        let c = &j["report"]["checks"][s];
        let st = c["status"].as_str().unwrap_or_else(|| panic!("{s}: {c}"));
        assert!(["pass", "wait", "halt", "unknown"].contains(&st), "{s}: {st}");
        assert!(c["reasons"].is_array());
        assert!(c["reading"].get("value").is_some() && c["reading"].get("unavailable_reason").is_some());
        if st != "pass" {
            assert!(!c["reasons"].as_array().unwrap().is_empty(), "{s} is {st} without a reason");
        }
    }
    let cpu = &j["report"]["checks"]["cpu"]["reading"]["value"];
    assert_eq!(cpu["window_ms"], 300);
    assert!(
        cpu["excluded_pids"].as_array().unwrap().iter().any(|p| p.as_u64().is_some()),
        "the tuner excludes at least itself"
    );
    assert!(j["report"]["verdict"]["accept_unknown_requested"].as_array().unwrap().is_empty());
}

#[test]
fn gate_waits_on_a_cpu_bound_process_and_names_its_pid() {
    let hog = Hog::start();
    // Accept every unknown so only real contention can make it wait.
    let out = tuner(&["gate", "--json", "--cpu-threshold", "10", "--accept-unknown", ALL]);
    let j = json(&out);
    assert_ne!(j["decision"], "pass", "{j}");
    assert_eq!(out.status.code(), Some(3), "wait exits 3: {j}");
    let pid = hog.pid();
    let named = j["report"]["verdict"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["source"] == "cpu" && r["text"].as_str().unwrap().contains(&format!("pid {pid} ")));
    assert!(named, "no cpu reason names pid {pid}: {}", j["report"]["verdict"]);
    let top = j["report"]["checks"]["cpu"]["reading"]["value"]["top"].as_array().unwrap();
    let entry = top.iter().find(|o| o["pid"] == pid).expect("hog among top offenders");
    assert_eq!(entry["over_threshold"], true);
    assert_eq!(j["report"]["verdict"]["accept_unknown_requested"].as_array().unwrap().len(), 5);
    drop(hog);
}

#[test]
fn gate_wait_rechecks_with_progress_then_gives_up_with_the_last_reasons() {
    let hog = Hog::start();
    let out = tuner(&[
        "gate",
        "--json",
        "--wait",
        "2",
        "--interval",
        "0.3",
        "--cpu-window-ms",
        "300",
        "--cpu-threshold",
        "10",
        "--accept-unknown",
        ALL,
    ]);
    let j = json(&out);
    assert_eq!(out.status.code(), Some(3), "{j}");
    assert_eq!(j["timed_out"], true);
    assert!(j["attempts"].as_u64().unwrap() >= 2, "{}", j["attempts"]);
    assert!(j["waited_ms"].as_u64().unwrap() >= 2000);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tuner gate: waiting"), "no progress line:\n{stderr}");
    assert!(stderr.contains(&format!("pid {} ", hog.pid())), "{stderr}");
    drop(hog);
}

#[test]
fn gate_text_output_lists_every_source() {
    let out = tuner(&["gate", "--cpu-window-ms", "200"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.starts_with("gate: "), "{s}");
    for src in ["cpu", "foreign", "gpu", "nvrm", "memory"] {
        assert!(s.lines().any(|l| l.trim_start().starts_with(src)), "{src} missing:\n{s}");
    }
}

#[test]
fn an_unknown_source_name_is_a_usage_error() {
    let out = tuner(&["gate", "--accept-unknown", "disk"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("disk"));
}

#[test]
fn identity_json_gives_every_field_as_a_value_or_a_null_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    std::fs::write(&model, b"abc").unwrap();
    let missing = dir.path().join("missing.safetensors");
    let out = tuner(&["identity", "--json", "--model", model.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let j = json(&out);
    tuner::readings_complete(&j).unwrap_or_else(|e| panic!("{e}\n{j:#}"));
    assert_eq!(j["schema_version"], 1);
    for key in
        ["hostname", "os", "kernel_release", "cpu", "memory", "nvidia", "nvcc", "runtime", "rustc_on_path", "models"]
    {
        assert!(j.get(key).is_some(), "{key} missing");
    }
    let kf = &j["cpu"]["kernel_family"];
    assert!(kf["best"].is_string());
    assert!(kf["device_class"]["value"].as_str().is_some_and(|s| s.starts_with("cpu:")), "{kf}");
    assert!(j["cpu"]["arch"].is_string());
    assert!(j["rustc_on_path"]["version"]["value"].as_str().is_some_and(|s| s.starts_with("rustc ")));
    // The runtime build identity: a BuildInfo, or a null saying why.
    let b = &j["runtime"]["build"];
    if b["value"].is_null() {
        assert!(b["unavailable_reason"].is_string());
    } else {
        for f in ["version", "git_commit", "git_dirty", "features", "rustc", "profile", "cuda_archs"] {
            assert!(b["value"].get(f).is_some(), "build.{f}");
        }
    }
    let models = j["models"].as_array().unwrap();
    assert_eq!(models[0]["sha256"]["value"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(models[0]["size_bytes"]["value"], 3);
    assert!(models[1]["sha256"]["value"].is_null());
    assert!(models[1]["sha256"]["unavailable_reason"].as_str().unwrap().contains("missing.safetensors"));
}

#[test]
fn identity_with_a_missing_runtime_records_null_and_the_fix() {
    let out = tuner(&["identity", "--json", "--runtime", "/nonexistent/runtime"]);
    let j = json(&out);
    assert!(j["runtime"]["build"]["value"].is_null());
    assert!(j["runtime"]["build"]["unavailable_reason"].as_str().unwrap().contains("--runtime"));
    assert_eq!(j["runtime"]["path"], "/nonexistent/runtime");
}
