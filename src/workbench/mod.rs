//! The use cases both front ends call, one implementation each: the CLI
//! (`commands`) and the TUI (`tui`) turn their input into a typed request,
//! call the use case, and turn its events and typed outcome into text,
//! JSON or views. The two front ends never import each other.
//!
//! Every long use case takes a [`crate::jobs::JobContext`]: it reports
//! progress and log lines through it and polls its cancel flag. The TUI
//! runs them on [`crate::jobs::JobManager`] threads; the CLI runs them in
//! the foreground with [`crate::jobs::JobContext::standalone`] and draws
//! the events as progress bars.
//!
//! - [`Context`]: paths, config, workspace, sandbox backend, policy options.
//! - [`check_policy_spec`], [`unmatched_patterns`]: inputs checked before
//!   anything starts (the TUI's forms, inline).
//! - Task selection, run ids, indexing a run's episodes and pass@k.
//! - [`eval()`] and [`run_episode`]: evaluations and single episodes.
//! - [`audit`]: the task audit (weak, flaky, hackable, underspecified
//!   tasks), its stored reports and `--exclude-audit`.
//! - [`validate_tasks`]: structural and sandbox checks; [`verdicts`]: the
//!   verdicts they store.
//! - [`shards`]: `--shard I/N` runs, shard workspaces and their merge;
//!   [`slurm`]: the same as Slurm job arrays.
//! - [`generate`]: offline and LLM generation, in-process.
//! - [`train()`]: a [`TrainRequest`] resolved into training options and run.
//! - [`export`]: datasets for RL trainers (SkyRL parquet, JSON lines).
//! - [`image_users`]: which tasks build on which base image.
//! - [`episodes_export`] and [`import_runs`]: episodes as ATIF
//!   trajectories, and Harbor job directories imported as runs.
//! - [`rebuild_index`] and [`open_rebuilding`]: the index rebuilt from the
//!   workspace's files (a deleted or corrupt `endless.db`), audits
//!   included ([`reindex_audits`]).
//! - [`record_interrupted_episodes`]: episodes whose process died without
//!   a result, recorded as `interrupted` (unscored) and indexed.

pub mod audit;
pub mod blockers;
mod cancel;
mod checks;
mod context;
pub mod episodes_export;
pub mod eval;
pub mod export;
pub mod fork;
pub mod generate;
mod harbor_job;
mod images;
pub mod import_runs;
mod interrupted;
mod rebuild;
pub mod repair;
pub mod repair_review;
mod runs;
pub mod shard_run;
pub mod sharded_runs;
pub mod shards;
pub mod slurm;
pub mod slurm_options;
pub mod slurm_rerun;
pub mod task_search;
mod train;
pub mod validate;
pub mod verdicts;

pub use cancel::{cut_by_cancel, CANCELLED};
pub use checks::{check_policy_spec, unmatched_patterns};
pub use context::Context;
pub use eval::{eval, run_episode, EvalOutcome, EvalRequest, Plain, RolloutHooks, RunRequest};
pub use images::{
    image_store, image_users, job_progress, pull_images, task_env, workspace_task_env, TaskEnv,
};
pub use interrupted::{
    record_interrupted_episode, record_interrupted_episodes, record_interrupted_runs,
};
pub use rebuild::{open_rebuilding, rebuild_index, reindex_audits, RebuildReport};
pub use runs::{index_episodes, record_pass_at_k, run_id, select_tasks};
pub use train::{options as train_options, recipe as train_recipe, train, TrainRequest};
pub use validate::{validate_task, validate_tasks, BackendOrError, Verdict};
