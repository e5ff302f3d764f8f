//! `endless run` and `endless eval`: episodes of a policy on tasks in the
//! sandbox, written under `runs/<run-id>/`, indexed in the workspace, and
//! summarised (pass rate, pass@k, failure modes). Re-running the same command
//! resumes the same run and skips finished episodes. The work is
//! [`crate::workbench::eval()`] and [`crate::workbench::run_episode`]; this
//! file reads the flags, draws the episode bar and prints the result.

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use super::progress::{cancel_on_ctrl_c, BarStyle, JobBar};
use crate::agent::{BackendProvider, EpisodeResult, RolloutEvent};
use crate::cli::{EvalArgs, RunArgs};
use crate::eval::format_table;
use crate::jobs::JobContext;
use crate::workbench::{self, Context, EvalRequest, RolloutHooks, RunRequest};

/// `endless run TASK --policy P`
pub fn run(ctx: &Context, args: RunArgs) -> Result<ExitCode> {
    // The human policy's terminal is the operator's: no bar over it (the
    // spec `human`, as `PolicyFactory::from_spec` reads it).
    let human = !args.policy.contains(':') && args.policy.trim() == "human";
    let quiet = args.json || human;
    let req = RunRequest {
        policy: args.policy,
        task: args.task,
        max_turns: args.max_turns,
        protocol: args.protocol.clone(),
        fork: match (args.fork, args.at_step) {
            (Some(parent), at) => Some(workbench::fork::ForkRequest {
                parent,
                at_step: at.unwrap_or(0),
            }),
            (None, Some(_)) => anyhow::bail!("--at-step needs --fork EPISODE"),
            (None, None) => None,
        },
        offline: args.offline,
    };
    let episode = foreground(quiet, |job, hooks| {
        workbench::run_episode(ctx, &req, job, hooks)
    })?;
    if args.json {
        print_json(&episode)?;
    } else {
        print_episode(&episode);
    }
    Ok(if episode.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `endless eval --policy P`
pub fn eval(ctx: &Context, args: EvalArgs) -> Result<ExitCode> {
    let tasks = match args.exclude_audit.as_deref() {
        Some(labels) => super::audit_cmd::exclude(ctx, args.tasks.as_deref(), labels, false)?,
        None => args.tasks.clone(),
    };
    let req = EvalRequest {
        policy: args.policy.clone(),
        tasks,
        samples: args.samples,
        max_turns: args.max_turns,
        concurrency: args.concurrency.unwrap_or(2),
        protocol: args.protocol.clone(),
        offline: args.offline,
    };
    let outcome = foreground(args.json, |job, hooks| {
        workbench::eval::eval_shard(ctx, &req, args.shard, job, hooks)
    })?;
    if args.json {
        let mut value = serde_json::to_value(&outcome.report)?;
        value["run"] = outcome.run_id.clone().into();
        print_json(&value)?;
    } else {
        say!("{}", format_table(&outcome.report));
        say!(
            "run {}: {}\nreport: {}",
            outcome.run_id,
            outcome.run_dir.display(),
            outcome.report_path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The episode bar's message: how many passed.
struct PassCount {
    bar: Option<indicatif::ProgressBar>,
    passed: usize,
}

impl RolloutHooks for PassCount {
    type Provider = BackendProvider;

    fn provider(
        &mut self,
        inner: BackendProvider,
        _stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::sync::Arc<BackendProvider> {
        std::sync::Arc::new(inner)
    }

    fn on_event(&mut self, _run_id: &str, event: RolloutEvent) {
        if let RolloutEvent::Finished { result } = event {
            self.passed += usize::from(result.passed);
            if let Some(bar) = &self.bar {
                bar.set_message(format!("{} passed", self.passed));
            }
        }
    }
}

/// Run a rollout use case in the foreground: an episode bar unless
/// `quiet`, Ctrl-C stops starting episodes (running ones finish).
fn foreground<T>(
    quiet: bool,
    body: impl FnOnce(&JobContext, &mut PassCount) -> Result<T>,
) -> Result<T> {
    let (job, rx) = JobContext::standalone("eval");
    cancel_on_ctrl_c(&job, "stopping after the running episodes");
    let bar = (!quiet).then(|| {
        JobBar::start(
            rx,
            BarStyle {
                template: "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes {msg}",
                stage_as_message: false,
                print_logs: false,
            },
        )
    });
    let mut hooks = PassCount {
        bar: bar.as_ref().map(|b| b.bar().clone()),
        passed: 0,
    };
    let out = body(&job, &mut hooks);
    if let Some(bar) = bar {
        bar.finish();
    }
    out
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
