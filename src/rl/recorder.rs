//! The trainer's side of the agent loop: a [`Policy`] that samples from the
//! policy being trained and records, turn by turn, the exact token stream it
//! saw and produced, with each sampled token's log-probability.
//!
//! The conversation is kept as tokens, not re-tokenised text: each turn only
//! the new part of the chat-template rendering (the observation, the next
//! assistant header) is encoded and appended, and the model is prompted with
//! the whole token stream. What PPO later trains on is therefore exactly what
//! was sampled from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::batch::SequenceBuilder;
use crate::agent::{Policy, PolicyError, PolicyReply, PolicySource};
use crate::llm::{ChatMessage, Role, TokenUsage};
use crate::model::generation::shared::DEFAULT_GATHER;
use crate::model::{
    ChatTokenizer, FinishReason, Generation, LocalModel, Sampler, SamplingConfig, Seat,
    SharedModel, TemplateMessage,
};
use crate::task::Task;

/// Converts chat messages to template messages.
pub fn template_messages(messages: &[ChatMessage]) -> Vec<TemplateMessage> {
    messages
        .iter()
        .map(|m| TemplateMessage {
            role: match m.role {
                Role::System => "system",
                Role::User | Role::Tool => "user",
                Role::Assistant => "assistant",
            }
            .to_string(),
            content: m.content.clone(),
        })
        .collect()
}

/// One episode's conversation as tokens.
#[derive(Debug, Clone, Default)]
pub struct TokenTranscript {
    builder: SequenceBuilder,
    /// Bytes of the rendered conversation already in `builder`.
    consumed: usize,
    /// The text of the stop token the last reply ended with, if any.
    stop_text: Option<String>,
}

impl TokenTranscript {
    /// An empty transcript.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append what the conversation added since the last reply (the whole
    /// rendering the first time) and return the prompt: every token so far.
    pub fn prompt(
        &mut self,
        tok: &ChatTokenizer,
        messages: &[TemplateMessage],
    ) -> crate::model::error::Result<Vec<u32>> {
        Ok(self
            .prompt_within(tok, messages, usize::MAX)?
            .unwrap_or_default())
    }

    /// [`Self::prompt`] when the prompt is at most `limit` tokens long;
    /// otherwise `Err(length it would have)`, and nothing is appended: the
    /// recorded stream never outgrows the model's context.
    pub fn prompt_within(
        &mut self,
        tok: &ChatTokenizer,
        messages: &[TemplateMessage],
        limit: usize,
    ) -> crate::model::error::Result<std::result::Result<Vec<u32>, usize>> {
        let full = tok.render(messages, true)?;
        let mut tail = full.get(self.consumed..).unwrap_or("");
        if let Some(stop) = &self.stop_text {
            tail = tail.strip_prefix(stop.as_str()).unwrap_or(tail);
        }
        let ids = tok.encode(tail)?;
        let len = self.builder.len() + ids.len();
        if len > limit {
            return Ok(Err(len));
        }
        self.stop_text = None;
        self.builder.context(&ids);
        self.consumed = full.len();
        Ok(Ok(self.builder.tokens().to_vec()))
    }

    /// Record a sampled reply. `with_reply` is the conversation including it
    /// (to find where the reply's text ends in the rendering).
    pub fn record(
        &mut self,
        tok: &ChatTokenizer,
        with_reply: &[TemplateMessage],
        reply_text: &str,
        generation: &Generation,
    ) -> super::error::Result<()> {
        self.builder
            .agent(&generation.token_ids, &generation.logprobs)?;
        let rendered = tok.render(with_reply, false)?;
        let needle = reply_text.trim_end();
        let start = self.consumed.min(rendered.len());
        self.consumed = match rendered.get(start..).and_then(|r| r.rfind(needle)) {
            Some(i) if !needle.is_empty() => start + i + needle.len(),
            _ => rendered.len(),
        };
        self.stop_text = match generation.finish {
            FinishReason::Stop => generation
                .token_ids
                .last()
                .and_then(|id| tok.tokenizer().id_to_token(*id)),
            FinishReason::Length => None,
        };
        Ok(())
    }

