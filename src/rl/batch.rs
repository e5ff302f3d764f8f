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
