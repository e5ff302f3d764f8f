//! The paper's minimal agent protocol: the system prompt, parsing of the
//! model's reply into an action, and the wording of observations, in three
//! profiles ([`Protocol`]): `endless` and `reference` differ only where the
//! reference implementation (github.com/kanishkg/endless-terminals) and
//! this project differ; `tools` is ours for agents that act through tool
//! calls (see [`super::tool_calls`]):
//!
//! | switch | `endless` (ours) | `reference` | `tools` |
//! |---|---|---|---|
//! | a reply's action | a `<command>` or `<action>done</action>` tag | the same | a call of `bash` (`{"command": ...}`, alias `execute`) or `finish`: OpenAI `tool_calls`, or Hermes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` text (local models) |
//! | the tools offered | none | none | `bash` and `finish`: the request's `tools` array (OpenAI), or described in the system prompt the Hermes way (local models) |
//! | done and a command in one reply | the command runs, then the episode ends | the episode ends, the command does not run | `finish` after `bash`: the command runs, then the episode ends; `finish` first: it ends, nothing runs |
//! | several commands | the last `<command>` runs | the last one runs (`command_tag = "first"` for checkpoints trained before the reference switched) | the first `bash` call runs; every other call is answered "not run" |
//! | malformed reply (a turn, nothing runs) | no tag, an empty or unclosed one | the same | no call, `bash` arguments that are not JSON, no `command` or an empty one, an unknown function, an unclosed `<tool_call>` (`finish`'s arguments are ignored): each call is answered with its error, the others "not run", then the nudge |
//! | observation | a user message | a user message | a `tool` message per call id (OpenAI), or one user turn of `<tool_response>` blocks (Hermes) |
//! | exit code in the observation | the real code (`timeout`, `unknown`) | `0` or `1` | the real code |
//! | malformed-reply nudge | [`CORRECTIVE_MESSAGE`] | [`REFERENCE_CORRECTIVE_MESSAGE`] | [`TOOLS_CORRECTIVE_MESSAGE`] |
//! | truncation note | `[output truncated: showing the first N of M characters]` | `[Output truncated: showing first N of N characters]` | as `endless` |
//!
//! The turn limit, the command and episode time limits and the failure
//! labels are the same under every profile: a malformed reply is a turn.
//!
//! What the `reference` profile reproduces was read in the reference's code:
//! `generator/sample_solutions.py` (`_extract_action`: `DONE_RE` is searched
//! before `CMD_RE`, and `matches[-1]` is taken, with a comment that models
//! trained with an older version used the first match; the stage-4 sampler's
//! observation and nudge texts; `exit_code={0 if success else 1}`) and
//! `train/sky_endless.py` (the training environment: the same parser, the
//! same observation with `exit_code` 0 or 1, a timed-out command reported as
//! failed with the output `Command timed out after {timeout}s`, and the
//! truncation note computed after the cut, so it always reads "of N" with N
//! the limit). The system prompt is never copied from the reference: both
//! profiles ship ours, and `system_prompt_file` (`[agent]`) runs a model
//! with the exact prompt it was trained on.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::tool_calls::{self, Answers, ToolAction};
use crate::llm::tools::render_assistant_text;
use crate::llm::{ChatMessage, ToolSpec};
use crate::sandbox::ExecResult;

/// The agent's system prompt (`assets/prompts/agent_system.md`).
pub const SYSTEM_PROMPT: &str = include_str!("../../assets/prompts/agent_system.md");

/// The system prompt of the `tools` profile
/// (`assets/prompts/agent_tools_system.md`).
pub const TOOLS_SYSTEM_PROMPT: &str = include_str!("../../assets/prompts/agent_tools_system.md");

/// Characters of command output shown to the agent before it is cut.
pub const MAX_OBSERVATION_CHARS: usize = 50_000;

