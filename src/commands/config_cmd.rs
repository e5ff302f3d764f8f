//! `endless config show`

use std::process::ExitCode;

use anyhow::Result;

use super::{print_json, Context};
use crate::cli::ConfigCommand;

pub fn run(ctx: &Context, cmd: ConfigCommand) -> Result<ExitCode> {
    let ConfigCommand::Show { json } = cmd;
    if json {
        print_json(&serde_json::json!({
            "config": ctx.config,
            "paths": ctx.paths,
            "workspace": ctx.workspace_root,
        }))?;
    } else {
        println!("# paths");
        println!("# workspace:   {}", ctx.workspace_root.display());
        println!("# config file: {}", ctx.paths.config_file.display());
        println!(
            "# workspace config: {}",
            ctx.workspace_root.join("endless.toml").display()
        );
        println!("# cache:       {}", ctx.paths.cache_dir.display());
        println!("# logs:        {}", ctx.paths.log_dir.display());
        println!();
        print!("{}", toml::to_string(&ctx.config)?);
    }
    Ok(ExitCode::SUCCESS)
}
