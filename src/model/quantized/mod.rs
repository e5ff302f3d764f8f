//! GGUF files: quantized models run as they are ([`gguf`]) or dequantised to
//! f32 weights for the differentiable decoder ([`dequant`]).

pub mod dequant;
pub mod gguf;
