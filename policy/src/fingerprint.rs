//! The verify-path fingerprint: a hash over every source file whose change
//! can move the cost of a verify block (or of the classic step it is compared
//! with), so a policy entry measured with other code is recognized as stale
//! instead of being trusted.
//!
//! [`VERIFY_PATH`] lists those files (or folders), each with the reason it is
//! on the path and the keys it can affect: every device, CPU devices, x86_64
//! CPUs or CUDA devices, and every weight format or only some. [`OFF_PATH`]
//! lists every other source file of `kernels/` and `runtime/` with the
//! reason it cannot move that cost. A test (`policy/tests/fingerprint.rs`)
//! walks both crates and fails when a source file is in neither list (or in
//! both, or a listed path is gone), so a new file has to be placed before it
//! builds green.
//!
//! A key's fingerprint hashes the parts that apply to its
//! device class and to the weight formats of the measured target: adding a
//! Q5_0 kernel in a file of its own leaves a Q4_1 entry fresh, a change to
//! the CUDA launcher leaves a CPU entry fresh. A file that serves several
//! formats or devices is listed for all of them; when in doubt, a part
//! applies (stale is the safe side). Formats unknown (an old record) means
//! every part applies.
//!
//! Each part is hashed as the sorted relative paths of its files, each with
//! a NUL, its length and its bytes (CRLF read as LF, so a Windows checkout
//! hashes like a Unix one). `runtime/build.rs` hashes the parts and the
//! runtime combines them ([`combine`], [`applies`]): `KERNEL_FINGERPRINT`
//! over every part (the build's identity) and `verify_fingerprint` over a
//! key's parts.

use sha2::{Digest, Sha256};
use std::io;
use std::path::{Path, PathBuf};

/// Which device classes a part can affect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    All,
    /// `cpu:*`
    Cpu,
    /// `cpu:x86_64-*`
    CpuX86,
    /// `cuda:*`
    Cuda,
}

impl Devices {
    pub fn applies_to(self, device_class: &str) -> bool {
        match self {
            Devices::All => true,
            Devices::Cpu => device_class.starts_with("cpu:"),
            Devices::CpuX86 => device_class.starts_with("cpu:x86_64-"),
            Devices::Cuda => device_class.starts_with("cuda:"),
        }
    }
}

/// One part of the verify path: a file, or a folder (ending in `/`).
#[derive(Clone, Copy, Debug)]
pub struct Part {
    /// Relative to the workspace root.
    pub path: &'static str,
    pub devices: Devices,
    /// The weight formats (lowercase ggml names) whose kernels live here
    /// alone; empty: every format.
    pub formats: &'static [&'static str],
    pub why: &'static str,
}

const fn part(path: &'static str, devices: Devices, why: &'static str) -> Part {
    format_part(path, devices, &[], why)
}

/// A part whose change moves only the cost of the weight formats it names.
const fn format_part(
    path: &'static str,
    devices: Devices,
    formats: &'static [&'static str],
    why: &'static str,
) -> Part {
    Part { path, devices, formats, why }
}

