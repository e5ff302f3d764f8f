use std::path::Path;

use super::*;
use crate::agent::{
    EndReason, EpisodeId, ForkOf, Step, StepKind, Takeover, Timings, Trajectory as Run,
};
use crate::llm::{ChatMessage, TokenUsage};

fn cmd(turn: u32, kind: StepKind, command: &str, exit: i32, output: &str) -> Step {
    Step {
        command: Some(command.into()),
        exit_code: Some(exit),
        output: output.into(),
        reply: format!("<command>{command}</command>"),
        think: Some(format!("why {command}")),
        tokens: TokenUsage {
            prompt_tokens: 10 * turn as u64,
            completion_tokens: 3,
        },
        policy_secs: 0.5,
        exec_secs: 0.25,
        ..Step::new(turn, kind)
    }
}

fn episode(policy: &str) -> (EpisodeResult, Vec<ChatMessage>) {
    let mut malformed = Step::new(2, StepKind::Malformed);
    malformed.reply = "I will look around".into();
    malformed.error = Some("no <command> in the reply".into());
    let steps = vec![
        cmd(1, StepKind::Command, "ls", 0, "a b"),
        malformed,
        Step {
            think: None,
            reply: String::new(),
            ..cmd(3, StepKind::Human, "touch c", 0, "")
        },
        cmd(3, StepKind::Command, "cat a", 1, "cat: a: No such file"),
        Step {
            reply: "<action>done</action>".into(),
            ..Step::new(4, StepKind::Done)
        },
    ];
    let run = Run {
        messages: Vec::new(),
        steps,
        end_reason: EndReason::Done,
        error: None,
        tokens: TokenUsage {
            prompt_tokens: 100,
            completion_tokens: 9,
        },
        policy_secs: 1.0,
        exec_secs: 1.0,
        agent_secs: 2.0,
        takeover: Some(Takeover {
            turn: 3,
            step: 2,
            at: "2026-01-01T00:00:00Z".into(),
            after_secs: 1.0,
            human_steps: 1,
            held_secs: 2.0,
        }),
    };
    let id = EpisodeId {
        task: "t".into(),
        category: "c".into(),
        complexity: Some(2),
        sample: 1,
        policy: policy.into(),
    };
    let tests = vec![crate::agent::TestOutcome {
        name: "test_x".into(),
        passed: false,
        message: Some("assert False".into()),
    }];
    let result = EpisodeResult::new(id, &run, Ok(tests), Timings::default());
    let messages = vec![
        ChatMessage::system("You are an agent."),
        ChatMessage::user("Make file c."),
    ];
    (result, messages)
}

/// What a trajectory file holding only `messages` records.
fn lines(messages: &[ChatMessage]) -> RecordedLines {
    RecordedLines {
        messages: messages.to_vec(),
        ..RecordedLines::default()
    }
}

fn doc(result: &EpisodeResult, messages: &[ChatMessage]) -> Trajectory {
    episode_to_atif(EpisodeSource {
        run: "eval-1",
        result,
        recorded: &lines(messages),
        tokens: &[],
    })
}

#[test]
fn an_episode_becomes_an_atif_document() {
    let (r, messages) = episode("openai:m1@http://x/v1");
    let d = doc(&r, &messages);
    assert_eq!(d.schema_version, "ATIF-v1.8");
    assert_eq!(d.session_id.as_deref(), Some("eval-1/t/1"));
    assert_eq!(d.agent.model_name.as_deref(), Some("m1"));
    let ids: Vec<u64> = d.steps.iter().map(|s| s.step_id).collect();
    assert_eq!(ids, (1..=7).collect::<Vec<_>>());
    let sources: Vec<Source> = d.steps.iter().map(|s| s.source).collect();
    use Source::*;
    assert_eq!(sources, [System, User, Agent, Agent, User, Agent, Agent]);
    // The command is a bash tool call; its output answers that call.
    let first = &d.steps[2];
    let call = &first.tool_calls.as_ref().unwrap()[0];
    assert_eq!(
        (call.function_name.as_str(), &call.arguments["command"]),
        ("bash", &serde_json::json!("ls"))
    );
    let obs = &first.observation.as_ref().unwrap().results[0];
    assert_eq!(obs.source_call_id.as_ref(), Some(&call.tool_call_id));
    assert_eq!(obs.content, Some(Content::Text("a b".into())));
    let m = first.metrics.as_ref().unwrap();
    assert_eq!((m.prompt_tokens, m.completion_tokens), (Some(10), Some(3)));
    assert_eq!(first.reasoning_content.as_deref(), Some("why ls"));
    // The human's command is a user step, with no agent-only field.
    let human = &d.steps[4];
    assert_eq!(human.message, Content::Text("$ touch c".into()));
    assert!(human.tool_calls.is_none() && human.metrics.is_none());
    // The verdict is in the final metrics.
    let fm = d.final_metrics.as_ref().unwrap();
    let extra = fm.extra.as_ref().unwrap();
    assert_eq!(extra["passed"], false);
    assert_eq!(extra["reward"], 0.0);
    assert_eq!(
        extra["failure_labels"],
        serde_json::json!(["premature_done"])
    );
    assert_eq!(fm.total_prompt_tokens, Some(100));
    assert!(d.extra.as_ref().unwrap()["taken_over"].is_object());
}

