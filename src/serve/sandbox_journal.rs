//! The sandbox journal: one small file per open sandbox, beside the
//! session journal (in its `sandboxes/` directory), written when the
//! sandbox starts and removed when it is deleted or reaped. A sandbox dies
//! with the server that ran it; the next server on the same workspace finds
//! the files a killed server left, reports those sandboxes as lost (their
//! clients get 404) and forgets them. Entries of a server still running are
//! left alone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

/// The sandbox journal directory.
#[derive(Debug, Clone)]
pub struct SandboxJournal {
    dir: PathBuf,
}

impl SandboxJournal {
    /// The journal in `dir`.
    pub fn in_dir(dir: PathBuf) -> SandboxJournal {
        SandboxJournal { dir }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Note an open sandbox.
    pub fn record(&self, entry: &SandboxEntry) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(entry).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(&self.path(&entry.sandbox_id), &json)
    }

    /// Forget a sandbox (deleted or reaped).
    pub fn remove(&self, id: &str) {
        let path = self.path(id);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), %e, "cannot remove a sandbox journal entry");
            }
        }
    }

    /// Forget and return the sandboxes of servers no longer running, oldest
    /// first (unreadable entries are dropped with a warning).
    pub fn recover(&self) -> Vec<SandboxEntry> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let me = std::process::id();
        let mut lost = Vec::new();
        for e in dir.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let entry: Option<SandboxEntry> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match entry {
                Some(entry) if entry.pid != me && alive(entry.pid) => {}
                Some(entry) => {
                    let _ = std::fs::remove_file(&path);
                    lost.push(entry);
                }
                None => {
                    tracing::warn!(path = %path.display(), "dropping an unreadable sandbox journal entry");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        lost.sort_by(|a, b| (&a.created_at, &a.sandbox_id).cmp(&(&b.created_at, &b.sandbox_id)));
        lost
    }
}

/// Whether process `pid` is alive (a zombie counts as dead).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
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
