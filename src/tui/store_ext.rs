//! Small store queries the TUI needs that `crate::store` does not offer
//! (kept here, not in `src/store`, until the store owner adopts them).

use crate::store::{EpisodeRow, StoreError, Workspace};

/// Episodes of one task across all runs.
pub fn task_episodes(ws: &Workspace, task_id: &str) -> Result<Vec<EpisodeRow>, StoreError> {
    ws.task_episodes(task_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_list_episodes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.upsert_run("r", "eval", "oracle", &serde_json::json!({}))
            .unwrap();
        for (task, sample) in [("a", 0), ("b", 0), ("a", 1)] {
            ws.index_episode(&EpisodeRow {
                run_id: "r".into(),
                task_id: task.into(),
                sample,
                passed: sample == 0,
                reward: 0.0,
                turns: 1,
                end_reason: "done".into(),
                failure_mode: None,
                path: String::new(),
                rating: None,
                label: None,
                notes: String::new(),
            })
            .unwrap();
        }
        let all = ws.list_episodes(None).unwrap();
        let want: Vec<_> = all.into_iter().filter(|e| e.task_id == "a").collect();
        assert_eq!(task_episodes(&ws, "a").unwrap(), want);
    }
}
