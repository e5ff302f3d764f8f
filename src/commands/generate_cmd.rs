//! `endless generate`: offline procedural tasks, or the four-stage LLM
//! pipeline against any OpenAI-compatible server.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::print_json;
use crate::agent::PolicyFactory;
use crate::cli::GenerateArgs;
use crate::generate::config::PipelineConfig;
use crate::generate::funnel::CandidateOutcome;
use crate::generate::pipeline::{run_pipeline, PipelineEvent};
use crate::llm::{api_key_from_env, OpenAiChat, OpenAiConfig, SamplingParams};
use crate::task::EnvKind;
use crate::workbench::Context;

pub fn run(ctx: &Context, args: GenerateArgs) -> Result<ExitCode> {
    if args.offline {
        return super::offline::run(ctx, &args);
    }
    llm(ctx, args)
}

fn llm(ctx: &Context, args: GenerateArgs) -> Result<ExitCode> {
    let cfg = &ctx.config;
    let url = args.llm.clone().unwrap_or_else(|| cfg.llm.url.clone());
    let model = args.model.clone().unwrap_or_else(|| cfg.llm.model.clone());
    if model.is_empty() {
        bail!("name the generator model with --model (or [llm] model in the config), or use --offline");
    }
    let mut chat = OpenAiConfig::new(&model, &url);
    chat.api_key = api_key_from_env();
    chat.max_concurrency = cfg.llm.concurrency.max(1);
    chat.request_timeout = Duration::from_secs_f64(cfg.llm.timeout_sec.max(1.0));
    chat.retry.max_retries = cfg.llm.retries;
    let generator = Arc::new(OpenAiChat::new(chat)?);
    let solver_url = args.solver_llm.clone().unwrap_or_else(|| url.clone());
    let solver_model = args.solver_model.clone().unwrap_or_else(|| model.clone());
    let solver_spec = format!("openai:{solver_model}@{solver_url}");
    let solver = PolicyFactory::from_spec(&solver_spec, &ctx.policy_options())?;
    let seed = args.seed.unwrap_or(1);
    let ws = ctx.workspace()?;
    let run_id = format!("gen-{seed}");
    let run_dir = ws.runs_dir().join(&run_id);
    ws.upsert_run(
        &run_id,
        "generate",
        &solver_spec,
        &serde_json::json!({ "count": args.count, "model": model, "url": url }),
    )?;
    let definition = match cfg.sandbox.backend.as_str() {
        "apptainer" => EnvKind::ApptainerDef,
        "oci" => EnvKind::Dockerfile,
        _ => EnvKind::SetupSh,
    };
    let config = PipelineConfig {
        count: args.count,
        seed,
        run_dir,
        definition,
        max_env_attempts: args
            .max_env_attempts
            .unwrap_or(cfg.generate.max_env_attempts),
        solutions: args.solutions.unwrap_or(cfg.generate.solutions),
        solve_max_turns: cfg.agent.train_max_turns.max(16),
        solve_concurrency: 4,
        command_timeout: Duration::from_secs_f64(cfg.agent.command_timeout_sec.max(1.0)),
        concurrency: args.concurrency.unwrap_or(cfg.generate.concurrency),
        sandbox_concurrency: std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2),
        task_sampling: SamplingParams {
            temperature: 1.0,
            top_p: cfg.llm.top_p as f32,
            max_tokens: Some(cfg.llm.max_tokens),
        },
        test_sampling: SamplingParams {
            temperature: 0.6,
            top_p: cfg.llm.top_p as f32,
            max_tokens: Some(cfg.llm.max_tokens),
        },
        generator_name: model.clone(),
        solver_name: solver_model,
    };
    let backend: Arc<dyn crate::sandbox::Backend> = ctx.backend()?.into();
    let rt = tokio::runtime::Runtime::new()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let quiet = args.json;
    let funnel = rt
        .block_on(async {
            let watcher = tokio::spawn(async move {
                let bars = indicatif::MultiProgress::new();
                let style =
                    indicatif::ProgressStyle::with_template("{prefix:>24} {bar:30} {pos}/{len}")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
                let mut total = None;
                let mut accepted = 0u64;
                while let Some(ev) = rx.recv().await {
                    if quiet {
                        continue;
                    }
                    match ev {
                        PipelineEvent::Planned {
                            total: n,
                            already_done,
                        } => {
                            let bar = bars.add(indicatif::ProgressBar::new(n as u64));
                            bar.set_style(style.clone());
                            bar.set_prefix("candidates finished");
                            bar.set_position(already_done as u64);
                            total = Some(bar);
                        }
                        PipelineEvent::Entered { candidate, stage } => {
                            tracing::info!("{candidate}: {stage:?}")
                        }
                        PipelineEvent::Finished { candidate, outcome } => {
                            if let Some(bar) = &total {
                                bar.inc(1);
                            }
                            match outcome {
                                CandidateOutcome::Accepted { task_id } => {
                                    accepted += 1;
                                    let _ = bars.println(format!(
                                        "accepted {candidate} as {task_id} ({accepted} so far)"
                                    ));
                                }
                                CandidateOutcome::Rejected { stage, reason } => {
                                    let _ = bars.println(format!(
                                        "rejected {candidate} at {stage:?}: {}",
                                        reason.lines().next().unwrap_or("")
                                    ));
                                }
                            }
                        }
                    }
                }
            });
            let out = run_pipeline(
                ws.root().to_path_buf(),
                config,
                generator,
                solver,
                backend,
                Some(tx),
            )
            .await;
            let _ = watcher.await;
            out
        })
        .context("generation failed")?;
    ws.finish_run(&run_id, &serde_json::to_value(&funnel)?)?;
    if args.json {
        print_json(&funnel)?;
    } else {
        say!("{funnel}");
    }
    Ok(ExitCode::SUCCESS)
}