/// Default turn limit in training (the paper's 16).
pub const TRAIN_MAX_TURNS: u32 = 16;
/// Default turn limit in evaluation (the paper's 64).
pub const EVAL_MAX_TURNS: u32 = 64;

/// The user message sent when a reply has neither a command nor `done`
/// (the `endless` profile).
pub const CORRECTIVE_MESSAGE: &str = "Your response could not be parsed. First reason inside <think></think> tags, then give exactly one shell command inside <command></command> tags, or <action>done</action> if the task is complete.";

/// The reference's nudge after a reply it cannot parse (the `reference`
/// profile), as `generator/sample_solutions.py` and `train/sky_endless.py`
/// send it.
pub const REFERENCE_CORRECTIVE_MESSAGE: &str = "Could not parse a single <command>...</command> or <action>done</action>. Please respond with exactly one of those.";

/// The nudge after a reply without one valid tool call (the `tools`
/// profile).
pub const TOOLS_CORRECTIVE_MESSAGE: &str = "Your response did not make a valid function call. Call bash with {\"command\": \"...\"} to run exactly one shell command, or call finish if the task is complete.";

/// A named set of protocol switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// This project's protocol.
    #[default]
    Endless,
    /// The reference implementation's training environment and stage-4
    /// sampler.
    Reference,
    /// Tool calls: `bash` and `finish` functions (OpenAI `tools`, or
    /// Hermes `<tool_call>` text for local models).
    Tools,
}

impl Profile {
    /// The profile's name (`endless`, `reference`, `tools`).
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Endless => "endless",
            Profile::Reference => "reference",
            Profile::Tools => "tools",
        }
    }

    /// Parse a profile name; the error lists the known ones.
    pub fn parse(name: &str) -> Result<Profile, ProtocolError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "endless" => Ok(Profile::Endless),
            "reference" => Ok(Profile::Reference),
            "tools" => Ok(Profile::Tools),
            _ => Err(ProtocolError::UnknownProfile(name.to_string())),
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which `<command>` tag of a reply runs when there are several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandTag {
    /// The first tag (the reference parser's choice before it changed).
    First,
    /// The last tag (both profiles' default).
    Last,
}

impl CommandTag {
    /// Parse `first` or `last`.
    pub fn parse(name: &str) -> Result<CommandTag, ProtocolError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "first" => Ok(CommandTag::First),
            "last" => Ok(CommandTag::Last),
            _ => Err(ProtocolError::UnknownCommandTag(name.to_string())),
        }
    }

    /// `first` or `last`.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandTag::First => "first",
            CommandTag::Last => "last",
        }
    }
}

/// The wording of the note after cut output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationNote {
    /// `\n\n[output truncated: showing the first N of M characters]`, with
    /// M the real length.
    Endless,
    /// `\n[Output truncated: showing first N of N characters]`: the
    /// reference measures the output after cutting it.
    Reference,
}

/// Why a protocol could not be set up. Callers add the flag or key.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// `--protocol` / `[agent] protocol` named no known profile.
    #[error("unknown protocol profile {0:?} (expected \"endless\", \"reference\" or \"tools\")")]
    UnknownProfile(String),
    /// `[agent] command_tag` is neither `first` nor `last`.
    #[error("unknown command tag choice {0:?} (expected \"first\" or \"last\")")]
    UnknownCommandTag(String),
    /// `[agent] system_prompt_file` could not be read.
    #[error("cannot read system prompt file {path}: {source}")]
    PromptFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `[agent] system_prompt_file` holds only whitespace.
    #[error("system prompt file {0} is empty")]
    EmptyPromptFile(PathBuf),
}

