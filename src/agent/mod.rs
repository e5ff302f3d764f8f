//! The agent: the paper's minimal protocol, the episode loop, policies, the
//! rollout engine, and the failure labels each finished episode records
//! ([`classify_failure`]); `eval` aggregates them and never reaches back.

pub mod atif;
mod episode;
mod episode_io;
mod failure;
mod index;
mod interrupted;
pub mod policy;
pub mod protocol;
mod recorded;
mod result;
pub mod rollout;
mod sandboxed;
mod terminal;
pub mod tool_calls;

pub use episode::{
    run_episode, EndReason, EpisodeConfig, EpisodeObserver, EpisodeStepper, NoObserver, Step,
    StepKind, StepOutcome, Takeover, Trajectory,
};
pub use episode_io::{
    EpisodePaths, LiveStream, RolloutError, RolloutEvent, SandboxProvider, StartOptions,
    Verification,
};
pub use failure::{
    classify_failure, failure_labels, find_loop, FailureMode, LOOP_MAX_PERIOD, LOOP_REPEATS,
};
pub use index::{episode_row, index_episode};
pub use interrupted::{interrupted_result, is_interrupted, record_interrupted, UNOWNED_STILL};
pub use policy::{Policy, PolicyError, PolicyFactory, PolicyOptions, PolicyReply, PolicySource};
pub use recorded::{run_of, EpisodeOwner, RecordedEpisode, Recording, Started};
pub use result::{EpisodeId, EpisodeResult, ForkOf, TestOutcome, Timings};
pub use rollout::{
    load_result, load_run, run_rollouts, run_sandboxed_episode, RolloutConfig, RunSummary,
};
pub use sandboxed::BackendProvider;
pub use terminal::{Fault, HumanCommand, HumanTurn, Terminal, TerminalError};
