//! How an episode cut short by cancelling its job is marked, for the
//! evaluation that skips it and the index rebuild that leaves it out.

use crate::agent::EpisodeResult;

/// The error that ends an episode cut short by cancelling its job (the
/// TUI's takeover provider stops running episodes with it). Such episodes
/// are not results: they are neither indexed nor counted, and a re-run of
/// the same evaluation retries them.
pub const CANCELLED: &str = "cancelled from the TUI";

/// Whether `result` is an episode a cancel cut short (ended with
/// [`CANCELLED`]): not a result, shown as cancelled, never as a failure.
pub fn cut_by_cancel(result: &EpisodeResult) -> bool {
    result
        .error
        .as_deref()
        .is_some_and(|m| m.contains(CANCELLED))
}