/// The protocol an episode follows: one implementation, with the switches
/// in which the two [`Profile`]s differ (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Protocol {
    /// The profile the switches started from.
    pub profile: Profile,
    /// `true`: a done action anywhere in a reply ends the episode before
    /// any command of that reply runs (reference). `false`: a done action
    /// after the command lets the command run, then ends the episode.
    pub done_anywhere: bool,
    /// Which `<command>` tag runs.
    pub command_tag: CommandTag,
    /// Report the exit code as `0` (success) or `1` (anything else,
    /// timeouts included) instead of the real code.
    pub binary_exit_code: bool,
    /// The user message after a reply with neither a command nor done.
    pub corrective_message: String,
    /// How cut output is marked.
    pub truncation_note: TruncationNote,
    /// Replies act through tool calls (`bash`, `finish`) instead of tags,
    /// and observations answer the calls (the `tools` profile).
    pub tool_calls: bool,
    /// The system message of every episode.
    #[serde(skip)]
    pub system_prompt: String,
    /// Where `system_prompt` was read from (`None`: ours, built in).
    pub system_prompt_file: Option<PathBuf>,
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol::endless()
    }
}

impl Protocol {
    /// This project's protocol.
    pub fn endless() -> Self {
        Protocol {
            profile: Profile::Endless,
            done_anywhere: false,
            command_tag: CommandTag::Last,
            binary_exit_code: false,
            corrective_message: CORRECTIVE_MESSAGE.to_string(),
            truncation_note: TruncationNote::Endless,
            tool_calls: false,
            system_prompt: SYSTEM_PROMPT.to_string(),
            system_prompt_file: None,
        }
    }

    /// Tool calls: ours, acting through `bash` and `finish` calls.
    pub fn tools() -> Self {
        Protocol {
            profile: Profile::Tools,
            corrective_message: TOOLS_CORRECTIVE_MESSAGE.to_string(),
            tool_calls: true,
            system_prompt: TOOLS_SYSTEM_PROMPT.to_string(),
            ..Protocol::endless()
        }
    }

    /// The reference's protocol (with our system prompt; see
    /// [`Protocol::with_system_prompt_file`]).
    pub fn reference() -> Self {
        Protocol {
            profile: Profile::Reference,
            done_anywhere: true,
            command_tag: CommandTag::Last,
            binary_exit_code: true,
            corrective_message: REFERENCE_CORRECTIVE_MESSAGE.to_string(),
            truncation_note: TruncationNote::Reference,
            tool_calls: false,
            system_prompt: SYSTEM_PROMPT.to_string(),
            system_prompt_file: None,
        }
    }

    /// The switches of `profile`.
    pub fn of(profile: Profile) -> Self {
        match profile {
            Profile::Endless => Protocol::endless(),
            Profile::Reference => Protocol::reference(),
            Profile::Tools => Protocol::tools(),
        }
    }

    /// The switches of the profile named `name`.
    pub fn named(name: &str) -> Result<Self, ProtocolError> {
        Profile::parse(name).map(Protocol::of)
    }

    /// The switches of `profile`, keeping this protocol's system prompt
    /// when it was read from a file (a server's `system_prompt_file`
    /// applies to every session's profile); else the profile's own.
    pub fn with_profile(&self, profile: Profile) -> Self {
        let own = Protocol::of(profile);
        match &self.system_prompt_file {
            Some(file) => Protocol {
                system_prompt: self.system_prompt.clone(),
                system_prompt_file: Some(file.clone()),
                ..own
            },
            None => own,
        }
    }

    /// The functions offered to the model: `bash` and `finish` under the
    /// `tools` profile, none otherwise.
    pub fn offered_tools(&self) -> Vec<ToolSpec> {
        if self.tool_calls {
            tool_calls::agent_tools()
        } else {
            Vec::new()
        }
    }

    /// Run the `first` or `last` command tag of a reply.
    pub fn with_command_tag(mut self, tag: CommandTag) -> Self {
        self.command_tag = tag;
        self
    }

