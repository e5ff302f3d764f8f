//! The session journal: one small file per open session in the state
//! directory, written when the session opens and removed once its episode
//! is recorded. A server killed with SIGKILL (or that crashed) cannot record
//! its open sessions; the next server on the same workspace finds their
//! files, records each as an interrupted episode (`end_reason` `error`) and
//! reports them as lost. Entries of a server still running (another process
//! on the same workspace) are left alone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::journal_dir::{JournalDir, Journaled};
use crate::agent::{EpisodeId, EpisodePaths, EpisodeResult, Timings};
use crate::store::Workspace;

/// One open session, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The session id.
    pub session_id: String,
    /// The run its episode is recorded under.
    pub run_id: String,
    /// The task.
    pub task_id: String,
    /// The task's category (for the recorded result).
    pub category: String,
    /// The task's complexity (for the recorded result).
    pub complexity: Option<u8>,
    /// The episode's sample number in its run.
    pub sample: u32,
    /// The client's policy label.
    pub policy: String,
    /// The server process that opened it.
    pub pid: u32,
    /// When it opened (RFC 3339).
    pub opened_at: String,
}

/// A session a dead server left open, now recorded as interrupted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lost {
    /// The session id.
    pub session_id: String,
    /// The run its episode is recorded under.
    pub run_id: String,
    /// The task.
    pub task_id: String,
    /// The episode's sample number.
    pub sample: u32,
    /// The pid of the server that died.
    pub pid: u32,
}

impl Journaled for Entry {
    fn id(&self) -> &str {
        &self.session_id
    }
    fn pid(&self) -> u32 {
        self.pid
    }
    fn since(&self) -> &str {
        &self.opened_at
    }
}

/// The session journal directory of one workspace.
#[derive(Debug, Clone)]
pub struct Journal {
    entries: JournalDir<Entry>,
}

impl Journal {
    /// The journal of the workspace at `workspace_root`, under `state_dir`
    /// (one directory per workspace, named by a hash of its path).
    pub fn for_workspace(state_dir: &Path, workspace_root: &Path) -> Journal {
        use sha2::{Digest, Sha256};
        let root =
            std::fs::canonicalize(workspace_root).unwrap_or_else(|_| workspace_root.to_path_buf());
        let hash = hex::encode(Sha256::digest(root.to_string_lossy().as_bytes()));
        Journal::in_dir(state_dir.join("serve-sessions").join(&hash[..16]))
    }

    /// A journal in `dir` itself.
    pub fn in_dir(dir: PathBuf) -> Journal {
        Journal {
            entries: JournalDir::in_dir(dir, "session"),
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.entries.dir()
    }

    /// Note an open session.
    pub fn record(&self, entry: &Entry) -> std::io::Result<()> {
        self.entries.record(entry)
    }

    /// Forget a session (its episode is recorded).
    pub fn remove(&self, session_id: &str) {
        self.entries.remove(session_id)
    }

    /// The entries left by servers that are no longer running, oldest first.
    /// Unreadable entries are dropped with a warning.
    pub fn orphans(&self) -> Vec<Entry> {
        self.entries.orphans()
    }

    /// Record the sessions of dead servers as interrupted episodes in `ws`
    /// (unless their episode was recorded after all), forget them, and
    /// return them.
    pub fn recover(&self, ws: &Workspace) -> Vec<Lost> {
        let mut lost = Vec::new();
        for entry in self.orphans() {
            let paths = EpisodePaths::new(
                &ws.runs_dir().join(&entry.run_id),
                &entry.task_id,
                entry.sample,
            );
            if !paths.result.exists() {
                let result = EpisodeResult::failed_to_start(
                    EpisodeId {
                        task: entry.task_id.clone(),
                        category: entry.category.clone(),
                        complexity: entry.complexity,
                        sample: entry.sample,
                        policy: entry.policy.clone(),
                    },
                    format!(
                        "interrupted: session {} was lost when its server (pid {}) died without recording it (killed or crashed)",
                        entry.session_id, entry.pid
                    ),
                    Timings::default(),
                );
                let written = serde_json::to_vec_pretty(&result)
                    .map_err(std::io::Error::other)
                    .and_then(|json| crate::fsutil::write_atomic(&paths.result, &json));
                if let Err(e) = written {
                    tracing::warn!(session = entry.session_id, %e, "cannot record a lost session");
                    continue;
                }
                if let Err(e) = crate::agent::index_episode(ws, &entry.run_id, &result) {
                    tracing::warn!(session = entry.session_id, %e, "cannot index a lost session");
                    continue;
                }
            }
            self.remove(&entry.session_id);
            lost.push(Lost {
                session_id: entry.session_id,
                run_id: entry.run_id,
                task_id: entry.task_id,
                sample: entry.sample,
                pid: entry.pid,
            });
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, pid: u32) -> Entry {
        Entry {
            session_id: id.into(),
            run_id: "serve-x".into(),
            task_id: "t".into(),
            category: "files".into(),
            complexity: Some(1),
            sample: 0,
            policy: "http".into(),
            pid,
            opened_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn only_entries_of_dead_servers_are_orphans() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::in_dir(dir.path().join("j"));
        // A pid above the kernel's maximum is never alive.
        j.record(&entry("dead", u32::MAX - 1)).unwrap();
        j.record(&entry("mine", std::process::id())).unwrap();
        let parent = std::os::unix::process::parent_id();
        j.record(&entry("alive", parent)).unwrap();
        std::fs::write(j.dir().join("junk.json"), "{").unwrap();
        let ids: Vec<String> = j.orphans().into_iter().map(|e| e.session_id).collect();
        assert_eq!(ids, ["dead", "mine"]);
        assert!(!j.dir().join("junk.json").exists());
        j.remove("dead");
        j.remove("dead");
        assert!(!j.dir().join("dead.json").exists());
    }
}
