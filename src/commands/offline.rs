//! `endless generate --offline`: procedural tasks, no LLM.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::cli::GenerateArgs;

pub fn run(_ctx: &Context, _args: &GenerateArgs) -> Result<ExitCode> {
    eprintln!(
        "endless: `generate --offline` is not built yet in this version (it lands with issue 4)."
    );
    Ok(ExitCode::from(2))
}
