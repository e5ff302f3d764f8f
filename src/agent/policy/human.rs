//! A person typing commands at the terminal.

use std::io::{BufRead, Write};

use super::{Policy, PolicyError, PolicyReply};
use crate::llm::{ChatMessage, Role};

/// Shows the last message on stderr and reads one command from stdin; an
/// empty line, `done` or end of input ends the episode.
#[derive(Debug, Default)]
pub struct HumanPolicy {
    shown: usize,
}

impl HumanPolicy {
    /// A new human policy.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for HumanPolicy {
    fn act(&mut self, messages: &[ChatMessage]) -> Result<PolicyReply, PolicyError> {
        let mut err = std::io::stderr().lock();
        for m in messages
            .iter()
            .skip(self.shown)
            .filter(|m| m.role == Role::User)
        {
            let _ = writeln!(err, "\n{}\n", m.content);
        }
        self.shown = messages.len();
        let _ = write!(err, "command (empty or 'done' to finish)> ");
        let _ = err.flush();
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| PolicyError::Other(format!("cannot read from the terminal: {e}")))?;
        let cmd = line.trim();
        Ok(PolicyReply::free(if cmd.is_empty() || cmd == "done" {
            "<action>done</action>".to_string()
        } else {
            format!("<command>{cmd}</command>")
        }))
    }
}
