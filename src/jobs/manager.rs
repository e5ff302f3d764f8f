//! Starting, watching and cancelling jobs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::broadcast;

use super::context::{Cancelled, JobContext, NothingDone};
use super::event::{JobEvent, JobId, JobOutcome};
use crate::store::Workspace;

struct Running {
    cancel: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Runs jobs on background threads and journals them in a workspace.
pub struct JobManager {
    workspace: Option<PathBuf>,
    events: broadcast::Sender<JobEvent>,
    running: Mutex<BTreeMap<JobId, Running>>,
    counter: Mutex<u64>,
}

impl JobManager {
    /// A manager journalling into the workspace at `root` (`None`: no journal).
    /// Jobs left running by a previous process are marked interrupted.
    pub fn new(root: Option<&Path>) -> Result<JobManager, crate::store::StoreError> {
        if let Some(root) = root {
            Workspace::open(root)?.mark_interrupted_jobs()?;
        }
        let (events, _) = broadcast::channel(4096);
        Ok(JobManager {
            workspace: root.map(Path::to_path_buf),
            events,
            running: Mutex::new(BTreeMap::new()),
            counter: Mutex::new(0),
        })
    }

    /// Hear every job's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<JobEvent> {
        self.events.subscribe()
    }

    /// Start `body` on its own thread. It returns a one-line summary, or an
    /// error (a [`Cancelled`] error counts as cancellation).
    pub fn spawn<F>(
        &self,
        kind: &str,
        params: serde_json::Value,
        body: F,
    ) -> Result<JobId, crate::store::StoreError>
    where
        F: FnOnce(&JobContext) -> anyhow::Result<String> + Send + 'static,
    {
        let id = {
            let mut n = self.counter.lock();
            *n += 1;
            JobId(format!(
                "{kind}-{}-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%S"),
                *n
            ))
        };
        let (journal, log_file) = match &self.workspace {
            Some(root) => {
                let ws = Workspace::open(root)?;
                ws.insert_job(&id.0, kind, &params)?;
                let log = ws.create_job_log(&id.0)?;
                (Some(Mutex::new(ws)), Some(log))
            }
            None => (None, None),
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let ctx = JobContext::new(
            id.clone(),
            cancel.clone(),
            self.events.clone(),
            journal,
            log_file,
        );
        let _ = self.events.send(JobEvent::Started {
            id: id.clone(),
            kind: kind.into(),
        });
        let thread = std::thread::Builder::new()
            .name(format!("job {}", id.0))
            .spawn(move || {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&ctx)));
                let outcome = match result {
                    Ok(Ok(summary)) => JobOutcome::Succeeded(summary),
                    Ok(Err(e)) if e.is::<Cancelled>() || ctx.is_cancelled() => {
                        JobOutcome::Cancelled
                    }
                    Ok(Err(e)) if e.is::<NothingDone>() => {
                        JobOutcome::Empty(crate::logging::error_text(&e))
                    }
                    Ok(Err(e)) => JobOutcome::Failed(crate::logging::error_text(&e)),
                    Err(_) => JobOutcome::Failed("the job panicked; see the log file".into()),
                };
                if let Some(ws) = &ctx.journal {
                    // A cancelled job says how far it got, as the Jobs view does.
                    let how_far = ctx.how_far.lock().clone();
                    let cancelled = match how_far.as_str() {
                        "" => String::new(),
                        far => format!("cancelled at {far}"),
                    };
                    let (status, message) = match &outcome {
                        JobOutcome::Succeeded(m) => ("succeeded", m.as_str()),
                        JobOutcome::Failed(m) => ("failed", m.as_str()),
                        JobOutcome::Cancelled => ("cancelled", cancelled.as_str()),
                        JobOutcome::Empty(m) => ("empty", m.as_str()),
                    };
                    // The progress it made, truthfully (a cancelled job is
                    // not at 0%).
                    let progress = match status {
                        "succeeded" | "empty" => 1.0,
                        _ => *ctx.fraction.lock(),
                    };
                    let _ = ws.lock().update_job(&ctx.id.0, status, progress, message);
                }
                let _ = ctx.events.send(JobEvent::Finished {
                    id: ctx.id.clone(),
                    outcome,
                });
            })
            .map_err(|e| {
                crate::store::StoreError::Invalid(format!("cannot start a job thread: {e}"))
            })?;
        self.running.lock().insert(
            id.clone(),
            Running {
                cancel,
                thread: Some(thread),
            },
        );
        Ok(id)
    }

    /// Ask a job to stop; it stops at its next check.
    pub fn cancel(&self, id: &JobId) -> bool {
        match self.running.lock().get(id) {
            Some(r) => {
                r.cancel.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Wait for a job's thread to end.
    pub fn wait(&self, id: &JobId) {
        let thread = self
            .running
            .lock()
            .get_mut(id)
            .and_then(|r| r.thread.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for JobManager {
    fn drop(&mut self) {
        for r in self.running.get_mut().values() {
            r.cancel.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_report_progress_finish_and_cancel() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = JobManager::new(Some(dir.path())).unwrap();
        let mut rx = jobs.subscribe();
        let ok = jobs
            .spawn("count", serde_json::json!({"n": 3}), |ctx| {
                for i in 1..=3 {
                    ctx.progress(i, 3, "counting");
                }
                ctx.log("counted");
                Ok("3 counted".into())
            })
            .unwrap();
        jobs.wait(&ok);
        let slow = jobs
            .spawn("slow", serde_json::json!({}), |ctx| {
                ctx.progress(1, 4, "steps");
                loop {
                    ctx.check()?;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
            .unwrap();
        assert!(jobs.cancel(&slow));
        jobs.wait(&slow);
        let failing = jobs
            .spawn("fail", serde_json::json!({}), |_| {
                anyhow::bail!("no such task: x")
            })
            .unwrap();
        jobs.wait(&failing);

        let mut finished = BTreeMap::new();
        let mut progress = 0;
        while let Ok(ev) = rx.try_recv() {
            match ev {
                JobEvent::Finished { id, outcome } => {
                    finished.insert(id, outcome);
                }
                JobEvent::Progress { .. } => progress += 1,
                _ => {}
            }
        }
        assert_eq!(progress, 4);
        assert_eq!(finished[&ok], JobOutcome::Succeeded("3 counted".into()));
        assert_eq!(finished[&slow], JobOutcome::Cancelled);
        assert_eq!(
            finished[&failing],
            JobOutcome::Failed("no such task: x".into())
        );

        let rows = Workspace::open(dir.path()).unwrap().list_jobs().unwrap();
        let status = |id: &JobId| rows.iter().find(|r| r.id == id.0).unwrap().status.clone();
        assert_eq!(status(&ok), "succeeded");
        assert_eq!(status(&slow), "cancelled");
        let message = |id: &JobId| rows.iter().find(|r| r.id == id.0).unwrap().message.clone();
        assert_eq!(message(&slow), "cancelled at 1/4 (steps)", "how far it got");
        assert_eq!(status(&failing), "failed");
        // The log lines are kept in the workspace, for a later process.
        let ws = Workspace::open(dir.path()).unwrap();
        assert_eq!(ws.job_log_tail(&ok.0, 10).unwrap(), vec!["counted"]);
        assert!(ws.job_log_tail(&slow.0, 10).unwrap().is_empty());
    }

    #[test]
    fn jobs_of_a_dead_process_are_marked_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        Workspace::open(dir.path())
            .unwrap()
            .insert_job("eval-1", "eval", &serde_json::json!({}))
            .unwrap();
        let _jobs = JobManager::new(Some(dir.path())).unwrap();
        let rows = Workspace::open(dir.path()).unwrap().list_jobs().unwrap();
        assert_eq!(rows[0].status, "interrupted");
    }
}
