//! How a bench prints its report: one JSON document with `--json`, else its
//! text, with control sequences from task files shown as visible escapes.

use std::fmt::Display;

use anyhow::Result;
use serde::Serialize;

pub(crate) use crate::commands::print_json;

/// Print `text` for the operator's terminal ([`crate::task::terminal_safe`]).
pub fn say(text: &str) {
    println!("{}", crate::task::terminal_safe(text));
}

/// [`say`] on stderr.
pub fn say_err(text: &str) {
    eprintln!("{}", crate::task::terminal_safe(text));
}

/// Print `report` as JSON (`json`) or as its text.
pub fn print_report<R: Serialize + Display>(report: &R, json: bool) -> Result<()> {
    if json {
        print_json(report)
    } else {
        say(&report.to_string());
        Ok(())
    }
}
