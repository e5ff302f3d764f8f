//! Training options from training arguments (shared by `endless train`
//! and the TUI's training job).

use std::time::Duration;

use anyhow::{bail, Result};

use super::{select_tasks, Context};
use crate::cli::TrainArgs;
use crate::llm::local::SamplingConfig;
use crate::procgen::{task_split, Split};
use crate::rl::session::{InitSpec, TrainOptions};
use crate::rl::{Recipe, RecipeFlags};
use crate::task::Task;

/// Turn the command line into training options: tasks and held-out tasks
/// from the workspace, the initial policy, and the run directory
/// (`<workspace>/checkpoints/<train-id>` unless `--out`).
pub fn options(ctx: &Context, args: &TrainArgs) -> Result<TrainOptions> {
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
        sft_lr: args.sft_lr.unwrap_or(match init {
            InitSpec::Tiny => 2e-3,
            _ => 2e-5,
        }),
        init,
        steps: args.steps,
        time_budget: args
            .minutes
            .map(|m| Duration::from_secs_f64(m.max(0.0) * 60.0)),
        samples: recipe.samples,
        tasks_per_step: recipe.prompts_per_step,
        max_turns: recipe.max_turns,
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
    })
}

/// The effective recipe of `args` over the configuration's `[train]` section
/// (see [`crate::rl::recipe`]).
pub fn recipe(ctx: &Context, args: &TrainArgs, init: &InitSpec) -> Result<Recipe> {
    let flags = RecipeFlags {
        samples: args.samples,
        prompts_per_step: args.tasks_per_step,
        max_turns: args.max_turns,
        temperature: args.temperature,
        max_tokens: args.max_tokens,
        ppo_epochs: args.ppo_epochs,
        minibatch: args.minibatch,
        critic: args.critic.clone(),
        lr: args.lr,
        critic_lr: args.critic_lr,
        value_clip: args.value_clip,
        weight_decay: args.weight_decay,
        normalize_reward: args.normalize_reward,
        reward: args.reward.clone(),
        seed: args.seed,
    };
    let tiny = *init == InitSpec::Tiny;
    Recipe::resolve(
        &ctx.config.train,
        ctx.config.agent.train_max_turns,
        &flags,
        tiny,
    )
    .map_err(anyhow::Error::msg)
}
