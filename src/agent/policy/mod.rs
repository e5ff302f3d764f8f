//! Policies: who writes the agent's replies.
//!
//! A [`PolicyFactory`] is parsed once from a spec string (`openai:MODEL@URL`,
//! `oracle`, `script:FILE`, `replay:EPISODE`, `human`) and shared by all
//! episodes of a run; [`PolicyFactory::start`] makes a fresh [`Policy`] for
//! one episode. Policies are synchronous: the episode loop runs on a blocking
//! thread, so many episodes run at once (see `agent::rollout`), and a local
//! model policy can run its forward pass in place.

mod fork;
mod human;
mod openai;
mod scripted;

pub use fork::{commands_before, ForkSource};
pub use human::HumanPolicy;
pub use openai::ChatPolicy;
pub use scripted::{load_replay_commands, oracle_command, ScriptedPolicy};

use std::path::PathBuf;
use std::sync::Arc;

use crate::llm::{
    ChatMessage, ChatModel, LlmError, OpenAiChat, OpenAiConfig, SamplingParams, TokenUsage,
    ToolCall, ToolSpec,
};
use crate::task::Task;

/// One reply of a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyReply {
    /// The assistant text, in the protocol's format.
    pub text: String,
    /// Tokens the reply cost (zero for non-model policies).
    pub usage: TokenUsage,
    /// The calls the reply made through a model's tools API (the `tools`
    /// protocol); empty for text replies.
    pub tool_calls: Vec<ToolCall>,
}

impl PolicyReply {
    /// A reply that costs no tokens.
    pub fn free(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            usage: TokenUsage::default(),
            tool_calls: Vec::new(),
        }
    }

    /// The reply as the assistant message the conversation keeps.
    pub fn message(&self) -> ChatMessage {
        ChatMessage::assistant_calls(self.text.clone(), self.tool_calls.clone())
    }
}

/// Why a policy could not be built or could not answer.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A policy spec (`--policy`) could not be parsed.
    #[error("bad policy spec {spec:?}: {message}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        message: String,
    },
    /// A `script:` or `replay:` file could not be read.
    #[error("cannot read {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        message: String,
    },
    /// The oracle policy was asked to run a task without a reference solution.
    #[error("task {task} has no solution/solve.sh, so the oracle policy cannot run it")]
    NoSolution {
        /// The task's id.
        task: String,
    },
    /// The model request failed (after its retries).
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The conversation no longer fits the model's context window: the
    /// episode ends as `context_exhausted` (a failure of the agent, like
    /// running out of turns), not as an error.
    #[error("the conversation no longer fits the model's context ({used} of {window} tokens)")]
    ContextExhausted {
        /// Tokens the next prompt needs (at least one more than fits).
        used: usize,
        /// The model's context window, in tokens.
        window: usize,
    },
    /// Anything else (the terminal of a human policy, a runtime), described.
    #[error("{0}")]
    Other(String),
}

/// Writes the agent's replies in one episode.
pub trait Policy: Send {
    /// The next assistant message, given the conversation so far (system
    /// prompt, instruction, then alternating replies and observations).
    fn act(&mut self, messages: &[ChatMessage]) -> Result<PolicyReply, PolicyError>;

