//! Block-quantized storage formats: layouts and scalar dequantization.

pub mod blocks;
pub mod dequant;

pub use blocks::*;
pub use dequant::{DequantError, dequantize_row};