#[test]
fn a_deterministic_policy_calls_no_model_and_a_forks_replay_is_copied_context() {
    let (mut r, messages) = episode("oracle");
    r.forked_from = Some(ForkOf {
        run: "eval-0".into(),
        task: "t".into(),
        sample: 0,
        policy: "oracle".into(),
        at_step: 1,
        replayed: 1,
    });
    let d = doc(&r, &messages);
    let agent: Vec<&AtifStep> = d
        .steps
        .iter()
        .filter(|s| s.source == Source::Agent)
        .collect();
    for s in &agent {
        assert_eq!(s.llm_call_count, Some(0));
        assert!(s.metrics.is_none() && s.reasoning_content.is_none());
    }
    assert_eq!(d.steps[2].is_copied_context, Some(true));
    assert_eq!(d.steps[3].is_copied_context, None);
    assert_eq!(d.final_metrics.as_ref().unwrap().total_prompt_tokens, None);
}

#[test]
fn an_exported_episode_reads_back_as_the_same_steps() {
    let (r, messages) = episode("openai:m1@http://x/v1");
    let text = serde_json::to_string(&doc(&r, &messages)).unwrap();
    let back = atif_to_steps(&parse_atif(Path::new("x.json"), &text).unwrap());
    assert_eq!(back.messages[..2], messages[..]);
    assert_eq!(back.steps.len(), r.steps.len());
    for (a, b) in back.steps.iter().zip(&r.steps) {
        assert_eq!(
            (
                a.turn,
                a.kind,
                &a.command,
                a.exit_code,
                &a.output,
                &a.error,
                &a.think
            ),
            (
                b.turn,
                b.kind,
                &b.command,
                b.exit_code,
                &b.output,
                &b.error,
                &b.think
            ),
        );
        if b.kind != StepKind::Human {
            assert_eq!(
                (&a.reply, a.tokens, a.policy_secs),
                (&b.reply, b.tokens, b.policy_secs)
            );
        }
    }
}

#[test]
fn a_foreign_trajectory_maps_tool_calls_to_commands_and_completion_to_done() {
    // Terminus-2's shape: keystrokes in `bash_command`, a completion call.
    let text = serde_json::json!({
        "schema_version": "ATIF-v1.5",
        "session_id": "s",
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "gpt-x"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Create hello.txt"},
            {"step_id": 2, "source": "agent", "message": "Writing it.",
             "tool_calls": [{"tool_call_id": "call_0_1", "function_name": "bash_command",
                             "arguments": {"keystrokes": "echo hi > hello.txt\n", "duration": 0.1}}],
             "observation": {"results": [{"source_call_id": "call_0_1", "content": "$ echo hi > hello.txt"}]},
             "metrics": {"prompt_tokens": 50, "completion_tokens": 7}},
            {"step_id": 3, "source": "agent", "message": "Done.",
             "tool_calls": [{"tool_call_id": "call_1_task_complete", "function_name": "mark_task_complete", "arguments": {}}],
             "observation": {"results": [{"content": [{"type": "text", "text": "ok"}]}]}}
        ]
    })
    .to_string();
    let t = atif_to_steps(&parse_atif(Path::new("trajectory.json"), &text).unwrap());
    assert_eq!(t.steps.len(), 2);
    assert_eq!(t.steps[0].kind, StepKind::Command);
    assert_eq!(t.steps[0].command.as_deref(), Some("echo hi > hello.txt"));
    assert_eq!(t.steps[0].output, "$ echo hi > hello.txt");
    assert_eq!(t.steps[1].kind, StepKind::Done);
    assert_eq!(t.steps[1].output, "ok");
    assert_eq!(t.tokens.prompt_tokens, 50);
}

