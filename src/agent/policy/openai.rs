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
        })?;
        Ok(PolicyReply {
            text: reply.content,
            usage: reply.usage,
            tool_calls: reply.tool_calls,
        })
    }
}
