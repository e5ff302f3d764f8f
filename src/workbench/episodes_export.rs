//! `endless episodes export --format atif`: finished episodes of the
//! workspace's runs (or of any run directory, such as a training step's
//! rollouts) written as ATIF trajectories, `OUT/<run>/<task>/<n>.atif.json`.
//! An episode imported from Harbor with the trial's own trajectory is
//! exported as that document, byte for byte, not rebuilt.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::import_runs::IMPORTED_KIND;
use super::runs::glob_match;
use crate::agent::atif::{atif_path, episode_document, parse_atif, write_atif};
use crate::agent::{load_run, EpisodePaths, EpisodeResult};
use crate::store::Workspace;

/// What to export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportRequest {
    /// A run id in the workspace, or a directory holding `episodes/`;
    /// `None`: every run of the workspace.
    pub run: Option<String>,
    /// Comma-separated task ids or `*` globs; `None`: every task.
    pub tasks: Option<String>,
    /// The directory written into.
    pub out: PathBuf,
}

/// One written document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportedEpisode {
    /// The episode's run.
    pub run: String,
    /// Its task.
    pub task: String,
    /// Its sample.
    pub sample: u32,
    /// The ATIF file written.
    pub path: PathBuf,
}

/// The run directories `run` names: `(run id, directory)`.
fn run_dirs(ws: &Workspace, run: Option<&str>) -> Result<Vec<(String, PathBuf)>> {
    let runs = ws.runs_dir();
    if let Some(run) = run {
        let as_dir = Path::new(run);
        if as_dir.join("episodes").is_dir() {
            let name = as_dir
                .canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| run.to_string());
            return Ok(vec![(name, as_dir.to_path_buf())]);
        }
        let dir = runs.join(run);
        if !dir.join("episodes").is_dir() {
            bail!(
                "--run {run:?}: no such run in the workspace ({} has no episodes/) nor a run directory",
                dir.display()
            );
        }
        return Ok(vec![(run.to_string(), dir)]);
    }
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&runs)
        .with_context(|| format!("reading {}", runs.display()))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            (!name.starts_with('.')).then(|| (name, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The ATIF document an imported episode came with (`<n>.atif.json`: the
/// Harbor trial's own `agent/trajectory.json`, kept by the import), its
/// bytes, checked to be ATIF; `None` for endless's own episodes and for
/// trials whose agent wrote none (the oracle, `nop`).
fn imported_document(paths: &EpisodePaths, result: &EpisodeResult) -> Result<Option<Vec<u8>>> {
    if !result
        .policy
        .strip_prefix(IMPORTED_KIND)
        .is_some_and(|rest| rest.starts_with(':'))
    {
        return Ok(None);
    }
    let path = atif_path(paths);
    // trusted: a run directory of the workspace, written by the import
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    parse_atif(&path, &String::from_utf8_lossy(&bytes))?;
    Ok(Some(bytes))
}

/// Write every selected finished episode as an ATIF document under
/// `req.out`; returns what was written, in run, task, sample order.
pub fn export_atif(ws: &Workspace, req: &ExportRequest) -> Result<Vec<ExportedEpisode>> {
    let patterns: Vec<&str> = req
        .tasks
        .as_deref()
        .map(|t| {
            t.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let wanted = |task: &str| patterns.is_empty() || patterns.iter().any(|p| glob_match(p, task));
    let mut written = Vec::new();
    for (run, dir) in run_dirs(ws, req.run.as_deref())? {
        for result in load_run(&dir).into_iter().filter(|r| wanted(&r.task)) {
            let paths = EpisodePaths::new(&dir, &result.task, result.sample);
            let path = req
                .out
                .join(&run)
                .join(&result.task)
                .join(format!("{}.atif.json", result.sample));
            match imported_document(&paths, &result)? {
                Some(bytes) => crate::fsutil::write_atomic(&path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => write_atif(&path, &episode_document(&run, &paths, &result)?)?,
            }
            written.push(ExportedEpisode {
                run: run.clone(),
                task: result.task.clone(),
                sample: result.sample,
                path,
            });
        }
    }
    if written.is_empty() {
        bail!(
            "no finished episode matches (runs under {})",
            ws.runs_dir().display()
        );
    }
    Ok(written)
}
