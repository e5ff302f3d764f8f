//! `endless sandbox doctor`

use std::process::ExitCode;

use anyhow::Result;

use super::print_json;
use crate::cli::SandboxCommand;
use crate::workbench::Context;

/// `endless sandbox ...`
pub fn run(_ctx: &Context, cmd: SandboxCommand) -> Result<ExitCode> {
    let SandboxCommand::Doctor { json } = cmd;
    let report = crate::sandbox::doctor(crate::verify::PYTHON);
    if json {
        print_json(&report)?;
    } else {
        say!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}
