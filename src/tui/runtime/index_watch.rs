//! Keeps two TUIs (or a TUI and the CLI) on one workspace in step without
//! Ctrl-R: a thread asks SQLite about once a second whether another
//! connection changed `endless.db` (`PRAGMA data_version`, a read of the
//! database header: next to free), and only then compares a cheap
//! signature of each table, so that the app reloads just the tables that
//! changed ([`Action::IndexChanged`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::tui::action::{Action, IndexChange, Msg};

/// A signature of each table: changes when its rows do (counts and the
/// newest update, or a sum over the columns people edit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signatures {
    tasks: (i64, f64, String),
    episodes: (i64, f64, String),
    jobs: (i64, String, f64),
    /// The audit index (`task_audits`): a `tasks audit` in another process
    /// changes the Tasks view's Audit column, filter and count.
    audits: (i64, String, f64),
}

/// The index of one workspace, watched.
pub struct IndexWatch {
    conn: Connection,
    version: Option<i64>,
    seen: Option<Signatures>,
}

impl IndexWatch {
    /// Open `<root>/endless.db` read-only.
    pub fn open(root: &Path) -> rusqlite::Result<IndexWatch> {
        let conn = Connection::open_with_flags(
            root.join("endless.db"),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(2))?;
        Ok(IndexWatch {
            conn,
            version: None,
            seen: None,
        })
    }

    fn signatures(&self) -> rusqlite::Result<Signatures> {
        let c = &self.conn;
        Ok(Signatures {
            tasks: c.query_row(
                // Times have whole seconds: the curated columns are summed too.
                "SELECT count(*), total(coalesce(rating, 0) * 3 + length(tags) * 5 + length(notes) * 7 + unicode(substr(status, 2, 1)) * 11), coalesce(max(updated_at), '') FROM tasks",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?,
            episodes: c.query_row(
                "SELECT count(*), total(coalesce(rating, 0) + length(coalesce(label, '')) * 7 + length(notes) * 13), coalesce(max(created_at), '') FROM episodes",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?,
            jobs: c.query_row(
                "SELECT count(*), coalesce(max(updated_at), ''), total(progress) + total(length(status) * 3 + length(message) * 7) FROM jobs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?,
            audits: c.query_row(
                // audited_at has whole seconds: the findings are summed too.
                "SELECT count(*), coalesce(max(audited_at), ''), total(findings * 3 + length(labels) * 5 + length(checks) * 7 + complete * 11) FROM task_audits",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?,
        })
    }

    /// What changed since the last call (nothing on the first).
    pub fn poll(&mut self) -> rusqlite::Result<IndexChange> {
        let version: i64 = self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))?;
        if self.version == Some(version) {
            return Ok(IndexChange::default());
        }
        self.version = Some(version);
        let now = self.signatures()?;
        let change = match &self.seen {
            None => IndexChange::default(),
            Some(old) => IndexChange {
                // The Tasks view reads the audit index with the tasks.
                tasks: old.tasks != now.tasks || old.audits != now.audits,
                episodes: old.episodes != now.episodes,
                jobs: old.jobs != now.jobs,
            },
        };
        self.seen = Some(now);
        Ok(change)
    }
}

/// The watching thread; it stops when dropped.
pub struct IndexWatcher {
    stop: Arc<AtomicBool>,
}

impl IndexWatcher {
    /// Watch the index under `root` every `every`; send
    /// [`Action::IndexChanged`] when a table changed.
    pub fn spawn(root: PathBuf, tx: Sender<Msg>, every: Duration) -> IndexWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = thread::Builder::new()
            .name("index watch".into())
            .spawn(move || {
                let mut watch = None;
                while !flag.load(Ordering::Relaxed) {
                    if watch.is_none() {
                        watch = IndexWatch::open(&root).ok();
                    }
                    // A failed read (the index being rebuilt) is retried
                    // on a fresh connection.
                    let sent = match watch.as_mut().map(IndexWatch::poll) {
                        Some(Ok(change)) if change.any() => {
                            tx.send(Msg::Action(Action::IndexChanged(change))).is_ok()
                        }
                        Some(Err(_)) => {
                            watch = None;
                            true
                        }
                        _ => true,
                    };
                    if !sent {
                        return;
                    }
                    thread::sleep(every);
                }
            });
        IndexWatcher { stop }
    }
}

impl Drop for IndexWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{TaskStatus, Workspace};

    #[test]
    fn another_connections_change_is_seen_by_table() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let mut meta = crate::task::TaskMeta::default();
        meta.task.id = "t1".into();
        let task = crate::task::Task {
            meta,
            instruction: "do it".into(),
            truth: String::new(),
            environment: Default::default(),
            tests: Default::default(),
            solution: Default::default(),
        };
        ws.add_task(&task, TaskStatus::Candidate).unwrap();
        let mut watch = IndexWatch::open(dir.path()).unwrap();
        assert!(
            !watch.poll().unwrap().any(),
            "the first look is the baseline"
        );
        assert!(!watch.poll().unwrap().any(), "nothing changed");
        // Another connection (another TUI) curates a task.
        std::thread::sleep(Duration::from_millis(5));
        let other = Workspace::open(dir.path()).unwrap();
        other.set_rating("t1", Some(3)).unwrap();
        let change = watch.poll().unwrap();
        assert!(
            change.tasks && !change.episodes && !change.jobs,
            "{change:?}"
        );
        other
            .insert_job("eval-1", "eval", &serde_json::json!({}))
            .unwrap();
        let change = watch.poll().unwrap();
        assert!(change.jobs && !change.tasks, "{change:?}");
        assert!(!watch.poll().unwrap().any());
    }

    #[test]
    fn another_processes_audit_reloads_the_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let mut meta = crate::task::TaskMeta::default();
        meta.task.id = "t1".into();
        let task = crate::task::Task {
            meta,
            instruction: "do it".into(),
            truth: String::new(),
            environment: Default::default(),
            tests: Default::default(),
            solution: Default::default(),
        };
        ws.add_task(&task, TaskStatus::Candidate).unwrap();
        let mut watch = IndexWatch::open(dir.path()).unwrap();
        assert!(!watch.poll().unwrap().any(), "the baseline");
        let row = |labels: &[&str], findings: u32| crate::audit::AuditRow {
            task_id: "t1".into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            findings,
            mutation: None,
            complete: true,
            checks: [("flaky".to_string(), "ok".to_string())].into(),
            audited_at: "2026-12-05T09:00:00Z".into(),
        };
        // Another process (`endless tasks audit`) stores a report.
        let other = Workspace::open(dir.path()).unwrap();
        other.index_audit(&row(&[], 0)).unwrap();
        let change = watch.poll().unwrap();
        assert!(
            change.tasks && !change.jobs && !change.episodes,
            "{change:?}"
        );
        assert!(!watch.poll().unwrap().any());
        // Audited again within the same second, now with a finding.
        other.index_audit(&row(&["flaky"], 1)).unwrap();
        assert!(watch.poll().unwrap().tasks);
        other.unindex_audit("t1").unwrap();
        assert!(watch.poll().unwrap().tasks);
    }
}
