//! The one way a command prints a result as JSON (`--json`).

use anyhow::Result;

/// Print `value` as pretty JSON on stdout.
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    use std::io::Write;
    // Not println!: it panics when the reader has gone (`... --json | head`).
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    out.flush()?;
    Ok(())
}
