//! The `endless` binary: parse the command line, set up logging, dispatch.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = endless::cli::Cli::parse();
    let _log_guard = endless::logging::init(&endless::config::Paths::detect().log_dir);
    match endless::commands::dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            // Errors may quote task files or agent output.
            let text = format!("endless: {e:#}");
            eprintln!("{}", endless::task::terminal_safe(&text));
            ExitCode::FAILURE
        }
    }
}
