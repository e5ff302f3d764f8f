//! Small store queries the TUI needs that `crate::store` does not offer
//! (kept here, not in `src/store`, until the store owner adopts them).

use crate::store::{EpisodeRow, StoreError, Workspace};

/// Episodes of one task across all runs (uses the `episodes_task` index),
/// ordered like `Workspace::list_episodes`.
pub fn task_episodes(ws: &Workspace, task_id: &str) -> Result<Vec<EpisodeRow>, StoreError> {
    let mut stmt = ws.conn.prepare(
        "SELECT run_id, task_id, sample, passed, reward, turns, end_reason, failure_mode, path, rating, label, notes
         FROM episodes WHERE task_id = ?1 ORDER BY run_id, task_id, sample",
    )?;
    let rows = stmt.query_map([task_id], |r| {
        Ok(EpisodeRow {
            run_id: r.get(0)?,
            task_id: r.get(1)?,
            sample: r.get::<_, i64>(2)?.max(0) as u32,
            passed: r.get(3)?,
            reward: r.get(4)?,
            turns: r.get::<_, i64>(5)?.max(0) as u32,
            end_reason: r.get(6)?,
            failure_mode: r.get(7)?,
            path: r.get(8)?,
            rating: r.get::<_, Option<i64>>(9)?.map(|v| v.clamp(0, 5) as u8),
            label: r.get(10)?,
            notes: r.get(11)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
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
