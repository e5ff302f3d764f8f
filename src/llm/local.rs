//! [`LocalChat`]: a [`LocalModel`] behind the project's [`ChatModel`] trait.
//! Concurrent requests are sampled in batches ([`SharedModel`]), on blocking
//! threads.

use crate::llm::tools::as_text_conversation;
use crate::llm::{
    ChatMessage, ChatModel, ChatResponse, LlmError, Role, SamplingParams, TokenUsage,
};
use crate::model::{LocalModel, Sampler, SamplingConfig, SharedModel, TemplateMessage};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Default `max_tokens` when a request leaves it open.
pub const DEFAULT_MAX_TOKENS: usize = 1024;

/// A local model usable wherever a [`ChatModel`] is.
pub struct LocalChat {
    model: Arc<SharedModel>,
    name: String,
    next_seed: AtomicU64,
}

impl LocalChat {
    /// Wrap a loaded model; request `k` samples with seed `seed + k`.
    pub fn new(model: LocalModel, seed: u64) -> Self {
        Self {
            name: format!("local:{}", model.name()),
            // Requests are not expected back: no waiting, a batch is
            // whatever queued while the model was busy.
            model: SharedModel::new(model, Duration::ZERO),
            next_seed: AtomicU64::new(seed),
        }
    }
}

/// The chat template's role name. `tool` never reaches a template here:
/// [`as_text_conversation`] turns tool results into user turns first.
fn role(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User | Role::Tool => "user",
        Role::Assistant => "assistant",
    }
}

#[async_trait::async_trait]
impl ChatModel for LocalChat {
    fn name(&self) -> &str {
        &self.name
    }

    async fn chat(
        &self,
        messages: &[ChatMessage],
        params: &SamplingParams,
    ) -> Result<ChatResponse, LlmError> {
        // Tool calls and results, if any, as Hermes text.
        let msgs: Vec<TemplateMessage> = as_text_conversation(messages, &[])
            .iter()
            .map(|m| TemplateMessage {
                role: role(m.role).to_string(),
                content: m.content.clone(),
            })
            .collect();
        let prompt = self
            .model
            .tokenizer()
            .encode_chat(&msgs)
            .map_err(|e| LlmError::BadReply {
                url: self.name.clone(),
                message: e.to_string(),
            })?;
        // Prompt and reply must fit the context: a prompt that leaves no
        // room ends the episode as `context_exhausted`, a reply stops there.
        let window = self.model.context_window();
        if prompt.len() >= window {
            return Err(LlmError::ContextExhausted {
                used: prompt.len(),
                window,
            });
        }
        let cfg = SamplingConfig {
            temperature: params.temperature,
            top_p: params.top_p,
            max_tokens: params
                .max_tokens
                .map(|m| m as usize)
                .unwrap_or(DEFAULT_MAX_TOKENS)
                .min(window - prompt.len()),
        };
        let seed = self.next_seed.fetch_add(1, Ordering::Relaxed);
        let model = self.model.clone();
        let name = self.name.clone();
        let g = tokio::task::spawn_blocking(move || {
            model.generate(prompt, &mut Sampler::new(cfg, seed))
        })
        .await
        .map_err(|e| LlmError::BadReply {
            url: name.clone(),
            message: format!("generation task failed: {e}"),
        })?
        .map_err(|e| LlmError::BadReply {
            url: name,
            message: e.to_string(),
        })?;
        Ok(ChatResponse {
            content: g.text,
            tool_calls: Vec::new(),
            usage: TokenUsage {
                prompt_tokens: g.prompt_ids.len() as u64,
                completion_tokens: g.token_ids.len() as u64,
            },
            finish_reason: Some(g.finish.as_str().to_string()),
            attempts: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ChatModel, SamplingParams};
    use crate::model::models::tiny::{tiny_config, train_tokenizer, write_model_dir};
    use crate::model::Arch;
    use candle_core::Device;

    const CORPUS: &[&str] = &[
        "ls -la /home/user",
        "cat notes.txt | grep error",
        "mkdir -p backup && cp *.log backup/",
        "find . -name '*.py' | wc -l",
        "echo done > status.txt",
        "The quick brown fox jumps over the lazy dog.",
    ];

    #[tokio::test]
    async fn local_chat_implements_chat_model() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = train_tokenizer(CORPUS.iter(), 300).unwrap();
        write_model_dir(dir.path(), &tiny_config(Arch::Qwen3, 300), &tokenizer, 3).unwrap();
        let chat = LocalChat::new(LocalModel::load(dir.path(), &Device::Cpu).unwrap(), 1);
        assert!(chat.name().starts_with("local:"));
        let params = SamplingParams {
            temperature: 0.7,
            top_p: 0.9,
            max_tokens: Some(6),
        };
        let msgs = [ChatMessage::system("be brief"), ChatMessage::user("ls")];
        let r = chat.chat(&msgs, &params).await.unwrap();
        assert!(r.usage.prompt_tokens > 0);
        assert!(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 6);
        assert!(matches!(
            r.finish_reason.as_deref(),
            Some("stop" | "length")
        ));
        assert_eq!(r.attempts, 1);
    }
}
