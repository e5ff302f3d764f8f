//! The `tools` protocol profile's turn: the agent's two functions (`bash`,
//! alias `execute`, and `finish`), what one reply's tool calls ask for, and
//! how each call is answered.
//!
//! A reply's calls are its OpenAI `tool_calls` when it has any, else the
//! Hermes `<tool_call>` blocks of its text (local models). Answers follow
//! the shape the calls came in: one `tool` message per call id, or one
//! user turn of `<tool_response>` blocks, one per call, in order. Every
//! call is answered (OpenAI refuses a conversation with an unanswered call).
//! `protocol` maps the [`ToolAction`] onto the episode's action and keeps
//! the table of rules.

use crate::llm::tools::{parse_hermes_calls, tool_response};
use crate::llm::{ChatMessage, FunctionCall, ToolSpec};

/// The function that runs a shell command.
pub const BASH: &str = "bash";
/// Another name for [`BASH`] (the name some agent harnesses use).
pub const BASH_ALIAS: &str = "execute";
/// The function that ends the episode.
pub const FINISH: &str = "finish";

/// The answer to a `bash` call that did not run because an earlier call
/// of the same reply did.
pub const NOT_RUN_NOTE: &str =
    "Not run: one command runs per turn, and an earlier bash call of this reply ran.";
/// The answer to a valid call of a reply that also held an invalid one.
pub const SKIPPED_NOTE: &str = "Not run: another call of this reply was invalid.";
/// The answer to a `finish` call after the command that ran.
pub const FINISH_NOTE: &str = "The episode ends after the command.";

/// The functions offered to the model: `bash` and `finish`.
pub fn agent_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: BASH.into(),
            description: "Run one shell command in the task's Linux terminal (a non-interactive bash shell whose working directory and environment persist) and return its output and exit code.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command to run."}
                },
                "required": ["command"],
            }),
        },
        ToolSpec {
            name: FINISH.into(),
            description: "Say that the task is complete; the episode ends and the task is checked.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        },
    ]
}

/// What the calls of one reply ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolAction {
    /// Run this command (the reply's first `bash` call).
    Run(String),
    /// Run this command, then end the episode (a `finish` call followed it).
    RunThenFinish(String),
    /// End the episode (`finish` came first).
    Finish,
    /// Nothing runs; why.
    Invalid(String),
}

/// How one call is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// With the observation of the command that ran.
    Observation,
    /// With this note (not run, or what was wrong with it).
    Note(String),
}

/// How a reply's observation is sent back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Answers {
    /// As one user message (the text profiles, or a reply without calls).
    #[default]
    User,
    /// One `tool` message per call id, in the calls' order.
    Messages(Vec<(String, Answer)>),
    /// One user turn of `<tool_response>` blocks, in the calls' order.
    Hermes(Vec<Answer>),
}

/// One reply read under the `tools` profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTurn {
    /// What it asks for.
    pub action: ToolAction,
    /// How its calls are answered.
    pub answers: Answers,
}

/// One call, classified.
enum Call {
    Bash(String),
    Finish,
    Bad(String),
}

fn classify(call: Result<FunctionCall, String>) -> Call {
    let call = match call {
        Ok(c) => c,
        Err(reason) => return Call::Bad(reason),
    };
    match call.name.as_str() {
        BASH | BASH_ALIAS => match bash_command(&call.name, &call.arguments) {
            Ok(cmd) => Call::Bash(cmd),
            Err(reason) => Call::Bad(reason),
        },
        FINISH => Call::Finish,
        other => Call::Bad(format!(
            "unknown function {other:?} (the functions are {BASH} and {FINISH})"
        )),
    }
}

/// The command of a `bash` call's arguments (`{"command": "..."}`).
fn bash_command(name: &str, arguments: &str) -> Result<String, String> {
    let value: serde_json::Value = serde_json::from_str(arguments)
        .map_err(|e| format!("the arguments of {name} are not valid JSON ({e})"))?;
    let command = value
        .get("command")
        .and_then(|c| c.as_str())
        .ok_or_else(|| format!("{name} needs a string \"command\" argument"))?;
    let command = command.trim();
    if command.is_empty() {
        return Err(format!("the {name} command is empty"));
    }
    Ok(command.to_string())
}

