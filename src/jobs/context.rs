//! What a running job sees: its id, progress and log reporting, and the
//! cancellation flag it must poll.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The last progress reported, as given (`done`, `total`, `stage`): a
    /// turn re-reports it with the turn count.
    pub(super) last: Mutex<(u64, u64, String)>,
    /// Turns played so far (evaluations: progress moves per turn).
    pub(super) turns: AtomicU64,
    /// The job's log file under the workspace (kept across restarts).
    pub(super) log_file: Option<Mutex<std::fs::File>>,
}

/// The fields of a fresh context that only its reports fill in.
pub(super) struct Reports {
    pub(super) last_journal: Mutex<Option<Instant>>,
    pub(super) fraction: Mutex<f64>,
    pub(super) how_far: Mutex<String>,
    pub(super) last: Mutex<(u64, u64, String)>,
    pub(super) turns: AtomicU64,
}

impl Reports {
    /// Nothing reported yet.
    pub(super) fn new() -> Reports {
        Reports {
            last_journal: Mutex::new(None),
            fraction: Mutex::new(0.0),
            how_far: Mutex::new(String::new()),
            last: Mutex::new((0, 0, String::new())),
            turns: AtomicU64::new(0),
        }
    }
}

/// How often progress is written to the journal at most.
const JOURNAL_EVERY: Duration = Duration::from_millis(500);

impl JobContext {
    /// A context for a job run in the foreground, outside any manager (the
    /// CLI runs its use cases this way): nothing is journalled, and the
    /// returned receiver hears the job's events.
    pub fn standalone(kind: &str) -> (JobContext, broadcast::Receiver<JobEvent>) {
        let (events, rx) = broadcast::channel(4096);
        let id = JobId(format!(
            "{kind}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S")
        ));
        let ctx = JobContext::new(id, Arc::new(AtomicBool::new(false)), events, None, None);
        (ctx, rx)
    }

    /// A context for job `id` (`journal`: the workspace it is journalled
    /// in; `log_file`: where its log lines are kept).
    pub(super) fn new(
        id: JobId,
        cancel: Arc<AtomicBool>,
        events: broadcast::Sender<JobEvent>,
        journal: Option<Mutex<Workspace>>,
        log_file: Option<std::fs::File>,
    ) -> JobContext {
        let r = Reports::new();
        JobContext {
            id,
            cancel,
            events,
            journal,
            last_journal: r.last_journal,
            fraction: r.fraction,
            how_far: r.how_far,
            last: r.last,
            turns: r.turns,
            log_file: log_file.map(Mutex::new),
        }
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

    /// Report progress: `done` of `total` items in `stage` (with the turns
    /// played so far, once there are any: `episodes · 12 turns`).
    pub fn progress(&self, done: u64, total: u64, stage: &str) {
        *self.last.lock() = (done, total, stage.to_string());
        let turns = self.turns.load(Ordering::Relaxed);
        let stage = match turns {
            0 => stage.to_string(),
            1 => format!("{stage} · 1 turn"),
            n => format!("{stage} · {n} turns"),
        };
        let _ = self.events.send(JobEvent::Progress {
            id: self.id.clone(),
            done,
            total,
            stage: stage.clone(),
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
                let _ = ws
                    .lock()
                    .update_job(&self.id.0, "running", fraction, &stage);
            }
        }
    }

    /// One turn was played (an evaluation's agent ran a command): progress
    /// moves per turn, not only per finished item.
    pub fn turn(&self) {
        self.turns.fetch_add(1, Ordering::Relaxed);
        let (done, total, stage) = self.last.lock().clone();
        self.progress(done, total, &stage);
    }

    /// Turns played so far.
    pub fn turns(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }

    /// Name the run this job works on: it is journalled with the job and
    /// shown as the job's id from now on (one id per thing).
    pub fn set_run(&self, run: &str) {
        if let Some(ws) = &self.journal {
            let _ = ws.lock().set_job_run(&self.id.0, run);
        }
        let _ = self.events.send(JobEvent::Run {
            id: self.id.clone(),
            run: run.to_string(),
        });
    }

    /// Report one log line.
    pub fn log(&self, line: impl Into<String>) {
        let line = line.into();
        tracing::info!(job = %self.id.0, "{line}");
        if let Some(f) = &self.log_file {
            // Kept across restarts; a failed write loses a log line, not the job.
            let mut f = f.lock();
            let _ = f
                .write_all(line.as_bytes())
                .and_then(|_| f.write_all(b"\n"));
        }
        let _ = self.events.send(JobEvent::Log {
            id: self.id.clone(),
            line,
        });
    }
}
