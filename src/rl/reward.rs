//! Episode rewards from completion-test results.
//!
//! The partial reward pays only for progress over the task's baseline (its
//! final tests' verdicts on the untouched initial state, see
//! [`Baseline`]): with `F` the final tests that fail on the initial state,
//! `fixed` those of `F` that pass at the end, and `broken` the tests that
//! passed on the initial state but do not pass at the end (failing or
//! missing),
//!
//! ```text
//! partial = clamp((fixed - broken) / |F|, 0, 1)
//! ```
//!
//! Tests that pass initially and still pass count neither way, so an agent
//! that does nothing scores 0. A task with no initially failing test (which
//! validation rejects: "final tests already pass on the initial state")
//! scores 0: there is no progress to pay for, and paying 1 would pay doing
//! nothing. No test results (verification failed, a dead shell) also
//! score 0.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::agent::{SandboxProvider, StartOptions, TerminalError, TestOutcome};
use crate::task::{baseline_digest, Baseline, Task};

/// How test results become a reward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewardMode {
    /// The paper's reward: 1 if every final test passed, else 0.
    #[default]
    Binary,
    /// Progress over the task's baseline: the share of the final tests
    /// that failed on the initial state and pass at the end, less the tests
    /// the agent broke, clamped to [0, 1] (see the module docs).
    Partial,
    /// Binary, for episodes that also ended with the done action and had no
    /// malformed reply: outcome rewards credit every turn of a passing
    /// episode, so a solve followed by garbage turns teaches garbage.
    Clean,
}

/// The partial reward of final-test results `tests` against `baseline`
/// (the module docs give the formula). Tests absent from the baseline
/// count as initially failing.
pub fn progress_reward(baseline: &Baseline, tests: &[TestOutcome]) -> f32 {
    if tests.is_empty() {
        return 0.0;
    }
    let initially_passing: HashSet<&str> = baseline.passing.iter().map(String::as_str).collect();
    let passing_now: HashSet<&str> = tests
        .iter()
        .filter(|t| t.passed)
        .map(|t| t.name.as_str())
        .collect();
    let to_fix = tests
        .iter()
        .filter(|t| !initially_passing.contains(t.name.as_str()))
        .count();
    if to_fix == 0 {
        return 0.0;
    }
    let fixed = tests
        .iter()
        .filter(|t| t.passed && !initially_passing.contains(t.name.as_str()))
        .count();
    let broken = initially_passing
        .iter()
        .filter(|name| !passing_now.contains(*name))
        .count();
    ((fixed as f32 - broken as f32) / to_fix as f32).clamp(0.0, 1.0)
}

type Measured = Mutex<HashMap<(String, String), Arc<Baseline>>>;

/// Baselines measured in this process, by task id and content digest.
fn measured() -> &'static Measured {
    static MEASURED: OnceLock<Measured> = OnceLock::new();
    MEASURED.get_or_init(Default::default)
}

/// The baseline the partial reward uses for `task`: the bundle's
/// `[provenance.baseline]` when it was measured on the task as it is now
/// (validation records it); otherwise the final tests' verdicts on a fresh,
/// untouched copy of the initial state started with `provider`, measured
/// once per task and content digest in this process and kept in memory.
pub fn baseline_for<P: SandboxProvider>(
    provider: &P,
    task: &Task,
) -> Result<Arc<Baseline>, TerminalError> {
    if let Some(b) = task.baseline() {
        return Ok(Arc::new(b.clone()));
    }
    let key = (task.id().to_string(), baseline_digest(task));
    if let Some(b) = measured().lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(b);
    }
    let mut term = provider.start(task, &StartOptions::default())?;
    let verification = provider.verify(&mut term, task)?;
    drop(term);
    let baseline = Arc::new(Baseline::from_verdicts(
        task,
        verification
            .tests
            .iter()
            .map(|t| (t.name.as_str(), t.passed)),
    ));
    if let Ok(mut m) = measured().lock() {
        m.insert(key, baseline.clone());
    }
    Ok(baseline)
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

    fn outcomes(results: &[(&str, bool)]) -> Vec<TestOutcome> {
        results
            .iter()
            .map(|(name, passed)| TestOutcome {
                name: name.to_string(),
                passed: *passed,
                message: None,
            })
            .collect()
    }

    fn baseline(passing: &[&str], failing: &[&str]) -> Baseline {
        Baseline {
            passing: passing.iter().map(|s| s.to_string()).collect(),
            failing: failing.iter().map(|s| s.to_string()).collect(),
            digest: String::new(),
        }
    }

    #[test]
    fn partial_pays_only_for_progress_over_the_baseline() {
        // a and b pass on the initial state; c, d, e, f fail there.
        let b = baseline(&["a", "b"], &["c", "d", "e", "f"]);
        let r = |results: &[(&str, bool)]| progress_reward(&b, &outcomes(results));
        let untouched = [
            ("a", true),
            ("b", true),
            ("c", false),
            ("d", false),
            ("e", false),
            ("f", false),
        ];
        assert_eq!(r(&untouched), 0.0, "doing nothing earns nothing");
        let half = [
            ("a", true),
            ("b", true),
            ("c", true),
            ("d", true),
            ("e", false),
            ("f", false),
        ];
        assert_eq!(r(&half), 0.5);
        let all = [
            ("a", true),
            ("b", true),
            ("c", true),
            ("d", true),
            ("e", true),
            ("f", true),
        ];
        assert_eq!(r(&all), 1.0);
        // Fixing two but breaking one: (2 - 1) / 4.
        let broke_one = [
            ("a", false),
            ("b", true),
            ("c", true),
            ("d", true),
            ("e", false),
            ("f", false),
        ];
        assert_eq!(r(&broke_one), 0.25);
        // A baseline test missing at the end counts as broken; clamped at 0.
        let missing = [("c", true), ("d", false), ("e", false), ("f", false)];
        assert_eq!(r(&missing), 0.0);
        // A test unknown to the baseline counts as initially failing.
        let new_test = [
            ("a", true),
            ("b", true),
            ("c", true),
            ("d", true),
            ("e", true),
            ("f", true),
            ("g", false),
        ];
        assert!((r(&new_test) - 0.8).abs() < 1e-6);
        // No results, or nothing that failed initially: 0.
        assert_eq!(r(&[]), 0.0);
        let nothing_to_fix = baseline(&["a"], &[]);
        assert_eq!(
            progress_reward(&nothing_to_fix, &outcomes(&[("a", true)])),
            0.0
        );
    }
}
