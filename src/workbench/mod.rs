//! The use cases both front ends call, one implementation each: the CLI
//! (`commands`) and the TUI (`tui`) turn their input into these calls and
//! their results into text, JSON or views, and never import each other.
//!
//! So far: the [`Context`] (paths, config, workspace, sandbox backend,
//! policy options), what evaluation runs share (task selection, run ids,
//! indexing a run's episodes and pass@k), and turning a [`TrainRequest`]
//! into training options and its effective recipe; exporting datasets for
//! RL trainers ([`export`]); merging workspaces.

mod context;
pub mod export;
mod runs;
mod train;

pub use context::Context;
pub use runs::{index_episodes, record_pass_at_k, run_id, select_tasks};
pub use train::{options as train_options, recipe as train_recipe, TrainRequest};
