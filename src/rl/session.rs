//! A whole training run, as `endless train` and the TUI's training job run
//! it: build or load the policy, optionally warm-start it with supervised
//! steps on oracle trajectories, measure pass@1 on held-out tasks, run PPO
//! steps (rollouts through the real agent loop and sandbox, then an update),
//! checkpoint, measure again. Everything lands in the run directory (see
//! [`super::run_files`]); a run started again in the same directory resumes
//! from its last good checkpoint.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use candle_core::Device;
use rand::seq::SliceRandom;
use rand::Rng;

use super::batch::RolloutBatch;
use super::checkpoint::{latest, step_dir_name};
use super::collect::{
    collect_rollouts, oracle_conversations, supervised_sequence, Collected, EpisodeSettings,
};
use super::error::RlError;
use super::init::{build_policy, InitSpec};
use super::metrics::{MetricsLog, StepMetrics};
use super::reward::RewardMode;
use super::run_files::{
    append_line, read_info, read_lines, write_info, EvalRecord, RunInfo, RunStatus, SftMetrics,
    EVALS, PPO_METRICS, ROLLOUTS, RUN_INFO, SFT_METRICS,
};
use super::trainer::{TrainConfig, Trainer};
use crate::agent::{BackendProvider, SandboxProvider};
use crate::model::SamplingConfig;
use crate::task::Task;

/// Everything a training run needs.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// The run directory (`<workspace>/checkpoints/<train-id>`).
    pub out: PathBuf,
    /// Training tasks.
    pub tasks: Vec<Task>,
    /// Tasks of the supervised warm start and of a `tiny` tokenizer's corpus.
    pub sft_tasks: Vec<Task>,
    /// Held-out tasks for pass@1 before and after PPO (may be empty).
    pub dev_tasks: Vec<Task>,
    /// Where the policy comes from (`tiny`, `smollm2`, a model directory,
    /// or a checkpoint).
    pub init: InitSpec,
    /// Train LoRA adapters on the frozen `init` instead of every weight.
    pub lora: Option<crate::model::models::lora::LoraConfig>,
    /// Supervised warm-start steps on oracle trajectories (0: none).
    pub sft_steps: u64,
    /// PPO steps.
    pub steps: u64,
    /// Stop PPO after this long (checkpointing first).
    pub time_budget: Option<std::time::Duration>,
    /// Samples per task.
    pub samples: u32,
    /// Tasks per PPO step.
    pub tasks_per_step: usize,
    /// Turn limit per episode.
    pub max_turns: u32,
    /// The agent protocol of every episode (rollouts, oracle trajectories,
    /// held-out evaluations).
    pub protocol: crate::agent::protocol::Protocol,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Checkpoint every N PPO steps (and at the end).
    pub checkpoint_every: u64,
    /// Sample tasks by their current pass rate.
    pub curriculum: bool,
    /// Train only on tasks whose samples got different rewards, drawing
    /// others in place of the rest ([`MAX_DRAWS`] times `tasks_per_step` at most).
    pub dynamic_sampling: bool,
    /// Rollout sampling (temperature, top-p, tokens per reply).
    pub sampling: SamplingConfig,
    /// Optimisation and loss settings (learning rate, clipping, reward, seed).
    pub train: TrainConfig,
    /// Peak learning rate of the supervised warm start.
    pub sft_lr: f64,
    /// Samples per held-out task in each evaluation.
    pub eval_samples: u32,
    /// Where `smollm2` is cached.
    pub model_cache: PathBuf,
    /// The sandbox backend (`local`, `apptainer`, `oci`) and its cache.
    pub sandbox: String,
    /// The sandbox backend's cache directory (images, layers).
    pub sandbox_cache: PathBuf,
    /// The `[images]` settings base images are resolved with.
    pub images: crate::config::ImagesConfig,
    /// The backend's pool of pre-started sandboxes (`[sandbox] pool`).
    pub pool: crate::sandbox::pool::PoolSettings,
}

impl TrainOptions {
    /// The effective recipe of these options (saved in `train.json`).
    pub fn recipe(&self) -> super::recipe::Recipe {
        super::recipe::Recipe {
            samples: self.samples,
            prompts_per_step: self.tasks_per_step,
            max_turns: self.max_turns,
            temperature: self.train.ppo.temperature,
            top_p: self.sampling.top_p as f64,
            max_tokens: self.sampling.max_tokens,
            train: self.train.clone(),
            protocol: self.protocol.describe(),
        }
    }
}

