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
    /// (the candidate simply runs again).
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
                    out.insert(id, o);
                }
            }
        }
        out
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
        let done = journal.finished();
        assert_eq!(done.len(), 2);
        assert!(matches!(
            done["cand-7-4"],
            CandidateOutcome::Accepted { .. }
        ));
    }
}
