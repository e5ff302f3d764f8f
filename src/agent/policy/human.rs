//! A person typing commands at the terminal.

use std::io::{BufRead, Write};

use super::{Policy, PolicyError, PolicyReply};
use crate::llm::{ChatMessage, Role};
use crate::task::terminal_safe;

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
        let _ = show_new(&mut err, &messages[self.shown.min(messages.len())..]);
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

/// Write the instruction and observations among `messages` to `out`, each
/// through [`terminal_safe`]: they come from the task and the agent's
/// commands, and the terminal is the operator's (no OSC 52 clipboard write,
/// window title, screen control or carriage return may act on it).
fn show_new(out: &mut impl Write, messages: &[ChatMessage]) -> std::io::Result<()> {
    for m in messages
        .iter()
        .filter(|m| matches!(m.role, Role::User | Role::Tool))
    {
        writeln!(out, "\n{}\n", terminal_safe(&m.content))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_is_shown_escaped() {
        let hostile = "Fix it.\x1b]52;c;aGk=\x07\x1b]0;owned\x07\x1b[2J\x1b[Hover\rwrite\r\nend";
        let messages = [
            ChatMessage::system("the system prompt"),
            ChatMessage::user(hostile),
        ];
        let mut out = Vec::new();
        show_new(&mut out, &messages).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains(['\x1b', '\x07', '\r']), "{text:?}");
        assert!(text.contains("Fix it.\\x1b]52;c;aGk=\\x07"), "{text}");
        assert!(text.contains("\\x1b]0;owned\\x07\\x1b[2J"), "{text}");
        assert!(text.contains("over\\x0dwrite\nend"), "{text}");
        assert!(!text.contains("system prompt"), "{text}");
    }
}
