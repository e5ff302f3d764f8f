//! `endless sandbox doctor` and `endless sandbox unshare`

use std::process::ExitCode;

use anyhow::Result;

use super::json::print_json;
use crate::cli::SandboxCommand;
use crate::workbench::Context;

/// `endless sandbox doctor [--json]`.
pub fn run(ctx: &Context, cmd: SandboxCommand) -> Result<ExitCode> {
    let json = match cmd {
        SandboxCommand::Doctor { json } => json,
        SandboxCommand::Unshare { command } => return unshare(&command),
    };
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

/// `endless sandbox unshare -- COMMAND...`: run it where this process runs,
/// in the owner namespace of the operator's subordinate ids.
fn unshare(command: &[String]) -> Result<ExitCode> {
    if crate::sandbox::subids::owner_namespace().is_none() {
        let why = crate::sandbox::subids::why_single_id()
            .unwrap_or_else(|| "running as root, with no namespace to enter".into());
        anyhow::bail!("no subordinate ids' namespace to run in: {why}");
    }
    let (program, args) = command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("sandbox unshare: no command given"))?;
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .map_err(|e| anyhow::anyhow!("run `{program}`: {e}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}
