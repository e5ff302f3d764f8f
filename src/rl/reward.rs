//! Episode rewards from completion-test results.

use serde::{Deserialize, Serialize};

/// How test results become a reward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewardMode {
    /// The paper's reward: 1 if every final test passed, else 0.
    #[default]
    Binary,
    /// Fraction of final tests passed.
    Partial,
    /// Binary, for episodes that also ended with the done action and had no
    /// malformed reply: outcome rewards credit every turn of a passing
    /// episode, so a solve followed by garbage turns teaches garbage.
    Clean,
}

/// The reward of an episode whose final tests passed `passed` of `total`.
/// No tests means reward 0 (nothing was verified).
pub fn reward(mode: RewardMode, passed: usize, total: usize) -> f32 {
    if total == 0 {
        return 0.0;
    }
    match mode {
        RewardMode::Binary | RewardMode::Clean => f32::from(passed >= total),
        RewardMode::Partial => passed.min(total) as f32 / total as f32,
    }
}

/// Normalise one PPO step's rewards in place to mean 0 and standard
/// deviation 1 over the step's episodes (batch statistics, population std).
/// When every reward is the same (std below 1e-6) they are only centred, so
/// all become 0: such a batch carries no signal about which episode was
/// better. Batch statistics rather than a running mean: with binary rewards
/// the pass rate moves quickly as the policy learns, and a running estimate
/// would lag it.
pub fn normalize_rewards(rewards: &mut [f32]) {
    if rewards.is_empty() {
        return;
    }
    let n = rewards.len() as f64;
    let mean = rewards.iter().map(|&r| r as f64).sum::<f64>() / n;
    let var = rewards
        .iter()
        .map(|&r| (r as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let std = var.sqrt();
    for r in rewards.iter_mut() {
        let centred = *r as f64 - mean;
        *r = if std < 1e-6 {
            0.0
        } else {
            (centred / std) as f32
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_uses_batch_mean_and_std() {
        let mut r = vec![1.0, 0.0, 0.0, 0.0];
        normalize_rewards(&mut r);
        // mean 0.25, std sqrt(0.1875)
        let s = 0.1875f32.sqrt();
        assert!((r[0] - 0.75 / s).abs() < 1e-5, "{r:?}");
        assert!((r[1] + 0.25 / s).abs() < 1e-5, "{r:?}");
        let mean: f32 = r.iter().sum::<f32>() / 4.0;
        let var: f32 = r.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5);
        // All the same: all zero, never NaN.
        let mut same = vec![1.0; 5];
        normalize_rewards(&mut same);
        assert_eq!(same, vec![0.0; 5]);
        let mut empty: Vec<f32> = Vec::new();
        normalize_rewards(&mut empty);
    }

    #[test]
    fn binary_and_partial() {
        assert_eq!(reward(RewardMode::Binary, 3, 3), 1.0);
        assert_eq!(reward(RewardMode::Binary, 2, 3), 0.0);
        assert_eq!(reward(RewardMode::Partial, 1, 4), 0.25);
        assert_eq!(reward(RewardMode::Partial, 0, 0), 0.0);
    }
}
