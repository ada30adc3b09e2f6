//! RMSNorm: `x / sqrt(mean(x²) + eps) · w`, the sum of squares in
//! [`super::dot`]'s order.

use super::dot;
use crate::dispatch::KernelFamily;

/// RMSNorm: `out[i] = (x[i] * r) * w[i]` with `r = 1 / sqrt(mean(x²) + eps)`
/// (Zhang & Sennrich 2019).
pub fn rmsnorm(family: KernelFamily, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert!(x.len() == w.len() && x.len() == out.len());
    let ms = dot(family, x, x) / x.len() as f32;
    let r = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * r) * g;
    }
}
