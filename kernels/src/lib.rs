//! draftwise `kernels`: every numeric hot path of the engine.
//!
//! - [`quant`]: the block-quantized storage formats and their scalar dequantization.
//! - [`dispatch`]: run-time choice of the CPU kernel family ([`dispatch::KernelFamily`]).

pub mod dispatch;
pub mod quant;
