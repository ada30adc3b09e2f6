//! NVRTC: loading it without panicking, compiling [`super::program_source`]
//! for an architecture, and the on-disk kernel cache.
//!
//! cudarc opens NVRTC by name (`libnvrtc.so`, `libnvrtc.so.12`, ...) through
//! the dynamic loader, so the library must be on the loader's path, or
//! named by `DRAFTWISE_NVRTC_LIB` (a full path to `libnvrtc.so.12`): that
//! file is opened first and kept open, and the loader then resolves
//! cudarc's by-name open to it (a loaded object matches its soname). This is
//! how the PyPI wheel `nvidia-cuda-nvrtc-cu12` is used without touching
//! `LD_LIBRARY_PATH` (`scripts/setup-nvrtc.sh`).
//!
//! # The cache
//!
//! Compiled images live in `DRAFTWISE_CUDA_CACHE`, else
//! `$DRAFTWISE_CACHE_DIR/cuda-kernels`, else
//! `$XDG_CACHE_HOME/draftwise/cuda-kernels`, else
//! `~/.cache/draftwise/cuda-kernels`, one file per key:
//! `<sha256 of (program source, options, target, NVRTC version)>-<target>.<ptx|cubin>`.
//! A changed kernel source, option, architecture or NVRTC therefore misses
//! the cache; files are written to a temporary name and renamed, so a
//! concurrent reader never sees half an image.

use super::{CudaError, NVRTC_OPTIONS, program_source};
use cudarc::nvrtc::{result, sys};
use sha2::{Digest, Sha256};
use std::ffi::{CString, c_char};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What NVRTC is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// PTX for a virtual architecture (`compute_XY`), JIT-compiled by the
    /// driver at load; needs a driver at least as new as the NVRTC.
    Ptx,
    /// Machine code for a real architecture (`sm_XY`): loads on any driver
    /// of the same CUDA major version (minor-version compatibility).
    Cubin,
}

impl Output {
    fn ext(self) -> &'static str {
        match self {
            Output::Ptx => "ptx",
            Output::Cubin => "cubin",
        }
    }
}

static LOADED: OnceLock<Result<(), CudaError>> = OnceLock::new();

/// Makes NVRTC loadable (opening `DRAFTWISE_NVRTC_LIB` first when set) and
/// checks it, once per process. After `Ok`, cudarc's NVRTC calls cannot
/// panic for want of the library.
pub fn ensure_loaded() -> Result<(), CudaError> {
    LOADED
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("DRAFTWISE_NVRTC_LIB").filter(|p| !p.is_empty()) {
                let shown = path.to_string_lossy().into_owned();
                // SAFETY: loading NVRTC runs its initializers, which have no
                // preconditions; the handle is leaked so the library stays
                // mapped for the process (cudarc keeps its own by-name handle).
                match unsafe { libloading::Library::new(&path) } {
                    Ok(lib) => std::mem::forget(lib),
                    Err(e) => return Err(CudaError::NvrtcLib { path: shown, msg: e.to_string() }),
                }
            }
            // SAFETY: only tries to open the library by its candidate names.
            if unsafe { sys::is_culib_present() } { Ok(()) } else { Err(CudaError::NoNvrtc) }
        })
        .clone()
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32), CudaError> {
    ensure_loaded()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (above); the out-pointers are valid.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::Compile { arch: String::new(), log: format!("nvrtcVersion: {e:?}") })?;
    Ok((major, minor))
}

/// The architectures this NVRTC can compile for, as numbers (e.g. 90 for sm_90).
pub fn supported_archs() -> Result<Vec<i32>, CudaError> {
    ensure_loaded()?;
    let mut n = 0;
    // SAFETY: NVRTC is loaded; `n` is a valid out-pointer.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| CudaError::Compile { arch: String::new(), log: format!("nvrtcGetNumSupportedArchs: {e:?}") })?;
    let mut archs = vec![0i32; n.max(0) as usize];
    // SAFETY: `archs` has room for the `n` entries NVRTC writes.
    unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(|e| CudaError::Compile { arch: String::new(), log: format!("nvrtcGetSupportedArchs: {e:?}") })?;
    Ok(archs)
}

