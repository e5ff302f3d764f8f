//! Forking a recorded episode (`endless run TASK --fork EPISODE --at-step K
//! --policy P`, the inspector's `f`): a fresh sandbox re-runs the parent's
//! commands before step K, then policy P goes on; the fork is an episode
//! of its own, linked to its parent (`forked_from`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::agent::{load_result, EpisodePaths, EpisodeResult, ForkOf};
use crate::store::Workspace;

/// Which episode to fork, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkRequest {
    /// The parent: its result file, or `RUN/TASK/SAMPLE` in the workspace.
    pub parent: String,
    /// The step (0-based, as the inspector numbers them) the new policy
    /// takes over at; the parent's commands before it are re-run first.
    pub at_step: usize,
}

/// The parent's result file: `parent` itself when it is a file, else
/// `RUN/TASK/SAMPLE` under the workspace's `runs/`.
pub fn parent_path(ws: &Workspace, parent: &str) -> Result<PathBuf> {
    let as_path = Path::new(parent);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    let parts: Vec<&str> = parent.split('/').collect();
    match parts.as_slice() {
        [run, task, sample] if sample.parse::<u32>().is_ok() => {
            let sample: u32 = sample.parse().unwrap_or_default();
            Ok(EpisodePaths::new(&ws.runs_dir().join(run), task, sample).result)
        }
        _ => bail!("--fork {parent:?}: expected an episode's result file or RUN/TASK/SAMPLE"),
    }
}

/// Read the parent episode of `req` (for task `task`).
pub fn load_parent(
    ws: &Workspace,
    req: &ForkRequest,
    task: &str,
) -> Result<(EpisodeResult, ForkOf)> {
    let path = parent_path(ws, &req.parent)?;
    let parent = load_result(&path)
        .with_context(|| format!("--fork: cannot read the episode result {}", path.display()))?;
    if parent.task != task {
        bail!(
            "--fork: {} is an episode of task {}, not {task}",
            path.display(),
            parent.task
        );
    }
    // The run is the directory above `episodes/`.
    let run = path
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let link = ForkOf {
        run,
        task: parent.task.clone(),
        sample: parent.sample,
        policy: parent.policy.clone(),
        at_step: req.at_step as u32,
        replayed: 0,
    };
    Ok((parent, link))
}

/// Record the link to the parent in the fork's result file (atomically).
pub fn link_fork(run_dir: &Path, mut result: EpisodeResult, link: ForkOf) -> Result<EpisodeResult> {
    result.forked_from = Some(link);
    let path = EpisodePaths::new(run_dir, &result.task, result.sample).result;
    let json = serde_json::to_vec_pretty(&result)?;
    crate::fsutil::write_atomic(&path, &json)
        .with_context(|| format!("writing {}", path.display()))?;
    // An ATIF document written as the episode finished (`[record] atif`)
    // learns the link too: the replayed steps are copied context.
    let paths = EpisodePaths::new(run_dir, &result.task, result.sample).with_atif(true);
    if let Some(atif) = paths.atif.as_ref().filter(|p| p.is_file()) {
        let run = crate::agent::run_of(&path);
        crate::agent::atif::episode_document(&run, &paths, &result)
            .and_then(|doc| crate::agent::atif::write_atif(atif, &doc))
            .with_context(|| format!("writing {}", atif.display()))?;
    }
    Ok(result)
}
