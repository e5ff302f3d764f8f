//! Keeps the Jobs view's sharded runs fed: a thread reads the workspace's
//! Slurm and Ray runs ([`crate::workbench::sharded_runs::sharded_runs`], which asks
//! `squeue`/`sacct` where they are) every few seconds, and sends them when
//! they changed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::tui::action::{Action, Msg};
use crate::workbench::sharded_runs::sharded_runs;

/// The watcher thread; it stops when dropped.
pub struct ShardWatcher {
    stop: Arc<AtomicBool>,
}

impl ShardWatcher {
    /// Read the sharded runs of the workspace at `root` every `every`,
    /// sending [`Action::ShardRunsLoaded`] when they changed (and an error
    /// once each time it changes).
    pub fn spawn(root: PathBuf, tx: Sender<Msg>, every: Duration) -> ShardWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = thread::Builder::new()
            .name("sharded runs".into())
            .spawn(move || {
                let mut last = None;
                let mut last_error = String::new();
                while !flag.load(Ordering::Relaxed) {
                    let msg = match sharded_runs(&root) {
                        Ok(runs) if last.as_ref() != Some(&runs) => {
                            last = Some(runs.clone());
                            last_error.clear();
                            Some(Action::ShardRunsLoaded(runs))
                        }
                        Ok(_) => None,
                        Err(e) => {
                            let text = format!("sharded runs: {}", crate::logging::error_text(&e));
                            (text != last_error).then(|| {
                                last_error = text.clone();
                                Action::Error(text)
                            })
                        }
                    };
                    if let Some(a) = msg {
                        if tx.send(Msg::Action(a)).is_err() {
                            return;
                        }
                    }
                    let start = Instant::now();
                    while start.elapsed() < every && !flag.load(Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(100));
                    }
                }
            });
        ShardWatcher { stop }
    }
}

impl Drop for ShardWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
