//! draftwise `kernels`: every numeric hot path of the engine.
//!
//! - [`quant`]: the block-quantized storage formats ([`quant::GgmlType`],
//!   `BlockQ4_1`, ...) and their scalar dequantization.
//! - [`act`]: activation rows quantized to 16-bit blocks for integer dots
//!   ([`act::ActRow`], viewed as [`act::QRow`]).
//! - [`act8`]: the activation [`act8::Precision`] and 8-bit rows per 256
//!   elements for the K-quants ([`act8::ActRow8`], viewed as [`act8::Q8Row`]).
//! - [`matvec`]: quantized mat-vec ([`matvec::Matrix`], [`matvec::matvec_rows`],
//!   [`matvec::matmul_rows`]), single- and multi-row, scalar specification
//!   plus SIMD families.
//! - [`ops`]: RMSNorm, RoPE, softmax, SwiGLU, the reference attention.
//! - [`attn`]: attention over the CPU KV cache (tiled f16 keys, f16
//!   values), every query of a KV head in one call.
//! - [`cuda`]: the CUDA kernels (`kernels/cuda/*.cu`, NVRTC-compiled at run
//!   time) and their launcher; the launcher needs feature `cuda`.
//! - [`pages`]: the memory the repacked weights live in ([`pages::WeightArena`],
//!   one mapping per model with transparent huge pages advised).
//! - [`dispatch`]: run-time choice of the CPU kernel family ([`dispatch::KernelFamily`])
//!   and the thresholds that steer the multi-row pass.

pub mod act;
pub mod act8;
pub mod attn;
pub mod cuda;
pub mod dispatch;
pub mod matvec;
pub mod ops;
pub mod pages;
pub mod quant;

// Quantized weights are viewed in place as `#[repr(C)]` block structs whose
// scale fields are little-endian `u16` (GGUF's byte order).
#[cfg(not(target_endian = "little"))]
compile_error!("draftwise kernels read GGUF blocks in place and need a little-endian target");
