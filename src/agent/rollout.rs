//! The rollout engine: tasks x samples, many episodes at once, each written
//! to disk as it happens and resumable after a crash.
//!
//! Layout under the run directory:
//! `episodes/<task-id>/<sample>.jsonl` (trajectory, one event per line),
//! `.cast` (asciicast, when the sandbox records), `.junit.xml` (final
//! tests) and `.json` (the [`EpisodeResult`], written atomically last: its
//! presence means the episode is finished).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::episode::{EndReason, EpisodeConfig};
use super::episode_io::{EpisodePaths, RolloutError, RolloutEvent, SandboxProvider};
use super::policy::PolicyFactory;
use super::protocol::Protocol;
use super::recorded::{RecordedEpisode, Recording, Started};
use super::result::{EpisodeId, EpisodeResult};
use crate::task::Task;

/// Settings of a rollout run.
#[derive(Debug, Clone)]
pub struct RolloutConfig {
    /// `runs/<run-id>`; episodes go under `episodes/`.
    pub run_dir: PathBuf,
    /// Samples per task.
    pub samples: u32,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Turn limit; `None`: each task's `[agent] max_turns`.
    pub max_turns: Option<u32>,
    /// Limit of one command.
    pub command_timeout: Duration,
    /// Ask the sandbox to record an asciicast per episode.
    pub record_cast: bool,
    /// Re-run episodes whose saved result is an infrastructure error when
    /// resuming (never those the agent failed, its shell dying included).
    /// Interrupted episodes (their process died; the result was recorded
    /// for them afterwards) are re-run whatever this says, as they were
    /// before they had a result.
    pub retry_errors: bool,
    /// Set to stop starting new episodes (running ones finish).
    pub cancel: Option<Arc<AtomicBool>>,
    /// The agent protocol every episode follows.
    pub protocol: Protocol,
    /// Write each episode as an ATIF document beside its result
    /// (`[record] atif`).
    pub atif: bool,
}

impl RolloutConfig {
    /// Defaults: 1 sample, 4 at once, task turn limits, 60 s per command.
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        Self {
            run_dir: run_dir.into(),
            samples: 1,
            concurrency: 4,
            max_turns: None,
            command_timeout: Duration::from_secs(60),
            record_cast: true,
            retry_errors: true,
            cancel: None,
            protocol: Protocol::endless(),
            atif: false,
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The run's directory (`episodes/<task-id>/<sample>.*` under it).
    pub run_dir: PathBuf,
    /// All finished episodes (resumed ones included), sorted by task and sample.
    pub episodes: Vec<EpisodeResult>,
    /// Episodes taken from an earlier, interrupted run.
    pub resumed: usize,
    /// Episodes run now.
    pub ran: usize,
    /// The run was cancelled before every episode started.
    pub cancelled: bool,
    /// Wall-clock seconds of this run (resumed episodes excluded).
    pub wall_secs: f64,
}

/// Read a finished episode's result file, if it exists and parses.
pub fn load_result(path: &Path) -> Option<EpisodeResult> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Every finished episode under a run directory.
pub fn load_run(run_dir: &Path) -> Vec<EpisodeResult> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(run_dir.join("episodes")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(files) = std::fs::read_dir(t.path()) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".json") && !name.starts_with('.') {
                out.extend(load_result(&p));
            }
        }
    }
    out.sort_by(|a, b| (&a.task, a.sample).cmp(&(&b.task, b.sample)));
    out
}

