//! Element-wise and small reduction kernels of the transformer block:
//! RMSNorm, rotary position embedding, softmax, SwiGLU, attention, a file
//! each ([`norm`], [`rope`], [`softmax`], [`glu`], [`attention`]).
//!
//! These run once per row per layer on vectors of a few hundred elements;
//! their cost is small beside the mat-vecs, so each has one scalar
//! implementation, written so that every call is a pure function of its
//! inputs (the same row gives the same bits whichever thread or block runs
//! it). Dot products go through [`crate::matvec::scalar::dot_f32`]'s fixed
//! order, with its SIMD twin when the family has one.

mod attention;
mod glu;
mod norm;
mod rope;
mod softmax;

pub use attention::{KvElem, attend_head};
pub use glu::{geglu_tanh, swiglu};
pub use norm::rmsnorm;
pub use rope::{RopePairing, rope, rope_angles};
pub use softmax::{exp_nonpositive, softmax, softmax_in};

use crate::dispatch::{FamilyKind, KernelFamily};
use crate::matvec::scalar::dot_f32;

/// `Σ a·b` in [`dot_f32`]'s order, using the family's SIMD twin when present.
#[inline]
pub fn dot(family: KernelFamily, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if family.kind() != FamilyKind::Scalar {
        // SAFETY: every non-scalar x86 family includes AVX2, and a
        // `KernelFamily` is checked when made.
        return unsafe { crate::matvec::x86_dot_f32(a, b) };
    }
    let _ = family;
    dot_f32(a, b)
}

#[cfg(test)]
mod tests;
