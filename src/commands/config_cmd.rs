//! `endless config show`

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::ConfigCommand;
use crate::workbench::Context;

/// `endless config ...`
pub fn run(ctx: &Context, cmd: ConfigCommand) -> Result<ExitCode> {
    let ConfigCommand::Show { json } = cmd;
    if json {
        print_json(&serde_json::json!({
            "config": ctx.config,
            "paths": ctx.paths,
            "workspace": ctx.workspace_root,
        }))?;
    } else {
        say!("# paths");
        say!("# workspace:   {}", ctx.workspace_root.display());
        say!("# config file: {}", ctx.paths.config_file.display());
        say!(
            "# workspace config: {}",
            ctx.workspace_root.join("endless.toml").display()
        );
        say!("# cache:       {}", ctx.paths.cache_dir.display());
        say!("# logs:        {}", ctx.paths.log_dir.display());
        say!();
        super::stdout::line(
            crate::task::terminal_safe(&toml::to_string(&ctx.config)?).trim_end_matches('\n'),
        );
    }
    Ok(ExitCode::SUCCESS)
}