#[test]
fn malformed_documents_are_refused_naming_the_field() {
    let p = Path::new("agent/trajectory.json");
    let err = |v: serde_json::Value| parse_atif(p, &v.to_string()).unwrap_err().to_string();
    let agent = serde_json::json!({"name": "a", "version": "1"});
    let e = err(serde_json::json!({"schema_version": "ATIF-v1.8", "steps": []}));
    assert!(
        e.contains("agent/trajectory.json") && e.contains("agent"),
        "{e}"
    );
    let e = err(serde_json::json!({"schema_version": "v2", "agent": agent, "steps": []}));
    assert!(e.contains("`schema_version`"), "{e}");
    let e = err(
        serde_json::json!({"schema_version": "ATIF-v1.8", "agent": agent,
        "steps": [{"step_id": 2, "source": "user", "message": "x"}]}),
    );
    assert!(e.contains("`steps[0].step_id`"), "{e}");
    let e = err(
        serde_json::json!({"schema_version": "ATIF-v1.8", "agent": agent,
        "steps": [{"step_id": 1, "source": "robot", "message": "x"}]}),
    );
    assert!(e.contains("steps[0].source"), "{e}");
    let e = err(
        serde_json::json!({"schema_version": "ATIF-v1.8", "agent": agent,
        "steps": [{"step_id": 1, "source": "user", "message": "x",
                   "tool_calls": [{"tool_call_id": "a", "function_name": "bash", "arguments": {}}]}]}),
    );
    assert!(e.contains("`steps[0]`") && e.contains("agent steps"), "{e}");
    assert!(parse_atif(p, "{")
        .unwrap_err()
        .to_string()
        .contains("agent/trajectory.json"));
}