/// Read the tool calls of `reply` (see the module docs for the rules).
pub fn read_turn(reply: &ChatMessage) -> ToolTurn {
    let structured = !reply.tool_calls.is_empty();
    let (ids, calls): (Vec<String>, Vec<Call>) = if structured {
        reply
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), classify(Ok(c.function.clone()))))
            .unzip()
    } else {
        parse_hermes_calls(&reply.content)
            .into_iter()
            .map(|c| (String::new(), classify(c)))
            .unzip()
    };
    if calls.is_empty() {
        let reason = if reply.content.trim().is_empty() {
            "the reply is empty".to_string()
        } else {
            format!("no tool call (call {BASH} with a command, or {FINISH})")
        };
        return ToolTurn {
            action: ToolAction::Invalid(reason),
            answers: Answers::User,
        };
    }
    let (action, answers) = decide(&calls);
    let answers = if structured {
        Answers::Messages(ids.into_iter().zip(answers).collect())
    } else {
        Answers::Hermes(answers)
    };
    ToolTurn { action, answers }
}

/// The action of a non-empty list of calls, and each call's answer.
fn decide(calls: &[Call]) -> (ToolAction, Vec<Answer>) {
    if let Some(reason) = calls.iter().find_map(|c| match c {
        Call::Bad(r) => Some(r.clone()),
        _ => None,
    }) {
        let answers = calls
            .iter()
            .map(|c| match c {
                Call::Bad(r) => Answer::Note(format!("Error: {r}.")),
                _ => Answer::Note(SKIPPED_NOTE.into()),
            })
            .collect();
        return (ToolAction::Invalid(reason), answers);
    }
    match &calls[0] {
        Call::Bash(cmd) => {
            let finishes = calls[1..].iter().any(|c| matches!(c, Call::Finish));
            let answers = std::iter::once(Answer::Observation)
                .chain(calls[1..].iter().map(|c| {
                    Answer::Note(match c {
                        Call::Finish => FINISH_NOTE.into(),
                        _ => NOT_RUN_NOTE.into(),
                    })
                }))
                .collect();
            let action = if finishes {
                ToolAction::RunThenFinish(cmd.clone())
            } else {
                ToolAction::Run(cmd.clone())
            };
            (action, answers)
        }
        _ => (
            ToolAction::Finish,
            calls
                .iter()
                .map(|_| Answer::Note("Finished.".into()))
                .collect(),
        ),
    }
}

