//! Sandboxed, reproducible task environments with an interactive PTY shell.
//!
//! A [`Backend`] builds a task's image once (cached by a content hash of the
//! environment definition) and starts [`Session`]s from it; every session
//! starts from an identical fresh copy of the initial state.

mod types;

pub use types::*;
