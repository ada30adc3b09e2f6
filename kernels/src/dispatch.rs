//! Run-time selection of the CPU kernel family.
//!
//! The CPU is probed once; the chosen family is cached for the life of the
//! process (memchr's approach). `DRAFTWISE_KERNELS` forces a family
//! (`scalar`, `avx2`, `avx512vnni`); forcing one this CPU cannot run is
//! refused with an error rather than crashing on an illegal instruction.
//!
//! The thresholds that steer the multi-row mat-vec ([`max_rows_per_pass`],
//! [`ROW_TILE`]) live here too, each with the measurement behind it, and
//! `DRAFTWISE_MULTIROW=0` ([`multirow_enabled`]) turns the multi-row pass
//! off as a control.

use std::sync::OnceLock;

/// The name of a family of CPU kernels: what `DRAFTWISE_KERNELS` says and
/// a device class carries. Every family computes exactly the same numbers
/// (integer dot products are exact and float sums run in one fixed order),
/// so the family decides speed, never output. Naming a family does not make
/// it runnable here: a [`KernelFamily`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FamilyKind {
    /// Portable Rust: the specification every other family is tested against.
    Scalar,
    /// x86_64 AVX2 + FMA + F16C.
    Avx2,
    /// x86_64 AVX-512 (F, BW, VL) with VNNI integer dot products.
    Avx512Vnni,
}

impl FamilyKind {
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
}

/// A family of CPU kernels that this CPU was checked to run. Only this
/// module makes one, and only after the check ([`KernelFamily::of`],
/// [`best`](KernelFamily::best), [`all_supported`](KernelFamily::all_supported),
/// [`select`]; [`KernelFamily::SCALAR`] runs everywhere), so every kernel
/// entry that takes one runs the family's instructions without checking
/// again: running them on a CPU without them would be undefined behaviour,
/// and a value that says they are there is the proof that they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelFamily(FamilyKind);

impl KernelFamily {
    /// The portable family, which every CPU runs.
    pub const SCALAR: KernelFamily = KernelFamily(FamilyKind::Scalar);

    /// The family `kind`, if this CPU can run it.
    pub fn of(kind: FamilyKind) -> Option<Self> {
        kind.is_supported().then_some(KernelFamily(kind))
    }

