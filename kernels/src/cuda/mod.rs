//! CUDA kernels: the `.cu` sources in `kernels/cuda/`, compiled at run time
//! with NVRTC for the device's compute capability, and their launcher.
//!
//! - [`SOURCES`] / [`program_source`]: the kernel sources, embedded with
//!   `include_str!` (so the kernel fingerprint, which hashes `kernels/cuda/`,
//!   covers exactly what runs), concatenated into one NVRTC program.
//! - [`dispatch`]: which multi-row kernel a block of `W` activation rows
//!   runs, in one place ([`dispatch::CUDA_ROWS_PER_PASS`]).
//! - [`nvrtc`] (feature `cuda`): loading NVRTC without panicking, compiling
//!   to PTX or CUBIN, and the on-disk cache keyed by source hash and
//!   architecture.
//! - [`device`] (feature `cuda`): [`device::CudaDevice`] (context, stream,
//!   loaded module) with one typed launch method per kernel, device
//!   matrices ([`device::DevMatrix`]) and activation buffers.
//!
//! Without the `cuda` feature the same entry points exist and return
//! [`CudaError::NotBuilt`]; nothing panics.
//!
//! cudarc loads `libcuda` and `libnvrtc` lazily and *panics* when they are
//! absent (../shared/DEPENDENCIES.md), so [`probe`] checks both with
//! `is_culib_present` before any other call.
//!
//! Exactness contract on the GPU (docs/cuda.md): a multi-row mat-vec row
//! equals the single-row kernel's bit for bit (same per-lane unit order,
//! same warp reduction tree, whatever the width); every row kernel computes
//! a row with a fixed set of threads in a fixed order. GPU results match the
//! CPU scalar specification within documented tolerances, not bitwise —
//! except the K-quants against 8-bit activations
//! ([`Precision::Int8`](crate::act8::Precision): `quantize_act8` and
//! `matvec_{q4_k,q6_k}_q8_k_r<NR>`), which run
//! [`crate::matvec::scalar8`]'s float chain exactly and so equal it bit for
//! bit.

#[cfg(feature = "cuda")]
pub mod device;
pub mod dispatch;
#[cfg(feature = "cuda")]
pub mod nvrtc;

/// What a CUDA test does with `device` (a device, a model placed on one, or
/// why there is none): without one it says on stderr why it is skipped and
/// goes on as passed (`None`), unless `DRAFTWISE_REQUIRE_CUDA=1`
/// (scripts/device-check.sh) makes the missing device a failure.
pub fn or_skip_test<T>(device: Result<T, String>) -> Option<T> {
    match device {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("DRAFTWISE_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("DRAFTWISE_REQUIRE_CUDA=1 but the CUDA device cannot be used: {e}");
            }
            // Straight to stderr: the harness captures eprintln! of passing tests.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("SKIPPED: no usable CUDA device: {e}\n").as_bytes(),
            );
            None
        }
    }
}

/// The kernel sources, in program order: (file name, text).
pub const SOURCES: [(&str, &str); 5] = [
    ("common.cuh", include_str!("../../cuda/common.cuh")),
    ("quantize.cu", include_str!("../../cuda/quantize.cu")),
    ("matvec.cu", include_str!("../../cuda/matvec.cu")),
    ("ops.cu", include_str!("../../cuda/ops.cu")),
    ("attention.cu", include_str!("../../cuda/attention.cu")),
];

/// The one NVRTC program: every source in [`SOURCES`] order, each preceded
/// by a `#line` directive so compiler messages name the original file.
pub fn program_source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s.push_str(&format!("#line 1 \"{name}\"\n"));
        s.push_str(text);
        if !text.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

/// NVRTC options every compilation uses (the architecture is added per
/// target). `--fmad=false`: a multiply and an add are never fused unless a
/// kernel says `__fmaf_rn`, so results follow the source's operation order;
/// IEEE division and square root, as the CPU.
pub const NVRTC_OPTIONS: [&str; 4] = ["--std=c++17", "--fmad=false", "--prec-div=true", "--prec-sqrt=true"];

/// Why the CUDA backend cannot be used, or a CUDA call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error("this build has no CUDA support; rebuild with `--features cuda`")]
    NotBuilt,
    #[error("no CUDA driver: libcuda.so.1 could not be loaded (install the NVIDIA driver, or use --device cpu)")]
    NoDriver,
    #[error(
        "NVRTC not found: libnvrtc.so.12 could not be loaded (install the CUDA 12 NVRTC library, e.g. \
         `pip install nvidia-cuda-nvrtc-cu12`, and set DRAFTWISE_NVRTC_LIB to the libnvrtc.so.12 it installs, \
         or put its directory on LD_LIBRARY_PATH)"
    )]
    NoNvrtc,
    #[error("DRAFTWISE_NVRTC_LIB={path}: {msg}")]
    NvrtcLib { path: String, msg: String },
    #[error("no CUDA device {ordinal}: {msg}")]
    NoDevice { ordinal: usize, msg: String },
    #[error("CUDA driver call failed: {0}")]
    Driver(String),
    #[error("NVRTC could not compile the kernels for {arch}: {log}")]
    Compile { arch: String, log: String },
    #[error("{0} weights have no CUDA kernel")]
    Unsupported(&'static str),
    #[error("kernel cache {path}: {msg}")]
    Cache { path: String, msg: String },
}

/// What [`probe`] found about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// (major, minor) compute capability.
    pub compute_capability: (i32, i32),
    /// `cuDriverGetVersion`, e.g. 12080 for CUDA 12.8.
    pub driver_version: i32,
    /// NVRTC's (major, minor) version.
    pub nvrtc_version: (i32, i32),
    /// Total device memory in bytes.
    pub total_mem: usize,
}

impl DeviceInfo {
    /// The policy table's device class: `cuda:sm_XY`.
    pub fn device_class(&self) -> String {
        format!("cuda:sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }

    /// The driver version as `major.minor`.
    pub fn driver_version_string(&self) -> String {
        format!("{}.{}", self.driver_version / 1000, (self.driver_version % 1000) / 10)
    }
}

/// Checks that the driver and NVRTC load and that device `ordinal` exists,
/// without touching anything that could panic.
#[cfg(feature = "cuda")]
pub fn probe(ordinal: usize) -> Result<DeviceInfo, CudaError> {
    device::probe(ordinal)
}

/// Without the `cuda` feature: always [`CudaError::NotBuilt`].
#[cfg(not(feature = "cuda"))]
pub fn probe(_ordinal: usize) -> Result<DeviceInfo, CudaError> {
    Err(CudaError::NotBuilt)
}

/// Whether this build includes the CUDA backend.
pub const fn built() -> bool {
    cfg!(feature = "cuda")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_source_holds_every_file_in_order() {
        let s = program_source();
        let mut at = 0;
        for (name, text) in SOURCES {
            let p = s[at..].find(&format!("#line 1 \"{name}\"")).expect(name) + at;
            assert!(s[p..].contains(text.trim()));
            at = p;
        }
    }

    #[test]
    fn device_class_and_driver_version_read_as_documented() {
        let d = DeviceInfo {
            ordinal: 0,
            name: "x".into(),
            compute_capability: (9, 0),
            driver_version: 12080,
            nvrtc_version: (12, 9),
            total_mem: 0,
        };
        assert_eq!((d.device_class().as_str(), d.driver_version_string().as_str()), ("cuda:sm_90", "12.8"));
    }
}
