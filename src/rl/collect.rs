//! Collecting training data through the real agent loop and sandbox:
//! rollouts of the policy being trained (token sequences with sampling-time
//! log-probs and rewards from the final tests), and oracle trajectories for
//! the supervised warm start.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::batch::{RolloutBatch, RolloutSequence};
use super::error::{Result, RlError};
use super::recorder::{template_messages, RecordingSource, TokenTranscript};
use super::reward::{baseline_for, progress_reward, RewardMode};
use crate::agent::{
    run_rollouts, EndReason, EpisodeResult, PolicyFactory, RolloutConfig, RolloutEvent,
    SandboxProvider, StepKind,
};
use crate::llm::{ChatMessage, Role};
use crate::model::{ChatTokenizer, FinishReason, Generation, LocalModel, SamplingConfig};
use crate::task::{Baseline, Task};

/// How episodes are run.
#[derive(Debug, Clone)]
pub struct EpisodeSettings {
    /// Episodes per task.
    pub samples: u32,
    /// Turn limit per episode.
    pub max_turns: u32,
    /// Episodes in flight at once; the policy samples their turns as one batch.
    pub concurrency: usize,
    /// Limit of one command in the sandbox.
    pub command_timeout: Duration,
    /// The agent protocol of every episode.
    pub protocol: crate::agent::protocol::Protocol,
}

/// Rollouts of one step: the batch PPO trains on, and the episodes behind it.
#[derive(Debug, Clone)]
pub struct Collected {
    /// The token sequences, rewards and old log-probs PPO trains on.
    pub batch: RolloutBatch,
    /// The task of each of `batch.sequences`.
    pub tasks: Vec<String>,
    /// The finished episodes, as written under the step's rollout directory.
    pub episodes: Vec<EpisodeResult>,
    /// Episodes that left no token sequence (the sandbox failed to start).
    pub missing: usize,
}

fn rollout_error(e: crate::agent::RolloutError) -> RlError {
    RlError::Batch(format!("rollouts failed: {e}"))
}

/// Run the rollouts on `rt`, calling `on_done(finished, total)` as episodes
/// finish (resumed ones included).
fn drive<P: SandboxProvider>(
    rt: &tokio::runtime::Runtime,
    config: RolloutConfig,
    tasks: Vec<Task>,
    policy: PolicyFactory,
    provider: Arc<P>,
    total: usize,
    on_done: &mut dyn FnMut(usize, usize),
) -> std::result::Result<crate::agent::RunSummary, crate::agent::RolloutError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    rt.block_on(async {
        let run = run_rollouts(config, tasks, policy, provider, Some(tx));
        tokio::pin!(run);
        let mut done = 0;
        loop {
            tokio::select! {
                summary = &mut run => break summary,
                Some(ev) = rx.recv() => match ev {
                    RolloutEvent::Planned { finished, .. } => {
                        done = finished;
                        on_done(done, total);
                    }
                    RolloutEvent::Finished { .. } => {
                        done += 1;
                        on_done(done, total);
                    }
                    _ => {}
                },
            }
        }
    })
}