/// The weight formats of the format-aware parts: the row-interleaved
/// layouts (every format `r16.rs` repacks), the K-quants, and the x86_64
/// kernel files' own formats.
const INTERLEAVED: &[&str] = &["q4_0", "q4_1", "q8_0", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"];
const K_QUANTS: &[&str] = &["q4_k", "q5_k", "q6_k"];
const Q4_Q8: &[&str] = &["q4_0", "q4_1", "q8_0"];
const Q5: &[&str] = &["q5_0", "q5_1"];
const Q2K_Q3K: &[&str] = &["q2_k", "q3_k"];
const HALF: &[&str] = &["f16", "bf16"];

/// Every source file whose change can move the cost of a verify block or of
/// a classic step.
pub const VERIFY_PATH: &[Part] = &[
    // kernels, every device
    part("kernels/src/lib.rs", Devices::All, "the kernel crate's module tree and shared helpers"),
    part("kernels/src/dispatch.rs", Devices::All, "chooses the kernel family and the multi-row switch"),
    part("kernels/src/act.rs", Devices::All, "activation quantization, paid once per verify row"),
    format_part(
        "kernels/src/act8.rs",
        Devices::Cpu,
        K_QUANTS,
        "8-bit activation quantization for the K-quants (--precision int8), paid once per verify row",
    ),
    part("kernels/src/ops/mod.rs", Devices::All, "the ops' module tree and the dot product they share"),
    part("kernels/src/ops/norm.rs", Devices::All, "RMSNorm of every row"),
    part("kernels/src/ops/rope.rs", Devices::All, "RoPE of every row"),
    part("kernels/src/ops/softmax.rs", Devices::All, "softmax and exp of every row's attention and GELU"),
    part("kernels/src/ops/glu.rs", Devices::All, "the feed-forward gate of every row"),
    part("kernels/src/ops/attention.rs", Devices::All, "the cache element's widening, the reference attention"),
    part("kernels/src/attn.rs", Devices::Cpu, "attention over the CPU KV cache, every row of a block"),
    part("kernels/src/quant/", Devices::All, "block formats and dequantization (embedding rows, references)"),
    part("kernels/src/matvec/mod.rs", Devices::All, "the mat-vec entry points and the multi-row dispatch"),
    // kernels, CPU
    part("kernels/src/matvec/scalar.rs", Devices::Cpu, "the scalar kernel family (and the specification)"),
    format_part(
        "kernels/src/matvec/scalar8.rs",
        Devices::Cpu,
        K_QUANTS,
        "the scalar K-quant products against 8-bit activations (and their specification)",
    ),
    format_part(
        "kernels/src/matvec/r16.rs",
        Devices::Cpu,
        INTERLEAVED,
        "the row-interleaved layout of Q4_0, Q4_1, Q8_0, Q5_0 and Q5_1, its portable kernels, the repacking of every layout",
    ),
    format_part("kernels/src/matvec/r16/k.rs", Devices::Cpu, K_QUANTS, "the row-interleaved layout of the K-quants"),
    format_part(
        "kernels/src/pages.rs",
        Devices::Cpu,
        INTERLEAVED,
        "the pages the repacked weights live on (huge pages advised): how fast every pass streams them",
    ),
    part(
        "kernels/src/matvec/x86/mod.rs",
        Devices::CpuX86,
        "the x86_64 dispatcher: each format's passes, the group driver, the row tiles",
    ),
    part(
        "kernels/src/matvec/x86/shared.rs",
        Devices::CpuX86,
        "the tiles, reductions, prefetches and integer steps every x86_64 kernel uses",
    ),
    part(
        "kernels/src/matvec/x86/dot_f32.rs",
        Devices::CpuX86,
        "the x86_64 f32 dot products (f32 matrices, and the ops of every row)",
    ),
    format_part(
        "kernels/src/matvec/x86/interleaved_q4_q8.rs",
        Devices::CpuX86,
        Q4_Q8,
        "x86_64 kernels of the row-interleaved Q4_0, Q4_1 and Q8_0 layout",
    ),
    format_part(
        "kernels/src/matvec/x86/interleaved_q5.rs",
        Devices::CpuX86,
        Q5,
        "x86_64 kernels of the row-interleaved Q5_0 and Q5_1 layout",
    ),
    format_part(
        "kernels/src/matvec/x86/interleaved_k.rs",
        Devices::CpuX86,
        K_QUANTS,
        "x86_64 kernels of the row-interleaved K-quants",
    ),
    format_part(
        "kernels/src/matvec/x86/interleaved_k8.rs",
        Devices::CpuX86,
        K_QUANTS,
        "x86_64 kernels of the row-interleaved K-quants against 8-bit activations (--precision int8)",
    ),
    format_part("kernels/src/matvec/x86/q2k_q3k.rs", Devices::CpuX86, Q2K_Q3K, "x86_64 kernels of Q2_K and Q3_K"),
    format_part("kernels/src/matvec/x86/half.rs", Devices::CpuX86, HALF, "x86_64 kernels of F16 and BF16 matrices"),
    // kernels, CUDA
    part("kernels/src/cuda/", Devices::Cuda, "the CUDA launcher: device buffers, streams, NVRTC, dispatch"),
    part("kernels/cuda/", Devices::Cuda, "the CUDA kernels"),
    // runtime: the forward pass, the loops around it, the pool
    part("runtime/src/model/forward.rs", Devices::All, "the forward pass, the KV cache and the logit rows"),
    part("runtime/src/model/weights.rs", Devices::All, "weight layout and repacking for the kernels"),
    part("runtime/src/model/mod.rs", Devices::All, "loading and placement of the weights"),
    part("runtime/src/model/gguf_load.rs", Devices::All, "which GGUF tensors become which weights, in which layout"),
    part("runtime/src/model/hf.rs", Devices::All, "which safetensors become which weights, in which type"),
    part("runtime/src/model/config.rs", Devices::All, "the shapes the forward pass runs"),
    part("runtime/src/model/cuda.rs", Devices::Cuda, "the forward pass on a CUDA device"),
    part("runtime/src/gguf/mod.rs", Devices::All, "the mapped GGUF tensor data the kernels read"),
    part("runtime/src/gguf/parse.rs", Devices::All, "tensor offsets and alignment of the mapped data"),
    part("runtime/src/pool.rs", Devices::All, "the thread pool every multi-threaded kernel runs on"),
    part("runtime/src/engine.rs", Devices::All, "the engine and the classic loop the ratio divides by"),
    part("runtime/src/sampling.rs", Devices::All, "sampling over the vocabulary, once per emitted token"),
    part("runtime/src/penalty.rs", Devices::All, "repetition penalties over the history, once per verified row"),
    part("runtime/src/request.rs", Devices::All, "one request decoded classic or speculative"),
    part("runtime/src/batch.rs", Devices::All, "which sequences' rows share each pass of the server's batches"),
    part(
        "runtime/src/sequence.rs",
        Devices::All,
        "one sequence's passes: the classic step, the speculative round (draft, verify, accept, roll back), the batch's",
    ),
    part("runtime/src/speculative/mod.rs", Devices::All, "the speculative decoder's shared types"),
    part(
        "runtime/src/speculative/decode.rs",
        Devices::All,
        "the speculative loop: draft, verify block, accept, roll back",
    ),
    part("runtime/src/speculative/drafter.rs", Devices::All, "the drafters, run once per verify"),
    part("runtime/src/speculative/schedule.rs", Devices::All, "each round's draft length, fixed or adaptive"),
    part("policy/src/adaptive.rs", Devices::All, "the adaptive draft length's rule, once per verify"),
    part("runtime/src/tokenizer/mod.rs", Devices::All, "the end-of-generation check, once per emitted token"),
    part("runtime/src/device.rs", Devices::Cuda, "CUDA device selection and placement"),
];

/// Every other source file of the two crates, with why it cannot move the
/// cost of a verify block.
pub const OFF_PATH: &[(&str, &str)] = &[
    ("kernels/src/matvec/tests.rs", "tests"),
    ("kernels/src/ops/tests.rs", "tests"),
    ("runtime/src/lib.rs", "the module list"),
    ("runtime/src/bin/", "the binary: argument parsing and the exit code"),
    ("runtime/src/commands/", "the commands' once-per-process setup"),
    ("runtime/src/limits.rs", "bounds checks on flags and file sizes, once per process or request"),
    ("runtime/src/exit.rs", "the error line and exit status of a failed command"),
    ("runtime/src/events/", "event shapes, written once per request"),
    ("runtime/src/profile.rs", "acceptance traces for a profile: classic decoding and drafter lookups, no request"),
    ("runtime/src/prompts.rs", "the prompt-set format, read once per process"),
    ("runtime/src/open.rs", "loads and places the model once per process"),
    ("runtime/src/precheck.rs", "counts a checkpoint's tokenizer.json before it is loaded, once per process"),
    ("runtime/src/build_info.rs", "build identity strings"),
    ("runtime/src/fetch.rs", "downloads the default model"),
    ("runtime/src/bench/", "the benchmark command, around the engine"),
    ("runtime/src/policy.rs", "which width runs, not what a width costs"),
    ("runtime/src/checkpoint/mod.rs", "the checkpoint readers' module list"),
    ("runtime/src/checkpoint/quant.rs", "classifies the target's quantization, once per process"),
    ("runtime/src/checkpoint/declared.rs", "reads a checkpoint's declared width, once per process"),
    ("runtime/src/checkpoint/tests.rs", "tests"),
    ("runtime/src/serve/", "HTTP around the engine, per request"),
    (
        "runtime/src/sandbox.rs",
        "the bounded thread chat templates run on, and the process's allocator: the system's behind one \
         thread-local load and branch per allocation (the decode and verify loops allocate per round, not per \
         weight; keep the hooks that small)",
    ),
    ("runtime/src/speculative/probe.rs", "the exactness probe, once at startup"),
    ("runtime/src/speculative/setup.rs", "drafter and width resolution, once at startup"),
    ("runtime/src/tokenizer/chat.rs", "the chat template, once per request"),
    ("runtime/src/tokenizer/spm.rs", "SentencePiece encoding of prompts, once per request"),
    ("runtime/src/tokenizer/bpe.rs", "byte-level BPE encoding of prompts, once per request"),
    ("runtime/src/tokenizer/vocab.rs", "the token table of both GGUF encoders, read once per request"),
    ("runtime/src/tokenizer/pretok.rs", "the BPE pre-tokenizers' word splits, once per request"),
    ("runtime/src/model/tests.rs", "tests"),
    ("runtime/src/wiring_tests.rs", "tests that join several modules"),
    ("runtime/src/test_models.rs", "tiny models for tests"),
    ("runtime/src/gguf/test_writer.rs", "writes GGUF files for tests"),
    ("policy/src/lib.rs", "the policy crate's module list"),
    ("policy/src/declared.rs", "declared quantization, read once per process"),
    ("policy/src/profile.rs", "acceptance profiles and their replay: predictions, never run by a request"),
    ("policy/src/drafting.rs", "the drafting choice's type (fixed or adaptive), read from the table once per process"),
    ("policy/src/fingerprint.rs", "the verify-path lists and their hashes, at build time"),
    ("policy/src/host.rs", "the host class, once per process"),
    ("policy/src/key.rs", "the policy key's types"),
    ("policy/src/kind.rs", "drafter kinds and their settings' bounds"),
    ("policy/src/quant.rs", "quantization classes"),
    ("policy/src/resolve.rs", "which width runs, once per process"),
    ("policy/src/table.rs", "the table compiler, at build time and startup"),
    ("policy/src/width.rs", "the width type"),
];

/// The source trees [`VERIFY_PATH`] and [`OFF_PATH`] must cover.
pub const SOURCE_TREES: [&str; 4] = ["kernels/src", "kernels/cuda", "policy/src", "runtime/src"];

/// Files under `dir` (recursively), as paths relative to `base` with `/`.
fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let ty = entry.file_type()?;
        if ty.is_dir() {
            walk(base, &path, out)?;
        } else if ty.is_file() {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            out.push((rel.join("/"), path));
        }
    }
    Ok(())
}

