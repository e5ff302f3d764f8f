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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_partial() {
        assert_eq!(reward(RewardMode::Binary, 3, 3), 1.0);
        assert_eq!(reward(RewardMode::Binary, 2, 3), 0.0);
        assert_eq!(reward(RewardMode::Partial, 1, 4), 0.25);
        assert_eq!(reward(RewardMode::Partial, 0, 0), 0.0);
    }
}
