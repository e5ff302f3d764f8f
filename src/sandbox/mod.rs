//! Sandboxed, reproducible task environments with an interactive PTY shell.
//!
//! A [`Backend`] builds a task's image once (cached by a content hash of the
//! environment definition) and starts [`Session`]s from it; every session
//! starts from an identical fresh copy of the initial state.
//!
//! Rooms: the backend-neutral part (the [`Backend`] contract in
//! `backend.rs`, [`Session`] and its pieces, [`Image`], the pool of
//! pre-started sandboxes in `pool.rs`, the types and errors) uses no backend. The `local` backend (`local/`, with its image
//! building in `local/build/`) composes two rooms that know no backend:
//! isolating a process (`isolate/`) and verifying inside a sandbox
//! (`verifier/`). `apptainer.rs` and `oci/` (through `container.rs`) are
//! the other backends; this file only picks one. `tests/layers.rs` checks
//! these rules.

pub mod apptainer;
mod asciicast;
mod audience;
mod backend;
mod container;
mod detach;
pub mod doctor;
mod error;
mod fds;
mod image;
mod isolate;
// The host CA bundle of sandboxes with network, for commands run beside the shell.
pub(crate) use isolate::net;
pub use isolate::subids;
pub mod local;
mod marker;
mod marker_filter;
pub mod oci;
pub mod offline;
pub mod pool;
mod session;
mod spawner;
mod streaming;
mod types;
mod verifier;

use std::path::Path;

pub use asciicast::{Prompt, Recorder};
pub use backend::Backend;
pub use doctor::{doctor, doctor_images, DoctorReport};
pub use error::SandboxError;
pub use fds::seal_inherited;
pub use image::{home_of, image_hash, Image};
pub use marker::clean_output;
pub use marker_filter::{MarkerFilter, Piece};
pub use session::{
    run_with_timeout, Chunk, CommandOutput, Session, SessionControl, SessionInfo, VerifierCall,
    VerifierPath, WarmHints, VERIFIER_PROGRAM,
};
pub use streaming::{Pipe, StreamedExit, CAPTURE_LIMIT};
pub use types::*;

/// The backend called `name` (`local`, `apptainer` or `oci`), caching under
/// `cache_dir`, with the default `[images]` settings.
pub fn backend_by_name(name: &str, cache_dir: &Path) -> Result<Box<dyn Backend>, SandboxError> {
    configured_backend(
        name,
        cache_dir,
        &crate::config::ImagesConfig::default(),
        pool::PoolSettings::default(),
    )
}

/// [`backend_by_name`] with the `[images]` settings (aliases, mirrors, pulls,
/// fallback) the `local` backend resolves base images with, and its pool of
/// pre-started sandboxes (`[sandbox] pool`).
pub fn configured_backend(
    name: &str,
    cache_dir: &Path,
    images: &crate::config::ImagesConfig,
    pool: pool::PoolSettings,
) -> Result<Box<dyn Backend>, SandboxError> {
    match name {
        "local" => Ok(Box::new(
            local::LocalBackend::new(cache_dir)?
                .with_images(images.clone())
                .with_pool(pool),
        )),
        "apptainer" => Ok(Box::new(apptainer::ApptainerBackend::new(cache_dir)?)),
        "oci" => Ok(Box::new(oci::OciBackend::with_images(cache_dir, images)?)),
        other => Err(SandboxError::UnknownBackend(other.to_string())),
    }
}
