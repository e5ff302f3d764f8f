//! Interrupted episodes recorded as results: an episode whose process died
//! without writing its result (a `kill -9` of `endless eval`, a crash) is
//! found by its trajectory (see [`crate::agent::is_interrupted`]), given a
//! result with end reason `interrupted` (unscored, like an infrastructure
//! error) and indexed, so that Episodes lists it, its filters find it and
//! it survives restarts and `workspace rebuild`. Done when a workspace is
//! opened ([`super::open_rebuilding`]: every CLI command, the TUI's start),
//! by `workspace rebuild`, and when the TUI's Live view sees the process
//! go. Idempotent: a recorded episode has a result and is left alone.

use std::path::Path;

use anyhow::{Context as _, Result};

use crate::agent::{index_episode, record_interrupted, EpisodePaths, EpisodeResult};
use crate::store::Workspace;

/// The kind of a run, from its id (`eval-…`, `run-…`, `serve-…`).
pub(super) fn run_kind(run_id: &str) -> &str {
    match run_id.split_once('-') {
        Some((kind, _)) if !kind.is_empty() => kind,
        _ => "run",
    }
}

/// Record episode `sample` of `task` in run `run_id` as interrupted, if it
/// is (its process is gone and it has no result), and index it. Returns
/// the result written, `None` when there was nothing to record. Sessions
/// of `endless serve` (runs `serve-…`) are left to the server's own
/// journal, which records them when the next server starts.
pub fn record_interrupted_episode(
    ws: &Workspace,
    run_id: &str,
    task: &str,
    sample: u32,
) -> Result<Option<EpisodeResult>> {
    if run_kind(run_id) == "serve" {
        return Ok(None);
    }
    let paths = EpisodePaths::new(&ws.runs_dir().join(run_id), task, sample);
    // The task's category and complexity, where it is still in the index.
    let (category, complexity) = ws
        .task_row(task)
        .map(|r| (r.category, r.complexity))
        .unwrap_or_default();
    let Some(result) = record_interrupted(&paths, &category, complexity)
        .with_context(|| format!("recording {}", paths.result.display()))?
    else {
        return Ok(None);
    };
    // A run the index lost (its episodes are indexed under it) gets a row.
    ws.upsert_run(
        run_id,
        run_kind(run_id),
        &result.policy,
        &serde_json::json!({}),
    )?;
    index_episode(ws, run_id, &result)?;
    Ok(Some(result))
}

/// The `(task, sample)` of every episode of the run directory `run_dir`
/// that has a trajectory but no result.
fn unfinished(run_dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(run_dir.join("episodes")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(files) = std::fs::read_dir(t.path()) else {
            continue;
        };
        let task = t.file_name().to_string_lossy().into_owned();
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let Some(sample) = name
                .strip_suffix(".jsonl")
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if !t.path().join(format!("{sample}.json")).exists() {
                out.push((task.clone(), sample));
            }
        }
    }
    out.sort();
    out
}

/// Record every interrupted episode of the runs `run_ids` (see
/// [`record_interrupted_episode`]); returns those recorded.
pub fn record_interrupted_runs<'a>(
    ws: &Workspace,
    run_ids: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<EpisodeResult>> {
    let mut recorded = Vec::new();
    for run_id in run_ids {
        for (task, sample) in unfinished(&ws.runs_dir().join(run_id)) {
            recorded.extend(record_interrupted_episode(ws, run_id, &task, sample)?);
        }
    }
    Ok(recorded)
}

/// Record every interrupted episode of the runs the index has not seen
/// finish (a finished run has a result for each of its episodes), but
/// those of `endless serve` (see [`record_interrupted_episode`]).
pub fn record_interrupted_episodes(ws: &Workspace) -> Result<Vec<EpisodeResult>> {
    let open: Vec<String> = ws
        .list_runs()?
        .into_iter()
        .filter(|r| r.finished_at.is_none() && run_kind(&r.id) != "serve")
        .map(|r| r.id)
        .collect();
    record_interrupted_runs(ws, open.iter().map(String::as_str))
}
