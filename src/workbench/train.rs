//! Training: a [`TrainRequest`] (the values of `endless train`'s flags, or
//! of the TUI's training form) resolved against the workspace and the
//! `[train]` configuration into the [`TrainOptions`] that
//! [`crate::rl::session::run`] trains with, and [`train`], the run itself
//! as a job: its cancel flag stops the run at its next safe point.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Result};

use super::{select_tasks, Context};
use crate::jobs::JobContext;
use crate::model::models::lora::{LoraConfig, LoraTarget};
use crate::model::SamplingConfig;
use crate::procgen::{task_split, Split};
use crate::rl::init::InitSpec;
use crate::rl::recipe::LORA_LR_FACTOR;
use crate::rl::session::{TrainEvent, TrainOptions, TrainSummary};
use crate::rl::{Recipe, RecipeFlags};
use crate::task::Task;

/// What a training run is asked for; field by field the flags of
/// `endless train` (see `TrainArgs` in the CLI for each one's meaning).
/// [`Default`] gives the CLI's defaults; recipe settings left `None` come
/// from the configuration's `[train]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRequest {
    /// Training tasks: ids or globs (`None`: every train-split task).
    pub tasks: Option<String>,
    /// Held-out tasks for pass@1 before and after (`None`: none).
    pub dev: Option<String>,
    /// Initial policy: `tiny`, a model directory, a `.gguf` file, `smollm2`.
    pub init: Option<String>,
    /// The initial policy spelled as a policy (`local:DIR`); `init` wins.
    pub policy: Option<String>,
    /// Warm-start with supervised steps on oracle trajectories.
    pub sft: bool,
    /// Tasks the warm start learns from (`None`: the training tasks).
    pub sft_tasks: Option<String>,
    /// Supervised warm-start steps (with `sft`).
    pub sft_steps: u64,
    /// Peak learning rate of the warm start (`None`: by initial policy).
    pub sft_lr: Option<f64>,
    /// PPO steps.
    pub steps: u64,
    /// Stop PPO after this many minutes.
    pub minutes: Option<f64>,
    /// The recipe's overrides (samples, prompts per step, turns, sampling,
    /// optimiser, critic, reward, seed).
    pub recipe: RecipeFlags,
    /// Samples per held-out task when measuring pass@1.
    pub eval_samples: u32,
    /// Sample tasks by their current pass rate.
    pub curriculum: bool,
    /// Train only on tasks whose samples got different rewards.
    pub dynamic_sampling: bool,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// Write a checkpoint every N PPO steps (and at the end).
    pub checkpoint_every: u64,
    /// Run directory (`None`: a new one under `<workspace>/checkpoints`).
    pub out: Option<PathBuf>,
    /// Agent protocol profile (`None`: `[agent] protocol`).
    pub protocol: Option<String>,
    /// LoRA rank (`None`: train every weight).
    pub lora: Option<usize>,
    /// LoRA alpha (`None`: 2 x rank).
    pub lora_alpha: Option<f64>,
    /// LoRA targets, `q,k,v,o,gate,up,down` or `all` (`None`: all).
    pub lora_targets: Option<String>,
}

impl Default for TrainRequest {
    /// The defaults of `endless train` (a test in `commands::train_cmd`
    /// checks them against the CLI's).
    fn default() -> Self {
        TrainRequest {
            tasks: None,
            dev: None,
            init: None,
            policy: None,
            sft: false,
            sft_tasks: None,
            sft_steps: 300,
            sft_lr: None,
            steps: 10,
            minutes: None,
            recipe: RecipeFlags {
                reward: "binary".into(),
                ..RecipeFlags::default()
            },
            eval_samples: 1,
            curriculum: false,
            dynamic_sampling: false,
            concurrency: 16,
            checkpoint_every: 5,
            out: None,
            protocol: None,
            lora: None,
            lora_alpha: None,
            lora_targets: None,
        }
    }
}

