//! What the pipeline keeps of each candidate: the transcript of its LLM
//! exchanges, rejected candidates with everything they produced, and a
//! per-run journal of finished candidates so that a killed run resumes
//! without redoing them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::funnel::{CandidateOutcome, Stage};
use crate::fsutil::{write_atomic, AtomicDir};
use crate::task::{write_native, Task};

/// One request/response with a model, kept for curation and debugging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The stage that asked.
    pub stage: Stage,
    /// Attempt number within the stage, from 1.
    pub attempt: u32,
    /// The last message sent (earlier ones are in earlier exchanges).
    pub prompt: String,
    /// The model's reply.
    pub reply: String,
    /// Wall time of the call, in seconds.
    pub seconds: f64,
    /// Prompt tokens the model reported.
    pub prompt_tokens: u64,
    /// Completion tokens the model reported.
    pub completion_tokens: u64,
}

/// Why a rejected candidate was rejected (`reject.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectInfo {
    /// The candidate id.
    pub candidate: String,
    /// The stage that rejected it.
    pub stage: Stage,
    /// Why, for humans (the last error or failed check).
    pub reason: String,
    /// Attempts per stage up to the rejection.
    pub attempts: BTreeMap<String, u32>,
}

/// Write a rejected candidate under `rejected/<candidate>/`: the partial
/// bundle, `reject.toml` and `log.jsonl`, atomically.
pub fn save_rejected(
    rejected_dir: &Path,
    partial: &Task,
    info: &RejectInfo,
    log: &[Exchange],
) -> anyhow::Result<PathBuf> {
    let target = rejected_dir.join(&info.candidate);
    if target.exists() {
        std::fs::remove_dir_all(&target)?;
    }
    let staging = AtomicDir::new(&target)?;
    write_native(partial, staging.path())?;
    std::fs::write(staging.path().join("reject.toml"), toml::to_string(info)?)?;
    let mut lines = String::new();
    for e in log {
        lines.push_str(&serde_json::to_string(e)?);
        lines.push('\n');
    }
    std::fs::write(staging.path().join("log.jsonl"), lines)?;
    Ok(staging.commit()?)
}

/// The per-run journal: `runs/<run>/candidates/<candidate>.json`.
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// The journal of the run whose directory is `run_dir`.
    pub fn new(run_dir: &Path) -> Journal {
        Journal {
            dir: run_dir.join("candidates"),
        }
    }

    /// Record a finished candidate (atomically).
    pub fn finish(&self, candidate: &str, outcome: &CandidateOutcome) -> anyhow::Result<()> {
        write_atomic(
            &self.dir.join(format!("{candidate}.json")),
            serde_json::to_string_pretty(outcome)?.as_bytes(),
        )?;
        Ok(())
    }

    /// Candidates already finished, by id. Unreadable entries are ignored
    /// (the candidate simply runs again), and so are the infrastructure
    /// errors that earlier versions journalled as rejections (see
    /// [`is_old_infra_reject`]): those candidates were never judged.
    pub fn finished(&self) -> BTreeMap<String, CandidateOutcome> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Some(id) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            if path.extension().is_some_and(|x| x == "json") {
                if let Ok(o) = std::fs::read(&path)
                    .map_err(anyhow::Error::from)
                    .and_then(|b| Ok(serde_json::from_slice(&b)?))
                {
                    if is_finished(&o) {
                        out.insert(id, o);
                    }
                }
            }
        }
        out
    }
}

/// Whether a journalled outcome is a finished candidate: not an
/// infrastructure error, new style or old.
fn is_finished(outcome: &CandidateOutcome) -> bool {
    match outcome {
        CandidateOutcome::Accepted { .. } => true,
        CandidateOutcome::Rejected { reason, .. } => !is_old_infra_reject(reason),
        CandidateOutcome::InfraError { .. } => false,
    }
}

/// Whether a rejection's reason, as versions before infrastructure errors
/// were told apart wrote it, is one: exactly these forms.
/// - `generator model failed: ` followed by a model-server error that is
///   infrastructure ([`crate::llm::LlmError::is_infrastructure`]):
///   `cannot reach the model server at …`, `model server at … timed out
///   after …`, `model server at … answered HTTP N after …` for any N but
///   400, 413 and 422, `model server at … sent a reply that is not a chat
///   completion: …`, `invalid model configuration: …`;
/// - `solution episodes failed: …` (the solution episodes could not run);
/// - `pass@N = 0: none of N solution episodes passed (N ended in an
///   error)`: every solution episode ended in an infrastructure error.
pub fn is_old_infra_reject(reason: &str) -> bool {
    if let Some(error) = reason.strip_prefix("generator model failed: ") {
        if error.starts_with("cannot reach the model server at ")
            || error.starts_with("invalid model configuration: ")
        {
            return true;
        }
        let Some(rest) = error.strip_prefix("model server at ") else {
            return false;
        };
        let first = rest.lines().next().unwrap_or("");
        if first.contains(" timed out after ")
            || first.contains(" sent a reply that is not a chat completion: ")
        {
            return true;
        }
        return first
            .split_once(" answered HTTP ")
            .and_then(|(_, after)| after.split(' ').next())
            .and_then(|code| code.parse::<u16>().ok())
            .is_some_and(|code| !matches!(code, 400 | 413 | 422));
    }
    if reason.starts_with("solution episodes failed: ") {
        return true;
    }
    let parse = || -> Option<bool> {
        let rest = reason.strip_prefix("pass@")?;
        let (n, rest) = rest.split_once(" = 0: none of ")?;
        let (m, rest) = rest.split_once(" solution episodes passed (")?;
        let errors = rest.strip_suffix(" ended in an error)")?;
        Some(n == m && m == errors && n.parse::<u32>().is_ok())
    };
    parse().unwrap_or(false)
}