/// Run `settings.samples` episodes of each task with `model` (sampling with
/// `sampling`), writing them under `run_dir`, and turn them into a batch.
/// `on_done(done, total)` is called as episodes finish.
#[allow(clippy::too_many_arguments)]
pub fn collect_rollouts<P: SandboxProvider>(
    rt: &tokio::runtime::Runtime,
    provider: Arc<P>,
    model: LocalModel,
    tasks: &[Task],
    settings: &EpisodeSettings,
    sampling: SamplingConfig,
    seed: u64,
    reward_mode: RewardMode,
    run_dir: &Path,
    cancel: Option<Arc<AtomicBool>>,
    on_done: &mut dyn FnMut(usize, usize),
) -> Result<Collected> {
    // A step is collected whole: leftovers of an interrupted attempt go.
    if run_dir.exists() {
        std::fs::remove_dir_all(run_dir).map_err(|e| RlError::io(run_dir, e))?;
    }
    let source = RecordingSource::new(model, sampling, seed, "train");
    let transcripts = source.transcripts();
    let mut config = RolloutConfig::new(run_dir);
    config.samples = settings.samples;
    config.concurrency = settings.concurrency;
    config.max_turns = Some(settings.max_turns);
    config.command_timeout = settings.command_timeout;
    config.protocol = settings.protocol.clone();
    config.record_cast = false;
    config.cancel = cancel;
    let total = tasks.len() * settings.samples as usize;
    let summary = drive(
        rt,
        config,
        tasks.to_vec(),
        PolicyFactory::Custom(Arc::new(source)),
        provider.clone(),
        total,
        on_done,
    );
    let summary = summary.map_err(rollout_error)?;
    let baselines = if reward_mode == RewardMode::Partial {
        baselines(provider.as_ref(), tasks)
    } else {
        HashMap::new()
    };
    let mut transcripts = transcripts
        .lock()
        .map_err(|_| RlError::Batch("transcripts lock poisoned".into()))?;
    let mut batch = RolloutBatch::default();
    let mut batch_tasks = Vec::new();
    let mut missing = 0;
    for ep in &summary.episodes {
        let Some(builder) = transcripts.remove(&(ep.task.clone(), ep.sample)) else {
            missing += 1;
            continue;
        };
        let baseline = baselines.get(&ep.task).map(Arc::as_ref);
        let seq = builder.finish(episode_reward(ep, reward_mode, baseline), ep.passed);
        record_turn_tokens(run_dir, ep, &seq);
        if seq.agent_tokens() > 0 {
            batch.sequences.push(seq);
            batch_tasks.push(ep.task.clone());
        } else {
            missing += 1;
        }
    }
    Ok(Collected {
        batch,
        tasks: batch_tasks,
        episodes: summary.episodes,
        missing,
    })
}

impl Collected {
    /// Drop the sequences of tasks whose episodes all got the same reward
    /// (DAPO's dynamic sampling): relative to each other they teach nothing,
    /// and against the value baseline they only push every sampled token
    /// down (or up). Returns how many tasks are left.
    pub fn keep_varied_groups(&mut self) -> usize {
        let mut rewards: HashMap<&str, (f32, f32)> = HashMap::new();
        for (task, seq) in self.tasks.iter().zip(&self.batch.sequences) {
            let r = rewards.entry(task).or_insert((seq.reward, seq.reward));
            r.0 = r.0.min(seq.reward);
            r.1 = r.1.max(seq.reward);
        }
        let varied: HashSet<String> = rewards
            .into_iter()
            .filter(|(_, (lo, hi))| hi > lo)
            .map(|(t, _)| t.to_string())
            .collect();
        let (tasks, sequences) = std::mem::take(&mut self.tasks)
            .into_iter()
            .zip(std::mem::take(&mut self.batch.sequences))
            .filter(|(t, _)| varied.contains(t))
            .unzip();
        self.tasks = tasks;
        self.batch.sequences = sequences;
        varied.len()
    }

    /// Add another draw's rollouts.
    pub fn extend(&mut self, other: Collected) {
        self.batch.sequences.extend(other.batch.sequences);
        self.tasks.extend(other.tasks);
        self.episodes.extend(other.episodes);
        self.missing += other.missing;
    }
}

/// The partial reward's baseline of each of `tasks`, by id (see
/// [`baseline_for`]: recorded, or measured once per task). A task whose
/// baseline cannot be measured is left out (its episodes earn 0), with a
/// warning.
fn baselines<P: SandboxProvider>(provider: &P, tasks: &[Task]) -> HashMap<String, Arc<Baseline>> {
    let mut out = HashMap::new();
    for task in tasks {
        if out.contains_key(task.id()) {
            continue;
        }
        match baseline_for(provider, task) {
            Ok(b) => {
                out.insert(task.id().to_string(), b);
            }
            Err(e) => {
                tracing::warn!(task = task.id(), %e, "cannot measure the partial reward's baseline");
            }
        }
    }
    out
}

/// The reward of a finished episode: binary is its `passed` (every final
/// test passed and nothing failed); partial is the progress over the task's
/// `baseline` ([`progress_reward`]; 0 without one); clean is binary for
/// episodes that ended with done and no malformed reply.
pub fn episode_reward(ep: &EpisodeResult, mode: RewardMode, baseline: Option<&Baseline>) -> f32 {
    match mode {
        RewardMode::Binary => f32::from(ep.passed),
        RewardMode::Clean => {
            let clean = ep.end_reason == EndReason::Done
                && ep.steps.iter().all(|s| s.kind != StepKind::Malformed);
            f32::from(ep.passed && clean)
        }
        RewardMode::Partial => baseline.map_or(0.0, |b| progress_reward(b, &ep.tests)),
    }
}

