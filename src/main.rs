//! The `endless` binary: parse the command line, set up logging, dispatch:
//! no subcommand opens the TUI, `bench tui` measures it, everything else is
//! a CLI command. This is the one place that links both front ends.

use std::process::ExitCode;

use clap::Parser;
use endless::cli::{BenchTarget, Cli, Command};
use endless::workbench::Context;

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    let ctx = Context::new(cli.workspace)?;
    match cli.command {
        None => {
            endless::commands::seed_if_fresh(&ctx)?;
            endless::tui::run(
                &ctx.workspace_root,
                &ctx.config.tui.theme,
                &ctx.config.tui.keys,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Bench(args)) if args.what == BenchTarget::Tui => {
            endless::tui::bench::run_cli(args.n, args.json)
        }
        Some(command) => endless::commands::dispatch(&ctx, command),
    }
}
