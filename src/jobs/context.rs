//! What a running job sees: its id, progress and log reporting, and the
//! cancellation flag it must poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::broadcast;

use super::event::{JobEvent, JobId};
use crate::store::Workspace;

/// The error a job returns when it stopped because it was cancelled.
#[derive(Debug, thiserror::Error)]
#[error("cancelled")]
pub struct Cancelled;

/// The error a job returns when it finished without doing anything (every
/// item was already there, nothing matched): not a failure, but not a
/// success either; the message says why and what to do instead.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NothingDone(pub String);

/// Handed to a job's body.
pub struct JobContext {
    pub(super) id: JobId,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) events: broadcast::Sender<JobEvent>,
    pub(super) journal: Option<Mutex<Workspace>>,
    pub(super) last_journal: Mutex<Option<Instant>>,
    /// The last progress reported (0..=1), kept for the final journal entry.
    pub(super) fraction: Mutex<f64>,
    /// The last progress as words (`3/10 (episodes)`), for the journal entry
    /// of a cancelled job: how far it got.
    pub(super) how_far: Mutex<String>,
}

/// How often progress is written to the journal at most.
const JOURNAL_EVERY: Duration = Duration::from_millis(500);

impl JobContext {
    /// A context for a job run in the foreground, outside any manager (the
    /// CLI runs its use cases this way): nothing is journalled, and the
    /// returned receiver hears the job's events.
    pub fn standalone(kind: &str) -> (JobContext, broadcast::Receiver<JobEvent>) {
        let (events, rx) = broadcast::channel(4096);
        let ctx = JobContext {
            id: JobId(format!(
                "{kind}-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%S")
            )),
            cancel: Arc::new(AtomicBool::new(false)),
            events,
            journal: None,
            last_journal: Mutex::new(None),
            fraction: Mutex::new(0.0),
            how_far: Mutex::new(String::new()),
        };
        (ctx, rx)
    }

    /// Ask this job to stop, as [`super::JobManager::cancel`] does (a
    /// Ctrl-C handler calls it for a foreground job).
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// The cancellation flag itself, for code that polls an
    /// [`AtomicBool`] of its own (a Ctrl-C handler on another thread).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// This job's id.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// `Err(Cancelled)` once cancellation was requested: `ctx.check()?` in loops.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.is_cancelled() {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }

    /// Report progress: `done` of `total` items in `stage`.
    pub fn progress(&self, done: u64, total: u64, stage: &str) {
        let _ = self.events.send(JobEvent::Progress {
            id: self.id.clone(),
            done,
            total,
            stage: stage.to_string(),
        });
        if total > 0 {
            *self.fraction.lock() = (done as f64 / total as f64).clamp(0.0, 1.0);
            *self.how_far.lock() = format!("{done}/{total} ({stage})");
        }
        let mut last = self.last_journal.lock();
        if last.is_none_or(|t| t.elapsed() >= JOURNAL_EVERY) || done == total {
            *last = Some(Instant::now());
            if let Some(ws) = &self.journal {
                let fraction = if total == 0 {
                    0.0
                } else {
                    done as f64 / total as f64
                };
                let _ = ws.lock().update_job(&self.id.0, "running", fraction, stage);
            }
        }
    }

    /// Report one log line.
    pub fn log(&self, line: impl Into<String>) {
        let line = line.into();
        tracing::info!(job = %self.id.0, "{line}");
        let _ = self.events.send(JobEvent::Log {
            id: self.id.clone(),
            line,
        });
    }
}
