//! `endless serve`: the workspace's environments over HTTP (see [`crate::serve`]).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use crate::agent::BackendProvider;
use crate::cli::ServeArgs;
use crate::rl::RewardMode;
use crate::serve::{Auth, Journal, QueueLimits, SandboxLimits, Server, Settings};
use crate::workbench::Context;

/// `endless serve`
pub fn run(ctx: &Context, args: ServeArgs) -> Result<ExitCode> {
    let reward: RewardMode = serde_json::from_value(serde_json::json!(args.reward))
        .with_context(|| format!("--reward {:?}", args.reward))?;
    if !(args.idle_timeout.is_finite() && args.idle_timeout > 0.0) {
        bail!("--idle-timeout must be a positive number of seconds");
    }
    if !(args.read_timeout.is_finite() && args.read_timeout > 0.0) {
        bail!("--read-timeout must be a positive number of seconds");
    }
    if args.max_sessions == 0 || args.max_sessions_per_token == Some(0) {
        bail!("--max-sessions and --max-sessions-per-token must be at least 1");
    }
    if !(args.max_wait.is_finite() && args.max_wait >= 0.0) {
        bail!("--max-wait must be a number of seconds >= 0");
    }
    let sandbox = sandbox_limits(ctx, &args)?;
    let open_metrics = args.open_metrics || ctx.config.serve.open_metrics;
    if open_metrics && !args.bind.ip().is_loopback() {
        bail!(
            "--open-metrics ([serve] open_metrics) is only allowed on a loopback address, not {}: \
             a remote scraper sends a token",
            args.bind
        );
    }
    let auth = if args.no_auth {
        if !args.bind.ip().is_loopback() {
            bail!(
                "--no-auth is only allowed on a loopback address, not {}",
                args.bind
            );
        }
        Auth::disabled()
    } else {
        let path = args
            .token_file
            .clone()
            .unwrap_or_else(|| state_dir(ctx).join("serve.token"));
        let (auth, created) = Auth::from_file(&path)?;
        if created {
            say_err!("endless serve: new token written to {}", path.display());
        } else {
            say_err!("endless serve: tokens from {}", path.display());
        }
        auth.with_open_metrics(open_metrics)
    };
    let protocol = ctx.protocol(args.protocol.as_deref())?;
    let ws = ctx.workspace()?;
    let mut provider = BackendProvider::new(ctx.backend()?.into());
    // Pre-started sandboxes count against --max-sessions.
    provider.backend().limit_sessions(args.max_sessions);
    provider.session.max_recording_bytes = ctx.config.sandbox.max_recording_bytes;
    let default_run = match &args.run {
        Some(name) => format!("serve-{name}"),
        None => format!("serve-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S")),
    };
    let journal = Journal::for_workspace(&state_dir(ctx), ws.root());
    let mut server = Server {
        ws,
        provider,
        auth,
        settings: Settings {
            reward,
            idle_timeout: Duration::from_secs_f64(args.idle_timeout),
            command_timeout: Duration::from_secs_f64(ctx.config.agent.command_timeout_sec.max(1.0)),
            default_run: default_run.clone(),
            read_timeout: Duration::from_secs_f64(args.read_timeout),
            protocol,
            atif: ctx.config.record.atif,
            sandbox,
        },
        bind: args.bind,
        max_sessions: args.max_sessions,
        per_token: args.max_sessions_per_token.unwrap_or(args.max_sessions),
        queue: QueueLimits {
            max_waiting: args.max_queue,
            max_wait: Duration::from_secs_f64(args.max_wait),
        },
        journal: Some(journal),
        lost: Vec::new(),
    };
    let lost = server.recover_lost();
    if !lost.is_empty() {
        say_err!(
            "endless serve: {} sessions were lost when an earlier server died; recorded as interrupted:",
            lost.len()
        );
        for l in &lost {
            say_err!(
                "endless serve: lost session {} (task {}, run {}, sample {}, server pid {})",
                l.session_id,
                l.task_id,
                l.run_id,
                l.sample,
                l.pid
            );
        }
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(server.run(|addr| {
        say_err!("endless serve: run {default_run}, listening on http://{addr}");
    }))?;
    say_err!("endless serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// The maximums of served sandboxes: flags over `[serve]`, checked.
fn sandbox_limits(ctx: &Context, args: &ServeArgs) -> Result<SandboxLimits> {
    let config = &ctx.config.serve;
    let mut limits = SandboxLimits::default();
    if let Some(c) = args.max_cpus.or(config.max_cpus) {
        if !(c.is_finite() && c > 0.0 && c <= limits.max_cpus) {
            bail!(
                "--max-cpus ([serve] max_cpus) must be above 0 and at most the host's {} cores, not {c}",
                limits.max_cpus
            );
        }
        limits.max_cpus = c;
    }
    if let Some(m) = args.max_memory_mb.or(config.max_memory_mb) {
        if m == 0 || m > limits.max_memory_mb {
            bail!(
                "--max-memory-mb ([serve] max_memory_mb) must be above 0 and at most a session's own limit of {} MiB, not {m}",
                limits.max_memory_mb
            );
        }
        limits.max_memory_mb = m;
    }
    limits.allow_registries = config
        .allow_registries
        .iter()
        .chain(&args.allow_registries)
        .map(|r| r.trim().to_string())
        .collect();
    if let Some(bad) = limits
        .allow_registries
        .iter()
        .find(|r| r.is_empty() || r.contains(['/', ' ']))
    {
        bail!("--allow-registry ([serve] allow_registries): {bad:?} is not a registry HOST[:PORT]");
    }
    Ok(limits)
}

/// The state directory (the token file and the session journal live there).
fn state_dir(ctx: &Context) -> std::path::PathBuf {
    ctx.paths
        .log_dir
        .parent()
        .unwrap_or(&ctx.paths.log_dir)
        .to_path_buf()
}
