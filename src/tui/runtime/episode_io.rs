//! Episode files for the inspector (result JSON and `.cast` recording) and
//! the ratings export.

use std::path::PathBuf;

use crate::agent::EpisodeResult;
use crate::store::{EpisodeRow, Workspace};
use crate::tui::replay::Cast;

/// One episode as loaded from disk by the store worker.
#[derive(Debug, Clone)]
pub struct LoadedEpisode {
    /// Its index row (ratings, labels and notes are edited here).
    pub row: EpisodeRow,
    /// The `.json` result, or why it could not be read.
    pub result: Result<EpisodeResult, String>,
    /// The `.cast` recording, or why there is none.
    pub cast: Result<Cast, String>,
}

/// Read an episode's result and recording (paths relative to the workspace;
/// the recording sits next to the result as `<sample>.cast`).
pub fn load_episode(ws: &Workspace, row: EpisodeRow) -> LoadedEpisode {
    let path = ws.root().join(&row.path);
    let result_path = path.with_extension("json");
    let result = crate::agent::load_result(&result_path)
        .ok_or_else(|| format!("cannot read the episode result {}", result_path.display()));
    let cast_path = path.with_extension("cast");
    let cast = match std::fs::read_to_string(&cast_path) {
        Ok(text) => Cast::parse(&text).map_err(|e| format!("{}: {e}", cast_path.display())),
        // No recording (an imported run, `--no-record`): the transcript.
        Err(e) => match &result {
            Ok(r) if e.kind() == std::io::ErrorKind::NotFound && !r.steps.is_empty() => {
                Ok(Cast::transcript(&r.steps))
            }
            _ => Err(format!("{}: {e}", cast_path.display())),
        },
    };
    LoadedEpisode { row, result, cast }
}

/// One line of `ratings.jsonl`.
#[derive(Debug, serde::Serialize)]
struct RatingLine<'a> {
    run_id: &'a str,
    task_id: &'a str,
    sample: u32,
    passed: bool,
    failure_mode: Option<&'a str>,
    rating: Option<u8>,
    label: Option<&'a str>,
    notes: &'a str,
    path: &'a str,
}

/// Write every rated, labelled or annotated episode to
/// `<workspace>/ratings.jsonl` (atomically); returns the count and the path.
pub fn export_ratings(ws: &Workspace) -> anyhow::Result<(usize, PathBuf)> {
    let rows = ws.list_episodes(None)?;
    let mut out = Vec::new();
    let mut n = 0;
    for r in rows
        .iter()
        .filter(|r| r.rating.is_some() || r.label.is_some() || !r.notes.is_empty())
    {
        let line = RatingLine {
            run_id: &r.run_id,
            task_id: &r.task_id,
            sample: r.sample,
            passed: r.passed,
            failure_mode: r.failure_mode.as_deref(),
            rating: r.rating,
            label: r.label.as_deref(),
            notes: &r.notes,
            path: &r.path,
        };
        serde_json::to_writer(&mut out, &line)?;
        out.push(b'\n');
        n += 1;
    }
    let path = ws.root().join("ratings.jsonl");
    crate::fsutil::write_atomic(&path, &out)?;
    Ok((n, path))
}
