//! A client for any OpenAI-compatible `/v1/chat/completions` server (vLLM,
//! SGLang, llama.cpp, Ollama, OpenAI), with retries and bounded concurrency.
//! Requests to reasoning models take their shape from
//! [`RequestShape`]: guessed from the model name, corrected once per rejected
//! parameter from the server's HTTP 400, and remembered for the client's life.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::Semaphore;

use super::request_shape::{Adaptation, RequestShape};
use super::{
    ChatMessage, ChatModel, ChatResponse, LlmError, SamplingParams, TokenUsage, ToolCall, ToolSpec,
};

/// Largest reply body accepted, in bytes.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Characters of an error body kept in [`LlmError::Http`].
const ERROR_BODY_CHARS: usize = 500;

/// The API key from `ENDLESS_API_KEY`, else `OPENAI_API_KEY`.
pub fn api_key_from_env() -> Option<String> {
    ["ENDLESS_API_KEY", "OPENAI_API_KEY"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

/// Retries with exponential backoff on HTTP 429, 5xx and timeouts.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Delay before the first retry; doubled each time.
    pub base_delay: Duration,
    /// Cap on one delay (also caps a server's `Retry-After`).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (0-based).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(20));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// Settings of an [`OpenAiChat`] client.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The model name sent with each request.
    pub model: String,
    /// Bearer token; `None` sends no `Authorization` header.
    pub api_key: Option<String>,
    /// Requests in flight at once through this client.
    pub max_concurrency: usize,
    /// Limit of one attempt (connect + reply).
    pub request_timeout: Duration,
    /// When and how often a failed request is retried.
    pub retry: RetryPolicy,
}

impl OpenAiConfig {
    /// Defaults for `model` at `base_url`, key from the environment.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: api_key_from_env(),
            max_concurrency: 64,
            request_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
        }
    }
}

/// An OpenAI-compatible chat client. Cheap to share behind an `Arc`.
pub struct OpenAiChat {
    config: OpenAiConfig,
    endpoint: String,
    http: reqwest::Client,
    permits: Arc<Semaphore>,
    /// The parameters the model accepts, as learned so far (one client
    /// serves one model, so this is the per-model memory).
    shape: Mutex<RequestShape>,
}

impl std::fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("endpoint", &self.endpoint)
            .field("model", &self.config.model)
            .finish()
    }
}

#[derive(Deserialize)]
struct WireReply {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// What one attempt produced.
enum Attempt {
    Done(ChatResponse),
    Retry {
        error: LlmError,
        after: Option<Duration>,
    },
    /// HTTP 400, with the whole body (the error may ask for an adaptation).
    BadRequest {
        error: LlmError,
        body: String,
    },
    Fail(LlmError),
}

impl OpenAiChat {
    /// Build a client. Fails on an empty model or a URL that is not http(s).
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        if config.model.trim().is_empty() {
            return Err(LlmError::Config("the model name is empty".into()));
        }
        let base = config.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(LlmError::Config(format!(
                "the server URL {:?} must start with http:// or https://",
                config.base_url
            )));
        }
        let endpoint = format!("{base}/chat/completions");
        reqwest::Url::parse(&endpoint)
            .map_err(|e| LlmError::Config(format!("bad server URL {:?}: {e}", config.base_url)))?;
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        let permits = Arc::new(Semaphore::new(config.max_concurrency.max(1)));
        let shape = Mutex::new(RequestShape::for_model(&config.model));
        Ok(Self {
            config,
            endpoint,
            http,
            permits,
            shape,
        })
    }

    /// The request shape learned so far.
    fn shape(&self) -> RequestShape {
        *self.shape.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember `adaptation` for later requests (applied to what concurrent
    /// requests have learned meanwhile).
    fn remember(&self, adaptation: Adaptation) {
        let mut shape = self.shape.lock().unwrap_or_else(|e| e.into_inner());
        *shape = shape.apply(adaptation);
    }

    /// The full `/chat/completions` URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn attempt(&self, body: &serde_json::Value, attempts: u32) -> Attempt {
        let url = self.endpoint.clone();
        let _permit = match self.permits.acquire().await {
            Ok(p) => p,
            Err(_) => return Attempt::Fail(LlmError::Config("client is shut down".into())),
        };
        let mut req = self.http.post(&self.endpoint).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Attempt::Retry {
                    error: LlmError::Timeout { url, attempts },
                    after: None,
                }
            }
            Err(e) => {
                return Attempt::Fail(LlmError::Unreachable {
                    url,
                    message: error_chain(&e),
                })
            }
        };
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(3600.0)));
        let bytes = match read_capped(resp).await {
            Ok(b) => b,
            Err(e) => return e.into_attempt(url, attempts),
        };
        let text = String::from_utf8_lossy(&bytes);
        if !status.is_success() {
            let error = LlmError::Http {
                url,
                status: status.as_u16(),
                attempts,
                body: text.chars().take(ERROR_BODY_CHARS).collect(),
            };
            return if status.as_u16() == 429 || status.is_server_error() {
                Attempt::Retry {
                    error,
                    after: retry_after,
                }
            } else if status.as_u16() == 400 {
                Attempt::BadRequest {
                    error,
                    body: text.into_owned(),
                }
            } else {
                Attempt::Fail(error)
            };
        }
        match parse_reply(&text) {
            Ok(mut r) => {
                r.attempts = attempts;
                Attempt::Done(r)
            }
            Err(message) => Attempt::Fail(LlmError::BadReply { url, message }),
        }
    }
}

