//! CPU kernels: the SIMD quantized matmul used for sampling GGUF models
//! ([`q4_1`], with f32 activations for output layers in
//! [`f32_activations`]) and the fused training ops with backward passes
//! ([`train_ops`], and the whole causal attention in [`attention`]), and
//! the weight-gradient-free product of frozen weights ([`frozen_matmul`]),
//! the trained projection with its bias ([`linear`]),
//! the softmax normaliser of a sampled token ([`exp_sum`]),
//! and for decoding steps the product of a few rows with a weight
//! ([`few_rows`]) and the attention over the cache ([`decode_attention`]),
//! whose parallel loops a decoding step hands to a spinning team of rayon's
//! threads ([`with_spinning_team`]).
//!
//! The instruction set of the kernels with SIMD paths is chosen once, at
//! run time ([`level`]: portable, AVX2, AVX-512, AVX-512 VNNI; the
//! `ENDLESS_KERNELS` variable forces one), and every kernel counts its calls
//! per path ([`ran`]) so that benchmarks name the kernels that ran.

pub mod attention;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod blocks;
mod columns;
pub mod decode_attention;
pub mod exp_sum;
pub mod f32_activations;
pub mod few_rows;
pub mod frozen_matmul;
pub mod level;
pub mod linear;
pub mod q4_1;
pub mod ran;
mod team;
pub use team::with_spinning_team;
pub mod train_ops;
mod weight_blocks;
