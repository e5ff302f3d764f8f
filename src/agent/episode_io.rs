//! What a sandboxed episode is given and what it reports, shared by the
//! rollout engine ([`super::rollout`]) and the one-reply-at-a-time
//! [`super::RecordedEpisode`]: the sandbox provider and its start options,
//! the episode's files, progress events and errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::episode::Step;
use super::result::{EpisodeResult, TestOutcome};
use super::terminal::{Terminal, TerminalError};
use crate::task::Task;

/// A live copy of a session's raw byte stream (for TUI panes).
pub type LiveStream = tokio::sync::broadcast::Receiver<Arc<[u8]>>;

/// How a sandbox is started for an episode.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Record an asciicast of the session here.
    pub record: Option<PathBuf>,
}

/// What the final tests said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verification {
    /// One outcome per final test.
    pub tests: Vec<TestOutcome>,
    /// The JUnit XML report, when the runner wrote one.
    pub junit_xml: Option<String>,
    /// The test runner's output.
    pub output: String,
    /// How the verifier ran (`warm`, `cold`, `cold (why)`), when the
    /// provider says.
    pub verifier: Option<String>,
    /// What the session's resource limits left out, when the provider says
    /// (see [`crate::sandbox::SessionInfo::limits`]).
    pub limits: Option<String>,
}

/// Starts terminals for tasks and checks their final state. Implemented for
/// the real sandbox backend; tests use a plain `bash` in a temp dir.
pub trait SandboxProvider: Send + Sync + 'static {
    /// The session type.
    type Term: Terminal + Send;
    /// Build or fetch `task`'s image ahead of time (optional: `start` must
    /// also work without it).
    fn prepare(&self, _task: &Task) -> Result<(), TerminalError> {
        Ok(())
    }
    /// Start a fresh copy of `task`'s initial state.
    fn start(&self, task: &Task, options: &StartOptions) -> Result<Self::Term, TerminalError>;
    /// Run `task`'s final tests in `term` after the agent stopped.
    fn verify(&self, term: &mut Self::Term, task: &Task) -> Result<Verification, TerminalError>;
    /// A live copy of the session's byte stream, when the backend has one.
    fn stream(&self, _term: &Self::Term) -> Option<LiveStream> {
        None
    }
}

/// Progress of a run, for progress bars and the TUI.
#[derive(Debug)]
pub enum RolloutEvent {
    /// The run is planned: `total` episodes, of which `finished` were already done.
    Planned {
        /// Episodes in the run.
        total: usize,
        /// Episodes already on disk (a resumed run), not run again.
        finished: usize,
    },
    /// An episode's sandbox is up; `stream` carries its raw bytes if available.
    Started {
        /// The task's id.
        task: String,
        /// The sample number, from 0.
        sample: u32,
        /// The session's raw bytes.
        stream: Option<LiveStream>,
    },
    /// A turn finished.
    Step {
        /// The task's id.
        task: String,
        /// The sample number, from 0.
        sample: u32,
        /// The finished turn.
        step: Box<Step>,
    },
    /// An episode finished (its files are on disk).
    Finished {
        /// The episode's record, as written to its `result` file.
        result: Box<EpisodeResult>,
    },
}

/// Why a run stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// An episode's file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An episode's worker task panicked or was cancelled; the message says how.
    #[error("an episode worker crashed: {0}")]
    Worker(String),
}

/// The files of one episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodePaths {
    /// `<sample>.jsonl`: the trajectory, one event per line.
    pub trajectory: PathBuf,
    /// `<sample>.cast`: the asciicast recording of the session.
    pub cast: PathBuf,
    /// `<sample>.junit.xml`: the final tests' JUnit report.
    pub junit: PathBuf,
    /// `<sample>.json`: the [`EpisodeResult`].
    pub result: PathBuf,
    /// `<sample>.atif.json`: the episode as an ATIF document, written
    /// beside the result when asked (`[record] atif = true`); `None`: not.
    pub atif: Option<PathBuf>,
}

impl EpisodePaths {
    /// Paths of sample `sample` of task `task_id` under `run_dir`.
    pub fn new(run_dir: &Path, task_id: &str, sample: u32) -> Self {
        let dir = run_dir.join("episodes").join(task_id);
        Self {
            trajectory: dir.join(format!("{sample}.jsonl")),
            cast: dir.join(format!("{sample}.cast")),
            junit: dir.join(format!("{sample}.junit.xml")),
            result: dir.join(format!("{sample}.json")),
            atif: None,
        }
    }

    /// The same paths, with the ATIF document written beside the result
    /// when `on`.
    pub fn with_atif(mut self, on: bool) -> Self {
        self.atif = on.then(|| self.result.with_extension("atif.json"));
        self
    }
}
