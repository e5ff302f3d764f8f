//! Background jobs (generation, validation, evaluation, training): each runs
//! on its own thread, reports progress and log lines as [`JobEvent`]s to any
//! number of subscribers (the TUI's jobs view, the CLI's progress bars), can
//! be cancelled, and is journalled in the workspace database.

mod context;
mod event;
mod manager;

pub use context::{Cancelled, JobContext, NothingDone};
pub use event::{JobEvent, JobId, JobOutcome};
pub use manager::JobManager;
