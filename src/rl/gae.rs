//! Generalised advantage estimation over the agent's tokens.
//!
//! Each agent token is one step; prompt and observation tokens are not steps.
//! With the paper's gamma = lambda = 1 and a single terminal reward R, every
//! agent token's advantage is `R - V(t)` and its return is `R`.

/// Advantages and returns for one sequence of steps.
///
/// `rewards[k]` is the reward after step `k`, `values[k]` the value estimate
/// before it; the value after the last step is 0 (the episode ended).
pub fn gae(rewards: &[f32], values: &[f32], gamma: f32, lambda: f32) -> (Vec<f32>, Vec<f32>) {
    let n = rewards.len().min(values.len());
    let mut adv = vec![0.0f32; n];
    let mut next_value = 0.0f32;
    let mut running = 0.0f32;
    for k in (0..n).rev() {
        let delta = rewards[k] + gamma * next_value - values[k];
        running = delta + gamma * lambda * running;
        adv[k] = running;
        next_value = values[k];
    }
    let returns = adv.iter().zip(values).map(|(a, v)| a + v).collect();
    (adv, returns)
}

/// Rewards per step for a sequence of `n` agent tokens with one terminal reward.
pub fn terminal_rewards(n: usize, reward: f32) -> Vec<f32> {
    let mut r = vec![0.0; n];
    if let Some(last) = r.last_mut() {
        *last = reward;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn gamma_lambda_one_gives_reward_minus_value() {
        let v = [0.2, 0.5, 0.9];
        let (a, r) = gae(&terminal_rewards(3, 1.0), &v, 1.0, 1.0);
        close(&a, &[0.8, 0.5, 0.1]);
        close(&r, &[1.0, 1.0, 1.0]);
        let (a, r) = gae(&terminal_rewards(2, 0.0), &[0.3, -0.1], 1.0, 1.0);
        close(&a, &[-0.3, 0.1]);
        close(&r, &[0.0, 0.0]);
    }

    #[test]
    fn hand_computed_discounted_case() {
        // gamma = 0.5, lambda = 0.5, rewards [1, 0, 2], values [1, 2, 3]:
        // d2 = 2 - 3 = -1;        A2 = -1
        // d1 = 0 + 0.5*3 - 2 = -0.5; A1 = -0.5 + 0.25*(-1) = -0.75
        // d0 = 1 + 0.5*2 - 1 = 1;    A0 = 1 + 0.25*(-0.75) = 0.8125
        let (a, r) = gae(&[1.0, 0.0, 2.0], &[1.0, 2.0, 3.0], 0.5, 0.5);
        close(&a, &[0.8125, -0.75, -1.0]);
        close(&r, &[1.8125, 1.25, 2.0]);
        let (a, _) = gae(&[], &[], 1.0, 1.0);
        assert!(a.is_empty());
    }
}
