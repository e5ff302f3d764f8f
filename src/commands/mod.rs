//! The CLI front end: each command turns its clap arguments into a
//! [`crate::workbench`] request, draws the use case's job events as
//! progress bars (`progress`), and prints the typed outcome (text, or one
//! JSON document with `--json`).

/// `println!` for the operator's terminal: control sequences that came from
/// task files, agent commands or their output print as visible escapes
/// ([`crate::task::terminal_safe`]), never as instructions to the terminal.
macro_rules! say {
    () => {
        $crate::commands::stdout::line("")
    };
    ($($arg:tt)*) => {
        $crate::commands::stdout::line(&$crate::task::terminal_safe(&format!($($arg)*)))
    };
}

/// [`say!`] on stderr.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::task::terminal_safe(&format!($($arg)*)))
    };
}

pub mod audit_cmd;
mod config_cmd;
mod episodes_cmd;
mod generate_cmd;
mod images_cmd;
mod json;
mod offline;
mod progress;
mod repair_cmd;
pub(crate) mod rollout_cmd;
mod sandbox_cmd;
mod serve_cmd;
mod slurm_cmd;
pub(crate) mod stdout;
mod tasks;
pub mod train_cmd;
mod train_lines;
mod workspace_cmd;

pub(crate) use json::print_json;
pub use workspace_cmd::{ask_to_create, check_workspace_exists};

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::Command;
use crate::workbench::Context;

/// Run one subcommand. (`src/main.rs` starts the TUI itself, and runs
/// `bench` ([`crate::bench`]), which measures the TUI too: this module does
/// not link the TUI.)
pub fn dispatch(ctx: &Context, command: Command) -> Result<ExitCode> {
    match command {
        Command::Tasks(cmd) => tasks::run(ctx, cmd),
        Command::Config(cmd) => config_cmd::run(ctx, cmd),
        Command::Bench(_) => anyhow::bail!("`bench` is run by the endless binary (src/main.rs)"),
        Command::Generate(args) => generate_cmd::run(ctx, args),
        Command::Run(args) => rollout_cmd::run(ctx, args),
        Command::Eval(args) => rollout_cmd::eval(ctx, args),
        Command::Train(args) => train_cmd::run(ctx, args),
        Command::Serve(args) => serve_cmd::run(ctx, args),
        Command::Sandbox(cmd) => sandbox_cmd::run(ctx, cmd),
        Command::Images(cmd) => images_cmd::run(ctx, cmd),
        Command::Workspace(cmd) => workspace_cmd::run(ctx, cmd),
        Command::Slurm(cmd) => slurm_cmd::run(ctx, cmd),
        Command::Episodes(cmd) => episodes_cmd::run(ctx, cmd),
        Command::Models(crate::cli::ModelsCommand::Fetch { .. }) => {
            let path = crate::model::fetch_smollm2(&ctx.paths.cache_dir.join("models"))?;
            say!("{}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A workspace with no tasks and no runs gets offline tasks, so that the
/// TUI opens on something to explore. A workspace whose `endless.db` was
/// missing or corrupt gets its index rebuilt from its files instead; the
/// message saying so is returned (for the TUI's status line).
pub fn seed_if_fresh(ctx: &Context) -> Result<Option<String>> {
    let (mut ws, rebuilt) = crate::workbench::open_rebuilding(&ctx.workspace_root)?;
    let ws = &mut ws;
    if rebuilt.is_some() || !ws.task_ids()?.is_empty() || !ws.list_runs()?.is_empty() {
        return Ok(rebuilt);
    }
    let n = ctx.config.generate.seed_tasks;
    say_err!(
        "endless: new workspace at {}: adding {n} offline tasks",
        ws.root().display()
    );
    let (job, _events) = crate::jobs::JobContext::standalone("generate-offline");
    let req = crate::workbench::generate::OfflineRequest {
        count: n,
        seed: 1,
        ..Default::default()
    };
    crate::workbench::generate::offline_into(ws, &req, &job)?;
    Ok(None)
}