    /// Tokens so far.
    pub fn len(&self) -> usize {
        self.builder.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.builder.is_empty()
    }

    /// The recorded sequence so far.
    pub fn into_builder(self) -> SequenceBuilder {
        self.builder
    }
}

/// Transcripts of finished episodes, by (task id, sample).
pub type Transcripts = Arc<Mutex<HashMap<(String, u32), SequenceBuilder>>>;

/// Starts a [`RecordingPolicy`] per episode, all sampling from one model,
/// whose concurrent episodes share each batch ([`SharedModel`]).
pub struct RecordingSource {
    model: Arc<SharedModel>,
    sampling: SamplingConfig,
    seed: u64,
    name: String,
    transcripts: Transcripts,
}

impl RecordingSource {
    /// Episodes sample from `model` with `sampling`; episode `(task, sample)`
    /// uses a seed derived from `seed`, the task and the sample.
    pub fn new(model: LocalModel, sampling: SamplingConfig, seed: u64, name: &str) -> Self {
        Self {
            model: SharedModel::new(model, DEFAULT_GATHER),
            sampling,
            seed,
            name: name.to_string(),
            transcripts: Arc::default(),
        }
    }

    /// Where finished episodes leave their token sequences.
    pub fn transcripts(&self) -> Transcripts {
        self.transcripts.clone()
    }
}

fn episode_seed(seed: u64, task: &str, sample: u32) -> u64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{seed}/{task}/{sample}").as_bytes());
    u64::from_le_bytes(d[..8].try_into().unwrap_or_default())
}

impl PolicySource for RecordingSource {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn start(&self, task: &Task, sample: u32) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(RecordingPolicy {
            seat: self.model.seat(),
            sampler: Sampler::new(self.sampling, episode_seed(self.seed, task.id(), sample)),
            transcript: TokenTranscript::new(),
            key: (task.id().to_string(), sample),
            sink: self.transcripts.clone(),
        }))
    }
}

/// Samples replies and records them; hands its transcript over when dropped
/// (at the end of the episode).
pub struct RecordingPolicy {
    /// Held for the episode: batches wait for this episode's next turn, and
    /// its KV cache is kept between turns.
    seat: Seat,
    sampler: Sampler,
    transcript: TokenTranscript,
    key: (String, u32),
    sink: Transcripts,
}

impl Policy for RecordingPolicy {
    /// The `tools` protocol: the tools described in the system prompt the
    /// Hermes way (the same text every turn, so the token stream only grows).
    fn act_with_tools(
        &mut self,
        messages: &[ChatMessage],
        tools: &[crate::llm::ToolSpec],
    ) -> Result<PolicyReply, PolicyError> {
        self.act(&crate::llm::tools::as_text_conversation(messages, tools))
    }

    fn act(&mut self, messages: &[ChatMessage]) -> Result<PolicyReply, PolicyError> {
        let other = |e: String| PolicyError::Other(e);
        let tokenizer = self.seat.model().tokenizer();
        let mut msgs = template_messages(messages);
        let window = self.seat.model().context_window();
        // Room for at least one sampled token; PPO later feeds the whole
        // recorded stream (prompt and reply) to the model at once.
        let prompt = self
            .transcript
            .prompt_within(tokenizer, &msgs, window.saturating_sub(2))
            .map_err(|e| other(e.to_string()))?
            .map_err(|used| PolicyError::ContextExhausted { used, window })?;
        let prompt_len = prompt.len();
        let max_tokens = self.sampler.config().max_tokens;
        self.sampler
            .set_max_tokens(max_tokens.min(window - prompt_len));
        let generated = self.seat.generate(prompt, &mut self.sampler);
        self.sampler.set_max_tokens(max_tokens);
        let generation = generated.map_err(|e| other(e.to_string()))?;
        msgs.push(TemplateMessage {
            role: "assistant".into(),
            content: generation.text.clone(),
        });
        self.transcript
            .record(tokenizer, &msgs, &generation.text, &generation)
            .map_err(|e| other(e.to_string()))?;
        Ok(PolicyReply {
            text: generation.text,
            usage: TokenUsage {
                prompt_tokens: prompt_len as u64,
                completion_tokens: generation.token_ids.len() as u64,
            },
            tool_calls: Vec::new(),
        })
    }
}

