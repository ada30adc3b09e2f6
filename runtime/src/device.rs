//! Where forward passes run: `--device cpu|cuda[:N]` (or `DRAFTWISE_DEVICE`).
//!
//! Without the flag, CUDA device 0 is used when this build has the `cuda`
//! feature and the driver, NVRTC and a device are all usable; otherwise the
//! CPU, with a message saying why when a CUDA build finds no usable device.
//! Asking for `cuda` explicitly and not getting it is an error, never a
//! silent CPU run: a measurement must run where it says it ran.

use crate::model::Loaded;
use serde::{Deserialize, Serialize};

/// What the operator asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRequest {
    /// No flag: CUDA device 0 when usable, else the CPU.
    Auto,
    Cpu,
    Cuda(usize),
}

/// Why a device setting was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("--device {0:?}: give cpu, cuda or cuda:N")]
    Parse(String),
    #[error("--device cuda:{ordinal} cannot be used")]
    Cuda {
        ordinal: usize,
        #[source]
        source: kernels::cuda::CudaError,
    },
    #[error(
        "--device cuda:{ordinal}: the {architecture} block runs on the CPU only ({what}: no CUDA kernels \
         yet); use --device cpu"
    )]
    CpuOnlyArchitecture { ordinal: usize, architecture: String, what: &'static str },
}

impl DeviceRequest {
    /// Parses `cpu`, `cuda`, `cuda:N`; `None` or empty is [`DeviceRequest::Auto`].
    pub fn parse(s: Option<&str>) -> Result<Self, DeviceError> {
        let Some(s) = s.map(str::trim).filter(|s| !s.is_empty()) else { return Ok(Self::Auto) };
        match s {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| DeviceError::Parse(s.to_string())),
        }
    }
}

/// What `startup` reports about a CUDA device.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CudaReport {
    pub ordinal: usize,
    pub name: String,
    /// `sm_XY`.
    pub arch: String,
    /// The driver's CUDA version, `major.minor`.
    pub driver: String,
    /// NVRTC's version, `major.minor`.
    pub nvrtc: String,
    /// Where the compiled kernels were cached, and whether this run found them there.
    pub kernel_cache: Option<String>,
    pub kernel_cache_hit: bool,
    /// Device memory the weights occupy.
    pub weight_bytes: usize,
}

/// Puts `loaded`'s forward passes on the requested device. Returns the CUDA
/// report when they run on a GPU, `None` on the CPU.
pub fn place(loaded: &mut Loaded, req: DeviceRequest) -> Result<Option<CudaReport>, DeviceError> {
    let cpu_only = loaded.model.config.cuda_unsupported();
    match req {
        DeviceRequest::Cpu => Ok(None),
        DeviceRequest::Cuda(ordinal) if cpu_only.is_some() => Err(DeviceError::CpuOnlyArchitecture {
            ordinal,
            architecture: loaded.info.architecture.clone(),
            what: cpu_only.unwrap_or_default(),
        }),
        DeviceRequest::Auto if cpu_only.is_some() => {
            if kernels::cuda::built() {
                tracing::info!("the {} block runs on the CPU only; running on the CPU", loaded.info.architecture);
            }
            Ok(None)
        }
        DeviceRequest::Cuda(ordinal) => {
            attach(loaded, ordinal).map(Some).map_err(|source| DeviceError::Cuda { ordinal, source })
        }
        DeviceRequest::Auto => {
            if !kernels::cuda::built() {
                return Ok(None);
            }
            match attach(loaded, 0) {
                Ok(r) => Ok(Some(r)),
                Err(e) => {
                    tracing::info!("CUDA is not usable ({e}); running on the CPU (--device cpu silences this)");
                    Ok(None)
                }
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn attach(loaded: &mut Loaded, ordinal: usize) -> Result<CudaReport, kernels::cuda::CudaError> {
    use kernels::cuda::device::CudaDevice;
    let dev = CudaDevice::open(ordinal)?;
    // The device pass runs the K-quants at the model's activation precision
    // (attach_cuda copies it to the device model).
    loaded.model.attach_cuda(std::sync::Arc::clone(&dev))?;
    let weight_bytes = loaded.model.cuda.as_ref().map_or(0, |g| g.weight_bytes);
    let info = &dev.info;
    let report = CudaReport {
        ordinal,
        name: info.name.clone(),
        arch: format!("sm_{}{}", info.compute_capability.0, info.compute_capability.1),
        driver: info.driver_version_string(),
        nvrtc: format!("{}.{}", info.nvrtc_version.0, info.nvrtc_version.1),
        kernel_cache: dev.image.path.as_ref().map(|p| p.display().to_string()),
        kernel_cache_hit: dev.image.cache_hit,
        weight_bytes,
    };
    tracing::info!(
        "running on CUDA device {ordinal}: {} ({}, driver {}, NVRTC {}, kernels {})",
        report.name,
        report.arch,
        report.driver,
        report.nvrtc,
        if report.kernel_cache_hit { "from the cache" } else { "compiled now" }
    );
    Ok(report)
}

#[cfg(not(feature = "cuda"))]
fn attach(_loaded: &mut Loaded, _ordinal: usize) -> Result<CudaReport, kernels::cuda::CudaError> {
    Err(kernels::cuda::CudaError::NotBuilt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_flags_parse_and_bad_ones_are_refused() {
        assert_eq!(DeviceRequest::parse(None).unwrap(), DeviceRequest::Auto);
        assert_eq!(DeviceRequest::parse(Some("")).unwrap(), DeviceRequest::Auto);
        assert_eq!(DeviceRequest::parse(Some("cpu")).unwrap(), DeviceRequest::Cpu);
        assert_eq!(DeviceRequest::parse(Some("cuda")).unwrap(), DeviceRequest::Cuda(0));
        assert_eq!(DeviceRequest::parse(Some("cuda:3")).unwrap(), DeviceRequest::Cuda(3));
        for bad in ["gpu", "cuda:", "cuda:x", "CPU"] {
            assert!(DeviceRequest::parse(Some(bad)).is_err(), "{bad}");
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn asking_for_cuda_in_a_cpu_build_says_how_to_get_it() {
        let e = kernels::cuda::probe(0).unwrap_err();
        assert!(matches!(e, kernels::cuda::CudaError::NotBuilt));
        assert!(e.to_string().contains("--features cuda"), "{e}");
    }
}