    /// Use the system prompt in `path` (read now, whole, trailing
    /// whitespace trimmed): for running a model with the exact prompt it
    /// was trained on.
    pub fn with_system_prompt_file(mut self, path: &Path) -> Result<Self, ProtocolError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProtocolError::PromptFile {
            path: path.to_path_buf(),
            source,
        })?;
        let text = text.trim_end();
        if text.trim().is_empty() {
            return Err(ProtocolError::EmptyPromptFile(path.to_path_buf()));
        }
        self.system_prompt = text.to_string();
        self.system_prompt_file = Some(path.to_path_buf());
        Ok(self)
    }

    /// A one-line description: the profile, and the prompt file if any.
    pub fn describe(&self) -> String {
        let mut s = self.profile.as_str().to_string();
        if self.command_tag != Protocol::of(self.profile).command_tag {
            s.push_str(&format!(", {} command tag", self.command_tag.as_str()));
        }
        if let Some(p) = &self.system_prompt_file {
            s.push_str(&format!(", system prompt from {}", p.display()));
        }
        s
    }

    /// Parse a whole assistant message: its tool calls under the `tools`
    /// profile, else its text ([`parse_reply`](Self::parse_reply)).
    pub fn parse_message(&self, reply: &ChatMessage) -> ParsedReply {
        if !self.tool_calls {
            return self.parse_reply(&reply.content);
        }
        let think = pick_tag(&reply.content, "think", CommandTag::Last)
            .map(|(_, body)| body.trim().to_string());
        let turn = tool_calls::read_turn(reply);
        let action = match turn.action {
            ToolAction::Run(cmd) => Action::Command(cmd),
            ToolAction::RunThenFinish(cmd) => Action::CommandThenDone(cmd),
            ToolAction::Finish => Action::Done,
            ToolAction::Invalid(reason) => Action::Malformed(reason),
        };
        ParsedReply {
            think,
            action,
            answers: turn.answers,
        }
    }

    /// A reply as one text, as steps record it: its content, then its
    /// tool calls, if any, as Hermes `<tool_call>` blocks.
    pub fn reply_text(&self, reply: &ChatMessage) -> String {
        if reply.tool_calls.is_empty() {
            reply.content.clone()
        } else {
            render_assistant_text(reply)
        }
    }

    /// The messages that carry `observation` (a command's result or the
    /// corrective message) back to the model after `parsed`: one user
    /// message, or under the `tools` profile an answer to each call.
    pub fn observation_messages(
        &self,
        parsed: &ParsedReply,
        observation: &str,
    ) -> Vec<ChatMessage> {
        tool_calls::answer_messages(&parsed.answers, observation)
    }

    /// Parse a model reply under this protocol's switches.
    ///
    /// `<command>done</command>` and `<action>done</action>` mean done.
    /// With `done_anywhere`, a done action anywhere wins over every command
    /// (the reference searches `DONE_RE` first). Otherwise a done action
    /// after the chosen command makes it [`Action::CommandThenDone`], and one
    /// before it is ignored. Under the `tools` profile the text's Hermes
    /// `<tool_call>` blocks are read (see [`parse_message`](Self::parse_message)).
    pub fn parse_reply(&self, text: &str) -> ParsedReply {
        if self.tool_calls {
            return self.parse_message(&ChatMessage::assistant(text));
        }
        let think =
            pick_tag(text, "think", CommandTag::Last).map(|(_, body)| body.trim().to_string());
        let command = pick_tag(text, "command", self.command_tag);
        let done = all_tags(text, "action")
            .into_iter()
            .filter(|(_, body)| body.trim().eq_ignore_ascii_case("done"))
            .map(|(pos, _)| pos)
            .next_back();
        if self.done_anywhere && done.is_some() {
            return ParsedReply {
                think,
                action: Action::Done,
                answers: Answers::User,
            };
        }
        let action = match (command, done) {
            (Some((cpos, body)), done) => {
                let cmd = body.trim();
                if cmd.eq_ignore_ascii_case("done") {
                    Action::Done
                } else if cmd.is_empty() {
                    Action::Malformed("the <command> tag is empty".into())
                } else if done.is_some_and(|d| d > cpos) {
                    Action::CommandThenDone(cmd.to_string())
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
        ParsedReply {
            think,
            action,
            answers: Answers::User,
        }
    }

    /// Cut `output` to `max` characters, with this protocol's note.
    pub fn truncate_output(&self, output: &str, max: usize) -> String {
        let total = output.chars().count();
        if total <= max {
            return output.to_string();
        }
        let kept: String = output.chars().take(max).collect();
        match self.truncation_note {
            TruncationNote::Endless => format!(
                "{kept}\n\n[output truncated: showing the first {max} of {total} characters]"
            ),
            TruncationNote::Reference => {
                format!("{kept}\n[Output truncated: showing first {max} of {max} characters]")
            }
        }
    }

    /// The observation for a finished command.
    pub fn format_observation(&self, result: &ExecResult, timeout_secs: f64) -> String {
        if self.binary_exit_code {
            // train/sky_endless.py: a timeout is a failure whose output is
            // the timeout message; every other failure is exit code 1.
            let output = if result.timed_out {
                format!("Command timed out after {timeout_secs}s")
            } else {
                self.truncate_output(&result.output, MAX_OBSERVATION_CHARS)
            };
            return match (result.timed_out, result.exit_code) {
                (false, Some(0)) => {
                    format!("Command executed successfully. Output: {output}\n\n(exit_code=0)")
                }
                _ => format!("Command failed. Output: {output}\n\n(exit_code=1)"),
            };
        }
        let output = self.truncate_output(&result.output, MAX_OBSERVATION_CHARS);
        if result.timed_out {
            return format!(
                "Command timed out after {timeout_secs} seconds and was interrupted. Output: {output}\n\n(exit_code=timeout)"
            );
        }
        match result.exit_code {
            Some(0) => format!("Command executed successfully. Output: {output}\n\n(exit_code=0)"),
            Some(code) => format!("Command failed. Output: {output}\n\n(exit_code={code})"),
            None => {
                format!("Command failed: the shell ended. Output: {output}\n\n(exit_code=unknown)")
            }
        }
    }
}

/// What the model asked for in one reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run this shell command.
    Command(String),
    /// Run this shell command, then end the episode: the reply also said
    /// done, after the command (the `endless` profile only).
    CommandThenDone(String),
    /// The agent says the task is complete.
    Done,
    /// Neither a command nor done; `reason` says what was wrong.
    Malformed(String),
}

/// A parsed reply: the reasoning (if any), the action, and how its
/// observation is addressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReply {
    /// The reasoning inside `<think>`, if the reply had any.
    pub think: Option<String>,
    /// What the reply asks for.
    pub action: Action,
    /// Who the observation answers: the user turn, or each tool call.
    pub answers: Answers,
}