/// Run one episode of `task` in a fresh sandbox and write its files.
/// Call from a thread that may block. Returns the result, also saved to
/// `paths.result`; fails only when the result cannot be saved.
#[allow(clippy::too_many_arguments)]
pub fn run_sandboxed_episode<P: SandboxProvider>(
    provider: &P,
    task: &Task,
    sample: u32,
    policy: &PolicyFactory,
    config: &EpisodeConfig,
    paths: &EpisodePaths,
    record_cast: bool,
    events: Option<&UnboundedSender<RolloutEvent>>,
) -> Result<EpisodeResult, RolloutError> {
    let recording = Recording {
        paths: paths.clone(),
        record_cast,
        events: events.cloned(),
    };
    let mut agent = match policy.start(task, sample) {
        Ok(p) => p,
        Err(e) => {
            let id = EpisodeId::new(task, sample, policy.name());
            return recording.failed_to_start(id, e.to_string());
        }
    };
    let mut episode =
        match RecordedEpisode::start(provider, task, sample, &policy.name(), config, recording)? {
            Started::Running(episode) => episode,
            Started::Failed(result) => return Ok(*result),
        };
    while !episode.is_done() {
        let asked = Instant::now();
        let tools = episode.offered_tools();
        match super::policy::ask(agent.as_mut(), episode.messages(), &tools) {
            Ok(reply) => {
                let secs = asked.elapsed().as_secs_f64();
                episode.step_message(reply.message(), reply.usage, secs);
            }
            Err(e) => episode.policy_failed(&e, asked.elapsed().as_secs_f64()),
        }
    }
    episode.finish(provider, task)
}

/// Run `config.samples` episodes of every task, `config.concurrency` at a
/// time, skipping those already finished under `config.run_dir`.
pub async fn run_rollouts<P: SandboxProvider>(
    config: RolloutConfig,
    tasks: Vec<Task>,
    policy: PolicyFactory,
    provider: Arc<P>,
    events: Option<UnboundedSender<RolloutEvent>>,
) -> Result<RunSummary, RolloutError> {
    let t0 = Instant::now();
    let policy = Arc::new(policy);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(config.concurrency.max(1)));
    let mut summary = RunSummary {
        run_dir: config.run_dir.clone(),
        episodes: Vec::new(),
        resumed: 0,
        ran: 0,
        cancelled: false,
        wall_secs: 0.0,
    };
    let mut todo = Vec::new();
    for task in tasks.into_iter().map(Arc::new) {
        for sample in 0..config.samples {
            let paths =
                EpisodePaths::new(&config.run_dir, task.id(), sample).with_atif(config.atif);
            match load_result(&paths.result) {
                // Infrastructure outcomes (errors, interruptions) are retried.
                Some(r)
                    if r.end_reason != EndReason::Interrupted
                        && !(config.retry_errors && r.end_reason == EndReason::Error) =>
                {
                    summary.episodes.push(r);
                    summary.resumed += 1;
                }
                _ => todo.push((task.clone(), sample, paths)),
            }
        }
    }
    if let Some(tx) = &events {
        let _ = tx.send(RolloutEvent::Planned {
            total: summary.resumed + todo.len(),
            finished: summary.resumed,
        });
    }
    let mut set = tokio::task::JoinSet::new();
    let mut first_error: Option<RolloutError> = None;
    let mut collect =
        |joined: Result<Result<EpisodeResult, RolloutError>, tokio::task::JoinError>,
         summary: &mut RunSummary| match joined {
            Ok(Ok(r)) => {
                summary.episodes.push(r);
                summary.ran += 1;
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(RolloutError::Worker(e.to_string()));
            }
        };
    for (task, sample, paths) in todo {
        let Ok(permit) = semaphore.clone().acquire_owned().await else {
            break;
        };
        if config
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            summary.cancelled = true;
            break;
        }
        let episode = EpisodeConfig::for_task(&task, config.max_turns, config.command_timeout)
            .with_protocol(config.protocol.clone());
        let (provider, policy, events, record) = (
            provider.clone(),
            policy.clone(),
            events.clone(),
            config.record_cast,
        );
        set.spawn_blocking(move || {
            let _permit = permit;
            run_sandboxed_episode(
                provider.as_ref(),
                &task,
                sample,
                &policy,
                &episode,
                &paths,
                record,
                events.as_ref(),
            )
        });
        while let Some(joined) = set.try_join_next() {
            collect(joined, &mut summary);
        }
    }
    while let Some(joined) = set.join_next().await {
        collect(joined, &mut summary);
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    summary
        .episodes
        .sort_by(|a, b| (&a.task, a.sample).cmp(&(&b.task, b.sample)));
    summary.wall_secs = t0.elapsed().as_secs_f64();
    Ok(summary)
}
