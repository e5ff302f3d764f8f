//! Failure classification: why a failed episode failed, and where.

use serde::{Deserialize, Serialize};

use super::episode::{EndReason, Step, StepKind};

/// Why an episode failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// The same command, or the same 2-3 command sequence, repeated at least
    /// 3 times in a row.
    Loop,
    /// The turn limit was reached.
    TurnExhaustion,
    /// The conversation outgrew the policy's context window (the
    /// turn-exhaustion family).
    ContextExhausted,
    /// The agent said done but the final tests fail.
    PrematureDone,
    /// At least half of the turns were malformed.
    FormatError,
    /// The episode's wall-clock limit was reached.
    Timeout,
    /// The agent's shell ended or stopped answering (`exit`, `kill -9 $$`,
    /// a trapped busy loop): a failure, counted in the pass rate.
    ShellDied,
    /// The agent exhausted a limit of its session (wall clock, memory,
    /// processes): a failure, counted in the pass rate.
    ResourceLimit,
    /// Infrastructure the agent did not cause failed (policy or model
    /// server, image build, sandbox start, verifier): an error, not a
    /// failure of the agent, left out of the pass rate.
    Error,
}

impl FailureMode {
    /// All modes, in report order.
    pub const ALL: [FailureMode; 9] = [
        FailureMode::Loop,
        FailureMode::TurnExhaustion,
        FailureMode::ContextExhausted,
        FailureMode::PrematureDone,
        FailureMode::FormatError,
        FailureMode::Timeout,
        FailureMode::ShellDied,
        FailureMode::ResourceLimit,
        FailureMode::Error,
    ];

    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Loop => "loop",
            FailureMode::TurnExhaustion => "turn_exhaustion",
            FailureMode::ContextExhausted => "context_exhausted",
            FailureMode::PrematureDone => "premature_done",
            FailureMode::FormatError => "format_error",
            FailureMode::Timeout => "timeout",
            FailureMode::ShellDied => "shell_died",
            FailureMode::ResourceLimit => "resource_limit",
            FailureMode::Error => "error",
        }
    }
}

/// Smallest number of repetitions that makes a loop.
pub const LOOP_REPEATS: usize = 3;
/// Longest repeated command sequence looked for.
pub const LOOP_MAX_PERIOD: usize = 3;

/// Classify a failed episode. Precedence: error, shell died, resource limit,
/// timeout, format error, loop, premature done, context exhaustion, turn
/// exhaustion. Returns the mode and the index (into `steps`) of the earliest
/// failing step: loop: first step of the repeated run; format error: first
/// malformed step; timeout: first timed-out command (else the last step);
/// premature done, context and turn exhaustion: first command with a non-zero exit (else the done step /
/// the last step); error, shell died and resource limit: the last step.
///
/// Only the agent's steps are judged: a human's commands (steps of kind
/// `human`, from a take-over) are skipped, and indices still point into
/// `steps` as recorded.
pub fn classify_failure(steps: &[Step], end_reason: EndReason) -> (FailureMode, Option<u32>) {
    let last = steps
        .iter()
        .rposition(is_agent)
        .or(steps.len().checked_sub(1))
        .map(|i| i as u32);
    let first = |pred: &dyn Fn(&Step) -> bool| {
        steps
            .iter()
            .position(|s| is_agent(s) && pred(s))
            .map(|i| i as u32)
    };
    let agent_steps = steps.iter().filter(|s| is_agent(s)).count();
    match end_reason {
        EndReason::Error | EndReason::Interrupted => return (FailureMode::Error, last),
        EndReason::ShellDied => return (FailureMode::ShellDied, last),
        EndReason::ResourceLimit => return (FailureMode::ResourceLimit, last),
        EndReason::Timeout => return (FailureMode::Timeout, first(&|s| s.timed_out).or(last)),
        _ => {}
    }
    let malformed = steps
        .iter()
        .filter(|s| s.kind == StepKind::Malformed)
        .count();
    if agent_steps > 0 && malformed * 2 >= agent_steps {
        return (
            FailureMode::FormatError,
            first(&|s| s.kind == StepKind::Malformed),
        );
    }
    if let Some(start) = find_loop(steps) {
        return (FailureMode::Loop, Some(start as u32));
    }
    let first_bad = first(&|s| s.kind == StepKind::Command && s.exit_code != Some(0));
    match end_reason {
        EndReason::Done => (FailureMode::PrematureDone, first_bad.or(last)),
        EndReason::ContextExhausted => (FailureMode::ContextExhausted, first_bad.or(last)),
        _ => (FailureMode::TurnExhaustion, first_bad.or(last)),
    }
}

