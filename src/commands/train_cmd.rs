//! `endless train`: PPO on the workspace's tasks (see [`crate::rl::session`]),
//! with progress bars, a summary, and the reward curve at the end.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Result};

use super::rollout_cmd::select_tasks;
use super::{print_json, Context};
use crate::cli::TrainArgs;
use crate::model::SamplingConfig;
use crate::procgen::{task_split, Split};
use crate::rl::run_files::{load_run, RunStatus};
use crate::rl::session::{self, InitSpec, TrainEvent, TrainOptions};
use crate::rl::{PpoConfig, RewardMode, TrainConfig};
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
    let reward = match args.reward.as_str() {
        "binary" => RewardMode::Binary,
        "partial" => RewardMode::Partial,
        "clean" => RewardMode::Clean,
        other => bail!("--reward {other:?}: expected binary, partial or clean"),
    };
    if args.samples == 0 || args.max_turns == 0 || args.max_tokens == 0 {
        bail!("--samples, --max-turns and --max-tokens must be at least 1");
    }
    if args.temperature.is_nan() || args.temperature <= 0.0 {
        bail!(
            "--temperature must be above 0 for PPO (its log-probs are of the sampled distribution)"
        );
    }
    let out = match &args.out {
        Some(p) => p.clone(),
        None => ws.checkpoints_dir().join(format!(
            "train-{}",
            chrono::Utc::now().format("%Y%m%d-%H%M%S")
        )),
    };
    let lr = args.lr.unwrap_or(match init {
        InitSpec::Tiny => 5e-5,
        _ => 1e-6,
    });
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
        samples: args.samples,
        tasks_per_step: args.tasks_per_step.max(1),
        max_turns: args.max_turns,
        concurrency: args.concurrency.max(1),
        checkpoint_every: args.checkpoint_every,
        curriculum: args.curriculum,
        dynamic_sampling: args.dynamic_sampling,
        sampling: SamplingConfig {
            temperature: args.temperature,
            top_p: 1.0,
            max_tokens: args.max_tokens,
        },
        train: TrainConfig {
            lr,
            reward,
            seed: args.seed,
            ppo: PpoConfig {
                temperature: args.temperature as f64,
                ..PpoConfig::default()
            },
            ppo_epochs: args.ppo_epochs.max(1),
            minibatch: args.minibatch,
            ..TrainConfig::default()
        },
        eval_samples: args.eval_samples.max(1),
        model_cache: ctx.paths.cache_dir.join("models"),
        sandbox: ctx.config.sandbox.backend.clone(),
        sandbox_cache: ctx.paths.cache_dir.join("sandbox"),
    })
}

/// `endless train ...`
pub fn run(ctx: &Context, args: TrainArgs) -> Result<ExitCode> {
    let opts = options(ctx, &args)?;
    let out = opts.out.clone();
    if !args.json {
        say_err!(
            "training on {} tasks ({} held out) into {}",
            opts.tasks.len(),
            opts.dev_tasks.len(),
            out.display()
        );
    }
    let bar = (!args.json).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {prefix:>12} {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let mut on_event = |ev: TrainEvent| {
        let Some(bar) = &bar else { return };
        // A bar drawn nowhere (stderr is not a terminal) drops its printed
        // lines: write them out plainly then.
        let println = |line: String| {
            if bar.is_hidden() {
                say_err!("{line}");
            } else {
                bar.println(line);
            }
        };
        match ev {
            TrainEvent::Phase(p) => {
                bar.set_prefix(p.split(':').next().unwrap_or("").to_string());
                bar.set_message(p);
            }
            TrainEvent::Sft { total, metrics } => {
                bar.set_length(total);
                bar.set_position(metrics.step.min(total));
                bar.set_message(format!("loss {:.3}", metrics.loss));
            }
            TrainEvent::Rollouts { done, total, .. } => {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
            TrainEvent::Step { total, metrics: m } => println(format!(
                "step {:>4}/{total}  reward {:.3}  pass {:.2}  pg {:+.4}  v {:.4}  clip {:.3}  ent {:.3}  kl {:+.4}  |g| {:.3}  {:.0} tok/s",
                m.step, m.reward, m.pass_rate, m.policy_loss, m.value_loss, m.clip_frac,
                m.entropy, m.approx_kl, m.grad_norm, m.tokens_per_s
            )),
            TrainEvent::Eval(e) => println(format!(
                "dev pass@1 {}: {:.3} ({}/{})",
                e.label, e.pass_at_1, e.passed, e.episodes
            )),
            TrainEvent::Checkpoint(p) => println(format!("checkpoint {}", p.display())),
            TrainEvent::Log(l) => println(l),
        }
    };
    let cancel = AtomicBool::new(false);
    let summary = session::run(opts, &mut on_event, &cancel);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let summary = summary?;
    let view = load_run(&out);
    if args.json {
        print_json(&serde_json::json!({
            "out": summary.out,
            "status": summary.status,
            "message": summary.message,
            "steps_done": summary.steps_done,
            "before": summary.before,
            "after": summary.after,
            "last_checkpoint": summary.last_checkpoint,
            "metrics": view.ppo,
        }))?;
    } else {
        say!("run {}: {}", out.display(), summary.status.as_str());
        if let Some(m) = &summary.message {
            say!("  {m}");
        }
        if let (Some(b), Some(a)) = (&summary.before, &summary.after) {
            say!(
                "dev pass@1: before {:.3} ({}/{}), after {:.3} ({}/{}), {:+.1} points",
                b.pass_at_1,
                b.passed,
                b.episodes,
                a.pass_at_1,
                a.passed,
                a.episodes,
                (a.pass_at_1 - b.pass_at_1) * 100.0
            );
        }
        if !view.ppo.is_empty() {
            say!("{}", curve(&view.ppo));
        }
        if let Some(c) = &summary.last_checkpoint {
            say!(
                "last checkpoint: {} (use as --policy local:{})",
                c.display(),
                c.display()
            );
        }
    }
    Ok(match summary.status {
        RunStatus::Finished => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

/// The training-batch pass rate per PPO step as a text sparkline, averaged
/// over windows of steps.
fn curve(metrics: &[crate::rl::StepMetrics]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let window = metrics.len().div_ceil(60).max(1);
    let means: Vec<f64> = metrics
        .chunks(window)
        .map(|c| c.iter().map(|m| m.pass_rate).sum::<f64>() / c.len() as f64)
        .collect();
    let line: String = means
        .iter()
        .map(|v| BARS[((v.clamp(0.0, 1.0) * 7.0).round()) as usize])
        .collect();
    format!(
        "train pass rate per step (mean of {window}): {line}  first {:.2} -> last {:.2}",
        means.first().copied().unwrap_or(0.0),
        means.last().copied().unwrap_or(0.0)
    )
}
