//! Episodes whose process died without writing a result (`kill -9` of an
//! evaluation, a crash, a machine that went down): their trajectory
//! (`<n>.jsonl`, whose `start` line names the process recording it) is
//! all that is left. [`interrupted_result`] turns such a trajectory into a
//! result of its own: end reason `interrupted`, an infrastructure outcome
//! (failure mode `error`), unscored (left out of pass rates like `error`),
//! with the steps the trajectory holds. Writing it beside the trajectory
//! (`<n>.json`) makes the episode a finished one for everything that reads
//! results: the index, `workspace rebuild`, the TUI; a resumed evaluation
//! runs it again.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::Duration;

use super::episode::{EndReason, Step, StepKind};
use super::episode_io::EpisodePaths;
use super::failure::FailureMode;
use super::recorded::EpisodeOwner;
use super::result::{EpisodeResult, Timings};
use crate::llm::TokenUsage;

/// An episode whose trajectory names no owner this machine can check
/// (recorded before owners were, or on another machine) counts as
/// interrupted once its files have been still for this long.
pub const UNOWNED_STILL: Duration = Duration::from_secs(30 * 60);

/// What an unfinished trajectory says.
#[derive(Debug, Default)]
struct Partial {
    task: String,
    sample: Option<u32>,
    policy: String,
    owner: Option<EpisodeOwner>,
    steps: Vec<Step>,
}

/// The owner named by the trajectory's first line (its `start` line),
/// read without the rest of the file.
fn start_owner(path: &Path) -> Option<EpisodeOwner> {
    let file = std::fs::File::open(path).ok()?;
    let mut first = String::new();
    BufReader::new(file.take(64 * 1024))
        .read_line(&mut first)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&first).ok()?;
    (v.get("type").and_then(|t| t.as_str()) == Some("start"))
        .then(|| serde_json::from_value(v.get("owner")?.clone()).ok())
        .flatten()
}

/// Read the `start` and `step` lines of the trajectory at `path` (a torn
/// last line, as a kill leaves, is skipped).
fn read_partial(path: &Path) -> Option<Partial> {
    let file = std::fs::File::open(path).ok()?;
    let mut partial = Partial::default();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        match v.get("type").and_then(|t| t.as_str()) {
            Some("start") => {
                partial.task = v["task"].as_str().unwrap_or_default().to_string();
                partial.sample = v["sample"].as_u64().map(|s| s as u32);
                partial.policy = v["policy"].as_str().unwrap_or_default().to_string();
                partial.owner = serde_json::from_value(v["owner"].clone()).ok();
            }
            Some("step") => {
                if let Ok(step) = serde_json::from_value::<Step>(v["step"].clone()) {
                    partial.steps.push(step);
                }
            }
            _ => {}
        }
    }
    Some(partial)
}

/// Whether the episode at `paths` was interrupted: it has a trajectory but
/// no result, and the process recording it is gone (its owner is not
/// running; with no owner this machine can check, its files have been
/// still for [`UNOWNED_STILL`]).
pub fn is_interrupted(paths: &EpisodePaths) -> bool {
    if paths.result.exists() || !paths.trajectory.is_file() {
        return false;
    }
    owner_gone(start_owner(&paths.trajectory).as_ref(), paths)
}

fn owner_gone(owner: Option<&EpisodeOwner>, paths: &EpisodePaths) -> bool {
    let still = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age > UNOWNED_STILL)
    };
    match owner.and_then(EpisodeOwner::is_alive) {
        Some(alive) => !alive,
        None => still(&paths.trajectory) && still(&paths.cast),
    }
}

