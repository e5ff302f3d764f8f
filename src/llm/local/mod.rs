//! Local models run in-process with candle: Qwen2 / Qwen2.5 / Qwen3 / Llama
//! from Hugging Face-style directories (safetensors), or GGUF files (run
//! quantized, or dequantised to f32 for training by [`dequant`]).
//!
//! [`LocalModel::generate`] applies the chat template, samples with a KV cache
//! and records each sampled token's log-probability (for PPO).
//! [`Transformer`] is the project's own decoder, differentiable for training.

pub mod bench;
pub mod chat;
pub mod chat_template;
pub mod config;
pub mod dequant;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod gguf_llama;
pub mod model;
pub mod q4_1;
pub mod sampling;
pub mod shared;
pub mod tiny;
pub mod tokenizer;
pub mod train_ops;
pub mod transformer;
pub mod weights;

pub use chat::LocalChat;
pub use chat_template::{ChatTemplate, TemplateMessage};
pub use config::{Arch, ModelConfig};
pub use error::LocalError;
pub use fetch::fetch_smollm2;
pub use model::{
    Backend, BatchOptions, FinishReason, GenTimings, Generation, LocalModel, PromptCache,
};
pub use sampling::{Sampler, SamplingConfig};
pub use shared::{Seat, SharedModel};
pub use tokenizer::ChatTokenizer;
pub use transformer::{KvCache, Transformer};

#[cfg(test)]
mod tests;