impl Drop for RecordingPolicy {
    fn drop(&mut self) {
        let transcript = std::mem::take(&mut self.transcript);
        if let Ok(mut sink) = self.sink.lock() {
            sink.insert(self.key.clone(), transcript.into_builder());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::models::tiny::train_tokenizer;

    fn tok() -> ChatTokenizer {
        let corpus = [
            "You are an agent. Run commands.",
            "<command>ls -la /home/user</command>",
            "Command executed successfully. Output: a b c (exit_code=0)",
            "<action>done</action> list the files please",
        ];
        let t = train_tokenizer(corpus.iter(), 400).unwrap();
        ChatTokenizer::new(t, None, "", "<|im_end|>", &[]).unwrap()
    }

    fn msg(role: &str, content: &str) -> TemplateMessage {
        TemplateMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    fn generation(tok: &ChatTokenizer, text: &str, stop: bool) -> Generation {
        let mut ids = tok.encode(text).unwrap();
        if stop {
            ids.push(tok.eos_ids()[0]);
        }
        Generation {
            text: text.into(),
            prompt_ids: Vec::new(),
            logprobs: vec![-0.5; ids.len()],
            token_ids: ids,
            finish: if stop {
                FinishReason::Stop
            } else {
                FinishReason::Length
            },
        }
    }

    /// Turn by turn, the recorded stream is exactly the tokenised rendering
    /// of the whole conversation, and only sampled tokens are agent tokens.
    #[test]
    fn transcript_matches_the_full_rendering_and_masks_context() {
        let tok = tok();
        let mut conv = vec![
            msg("system", "You are an agent. Run commands."),
            msg("user", "list the files please"),
        ];
        let mut t = TokenTranscript::new();
        let p1 = t.prompt(&tok, &conv).unwrap();
        assert_eq!(p1, tok.encode_chat(&conv).unwrap());
        let a1 = "<command>ls -la /home/user</command>";
        conv.push(msg("assistant", a1));
        t.record(&tok, &conv, a1, &generation(&tok, a1, true))
            .unwrap();
        conv.push(msg(
            "user",
            "Command executed successfully. Output: a b c (exit_code=0)",
        ));
        let p2 = t.prompt(&tok, &conv).unwrap();
        assert_eq!(p2, tok.encode_chat(&conv).unwrap());
        let a2 = "<action>done</action>";
        conv.push(msg("assistant", a2));
        let g2 = generation(&tok, a2, true);
        t.record(&tok, &conv, a2, &g2).unwrap();
        let seq = t.into_builder().finish(1.0, true);
        let agent: Vec<u32> = seq
            .tokens
            .iter()
            .zip(&seq.agent_mask)
            .filter(|(_, m)| **m)
            .map(|(t, _)| *t)
            .collect();
        let mut want = generation(&tok, a1, true).token_ids;
        want.extend(&g2.token_ids);
        assert_eq!(agent, want);
        assert_eq!(&seq.tokens[..p2.len()], &p2[..]);
        assert!(seq
            .old_logprobs
            .iter()
            .zip(&seq.agent_mask)
            .all(|(l, m)| (*l == -0.5) == *m));
    }

    /// A reply cut by the token limit (no stop token) still leaves a prompt
    /// that continues the recorded stream.
    #[test]
    fn a_reply_cut_by_the_limit_keeps_the_stream_consistent() {
        let tok = tok();
        let mut conv = vec![msg("user", "list the files please")];
        let mut t = TokenTranscript::new();
        let p1 = t.prompt(&tok, &conv).unwrap();
        let cut = "<command>ls -la";
        conv.push(msg("assistant", cut));
        t.record(&tok, &conv, cut, &generation(&tok, cut, false))
            .unwrap();
        conv.push(msg("user", "Your response could not be parsed."));
        let p2 = t.prompt(&tok, &conv).unwrap();
        assert!(p2.starts_with(&p1));
        let tail = tok.decode(&p2[p1.len()..]).unwrap();
        assert!(tail.contains("could not be parsed"), "{tail}");
    }
}