/// The result of the interrupted episode at `paths` (see
/// [`is_interrupted`]) of a task of `category` and `complexity`; `None`
/// when it is not interrupted (finished, still running, or no trajectory).
pub fn interrupted_result(
    paths: &EpisodePaths,
    category: &str,
    complexity: Option<u8>,
) -> Option<EpisodeResult> {
    if !is_interrupted(paths) {
        return None;
    }
    let partial = read_partial(&paths.trajectory)?;
    // The file names are the truth where the start line is missing (a
    // kill before it was flushed).
    let task = match partial.task.as_str() {
        "" => paths
            .result
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        t => t.to_string(),
    };
    let sample = partial.sample.or_else(|| {
        paths
            .result
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
    })?;
    let mut tokens = TokenUsage::default();
    let mut timings = Timings::default();
    for s in &partial.steps {
        tokens.add(s.tokens);
        timings.policy_secs += s.policy_secs;
        timings.exec_secs += s.exec_secs;
    }
    timings.agent_secs = timings.policy_secs + timings.exec_secs;
    timings.total_secs = timings.agent_secs;
    let who = match &partial.owner {
        Some(o) => format!("its process (pid {})", o.pid),
        None => "its process".to_string(),
    };
    Some(EpisodeResult {
        task,
        category: category.to_string(),
        complexity,
        sample,
        policy: partial.policy,
        passed: false,
        reward: 0.0,
        turns: partial
            .steps
            .iter()
            .filter(|s| s.kind != StepKind::Human)
            .count() as u32,
        end_reason: EndReason::Interrupted,
        failure_mode: Some(FailureMode::Error),
        failure_labels: vec![FailureMode::Error],
        earliest_failing_step: None,
        error: Some(format!(
            "interrupted: {who} ended without recording a result (killed or crashed); \
             not scored, and running the evaluation again retries it"
        )),
        tests: Vec::new(),
        steps: partial.steps,
        tokens,
        timings,
        verifier: None,
        limits: None,
        taken_over: None,
        forked_from: None,
    })
}

/// Record the interrupted episode at `paths` (see [`interrupted_result`]):
/// write its result atomically and return it; `Ok(None)` when it is not
/// interrupted. Idempotent: once written, the episode has a result.
pub fn record_interrupted(
    paths: &EpisodePaths,
    category: &str,
    complexity: Option<u8>,
) -> std::io::Result<Option<EpisodeResult>> {
    let Some(result) = interrupted_result(paths, category, complexity) else {
        return Ok(None);
    };
    let json = serde_json::to_vec_pretty(&result).map_err(std::io::Error::other)?;
    crate::fsutil::write_atomic(&paths.result, &json)?;
    Ok(Some(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trajectory(paths: &EpisodePaths, owner: Option<&EpisodeOwner>, steps: &[&str]) {
        std::fs::create_dir_all(paths.result.parent().unwrap()).unwrap();
        let mut text = serde_json::json!({"type": "start", "task": "upper", "sample": 2,
            "policy": "script:a.txt", "owner": owner})
        .to_string();
        text.push('\n');
        for (i, cmd) in steps.iter().enumerate() {
            let mut step = Step::new(i as u32 + 1, StepKind::Command);
            step.command = Some(cmd.to_string());
            step.exec_secs = 1.0;
            text.push_str(&serde_json::json!({"type": "step", "step": step}).to_string());
            text.push('\n');
        }
        // A kill tears the last line.
        text.push_str("{\"type\":\"st");
        std::fs::write(&paths.trajectory, text).unwrap();
    }

    #[test]
    fn a_dead_owners_trajectory_becomes_an_unscored_interrupted_result_once() {
        let dir = tempfile::tempdir().unwrap();
        let paths = EpisodePaths::new(dir.path(), "upper", 2);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let Some(owner) = EpisodeOwner::of(child.id()) else {
            // No /proc: nothing to check.
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        };
        trajectory(&paths, Some(&owner), &["ls", "cat a.txt"]);
        // Running: not interrupted.
        assert!(!is_interrupted(&paths));
        assert!(record_interrupted(&paths, "text", Some(1))
            .unwrap()
            .is_none());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(is_interrupted(&paths));
        let r = record_interrupted(&paths, "text", Some(1))
            .unwrap()
            .expect("recorded");
        assert_eq!(
            (r.task.as_str(), r.sample, r.turns, r.end_reason, r.passed),
            ("upper", 2, 2, EndReason::Interrupted, false)
        );
        assert_eq!(r.failure_mode, Some(FailureMode::Error));
        assert!(!r.end_reason.is_scored());
        assert_eq!(r.steps[1].command.as_deref(), Some("cat a.txt"));
        assert!(r.error.as_deref().unwrap().contains("interrupted"));
        let written = super::super::load_result(&paths.result).unwrap();
        assert_eq!(written, r);
        // Once recorded it is finished: nothing to do again.
        assert!(!is_interrupted(&paths));
        assert!(record_interrupted(&paths, "text", Some(1))
            .unwrap()
            .is_none());
    }
}
