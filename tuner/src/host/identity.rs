//! Host identity: everything a record needs so that the next measurement on
//! this or another host can be compared with it (docs/gate-and-identity.md,
//! "The identity"; the project's architecture notes, "Measurement
//! discipline", ask that a record state everything the next one is compared
//! on). Every source that can be absent is a
//! [`Reading`]: a value, or an explicit null with the reason.
//!
//! Principal type: [`Identity`], built by [`collect`].
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use runtime::build_info::BuildInfo;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::host::gate::gpu;
use crate::host::procfs;
use crate::host::reading::Reading;

/// Version of the [`Identity`] JSON layout.
pub const IDENTITY_SCHEMA_VERSION: u32 = 1;

/// How long an external command (`rustc --version`, `nvcc --version`,
/// `runtime build-info`) may run before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// Most output kept from one external command.
const MAX_COMMAND_OUTPUT: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot run {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("{program} did not finish within {timeout_s} s and was killed")]
    Timeout { program: String, timeout_s: u64 },
    #[error("{program} exited with {status}: {stderr}")]
    Exit { program: String, status: std::process::ExitStatus, stderr: String },
    #[error("{program} printed no JSON line{detail}")]
    NoJson { program: String, detail: String },
    #[error("{program} printed JSON that is not a BuildInfo: {source}")]
    BadJson { program: String, source: serde_json::Error },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelFamilyIdentity {
    /// The fastest family this CPU supports.
    pub best: String,
    /// What the runtime would dispatch here (honours `DRAFTWISE_KERNELS`).
    pub selected: Reading<String>,
    pub forced: bool,
    /// The policy table's device class for the selected family.
    pub device_class: Reading<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuIdentity {
    pub model: Reading<String>,
    pub arch: String,
    /// ISA extensions the kernels care about, as detected at run time.
    pub isa_flags: Vec<String>,
    pub physical_cores: Reading<usize>,
    /// CPUs online on the host.
    pub threads_online: Reading<usize>,
    /// CPUs this process may run on (affinity, cgroup quota).
    pub threads_available: Reading<usize>,
    pub kernel_family: KernelFamilyIdentity,
    /// The processor's signature ([`cpu_signature`]): the model *name* alone
    /// does not tell hosts apart (virtual machines report "AMD EPYC" for a
    /// Zen 3 and a Zen 5 host alike, whose speeds differ by 2x).
    #[serde(default = "not_recorded")]
    pub signature: Reading<String>,
    /// Cache sizes of CPU 0 by level and type ([`cache_sizes`]), e.g.
    /// `L1d 48K, L1i 32K, L2 1024K, L3 32768K`.
    #[serde(default = "not_recorded")]
    pub caches: Reading<String>,
}

/// What an identity written before a field existed reads back as.
fn not_recorded() -> Reading<String> {
    Reading::unavailable("not recorded (identity written before this field existed)")
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryIdentity {
    pub total_mib: Reading<u64>,
    pub available_mib: Reading<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuIdentity {
    pub index: u32,
    pub name: Reading<String>,
    pub uuid: Reading<String>,
    /// `major.minor`, e.g. `9.0` for Hopper.
    pub compute_capability: Reading<String>,
    pub memory_total_mib: Reading<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvidiaIdentity {
    pub driver_version: Reading<String>,
    /// The CUDA version the driver supports, e.g. `12.8`.
    pub cuda_driver_version: Reading<String>,
    pub gpus: Reading<Vec<GpuIdentity>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvccIdentity {
    pub path: String,
    /// How it was found: `PATH`, `$CUDA_HOME`, `$CUDA_PATH` or `/usr/local/cuda`.
    pub found_via: String,
    /// The CUDA install root (the parent of `bin/`).
    pub cuda_root: Reading<String>,
    /// The `release` line of `nvcc --version`.
    pub version: Reading<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeIdentity {
    pub path: String,
    /// `runtime build-info --json`.
    pub build: Reading<BuildInfo>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RustcIdentity {
    pub path: Reading<String>,
    /// `rustc --version` of the first rustc on PATH.
    pub version: Reading<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub path: String,
    pub size_bytes: Reading<u64>,
    pub sha256: Reading<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub schema_version: u32,
    pub tuner_version: String,
    pub hostname: Reading<String>,
    pub os: Reading<String>,
    pub kernel_release: Reading<String>,
    pub cpu: CpuIdentity,
    pub memory: MemoryIdentity,
    /// `null` with the reason on a host without an NVIDIA driver.
    pub nvidia: Reading<NvidiaIdentity>,
    pub nvcc: Reading<NvccIdentity>,
    pub runtime: RuntimeIdentity,
    pub rustc_on_path: RustcIdentity,
    pub models: Vec<ModelFile>,
}

/// What to identify beyond the host itself.
#[derive(Clone, Debug, Default)]
pub struct IdentityOptions {
    /// The runtime binary; `None` is `runtime` beside the tuner executable.
    pub runtime: Option<PathBuf>,
    pub models: Vec<PathBuf>,
}

/// The `runtime` binary beside the running executable.
pub fn default_runtime_path() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the tuner executable: {e}"))?;
    let dir = exe.parent().ok_or("the tuner executable has no parent directory")?;
    Ok(dir.join(format!("runtime{}", std::env::consts::EXE_SUFFIX)))
}

pub fn collect(opts: &IdentityOptions) -> Identity {
    let runtime_path = match &opts.runtime {
        Some(p) => Ok(p.clone()),
        None => default_runtime_path(),
    };
    let runtime = match runtime_path {
        Ok(p) => RuntimeIdentity { path: p.display().to_string(), build: Reading::from_result(runtime_build_info(&p)) },
        Err(e) => RuntimeIdentity { path: String::new(), build: Reading::unavailable(e) },
    };
    Identity {
        schema_version: IDENTITY_SCHEMA_VERSION,
        tuner_version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: Reading::from_result(sysinfo::System::host_name()),
        os: Reading::from_result(sysinfo::System::long_os_version()),
        kernel_release: Reading::from_result(sysinfo::System::kernel_version()),
        cpu: cpu_identity(),
        memory: memory_identity(),
        nvidia: nvidia_identity(),
        nvcc: nvcc_identity(),
        runtime,
        rustc_on_path: rustc_identity(),
        models: opts.models.iter().map(|p| model_file(p)).collect(),
    }
}

fn cpu_identity() -> CpuIdentity {
    let cpuinfo = procfs::read_capped(Path::new("/proc/cpuinfo"), procfs::MAX_PROC_FILE_BYTES);
    let model = match &cpuinfo {
        Ok(t) => ["model name", "Model", "Hardware", "CPU part"]
            .iter()
            .find_map(|k| procfs::cpuinfo_field(t, k))
            .map_or_else(|| Reading::unavailable("/proc/cpuinfo names no model"), Reading::ok),
        Err(e) => Reading::unavailable(e.to_string()),
    };
    let signature = match &cpuinfo {
        Ok(t) => cpu_signature(t).map_or_else(
            || Reading::unavailable("/proc/cpuinfo has no vendor/family/model or implementer/part fields"),
            Reading::ok,
        ),
        Err(e) => Reading::unavailable(e.to_string()),
    };
    let online = sysinfo::System::new_with_specifics(
        sysinfo::RefreshKind::nothing().with_cpu(sysinfo::CpuRefreshKind::nothing()),
    )
    .map_err(|e| e.to_string())
    .and_then(|s| match s.cpus().len() {
        0 => Err("sysinfo lists no CPUs".to_string()),
        n => Ok(n),
    });
    let best = kernels::dispatch::KernelFamily::best();
    let kernel_family = match kernels::dispatch::selected() {
        Ok(sel) => KernelFamilyIdentity {
            best: best.name().to_string(),
            selected: Reading::ok(sel.family.name().to_string()),
            forced: sel.forced,
            device_class: Reading::ok(sel.family.device_class()),
        },
        Err(e) => KernelFamilyIdentity {
            best: best.name().to_string(),
            selected: Reading::unavailable(e.to_string()),
            forced: true,
            device_class: Reading::unavailable(e.to_string()),
        },
    };
    CpuIdentity {
        model,
        arch: std::env::consts::ARCH.to_string(),
        isa_flags: isa_flags(),
        physical_cores: Reading::from_result(sysinfo::System::physical_core_count()),
        threads_online: Reading::from_result(online),
        threads_available: Reading::from_result(std::thread::available_parallelism().map(|n| n.get())),
        kernel_family,
        signature,
        caches: Reading::from_result(cache_sizes(Path::new(CPU0_CACHE_DIR))),
    }
}

/// Where Linux describes CPU 0's caches, one `indexN` folder per cache.
const CPU0_CACHE_DIR: &str = "/sys/devices/system/cpu/cpu0/cache";

/// Most `indexN` cache folders read (real CPUs have four or five).
const MAX_CACHE_INDICES: usize = 16;

/// Bytes kept of one cache file (`level`, `type`, `size`: a few bytes each).
const MAX_CACHE_FILE_BYTES: u64 = 64;

/// The processor's signature from `/proc/cpuinfo` (CPU 0's lines): on x86
/// `vendor_id`, `cpu family`, `model`, `stepping` and `microcode`
/// (`AuthenticAMD family 26 model 2 stepping 1, microcode 0x1000065`); on
/// Arm the implementer, architecture, variant, part and revision. `None`
/// when none of these fields is there.
pub fn cpu_signature(cpuinfo: &str) -> Option<String> {
    // One parser for the record and the policy key's host class.
    policy::host::cpu_signature(cpuinfo)
}

/// CPU 0's caches as `L1d 48K, L1i 32K, L2 1024K, L3 32768K`, from the
/// `level`, `type` and `size` files of each `indexN` folder under `dir`
/// (at most [`MAX_CACHE_INDICES`], each file read with a size cap).
pub fn cache_sizes(dir: &Path) -> Result<String, String> {
    let read = |p: PathBuf| {
        procfs::read_capped(&p, MAX_CACHE_FILE_BYTES).map(|t| t.trim().to_string()).map_err(|e| e.to_string())
    };
    let mut parts = Vec::new();
    for i in 0..MAX_CACHE_INDICES {
        let idx = dir.join(format!("index{i}"));
        if !idx.is_dir() {
            break;
        }
        let (level, ty, size) = (read(idx.join("level"))?, read(idx.join("type"))?, read(idx.join("size"))?);
        let suffix = match ty.as_str() {
            "Data" => "d",
            "Instruction" => "i",
            _ => "",
        };
        parts.push(format!("L{level}{suffix} {size}"));
    }
    if parts.is_empty() { Err(format!("{} lists no caches", dir.display())) } else { Ok(parts.join(", ")) }
}

/// The ISA extensions that steer kernel dispatch, as this CPU reports them.
fn isa_flags() -> Vec<String> {
    let mut v: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => { $( if std::arch::is_x86_feature_detected!($f) { v.push($f); } )* };
        }
        probe!("sse4.2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512vnni");
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => { $( if std::arch::is_aarch64_feature_detected!($f) { v.push($f); } )* };
        }
        probe!("neon", "dotprod", "i8mm", "fp16", "sve", "sve2");
    }
    v.into_iter().map(String::from).collect()
}

fn memory_identity() -> MemoryIdentity {
    match procfs::read_capped(Path::new("/proc/meminfo"), procfs::MAX_PROC_FILE_BYTES) {
        Ok(t) => {
            let field = |name: &str| match procfs::meminfo_kib(&t, name) {
                Ok(Some(k)) => Reading::ok(k / 1024),
                Ok(None) => Reading::unavailable(format!("/proc/meminfo has no {name}")),
                Err(e) => Reading::unavailable(format!("/proc/meminfo: {e}")),
            };
            MemoryIdentity { total_mib: field("MemTotal"), available_mib: field("MemAvailable") }
        }
        Err(e) => MemoryIdentity {
            total_mib: Reading::unavailable(e.to_string()),
            available_mib: Reading::unavailable(e.to_string()),
        },
    }
}

/// `12080` → `12.8` (NVML's encoding: 1000 * major + 10 * minor).
pub fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn nvidia_identity() -> Reading<NvidiaIdentity> {
    const MIB: u64 = 1 << 20;
    let nvml = match gpu::init() {
        Ok(n) => n,
        Err(f) => {
            return Reading::unavailable(match gpu::from_init_failure(&f, gpu::proc_driver_present()) {
                gpu::GpuInput::NoDriver { evidence } => evidence,
                gpu::GpuInput::Unknown { reason } => reason,
                gpu::GpuInput::Devices { .. } => "NVML failed to initialise".to_string(),
            });
        }
    };
    let gpus = nvml.device_count().map_err(|e| e.to_string()).map(|n| {
        (0..n)
            .map(|index| match nvml.device_by_index(index) {
                Ok(d) => GpuIdentity {
                    index,
                    name: Reading::from_result(d.name()),
                    uuid: Reading::from_result(d.uuid()),
                    compute_capability: Reading::from_result(
                        d.cuda_compute_capability().map(|c| format!("{}.{}", c.major, c.minor)),
                    ),
                    memory_total_mib: Reading::from_result(d.memory_info().map(|m| m.total / MIB)),
                },
                Err(e) => {
                    let why = format!("NVML device {index}: {e}");
                    GpuIdentity {
                        index,
                        name: Reading::unavailable(why.clone()),
                        uuid: Reading::unavailable(why.clone()),
                        compute_capability: Reading::unavailable(why.clone()),
                        memory_total_mib: Reading::unavailable(why),
                    }
                }
            })
            .collect()
    });
    Reading::ok(NvidiaIdentity {
        driver_version: Reading::from_result(nvml.sys_driver_version()),
        cuda_driver_version: Reading::from_result(nvml.sys_cuda_driver_version().map(cuda_version_string)),
        gpus: Reading::from_result(gpus),
    })
}

/// The first executable `name` in `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

fn nvcc_identity() -> Reading<NvccIdentity> {
    let mut candidates: Vec<(PathBuf, String)> = Vec::new();
    if let Some(p) = which("nvcc") {
        candidates.push((p, "PATH".into()));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            candidates.push((PathBuf::from(root).join("bin/nvcc"), format!("${var}")));
        }
    }
    candidates.push((PathBuf::from("/usr/local/cuda/bin/nvcc"), "/usr/local/cuda".into()));
    let Some((path, found_via)) = candidates.into_iter().find(|(p, _)| p.is_file()) else {
        return Reading::unavailable("nvcc is not on PATH, nor under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda");
    };
    let cuda_root = match path.canonicalize() {
        Ok(p) => p.parent().and_then(Path::parent).map_or_else(
            || Reading::unavailable(format!("{} is not under a bin/ directory", p.display())),
            |r| Reading::ok(r.display().to_string()),
        ),
        Err(e) => Reading::unavailable(format!("{}: {e}", path.display())),
    };
    let version = run_text(&path, &["--version"]).and_then(|out| {
        out.lines()
            .find(|l| l.contains("release"))
            .map(|l| l.trim().to_string())
            .ok_or_else(|| format!("`{} --version` printed no release line", path.display()))
    });
    Reading::ok(NvccIdentity {
        path: path.display().to_string(),
        found_via,
        cuda_root,
        version: Reading::from_result(version),
    })
}

fn rustc_identity() -> RustcIdentity {
    match which("rustc") {
        Some(p) => RustcIdentity {
            path: Reading::ok(p.display().to_string()),
            version: Reading::from_result(run_text(&p, &["--version"]).map(|s| s.trim().to_string())),
        },
        None => RustcIdentity {
            path: Reading::unavailable("no rustc on PATH"),
            version: Reading::unavailable("no rustc on PATH"),
        },
    }
}

/// Runs a program with a timeout; stdout on success.
pub fn run_capture(program: &Path, args: &[&str], timeout: Duration) -> Result<String, IdentityError> {
    let name = program.display().to_string();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| IdentityError::Spawn { program: name.clone(), source })?;
    // Drain both pipes on threads so a chatty child cannot block on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let _ = r.take(MAX_COMMAND_OUTPUT as u64).read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(IdentityError::Timeout { program: name, timeout_s: timeout.as_secs() });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => {
                return Err(IdentityError::Spawn { program: name, source });
            }
        }
    };
    let stdout = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).trim().to_string();
    if !status.success() {
        return Err(IdentityError::Exit { program: name, status, stderr });
    }
    Ok(stdout)
}

