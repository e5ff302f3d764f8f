//! The unbiased pass@k estimator (Chen et al., 2021).

use std::collections::BTreeMap;

/// Unbiased pass@k for one task with `n` samples of which `c` passed:
/// `1 - C(n-c, k) / C(n, k)`, computed as the stable product
/// `1 - prod_{i=n-c+1..=n} (1 - k/i)`. Returns `None` when `k > n` or `k == 0`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if k == 0 || k > n {
        return None;
    }
    let c = c.min(n);
    if n - c < k {
        return Some(1.0);
    }
    let mut prod = 1.0f64;
    for i in (n - c + 1)..=n {
        prod *= 1.0 - k as f64 / i as f64;
    }
    Some(1.0 - prod)
}

/// Mean pass@k over tasks, for k = 1..=max n; each k averages the tasks
/// with at least k samples. `tasks` holds `(n, c)` per task.
pub fn pass_at_k_table(tasks: &[(usize, usize)]) -> BTreeMap<u32, f64> {
    let max_n = tasks.iter().map(|t| t.0).max().unwrap_or(0);
    let mut out = BTreeMap::new();
    for k in 1..=max_n {
        let vals: Vec<f64> = tasks
            .iter()
            .filter_map(|&(n, c)| pass_at_k(n, c, k))
            .collect();
        if !vals.is_empty() {
            out.insert(k as u32, vals.iter().sum::<f64>() / vals.len() as f64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binom(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn matches_the_closed_form() {
        for n in 1..=16usize {
            for c in 0..=n {
                for k in 1..=n {
                    let exact = 1.0 - binom((n - c) as u64, k as u64) / binom(n as u64, k as u64);
                    let got = pass_at_k(n, c, k).unwrap();
                    assert!(
                        (got - exact).abs() < 1e-9,
                        "n={n} c={c} k={k}: {got} vs {exact}"
                    );
                }
            }
        }
        assert_eq!(pass_at_k(4, 0, 1), Some(0.0));
        assert_eq!(pass_at_k(4, 1, 1), Some(0.25));
        assert_eq!(pass_at_k(4, 4, 2), Some(1.0));
        assert_eq!(pass_at_k(4, 1, 5), None);
    }

    #[test]
    fn stable_for_large_n() {
        let v = pass_at_k(1000, 1, 1).unwrap();
        assert!((v - 0.001).abs() < 1e-12);
        assert!(pass_at_k(1000, 500, 500).unwrap() > 0.999_999);
    }

    #[test]
    fn table_averages_tasks() {
        let t = pass_at_k_table(&[(2, 1), (2, 0)]);
        assert_eq!(t[&1], 0.25);
        assert_eq!(t[&2], 0.5);
    }
}
