//! Compiles every CUDA kernel with the real NVRTC, for several
//! architectures, so a CUDA compile error fails CI on hosts without a GPU.
//!
//! NVRTC is found through `DRAFTWISE_NVRTC_LIB` (a path to libnvrtc.so.12),
//! else the default venv of `scripts/setup-nvrtc.sh`
//! (`target/nvrtc-venv`), else the dynamic loader's path. Where none has
//! it the test FAILS, naming the setup script: compiling the kernels is the
//! one CUDA check every host can run. `DRAFTWISE_SKIP_NVRTC=1` skips it
//! explicitly (printed), for hosts that cannot install the wheel.
#![cfg(feature = "cuda")]

use kernels::cuda::device::kernel_names;
use kernels::cuda::nvrtc::{self, Output};
use kernels::cuda::program_source;
use std::path::{Path, PathBuf};

/// PTX targets: the oldest architecture we claim (Volta) and the newest
/// feature levels in use. Each compile of the whole program takes 20-40 s
/// of one core here, so the list is short; the runtime compiles CUBIN for
/// the device it finds.
const PTX_ARCHS: [&str; 3] = ["compute_70", "compute_80", "compute_90"];
/// CUBIN targets (what the runtime loads): A100 and H100/H200.
const CUBIN_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

fn default_venv_lib() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.join("target/nvrtc-venv/lib");
    for e in std::fs::read_dir(root).ok()?.flatten() {
        let p = e.path().join("site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

/// Loads NVRTC, or says why not. `None`: skipped on request.
fn nvrtc_or_skip() -> Option<()> {
    if std::env::var("DRAFTWISE_SKIP_NVRTC").is_ok_and(|v| v == "1") {
        // Straight to stderr: the harness captures eprintln! of passing tests.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: DRAFTWISE_SKIP_NVRTC=1: the CUDA kernels were not compiled\n",
        );
        return None;
    }
    if std::env::var_os("DRAFTWISE_NVRTC_LIB").is_none()
        && let Some(p) = default_venv_lib()
    {
        // SAFETY: set before any other thread of this test binary reads the
        // environment (each test calls this first, and the value is the same).
        unsafe { std::env::set_var("DRAFTWISE_NVRTC_LIB", &p) };
    }
    if let Err(e) = nvrtc::ensure_loaded() {
        panic!(
            "{e}\nRun scripts/setup-nvrtc.sh (installs NVRTC from PyPI into target/nvrtc-venv), or set \
             DRAFTWISE_NVRTC_LIB, or skip explicitly with DRAFTWISE_SKIP_NVRTC=1."
        );
    }
    Some(())
}

#[test]
fn every_kernel_compiles_to_ptx_and_cubin_for_every_pinned_architecture() {
    if nvrtc_or_skip().is_none() {
        return;
    }
    let (major, minor) = nvrtc::version().unwrap();
    eprintln!("NVRTC {major}.{minor}; supported: {:?}", nvrtc::supported_archs().unwrap());
    let src = program_source();
    let names = kernel_names();
    for arch in PTX_ARCHS {
        let ptx = nvrtc::compile(&src, arch, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
        let entries = nvrtc::ptx_entries(&ptx);
        for n in &names {
            assert!(entries.contains(n), "{arch}: entry {n} missing; PTX has {entries:?}");
        }
        assert_eq!(entries.len(), names.len(), "{arch}: unexpected entries {entries:?}");
        // No local-memory spills in any kernel: the multi-row accumulators
        // and a unit's quants must stay in registers.
        let text = nvrtc::ptx_text(&ptx);
        assert!(!text.contains(".local"), "{arch}: a kernel uses local memory");
    }
    for arch in CUBIN_ARCHS {
        let bin = nvrtc::compile(&src, arch, Output::Cubin).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&bin[..4], b"\x7fELF", "{arch}: a CUBIN is an ELF image");
    }
}

#[test]
fn a_compile_error_is_reported_with_the_nvrtc_log() {
    if nvrtc_or_skip().is_none() {
        return;
    }
    let e =
        nvrtc::compile("extern \"C\" __global__ void k() { undeclared(); }", "compute_80", Output::Ptx).unwrap_err();
    assert!(e.to_string().contains("undeclared"), "{e}");
}

#[test]
fn the_cache_is_keyed_by_target_and_hit_on_the_second_compile() {
    if nvrtc_or_skip().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("draftwise-nvrtc-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let a = nvrtc::cached_compile(Some(&dir), "sm_80", Output::Cubin).unwrap();
    let b = nvrtc::cached_compile(Some(&dir), "sm_80", Output::Cubin).unwrap();
    assert!(!a.cache_hit && b.cache_hit && a.bytes == b.bytes);
    assert!(a.path.as_ref().unwrap().file_name().unwrap().to_string_lossy().ends_with("-sm_80.cubin"));
    let key80 = nvrtc::cache_key(&program_source(), "sm_80", Output::Cubin, (12, 9));
    let key90 = nvrtc::cache_key(&program_source(), "sm_90", Output::Cubin, (12, 9));
    let key_src = nvrtc::cache_key("other", "sm_80", Output::Cubin, (12, 9));
    assert!(key80 != key90 && key80 != key_src);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The formats without CUDA kernels are refused by name before any upload
/// (no device needed); the runtime then keeps such a model on the CPU.
#[test]
fn the_cuda_backend_refuses_q2_k_q3_k_f16_and_bf16_by_name() {
    use kernels::quant::GgmlType;
    for ty in [GgmlType::Q2K, GgmlType::Q3K, GgmlType::F16, GgmlType::BF16, GgmlType::Q5K] {
        let e = kernels::cuda::device::supports_format(ty).unwrap_err().to_string();
        assert!(e.contains(ty.name()) && e.contains("no CUDA kernel"), "{ty:?}: {e}");
    }
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4K] {
        assert!(kernels::cuda::device::supports_format(ty).is_ok(), "{ty:?}");
    }
}