/// What a run reports as it goes.
#[derive(Debug, Clone)]
pub enum TrainEvent {
    /// A phase started (`building the policy`, `sft`, `eval before`, `ppo`, ...).
    Phase(String),
    /// A supervised step finished.
    Sft {
        /// Supervised steps planned in all.
        total: u64,
        /// The step's loss and counts (its `step` says which).
        metrics: SftMetrics,
    },
    /// Episodes of the current PPO step: `done` of `total`.
    Rollouts {
        /// The PPO step, from 1.
        step: u64,
        /// Episodes finished so far.
        done: usize,
        /// Episodes of the step.
        total: usize,
    },
    /// A PPO step finished.
    Step {
        /// PPO steps planned in all.
        total: u64,
        /// The step's losses, rewards and timings (its `step` says which).
        metrics: StepMetrics,
    },
    /// A held-out evaluation finished.
    Eval(EvalRecord),
    /// A checkpoint was written.
    Checkpoint(PathBuf),
    /// Anything else worth a log line.
    Log(String),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// The run directory.
    pub out: PathBuf,
    /// How it ended (also written to the run's `train.json`).
    pub status: super::run_files::RunStatus,
    /// Why it stopped, when not simply finished (the error of a failed run).
    pub message: Option<String>,
    /// PPO steps completed, earlier sessions of a resumed run included.
    pub steps_done: u64,
    /// pass@1 on the held-out tasks before PPO (after SFT), and at the end.
    pub before: Option<EvalRecord>,
    /// pass@1 on the held-out tasks at the end (`None` without dev tasks).
    pub after: Option<EvalRecord>,
    /// The last checkpoint written, if any.
    pub last_checkpoint: Option<PathBuf>,
}

/// Run training with the sandbox backend named in `opts`.
pub fn run(
    opts: TrainOptions,
    on_event: &mut dyn FnMut(TrainEvent),
    cancel: &AtomicBool,
) -> anyhow::Result<TrainSummary> {
    let backend = crate::sandbox::configured_backend(
        &opts.sandbox,
        &opts.sandbox_cache,
        &opts.images,
        opts.pool,
    )
    .with_context(|| format!("starting the `{}` sandbox backend", opts.sandbox))?;
    let provider = Arc::new(BackendProvider::new(Arc::from(backend)));
    run_with(opts, provider, on_event, cancel)
}

/// Run training on episodes started by `provider`.
pub fn run_with<P: SandboxProvider>(
    opts: TrainOptions,
    provider: Arc<P>,
    on_event: &mut dyn FnMut(TrainEvent),
    cancel: &AtomicBool,
) -> anyhow::Result<TrainSummary> {
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating the run directory {}", opts.out.display()))?;
    let mut run = Run::start(&opts, provider, on_event)?;
    let result = run.train(cancel);
    let (status, message) = match &result {
        Ok((status, message)) => (*status, message.clone()),
        Err(e) => (RunStatus::Failed, Some(format!("{e:#}"))),
    };
    run.set_status(status, message.clone());
    result?;
    Ok(TrainSummary {
        out: opts.out.clone(),
        status,
        message,
        steps_done: run.trainer.step(),
        before: run.eval_record("before"),
        after: run.eval_record("after"),
        last_checkpoint: run.last_checkpoint.clone(),
    })
}

/// Sequences per supervised step.
const SFT_BATCH: usize = 8;

