//! Architectures: the project's own decoder ([`transformer`]), the batched
//! GGUF llama ([`gguf_llama`]), and tiny randomly initialised models
//! ([`tiny`]) for tests and `--init tiny`; LoRA adapters on a frozen decoder
//! ([`lora`]: the layers; [`adapter`]: their checkpoints).

pub mod adapter;
pub mod gguf_llama;
pub mod lora;
pub mod tiny;
pub mod transformer;
