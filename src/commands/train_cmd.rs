//! `endless train`: PPO on the workspace's tasks (see [`crate::rl::session`]),
//! with progress bars, a summary, and the reward curve at the end. The
//! flags become a [`TrainRequest`]; [`crate::workbench::train()`] runs it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::json::print_json;
use crate::cli::TrainArgs;
use crate::jobs::JobContext;
use crate::rl::init::InitSpec;
use crate::rl::run_files::{load_run, RunStatus};
use crate::rl::session::TrainEvent;
use crate::rl::RecipeFlags;
use crate::workbench::{
    train, train_options as options, train_recipe as recipe, Context, TrainRequest,
};

/// The training request the flags ask for (`--json` and `--print-config`
/// are the command's own).
pub fn request(args: &TrainArgs) -> TrainRequest {
    TrainRequest {
        tasks: args.tasks.clone(),
        dev: args.dev.clone(),
        init: args.init.clone(),
        policy: args.policy.clone(),
        sft: args.sft,
        sft_tasks: args.sft_tasks.clone(),
        sft_steps: args.sft_steps,
        sft_lr: args.sft_lr,
        steps: args.steps,
        minutes: args.minutes,
        recipe: RecipeFlags {
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
            kl_coef: args.kl_coef,
            reward: args.reward.clone(),
            seed: args.seed,
        },
        eval_samples: args.eval_samples,
        curriculum: args.curriculum,
        dynamic_sampling: args.dynamic_sampling,
        concurrency: args.concurrency,
        checkpoint_every: args.checkpoint_every,
        out: args.out.clone(),
        protocol: args.protocol.clone(),
        lora: args.lora,
        lora_alpha: args.lora_alpha,
        lora_targets: args.lora_targets.clone(),
    }
}

/// `endless train ...`
pub fn run(ctx: &Context, args: TrainArgs) -> Result<ExitCode> {
    let mut request = request(&args);
    if let Some(labels) = args.exclude_audit.as_deref() {
        request.tasks = super::audit_cmd::exclude(ctx, args.tasks.as_deref(), labels, true)?;
    }
    if args.print_config {
        let spec = args
            .init
            .as_deref()
            .or(args.policy.as_deref())
            .unwrap_or("tiny");
        let init = InitSpec::parse(spec).map_err(|e| anyhow::anyhow!("--init {spec:?}: {e}"))?;
        let r = recipe(ctx, &request, &init)?;
        if args.json {
            print_json(&serde_json::json!({ "recipe": r, "table": r.rows() }))?;
        } else {
            say!("{}", r.text().trim_end());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let opts = options(ctx, &request)?;
    let out = opts.out.clone();
    if !args.json {
        say_err!(
            "training on {} ({} held out) into {}",
            crate::plural::count(opts.tasks.len(), "task"),
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
    let mut lines = super::train_lines::TrainLines::new();
    let mut on_event = |ev: TrainEvent| {
        let Some(bar) = &bar else { return };
        match &ev {
            TrainEvent::Phase(p) => {
                bar.set_prefix(p.split(':').next().unwrap_or("").to_string());
                bar.set_message(p.clone());
            }
            TrainEvent::Sft { total, metrics } => {
                bar.set_length(*total);
                bar.set_position(metrics.step.min(*total));
                bar.set_message(format!("loss {:.3}", metrics.loss));
            }
            TrainEvent::Rollouts { done, total, .. } => {
                bar.set_length(*total as u64);
                bar.set_position(*done as u64);
            }
            _ => {}
        }
        // A bar drawn nowhere (stderr is not a terminal) drops its printed
        // lines: write them out plainly then.
        if let Some(line) = lines.line(&ev, std::time::Instant::now(), !bar.is_hidden()) {
            if bar.is_hidden() {
                say_err!("{line}");
            } else {
                bar.println(line);
            }
        }
    };
    let (job, _events) = JobContext::standalone("train");
    let summary = train(opts, &job, &mut on_event);
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_request_defaults_are_the_cli_defaults() {
        let cli = crate::cli::Cli::try_parse_from(["endless", "train"]).unwrap();
        let Some(crate::cli::Command::Train(args)) = cli.command else {
            panic!("`endless train` did not parse as train");
        };
        assert_eq!(request(&args), TrainRequest::default());
    }
}
