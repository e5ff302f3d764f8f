//! Rollouts as PPO sees them: token ids, which tokens the agent produced,
//! the log-probs recorded when they were sampled, and one reward per sequence.

use super::error::{Result, RlError};
use serde::{Deserialize, Serialize};

/// One episode flattened into a token sequence (prompt, agent turns,
/// observations, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutSequence {
    /// All token ids in order.
    pub tokens: Vec<u32>,
    /// `true` for tokens the agent sampled (the only ones in the loss).
    pub agent_mask: Vec<bool>,
    /// Log-prob of each token when it was sampled (ignored where `agent_mask` is false).
    pub old_logprobs: Vec<f32>,
    /// The episode's reward.
    pub reward: f32,
    /// Whether the episode passed (every final test), for the pass rate.
    pub passed: bool,
}

impl RolloutSequence {
    /// Number of agent tokens.
    pub fn agent_tokens(&self) -> usize {
        self.agent_mask.iter().filter(|m| **m).count()
    }
}

/// Builds a [`RolloutSequence`] turn by turn, as the agent loop produces it:
/// context (system prompt, task, observations, chat-template glue) is masked
/// out, sampled tokens go in with their log-probs.
#[derive(Debug, Clone, Default)]
pub struct SequenceBuilder {
    tokens: Vec<u32>,
    agent_mask: Vec<bool>,
    old_logprobs: Vec<f32>,
}

impl SequenceBuilder {
    /// An empty sequence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append tokens the agent did not sample.
    pub fn context(&mut self, ids: &[u32]) -> &mut Self {
        self.tokens.extend_from_slice(ids);
        self.agent_mask
            .extend(std::iter::repeat_n(false, ids.len()));
        self.old_logprobs
            .extend(std::iter::repeat_n(0.0, ids.len()));
        self
    }

    /// Append tokens the agent sampled, with their sampling-time log-probs.
    pub fn agent(&mut self, ids: &[u32], logprobs: &[f32]) -> Result<&mut Self> {
        if ids.len() != logprobs.len() {
            return Err(RlError::Batch(format!(
                "{} sampled tokens but {} log-probs",
                ids.len(),
                logprobs.len()
            )));
        }
        if self.tokens.is_empty() && !ids.is_empty() {
            return Err(RlError::Batch(
                "a sequence cannot start with agent tokens (add the prompt first)".into(),
            ));
        }
        self.tokens.extend_from_slice(ids);
        self.agent_mask.extend(std::iter::repeat_n(true, ids.len()));
        self.old_logprobs.extend_from_slice(logprobs);
        Ok(self)
    }

    /// Tokens so far.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The token ids so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The finished sequence with the episode's reward.
    pub fn finish(self, reward: f32, passed: bool) -> RolloutSequence {
        RolloutSequence {
            tokens: self.tokens,
            agent_mask: self.agent_mask,
            old_logprobs: self.old_logprobs,
            reward,
            passed,
        }
    }
}

/// A batch of sequences for one PPO step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutBatch {
    /// The sequences (any lengths; they are right-padded internally).
    pub sequences: Vec<RolloutSequence>,
}

impl RolloutBatch {
    /// Check lengths and masks; the first token of a sequence cannot be an agent
    /// token (nothing precedes it to predict it from).
    pub fn validate(&self) -> Result<()> {
        if self.sequences.is_empty() {
            return Err(RlError::Batch("no sequences".into()));
        }
        let mut any = false;
        for (i, s) in self.sequences.iter().enumerate() {
            if s.tokens.len() != s.agent_mask.len() || s.tokens.len() != s.old_logprobs.len() {
                return Err(RlError::Batch(format!(
                    "sequence {i}: {} tokens, {} mask entries, {} log-probs",
                    s.tokens.len(),
                    s.agent_mask.len(),
                    s.old_logprobs.len()
                )));
            }
            if s.agent_mask.first() == Some(&true) {
                return Err(RlError::Batch(format!(
                    "sequence {i}: the first token cannot be an agent token"
                )));
            }
            if !s.reward.is_finite() {
                return Err(RlError::Batch(format!("sequence {i}: reward {}", s.reward)));
            }
            any |= s.agent_tokens() > 0;
        }
        if !any {
            return Err(RlError::Batch("no agent tokens in any sequence".into()));
        }
        Ok(())
    }

    /// Cut every sequence longer than `window` tokens (the model's context)
    /// to its first `window`, the most the model takes in one pass; returns
    /// how many were cut. Rollouts stay within the context as they are
    /// recorded: this guards the update against any that does not.
    pub fn truncate_to(&mut self, window: usize) -> usize {
        let mut cut = 0;
        for s in &mut self.sequences {
            if s.tokens.len() > window {
                s.tokens.truncate(window);
                s.agent_mask.truncate(window);
                s.old_logprobs.truncate(window);
                cut += 1;
            }
        }
        cut
    }

    /// Longest sequence length.
    pub fn max_len(&self) -> usize {
        self.sequences
            .iter()
            .map(|s| s.tokens.len())
            .max()
            .unwrap_or(0)
    }

    /// Total agent tokens.
    pub fn agent_tokens(&self) -> usize {
        self.sequences.iter().map(|s| s.agent_tokens()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_masks_context_and_validation_catches_mistakes() {
        let mut b = SequenceBuilder::new();
        assert!(
            b.agent(&[5], &[-1.0]).is_err(),
            "cannot start with agent tokens"
        );
        b.context(&[1, 2]);
        b.agent(&[7, 8], &[-0.5, -0.25]).unwrap();
        b.context(&[3]);
        assert!(b.agent(&[9], &[]).is_err());
        let s = b.finish(1.0, true);
        assert_eq!(s.tokens, vec![1, 2, 7, 8, 3]);
        assert_eq!(s.agent_mask, vec![false, false, true, true, false]);
        assert_eq!(s.old_logprobs, vec![0.0, 0.0, -0.5, -0.25, 0.0]);
        let batch = RolloutBatch {
            sequences: vec![s.clone()],
        };
        batch.validate().unwrap();
        let mut bad = s.clone();
        bad.agent_mask.pop();
        assert!(RolloutBatch {
            sequences: vec![bad]
        }
        .validate()
        .is_err());
        let mut none = s;
        none.agent_mask = vec![false; 5];
        let e = RolloutBatch {
            sequences: vec![none],
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("no agent tokens"));
    }
}