/// The files of `path` (a file, or a folder ending in `/`) under `root`,
/// sorted; empty when it does not exist.
pub fn files_of(root: &Path, path: &str) -> io::Result<Vec<(String, PathBuf)>> {
    let full = root.join(path.trim_end_matches('/'));
    let mut files = Vec::new();
    if path.ends_with('/') {
        if full.is_dir() {
            walk(root, &full, &mut files)?;
        }
    } else if full.is_file() {
        files.push((path.to_string(), full));
    }
    files.sort();
    Ok(files)
}

/// Every source file of [`SOURCE_TREES`] under `root`, relative, sorted.
pub fn source_files(root: &Path) -> io::Result<Vec<String>> {
    let mut files = Vec::new();
    for t in SOURCE_TREES {
        let dir = root.join(t);
        if dir.is_dir() {
            walk(root, &dir, &mut files)?;
        }
    }
    let mut names: Vec<String> = files.into_iter().map(|(r, _)| r).collect();
    names.sort();
    Ok(names)
}

/// Whether `listed` (a file, or a folder ending in `/`) covers `file`.
pub fn covers(listed: &str, file: &str) -> bool {
    if listed.ends_with('/') { file.starts_with(listed) } else { file == listed }
}

/// The hash of one part (16 hex digits); a part with no files hashes as
/// the word `absent`, so removing it changes every fingerprint it is in.
pub fn part_hash(root: &Path, path: &str) -> io::Result<String> {
    let files = files_of(root, path)?;
    let mut h = Sha256::new();
    if files.is_empty() {
        h.update(b"absent");
    }
    for (rel, full) in &files {
        let bytes = crlf_to_lf(&std::fs::read(full)?);
        h.update(rel.as_bytes());
        h.update([0u8]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex16(&h.finalize()))
}

/// The fingerprint of the parts `select` picks, given each part's hash
/// (`hashes[i]` belongs to `VERIFY_PATH[i]`).
pub fn combine(hashes: &[&str], select: impl Fn(&Part) -> bool) -> String {
    let mut h = Sha256::new();
    for (p, hash) in VERIFY_PATH.iter().zip(hashes) {
        if select(p) {
            h.update(p.path.as_bytes());
            h.update([0u8]);
            h.update(hash.as_bytes());
            h.update([0u8]);
        }
    }
    hex16(&h.finalize())
}

/// Whether part `p` applies to a key with this device class and these
/// weight formats (`None`: not known, so every format's part applies).
pub fn applies(p: &Part, device_class: &str, formats: Option<&[String]>) -> bool {
    let format_ok = match formats {
        _ if p.formats.is_empty() => true,
        None => true,
        Some(fs) => fs.iter().any(|f| p.formats.contains(&f.as_str())),
    };
    p.devices.applies_to(device_class) && format_ok
}

fn hex16(digest: &[u8]) -> String {
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn crlf_to_lf(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    for (i, &c) in b.iter().enumerate() {
        if c == b'\r' && b.get(i + 1) == Some(&b'\n') {
            continue;
        }
        out.push(c);
    }
    out
}
