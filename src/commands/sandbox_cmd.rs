//! `endless sandbox doctor`

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::SandboxCommand;
use crate::workbench::Context;

/// `endless sandbox doctor [--json]`.
pub fn run(ctx: &Context, cmd: SandboxCommand) -> Result<ExitCode> {
    let SandboxCommand::Doctor { json } = cmd;
    let mut report = crate::sandbox::doctor(crate::verify::PYTHON);
    if let Some(local) = report.backends.iter_mut().find(|b| b.name == "local") {
        if local.works {
            let pool = crate::sandbox::doctor::doctor_pool(crate::sandbox::pool::PoolSettings::of(
                &ctx.config.sandbox,
            ));
            local.checks.push(pool);
        }
    }
    report.images = crate::sandbox::doctor_images(
        &crate::sandbox::local::image_store_dir(&ctx.paths.cache_dir.join("sandbox")),
        &ctx.config.images,
    );
    if json {
        print_json(&report)?;
    } else {
        say!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}
