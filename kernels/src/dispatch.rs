//! Run-time selection of the CPU kernel family.
//!
//! The CPU is probed once; the chosen family is cached for the life of the
//! process (memchr's approach). `DRAFTWISE_KERNELS` forces a family
//! (`scalar`, `avx2`, `avx512vnni`); forcing one this CPU cannot run is
//! refused with an error rather than crashing on an illegal instruction.

use std::sync::OnceLock;

/// A family of CPU kernels. Every family computes exactly the same numbers
/// (integer dot products are exact and float sums run in one fixed order), so
/// the family decides speed, never output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelFamily {
    /// Portable Rust: the specification every other family is tested against.
    Scalar,
    /// x86_64 AVX2 + FMA + F16C.
    Avx2,
    /// x86_64 AVX-512 (F, BW, VL) with VNNI integer dot products.
    Avx512Vnni,
}

impl KernelFamily {
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx512Vnni => "avx512vnni",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "scalar" => Some(Self::Scalar),
            "avx2" => Some(Self::Avx2),
            "avx512vnni" => Some(Self::Avx512Vnni),
            _ => None,
        }
    }

    /// Whether this CPU can execute the family's instructions.
    pub fn is_supported(self) -> bool {
        match self {
            Self::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Self::Avx512Vnni => {
                Self::Avx2.is_supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every family this CPU supports, scalar first.
    pub fn all_supported() -> Vec<Self> {
        [Self::Scalar, Self::Avx2, Self::Avx512Vnni].into_iter().filter(|f| f.is_supported()).collect()
    }

    /// The fastest family this CPU supports.
    pub fn best() -> Self {
        *Self::all_supported().last().unwrap_or(&Self::Scalar)
    }

    /// The device-class string of the policy table for this family
    /// (`cpu:x86_64-avx512vnni`, `cpu:x86_64-avx2`, `cpu:x86_64-scalar`).
    pub fn device_class(self) -> String {
        format!("cpu:{}-{}", std::env::consts::ARCH, self.name())
    }
}

/// Why a forced kernel family was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DispatchError {
    #[error("DRAFTWISE_KERNELS={0:?} is not a kernel family; use scalar, avx2 or avx512vnni")]
    Unknown(String),
    #[error("DRAFTWISE_KERNELS={0} asks for a family this CPU cannot run; supported here: {1}")]
    Unsupported(&'static str, String),
}

/// The family chosen for this process, and whether it was forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    pub family: KernelFamily,
    pub forced: bool,
}

/// Picks the family from an optional override, without caching.
pub fn select(forced: Option<&str>) -> Result<Selection, DispatchError> {
    match forced.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(Selection { family: KernelFamily::best(), forced: false }),
        Some(name) => {
            let family = KernelFamily::from_name(name).ok_or_else(|| DispatchError::Unknown(name.to_string()))?;
            if !family.is_supported() {
                let here: Vec<_> = KernelFamily::all_supported().iter().map(|f| f.name()).collect();
                return Err(DispatchError::Unsupported(family.name(), here.join(", ")));
            }
            Ok(Selection { family, forced: true })
        }
    }
}

static SELECTED: OnceLock<Result<Selection, DispatchError>> = OnceLock::new();

/// The process-wide selection: `DRAFTWISE_KERNELS` if set, else the best
/// supported family. Computed once.
pub fn selected() -> Result<Selection, DispatchError> {
    SELECTED.get_or_init(|| select(std::env::var("DRAFTWISE_KERNELS").ok().as_deref())).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_supported_and_listed_first() {
        let all = KernelFamily::all_supported();
        assert_eq!(all[0], KernelFamily::Scalar);
    }

    #[test]
    fn forcing_an_unknown_family_is_an_error_naming_it() {
        let e = select(Some("sse9")).unwrap_err();
        assert!(e.to_string().contains("sse9"), "{e}");
    }

    #[test]
    fn forcing_scalar_is_reported_as_forced() {
        let s = select(Some("scalar")).unwrap();
        assert_eq!(s, Selection { family: KernelFamily::Scalar, forced: true });
        assert!(!select(None).unwrap().forced);
    }
}
