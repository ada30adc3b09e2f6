//! Block-quantized storage formats: layouts and scalar dequantization.

pub mod blocks;
pub mod dequant;
pub mod half;

pub use blocks::*;
pub use dequant::{DequantError, dequantize_row};
pub use half::F16;
