//! A policy backed by a [`ChatModel`] (e.g. any OpenAI-compatible server).

use std::sync::{Arc, OnceLock};

use super::{Policy, PolicyError, PolicyReply};
use crate::llm::{ChatMessage, ChatModel, SamplingParams, ToolSpec};

/// Asks a chat model for each reply. Must be called from a thread that may
/// block (e.g. `tokio::task::spawn_blocking`), not from inside async code.
pub struct ChatPolicy {
    model: Arc<dyn ChatModel>,
    sampling: SamplingParams,
    handle: tokio::runtime::Handle,
}

impl ChatPolicy {
    /// A policy over `model`. Uses the current tokio runtime when there is
    /// one, else a shared background runtime.
    pub fn new(model: Arc<dyn ChatModel>, sampling: SamplingParams) -> Result<Self, PolicyError> {
        let handle = match tokio::runtime::Handle::try_current() {
            Ok(h) => h,
            Err(_) => fallback_runtime()?.handle().clone(),
        };
        Ok(Self {
            model,
            sampling,
            handle,
        })
    }
}

fn fallback_runtime() -> Result<&'static tokio::runtime::Runtime, PolicyError> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("endless-llm")
            .enable_all()
            .build()
            .ok()
    })
    .as_ref()
    .ok_or_else(|| PolicyError::Other("cannot start a runtime for model requests".into()))
}

impl Policy for ChatPolicy {
    fn act(&mut self, messages: &[ChatMessage]) -> Result<PolicyReply, PolicyError> {
        self.act_with_tools(messages, &[])
    }

    /// Offers `tools` to the model ([`ChatModel::chat_with_tools`]): an
    /// OpenAI-compatible server gets the `tools` array and its reply's
    /// `tool_calls` are kept; a text model reads them the Hermes way.
    fn act_with_tools(
        &mut self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> Result<PolicyReply, PolicyError> {
        let model = self.model.clone();
        let sampling = self.sampling.clone();
        let reply = self.handle.block_on(async move {
            if tools.is_empty() {
                model.chat(messages, &sampling).await
            } else {
                model.chat_with_tools(messages, tools, &sampling).await
            }
        });
        let reply = reply.map_err(|e| match e {
            crate::llm::LlmError::ContextExhausted { used, window } => {
                PolicyError::ContextExhausted { used, window }
            }
            e => e.into(),
        })?;
        Ok(PolicyReply {
            text: reply.content,
            usage: reply.usage,
            tool_calls: reply.tool_calls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, LocalChat, SamplingParams};
    use crate::model::models::tiny::{tiny_config, train_tokenizer, write_model_dir};
    use crate::model::{Arch, LocalModel};
    use candle_core::Device;

    /// A conversation that outgrows a local model's context is the agent's
    /// `context_exhausted`, not a model error; one that fits has its reply
    /// cut at the context (it used to fail with "exceeds the rope table").
    #[test]
    fn a_full_local_context_is_context_exhaustion_and_replies_stop_at_it() {
        let corpus = ["ls -la /home/user", "cat notes.txt | grep error"];
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = train_tokenizer(corpus.iter(), 300).unwrap();
        let mut cfg = tiny_config(Arch::Qwen3, 300);
        cfg.max_position_embeddings = 48;
        write_model_dir(dir.path(), &cfg, &tokenizer, 3).unwrap();
        let chat = LocalChat::new(LocalModel::load(dir.path(), &Device::Cpu).unwrap(), 1);
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: Some(500),
        };
        let mut policy = ChatPolicy::new(Arc::new(chat), params).unwrap();
        let reply = policy.act(&[ChatMessage::user("ls")]).unwrap();
        assert!(reply.usage.prompt_tokens + reply.usage.completion_tokens <= 48);
        let long = [ChatMessage::user("cat notes.txt | grep error ".repeat(20))];
        match policy.act(&long) {
            Err(PolicyError::ContextExhausted { used, window: 48 }) => assert!(used >= 48),
            other => panic!("{:?}", other.map(|r| r.text)),
        }
    }
}
