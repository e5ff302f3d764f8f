//! Chat models: the [`ChatModel`] trait, an OpenAI-compatible client, and
//! [`LocalChat`], the adapter that puts the in-process engine of
//! [`crate::model`] behind the same trait (the `local:` policy).
//!
//! The agent's `openai:` and `local:` policies and the generation pipeline
//! all talk to language models through this trait.

mod local;
mod message;
mod openai;
mod request_shape;
mod tool_call;
pub mod tools;

pub use local::{LocalChat, DEFAULT_MAX_TOKENS};
pub use message::{ChatMessage, Role};
pub use openai::{api_key_from_env, OpenAiChat, OpenAiConfig, RetryPolicy};
pub use request_shape::is_reasoning_model;
pub use tool_call::{FunctionCall, ToolCall, ToolSpec};

use serde::{Deserialize, Serialize};

/// Sampling parameters of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature (0: greedy, where the server allows it).
    pub temperature: f32,
    /// Nucleus sampling: the smallest set of tokens whose probability reaches this.
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
    /// Tokens sent (the conversation so far).
    pub prompt_tokens: u64,
    /// Tokens generated.
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
    /// The calls the model made (when it was offered tools).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tokens the request used, as the server counted them.
    pub usage: TokenUsage,
    /// The server's finish reason, when given (`stop`, `length`, ...).
    pub finish_reason: Option<String>,
    /// How many attempts the request took (1 = no retry).
    pub attempts: u32,
}

/// Why a chat request failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// No connection could be made.
    #[error("cannot reach the model server at {url}: {message}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// The transport's error.
        message: String,
    },
    /// Every attempt ran past the request timeout.
    #[error("model server at {url} timed out after {attempts} attempt(s)")]
    Timeout {
        /// The endpoint.
        url: String,
        /// Attempts made, retries included.
        attempts: u32,
    },
    /// The server answered with an error status (after retries, if retryable).
    #[error("model server at {url} answered HTTP {status} after {attempts} attempt(s): {body}")]
    Http {
        /// The endpoint.
        url: String,
        /// The last HTTP status.
        status: u16,
        /// Attempts made, retries included.
        attempts: u32,
        /// The last reply's body (for the server's own error message).
        body: String,
    },
    /// The reply parsed as something other than a chat completion.
    #[error("model server at {url} sent a reply that is not a chat completion: {message}")]
    BadReply {
        /// The endpoint.
        url: String,
        /// What was wrong with it.
        message: String,
    },
    /// The client's settings cannot work (bad URL, bad header value...).
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// The conversation no longer fits a local model's context window: the
    /// agent's failure (its episode ends as `context_exhausted`), not the
    /// model's.
    #[error("the conversation no longer fits the model's context ({used} of {window} tokens)")]
    ContextExhausted {
        /// Tokens the prompt needs (it leaves no room for a reply).
        used: usize,
        /// The model's context window, in tokens.
        window: usize,
    },
}

impl LlmError {
    /// Whether the failure is the server's or the way to it, not the
    /// request's: an unreachable server, a timeout, an HTTP error status
    /// (5xx and 429 after the client's retries, an authentication or
    /// unknown-model error...), a reply that is not the API's, a bad client
    /// setting. Only HTTP 400, 413 and 422 blame the request itself (a
    /// conversation too long or malformed for the model): sent again, it
    /// fails again.
    pub fn is_infrastructure(&self) -> bool {
        !matches!(
            self,
            LlmError::Http {
                status: 400 | 413 | 422,
                ..
            }
        )
    }
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

    /// Like [`chat`](Self::chat), offering the model `tools`. By default
    /// the model is a text model: the tools are described in its system
    /// prompt and earlier calls and results written out the Hermes way
    /// ([`tools::as_text_conversation`]); its calls come back as
    /// `<tool_call>` text in the content. Models with a native tools API
    /// (OpenAI-compatible servers) override this.
    async fn chat_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        params: &SamplingParams,
    ) -> Result<ChatResponse, LlmError> {
        let text = tools::as_text_conversation(messages, tools);
        self.chat(&text, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::LlmError;

    #[test]
    fn only_a_refused_request_is_not_an_infrastructure_error() {
        let url = || "http://127.0.0.1:9/v1/chat/completions".to_string();
        let http = |status| LlmError::Http {
            url: url(),
            status,
            attempts: 1,
            body: String::new(),
        };
        for e in [
            LlmError::Unreachable {
                url: url(),
                message: "connection refused".into(),
            },
            LlmError::Timeout {
                url: url(),
                attempts: 6,
            },
            http(500),
            http(503),
            http(429),
            http(401),
            http(404),
            LlmError::BadReply {
                url: url(),
                message: "expected value at line 1 column 1".into(),
            },
            LlmError::Config("bad header".into()),
        ] {
            assert!(e.is_infrastructure(), "{e}");
        }
        for status in [400, 413, 422] {
            assert!(!http(status).is_infrastructure(), "{status}");
        }
    }
}
