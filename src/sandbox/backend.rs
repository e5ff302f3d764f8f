//! The backend-neutral contract every sandbox backend implements.

use super::{Image, SandboxError, Session, SessionOptions};
use crate::task::Task;

/// A way to build task images and run sessions from them.
pub trait Backend: Send + Sync {
    /// `local`, `apptainer` or `oci`.
    fn name(&self) -> &'static str;
    /// Build the task's image once; later calls return the cached image.
    fn prepare(&self, task: &Task) -> Result<Image, SandboxError>;
    /// [`Backend::prepare`], reporting the base image's pull and the build's
    /// steps to `progress` (backends that cannot say report nothing).
    fn prepare_reporting(
        &self,
        task: &Task,
        progress: crate::images::ProgressFn<'_>,
    ) -> Result<Image, SandboxError> {
        let _ = progress;
        self.prepare(task)
    }
    /// Start a session from a fresh copy of `image`.
    fn start(&self, image: &Image, opts: &SessionOptions) -> Result<Session, SandboxError>;
    /// The pool of pre-started sandboxes' figures (`None`: no pool).
    fn pool_stats(&self) -> Option<super::pool::PoolStats> {
        None
    }
    /// Hold at most `n` sandboxes at once, live sessions and pre-started
    /// ones together (serve's `--max-sessions`): a pool keeps only what
    /// that leaves room for. Backends without a pool ignore it.
    fn limit_sessions(&self, n: usize) {
        let _ = n;
    }
}