/// The messages that answer a reply: `observation` (the command's result,
/// or the corrective message after an invalid reply) where a call's answer
/// is the observation; when no call's is, the observation follows the
/// answers (a user message, or the same user turn for Hermes calls).
pub fn answer_messages(answers: &Answers, observation: &str) -> Vec<ChatMessage> {
    let text = |a: &Answer| match a {
        Answer::Observation => observation.to_string(),
        Answer::Note(n) => n.clone(),
    };
    let is_observed = |a: &Answer| matches!(a, Answer::Observation);
    match answers {
        Answers::User => vec![ChatMessage::user(observation)],
        Answers::Messages(list) => {
            let mut out: Vec<ChatMessage> = list
                .iter()
                .map(|(id, a)| ChatMessage::tool(id.clone(), text(a)))
                .collect();
            if !list.iter().any(|(_, a)| is_observed(a)) {
                out.push(ChatMessage::user(observation));
            }
            out
        }
        Answers::Hermes(list) => {
            let mut turn = list
                .iter()
                .map(|a| tool_response(&text(a)))
                .collect::<Vec<_>>()
                .join("\n");
            if !list.iter().any(is_observed) {
                turn.push_str("\n\n");
                turn.push_str(observation);
            }
            vec![ChatMessage::user(turn)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Role, ToolCall};

    fn calls(list: &[(&str, &str)]) -> ChatMessage {
        let calls = list
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall::new(format!("call_{i}"), *name, *args))
            .collect();
        ChatMessage::assistant_calls("", calls)
    }

    #[test]
    fn openai_calls_become_actions() {
        let t = read_turn(&calls(&[("bash", r#"{"command": " ls -la "}"#)]));
        assert_eq!(t.action, ToolAction::Run("ls -la".into()));
        assert_eq!(
            t.answers,
            Answers::Messages(vec![("call_0".into(), Answer::Observation)])
        );
        let t = read_turn(&calls(&[("execute", r#"{"command": "pwd"}"#)]));
        assert_eq!(t.action, ToolAction::Run("pwd".into()));
        assert_eq!(
            read_turn(&calls(&[("finish", "")])).action,
            ToolAction::Finish
        );
        // finish after bash: the command runs, then the episode ends
        let t = read_turn(&calls(&[
            ("bash", r#"{"command":"touch x"}"#),
            ("finish", "{}"),
        ]));
        assert_eq!(t.action, ToolAction::RunThenFinish("touch x".into()));
        // finish first: nothing runs
        let t = read_turn(&calls(&[("finish", "{}"), ("bash", r#"{"command":"ls"}"#)]));
        assert_eq!(t.action, ToolAction::Finish);
    }

    #[test]
    fn several_bash_calls_run_the_first_and_answer_every_one() {
        let t = read_turn(&calls(&[
            ("bash", r#"{"command":"echo a"}"#),
            ("bash", r#"{"command":"echo b"}"#),
        ]));
        assert_eq!(t.action, ToolAction::Run("echo a".into()));
        let msgs = answer_messages(&t.answers, "OUT");
        assert_eq!(msgs.len(), 2);
        assert_eq!(
            (
                msgs[0].role,
                msgs[0].tool_call_id.as_deref(),
                msgs[0].content.as_str()
            ),
            (Role::Tool, Some("call_0"), "OUT")
        );
        assert_eq!(
            (msgs[1].tool_call_id.as_deref(), msgs[1].content.as_str()),
            (Some("call_1"), NOT_RUN_NOTE)
        );
    }

    #[test]
    fn invalid_calls_name_what_is_wrong_and_run_nothing() {
        for (list, expect) in [
            (vec![("bash", "{not json")], "not valid JSON"),
            (vec![("bash", r#"{"cmd": "ls"}"#)], "\"command\" argument"),
            (vec![("bash", r#"{"command": "  "}"#)], "empty"),
            (vec![("python", "{}")], "unknown function \"python\""),
            (
                vec![("bash", r#"{"command":"ls"}"#), ("rm_rf", "{}")],
                "unknown function",
            ),
        ] {
            let t = read_turn(&calls(&list));
            match &t.action {
                ToolAction::Invalid(reason) => assert!(reason.contains(expect), "{reason}"),
                other => panic!("{list:?} gave {other:?}"),
            }
            let msgs = answer_messages(&t.answers, "NUDGE");
            // every call answered, then the nudge as a user message
            assert_eq!(msgs.len(), list.len() + 1, "{msgs:?}");
            assert!(msgs[..list.len()].iter().all(|m| m.role == Role::Tool));
            assert_eq!(
                (msgs[list.len()].role, msgs[list.len()].content.as_str()),
                (Role::User, "NUDGE")
            );
        }
        let two = read_turn(&calls(&[("bash", r#"{"command":"ls"}"#), ("nope", "{}")]));
        let msgs = answer_messages(&two.answers, "NUDGE");
        assert_eq!(msgs[0].content, SKIPPED_NOTE);
        assert!(msgs[1].content.starts_with("Error: unknown function"));
    }

    #[test]
    fn replies_without_calls_are_invalid_and_answered_by_a_user_message() {
        for (text, expect) in [("", "empty"), ("I would run ls.", "no tool call")] {
            let t = read_turn(&ChatMessage::assistant(text));
            assert!(
                matches!(&t.action, ToolAction::Invalid(r) if r.contains(expect)),
                "{t:?}"
            );
            assert_eq!(t.answers, Answers::User);
            assert_eq!(
                answer_messages(&t.answers, "NUDGE"),
                vec![ChatMessage::user("NUDGE")]
            );
        }
    }

    #[test]
    fn hermes_text_calls_are_answered_with_tool_responses() {
        let reply = ChatMessage::assistant(
            "<think>list it</think>\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>\n<tool_call>{\"name\": \"finish\", \"arguments\": {}}</tool_call>",
        );
        let t = read_turn(&reply);
        assert_eq!(t.action, ToolAction::RunThenFinish("ls".into()));
        let msgs = answer_messages(&t.answers, "a.txt");
        assert_eq!(
            msgs,
            vec![ChatMessage::user(format!(
                "<tool_response>\na.txt\n</tool_response>\n<tool_response>\n{FINISH_NOTE}\n</tool_response>"
            ))]
        );
        let bad = read_turn(&ChatMessage::assistant(
            "<tool_call>{\"name\": \"bash\", \"arguments\": \"{oops\"}</tool_call>",
        ));
        assert!(matches!(&bad.action, ToolAction::Invalid(r) if r.contains("not valid JSON")));
        let msgs = answer_messages(&bad.answers, "NUDGE");
        assert_eq!(msgs.len(), 1);
        assert!(
            msgs[0]
                .content
                .starts_with("<tool_response>\nError: the arguments of bash")
                && msgs[0].content.ends_with("</tool_response>\n\nNUDGE"),
            "{}",
            msgs[0].content
        );
        let unclosed = read_turn(&ChatMessage::assistant("<tool_call>{\"name\": \"bash\""));
        assert!(matches!(&unclosed.action, ToolAction::Invalid(r) if r.contains("not closed")));
    }

    #[test]
    fn the_tools_are_bash_and_finish() {
        let tools = agent_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [BASH, FINISH]);
        assert_eq!(tools[0].parameters["required"][0], "command");
    }
}
