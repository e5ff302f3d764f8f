//! The CLI commands: each turns parsed arguments into library calls and
//! prints the result (text, or one JSON document with `--json`).

/// `println!` for the operator's terminal: control sequences that came from
/// task files, agent commands or their output print as visible escapes
/// ([`crate::task::terminal_safe`]), never as instructions to the terminal.
macro_rules! say {
    () => {
        println!()
    };
    ($($arg:tt)*) => {
        println!("{}", $crate::task::terminal_safe(&format!($($arg)*)))
    };
}

/// [`say!`] on stderr.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::task::terminal_safe(&format!($($arg)*)))
    };
}

pub mod bench;
pub mod bench_ppo;
mod bench_sample;
mod config_cmd;
mod generate_cmd;
mod images_cmd;
pub mod offline;
pub(crate) mod rollout_cmd;
mod sandbox_cmd;
mod serve_cmd;
mod tasks;
pub mod train_cmd;

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{Cli, Command};
use crate::store::Workspace;
use crate::workbench::Context;

/// Run the parsed command line.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let ctx = Context::new(cli.workspace)?;
    match cli.command {
        None => {
            // The TUI is started by `main`, beside the commands; here the
            // workspace it opens is prepared.
            let mut ws = ctx.workspace()?;
            seed_if_fresh(&ctx, &mut ws)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Tasks(cmd)) => tasks::run(&ctx, cmd),
        Some(Command::Config(cmd)) => config_cmd::run(&ctx, cmd),
        Some(Command::Bench(args)) => bench::run(&ctx, args),
        Some(Command::Generate(args)) => generate_cmd::run(&ctx, args),
        Some(Command::Run(args)) => rollout_cmd::run(&ctx, args),
        Some(Command::Eval(args)) => rollout_cmd::eval(&ctx, args),
        Some(Command::Train(args)) => train_cmd::run(&ctx, args),
        Some(Command::Serve(args)) => serve_cmd::run(&ctx, args),
        Some(Command::Sandbox(cmd)) => sandbox_cmd::run(&ctx, cmd),
        Some(Command::Images(cmd)) => images_cmd::run(&ctx, cmd),
        Some(Command::Models(crate::cli::ModelsCommand::Fetch { .. })) => {
            let path = crate::llm::local::fetch_smollm2(&ctx.paths.cache_dir.join("models"))?;
            say!("{}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A workspace with no tasks and no runs gets offline tasks, so that the
/// TUI opens on something to explore.
fn seed_if_fresh(ctx: &Context, ws: &mut Workspace) -> Result<()> {
    if !ws.task_ids()?.is_empty() || !ws.list_runs()?.is_empty() {
        return Ok(());
    }
    let n = ctx.config.generate.seed_tasks;
    say_err!(
        "endless: new workspace at {}: adding {n} offline tasks",
        ws.root().display()
    );
    offline::generate_offline(ws, n, 1, None, &[], false)?;
    Ok(())
}

/// Print `value` as pretty JSON on stdout.
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