/// One training run in progress.
struct Run<'a, P: SandboxProvider> {
    opts: &'a TrainOptions,
    provider: Arc<P>,
    on_event: &'a mut dyn FnMut(TrainEvent),
    rt: tokio::runtime::Runtime,
    trainer: Trainer,
    info: RunInfo,
    /// Whether the trainer came from a checkpoint (SFT already done).
    resumed: bool,
    last_checkpoint: Option<PathBuf>,
    /// Per-task (passes, episodes), for the curriculum.
    stats: HashMap<String, (u32, u32)>,
    /// Task order of the current pass (without curriculum).
    order: Vec<usize>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl<'a, P: SandboxProvider> Run<'a, P> {
    fn start(
        opts: &'a TrainOptions,
        provider: Arc<P>,
        on_event: &'a mut dyn FnMut(TrainEvent),
    ) -> anyhow::Result<Self> {
        if opts.tasks.is_empty() {
            bail!("no training tasks selected");
        }
        let device = Device::Cpu;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let out = &opts.out;
        let (trainer, resumed) = match Trainer::resume(out, &device)? {
            Some(r) => {
                for s in &r.skipped {
                    on_event(TrainEvent::Log(format!(
                        "skipped checkpoint {}: {}",
                        s.dir.display(),
                        s.reason
                    )));
                }
                on_event(TrainEvent::Log(format!(
                    "resuming from {} (PPO step {})",
                    r.checkpoint.display(),
                    r.trainer.step()
                )));
                let mut trainer = r.trainer;
                let held = trainer.policy().adapter().map(|a| &a.lora);
                if held != opts.lora.as_ref() {
                    on_event(TrainEvent::Log(format!(
                        "the checkpoint trains {}: going on with it",
                        match held {
                            Some(l) => format!("LoRA adapters of rank {}", l.rank),
                            None => "every weight".into(),
                        }
                    )));
                }
                if trainer.config() != &opts.train {
                    on_event(TrainEvent::Log(
                        "the training settings differ from the checkpoint's: using the new ones"
                            .into(),
                    ));
                    trainer.set_config(opts.train.clone());
                }
                (trainer, true)
            }
            None => {
                on_event(TrainEvent::Phase(format!(
                    "building the policy ({})",
                    opts.init.describe()
                )));
                let policy = build_policy(
                    &opts.init,
                    &opts.sft_tasks,
                    &opts.model_cache,
                    &device,
                    opts.train.seed,
                    opts.lora.as_ref(),
                )
                .with_context(|| format!("building the policy `{}`", opts.init.describe()))?;
                if policy.tokenizer().is_none() {
                    bail!(
                        "the policy `{}` has no tokenizer, so it cannot act",
                        opts.init.describe()
                    );
                }
                (Trainer::new(policy, opts.train.clone()), false)
            }
        };
        truncate_metrics(&out.join(PPO_METRICS), trainer.step())?;
        let trainer = trainer.with_metrics(MetricsLog::new(&out.join(PPO_METRICS)));
        let previous = read_info(out).ok().flatten();
        let info = RunInfo {
            id: out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            created: previous.map(|p| p.created).unwrap_or_else(now),
            updated: now(),
            init: match trainer.policy().adapter() {
                Some(a) => format!("{} + LoRA rank {}", opts.init.describe(), a.lora.rank),
                None => opts.init.describe(),
            },
            params: trainer.policy().num_params(),
            tasks: opts.tasks.len(),
            eval_tasks: opts.dev_tasks.len(),
            steps: opts.steps,
            steps_done: trainer.step(),
            sft_steps: opts.sft_steps,
            samples: opts.samples,
            max_turns: opts.max_turns,
            status: RunStatus::Running,
            message: None,
            recipe: Some(opts.recipe()),
        };
        write_info(out, &info)?;
        Ok(Self {
            opts,
            provider,
            on_event,
            rt,
            trainer,
            info,
            resumed,
            last_checkpoint: None,
            stats: HashMap::new(),
            order: Vec::new(),
        })
    }

    fn emit(&mut self, ev: TrainEvent) {
        (self.on_event)(ev);
    }

    fn set_status(&mut self, status: RunStatus, message: Option<String>) {
        self.info.status = status;
        self.info.message = message;
        self.info.steps_done = self.trainer.step();
        self.info.updated = now();
        if let Err(e) = write_info(&self.opts.out, &self.info) {
            tracing::warn!("cannot update {}: {e}", RUN_INFO);
        }
    }

    fn settings(&self, samples: u32) -> EpisodeSettings {
        EpisodeSettings {
            samples,
            max_turns: self.opts.max_turns,
            concurrency: self.opts.concurrency,
            command_timeout: Duration::from_secs(60),
            protocol: self.opts.protocol.clone(),
        }
    }

    fn checkpoint(&mut self) -> anyhow::Result<()> {
        let dir = self.trainer.save_checkpoint(&self.opts.out)?;
        self.emit(TrainEvent::Checkpoint(dir.clone()));
        self.last_checkpoint = Some(dir);
        Ok(())
    }

    fn eval_record(&self, label: &str) -> Option<EvalRecord> {
        read_lines::<EvalRecord>(&self.opts.out, EVALS)
            .into_iter()
            .rev()
            .find(|e| e.label == label)
    }

    /// The whole run; returns the final status and message.
    fn train(&mut self, cancel: &AtomicBool) -> anyhow::Result<(RunStatus, Option<String>)> {
        if !self.resumed {
            if self.opts.sft_steps > 0 {
                self.supervised(cancel)?;
            }
            self.checkpoint()?;
        }
        if self.trainer.config().ppo.kl_coef > 0.0 && !self.trainer.has_reference() {
            self.set_reference()?;
        }
        if self.eval_record("before").is_none() {
            self.evaluate("before")?;
        }
        let started = Instant::now();
        let mut stop: Option<(RunStatus, String)> = None;
        let mut empty = 0;
        let mut uniform = 0;
        while self.trainer.step() < self.opts.steps {
            if cancel.load(Ordering::Relaxed) {
                stop = Some((RunStatus::Stopped, "cancelled".into()));
                break;
            }
            if self
                .opts
                .time_budget
                .is_some_and(|b| started.elapsed() >= b)
            {
                self.emit(TrainEvent::Log(format!(
                    "time budget used up after {} PPO steps",
                    self.trainer.step()
                )));
                break;
            }
            let step = self.trainer.step() + 1;
            self.emit(TrainEvent::Phase(format!("ppo step {step}: rollouts")));
            let collected = self.collect_step(step)?;
            let uniform_only = self.opts.dynamic_sampling
                && collected.tasks.is_empty()
                && collected.missing < collected.episodes.len();
            if uniform_only {
                uniform += 1;
                if uniform >= MAX_UNIFORM_STEPS {
                    bail!(
                        "{uniform} PPO steps in a row drew only tasks whose samples all got the \
                         same reward: nothing to learn from (try --reward partial, easier \
                         tasks, or a warm start)"
                    );
                }
                self.emit(TrainEvent::Log(format!(
                    "step {step}: every drawn task's samples got the same reward; no update"
                )));
                continue;
            }
            uniform = 0;
            if collected.batch.sequences.is_empty() {
                empty += 1;
                let why = collected
                    .episodes
                    .iter()
                    .find_map(|e| e.error.clone())
                    .unwrap_or_else(|| "no episode produced tokens".into());
                if empty >= 3 {
                    bail!("three PPO steps in a row collected nothing: {why}");
                }
                self.emit(TrainEvent::Log(format!("step {step}: no rollouts ({why})")));
                continue;
            }
            empty = 0;
            self.emit(TrainEvent::Phase(format!("ppo step {step}: update")));
            match self.trainer.ppo_step(&collected.batch) {
                Ok(m) => self.emit(TrainEvent::Step {
                    total: self.opts.steps,
                    metrics: m,
                }),
                Err(e @ RlError::NonFinite { .. }) => {
                    let last = self
                        .last_checkpoint
                        .clone()
                        .or_else(|| latest(&self.opts.out).ok()?.0.map(|(d, _)| d));
                    let msg = match last {
                        Some(d) => format!(
                            "{e}; training stopped, last good checkpoint {}",
                            d.display()
                        ),
                        None => format!("{e}; training stopped"),
                    };
                    self.emit(TrainEvent::Log(msg.clone()));
                    return Ok((RunStatus::Stopped, Some(msg)));
                }
                Err(e) => return Err(e.into()),
            }
            self.info.steps_done = self.trainer.step();
            self.info.updated = now();
            write_info(&self.opts.out, &self.info)?;
            if self.opts.checkpoint_every > 0
                && self
                    .trainer
                    .step()
                    .is_multiple_of(self.opts.checkpoint_every)
            {
                self.checkpoint()?;
            }
        }
        let at_last = self
            .last_checkpoint
            .as_ref()
            .is_some_and(|p| p.ends_with(step_dir_name(self.trainer.step())));
        if !at_last {
            self.checkpoint()?;
        }
        if let Some((status, msg)) = stop {
            return Ok((status, Some(msg)));
        }
        self.evaluate("after")?;
        Ok((RunStatus::Finished, None))
    }

    /// Tasks of the next PPO step: in shuffled passes over the training set,
    /// or, with the curriculum, drawn by `4 p (1 - p) + 0.1` of each task's
    /// smoothed pass rate `p` (tasks sometimes solved teach most).
    fn pick_tasks(&mut self, k: usize) -> Vec<Task> {
        let n = self.opts.tasks.len();
        let k = k.clamp(1, n);
        if self.opts.curriculum {
            let mut weights: Vec<f64> = self
                .opts
                .tasks
                .iter()
                .map(|t| {
                    let (pass, tries) = self.stats.get(t.id()).copied().unwrap_or_default();
                    curriculum_weight(pass, tries)
                })
                .collect();
            let mut chosen = Vec::new();
            for _ in 0..k {
                let total: f64 = weights.iter().sum();
                let mut u = self.trainer.rng().random::<f64>() * total;
                let i = weights
                    .iter()
                    .position(|w| {
                        u -= w;
                        u <= 0.0
                    })
                    .unwrap_or(n - 1);
                weights[i] = 0.0;
                chosen.push(self.opts.tasks[i].clone());
            }
            return chosen;
        }
        let mut chosen = Vec::new();
        while chosen.len() < k {
            if self.order.is_empty() {
                self.order = (0..n).collect();
                self.order.shuffle(self.trainer.rng());
            }
            if let Some(i) = self.order.pop() {
                chosen.push(self.opts.tasks[i].clone());
            }
        }
        chosen
    }

    /// The rollouts of PPO step `step`. With dynamic sampling, tasks whose
    /// samples all got the same reward are dropped and others drawn in their
    /// place, until `tasks_per_step` tasks are left or [`MAX_DRAWS`] times as
    /// many were tried.
    fn collect_step(&mut self, step: u64) -> anyhow::Result<Collected> {
        let tasks = self.pick_tasks(self.opts.tasks_per_step);
        let mut collected = self.rollouts(&tasks, step, 1)?;
        self.record_stats(&collected);
        if !self.opts.dynamic_sampling {
            return Ok(collected);
        }
        let wanted = self.opts.tasks_per_step.clamp(1, self.opts.tasks.len());
        let mut kept = collected.keep_varied_groups();
        let mut drawn = tasks.len();
        let mut draw = 1;
        while kept < wanted && drawn < MAX_DRAWS * wanted {
            draw += 1;
            let tasks = self.pick_tasks(wanted - kept);
            drawn += tasks.len();
            let mut more = self.rollouts(&tasks, step, draw)?;
            self.record_stats(&more);
            kept += more.keep_varied_groups();
            collected.extend(more);
        }
        self.emit(TrainEvent::Log(format!(
            "step {step}: {kept} of {drawn} drawn tasks had samples with different rewards"
        )));
        Ok(collected)
    }

    /// Count each episode's pass for the curriculum.
    fn record_stats(&mut self, collected: &Collected) {
        for ep in &collected.episodes {
            let e = self.stats.entry(ep.task.clone()).or_default();
            e.0 += u32::from(ep.passed);
            e.1 += 1;
        }
    }

    fn rollouts(&mut self, tasks: &[Task], step: u64, draw: usize) -> anyhow::Result<Collected> {
        let model = self
            .trainer
            .policy()
            .sampling_model(&format!("train-step-{step}"))?
            .context("the policy has no tokenizer")?;
        let seed = self.trainer.rng().random::<u64>();
        let name = match draw {
            1 => format!("step-{step:06}"),
            d => format!("step-{step:06}-draw-{d}"),
        };
        let dir = self.opts.out.join(ROLLOUTS).join(name);
        let settings = self.settings(self.opts.samples);
        let sampling = self.opts.sampling;
        let reward = self.opts.train.reward;
        let provider = self.provider.clone();
        let on_event = &mut *self.on_event;
        let mut progress = |done, total| {
            on_event(TrainEvent::Rollouts { step, done, total });
        };
        Ok(collect_rollouts(
            &self.rt,
            provider,
            model,
            tasks,
            &settings,
            sampling,
            seed,
            reward,
            &dir,
            None,
            &mut progress,
        )?)
    }

    /// pass@1 of the current policy on the held-out tasks, recorded as `label`.
    fn evaluate(&mut self, label: &str) -> anyhow::Result<()> {
        if self.opts.dev_tasks.is_empty() {
            return Ok(());
        }
        self.emit(TrainEvent::Phase(format!("eval {label}")));
        let t0 = Instant::now();
        let model = self
            .trainer
            .policy()
            .sampling_model(&format!("eval-{label}"))?
            .context("the policy has no tokenizer")?;
        let dir = self.opts.out.join("evals").join(label);
        let settings = self.settings(self.opts.eval_samples.max(1));
        let step = self.trainer.step();
        let (provider, sampling) = (self.provider.clone(), self.opts.sampling);
        let on_event = &mut *self.on_event;
        let mut progress = |done, total| {
            on_event(TrainEvent::Rollouts { step, done, total });
        };
        let collected = collect_rollouts(
            &self.rt,
            provider,
            model,
            &self.opts.dev_tasks,
            &settings,
            sampling,
            self.opts.train.seed ^ 0x5eed_e7a1,
            RewardMode::Binary,
            &dir,
            None,
            &mut progress,
        )?;
        let episodes = collected.episodes.len();
        let passed = collected.episodes.iter().filter(|e| e.passed).count();
        let record = EvalRecord {
            label: label.to_string(),
            step,
            pass_at_1: if episodes == 0 {
                0.0
            } else {
                passed as f64 / episodes as f64
            },
            passed,
            episodes,
            run_dir: dir,
            seconds: t0.elapsed().as_secs_f64(),
        };
        append_line(&self.opts.out, EVALS, &record)?;
        self.emit(TrainEvent::Eval(record));
        Ok(())
    }

    /// The KL penalty's reference: the policy PPO started from, which is
    /// the current one before the first step, and the run's step-0
    /// checkpoint after it (a resumed run).
    fn set_reference(&mut self) -> anyhow::Result<()> {
        let start = if self.trainer.step() == 0 {
            self.trainer.policy().frozen_model()?
        } else {
            let dir = self.opts.out.join(step_dir_name(0));
            let device = self.trainer.policy().device();
            let loaded = Trainer::load_checkpoint(&dir, device).with_context(|| {
                format!(
                    "--kl-coef measures against the policy PPO started from, {}, which cannot be loaded",
                    dir.display()
                )
            })?;
            loaded.policy().frozen_model()?
        };
        self.trainer.set_reference(start);
        Ok(())
    }

    /// Supervised warm start on the oracle trajectories of the training tasks.
    fn supervised(&mut self, cancel: &AtomicBool) -> anyhow::Result<()> {
        self.emit(TrainEvent::Phase("oracle trajectories".into()));
        let dir = self.opts.out.join("sft-oracle");
        let provider = self.provider.clone();
        let concurrency = self.opts.concurrency;
        let on_event = &mut *self.on_event;
        let mut progress = |done, total| {
            on_event(TrainEvent::Rollouts {
                step: 0,
                done,
                total,
            });
        };
        let conversations = oracle_conversations(
            &self.rt,
            provider,
            &self.opts.sft_tasks,
            concurrency,
            &self.opts.protocol,
            &dir,
            &mut progress,
        )?;
        let tok = self
            .trainer
            .policy()
            .tokenizer()
            .context("the policy has no tokenizer")?
            .clone();
        let window = self.trainer.policy().config().max_position_embeddings;
        let mut sequences = Vec::new();
        for c in &conversations {
            if let Some(s) = supervised_sequence(&tok, c)? {
                if s.tokens.len() <= window {
                    sequences.push(s);
                }
            }
        }
        if sequences.is_empty() {
            bail!(
                "no oracle trajectory to learn from: none of the {} warm-start tasks' oracle episodes passed (see {})",
                self.opts.sft_tasks.len(),
                dir.display()
            );
        }
        self.emit(TrainEvent::Log(format!(
            "supervised warm start on {} oracle trajectories",
            sequences.len()
        )));
        self.emit(TrainEvent::Phase("sft".into()));
        let total = self.opts.sft_steps;
        let mut batches: Vec<Vec<usize>> = Vec::new();
        for s in 0..total {
            if cancel.load(Ordering::Relaxed) {
                bail!("cancelled during the supervised warm start");
            }
            if batches.is_empty() {
                batches = length_buckets(&sequences, SFT_BATCH, self.trainer.rng());
            }
            let batch = RolloutBatch {
                sequences: batches
                    .pop()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|i| sequences[i].clone())
                    .collect(),
            };
            let lr = sft_lr(self.opts.sft_lr, s, total);
            let m = self.trainer.sft_step(&batch, lr)?;
            append_line(&self.opts.out, SFT_METRICS, &m)?;
            self.emit(TrainEvent::Sft { total, metrics: m });
        }
        self.trainer.reset_optimizer();
        // The separate critic starts from the warm-started policy, as the
        // reference's critic starts from the checkpoint PPO starts from.
        self.trainer.init_critic()?;
        Ok(())
    }
}