/// The first user message: the task instruction.
pub fn initial_user_message(instruction: &str) -> String {
    instruction.trim().to_string()
}

/// The prompt every episode starts from: the profile's system message and
/// the task's instruction as the first user message. `endless eval`,
/// `endless serve` and the exported datasets all give a policy exactly these.
pub fn initial_messages(protocol: &Protocol, instruction: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(protocol.system_prompt.clone()),
        ChatMessage::user(initial_user_message(instruction)),
    ]
}

/// Parse a model reply under the `endless` profile (see
/// [`Protocol::parse_reply`]).
pub fn parse_reply(text: &str) -> ParsedReply {
    Protocol::endless().parse_reply(text)
}

/// Every complete `<tag>...</tag>` in `text`: start offsets and bodies.
/// Tolerates bodies spanning lines.
fn all_tags<'a>(text: &'a str, tag: &str) -> Vec<(usize, &'a str)> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find(&open) {
        let start = from + rel;
        let body_start = start + open.len();
        match text[body_start..].find(&close) {
            Some(end) => {
                found.push((start, &text[body_start..body_start + end]));
                from = body_start + end + close.len();
            }
            None => break,
        }
    }
    found
}

/// The first or last complete `<tag>...</tag>` in `text`.
fn pick_tag<'a>(text: &'a str, tag: &str, which: CommandTag) -> Option<(usize, &'a str)> {
    let tags = all_tags(text, tag);
    match which {
        CommandTag::First => tags.first().copied(),
        CommandTag::Last => tags.last().copied(),
    }
}