/// Remove `rejected/<candidate>/` if there is one: left by an earlier
/// version that took an infrastructure error for a rejection, it no longer
/// says what became of the candidate.
pub fn forget_rejected(rejected_dir: &Path, candidate: &str) -> std::io::Result<()> {
    match std::fs::remove_dir_all(rejected_dir.join(candidate)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskMeta;

    #[test]
    fn rejected_candidates_keep_everything_and_journal_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let mut meta = TaskMeta::default();
        meta.task.id = "cand-7-3".into();
        let partial = Task {
            meta,
            instruction: "Do x".into(),
            truth: "x".into(),
            environment: Default::default(),
            tests: Default::default(),
            solution: Default::default(),
        };
        let info = RejectInfo {
            candidate: "cand-7-3".into(),
            stage: Stage::CompletionTests,
            reason: "final tests pass on the initial state".into(),
            attempts: BTreeMap::from([("environment".into(), 2)]),
        };
        let log = vec![Exchange {
            stage: Stage::Task,
            attempt: 1,
            prompt: "p".into(),
            reply: "r".into(),
            seconds: 0.5,
            prompt_tokens: 10,
            completion_tokens: 20,
        }];
        let path = save_rejected(dir.path(), &partial, &info, &log).unwrap();
        assert!(path.join("instruction.md").is_file());
        let back: RejectInfo =
            toml::from_str(&std::fs::read_to_string(path.join("reject.toml")).unwrap()).unwrap();
        assert_eq!(back, info);
        assert_eq!(
            std::fs::read_to_string(path.join("log.jsonl"))
                .unwrap()
                .lines()
                .count(),
            1
        );

        let journal = Journal::new(dir.path());
        journal
            .finish(
                "cand-7-3",
                &CandidateOutcome::Rejected {
                    stage: info.stage,
                    reason: info.reason.clone(),
                },
            )
            .unwrap();
        journal
            .finish(
                "cand-7-4",
                &CandidateOutcome::Accepted {
                    task_id: "t".into(),
                    audit: None,
                },
            )
            .unwrap();
        std::fs::write(dir.path().join("candidates/cand-7-5.json"), "{truncated").unwrap();
        // An unreachable server, journalled as a rejection by an older version.
        journal
            .finish(
                "cand-7-6",
                &CandidateOutcome::Rejected {
                    stage: Stage::Task,
                    reason: "generator model failed: cannot reach the model server at http://127.0.0.1:9/v1/chat/completions: connection refused".into(),
                },
            )
            .unwrap();
        let done = journal.finished();
        assert_eq!(done.len(), 2, "{done:?}");
        assert!(matches!(
            done["cand-7-4"],
            CandidateOutcome::Accepted { .. }
        ));
    }

    #[test]
    fn old_infrastructure_rejections_are_recognised_exactly() {
        let url = "http://127.0.0.1:9/v1/chat/completions";
        for reason in [
            format!("generator model failed: cannot reach the model server at {url}: error sending request"),
            format!("generator model failed: model server at {url} timed out after 6 attempt(s)"),
            format!("generator model failed: model server at {url} answered HTTP 503 after 6 attempt(s): busy"),
            format!("generator model failed: model server at {url} answered HTTP 401 after 1 attempt(s): no key"),
            format!("generator model failed: model server at {url} sent a reply that is not a chat completion: expected value"),
            "generator model failed: invalid model configuration: bad header".to_string(),
            "solution episodes failed: cannot create the run directory".to_string(),
            "pass@2 = 0: none of 2 solution episodes passed (2 ended in an error)".to_string(),
        ] {
            assert!(is_old_infra_reject(&reason), "{reason}");
        }
        for reason in [
            format!("generator model failed: model server at {url} answered HTTP 400 after 1 attempt(s): context length"),
            format!("generator model failed: model server at {url} answered HTTP 422 after 1 attempt(s): bad"),
            "pass@2 = 0: none of 2 solution episodes passed (1 ended in an error)".to_string(),
            "pass@2 = 0: none of 2 solution episodes passed".to_string(),
            "the reply has no <truth> section".to_string(),
            "final tests pass on the initial state".to_string(),
            "no working environment after 3 attempts; last error: cannot reach the model server at x".to_string(),
        ] {
            assert!(!is_old_infra_reject(&reason), "{reason}");
        }
    }
}
