//! The sandbox journal: one small file per open sandbox, beside the
//! session journal (in its `sandboxes/` directory), written when the
//! sandbox starts and removed when it is deleted or reaped. A sandbox dies
//! with the server that ran it; the next server on the same workspace finds
//! the files a killed server left, reports those sandboxes as lost (their
//! clients get 404) and forgets them. Entries of a server still running are
//! left alone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::journal_dir::{JournalDir, Journaled};

/// One open sandbox, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxEntry {
    /// The sandbox id.
    pub sandbox_id: String,
    /// What it was made from (`task:ID`, `image:REF`, `environment:HASH`).
    pub source: String,
    /// The client (token name) that owns it.
    pub owner: String,
    /// The server process that ran it.
    pub pid: u32,
    /// When it started (RFC 3339).
    pub created_at: String,
}

impl Journaled for SandboxEntry {
    fn id(&self) -> &str {
        &self.sandbox_id
    }
    fn pid(&self) -> u32 {
        self.pid
    }
    fn since(&self) -> &str {
        &self.created_at
    }
}

/// The sandbox journal directory.
#[derive(Debug, Clone)]
pub struct SandboxJournal {
    entries: JournalDir<SandboxEntry>,
}

impl SandboxJournal {
    /// The journal in `dir`.
    pub fn in_dir(dir: PathBuf) -> SandboxJournal {
        SandboxJournal {
            entries: JournalDir::in_dir(dir, "sandbox"),
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.entries.dir()
    }

    /// Note an open sandbox.
    pub fn record(&self, entry: &SandboxEntry) -> std::io::Result<()> {
        self.entries.record(entry)
    }

    /// Forget a sandbox (deleted or reaped).
    pub fn remove(&self, id: &str) {
        self.entries.remove(id)
    }

    /// Forget and return the sandboxes of servers no longer running, oldest
    /// first (unreadable entries are dropped with a warning). Nothing is
    /// left of them to record: they died with their server.
    pub fn recover(&self) -> Vec<SandboxEntry> {
        let lost = self.entries.orphans();
        for entry in &lost {
            self.entries.remove(&entry.sandbox_id);
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, pid: u32) -> SandboxEntry {
        SandboxEntry {
            sandbox_id: id.into(),
            source: "image:debian:bookworm".into(),
            owner: "token-1".into(),
            pid,
            created_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn sandboxes_of_dead_servers_are_lost_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let j = SandboxJournal::in_dir(dir.path().join("sandboxes"));
        j.record(&entry("dead", u32::MAX - 1)).unwrap();
        j.record(&entry("alive", std::os::unix::process::parent_id()))
            .unwrap();
        std::fs::write(j.dir().join("junk.json"), "{").unwrap();
        let lost: Vec<String> = j.recover().into_iter().map(|e| e.sandbox_id).collect();
        assert_eq!(lost, ["dead"]);
        assert!(!j.dir().join("dead.json").exists());
        assert!(!j.dir().join("junk.json").exists());
        assert!(j.dir().join("alive.json").exists());
        assert!(j.recover().is_empty());
    }
}