/// Every label that applies to a failed episode, in [`FailureMode::ALL`]
/// order, as the paper counts them (a failure can be a loop and a turn
/// exhaustion at once; on TerminalBench 2 its labels sum to over 100%).
/// Each label has the rule it has as the primary mode, without precedence:
/// loop (a repeated command run), turn exhaustion (ended at the turn limit),
/// context exhaustion (ended when the conversation outgrew the context),
/// premature done (said done, tests fail), format error (at least half the
/// turns malformed), timeout / shell died / resource limit (how the episode
/// ended). The primary mode of [`classify_failure`] is always among them. An
/// infrastructure error gets only `error`: it says nothing about the agent.
pub fn failure_labels(steps: &[Step], end_reason: EndReason) -> Vec<FailureMode> {
    let (primary, _) = classify_failure(steps, end_reason);
    if primary == FailureMode::Error {
        return vec![FailureMode::Error];
    }
    let malformed = steps
        .iter()
        .filter(|s| s.kind == StepKind::Malformed)
        .count();
    let agent_steps = steps.iter().filter(|s| is_agent(s)).count();
    let applies = |m: FailureMode| match m {
        FailureMode::Loop => find_loop(steps).is_some(),
        FailureMode::TurnExhaustion => end_reason == EndReason::MaxTurns,
        FailureMode::ContextExhausted => end_reason == EndReason::ContextExhausted,
        FailureMode::PrematureDone => end_reason == EndReason::Done,
        FailureMode::FormatError => agent_steps > 0 && malformed * 2 >= agent_steps,
        FailureMode::Timeout => end_reason == EndReason::Timeout,
        FailureMode::ShellDied => end_reason == EndReason::ShellDied,
        FailureMode::ResourceLimit => end_reason == EndReason::ResourceLimit,
        FailureMode::Error => false,
    };
    FailureMode::ALL
        .into_iter()
        .filter(|&m| m == primary || applies(m))
        .collect()
}

/// Whether a step is the agent's (not a human's, from a take-over).
fn is_agent(step: &Step) -> bool {
    step.kind != StepKind::Human
}