    /// The next reply when the protocol offers `tools` (the `tools`
    /// profile). By default the tools are left out and [`act`](Self::act)
    /// answers; model policies offer them to their model.
    fn act_with_tools(
        &mut self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> Result<PolicyReply, PolicyError> {
        let _ = tools;
        self.act(messages)
    }
}

/// Ask `policy` for its next reply to `messages`, offering `tools` when
/// there are any (the episode's protocol decides).
pub fn ask(
    policy: &mut dyn Policy,
    messages: &[ChatMessage],
    tools: &[ToolSpec],
) -> Result<PolicyReply, PolicyError> {
    if tools.is_empty() {
        policy.act(messages)
    } else {
        policy.act_with_tools(messages, tools)
    }
}

/// Options used when building policies from specs.
#[derive(Debug, Clone)]
pub struct PolicyOptions {
    /// Sampling parameters of model policies (from `[llm]`).
    pub sampling: SamplingParams,
    /// Requests in flight at once for model policies.
    pub max_concurrency: usize,
    /// Retry settings for model policies.
    pub retry: crate::llm::RetryPolicy,
    /// Limit of one model request attempt.
    pub request_timeout: std::time::Duration,
    /// Where `local:smollm2` keeps the downloaded model.
    pub model_cache: PathBuf,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        Self {
            sampling: SamplingParams::default(),
            max_concurrency: 64,
            retry: crate::llm::RetryPolicy::default(),
            request_timeout: std::time::Duration::from_secs(600),
            model_cache: crate::config::Paths::detect().cache_dir.join("models"),
        }
    }
}

/// Starts policies defined outside this module (e.g. the trainer's policy,
/// which records the tokens it samples).
pub trait PolicySource: Send + Sync {
    /// The name recorded in results.
    fn name(&self) -> String;
    /// A fresh policy for episode `sample` of `task`.
    fn start(&self, task: &Task, sample: u32) -> Result<Box<dyn Policy>, PolicyError>;
}

/// A parsed policy spec, ready to start one policy per episode.
#[derive(Clone)]
pub enum PolicyFactory {
    /// A chat model (`openai:MODEL@URL`, or any [`ChatModel`]).
    Chat {
        /// The name recorded in results (the spec, for `openai:`).
        name: String,
        /// The model that writes the replies.
        model: Arc<dyn ChatModel>,
        /// Its sampling parameters.
        sampling: SamplingParams,
    },
    /// The task's own `solution/solve.sh`, run as one command.
    Oracle,
    /// Fixed commands, one per turn (`script:FILE` or `replay:EPISODE`).
    Commands {
        /// The spec, recorded in results.
        name: String,
        /// The commands, in order; after the last, the policy says done.
        commands: Arc<Vec<String>>,
    },
    /// A person at the terminal.
    Human,
    /// Any other source of policies.
    Custom(Arc<dyn PolicySource>),
}

