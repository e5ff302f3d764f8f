//! CPU kernels: the SIMD quantized matmul used for sampling GGUF models
//! ([`q4_1`]) and the fused training ops with backward passes
//! ([`train_ops`]).

pub mod q4_1;
pub mod train_ops;
