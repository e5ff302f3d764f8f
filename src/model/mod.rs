//! The local model engine: Qwen2 / Qwen2.5 / Qwen3 / Llama decoders run
//! in-process with candle, from Hugging Face-style directories (safetensors)
//! or GGUF files (run quantized, or dequantised to f32 for training).
//!
//! Laid out like candle's own split:
//! - [`models`]: the architectures: the project's differentiable
//!   [`Transformer`], the batched GGUF llama, and tiny models built in-process;
//! - [`quantized`]: GGUF files and their dequantisation to f32;
//! - [`kernels`]: CPU kernels: the `Q4_1`/`Q8_0` SIMD matmul and the fused
//!   training ops with backward passes;
//! - [`text`]: tokenizer and Jinja chat templates;
//! - [`generation`]: [`LocalModel`] (load, generate, batch), sampling, and
//!   [`SharedModel`] (one model batching many concurrent callers);
//! - [`config`], [`weights`]: `config.json` and safetensors files;
//! - [`fetch`]: SmolLM2 through pip (`endless bench sample` is `crate::bench`);
//! - [`threads`]: one pool of compute threads for candle and this crate.
//!
//! [`LocalModel::generate`] applies the chat template, samples with a KV cache
//! and records each sampled token's log-probability (for PPO). Nothing here
//! knows about chat-model traits, agents or training loops: `llm` adapts this
//! engine to its `ChatModel` trait, `rl` trains [`Transformer`]s.

pub mod config;
pub mod error;
pub mod fetch;
pub mod generation;
pub mod kernels;
pub mod models;
pub mod numerics;
pub mod quantized;
pub mod text;
pub mod threads;
pub mod weights;

pub use config::{Arch, ModelConfig};
pub use error::LocalError;
pub use fetch::fetch_smollm2;
pub use generation::local_model::{
    Backend, BatchOptions, FinishReason, GenTimings, Generation, LocalModel, PromptCache,
};
pub use generation::sampling::{Sampler, SamplingConfig};
pub use generation::shared::{Seat, SharedModel};
pub use models::transformer::{KvCache, Transformer, KV_RESERVE};
pub use text::chat_template::{ChatTemplate, TemplateMessage};
pub use text::tokenizer::ChatTokenizer;

#[cfg(test)]
pub(crate) mod tests;
