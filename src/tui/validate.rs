//! "Validate now": the hook for the sandbox validator.
//!
//! The validator (build the environment, initial tests pass, final tests
//! fail on the initial state, the oracle passes) comes with the sandbox
//! branch. Wire it here; until then the TUI says so instead of faking a
//! result.

use crate::store::Workspace;

/// The message shown while no validator is linked in.
pub const NOT_AVAILABLE: &str = "validation not available in this build";

/// Validate task `id`: `Ok(summary)` or `Err(reason)`. Runs on the store
/// worker thread, never on the UI thread.
pub fn validate_task(_ws: &Workspace, _id: &str) -> Result<String, String> {
    Err(NOT_AVAILABLE.to_string())
}
