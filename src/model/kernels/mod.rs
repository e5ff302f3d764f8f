//! CPU kernels: the SIMD quantized matmul used for sampling GGUF models
//! ([`q4_1`], with f32 activations for output layers in
//! [`f32_activations`]) and the fused training ops with backward passes
//! ([`train_ops`], and the whole causal attention in [`attention`]), and
//! the weight-gradient-free product of frozen weights ([`frozen_matmul`]).

pub mod attention;
mod blocks;
pub mod f32_activations;
pub mod frozen_matmul;
pub mod q4_1;
pub mod train_ops;