/// With dynamic sampling, how many times `tasks_per_step` tasks a step may
/// draw before it settles for fewer.
pub const MAX_DRAWS: usize = 4;

/// Steps in a row without a task of mixed rewards after which dynamic
/// sampling gives up.
const MAX_UNIFORM_STEPS: u32 = 50;

/// How often the curriculum draws a task that passed `pass` of `tries`
/// episodes: `4 p (1 - p) + 0.1` of the smoothed pass rate
/// `p = (pass + 1) / (tries + 2)`, highest for tasks solved about half the
/// time (they carry the most learning signal), never zero.
pub fn curriculum_weight(pass: u32, tries: u32) -> f64 {
    let p = (pass as f64 + 1.0) / (tries as f64 + 2.0);
    4.0 * p * (1.0 - p) + 0.1
}

/// One shuffled pass over `sequences` in batches of `size` whose members have
/// similar lengths (sorted within windows of 8 batches), so that little of
/// each padded batch is padding; the batch order is shuffled too.
fn length_buckets(
    sequences: &[super::batch::RolloutSequence],
    size: usize,
    rng: &mut impl Rng,
) -> Vec<Vec<usize>> {
    let size = size.max(1);
    let mut order: Vec<usize> = (0..sequences.len()).collect();
    order.shuffle(rng);
    let mut batches = Vec::new();
    for window in order.chunks(size * 8) {
        let mut w = window.to_vec();
        w.sort_by_key(|&i| sequences[i].tokens.len());
        batches.extend(w.chunks(size).map(<[usize]>::to_vec));
    }
    batches.shuffle(rng);
    batches
}

