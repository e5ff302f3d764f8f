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
        index: usize,
        step: String,
        code: Option<i32>,
        output: String,
    },
    /// A required tool is missing.
    #[error("`{tool}` is not available: {hint} (run `endless sandbox doctor`)")]
    ToolMissing { tool: String, hint: String },
    /// The backend cannot run on this machine.
    #[error("backend `{backend}` is unavailable here: {reason} (run `endless sandbox doctor`)")]
    Unavailable { backend: String, reason: String },
    /// Unknown backend name.
    #[error("unknown sandbox backend `{0}`: expected `local`, `apptainer` or `oci`")]
    UnknownBackend(String),
    /// The task asks for network access but the backend's policy denies it.
    #[error("task `{task}` asks for network access ([environment] network = true) but this sandbox denies network; allow it with ENDLESS_SANDBOX_NETWORK=allow or set network = false")]
    NetworkNotAllowed { task: String },
    /// The image was built by another backend.
    #[error("image was built by backend `{image}`, not `{backend}`")]
    WrongBackend { image: String, backend: String },
    /// A system call or filesystem operation failed.
    #[error("{what} ({path}): {source}")]
    Io {
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Starting the sandbox failed.
    #[error("could not start the sandbox: {0}")]
    Start(String),
    /// The shell ended (exited, was killed, or its PTY closed).
    #[error("the session's shell ended{}: output so far:\n{output}", .reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    SessionEnded {
        reason: Option<String>,
        output: String,
    },
    /// The shell stopped answering even after interrupt and kill; the session was closed.
    #[error("the session's shell stopped answering after a timeout, interrupt and kill; the session was closed")]
    Unresponsive,
    /// The session's wall-clock limit passed; the session was closed.
    #[error("the session's wall-clock limit of {0:?} passed; the session was closed")]
    WallClock(std::time::Duration),
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