/// Run the oracle (each task's `solution/solve.sh`) once per task under
/// `run_dir` (resuming what is there) and return the conversations of the
/// episodes that passed.
pub fn oracle_conversations<P: SandboxProvider>(
    rt: &tokio::runtime::Runtime,
    provider: Arc<P>,
    tasks: &[Task],
    concurrency: usize,
    protocol: &crate::agent::protocol::Protocol,
    run_dir: &Path,
    on_done: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<ChatMessage>>> {
    let with_solution: Vec<Task> = tasks
        .iter()
        .filter(|t| t.solve_script().is_some())
        .cloned()
        .collect();
    let mut config = RolloutConfig::new(run_dir);
    config.concurrency = concurrency;
    config.max_turns = Some(4);
    config.protocol = protocol.clone();
    config.record_cast = false;
    let total = with_solution.len();
    let summary = drive(
        rt,
        config,
        with_solution,
        PolicyFactory::Oracle,
        provider,
        total,
        on_done,
    );
    let summary = summary.map_err(rollout_error)?;
    Ok(summary
        .episodes
        .iter()
        .filter(|e| e.passed)
        .filter_map(|e| read_conversation(&trajectory_path(run_dir, e)))
        .collect())
}

/// Write the rollout's exact tokens beside its result (`<n>.tokens.jsonl`,
/// for ATIF's token ids and log-probs); a failure loses no training data.
fn record_turn_tokens(run_dir: &Path, ep: &EpisodeResult, seq: &RolloutSequence) {
    use crate::agent::atif::{tokens_path, turns_from_stream, write_turn_tokens};
    let paths = crate::agent::EpisodePaths::new(run_dir, &ep.task, ep.sample);
    let turns = turns_from_stream(&seq.tokens, &seq.agent_mask, &seq.old_logprobs);
    if let Err(e) = write_turn_tokens(&tokens_path(&paths), &turns) {
        tracing::warn!(%e, "cannot write the rollout's tokens");
    }
}

fn trajectory_path(run_dir: &Path, ep: &EpisodeResult) -> PathBuf {
    crate::agent::EpisodePaths::new(run_dir, &ep.task, ep.sample).trajectory
}

/// The messages of a trajectory `.jsonl` file.
pub fn read_conversation(path: &Path) -> Option<Vec<ChatMessage>> {
    let text = std::fs::read_to_string(path).ok()?;
    let messages: Vec<ChatMessage> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("type").and_then(|t| t.as_str()) == Some("message"))
        .filter_map(|v| serde_json::from_value(v.get("message")?.clone()).ok())
        .collect();
    (!messages.is_empty()).then_some(messages)
}