    pub fn kind(self) -> FamilyKind {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Every family this CPU supports, scalar first.
    pub fn all_supported() -> Vec<Self> {
        [FamilyKind::Scalar, FamilyKind::Avx2, FamilyKind::Avx512Vnni].into_iter().filter_map(Self::of).collect()
    }

    /// The fastest family this CPU supports.
    pub fn best() -> Self {
        *Self::all_supported().last().unwrap_or(&Self::SCALAR)
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
            let kind = FamilyKind::from_name(name).ok_or_else(|| DispatchError::Unknown(name.to_string()))?;
            let Some(family) = KernelFamily::of(kind) else {
                let here: Vec<_> = KernelFamily::all_supported().iter().map(|f| f.name()).collect();
                return Err(DispatchError::Unsupported(kind.name(), here.join(", ")));
            };
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

/// Activation rows whose accumulators one AVX2 pass keeps in registers.
///
/// Row-interleaved formats: two 256-bit integer accumulators and one float
/// accumulator per activation row, plus the widened weights and scales;
/// four rows fit the sixteen `ymm` registers. K-quants: two float
/// accumulators per row (even and odd blocks) and the min-term ones.
pub const AVX2_MAX_ROWS: usize = 4;

/// Activation rows whose accumulators one AVX-512 pass keeps in registers.
///
/// Row-interleaved formats (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0): per activation row
/// one float accumulator for sixteen outputs and one or two integer ones
/// (three registers for up to four rows, two beyond), so eight rows use
/// 16–24 of the 32 `zmm` registers beside the widened weights and scales
/// (and Q5's fifth-bit words and masks). K-quants:
/// one accumulator per row plus the min term and a scale vector. Wider
/// blocks run in chunks of this many, re-reading weights that are still in
/// L1 (see [`ROW_TILE`]).
pub const AVX512_MAX_ROWS: usize = 8;

/// Weight rows handled per tile of a multi-row call: when a block is wider
/// than one pass, every chunk of activation rows re-reads a tile's weights,
/// and sixteen rows of the largest default-model matrix (1536 columns of
/// Q4_1, 960 bytes a row) stay in a 48 KiB L1 data cache between chunks.
/// It is also one group of the row-interleaved layout, and the runtime
/// aligns its per-thread bands of output rows to it, so no group is split
/// between threads.
pub const ROW_TILE: usize = 16;

/// K-quant weight rows a SIMD pass interleaves for `w` activation rows: each
/// (weight row, activation row) output is its own accumulator chain, and a
/// single chain per step leaves the FMA and gather latencies exposed at
/// small `w`; more chains than this run out of registers.
///
/// Measured on the Sapphire Rapids host (Q4_1 1536×576, alternating runs):
/// AVX-512 at `w = 1` four rows beat one by about 1.2x; at `w = 3` two rows
/// beat one by 8–10%, at `w = 4` two rows lost 18% (spills: 8 accumulators,
/// 8 min-term accumulators and 8 scale vectors). AVX2 needs two accumulators
/// per output in sixteen registers: at `w = 1` four rows spilled; two and
/// one measured the same.
pub const fn interleaved_rows(family: FamilyKind, w: usize) -> usize {
    match (family, w) {
        (FamilyKind::Avx512Vnni, 1) => 4,
        (FamilyKind::Avx512Vnni, 2 | 3) | (FamilyKind::Avx2, 1) => 2,
        _ => 1,
    }
}

/// The widest register-blocked pass of a family: a call with more
/// activation rows runs in chunks of this many.
pub fn max_rows_per_pass(family: KernelFamily) -> usize {
    match family.kind() {
        FamilyKind::Scalar => 1,
        FamilyKind::Avx2 => AVX2_MAX_ROWS,
        FamilyKind::Avx512Vnni => AVX512_MAX_ROWS,
    }
}

/// Whether one pass over the weights serves several activation rows
/// (the default). `DRAFTWISE_MULTIROW=0` (or `false`, `off`) routes a
/// `W`-row product through the single-row kernel `W` times, a control for
/// measurements; the numbers are the same either way. Read once.
pub fn multirow_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| multirow_from(std::env::var("DRAFTWISE_MULTIROW").ok().as_deref()))
}

fn multirow_from(v: Option<&str>) -> bool {
    !matches!(v.map(|s| s.trim().to_ascii_lowercase()).as_deref(), Some("0" | "false" | "off" | "no"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn multirow_is_on_unless_switched_off() {
        assert!(multirow_from(None) && multirow_from(Some("1")) && multirow_from(Some("")));
        assert!(!multirow_from(Some("0")) && !multirow_from(Some(" off ")) && !multirow_from(Some("FALSE")));
    }

    use super::*;

    #[test]
    fn scalar_is_always_supported_and_listed_first() {
        let all = KernelFamily::all_supported();
        assert_eq!(all[0], KernelFamily::SCALAR);
    }

    #[test]
    fn a_family_is_made_only_where_this_cpu_runs_it() {
        for kind in [FamilyKind::Scalar, FamilyKind::Avx2, FamilyKind::Avx512Vnni] {
            assert_eq!(KernelFamily::of(kind).is_some(), kind.is_supported(), "{kind:?}");
            assert_eq!(KernelFamily::of(kind).map(KernelFamily::kind), kind.is_supported().then_some(kind));
        }
        assert!(KernelFamily::all_supported().iter().all(|f| f.kind().is_supported()));
        // Forcing a family the CPU lacks is refused, not made.
        for kind in [FamilyKind::Avx2, FamilyKind::Avx512Vnni] {
            let r = select(Some(kind.name()));
            assert_eq!(r.is_ok(), kind.is_supported(), "{kind:?}");
        }
    }

    #[test]
    fn forcing_an_unknown_family_is_an_error_naming_it() {
        let e = select(Some("sse9")).unwrap_err();
        assert!(e.to_string().contains("sse9"), "{e}");
    }

    #[test]
    fn forcing_scalar_is_reported_as_forced() {
        let s = select(Some("scalar")).unwrap();
        assert_eq!(s, Selection { family: KernelFamily::SCALAR, forced: true });
        assert!(!select(None).unwrap().forced);
    }
}
