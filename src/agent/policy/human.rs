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
        Ok(PolicyReply::free(match self.read_command(messages)? {
            None => "<action>done</action>".to_string(),
            Some(cmd) => format!("<command>{cmd}</command>"),
        }))
    }

    /// Under the `tools` protocol the command is a Hermes `bash` call, and
    /// the end a `finish` call.
    fn act_with_tools(
        &mut self,
        messages: &[ChatMessage],
        _tools: &[crate::llm::ToolSpec],
    ) -> Result<PolicyReply, PolicyError> {
        use crate::agent::tool_calls::{BASH, FINISH};
        use crate::llm::{tools::render_hermes_call, FunctionCall};
        let call = match self.read_command(messages)? {
            None => FunctionCall {
                name: FINISH.into(),
                arguments: "{}".into(),
            },
            Some(cmd) => FunctionCall {
                name: BASH.into(),
                arguments: serde_json::json!({ "command": cmd }).to_string(),
            },
        };
        Ok(PolicyReply::free(render_hermes_call(&call)))
    }
}

impl HumanPolicy {
    /// Show the new messages and read one command (`None`: done).
    fn read_command(&mut self, messages: &[ChatMessage]) -> Result<Option<String>, PolicyError> {
        let mut err = std::io::stderr().lock();
        for m in messages
            .iter()
            .skip(self.shown)
            .filter(|m| matches!(m.role, Role::User | Role::Tool))
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
        Ok((!cmd.is_empty() && cmd != "done").then(|| cmd.to_string()))
    }
}