#[test]
fn a_local_policys_tokens_split_into_turns_and_fill_the_metrics() {
    // prompt [1 2], reply [3 4], observation [5], reply [6].
    let tokens = [1, 2, 3, 4, 5, 6];
    let mask = [false, false, true, true, false, true];
    let lp = [0.0, 0.0, -0.5, -0.25, 0.0, -1.0];
    let turns = turns_from_stream(&tokens, &mask, &lp);
    assert_eq!(turns.len(), 2);
    assert_eq!(
        (
            &turns[0].prompt_token_ids,
            &turns[0].completion_token_ids,
            &turns[0].logprobs
        ),
        (&vec![1, 2], &vec![3, 4], &vec![-0.5, -0.25])
    );
    assert_eq!(
        (
            &turns[1].prompt_token_ids[..],
            &turns[1].completion_token_ids[..]
        ),
        (&[1, 2, 3, 4, 5][..], &[6][..])
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.tokens.jsonl");
    write_turn_tokens(&path, &turns).unwrap();
    assert_eq!(read_turn_tokens(&path).unwrap(), turns);
    assert!(read_turn_tokens(&dir.path().join("none"))
        .unwrap()
        .is_empty());
    std::fs::write(&path, "{\"prompt_token_ids\": 3}\n").unwrap();
    let e = read_turn_tokens(&path).unwrap_err().to_string();
    assert!(e.contains("0.tokens.jsonl") && e.contains("line 1"), "{e}");
    // The i-th reply of the policy gets the i-th turn's tokens; a human's
    // command takes none.
    let (r, messages) = episode("local:tiny");
    let d = episode_to_atif(EpisodeSource {
        run: "train",
        result: &r,
        recorded: &lines(&messages),
        tokens: &turns,
    });
    let agent: Vec<&AtifStep> = d
        .steps
        .iter()
        .filter(|s| s.source == Source::Agent)
        .collect();
    let m0 = agent[0].metrics.as_ref().unwrap();
    assert_eq!(m0.completion_token_ids.as_deref(), Some(&[3, 4][..]));
    assert_eq!(m0.logprobs.as_deref(), Some(&[-0.5, -0.25][..]));
    let m1 = agent[1].metrics.as_ref().unwrap();
    assert_eq!(m1.prompt_token_ids.as_ref().map(Vec::len), Some(5));
    assert!(agent[2]
        .metrics
        .as_ref()
        .unwrap()
        .completion_token_ids
        .is_none());
}

#[test]
fn steps_carry_the_times_their_lines_were_recorded() {
    let (r, messages) = episode("openai:m1@http://x/v1");
    let start = "2026-01-01T00:00:00.000001Z";
    let times: Vec<Option<String>> = (0..r.steps.len())
        .map(|i| Some(format!("2026-01-01T00:00:0{}.000000Z", i + 1)))
        .collect();
    let recorded = RecordedLines {
        started_at: Some(start.into()),
        step_times: times.clone(),
        ..lines(&messages)
    };
    let d = episode_to_atif(EpisodeSource {
        run: "eval-1",
        result: &r,
        recorded: &recorded,
        tokens: &[],
    });
    let stamps: Vec<Option<&str>> = d.steps.iter().map(|s| s.timestamp.as_deref()).collect();
    let mut want = vec![Some(start), Some(start)];
    want.extend(times.iter().map(|t| t.as_deref()));
    assert_eq!(stamps, want);
    // A file with a line missing: no step gets another's time.
    let short = RecordedLines {
        step_times: times[1..].to_vec(),
        ..recorded
    };
    let d = episode_to_atif(EpisodeSource {
        run: "eval-1",
        result: &r,
        recorded: &short,
        tokens: &[],
    });
    assert!(d.steps[2..].iter().all(|s| s.timestamp.is_none()));
}

#[test]
fn a_tools_protocol_reply_keeps_its_calls_their_ids_and_every_tool_offered() {
    use crate::agent::tool_calls::{agent_tools, FINISH_NOTE};
    use crate::llm::tools::render_assistant_text;
    let calls = vec![
        crate::llm::ToolCall::new("call_Xy9", "bash", r#"{"command": "touch c"}"#),
        crate::llm::ToolCall::new("call_Zq2", "finish", "{}"),
    ];
    let reply = ChatMessage::assistant_calls("I make c.", calls);
    let messages = vec![
        ChatMessage::system("You are an agent."),
        ChatMessage::user("Make file c."),
        reply.clone(),
        ChatMessage::tool("call_Xy9", "exit code 0\n(no output)"),
        ChatMessage::tool("call_Zq2", FINISH_NOTE),
    ];
    let (mut r, _) = episode("openai:m1@http://x/v1");
    r.steps = vec![Step {
        reply: render_assistant_text(&reply),
        think: None,
        ..cmd(1, StepKind::Done, "touch c", 0, "")
    }];
    r.taken_over = None;
    let tools: Vec<serde_json::Value> = agent_tools().iter().map(|t| t.openai()).collect();
    let recorded = RecordedLines {
        tools: tools.clone(),
        ..lines(&messages)
    };
    let d = episode_to_atif(EpisodeSource {
        run: "serve-x",
        result: &r,
        recorded: &recorded,
        tokens: &[],
    });
    assert_eq!(d.agent.tool_definitions.as_ref(), Some(&tools));
    let step = &d.steps[2];
    assert_eq!(step.message, Content::Text("I make c.".into()));
    let calls = step.tool_calls.as_ref().unwrap();
    let got: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.tool_call_id.as_str(), c.function_name.as_str()))
        .collect();
    assert_eq!(got, [("call_Xy9", "bash"), ("call_Zq2", "finish")]);
    assert_eq!(calls[0].arguments["command"], "touch c");
    let results = &step.observation.as_ref().unwrap().results;
    let answered: Vec<(Option<&str>, String)> = results
        .iter()
        .map(|o| {
            (
                o.source_call_id.as_deref(),
                o.content.as_ref().unwrap().text(),
            )
        })
        .collect();
    assert_eq!(
        answered,
        [
            (Some("call_Xy9"), "exit code 0\n(no output)".to_string()),
            (Some("call_Zq2"), FINISH_NOTE.to_string())
        ]
    );
    assert_eq!(results[0].extra.as_ref().unwrap()["exit_code"], 0);
    assert!(results[1].extra.is_none());
}

#[test]
fn an_episode_without_a_turn_still_has_a_step() {
    let (mut r, _) = episode("harbor:nop");
    r.steps.clear();
    r.taken_over = None;
    let d = doc(&r, &[]);
    assert_eq!(d.steps.len(), 1);
    assert_eq!((d.steps[0].step_id, d.steps[0].source), (1, Source::System));
    assert_eq!(d.final_metrics.unwrap().total_steps, Some(1));
}
