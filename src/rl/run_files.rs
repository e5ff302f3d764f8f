//! The files of one training run, `<workspace>/checkpoints/<train-id>/`:
//!
//! - `train.json`: what was asked for and where the run stands ([`RunInfo`]),
//!   rewritten atomically as the run progresses;
//! - `sft.jsonl`: one [`SftMetrics`] line per supervised warm-start step;
//! - `metrics.jsonl`: one [`super::StepMetrics`] line per PPO step;
//! - `eval.jsonl`: one [`EvalRecord`] line per held-out evaluation;
//! - `step-<N>/`: checkpoints (see [`super::checkpoint`]);
//! - `rollouts/step-<N>/`: the episodes each PPO step collected (a run
//!   directory like `runs/<run-id>/`).
//!
//! The CLI writes them and the TUI's Training view reads them, so a run in
//! another process shows up as well.

use super::error::{Result, RlError};
pub use super::metrics::SftMetrics;
use super::metrics::StepMetrics;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `train.json`.
pub const RUN_INFO: &str = "train.json";
/// `sft.jsonl`.
pub const SFT_METRICS: &str = "sft.jsonl";
/// `metrics.jsonl`.
pub const PPO_METRICS: &str = "metrics.jsonl";
/// `eval.jsonl`.
pub const EVALS: &str = "eval.jsonl";
/// `rollouts/`.
pub const ROLLOUTS: &str = "rollouts";

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// In progress (or its process died without saying otherwise).
    Running,
    /// Every step ran (or the time budget was used up).
    Finished,
    /// Stopped early on purpose or by a guard (cancel, non-finite loss).
    Stopped,
    /// An error ended it; `message` says which.
    Failed,
}

impl RunStatus {
    /// Lower-case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }
}

/// `train.json`: the run's settings and status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The directory name.
    pub id: String,
    /// RFC 3339 time the run was first started.
    pub created: String,
    /// RFC 3339 time of the last update.
    pub updated: String,
    /// The initial policy (`tiny`, a model directory, a GGUF file, `smollm2`),
    /// and `+ LoRA rank N` when only adapters are trained.
    pub init: String,
    /// Trained parameters of the policy (with LoRA: the adapters' and the
    /// value head's).
    pub params: usize,
    /// Training tasks.
    pub tasks: usize,
    /// Held-out tasks used for pass@1 before and after.
    pub eval_tasks: usize,
    /// PPO steps asked for.
    pub steps: u64,
    /// PPO steps done.
    pub steps_done: u64,
    /// Supervised warm-start steps asked for (0: none).
    pub sft_steps: u64,
    /// Samples per task.
    pub samples: u32,
    /// Turn limit per episode.
    pub max_turns: u32,
    /// Where the run stands.
    pub status: RunStatus,
    /// Why the run stopped or failed, or what it is doing.
    pub message: Option<String>,
    /// The effective recipe (absent in runs written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<super::recipe::Recipe>,
}

/// One held-out evaluation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// `before` (after any SFT, before PPO), `after`, or `step-<N>`.
    pub label: String,
    /// PPO steps done when it ran.
    pub step: u64,
    /// Episodes that passed / episodes.
    pub pass_at_1: f64,
    /// Episodes whose final tests all passed.
    pub passed: usize,
    /// Episodes run (held-out tasks times samples).
    pub episodes: usize,
    /// The run directory of its episodes.
    pub run_dir: PathBuf,
    /// Wall-clock seconds the evaluation took.
    pub seconds: f64,
}

/// Everything a viewer needs about one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunView {
    /// The run directory.
    pub dir: PathBuf,
    /// `train.json`, when it exists and parses.
    pub info: Option<RunInfo>,
    /// `sft.jsonl`: one entry per supervised step.
    pub sft: Vec<SftMetrics>,
    /// `metrics.jsonl`: one entry per PPO step.
    pub ppo: Vec<StepMetrics>,
    /// `eval.jsonl`: the held-out evaluations, in order.
    pub evals: Vec<EvalRecord>,
    /// Checkpoint directory names, oldest first.
    pub checkpoints: Vec<String>,
}

/// Write `train.json` atomically.
pub fn write_info(dir: &Path, info: &RunInfo) -> Result<()> {
    let path = dir.join(RUN_INFO);
    let text = serde_json::to_string_pretty(info).unwrap_or_default();
    crate::fsutil::write_atomic(&path, text.as_bytes()).map_err(|e| RlError::io(&path, e))
}