/// Supervised learning rate: linear warmup over the first 5% of steps, then
/// cosine decay to a tenth.
pub fn sft_lr(peak: f64, step: u64, total: u64) -> f64 {
    let warm = (total / 20).max(1);
    if step < warm {
        return peak * (step + 1) as f64 / warm as f64;
    }
    let t = (step - warm) as f64 / (total - warm).max(1) as f64;
    peak * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * t).cos()))
}

/// Drop metric lines beyond `step` (left by a run killed before its next
/// checkpoint), so the resumed run does not repeat them.
fn truncate_metrics(path: &std::path::Path, step: u64) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<StepMetrics>(l)
                .map(|m| m.step <= step)
                .unwrap_or(false)
        })
        .collect();
    if kept.len() != text.lines().count() {
        let mut out = kept.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        crate::fsutil::write_atomic(path, out.as_bytes())
            .with_context(|| format!("rewriting {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn curriculum_prefers_tasks_solved_about_half_the_time() {
        let unseen = curriculum_weight(0, 0);
        let half = curriculum_weight(8, 16);
        let never = curriculum_weight(0, 32);
        let always = curriculum_weight(32, 32);
        assert!(half > never && half > always, "{half} {never} {always}");
        assert!(
            (unseen - half).abs() < 1e-9,
            "unseen tasks start at p = 1/2"
        );
        assert!(never > 0.0 && always > 0.0);
    }

    #[test]
    fn length_buckets_cover_every_sequence_once_with_similar_lengths() {
        let seqs: Vec<_> = (0..40)
            .map(|i| {
                let mut b = super::super::batch::SequenceBuilder::new();
                b.context(&vec![1; 10 + (i * 37) % 200]);
                b.finish(0.0, false)
            })
            .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let batches = length_buckets(&seqs, 8, &mut rng);
        let mut all: Vec<usize> = batches.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..40).collect::<Vec<_>>());
        // Within a batch, lengths are neighbours in their window's order.
        for b in &batches {
            let lens: Vec<usize> = b.iter().map(|&i| seqs[i].tokens.len()).collect();
            assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{lens:?}");
        }
    }

    #[test]
    fn sft_learning_rate_warms_up_then_decays_to_a_tenth() {
        assert!(sft_lr(1.0, 0, 100) < sft_lr(1.0, 4, 100));
        assert!((sft_lr(1.0, 5, 100) - 1.0).abs() < 1e-9);
        assert!((sft_lr(1.0, 99, 100) - 0.1).abs() < 1e-3);
    }
}