/// Cut `output` to `max` characters, with the `endless` profile's note.
pub fn truncate_output(output: &str, max: usize) -> String {
    Protocol::endless().truncate_output(output, max)
}

/// The observation for a finished command, under the `endless` profile.
pub fn format_observation(result: &ExecResult, timeout_secs: f64) -> String {
    Protocol::endless().format_observation(result, timeout_secs)
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
            Action::CommandThenDone("ls".into())
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

    /// The same replies under both profiles.
    #[test]
    fn profiles_parse_the_same_replies_their_own_way() {
        let ours = Protocol::endless();
        let reference = Protocol::reference();
        let done_with_command =
            "<think>ok</think><command>touch /tmp/x</command><action>done</action>";
        assert_eq!(
            ours.parse_reply(done_with_command).action,
            Action::CommandThenDone("touch /tmp/x".into())
        );
        assert_eq!(
            reference.parse_reply(done_with_command).action,
            Action::Done
        );
        // done before the command: ignored by ours, final for the reference
        let done_first = "<action>done</action><command>ls</command>";
        assert_eq!(
            ours.parse_reply(done_first).action,
            Action::Command("ls".into())
        );
        assert_eq!(reference.parse_reply(done_first).action, Action::Done);
        let two = "<command>ls</command> or <command>pwd</command>";
        assert_eq!(ours.parse_reply(two).action, Action::Command("pwd".into()));
        assert_eq!(
            reference.parse_reply(two).action,
            Action::Command("pwd".into())
        );
        let first = Protocol::reference().with_command_tag(CommandTag::First);
        assert_eq!(first.parse_reply(two).action, Action::Command("ls".into()));
        for p in [&ours, &reference] {
            assert!(matches!(
                p.parse_reply("hello").action,
                Action::Malformed(_)
            ));
        }
    }

    #[test]
    fn profiles_word_a_failing_command_their_own_way() {
        let failed = exec("no such file\n", Some(2), false);
        assert_eq!(
            Protocol::endless().format_observation(&failed, 60.0),
            "Command failed. Output: no such file\n\n\n(exit_code=2)"
        );
        assert_eq!(
            Protocol::reference().format_observation(&failed, 60.0),
            "Command failed. Output: no such file\n\n\n(exit_code=1)"
        );
        let ok = exec("hi", Some(0), false);
        for p in [Protocol::endless(), Protocol::reference()] {
            assert_eq!(
                p.format_observation(&ok, 60.0),
                "Command executed successfully. Output: hi\n\n(exit_code=0)"
            );
        }
        let slow = exec("partial", None, true);
        assert_eq!(
            Protocol::reference().format_observation(&slow, 30.0),
            "Command failed. Output: Command timed out after 30s\n\n(exit_code=1)"
        );
        let died = exec("", None, false);
        assert!(Protocol::reference()
            .format_observation(&died, 30.0)
            .ends_with("(exit_code=1)"));
    }

    #[test]
    fn profiles_note_truncation_their_own_way() {
        let long = "x".repeat(12);
        assert_eq!(
            Protocol::endless().truncate_output(&long, 10),
            format!(
                "{}\n\n[output truncated: showing the first 10 of 12 characters]",
                "x".repeat(10)
            )
        );
        assert_eq!(
            Protocol::reference().truncate_output(&long, 10),
            format!(
                "{}\n[Output truncated: showing first 10 of 10 characters]",
                "x".repeat(10)
            )
        );
        assert_ne!(
            Protocol::endless().corrective_message,
            Protocol::reference().corrective_message
        );
    }

    #[test]
    fn names_and_prompt_files() {
        assert_eq!(
            Protocol::named("reference").unwrap().profile,
            Profile::Reference
        );
        assert_eq!(Protocol::named(" Endless ").unwrap(), Protocol::endless());
        let e = Protocol::named("ours").unwrap_err().to_string();
        assert!(
            e.contains("\"ours\"") && e.contains("reference") && e.contains("tools"),
            "{e}"
        );
        assert_eq!(Protocol::named("TOOLS").unwrap(), Protocol::tools());
        assert!(CommandTag::parse("middle").is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prompt.txt");
        std::fs::write(&path, "Be a shell agent.\n\n").unwrap();
        let p = Protocol::reference()
            .with_system_prompt_file(&path)
            .unwrap();
        assert_eq!(p.system_prompt, "Be a shell agent.");
        assert!(p.describe().contains("prompt.txt"));
        // a session's profile keeps the server's prompt file
        let q = p.with_profile(Profile::Endless);
        assert_eq!(
            (q.profile, q.system_prompt.as_str()),
            (Profile::Endless, "Be a shell agent.")
        );
        let missing = dir.path().join("nope.txt");
        let e = Protocol::endless()
            .with_system_prompt_file(&missing)
            .unwrap_err();
        assert!(e.to_string().contains("nope.txt"), "{e}");
        std::fs::write(&path, " \n").unwrap();
        assert!(Protocol::endless().with_system_prompt_file(&path).is_err());
    }

    /// The `tools` profile reads calls, not tags, and answers each call.
    #[test]
    fn the_tools_profile_reads_calls_and_answers_them() {
        use crate::llm::{Role, ToolCall};
        let tools = Protocol::tools();
        assert_eq!(tools.system_prompt, TOOLS_SYSTEM_PROMPT);
        let names: Vec<String> = tools.offered_tools().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["bash", "finish"]);
        assert!(Protocol::endless().offered_tools().is_empty());
        // the tags of the text profiles are not actions here
        assert!(matches!(
            tools.parse_reply("<command>ls</command>").action,
            Action::Malformed(_)
        ));
        let hermes = "<think>check</think><tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>";
        let parsed = tools.parse_reply(hermes);
        assert_eq!(
            (parsed.action.clone(), parsed.think.as_deref()),
            (Action::Command("ls".into()), Some("check"))
        );
        let msgs = tools.observation_messages(&parsed, "OUT");
        assert_eq!(
            msgs,
            vec![ChatMessage::user("<tool_response>\nOUT\n</tool_response>")]
        );
        let reply = ChatMessage::assistant_calls(
            "<think>done?</think>",
            vec![ToolCall::new("c9", "finish", "{}")],
        );
        assert_eq!(tools.parse_message(&reply).action, Action::Done);
        assert!(tools
            .reply_text(&reply)
            .contains("<tool_call>\n{\"arguments\":{},\"name\":\"finish\"}"));
        let reply = ChatMessage::assistant_calls(
            "",
            vec![ToolCall::new("c1", "bash", "{\"command\":\"pwd\"}")],
        );
        let parsed = tools.parse_message(&reply);
        let msgs = tools.observation_messages(&parsed, "OUT");
        assert_eq!(
            (msgs[0].role, msgs[0].tool_call_id.as_deref()),
            (Role::Tool, Some("c1"))
        );
        // the text profiles ignore tool calls and answer with a user message
        let text =
            Protocol::endless().parse_message(&ChatMessage::assistant("<command>ls</command>"));
        assert_eq!(
            Protocol::endless().observation_messages(&text, "OUT"),
            vec![ChatMessage::user("OUT")]
        );
        // a session's tools profile keeps its own prompt unless the server's came from a file
        assert_eq!(
            Protocol::endless().with_profile(Profile::Tools),
            Protocol::tools()
        );
    }
}
