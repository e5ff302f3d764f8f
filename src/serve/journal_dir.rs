//! A directory of small JSON files, one per open thing (a session, a
//! sandbox) of a running server: written when it opens, removed when it is
//! done. A server killed with SIGKILL (or that crashed) leaves its files;
//! the next server finds them as the entries of dead servers ("orphans").
//! Entries of a server still running (another process on the same
//! workspace) are left alone. Used by [`super::journal`] (sessions) and
//! [`super::sandbox_journal`] (sandboxes).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a journal holds one file of.
pub trait Journaled: Serialize + DeserializeOwned {
    /// Its id (the file's name, without `.json`).
    fn id(&self) -> &str;
    /// The server process it belongs to.
    fn pid(&self) -> u32;
    /// When it opened (RFC 3339): orphans come oldest first.
    fn since(&self) -> &str;
}

/// A journal directory of `E` entries.
#[derive(Debug)]
pub struct JournalDir<E> {
    dir: PathBuf,
    /// What an entry is, for log lines ("session", "sandbox").
    what: &'static str,
    entries: PhantomData<fn() -> E>,
}

impl<E> Clone for JournalDir<E> {
    fn clone(&self) -> Self {
        JournalDir {
            dir: self.dir.clone(),
            what: self.what,
            entries: PhantomData,
        }
    }
}

impl<E: Journaled> JournalDir<E> {
    /// The journal of `what` entries in `dir` (created on first write).
    pub fn in_dir(dir: PathBuf, what: &'static str) -> Self {
        JournalDir {
            dir,
            what,
            entries: PhantomData,
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Note an open entry (atomically).
    pub fn record(&self, entry: &E) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(entry).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic(&self.path(entry.id()), &json)
    }

    /// Forget entry `id` (done with; a missing one is no error).
    pub fn remove(&self, id: &str) {
        let path = self.path(id);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), %e, "cannot remove a {} journal entry", self.what);
            }
        }
    }

    /// The entries of servers no longer running (and this process's own),
    /// oldest first, still in the journal. Unreadable entries are dropped
    /// with a warning.
    pub fn orphans(&self) -> Vec<E> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let me = std::process::id();
        let mut out: Vec<E> = Vec::new();
        for e in dir.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let entry: Option<E> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            match entry {
                Some(entry) if entry.pid() != me && pid_alive(entry.pid()) => {}
                Some(entry) => out.push(entry),
                None => {
                    tracing::warn!(path = %path.display(), "dropping an unreadable {} journal entry", self.what);
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out.sort_by(|a, b| (a.since(), a.id()).cmp(&(b.since(), b.id())));
        out
    }
}

/// Whether process `pid` is alive (a zombie counts as dead).
fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state is the first field after the command name in parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Thing {
        id: String,
        pid: u32,
        at: String,
    }

    impl Journaled for Thing {
        fn id(&self) -> &str {
            &self.id
        }
        fn pid(&self) -> u32 {
            self.pid
        }
        fn since(&self) -> &str {
            &self.at
        }
    }

    fn thing(id: &str, pid: u32, at: &str) -> Thing {
        Thing {
            id: id.into(),
            pid,
            at: at.into(),
        }
    }

    #[test]
    fn orphans_are_dead_servers_entries_and_ours_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let j = JournalDir::<Thing>::in_dir(dir.path().join("j"), "thing");
        // A pid above the kernel's maximum is never alive.
        j.record(&thing("dead-late", u32::MAX - 1, "2026-01-02T00:00:00Z"))
            .unwrap();
        j.record(&thing("dead-early", u32::MAX - 1, "2026-01-01T00:00:00Z"))
            .unwrap();
        j.record(&thing("mine", std::process::id(), "2026-01-03T00:00:00Z"))
            .unwrap();
        let parent = std::os::unix::process::parent_id();
        j.record(&thing("alive", parent, "2026-01-01T00:00:00Z"))
            .unwrap();
        std::fs::write(j.dir().join("junk.json"), "{").unwrap();
        std::fs::write(j.dir().join("notes.txt"), "kept").unwrap();
        let ids: Vec<String> = j.orphans().into_iter().map(|e| e.id).collect();
        assert_eq!(ids, ["dead-early", "dead-late", "mine"]);
        assert!(!j.dir().join("junk.json").exists());
        assert!(j.dir().join("notes.txt").exists());
        assert!(
            j.dir().join("dead-early.json").exists(),
            "orphans stay until removed"
        );
        j.remove("dead-early");
        j.remove("dead-early");
        assert!(!j.dir().join("dead-early.json").exists());
    }
}
