//! The paper's minimal agent protocol: the system prompt, parsing of the
//! model's reply into an action, and the wording of observations.
//!
//! Observations use the reference implementation's wording so that models
//! trained on either side work on both.

use crate::sandbox::ExecResult;

/// The agent's system prompt (`assets/prompts/agent_system.md`).
pub const SYSTEM_PROMPT: &str = include_str!("../../assets/prompts/agent_system.md");

/// Characters of command output shown to the agent before it is cut.
pub const MAX_OBSERVATION_CHARS: usize = 50_000;

/// Default turn limit in training (the paper's 16).
pub const TRAIN_MAX_TURNS: u32 = 16;
/// Default turn limit in evaluation (the paper's 64).
pub const EVAL_MAX_TURNS: u32 = 64;

/// The user message sent when a reply has neither a command nor `done`.
pub const CORRECTIVE_MESSAGE: &str = "Your response could not be parsed. First reason inside <think></think> tags, then give exactly one shell command inside <command></command> tags, or <action>done</action> if the task is complete.";

/// What the model asked for in one reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run this shell command.
    Command(String),
    /// The agent says the task is complete.
    Done,
    /// Neither a command nor done; `reason` says what was wrong.
    Malformed(String),
}

/// A parsed reply: the reasoning (if any) and the action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReply {
    pub think: Option<String>,
    pub action: Action,
}

/// The first user message: the task instruction.
pub fn initial_user_message(instruction: &str) -> String {
    instruction.trim().to_string()
}

/// The prompt every episode starts from: the system message and the task's
/// instruction as the first user message. `endless eval`, `endless serve`
/// and the exported datasets all give a policy exactly these.
pub fn initial_messages(instruction: &str) -> Vec<crate::llm::ChatMessage> {
    vec![
        crate::llm::ChatMessage::system(SYSTEM_PROMPT),
        crate::llm::ChatMessage::user(initial_user_message(instruction)),
    ]
}

/// Parse a model reply. The LAST `<command>` tag wins; `<command>done</command>`
/// and `<action>done</action>` mean done. A done action after the last
/// command also means done.
pub fn parse_reply(text: &str) -> ParsedReply {
    let think = last_tag(text, "think").map(|(_, body)| body.trim().to_string());
    let command = last_tag(text, "command");
    let done =
        last_tag(text, "action").filter(|(_, body)| body.trim().eq_ignore_ascii_case("done"));
    let action = match (command, done) {
        (Some((cpos, _)), Some((dpos, _))) if dpos > cpos => Action::Done,
        (Some((_, body)), _) => {
            let cmd = body.trim();
            if cmd.eq_ignore_ascii_case("done") {
                Action::Done
            } else if cmd.is_empty() {
                Action::Malformed("the <command> tag is empty".into())
            } else {
                Action::Command(cmd.to_string())
            }
        }
        (None, Some(_)) => Action::Done,
        (None, None) => {
            if text.trim().is_empty() {
                Action::Malformed("the reply is empty".into())
            } else if text.contains("<command>") {
                Action::Malformed("a <command> tag is not closed".into())
            } else {
                Action::Malformed("no <command> or <action>done</action> tag".into())
            }
        }
    };
    ParsedReply { think, action }
}

/// The last complete `<tag>...</tag>` in `text`: its start offset and body.
/// Tolerates the body itself spanning lines.
fn last_tag<'a>(text: &'a str, tag: &str) -> Option<(usize, &'a str)> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut best = None;
    let mut from = 0;
    while let Some(rel) = text[from..].find(&open) {
        let start = from + rel;
        let body_start = start + open.len();
        match text[body_start..].find(&close) {
            Some(end) => {
                best = Some((start, &text[body_start..body_start + end]));
                from = body_start + end + close.len();
            }
            None => break,
        }
    }
    best
}

/// Cut `output` to `max` characters, with a note saying how much was dropped.
pub fn truncate_output(output: &str, max: usize) -> String {
    let total = output.chars().count();
    if total <= max {
        return output.to_string();
    }
    let kept: String = output.chars().take(max).collect();
    format!("{kept}\n\n[output truncated: showing the first {max} of {total} characters]")
}

/// The observation for a finished command, in the reference's wording.
pub fn format_observation(result: &ExecResult, timeout_secs: f64) -> String {
    let output = truncate_output(&result.output, MAX_OBSERVATION_CHARS);
    if result.timed_out {
        return format!(
            "Command timed out after {timeout_secs} seconds and was interrupted. Output: {output}\n\n(exit_code=timeout)"
        );
    }
    match result.exit_code {
        Some(0) => format!("Command executed successfully. Output: {output}\n\n(exit_code=0)"),
        Some(code) => format!("Command failed. Output: {output}\n\n(exit_code={code})"),
        None => format!("Command failed: the shell ended. Output: {output}\n\n(exit_code=unknown)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn exec(output: &str, code: Option<i32>, timed_out: bool) -> ExecResult {
        ExecResult {
            output: output.into(),
            exit_code: code,
            timed_out,
            truncated: false,
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn last_command_wins() {
        let r = parse_reply("<think>a</think><command>ls</command> then <command>pwd</command>");
        assert_eq!(r.action, Action::Command("pwd".into()));
        assert_eq!(r.think.as_deref(), Some("a"));
    }

    #[test]
    fn done_forms() {
        assert_eq!(
            parse_reply("<think>x</think><action>done</action>").action,
            Action::Done
        );
        assert_eq!(
            parse_reply("<command> done </command>").action,
            Action::Done
        );
        assert_eq!(
            parse_reply("<command>ls</command><action>done</action>").action,
            Action::Done
        );
        assert_eq!(
            parse_reply("<action>done</action><command>ls</command>").action,
            Action::Command("ls".into())
        );
    }

    #[test]
    fn malformed_forms() {
        for text in [
            "",
            "   ",
            "just talk",
            "<command>ls",
            "<command>  </command>",
            "<action>stop</action>",
        ] {
            assert!(
                matches!(parse_reply(text).action, Action::Malformed(_)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn multiline_commands_keep_their_body() {
        let r = parse_reply("<command>cat > f <<'EOF'\na\nEOF</command>");
        assert_eq!(r.action, Action::Command("cat > f <<'EOF'\na\nEOF".into()));
    }

    #[test]
    fn observation_wording() {
        assert_eq!(
            format_observation(&exec("hi\n", Some(0), false), 30.0),
            "Command executed successfully. Output: hi\n\n\n(exit_code=0)"
        );
        assert_eq!(
            format_observation(&exec("", Some(2), false), 30.0),
            "Command failed. Output: \n\n(exit_code=2)"
        );
        assert!(format_observation(&exec("", None, true), 30.0)
            .starts_with("Command timed out after 30 seconds"));
    }

    #[test]
    fn truncation_notes_the_cut() {
        let long = "é".repeat(60_000);
        let t = truncate_output(&long, MAX_OBSERVATION_CHARS);
        assert!(t.contains("[output truncated: showing the first 50000 of 60000 characters]"));
        assert_eq!(truncate_output("ab", 5), "ab");
    }
}
