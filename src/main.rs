//! The `endless` binary: parse the command line, set up logging, then start
//! the TUI (no subcommand, or `bench tui`) or dispatch to the commands. Both
//! front ends stand on `endless::workbench`; neither imports the other.

use std::process::ExitCode;

use clap::Parser;
use endless::cli::{BenchTarget, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _log_guard = endless::logging::init(&endless::config::Paths::detect().log_dir);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // Errors may quote task files or agent output.
            let text = format!("endless: {e:#}");
            eprintln!("{}", endless::task::terminal_safe(&text));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Some(Command::Bench(args)) if matches!(args.what, BenchTarget::Tui) => {
            let text = endless::tui::bench::run_cli(args.n.unwrap_or(10_000), args.json);
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let workspace = cli.workspace.clone();
            endless::commands::dispatch(cli)?;
            let ctx = endless::workbench::Context::new(workspace)?;
            endless::tui::run(
                &ctx.workspace_root,
                &ctx.config.tui.theme,
                &ctx.config.tui.keys,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Some(_) => endless::commands::dispatch(cli),
    }
}
