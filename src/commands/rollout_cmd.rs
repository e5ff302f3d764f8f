//! `endless run` and `endless eval`: episodes of a policy on tasks in the
//! sandbox, written under `runs/<run-id>/`, indexed in the workspace, and
//! summarised (pass rate, pass@k, failure modes). Re-running the same command
//! resumes the same run and skips finished episodes.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::print_json;
use crate::agent::protocol::Protocol;
use crate::agent::{
    run_rollouts, BackendProvider, EpisodeResult, PolicyFactory, RolloutConfig, RolloutEvent,
};
use crate::cli::{EvalArgs, RunArgs};
use crate::eval::{evaluate, format_table, write_markdown_report};
use crate::store::Workspace;
use crate::task::Task;
use crate::workbench::Context;
use crate::workbench::{index_episodes, record_pass_at_k, run_id, select_tasks};

/// `endless run TASK --policy P`
pub fn run(ctx: &Context, args: RunArgs) -> Result<ExitCode> {
    let ws = ctx.workspace()?;
    let task = ws.load_task(&args.task)?;
    let policy = PolicyFactory::from_spec(&args.policy, &ctx.policy_options())?;
    let run_id = run_id(
        "run",
        &[
            &args.policy,
            &args.task,
            &format!("{:?}", args.max_turns),
            &crate::store::now(),
        ],
    );
    let protocol = ctx.protocol(args.protocol.as_deref())?;
    let quiet = args.json || matches!(policy, PolicyFactory::Human);
    let summary = rollouts(
        ctx,
        &ws,
        &run_id,
        "run",
        &args.policy,
        vec![task],
        policy,
        1,
        args.max_turns,
        1,
        protocol,
        quiet,
    )?;
    let episode = summary.first().context("the episode did not run")?;
    if args.json {
        print_json(episode)?;
    } else {
        print_episode(episode);
    }
    Ok(if episode.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `endless eval --policy P`
pub fn eval(ctx: &Context, args: EvalArgs) -> Result<ExitCode> {
    let ws = ctx.workspace()?;
    let tasks = select_tasks(&ws, args.tasks.as_deref())?;
    if tasks.is_empty() {
        bail!(
            "no tasks selected in {} (try `endless generate --offline --count 20`)",
            ws.root().display()
        );
    }
    let policy = PolicyFactory::from_spec(&args.policy, &ctx.policy_options())?;
    let protocol = ctx.protocol(args.protocol.as_deref())?;
    let ids: Vec<&str> = tasks.iter().map(Task::id).collect();
    let (joined, samples) = (ids.join(","), args.samples.to_string());
    let turns = format!("{:?}", args.max_turns);
    let mut id_parts = vec![args.policy.as_str(), &joined, &samples, &turns];
    // Another protocol is another run (the default keeps earlier runs' ids).
    let protocol_name = protocol.describe();
    if protocol != Protocol::endless() {
        id_parts.push(&protocol_name);
    }
    let run_id = run_id("eval", &id_parts);
    let concurrency = args.concurrency.unwrap_or(2);
    let episodes = rollouts(
        ctx,
        &ws,
        &run_id,
        "eval",
        &args.policy,
        tasks,
        policy,
        args.samples,
        args.max_turns,
        concurrency,
        protocol,
        args.json,
    )?;
    let report = evaluate(&episodes);
    record_pass_at_k(&ws, &report)?;
    let run_dir = ws.runs_dir().join(&run_id);
    let md = write_markdown_report(&report, &format!("Evaluation of {}", args.policy), &run_dir)?;
    ws.finish_run(&run_id, &serde_json::to_value(&report)?)?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["run"] = run_id.clone().into();
        print_json(&value)?;
    } else {
        say!("{}", format_table(&report));
        say!(
            "run {run_id}: {}\nreport: {}",
            run_dir.display(),
            md.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Run the episodes with a progress bar, index them, return them.
#[allow(clippy::too_many_arguments)]
fn rollouts(
    ctx: &Context,
    ws: &Workspace,
    run_id: &str,
    kind: &str,
    policy_spec: &str,
    tasks: Vec<Task>,
    policy: PolicyFactory,
    samples: u32,
    max_turns: Option<u32>,
    concurrency: usize,
    protocol: Protocol,
    quiet: bool,
) -> Result<Vec<EpisodeResult>> {
    let backend: Arc<dyn crate::sandbox::Backend> = ctx.backend()?.into();
    let run_dir = ws.runs_dir().join(run_id);
    let mut config = RolloutConfig::new(&run_dir);
    config.samples = samples.max(1);
    config.concurrency = concurrency.max(1);
    config.max_turns = max_turns;
    let protocol_name = protocol.describe();
    config.protocol = protocol;
    config.command_timeout = Duration::from_secs_f64(ctx.config.agent.command_timeout_sec.max(1.0));
    let cancel = Arc::new(AtomicBool::new(false));
    config.cancel = Some(cancel.clone());
    ws.upsert_run(
        run_id,
        kind,
        policy_spec,
        &serde_json::json!({
            "samples": samples,
            "max_turns": max_turns,
            "tasks": tasks.len(),
            "protocol": protocol_name,
        }),
    )?;
    let mut provider = BackendProvider::new(backend);
    provider.session.max_recording_bytes = ctx.config.sandbox.max_recording_bytes;
    let provider = Arc::new(provider);
    let rt = tokio::runtime::Runtime::new()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let bar = (!quiet).then(|| {
        let bar = indicatif::ProgressBar::new((tasks.len() as u64) * u64::from(samples.max(1)));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let summary = rt.block_on(async {
        let c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                say_err!("\nendless: stopping after the running episodes (Ctrl-C again to abort)");
                c.store(true, Ordering::Relaxed);
                let _ = tokio::signal::ctrl_c().await;
                std::process::exit(130);
            }
        });
        let bar2 = bar.clone();
        let watcher = tokio::spawn(async move {
            let mut passed = 0;
            while let Some(ev) = rx.recv().await {
                if let (Some(bar), RolloutEvent::Planned { finished, .. }) = (&bar2, &ev) {
                    bar.set_position(*finished as u64);
                }
                if let RolloutEvent::Finished { result } = ev {
                    passed += usize::from(result.passed);
                    if let Some(bar) = &bar2 {
                        bar.inc(1);
                        bar.set_message(format!("{passed} passed"));
                    }
                }
            }
        });
        let out = run_rollouts(config, tasks, policy, provider, Some(tx)).await;
        let _ = watcher.await;
        out
    })?;
    if let Some(bar) = bar {
        bar.finish();
    }
    index_episodes(ws, run_id, &summary.episodes)?;
    Ok(summary.episodes)
}

fn print_episode(e: &EpisodeResult) {
    for s in &e.steps {
        match &s.command {
            Some(cmd) => {
                say!("$ {cmd}");
                let out = s.output.trim_end();
                if !out.is_empty() {
                    say!("{out}");
                }
                say!(
                    "(exit_code={})",
                    s.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "-".into())
                );
            }
            None => say!("[{:?}] {}", s.kind, s.error.as_deref().unwrap_or("")),
        }
    }
    for t in &e.tests {
        say!("{} {}", if t.passed { "PASS" } else { "FAIL" }, t.name);
    }
    let mode = e
        .failure_mode
        .map(|m| format!(", failure mode {}", m.as_str()))
        .unwrap_or_default();
    say!(
        "{}: {} after {} turns (end: {}{mode})",
        e.task,
        if e.passed { "passed" } else { "failed" },
        e.turns,
        e.end_reason.as_str()
    );
    if let Some(err) = &e.error {
        say!("error: {err}");
    }
}
