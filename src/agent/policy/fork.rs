//! Forking an episode: a new episode that first re-runs the commands a
//! recorded one ran before step K (the agent's and a human's alike), then
//! lets another policy go on from that state, with the whole conversation
//! so far in front of it.

use std::sync::Arc;

use super::{Policy, PolicyError, PolicyFactory, PolicyReply, PolicySource};
use crate::agent::{EpisodeResult, Step};
use crate::llm::ChatMessage;
use crate::task::Task;

/// The commands of `steps[..at_step]`, in order (steps without a command,
/// such as malformed replies, have nothing to re-run).
pub fn commands_before(steps: &[Step], at_step: usize) -> Vec<String> {
    steps
        .iter()
        .take(at_step)
        .filter_map(|s| s.command.clone())
        .collect()
}

/// Re-runs a parent episode's commands before step `at_step`, then hands
/// over to `then`. Its name is `then`'s: the fork is `then`'s episode,
/// linked to its parent by the result's `forked_from`.
pub struct ForkSource {
    prefix: Arc<Vec<String>>,
    then: PolicyFactory,
}

impl ForkSource {
    /// A fork of `parent` at step `at_step` (0-based, as the inspector
    /// numbers them; `0` re-runs nothing), continued by `then`.
    pub fn new(
        parent: &EpisodeResult,
        at_step: usize,
        then: PolicyFactory,
    ) -> Result<ForkSource, PolicyError> {
        if at_step > parent.steps.len() {
            return Err(PolicyError::Other(format!(
                "--at-step {at_step}: the episode has {} steps (0 to {})",
                parent.steps.len(),
                parent.steps.len().saturating_sub(1)
            )));
        }
        Ok(ForkSource {
            prefix: Arc::new(commands_before(&parent.steps, at_step)),
            then,
        })
    }

    /// How many commands it re-runs first.
    pub fn replayed(&self) -> usize {
        self.prefix.len()
    }
}

impl PolicySource for ForkSource {
    fn name(&self) -> String {
        self.then.name()
    }

    fn start(&self, task: &Task, sample: u32) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(ForkPolicy {
            prefix: self.prefix.clone(),
            next: 0,
            then: self.then.start(task, sample)?,
        }))
    }
}

struct ForkPolicy {
    prefix: Arc<Vec<String>>,
    next: usize,
    then: Box<dyn Policy>,
}

impl Policy for ForkPolicy {
    fn act(&mut self, messages: &[ChatMessage]) -> Result<PolicyReply, PolicyError> {
        match self.prefix.get(self.next) {
            Some(cmd) => {
                self.next += 1;
                Ok(PolicyReply::free(format!(
                    "<think>Re-running step {} of the parent episode.</think>\n<command>{cmd}</command>",
                    self.next
                )))
            }
            None => self.then.act(messages),
        }
    }

    /// Under the `tools` protocol each re-run command is a `bash` call
    /// (id `replay_N`), so the conversation the next policy continues is
    /// one its tools API accepts.
    fn act_with_tools(
        &mut self,
        messages: &[ChatMessage],
        tools: &[crate::llm::ToolSpec],
    ) -> Result<PolicyReply, PolicyError> {
        match self.prefix.get(self.next) {
            Some(cmd) => {
                self.next += 1;
                let call = crate::llm::ToolCall::new(
                    format!("replay_{}", self.next),
                    crate::agent::tool_calls::BASH,
                    serde_json::json!({ "command": cmd }).to_string(),
                );
                Ok(PolicyReply {
                    tool_calls: vec![call],
                    ..PolicyReply::free(format!(
                        "<think>Re-running step {} of the parent episode.</think>",
                        self.next
                    ))
                })
            }
            None => self.then.act_with_tools(messages, tools),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::StepKind;

    #[test]
    fn a_fork_replays_the_parents_commands_then_hands_over() {
        let cmd = |c: &str, kind| Step {
            command: Some(c.into()),
            ..Step::new(1, kind)
        };
        let steps = vec![
            cmd("ls", StepKind::Command),
            Step::new(2, StepKind::Malformed),
            cmd("fix it", StepKind::Human),
            cmd("cat out", StepKind::Command),
        ];
        assert_eq!(commands_before(&steps, 3), ["ls", "fix it"]);
        assert!(commands_before(&steps, 0).is_empty());
        let mut parent = crate::agent::EpisodeResult::failed_to_start(
            crate::agent::EpisodeId {
                task: "t".into(),
                category: String::new(),
                complexity: None,
                sample: 0,
                policy: "script:x".into(),
            },
            String::new(),
            Default::default(),
        );
        parent.steps = steps;
        let then = PolicyFactory::Commands {
            name: "script:next".into(),
            commands: Arc::new(vec!["echo next".into()]),
        };
        assert!(ForkSource::new(&parent, 9, then.clone()).is_err());
        let source = ForkSource::new(&parent, 3, then).unwrap();
        assert_eq!(
            (source.replayed(), source.name()),
            (2, "script:next".to_string())
        );
        let task = crate::task::Task {
            meta: Default::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: Default::default(),
            tests: Default::default(),
            solution: Default::default(),
        };
        let mut p = source.start(&task, 0).unwrap();
        let texts: Vec<String> = (0..4).map(|_| p.act(&[]).unwrap().text).collect();
        assert!(texts[0].contains("<command>ls</command>"));
        assert!(texts[1].contains("<command>fix it</command>"));
        assert!(texts[2].contains("<command>echo next</command>"));
        assert!(texts[3].contains("<action>done</action>"));
    }
}