/// A conversation as a supervised sequence: the assistant's replies (each
/// ended by the template's stop token) are the trained tokens, tokenised the
/// way rollouts tokenise them. `None` if there is no reply.
pub fn supervised_sequence(
    tok: &ChatTokenizer,
    messages: &[ChatMessage],
) -> Result<Option<RolloutSequence>> {
    let stop = *tok
        .eos_ids()
        .first()
        .ok_or_else(|| RlError::Batch("the tokenizer has no stop token".into()))?;
    let mut transcript = TokenTranscript::new();
    let all = template_messages(messages);
    let mut replies = 0;
    for (i, m) in messages.iter().enumerate() {
        if m.role != Role::Assistant {
            continue;
        }
        transcript.prompt(tok, &all[..i])?;
        let mut ids = tok.encode(&m.content)?;
        ids.push(stop);
        let generation = Generation {
            text: m.content.clone(),
            prompt_ids: Vec::new(),
            logprobs: vec![0.0; ids.len()],
            token_ids: ids,
            finish: FinishReason::Stop,
        };
        transcript.record(tok, &all[..=i], &m.content, &generation)?;
        replies += 1;
    }
    Ok((replies > 0).then(|| transcript.into_builder().finish(1.0, true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(reward: f32) -> RolloutSequence {
        RolloutSequence {
            tokens: vec![1, 2],
            agent_mask: vec![false, true],
            old_logprobs: vec![0.0, -0.5],
            reward,
            passed: reward == 1.0,
        }
    }

    fn episode(passed: bool, end: EndReason, kinds: &[StepKind]) -> EpisodeResult {
        let step = |(i, kind): (usize, &StepKind)| crate::agent::Step::new(i as u32 + 1, *kind);
        EpisodeResult {
            task: "t".into(),
            category: "c".into(),
            complexity: None,
            sample: 0,
            policy: "train".into(),
            passed,
            reward: 0.0,
            turns: kinds.len() as u32,
            end_reason: end,
            failure_mode: None,
            failure_labels: Vec::new(),
            earliest_failing_step: None,
            error: None,
            tests: Vec::new(),
            steps: kinds.iter().enumerate().map(step).collect(),
            tokens: Default::default(),
            timings: Default::default(),
            verifier: None,
            limits: None,
            taken_over: None,
            forked_from: None,
        }
    }

    #[test]
    fn the_clean_reward_wants_a_pass_ended_by_done_without_malformed_replies() {
        use StepKind::{Command, Done, Malformed};
        let clean = |e: &EpisodeResult| episode_reward(e, RewardMode::Clean, None);
        let binary = |e: &EpisodeResult| episode_reward(e, RewardMode::Binary, None);
        let solved = episode(true, EndReason::Done, &[Command, Done]);
        assert_eq!((binary(&solved), clean(&solved)), (1.0, 1.0));
        let garbage_after = episode(true, EndReason::MaxTurns, &[Command, Malformed, Malformed]);
        assert_eq!((binary(&garbage_after), clean(&garbage_after)), (1.0, 0.0));
        let slip_then_done = episode(true, EndReason::Done, &[Malformed, Command, Done]);
        assert_eq!(clean(&slip_then_done), 0.0);
        let no_done = episode(true, EndReason::MaxTurns, &[Command, Command]);
        assert_eq!(clean(&no_done), 0.0);
        let failed = episode(false, EndReason::Done, &[Command, Done]);
        assert_eq!(clean(&failed), 0.0);
    }

    #[test]
    fn a_dead_shell_earns_nothing_in_every_mode() {
        for end in [EndReason::ShellDied, EndReason::ResourceLimit] {
            let trajectory = crate::agent::Trajectory {
                messages: Vec::new(),
                steps: vec![crate::agent::Step::new(1, StepKind::Command)],
                end_reason: end,
                error: Some("the shell failed at turn 1".into()),
                tokens: Default::default(),
                policy_secs: 0.0,
                exec_secs: 0.0,
                agent_secs: 0.0,
                takeover: None,
            };
            let id = crate::agent::EpisodeId {
                task: "t".into(),
                category: "c".into(),
                complexity: None,
                sample: 0,
                policy: "train".into(),
            };
            let ep = EpisodeResult::new(id, &trajectory, Ok(Vec::new()), Default::default());
            assert!(!ep.passed && ep.end_reason.is_scored());
            for mode in [RewardMode::Binary, RewardMode::Partial, RewardMode::Clean] {
                let baseline = Baseline::default();
                assert_eq!(
                    episode_reward(&ep, mode, Some(&baseline)),
                    0.0,
                    "{end:?} {mode:?}"
                );
            }
        }
    }

    #[test]
    fn groups_whose_rewards_all_agree_are_dropped() {
        let groups = [
            ("a", [0.0, 0.0, 0.0]),
            ("b", [0.0, 1.0, 0.0]),
            ("c", [1.0, 1.0, 1.0]),
            ("d", [0.5, 0.25, 0.5]),
        ];
        let mut c = Collected {
            batch: RolloutBatch::default(),
            tasks: Vec::new(),
            episodes: Vec::new(),
            missing: 0,
        };
        for (task, rewards) in groups {
            for r in rewards {
                c.batch.sequences.push(seq(r));
                c.tasks.push(task.to_string());
            }
        }
        assert_eq!(c.keep_varied_groups(), 2);
        assert_eq!(c.tasks, ["b", "b", "b", "d", "d", "d"]);
        let rewards: Vec<f32> = c.batch.sequences.iter().map(|s| s.reward).collect();
        assert_eq!(rewards, [0.0, 1.0, 0.0, 0.5, 0.25, 0.5]);
        assert_eq!(c.keep_varied_groups(), 2, "idempotent");
    }
}
