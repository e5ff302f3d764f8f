//! Errors of the sandbox: each names what failed and, where possible, what to do.

use std::path::PathBuf;

use crate::task::BundleError;

/// Everything that can go wrong while building images and running sessions.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The environment definition could not be parsed (file and line are named).
    #[error("environment definition: {0}")]
    Definition(#[from] BundleError),
    /// A setup step failed while building the image.
    #[error("setup step {index} ({step}) failed with exit code {code:?}; its output:\n{output}")]
    SetupStep {
        /// Step number (0 = creating the agent account; last = finishing touches).
        index: usize,
        /// The step, as written in the definition.
        step: String,
        /// Its exit status.
        code: Option<i32>,
        /// Its output.
        output: String,
        /// The note on the base it was built on (a stand-in or an alias
        /// serving the image asked for), when there is one.
        base_note: Option<String>,
    },
    /// A required tool is missing.
    #[error("`{tool}` is not available: {hint} (run `endless sandbox doctor`)")]
    ToolMissing {
        /// The missing program.
        tool: String,
        /// How to install it.
        hint: String,
    },
    /// The backend cannot run on this machine.
    #[error("backend `{backend}` is unavailable here: {reason} (run `endless sandbox doctor`)")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// Why, and how to fix it.
        reason: String,
    },
    /// Unknown backend name.
    #[error("unknown sandbox backend `{0}`: expected `local`, `apptainer` or `oci`")]
    UnknownBackend(String),
    /// The task asks for network access but the backend's policy denies it.
    #[error("task `{task}` asks for network access ([environment] network = true) but this sandbox denies network; allow it with ENDLESS_SANDBOX_NETWORK=allow or set network = false")]
    NetworkNotAllowed {
        /// The task id.
        task: String,
    },
    /// The image was built by another backend.
    #[error("image was built by backend `{image}`, not `{backend}`")]
    WrongBackend {
        /// Backend that built the image.
        image: String,
        /// Backend asked to start it.
        backend: String,
    },
    /// A system call or filesystem operation failed.
    #[error("{what} ({path}): {source}")]
    Io {
        /// What was being done.
        what: String,
        /// On which path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Starting the sandbox failed.
    #[error("could not start the sandbox: {0}")]
    Start(String),
    /// The disk under the cache filled up during a build or merge: an
    /// infrastructure error of the run (unscored), never the task's.
    #[error("the disk is full: {what} ({path}) ran out of space; this is not the task's failure: free space, lower [images] max_store_gb or run `endless images prune`, then run again")]
    DiskFull {
        /// What was being done.
        what: String,
        /// Where.
        path: PathBuf,
    },
    /// The task's base image could not be had or unpacked.
    #[error(transparent)]
    Image(#[from] crate::images::ImageError),
    /// The shell ended (exited, was killed, or its PTY closed).
    #[error("the session's shell ended{}: output so far:\n{output}", .reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    SessionEnded {
        /// Why, where known.
        reason: Option<String>,
        /// Output of the command in flight, if any.
        output: String,
    },
    /// The sandbox's own process was killed by a signal from outside (the
    /// host, the operator, a crashed parent): infrastructure, never the
    /// agent's doing.
    #[error("the sandbox was killed from outside by signal {signal}; this is not the agent's doing: output so far:\n{output}")]
    SandboxKilled {
        /// The signal.
        signal: i32,
        /// Output of the command in flight, if any.
        output: String,
    },
    /// The shell ended because the session ran into a resource limit.
    #[error("the session's shell was killed at its {limit}; output so far:\n{output}")]
    LimitReached {
        /// Which limit.
        limit: String,
        /// Output of the command in flight, if any.
        output: String,
    },
    /// The shell stopped answering even after interrupt and kill; the session was closed.
    #[error("the session's shell stopped answering after a timeout, interrupt and kill; the session was closed")]
    Unresponsive,
    /// The session's wall-clock limit passed; the session was closed.
    #[error("the session's wall-clock limit of {0:?} passed; the session was closed")]
    WallClock(std::time::Duration),
    /// The agent changed the sandbox so that the verifier refused to run
    /// there (counted as a failed verification, never as a pass).
    #[error("the agent tampered with the verifier's environment: {0}")]
    Tampered(String),
    /// The verifier could not run or its result could not be read.
    #[error("verifier: {0}")]
    Verify(String),
}

impl SandboxError {
    /// Wrap an I/O error with what was being done and on which path.
    pub fn io(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        let path = path.into();
        move |source| SandboxError::Io { what, path, source }
    }
}
