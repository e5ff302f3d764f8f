//! Per-step training metrics, appended as JSON lines.

use super::error::{Result, RlError};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What one PPO step measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Steps completed after this one (1-based).
    pub step: u64,
    /// Mean episode reward in the batch.
    pub reward: f64,
    /// Fraction of episodes that passed.
    pub pass_rate: f64,
    /// Clipped PPO policy loss, mean over the step's updates.
    pub policy_loss: f64,
    /// (Clipped) value loss, mean over the step's updates.
    pub value_loss: f64,
    /// Fraction of agent tokens whose gradient was clipped away.
    pub clip_frac: f64,
    /// Mean entropy of the policy at agent tokens.
    pub entropy: f64,
    /// Approximate KL(old || new) over agent tokens.
    pub approx_kl: f64,
    /// KL estimate to the reference policy (0 without a KL penalty; absent
    /// in files written before it existed).
    #[serde(default)]
    pub kl_ref: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Agent tokens trained on.
    pub agent_tokens: usize,
    /// All tokens (prompt, observations, agent) processed.
    pub tokens: usize,
    /// Tokens processed per second of this step.
    pub tokens_per_s: f64,
    /// Wall time of the step, in seconds.
    pub seconds: f64,
}

/// Appends [`StepMetrics`] to a JSONL file.
#[derive(Debug, Clone)]
pub struct MetricsLog {
    path: PathBuf,
}

impl MetricsLog {
    /// Log to `path` (created with its directory on first write).
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one line.
    pub fn append(&self, m: &StepMetrics) -> Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| RlError::io(dir, e))?;
        }
        let mut line = serde_json::to_string(m).unwrap_or_default();
        line.push('\n');
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| RlError::io(&self.path, e))
    }

    /// Read every line back (skipping a torn last line).
    pub fn read(&self) -> Result<Vec<StepMetrics>> {
        let text = std::fs::read_to_string(&self.path).map_err(|e| RlError::io(&self.path, e))?;
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}

/// One supervised (SFT) step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SftMetrics {
    /// Steps done after this one (1-based).
    pub step: u64,
    /// Mean cross-entropy over the agent's tokens.
    pub loss: f64,
    /// Agent tokens in the batch.
    pub agent_tokens: usize,
    /// Tokens processed per second.
    pub tokens_per_s: f64,
    /// Learning rate of the step.
    pub lr: f64,
}