enum ReadError {
    Timeout,
    TooLarge,
    Other(String),
}

impl ReadError {
    fn into_attempt(self, url: String, attempts: u32) -> Attempt {
        match self {
            ReadError::Timeout => Attempt::Retry {
                error: LlmError::Timeout { url, attempts },
                after: None,
            },
            ReadError::TooLarge => Attempt::Fail(LlmError::BadReply {
                url,
                message: format!("the reply is larger than {MAX_BODY_BYTES} bytes"),
            }),
            ReadError::Other(message) => Attempt::Fail(LlmError::BadReply { url, message }),
        }
    }
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if out.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(ReadError::TooLarge);
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(out),
            Err(e) if e.is_timeout() => return Err(ReadError::Timeout),
            Err(e) => return Err(ReadError::Other(error_chain(&e))),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Parse a chat-completion body into a [`ChatResponse`].
fn parse_reply(text: &str) -> Result<ChatResponse, String> {
    let wire: WireReply = serde_json::from_str(text).map_err(|e| {
        let head: String = text.chars().take(200).collect();
        format!("{e} (body starts {head:?})")
    })?;
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or("the reply has no choices")?;
    let usage = wire
        .usage
        .map(|u| TokenUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        })
        .unwrap_or_default();
    let (content, tool_calls) = match choice.message {
        Some(m) => (
            m.content.unwrap_or_default(),
            m.tool_calls.unwrap_or_default(),
        ),
        None => (String::new(), Vec::new()),
    };
    Ok(ChatResponse {
        content,
        tool_calls,
        usage,
        finish_reason: choice.finish_reason,
        attempts: 1,
    })
}

#[async_trait::async_trait]
impl ChatModel for OpenAiChat {
    fn name(&self) -> &str {
        &self.config.model
    }

    async fn chat(
        &self,
        messages: &[ChatMessage],
        params: &SamplingParams,
    ) -> Result<ChatResponse, LlmError> {
        self.request(messages, &[], params).await
    }

    /// Offers `tools` in the request's OpenAI `tools` array; the reply's
    /// `tool_calls` come back as they are.
    async fn chat_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        params: &SamplingParams,
    ) -> Result<ChatResponse, LlmError> {
        self.request(messages, tools, params).await
    }
}

impl OpenAiChat {
    /// One chat request with its retries and adaptations.
    async fn request(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        params: &SamplingParams,
    ) -> Result<ChatResponse, LlmError> {
        let mut shape = self.shape();
        let mut attempts = 0u32;
        let mut retry = 0u32;
        loop {
            attempts += 1;
            let body = shape.body(&self.config.model, messages, tools, params);
            match self.attempt(&body, attempts).await {
                Attempt::Done(r) => return Ok(r),
                Attempt::Fail(e) => return Err(e),
                Attempt::BadRequest { error, body } => {
                    // Each adaptation changes the shape, so this retries at
                    // most once per adaptable parameter.
                    let Some(adaptation) =
                        Adaptation::from_error_body(&body).filter(|a| shape.apply(*a) != shape)
                    else {
                        return Err(error);
                    };
                    tracing::warn!(
                        model = %self.config.model,
                        ?adaptation,
                        "the server rejected a request parameter; retrying without it"
                    );
                    shape = shape.apply(adaptation);
                    self.remember(adaptation);
                }
                Attempt::Retry { error, after } => {
                    if retry >= self.config.retry.max_retries {
                        return Err(error);
                    }
                    let delay = after
                        .map(|d| d.min(self.config.retry.max_delay))
                        .unwrap_or_else(|| self.config.retry.delay(retry));
                    tracing::warn!(%error, ?delay, "retrying chat request");
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        let r = parse_reply(r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#).unwrap();
        assert_eq!(r.content, "hi");
        assert_eq!(r.usage.total(), 4);
        let r = parse_reply(r#"{"choices":[{"message":{"content":null}}]}"#).unwrap();
        assert_eq!(r.content, "");
        assert!(parse_reply(r#"{"choices":[]}"#).is_err());
        let body = serde_json::json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}
        ]}, "finish_reason": "tool_calls"}]});
        let r = parse_reply(&body.to_string()).unwrap();
        assert_eq!(r.content, "");
        assert_eq!(
            r.tool_calls,
            vec![ToolCall::new("call_1", "bash", r#"{"command":"ls"}"#)]
        );
        assert!(parse_reply("<html>").is_err());
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            max_retries: 9,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        assert_eq!(p.delay(0), Duration::from_millis(100));
        assert_eq!(p.delay(2), Duration::from_millis(400));
        assert_eq!(p.delay(8), Duration::from_secs(1));
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(OpenAiChat::new(OpenAiConfig::new("m", "ftp://x")).is_err());
        assert!(OpenAiChat::new(OpenAiConfig::new("", "http://x/v1")).is_err());
        let c = OpenAiChat::new(OpenAiConfig::new("m", "http://127.0.0.1:1/v1/")).unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
    }
}