/// The step index where a loop starts, if the agent's commands contain one
/// (a human's commands are skipped).
pub fn find_loop(steps: &[Step]) -> Option<usize> {
    let cmds: Vec<(usize, &str)> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| is_agent(s))
        .filter_map(|(i, s)| s.command.as_deref().map(|c| (i, c.trim())))
        .collect();
    let mut best: Option<usize> = None;
    for period in 1..=LOOP_MAX_PERIOD {
        let span = period * LOOP_REPEATS;
        if cmds.len() < span {
            break;
        }
        for start in 0..=cmds.len() - span {
            let unit = &cmds[start..start + period];
            let repeats = (1..LOOP_REPEATS).all(|r| {
                let other = &cmds[start + r * period..start + (r + 1) * period];
                unit.iter().zip(other).all(|(a, b)| a.1 == b.1)
            });
            if repeats {
                let at = cmds[start].0;
                best = Some(best.map_or(at, |b: usize| b.min(at)));
                break;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(c: &str, code: i32) -> Step {
        Step {
            command: Some(c.into()),
            exit_code: Some(code),
            ..Step::new(0, StepKind::Command)
        }
    }

    fn kind(k: StepKind) -> Step {
        Step {
            kind: k,
            command: None,
            exit_code: None,
            ..cmd("", 0)
        }
    }

    #[test]
    fn json_names_are_snake_case() {
        for m in FailureMode::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        assert_eq!(FailureMode::ShellDied.as_str(), "shell_died");
        assert_eq!(FailureMode::ResourceLimit.as_str(), "resource_limit");
    }

    #[test]
    fn loops_of_one_two_three() {
        let s: Vec<_> = ["a", "b", "b", "b"].iter().map(|c| cmd(c, 0)).collect();
        assert_eq!(find_loop(&s), Some(1));
        let s: Vec<_> = ["x", "a", "b", "a", "b", "a", "b"]
            .iter()
            .map(|c| cmd(c, 0))
            .collect();
        assert_eq!(find_loop(&s), Some(1));
        let s: Vec<_> = ["a", "b", "c", "a", "b", "c", "a", "b", "c"]
            .iter()
            .map(|c| cmd(c, 0))
            .collect();
        assert_eq!(find_loop(&s), Some(0));
        let s: Vec<_> = ["a", "b", "a", "b", "c"]
            .iter()
            .map(|c| cmd(c, 0))
            .collect();
        assert_eq!(find_loop(&s), None);
        let s: Vec<_> = ["a", "a"].iter().map(|c| cmd(c, 0)).collect();
        assert_eq!(find_loop(&s), None);
    }

    #[test]
    fn a_full_context_is_its_own_label_of_the_turn_exhaustion_family() {
        let s = vec![cmd("ls", 0), cmd("cat big.log", 1)];
        assert_eq!(
            classify_failure(&s, EndReason::ContextExhausted),
            (FailureMode::ContextExhausted, Some(1))
        );
        assert_eq!(
            failure_labels(&s, EndReason::ContextExhausted),
            vec![FailureMode::ContextExhausted]
        );
        let loopy: Vec<_> = ["ls", "ls", "ls"].iter().map(|c| cmd(c, 0)).collect();
        assert_eq!(
            failure_labels(&loopy, EndReason::ContextExhausted),
            vec![FailureMode::Loop, FailureMode::ContextExhausted]
        );
        assert_eq!(FailureMode::ContextExhausted.as_str(), "context_exhausted");
        assert_eq!(EndReason::ContextExhausted.as_str(), "context_exhausted");
        assert!(EndReason::ContextExhausted.is_scored());
        assert!(EndReason::ContextExhausted.can_verify());
    }

    #[test]
    fn labels_overlap_like_the_papers() {
        let labels = |steps: &[Step], end| failure_labels(steps, end);
        // A loop that also runs out of turns: both, loop primary.
        let loopy: Vec<_> = ["ls", "cat a", "ls", "cat a", "ls", "cat a"]
            .iter()
            .map(|c| cmd(c, 0))
            .collect();
        assert_eq!(
            labels(&loopy, EndReason::MaxTurns),
            vec![FailureMode::Loop, FailureMode::TurnExhaustion]
        );
        assert_eq!(
            classify_failure(&loopy, EndReason::MaxTurns).0,
            FailureMode::Loop
        );
        // A premature done after malformed replies: both, format error primary.
        let sloppy = vec![
            kind(StepKind::Malformed),
            kind(StepKind::Malformed),
            cmd("echo hi > out.txt", 0),
            kind(StepKind::Done),
        ];
        assert_eq!(
            labels(&sloppy, EndReason::Done),
            vec![FailureMode::PrematureDone, FailureMode::FormatError]
        );
        assert_eq!(
            classify_failure(&sloppy, EndReason::Done).0,
            FailureMode::FormatError
        );
        // One label when only one applies.
        let plain = vec![cmd("ls", 0), cmd("cat x", 1), kind(StepKind::Done)];
        assert_eq!(
            labels(&plain, EndReason::Done),
            vec![FailureMode::PrematureDone]
        );
        // A loop that ran into the wall clock, and one whose shell died.
        assert_eq!(
            labels(&loopy, EndReason::Timeout),
            vec![FailureMode::Loop, FailureMode::Timeout]
        );
        assert_eq!(
            labels(&loopy, EndReason::ShellDied),
            vec![FailureMode::Loop, FailureMode::ShellDied]
        );
        // Infrastructure errors say nothing about the agent.
        assert_eq!(labels(&loopy, EndReason::Error), vec![FailureMode::Error]);
        // The primary mode is always a label.
        for end in [
            EndReason::Done,
            EndReason::MaxTurns,
            EndReason::Timeout,
            EndReason::ShellDied,
            EndReason::ResourceLimit,
            EndReason::Error,
        ] {
            for steps in [&loopy[..], &sloppy[..], &plain[..], &[][..]] {
                let (primary, _) = classify_failure(steps, end);
                assert!(labels(steps, end).contains(&primary), "{end:?} {steps:?}");
            }
        }
    }

    #[test]
    fn precedence() {
        let loopy: Vec<_> = ["ls", "ls", "ls"].iter().map(|c| cmd(c, 0)).collect();
        assert_eq!(
            classify_failure(&loopy, EndReason::MaxTurns),
            (FailureMode::Loop, Some(0))
        );
        assert_eq!(
            classify_failure(&loopy, EndReason::Error).0,
            FailureMode::Error
        );
        assert_eq!(
            classify_failure(&loopy, EndReason::ShellDied),
            (FailureMode::ShellDied, Some(2))
        );
        assert_eq!(
            classify_failure(&loopy, EndReason::ResourceLimit),
            (FailureMode::ResourceLimit, Some(2))
        );
        let mut s = vec![cmd("ls", 0), cmd("cat x", 1), kind(StepKind::Done)];
        assert_eq!(
            classify_failure(&s, EndReason::Done),
            (FailureMode::PrematureDone, Some(1))
        );
        s = vec![kind(StepKind::Malformed), cmd("ls", 0)];
        assert_eq!(
            classify_failure(&s, EndReason::MaxTurns),
            (FailureMode::FormatError, Some(0))
        );
        s = vec![cmd("a", 0), cmd("b", 0), kind(StepKind::Malformed)];
        assert_eq!(
            classify_failure(&s, EndReason::MaxTurns),
            (FailureMode::TurnExhaustion, Some(2))
        );
    }
    #[test]
    fn a_humans_commands_are_not_judged() {
        let human = |c: &str, code: i32| Step {
            kind: StepKind::Human,
            ..cmd(c, code)
        };
        // Three identical human commands are no loop of the agent's; a
        // failing one is not the agent's first bad command.
        let s = vec![
            cmd("ls", 0),
            human("ls", 0),
            human("ls", 0),
            human("false", 1),
            cmd("cat x", 1),
            kind(StepKind::Done),
        ];
        assert_eq!(find_loop(&s), None);
        assert_eq!(
            classify_failure(&s, EndReason::Done),
            (FailureMode::PrematureDone, Some(4))
        );
        // Half of the agent's steps malformed, however many the human ran.
        let s = vec![
            kind(StepKind::Malformed),
            human("a", 0),
            human("b", 0),
            human("c", 0),
            cmd("ls", 0),
        ];
        assert_eq!(
            classify_failure(&s, EndReason::MaxTurns),
            (FailureMode::FormatError, Some(0))
        );
        assert!(failure_labels(&s, EndReason::MaxTurns).contains(&FailureMode::FormatError));
        // The last step of a dead shell is the agent's last.
        let s = vec![cmd("ls", 0), human("exit", 0)];
        assert_eq!(
            classify_failure(&s, EndReason::ShellDied),
            (FailureMode::ShellDied, Some(0))
        );
    }
}