fn run_text(program: &Path, args: &[&str]) -> Result<String, String> {
    run_capture(program, args, COMMAND_TIMEOUT).map_err(|e| e.to_string())
}

/// Runs `<runtime> build-info --json` and parses its one JSON line.
pub fn runtime_build_info(runtime: &Path) -> Result<BuildInfo, IdentityError> {
    let program = format!("{} build-info --json", runtime.display());
    if !runtime.exists() {
        return Err(IdentityError::Io {
            path: runtime.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no runtime binary here; build it with `cargo build --release -p runtime` or pass `--runtime PATH`",
            ),
        });
    }
    let out = run_capture(runtime, &["build-info", "--json"], COMMAND_TIMEOUT)?;
    parse_build_info(&program, &out)
}

/// The last line of `out` that is a JSON object, as a [`BuildInfo`].
pub fn parse_build_info(program: &str, out: &str) -> Result<BuildInfo, IdentityError> {
    let line = out.lines().rev().map(str::trim).find(|l| l.starts_with('{')).ok_or_else(|| IdentityError::NoJson {
        program: program.to_string(),
        detail: if out.trim().is_empty() {
            " (empty output: does this runtime have `build-info`?)".to_string()
        } else {
            format!(" (output began {:?})", out.chars().take(80).collect::<String>())
        },
    })?;
    serde_json::from_str(line).map_err(|source| IdentityError::BadJson { program: program.to_string(), source })
}