impl std::fmt::Debug for PolicyFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl PolicyFactory {
    /// Parse a spec: `openai:MODEL@URL`, `oracle`, `script:FILE`,
    /// `replay:EPISODE` (a trajectory `.jsonl` or result `.json`), `human`.
    pub fn from_spec(spec: &str, options: &PolicyOptions) -> Result<Self, PolicyError> {
        let bad = |message: &str| PolicyError::Spec {
            spec: spec.to_string(),
            message: message.to_string(),
        };
        let (kind, rest) = match spec.split_once(':') {
            Some((k, r)) => (k, Some(r)),
            None => (spec, None),
        };
        match (kind.trim(), rest) {
            ("oracle", None) => Ok(Self::Oracle),
            ("human", None) => Ok(Self::Human),
            ("openai", Some(rest)) => {
                let (model, url) = rest
                    .rsplit_once('@')
                    .ok_or_else(|| bad("expected openai:MODEL@URL, e.g. openai:gpt-4o@http://127.0.0.1:8000/v1"))?;
                if model.is_empty() {
                    return Err(bad("the model name is empty"));
                }
                if url.is_empty() {
                    return Err(bad("the server URL is empty"));
                }
                let mut config = OpenAiConfig::new(model, url);
                config.max_concurrency = options.max_concurrency;
                config.retry = options.retry.clone();
                config.request_timeout = options.request_timeout;
                let client = OpenAiChat::new(config).map_err(|e| bad(&e.to_string()))?;
                Ok(Self::Chat { name: spec.to_string(), model: Arc::new(client), sampling: options.sampling.clone() })
            }
            ("script", Some(path)) if !path.is_empty() => {
                let path = PathBuf::from(path);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| PolicyError::File { path: path.clone(), message: e.to_string() })?;
                let commands = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from)
                    .collect();
                Ok(Self::Commands { name: spec.to_string(), commands: Arc::new(commands) })
            }
            ("replay", Some(path)) if !path.is_empty() => {
                let commands = load_replay_commands(std::path::Path::new(path))?;
                Ok(Self::Commands { name: spec.to_string(), commands: Arc::new(commands) })
            }
            ("oracle" | "human", Some(_)) => Err(bad("this policy takes no argument")),
            ("script" | "replay", _) => Err(bad("expected a file path after the colon")),
            ("openai", None) => Err(bad("expected openai:MODEL@URL")),
            ("local", Some(rest)) if !rest.trim().is_empty() => {
                let path = match rest.trim() {
                    "smollm2" => crate::model::fetch_smollm2(&options.model_cache)
                        .map_err(|e| bad(&format!("cannot fetch SmolLM2: {e}")))?,
                    dir => PathBuf::from(dir),
                };
                let model = crate::model::LocalModel::load(&path, &candle_core::Device::Cpu)
                    .map_err(|e| bad(&e.to_string()))?;
                let chat = Arc::new(crate::llm::LocalChat::new(model, 0));
                let mut factory = Self::chat(chat, options.sampling.clone());
                if let Self::Chat { name, .. } = &mut factory {
                    *name = spec.to_string();
                }
                Ok(factory)
            }
            ("local", _) => Err(bad("expected local:DIR (a model directory or .gguf file) or local:smollm2")),
            _ => Err(bad("unknown policy; expected openai:MODEL@URL, oracle, script:FILE, replay:EPISODE or human")),
        }
    }

    /// A chat-model policy over any [`ChatModel`].
    pub fn chat(model: Arc<dyn ChatModel>, sampling: SamplingParams) -> Self {
        Self::Chat {
            name: format!("model:{}", model.name()),
            model,
            sampling,
        }
    }

    /// The name recorded in results.
    pub fn name(&self) -> String {
        match self {
            Self::Chat { name, .. } | Self::Commands { name, .. } => name.clone(),
            Self::Oracle => "oracle".into(),
            Self::Human => "human".into(),
            Self::Custom(source) => source.name(),
        }
    }

    /// A fresh policy for episode `sample` of `task`.
    pub fn start(&self, task: &Task, sample: u32) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(match self {
            Self::Chat {
                model, sampling, ..
            } => Box::new(ChatPolicy::new(model.clone(), sampling.clone())?),
            Self::Oracle => {
                let script = task.solve_script().ok_or_else(|| PolicyError::NoSolution {
                    task: task.id().to_string(),
                })?;
                Box::new(ScriptedPolicy::new(vec![oracle_command(script)]))
            }
            Self::Commands { commands, .. } => {
                Box::new(ScriptedPolicy::new(commands.as_ref().clone()))
            }
            Self::Human => Box::new(HumanPolicy::new()),
            Self::Custom(source) => source.start(task, sample)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_errors_are_clear() {
        let o = PolicyOptions::default();
        let e = PolicyFactory::from_spec("openai:gpt-4o", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("openai:MODEL@URL"), "{e}");
        let e = PolicyFactory::from_spec("bogus", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown policy"), "{e}");
        let e = PolicyFactory::from_spec("replay:/nonexistent/ep.jsonl", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/ep.jsonl"), "{e}");
        let e = PolicyFactory::from_spec("openai:m@ftp://x", &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains("http://"), "{e}");
        assert!(matches!(
            PolicyFactory::from_spec("oracle", &o),
            Ok(PolicyFactory::Oracle)
        ));
        assert!(matches!(
            PolicyFactory::from_spec("human", &o),
            Ok(PolicyFactory::Human)
        ));
        let f = PolicyFactory::from_spec("openai:gpt-4o@http://127.0.0.1:8000/v1", &o).unwrap();
        assert_eq!(f.name(), "openai:gpt-4o@http://127.0.0.1:8000/v1");
    }
}
