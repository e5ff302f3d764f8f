//! The use cases both front ends call, one implementation each: the CLI
//! (`commands`) and the TUI (`tui`) turn their input into these calls and
//! their results into text, JSON or views, and never import each other.
//!
//! So far: the [`Context`] (paths, config, workspace, sandbox backend,
//! policy options), what evaluation runs share ([`runs`]: task selection,
//! run ids, indexing), and turning a training request into training options
//! ([`train`]).

mod context;
pub mod runs;
pub mod train;

pub use context::Context;