/// The CPU (with its signature), threads, GPUs, OS and kernel, as an
/// entry's `host` says it.
pub fn short_host(id: &Identity) -> String {
    let cpu = id.cpu.model.value.clone().unwrap_or_else(|| id.cpu.arch.clone());
    // The signature, where recorded: a model name can be shared by hosts of
    // different generations ("AMD EPYC").
    let mut parts = vec![match &id.cpu.signature.value {
        Some(sig) => format!("{cpu} ({sig})"),
        None => cpu,
    }];
    if let Some(n) = id.cpu.threads_available.value {
        parts.push(format!("{n} threads available"));
    }
    if let Some(g) = id.nvidia.value.as_ref().and_then(|n| n.gpus.value.as_ref()) {
        parts.extend(g.iter().filter_map(|g| g.name.value.clone()));
    }
    if let Some(os) = &id.os.value {
        parts.push(os.clone());
    }
    if let Some(k) = &id.kernel_release.value {
        parts.push(format!("Linux {k}"));
    }
    parts.join(", ")
}

/// sha256 of a file, streamed in 1 MiB chunks.
pub fn sha256_file(path: &Path) -> Result<String, IdentityError> {
    let io = |source| IdentityError::Io { path: path.to_path_buf(), source };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

pub fn model_file(path: &Path) -> ModelFile {
    let meta = std::fs::metadata(path).map_err(|source| IdentityError::Io { path: path.to_path_buf(), source });
    let meta =
        meta.and_then(|m| if m.is_file() { Ok(m) } else { Err(IdentityError::NotAFile { path: path.to_path_buf() }) });
    match meta {
        Ok(m) => ModelFile {
            path: path.display().to_string(),
            size_bytes: Reading::ok(m.len()),
            sha256: Reading::from_result(sha256_file(path)),
        },
        Err(e) => ModelFile {
            path: path.display().to_string(),
            size_bytes: Reading::unavailable(e.to_string()),
            sha256: Reading::unavailable(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_file_matches_the_known_digest_of_abc() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        std::fs::write(&p, b"abc").unwrap();
        let m = model_file(&p);
        assert_eq!(m.size_bytes.value, Some(3));
        assert_eq!(m.sha256.value.as_deref(), Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    }

    #[test]
    fn a_missing_model_file_is_null_with_the_reason() {
        let m = model_file(Path::new("/nonexistent/model.gguf"));
        assert!(m.sha256.value.is_none());
        assert!(m.sha256.reason().contains("/nonexistent/model.gguf"), "{}", m.sha256.reason());
        let d = model_file(Path::new("/tmp"));
        assert!(d.size_bytes.reason().contains("not a regular file"));
    }

    #[test]
    fn build_info_is_parsed_from_the_last_json_line_and_junk_is_an_error() {
        let j = r#"{"version":"0.1.0","git_commit":"abc","git_dirty":"false","features":["cuda"],"rustc":"rustc 1.95.0","profile":"release","cuda_archs":["sm_90"]}"#;
        let b = parse_build_info("runtime", &format!("note: warming up\n{j}\n")).unwrap();
        assert_eq!(b.cuda_archs, vec!["sm_90".to_string()]);
        assert!(matches!(parse_build_info("runtime", ""), Err(IdentityError::NoJson { .. })));
        assert!(matches!(parse_build_info("runtime", "{\"version\":1}"), Err(IdentityError::BadJson { .. })));
    }

    #[test]
    fn a_missing_runtime_binary_is_an_error_naming_the_fix() {
        let e = runtime_build_info(Path::new("/nonexistent/runtime")).unwrap_err().to_string();
        assert!(e.contains("--runtime"), "{e}");
    }

    #[test]
    fn a_runtime_that_fails_is_an_error_with_its_status() {
        let e = runtime_build_info(Path::new("/bin/false")).unwrap_err();
        assert!(matches!(e, IdentityError::Exit { .. }), "{e}");
    }

    #[test]
    fn cuda_versions_are_decoded_from_nvml_integers() {
        assert_eq!(cuda_version_string(12080), "12.8");
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(11040), "11.4");
    }

    #[test]
    fn the_cpu_signature_tells_apart_hosts_of_one_model_name() {
        // Two hosts of this project: both name themselves "AMD EPYC".
        let zen3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\nmicrocode\t: 0xa0011d1\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 99\n";
        let zen5 = "vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nstepping\t: 1\n";
        assert_eq!(cpu_signature(zen3).unwrap(), "AuthenticAMD family 25 model 1 stepping 1, microcode 0xa0011d1");
        assert_eq!(cpu_signature(zen5).unwrap(), "AuthenticAMD family 26 model 2 stepping 1");
        let arm = "processor\t: 0\nBogoMIPS\t: 243.75\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n";
        assert_eq!(cpu_signature(arm).unwrap(), "implementer 0x41 architecture 8 variant 0x3 part 0xd0c revision 1");
        assert_eq!(cpu_signature("processor\t: 0\nmodel name\t: Some CPU\n"), None);
        assert_eq!(cpu_signature(""), None);
    }

    #[test]
    fn cache_sizes_list_each_level_and_type_and_an_empty_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for (i, (level, ty, size)) in
            [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "1024K"), ("3", "Unified", "32768K")]
                .iter()
                .enumerate()
        {
            let idx = dir.path().join(format!("index{i}"));
            std::fs::create_dir(&idx).unwrap();
            std::fs::write(idx.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(idx.join("type"), format!("{ty}\n")).unwrap();
            std::fs::write(idx.join("size"), format!("{size}\n")).unwrap();
        }
        assert_eq!(cache_sizes(dir.path()).unwrap(), "L1d 48K, L1i 32K, L2 1024K, L3 32768K");
        std::fs::remove_file(dir.path().join("index2/size")).unwrap();
        assert!(cache_sizes(dir.path()).unwrap_err().contains("index2/size"));
        let empty = tempfile::tempdir().unwrap();
        assert!(cache_sizes(empty.path()).unwrap_err().contains("lists no caches"));
    }

    #[test]
    fn cache_sizes_read_a_bounded_number_of_folders_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_CACHE_INDICES + 4 {
            let idx = dir.path().join(format!("index{i}"));
            std::fs::create_dir(&idx).unwrap();
            std::fs::write(idx.join("level"), "2\n").unwrap();
            std::fs::write(idx.join("type"), "Unified\n").unwrap();
            std::fs::write(idx.join("size"), "1".repeat(10_000)).unwrap();
        }
        let got = cache_sizes(dir.path()).unwrap();
        assert_eq!(got.matches("L2 ").count(), MAX_CACHE_INDICES, "{got}");
        assert!(got.split(", ").all(|p| p.len() == "L2 ".len() + MAX_CACHE_FILE_BYTES as usize), "{got}");
    }

    #[test]
    fn an_identity_written_before_the_signature_existed_reads_back_with_the_reason() {
        let id = collect(&IdentityOptions { runtime: Some("/nonexistent/runtime".into()), models: vec![] });
        let mut j = serde_json::to_value(&id).unwrap();
        let cpu = j["cpu"].as_object_mut().unwrap();
        cpu.remove("signature");
        cpu.remove("caches");
        let old: Identity = serde_json::from_value(j).unwrap();
        assert!(old.cpu.signature.value.is_none());
        assert!(old.cpu.signature.reason().contains("not recorded"), "{}", old.cpu.signature.reason());
        assert!(old.cpu.caches.reason().contains("not recorded"));
    }

    #[test]
    fn every_identity_field_is_a_value_or_a_null_with_a_reason() {
        let id = collect(&IdentityOptions { runtime: Some("/nonexistent/runtime".into()), models: vec![] });
        let j = serde_json::to_value(&id).unwrap();
        crate::readings_complete(&j).unwrap();
        assert!(id.runtime.build.value.is_none());
    }
}
