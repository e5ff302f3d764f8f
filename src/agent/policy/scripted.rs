//! Policies that replay fixed commands: the oracle, `script:` and `replay:`.

use std::path::Path;

use super::{Policy, PolicyError, PolicyReply};
use crate::llm::ChatMessage;

/// Emits one command per turn, then `done`.
#[derive(Debug, Clone)]
pub struct ScriptedPolicy {
    commands: Vec<String>,
    next: usize,
}

impl ScriptedPolicy {
    /// A policy that runs `commands` in order, then says done.
    pub fn new(commands: Vec<String>) -> Self {
        Self { commands, next: 0 }
    }
}

impl Policy for ScriptedPolicy {
    fn act(&mut self, _messages: &[ChatMessage]) -> Result<PolicyReply, PolicyError> {
        let text = match self.commands.get(self.next) {
            Some(cmd) => format!(
                "<think>Scripted step {}.</think>\n<command>{cmd}</command>",
                self.next + 1
            ),
            None => "<think>Scripted commands finished.</think>\n<action>done</action>".to_string(),
        };
        self.next += 1;
        Ok(PolicyReply::free(text))
    }

    /// Under the `tools` protocol each command is a Hermes `bash` call,
    /// and the end a `finish` call.
    fn act_with_tools(
        &mut self,
        _messages: &[ChatMessage],
        _tools: &[crate::llm::ToolSpec],
    ) -> Result<PolicyReply, PolicyError> {
        use crate::agent::tool_calls::{BASH, FINISH};
        use crate::llm::{tools::render_hermes_call, FunctionCall};
        let call = match self.commands.get(self.next) {
            Some(cmd) => FunctionCall {
                name: BASH.into(),
                arguments: serde_json::json!({ "command": cmd }).to_string(),
            },
            None => FunctionCall {
                name: FINISH.into(),
                arguments: "{}".into(),
            },
        };
        self.next += 1;
        Ok(PolicyReply::free(render_hermes_call(&call)))
    }
}

/// The oracle's single command: `solve.sh` fed to bash through a quoted heredoc.
pub fn oracle_command(script: &str) -> String {
    let mut delim = "ENDLESS_SOLVE_EOF".to_string();
    while script.lines().any(|l| l.trim() == delim) {
        delim.push('_');
    }
    let body = script.trim_end_matches('\n');
    format!("bash <<'{delim}'\n{body}\n{delim}")
}

/// The commands of a recorded episode: a trajectory `.jsonl` (its `step`
/// lines) or a result `.json` (its `steps`).
pub fn load_replay_commands(path: &Path) -> Result<Vec<String>, PolicyError> {
    let file_err = |message: String| PolicyError::File {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
    let mut commands = Vec::new();
    if let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(&text) {
        let steps = obj
            .get("steps")
            .and_then(|s| s.as_array())
            .ok_or_else(|| file_err("a result file needs a \"steps\" array".into()))?;
        commands.extend(steps.iter().filter_map(step_command));
        return Ok(commands);
    }
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| file_err(format!("line {}: not JSON ({e})", n + 1)))?;
        if value.get("type").and_then(|t| t.as_str()) == Some("step") {
            if let Some(cmd) = value.get("step").and_then(step_command) {
                commands.push(cmd);
            }
        }
    }
    Ok(commands)
}

fn step_command(step: &serde_json::Value) -> Option<String> {
    step.get("command")
        .and_then(|c| c.as_str())
        .map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_heredoc_avoids_its_delimiter() {
        let c = oracle_command("echo hi\nENDLESS_SOLVE_EOF\n");
        assert!(c.starts_with("bash <<'ENDLESS_SOLVE_EOF_'\n"));
        assert!(c.ends_with("\nENDLESS_SOLVE_EOF_"));
    }

    #[test]
    fn scripted_runs_then_done() {
        let mut p = ScriptedPolicy::new(vec!["ls".into()]);
        assert!(p.act(&[]).unwrap().text.contains("<command>ls</command>"));
        assert!(p.act(&[]).unwrap().text.contains("<action>done</action>"));
    }
}
