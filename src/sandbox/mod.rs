//! Sandboxed, reproducible task environments with an interactive PTY shell.
//!
//! A [`Backend`] builds a task's image once (cached by a content hash of the
//! environment definition) and starts [`Session`]s from it; every session
//! starts from an identical fresh copy of the initial state.

pub mod apptainer;
mod asciicast;
mod audience;
mod container;
pub mod doctor;
mod error;
mod fds;
mod image;
pub mod local;
mod marker;
mod marker_filter;
pub mod oci;
pub mod offline;
mod session;
mod spawner;
mod streaming;
mod types;

use std::path::Path;

pub use asciicast::{Prompt, Recorder};
pub use doctor::{doctor, doctor_images, DoctorReport};
pub use error::SandboxError;
pub use fds::seal_inherited;
pub use image::{home_of, image_hash, Image};
pub use marker::clean_output;
pub use marker_filter::{MarkerFilter, Piece};
use session::detach_from_terminal;
pub use session::{
    run_with_timeout, Chunk, CommandOutput, Session, SessionControl, SessionInfo, VerifierCall,
    VerifierPath, WarmHints, CAPTURE_LIMIT, VERIFIER_PROGRAM,
};
pub use streaming::{Pipe, StreamedExit};
pub use types::*;

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
}

/// The backend called `name` (`local`, `apptainer` or `oci`), caching under
/// `cache_dir`, with the default `[images]` settings.
pub fn backend_by_name(name: &str, cache_dir: &Path) -> Result<Box<dyn Backend>, SandboxError> {
    configured_backend(name, cache_dir, &crate::config::ImagesConfig::default())
}

/// [`backend_by_name`] with the `[images]` settings (aliases, mirrors, pulls,
/// fallback) the `local` backend resolves base images with.
pub fn configured_backend(
    name: &str,
    cache_dir: &Path,
    images: &crate::config::ImagesConfig,
) -> Result<Box<dyn Backend>, SandboxError> {
    match name {
        "local" => Ok(Box::new(
            local::LocalBackend::new(cache_dir)?.with_images(images.clone()),
        )),
        "apptainer" => Ok(Box::new(apptainer::ApptainerBackend::new(cache_dir)?)),
        "oci" => Ok(Box::new(oci::OciBackend::new(cache_dir)?)),
        other => Err(SandboxError::UnknownBackend(other.to_string())),
    }
}
