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
pub mod offline;
pub(crate) mod rollout_cmd;
mod sandbox_cmd;
mod tasks;
pub mod train_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::cli::{Cli, Command};
use crate::config::{Config, Paths};
use crate::store::Workspace;

/// What every command needs: paths, the workspace location, the config.
pub struct Context {
    pub paths: Paths,
    pub workspace_root: PathBuf,
    pub config: Config,
}

impl Context {
    /// Resolve paths and load the configuration layers.
    pub fn new(workspace: Option<PathBuf>) -> Result<Context> {
        let paths = Paths::detect();
        let workspace_root = workspace.unwrap_or_else(|| paths.default_workspace.clone());
        let config = Config::load(&paths.config_file, Some(&workspace_root))?;
        Ok(Context {
            paths,
            workspace_root,
            config,
        })
    }

    /// The configured sandbox backend, caching images under the cache dir.
    pub fn backend(&self) -> Result<Box<dyn crate::sandbox::Backend>> {
        crate::sandbox::backend_by_name(
            &self.config.sandbox.backend,
            &self.paths.cache_dir.join("sandbox"),
        )
        .with_context(|| {
            format!(
                "starting the `{}` sandbox backend (see `endless sandbox doctor`)",
                self.config.sandbox.backend
            )
        })
    }

    /// Open (creating if needed) the workspace.
    pub fn workspace(&self) -> Result<Workspace> {
        Workspace::open(&self.workspace_root)
            .with_context(|| format!("opening workspace {}", self.workspace_root.display()))
    }
}

/// Run the parsed command line.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let ctx = Context::new(cli.workspace)?;
    match cli.command {
        None => {
            let mut ws = ctx.workspace()?;
            seed_if_fresh(&ctx, &mut ws)?;
            drop(ws);
            crate::tui::run(
                &ctx.workspace_root,
                &ctx.config.tui.theme,
                &ctx.config.tui.keys,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Tasks(cmd)) => tasks::run(&ctx, cmd),
        Some(Command::Config(cmd)) => config_cmd::run(&ctx, cmd),
        Some(Command::Bench(args)) => bench::run(&ctx, args),
        Some(Command::Generate(args)) => generate_cmd::run(&ctx, args),
        Some(Command::Run(args)) => rollout_cmd::run(&ctx, args),
        Some(Command::Eval(args)) => rollout_cmd::eval(&ctx, args),
        Some(Command::Train(args)) => train_cmd::run(&ctx, args),
        Some(Command::Sandbox(cmd)) => sandbox_cmd::run(&ctx, cmd),
        Some(Command::Models(crate::cli::ModelsCommand::Fetch { .. })) => {
            let path = crate::model::fetch_smollm2(&ctx.paths.cache_dir.join("models"))?;
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