/// Turn a request into training options: tasks and held-out tasks from the
/// workspace, the initial policy, the recipe, and the run directory
/// (`<workspace>/checkpoints/<train-id>` unless `out`). Errors name the
/// CLI flags (`--init`, `--dev`...), which the TUI's form fields mirror.
pub fn options(ctx: &Context, args: &TrainRequest) -> Result<TrainOptions> {
    let ws = ctx.workspace()?;
    let tasks: Vec<Task> = match args.tasks.as_deref() {
        Some(sel) => select_tasks(&ws, Some(sel))?,
        None => select_tasks(&ws, None)?
            .into_iter()
            .filter(|t| task_split(t) != Some(Split::Dev))
            .collect(),
    };
    if tasks.is_empty() {
        bail!(
            "no training tasks in {} (try `endless generate --offline --count 100 --split train`)",
            ws.root().display()
        );
    }
    let dev_tasks = match args.dev.as_deref() {
        Some(sel) => select_tasks(&ws, Some(sel))?,
        None => Vec::new(),
    };
    let sft_tasks = match args.sft_tasks.as_deref() {
        Some(sel) => select_tasks(&ws, Some(sel))?,
        None => tasks.clone(),
    };
    let overlap: Vec<&str> = dev_tasks
        .iter()
        .filter(|d| tasks.iter().chain(&sft_tasks).any(|t| t.id() == d.id()))
        .map(Task::id)
        .collect();
    if !overlap.is_empty() {
        bail!(
            "--dev overlaps the training tasks or --sft-tasks ({}): held-out tasks must not be trained on",
            overlap.join(", ")
        );
    }
    let spec = args
        .init
        .as_deref()
        .or(args.policy.as_deref())
        .unwrap_or("tiny");
    let init = InitSpec::parse(spec).map_err(|e| anyhow::anyhow!("--init {spec:?}: {e}"))?;
    if let InitSpec::Dir(p) | InitSpec::Gguf(p) = &init {
        if !p.exists() {
            bail!(
                "--init {}: no such model directory or GGUF file",
                p.display()
            );
        }
    }
    let lora = lora_config(args)?;
    if lora.is_some() && init == InitSpec::Tiny {
        bail!("--lora needs a pretrained --init (smollm2, a .gguf file or a model directory): tiny is trained from scratch");
    }
    let protocol = ctx.protocol(args.protocol.as_deref())?;
    let recipe = recipe(ctx, args, &init)?;
    let out = match &args.out {
        Some(p) => p.clone(),
        None => ws.checkpoints_dir().join(format!(
            "train-{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S")
        )),
    };
    Ok(TrainOptions {
        out,
        tasks,
        sft_tasks,
        dev_tasks,
        sft_steps: if args.sft { args.sft_steps } else { 0 },
        sft_lr: args.sft_lr.unwrap_or(match (&init, &lora) {
            (InitSpec::Tiny, _) => 2e-3,
            (_, Some(_)) => 2e-5 * LORA_LR_FACTOR,
            (_, None) => 2e-5,
        }),
        lora,
        init,
        steps: args.steps,
        time_budget: args
            .minutes
            .map(|m| Duration::from_secs_f64(m.max(0.0) * 60.0)),
        samples: recipe.samples,
        tasks_per_step: recipe.prompts_per_step,
        max_turns: recipe.max_turns,
        protocol,
        concurrency: args.concurrency.max(1),
        checkpoint_every: args.checkpoint_every,
        curriculum: args.curriculum,
        dynamic_sampling: args.dynamic_sampling,
        sampling: SamplingConfig {
            temperature: recipe.temperature as f32,
            top_p: recipe.top_p as f32,
            max_tokens: recipe.max_tokens,
        },
        train: recipe.train,
        eval_samples: args.eval_samples.max(1),
        model_cache: ctx.paths.cache_dir.join("models"),
        sandbox: ctx.config.sandbox.backend.clone(),
        sandbox_cache: ctx.paths.cache_dir.join("sandbox"),
        images: ctx.config.images.clone(),
        pool: crate::sandbox::pool::PoolSettings::of(&ctx.config.sandbox),
    })
}

/// The effective recipe of the request's flags over the configuration's
/// `[train]` section (see [`crate::rl::recipe`]), with the agent protocol
/// the episodes follow (`--protocol`, else `[agent] protocol`).
pub fn recipe(ctx: &Context, args: &TrainRequest, init: &InitSpec) -> Result<Recipe> {
    let tiny = *init == InitSpec::Tiny;
    let mut recipe = Recipe::resolve(
        &ctx.config.train,
        ctx.config.agent.train_max_turns,
        &args.recipe,
        tiny,
    )
    .map_err(anyhow::Error::msg)?;
    if args.lora.is_some() && args.recipe.lr.unwrap_or(ctx.config.train.lr) == 0.0 {
        recipe.train.lr *= LORA_LR_FACTOR;
    }
    recipe.protocol = ctx.protocol(args.protocol.as_deref())?.describe();
    Ok(recipe)
}

/// The LoRA settings of `--lora`, `--lora-alpha` and `--lora-targets`
/// (`None` without `--lora`); errors name the flag.
fn lora_config(args: &TrainRequest) -> Result<Option<LoraConfig>> {
    let Some(rank) = args.lora else {
        if args.lora_alpha.is_some() || args.lora_targets.is_some() {
            bail!("--lora-alpha and --lora-targets need --lora RANK");
        }
        return Ok(None);
    };
    let mut cfg = LoraConfig::with_rank(rank);
    if let Some(a) = args.lora_alpha {
        cfg.alpha = a;
    }
    if let Some(t) = &args.lora_targets {
        cfg.targets =
            LoraTarget::parse_list(t).map_err(|e| anyhow::anyhow!("--lora-targets: {e}"))?;
    }
    if let Some((field, message)) = cfg.problem() {
        let flag = match field {
            "alpha" => "--lora-alpha",
            "targets" => "--lora-targets",
            _ => "--lora",
        };
        bail!("{flag}: {message}");
    }
    Ok(Some(cfg))
}

/// Run `opts` (from [`options`]) as job `job`: every [`TrainEvent`] goes
/// to `on_event` (the front end turns it into progress bars or job
/// progress), and cancelling the job stops the run at its next safe point
/// (the summary then says so).
pub fn train(
    opts: TrainOptions,
    job: &JobContext,
    mut on_event: impl FnMut(TrainEvent),
) -> Result<TrainSummary> {
    let cancel = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The job's cancel flag, mirrored into the run's (which it polls).
        scope.spawn(|| {
            while !finished.load(Ordering::Relaxed) {
                if job.is_cancelled() && !cancel.load(Ordering::Relaxed) {
                    job.log("cancelling: the run stops at its next safe point");
                    cancel.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let result = crate::rl::session::run(opts, &mut on_event, &cancel);
        finished.store(true, Ordering::Relaxed);
        result
    })
}
