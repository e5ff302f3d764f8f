//! What the job system says: job ids, the events subscribers hear, and how a
//! job ended. Shared by the manager (which starts jobs) and the context a
//! running job reports through.

use serde::Serialize;

/// A job's id: `<kind>-<timestamp>-<n>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct JobId(pub String);

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "message", rename_all = "snake_case")]
pub enum JobOutcome {
    /// Done; the job's one-line summary.
    Succeeded(String),
    /// Stopped by an error; its message.
    Failed(String),
    /// Stopped at the user's request.
    Cancelled,
    /// Finished without doing anything; why (shown in amber, not green).
    Empty(String),
}

/// What subscribers hear.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEvent {
    /// A job began.
    Started {
        /// The job.
        id: JobId,
        /// What it does (`eval`, `train`, `generate`...).
        kind: String,
    },
    /// A job moved forward.
    Progress {
        /// The job.
        id: JobId,
        /// Units done so far.
        done: u64,
        /// Units in all (it may grow).
        total: u64,
        /// What the job is doing now.
        stage: String,
    },
    /// A job works on run `run` (an evaluation's run id): the id it is
    /// shown by from now on, so that one thing has one id.
    Run {
        /// The job.
        id: JobId,
        /// The run's id.
        run: String,
    },
    /// A job wrote a line to its log.
    Log {
        /// The job.
        id: JobId,
        /// The line.
        line: String,
    },
    /// A job ended.
    Finished {
        /// The job.
        id: JobId,
        /// How.
        outcome: JobOutcome,
    },
}
