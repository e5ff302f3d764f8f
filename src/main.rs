//! The `endless` binary: parse the command line, set up logging, dispatch:
//! no subcommand opens the TUI, `bench` measures (the TUI among the rest),
//! everything else is a CLI command. This is the one place that links both
//! front ends and the benches.

use std::process::ExitCode;

use clap::Parser;
use endless::cli::{Cli, Command};
use endless::workbench::Context;

/// mimalloc, or the C library's for `serve` (see `endless::allocator` for
/// why); `ENDLESS_ALLOCATOR=system|mimalloc` chooses for any command.
#[global_allocator]
static ALLOCATOR: endless::allocator::Switchable = endless::allocator::Switchable;

fn main() -> ExitCode {
    endless::model::threads::use_one_pool();
    let cli = Cli::parse();
    // Before any thread starts: an operator with subordinate ids runs as
    // the root of their owner namespace (see `sandbox/isolate/subids.rs`);
    // Slurm's commands run as the operator, whose uid `sbatch` reports.
    if !matches!(cli.command, Some(Command::Slurm(_))) {
        endless::sandbox::subids::enter_owner_namespace();
    }
    let _log_guard = endless::logging::init(&endless::config::Paths::detect().log_dir);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // Errors may quote task files or agent output.
            let text = format!("endless: {}", endless::logging::error_text(&e));
            eprintln!("{}", endless::task::terminal_safe(&text));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // A named workspace that does not exist is a typo until the user says
    // otherwise: `--create` on the CLI; the TUI asks.
    let mut ask = |path: &std::path::Path| endless::commands::ask_to_create(path);
    let tui = cli.command.is_none();
    endless::commands::check_workspace_exists(
        cli.workspace.as_deref(),
        cli.create,
        if tui { Some(&mut ask) } else { None },
    )?;
    let ctx = Context::new(cli.workspace)?;
    match cli.command {
        None => {
            let rebuilt = endless::commands::seed_if_fresh(&ctx)?;
            let (tx, rx) = std::sync::mpsc::channel();
            if let Some(message) = rebuilt {
                // The TUI's status line says the index was rebuilt.
                let _ = tx.send(endless::tui::Msg::Action(endless::tui::Action::Info(
                    message,
                )));
            }
            endless::tui::run_with_channel(
                &ctx.workspace_root,
                &ctx.config.tui.theme,
                &ctx.config.tui.keys,
                tx,
                rx,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Bench(args)) => endless::bench::run(&ctx, args),
        Some(command) => endless::commands::dispatch(&ctx, command),
    }
}
