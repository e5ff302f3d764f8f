//! Comparing two runs: which tasks flipped between pass and fail.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::agent::EpisodeResult;

/// One task's pass rate in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskFlip {
    /// The task id.
    pub task: String,
    /// Passed / scored samples in run A, 0.0 to 1.0.
    pub pass_rate_a: f64,
    /// Passed / scored samples in run B, 0.0 to 1.0.
    pub pass_rate_b: f64,
}

/// How run B differs from run A. A task counts as solved in a run when at
/// least one of its scored samples passed (infrastructure errors are left
/// out; episodes whose shell died count as failed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunComparison {
    /// Passed / scored samples over all of run A's tasks, 0.0 to 1.0.
    pub pass_rate_a: f64,
    /// Passed / scored samples over all of run B's tasks, 0.0 to 1.0.
    pub pass_rate_b: f64,
    /// Unsolved in A, solved in B.
    pub newly_solved: Vec<TaskFlip>,
    /// Solved in A, unsolved in B.
    pub newly_failed: Vec<TaskFlip>,
    /// Solved in both, with a different pass rate.
    pub changed: Vec<TaskFlip>,
    /// Tasks with scored samples in A only.
    pub only_in_a: Vec<String>,
    /// Tasks with scored samples in B only.
    pub only_in_b: Vec<String>,
}

fn per_task(eps: &[EpisodeResult]) -> BTreeMap<String, (usize, usize)> {
    let mut m: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in eps.iter().filter(|e| e.end_reason.is_scored()) {
        let entry = m.entry(e.task.clone()).or_default();
        entry.0 += 1;
        entry.1 += e.passed as usize;
    }
    m
}

fn rate((n, c): (usize, usize)) -> f64 {
    if n == 0 {
        0.0
    } else {
        c as f64 / n as f64
    }
}

fn overall(m: &BTreeMap<String, (usize, usize)>) -> f64 {
    let (n, c) = m.values().fold((0, 0), |acc, v| (acc.0 + v.0, acc.1 + v.1));
    rate((n, c))
}

/// Compare run `a` with run `b`.
pub fn compare_runs(a: &[EpisodeResult], b: &[EpisodeResult]) -> RunComparison {
    let (ma, mb) = (per_task(a), per_task(b));
    let mut cmp = RunComparison {
        pass_rate_a: overall(&ma),
        pass_rate_b: overall(&mb),
        newly_solved: Vec::new(),
        newly_failed: Vec::new(),
        changed: Vec::new(),
        only_in_a: ma
            .keys()
            .filter(|k| !mb.contains_key(*k))
            .cloned()
            .collect(),
        only_in_b: mb
            .keys()
            .filter(|k| !ma.contains_key(*k))
            .cloned()
            .collect(),
    };
    for (task, &sa) in &ma {
        let Some(&sb) = mb.get(task) else { continue };
        let flip = TaskFlip {
            task: task.clone(),
            pass_rate_a: rate(sa),
            pass_rate_b: rate(sb),
        };
        match (sa.1 > 0, sb.1 > 0) {
            (false, true) => cmp.newly_solved.push(flip),
            (true, false) => cmp.newly_failed.push(flip),
            _ if (flip.pass_rate_a - flip.pass_rate_b).abs() > 1e-12 => cmp.changed.push(flip),
            _ => {}
        }
    }
    cmp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::EndReason;
    use crate::eval::report::tests::episode;

    #[test]
    fn a_dead_shell_counts_as_tried_and_failed() {
        let a = [
            episode("x", 0, true, EndReason::Done),
            episode("y", 0, false, EndReason::Error),
        ];
        let b = [
            episode("x", 0, false, EndReason::ShellDied),
            episode("y", 0, false, EndReason::ShellDied),
        ];
        let cmp = compare_runs(&a, &b);
        assert_eq!((cmp.pass_rate_a, cmp.pass_rate_b), (1.0, 0.0));
        assert_eq!(cmp.newly_failed.len(), 1);
        assert_eq!(cmp.only_in_b, ["y"], "an error in A is not a try");
    }
}
