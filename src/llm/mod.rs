//! Chat models: the [`ChatModel`] trait, an OpenAI-compatible client, and
//! [`LocalChat`], the adapter that puts the in-process engine of
//! [`crate::model`] behind the same trait (the `local:` policy).
//!
//! The agent's `openai:` and `local:` policies and the generation pipeline
//! all talk to language models through this trait.

mod local;
mod openai;
mod request_shape;

pub use local::{LocalChat, DEFAULT_MAX_TOKENS};
pub use openai::{api_key_from_env, OpenAiChat, OpenAiConfig, RetryPolicy};
pub use request_shape::is_reasoning_model;

use serde::{Deserialize, Serialize};

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Sampling parameters of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// Upper bound on generated tokens; `None` leaves it to the server.
    pub max_tokens: Option<u32>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: Some(4096),
        }
    }
}

/// Tokens used by one or more requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl TokenUsage {
    /// Add another usage to this one.
    pub fn add(&mut self, other: TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
    /// Prompt plus completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// A model's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant text (empty when the server sent none).
    pub content: String,
    pub usage: TokenUsage,
    /// The server's finish reason, when given (`stop`, `length`, ...).
    pub finish_reason: Option<String>,
    /// How many attempts the request took (1 = no retry).
    pub attempts: u32,
}

/// Why a chat request failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the model server at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("model server at {url} timed out after {attempts} attempt(s)")]
    Timeout { url: String, attempts: u32 },
    #[error("model server at {url} answered HTTP {status} after {attempts} attempt(s): {body}")]
    Http {
        url: String,
        status: u16,
        attempts: u32,
        body: String,
    },
    #[error("model server at {url} sent a reply that is not a chat completion: {message}")]
    BadReply { url: String, message: String },
    #[error("invalid model configuration: {0}")]
    Config(String),
}

/// A chat-completion model. Implementations must allow many concurrent calls.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// A short name for logs and results (e.g. the model id).
    fn name(&self) -> &str;
    /// Send the conversation and return the next assistant message.
    async fn chat(
        &self,
        messages: &[ChatMessage],
        params: &SamplingParams,
    ) -> Result<ChatResponse, LlmError>;
}
