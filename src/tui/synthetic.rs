//! Synthetic task rows, for the frame benchmark (`crate::bench::tui`) and
//! the TUI's own tests.

use std::collections::BTreeMap;

use crate::store::{TaskRow, TaskStatus};

/// Rows for benchmarks and tests: `n` tasks over a few categories.
pub fn synthetic_rows(n: usize) -> Vec<TaskRow> {
    let cats = [
        "file-ops",
        "text-processing",
        "git",
        "archives",
        "permissions",
    ];
    let statuses = [
        TaskStatus::Candidate,
        TaskStatus::Accepted,
        TaskStatus::Rejected,
        TaskStatus::Archived,
    ];
    (0..n)
        .map(|i| {
            let mut pass = BTreeMap::new();
            if i % 3 != 0 {
                pass.insert("1".to_string(), (i % 17) as f64 / 16.0);
            }
            TaskRow {
                id: format!("task-{i:06}"),
                name: format!("synthetic task number {i}"),
                category: cats[i % cats.len()].into(),
                complexity: Some((i % 6 + 1) as u8),
                scenario: "bench".into(),
                tags: vec![],
                status: statuses[i % statuses.len()],
                source_format: "native".into(),
                pass_at_k: pass,
                rating: (i % 7 < 5).then_some((i % 5 + 1) as u8),
                notes: String::new(),
                instruction: format!("Do the thing number {i} in /home/user/work."),
                created_at: String::new(),
                updated_at: String::new(),
            }
        })
        .collect()
}
