//! The shell the episode loop talks to.

use std::time::Duration;

use crate::sandbox::ExecResult;

/// A shell failure that ends the episode (not a failing command: those are
/// ordinary [`ExecResult`]s with a non-zero exit code).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TerminalError(pub String);

/// Something that runs shell commands one at a time, keeping state between
/// them (working directory, environment, files).
pub trait Terminal {
    /// Run `command`, interrupting it after `timeout`.
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError>;
}

impl<T: Terminal + ?Sized> Terminal for &mut T {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        (**self).exec(command, timeout)
    }
}

impl<T: Terminal + ?Sized> Terminal for Box<T> {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        (**self).exec(command, timeout)
    }
}