/// Read `train.json` (`Ok(None)` when there is none).
pub fn read_info(dir: &Path) -> Result<Option<RunInfo>> {
    let path = dir.join(RUN_INFO);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| RlError::ckpt(&path, format!("{RUN_INFO}: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RlError::io(&path, e)),
    }
}

/// Append one JSON line to `dir/name`.
pub fn append_line<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| RlError::io(dir, e))?;
    let path = dir.join(name);
    let mut line = serde_json::to_string(value).unwrap_or_default();
    line.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| RlError::io(&path, e))
}

/// Read every parseable line of `dir/name` (none if the file is missing; a
/// torn or foreign line is skipped).
pub fn read_lines<T: DeserializeOwned>(dir: &Path, name: &str) -> Vec<T> {
    std::fs::read_to_string(dir.join(name))
        .map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The checkpoint directory names of a run, oldest first.
pub fn checkpoint_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("step-") && !n.contains('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Load one run directory.
pub fn load_run(dir: &Path) -> RunView {
    RunView {
        dir: dir.to_path_buf(),
        info: read_info(dir).ok().flatten(),
        sft: read_lines(dir, SFT_METRICS),
        ppo: read_lines(dir, PPO_METRICS),
        evals: read_lines(dir, EVALS),
        checkpoints: checkpoint_names(dir),
    }
}

/// Every run under `root` (`<workspace>/checkpoints`), newest first.
pub fn list_runs(root: &Path) -> Vec<RunView> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.join(RUN_INFO).is_file())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.reverse();
    dirs.iter().map(|d| load_run(d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::recipe::{Recipe, RecipeFlags};

    #[test]
    fn files_round_trip_and_torn_lines_are_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("train-1");
        std::fs::create_dir_all(dir.join("step-00000002")).unwrap();
        let info = RunInfo {
            id: "train-1".into(),
            created: "2026-11-29T12:00:00Z".into(),
            updated: "2026-11-29T12:00:00Z".into(),
            init: "tiny".into(),
            params: 1000,
            tasks: 4,
            eval_tasks: 2,
            steps: 3,
            steps_done: 2,
            sft_steps: 0,
            samples: 4,
            max_turns: 4,
            status: RunStatus::Running,
            message: None,
            recipe: None,
        };
        write_info(&dir, &info).unwrap();
        append_line(
            &dir,
            PPO_METRICS,
            &StepMetrics {
                step: 1,
                ..Default::default()
            },
        )
        .unwrap();
        std::fs::write(
            dir.join(PPO_METRICS),
            std::fs::read_to_string(dir.join(PPO_METRICS)).unwrap() + "{\"step\": 2, \"rew",
        )
        .unwrap();
        let runs = list_runs(tmp.path());
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].info.as_ref(), Some(&info));
        assert_eq!(runs[0].ppo.len(), 1);
        assert_eq!(runs[0].checkpoints, vec!["step-00000002".to_string()]);
        std::fs::write(dir.join(RUN_INFO), "{").unwrap();
        let e = read_info(&dir).unwrap_err().to_string();
        assert!(e.contains("train.json"), "{e}");
    }

    #[test]
    fn recipe_round_trips_through_train_json() {
        let dir = tempfile::tempdir().unwrap();
        let recipe = Recipe::resolve(
            &crate::config::Config::load_with_env(Path::new("/nonexistent"), None, &[])
                .unwrap()
                .train,
            16,
            &RecipeFlags {
                reward: "binary".into(),
                ..RecipeFlags::default()
            },
            true,
        )
        .unwrap();
        let info = RunInfo {
            id: "t".into(),
            created: "2026-01-01T00:00:00Z".into(),
            updated: "2026-01-01T00:00:00Z".into(),
            init: "tiny".into(),
            params: 1,
            tasks: 1,
            eval_tasks: 0,
            steps: 1,
            steps_done: 0,
            sft_steps: 0,
            samples: recipe.samples,
            max_turns: recipe.max_turns,
            status: RunStatus::Running,
            message: None,
            recipe: Some(recipe.clone()),
        };
        write_info(dir.path(), &info).unwrap();
        let back = read_info(dir.path()).unwrap().unwrap();
        assert_eq!(back, info);
        assert_eq!(back.recipe.as_ref(), Some(&recipe));
        // A train.json written before recipes existed still reads.
        let mut v = serde_json::to_value(&info).unwrap();
        v.as_object_mut().unwrap().remove("recipe");
        std::fs::write(dir.path().join("train.json"), v.to_string()).unwrap();
        let old = read_info(dir.path()).unwrap().unwrap();
        assert_eq!(old.recipe, None);
        // Every setting of the table is in docs/training.md's recipe table.
        let readme = include_str!("../../docs/training.md");
        for (setting, _, _) in crate::rl::recipe::RECIPE_TABLE {
            assert!(
                readme.contains(&format!("| `{setting}` |")),
                "docs/training.md's recipe table lacks `{setting}`"
            );
        }
    }
}
