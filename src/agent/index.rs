//! Indexing finished episodes in the workspace, so that reports and the
//! TUI's Episodes view find them.

use std::path::Path;

use super::episode_io::EpisodePaths;
use super::result::EpisodeResult;
use crate::store::{EpisodeRow, StoreError, Workspace};

/// Index `episode` of run `run_id` (its files under `runs/<run_id>/`),
/// replacing an earlier row of the same task and sample.
pub fn index_episode(
    ws: &Workspace,
    run_id: &str,
    episode: &EpisodeResult,
) -> Result<(), StoreError> {
    ws.index_episode(&episode_row(ws, run_id, episode))
}

/// The index row of `episode` of run `run_id` (indexed now: its
/// `created_at` is empty; an import sets the time the episode finished).
pub fn episode_row(ws: &Workspace, run_id: &str, episode: &EpisodeResult) -> EpisodeRow {
    let root: &Path = ws.root();
    let path = EpisodePaths::new(&ws.runs_dir().join(run_id), &episode.task, episode.sample).result;
    let rel = path
        .strip_prefix(root)
        .unwrap_or(&path)
        .to_string_lossy()
        .into_owned();
    EpisodeRow {
        run_id: run_id.into(),
        task_id: episode.task.clone(),
        sample: episode.sample,
        passed: episode.passed,
        reward: episode.reward,
        turns: episode.turns,
        end_reason: episode.end_reason.as_str().to_string(),
        failure_mode: episode.failure_mode.map(|m| m.as_str().to_string()),
        path: rel,
        rating: None,
        label: None,
        notes: String::new(),
        taken_over: episode.taken_over.is_some(),
        failure_labels: episode
            .labels()
            .iter()
            .map(|m| m.as_str().to_string())
            .collect(),
        policy: episode.policy.clone(),
        duration_secs: episode.timings.total_secs,
        forked_from: episode
            .forked_from
            .as_ref()
            .map(|f| format!("{}/{}/{}@{}", f.run, f.task, f.sample, f.at_step)),
        created_at: String::new(),
    }
}
