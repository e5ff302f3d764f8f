//! The use-case layer under both front ends: what the CLI (`src/commands`)
//! and the TUI (`src/tui`) share, so that neither imports the other. Today:
//! the context every use case starts from, task selection and the indexing
//! of a run's episodes, and turning training arguments into options.

mod context;
mod runs;
mod train;

pub use context::{policy_options, Context};
pub use runs::{index_episodes, record_pass_at_k, run_id, select_tasks};
pub use train::{options as train_options, recipe as train_recipe};