/// The NVRTC target name for compute capability `cc` (e.g. `sm_90` or `compute_90`).
pub fn target_name(cc: (i32, i32), out: Output) -> String {
    match out {
        Output::Ptx => format!("compute_{}{}", cc.0, cc.1),
        Output::Cubin => format!("sm_{}{}", cc.0, cc.1),
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program` and destroyed only here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn c_chars_to_string(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `src` for `target` (`compute_XY` for [`Output::Ptx`], `sm_XY`
/// for [`Output::Cubin`]) with [`NVRTC_OPTIONS`]. Returns the image: PTX
/// text with its NUL terminator, or the CUBIN bytes.
pub fn compile(src: &str, target: &str, out: Output) -> Result<Vec<u8>, CudaError> {
    ensure_loaded()?;
    let err = |log: String| CudaError::Compile { arch: target.to_string(), log };
    let csrc = CString::new(src).map_err(|_| err("source contains a NUL byte".into()))?;
    let name = CString::new("draftwise_kernels.cu").expect("no NUL");
    let prog = Program(result::create_program(&csrc, Some(&name)).map_err(|e| err(format!("create: {e:?}")))?);
    let mut opts: Vec<String> = NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    opts.push(format!("--gpu-architecture={target}"));
    // SAFETY: `prog` is a live program (destroyed only by its drop).
    if let Err(e) = unsafe { result::compile_program(prog.0, &opts) } {
        // SAFETY: as above.
        let log = unsafe { result::get_program_log(prog.0) }.map(|l| c_chars_to_string(&l)).unwrap_or_default();
        return Err(err(format!("{e:?} (options {opts:?}):\n{log}")));
    }
    match out {
        Output::Ptx => {
            // SAFETY: compiled above.
            let ptx = unsafe { result::get_ptx(prog.0) }.map_err(|e| err(format!("get PTX: {e:?}")))?;
            Ok(ptx.iter().map(|&c| c as u8).collect())
        }
        Output::Cubin => {
            let mut size = 0usize;
            // SAFETY: compiled above for a real architecture; `size` is a
            // valid out-pointer.
            unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
                .result()
                .map_err(|e| err(format!("CUBIN size: {e:?}")))?;
            let mut bin = vec![0u8; size];
            // SAFETY: `bin` has the `size` bytes NVRTC writes.
            unsafe { sys::nvrtcGetCUBIN(prog.0, bin.as_mut_ptr().cast::<c_char>()) }
                .result()
                .map_err(|e| err(format!("get CUBIN: {e:?}")))?;
            Ok(bin)
        }
    }
}

/// The kernel cache directory (module docs).
pub fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("DRAFTWISE_CUDA_CACHE")
        .or_else(|| env("DRAFTWISE_CACHE_DIR").map(|d| d.join("cuda-kernels")))
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("draftwise/cuda-kernels")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/draftwise/cuda-kernels")))
}

/// The cache key of the program for `target` with this NVRTC.
pub fn cache_key(src: &str, target: &str, out: Output, nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    for part in [src.as_bytes(), NVRTC_OPTIONS.join(" ").as_bytes(), target.as_bytes(), out.ext().as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(nvrtc.0.to_le_bytes());
    h.update(nvrtc.1.to_le_bytes());
    let d = h.finalize();
    d.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// How a kernel image was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub bytes: Vec<u8>,
    pub target: String,
    /// The cache file, when a cache directory exists.
    pub path: Option<PathBuf>,
    /// Whether it was read from the cache rather than compiled now.
    pub cache_hit: bool,
}

/// The program compiled for `target`, from the cache in `dir` when present
/// (then no compilation), else compiled and stored there.
pub fn cached_compile(dir: Option<&Path>, target: &str, out: Output) -> Result<Image, CudaError> {
    let src = program_source();
    let key = cache_key(&src, target, out, version()?);
    let path = dir.map(|d| d.join(format!("{key}-{target}.{}", out.ext())));
    if let Some(p) = &path
        && let Ok(bytes) = std::fs::read(p)
        && !bytes.is_empty()
    {
        return Ok(Image { bytes, target: target.into(), path, cache_hit: true });
    }
    let bytes = compile(&src, target, out)?;
    if let Some(p) = &path {
        // A cache that cannot be written costs a compilation next time, not
        // this run: report it and go on.
        if let Err(e) = store(p, &bytes) {
            eprintln!("draftwise: not caching CUDA kernels at {}: {e}", p.display());
        }
    }
    Ok(Image { bytes, target: target.into(), path, cache_hit: false })
}

fn store(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    let tmp = p.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, p)
}

/// The entry points (`.entry NAME`) a PTX image defines.
pub fn ptx_entries(ptx: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(ptx);
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix(".visible .entry ").or_else(|| l.strip_prefix(".entry "))?;
            Some(rest.split(['(', ' ']).next().unwrap_or("").to_string())
        })
        .collect()
}

/// A NUL-terminated PTX image as text (for cudarc's loader).
pub fn ptx_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
