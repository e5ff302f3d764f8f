//! The `tools` protocol profile end to end: an `openai:` policy acting
//! through OpenAI tool calls against the fixture server (an oracle-like
//! script passes an offline task in the real sandbox, a looping one is
//! labelled `loop`), a text model reading the tools the Hermes way, and a
//! served session taking `tool_calls` and answering with `tool` messages.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use endless::agent::protocol::Protocol;
use endless::agent::{run_episode, EndReason, EpisodeConfig, NoObserver, PolicyFactory, StepKind};
use endless::llm::{ChatMessage, ChatModel, ChatResponse, LlmError, Role, SamplingParams};
use support::bash_terminal::BashTerminal;
use support::cli::{endless, json};
use support::fixture_llm::{FixtureLlm, Reply, Request};

/// A workspace with one offline task: its path, id and `solve.sh`.
fn workspace() -> (tempfile::TempDir, String, String) {
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "1",
            "--seed",
            "11",
            "--json",
        ],
    ));
    let id = json(&endless(ws.path(), &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let solve =
        std::fs::read_to_string(ws.path().join("tasks").join(&id).join("solution/solve.sh"))
            .unwrap();
    (ws, id, solve)
}

fn eval(ws: &std::path::Path, id: &str, spec: &str, max_turns: &str) -> serde_json::Value {
    json(&endless(
        ws,
        &[
            "eval",
            "--tasks",
            id,
            "--policy",
            spec,
            "--protocol",
            "tools",
            "--max-turns",
            max_turns,
            "--json",
        ],
    ))
}

/// The one episode result an eval wrote under the workspace's runs.
fn episode_result(ws: &std::path::Path, id: &str) -> serde_json::Value {
    let mut found = Vec::new();
    for run in std::fs::read_dir(ws.join("runs")).unwrap().flatten() {
        let path = run.path().join("episodes").join(id).join("0.json");
        if path.exists() {
            found.push(path);
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    serde_json::from_str(&std::fs::read_to_string(&found[0]).unwrap()).unwrap()
}

#[test]
fn an_oracle_like_tool_call_policy_passes_and_a_looping_one_is_labelled_loop() {
    let (ws, id, solve) = workspace();
    let oracle = endless::agent::policy::oracle_command(&solve);
    // Turn 1 calls a function that does not exist (a malformed turn), turn
    // 2 runs the solution through bash, turn 3 finishes.
    let server = FixtureLlm::start(move |req: &Request| match req.turn() {
        0 => Reply::ToolCalls {
            content: Some("<think>Let me try python.</think>".into()),
            calls: vec![("python".into(), "{\"code\": \"1\"}".into())],
        },
        1 => Reply::ToolCalls {
            content: Some("<think>Run the solution.</think>".into()),
            calls: vec![(
                "bash".into(),
                serde_json::json!({ "command": oracle }).to_string(),
            )],
        },
        _ => Reply::finish(),
    });
    let report = eval(ws.path(), &id, &server.spec("tool-model"), "8");
    assert_eq!(
        (&report["episodes"], &report["pass_rate"]),
        (&serde_json::json!(1), &serde_json::json!(1.0)),
        "{report}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(
            r.tool_names(),
            ["bash", "finish"],
            "every request offers the tools"
        );
    }
    // The system prompt is the tools profile's, not the tags'.
    assert_eq!(
        requests[0].messages()[0].1,
        endless::agent::protocol::TOOLS_SYSTEM_PROMPT
    );
    // The unknown function is answered with its error, then the nudge.
    let second = &requests[1];
    let answered = second.tool_messages();
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].0, "call_0_0");
    assert!(
        answered[0].1.contains("unknown function \"python\""),
        "{answered:?}"
    );
    assert_eq!(
        second.last_message(),
        endless::agent::protocol::TOOLS_CORRECTIVE_MESSAGE
    );
    assert_eq!(second.sent_tool_calls()[0]["function"]["name"], "python");
    // The command's observation is the tool message of its call id.
    let third = &requests[2];
    let answered = third.tool_messages();
    assert_eq!(answered.len(), 2);
    assert_eq!(answered[1].0, "call_1_0");
    assert!(
        answered[1].1.ends_with("(exit_code=0)"),
        "{}",
        answered[1].1
    );
    let result = episode_result(ws.path(), &id);
    let steps = result["steps"].as_array().unwrap();
    let kinds: Vec<&str> = steps.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["malformed", "command", "done"], "{result}");
    assert!(steps[1]["command"]
        .as_str()
        .unwrap()
        .starts_with("bash <<'ENDLESS_SOLVE_EOF'"));
    assert!(steps[1]["reply"].as_str().unwrap().contains("<tool_call>"));
    assert_eq!(result["passed"], true);

    // A fork at step 2 re-runs the solution as a `bash` call, answered by a
    // `tool` message, before the next policy goes on from there.
    let next = FixtureLlm::start(|_| Reply::finish());
    let run_id = std::fs::read_dir(ws.path().join("runs"))
        .unwrap()
        .flatten()
        .find(|r| r.path().join("episodes").join(&id).join("0.json").exists())
        .unwrap()
        .file_name();
    let parent = format!("{}/{id}/0", run_id.to_str().unwrap());
    let forked = json(&endless(
        ws.path(),
        &[
            "run",
            &id,
            "--fork",
            &parent,
            "--at-step",
            "2",
            "--policy",
            &next.spec("tool-model"),
            "--protocol",
            "tools",
            "--json",
        ],
    ));
    assert_eq!(forked["passed"], true, "{forked}");
    let asked = next.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].sent_tool_calls()[0]["id"], "replay_1");
    assert_eq!(asked[0].tool_messages()[0].0, "replay_1");

    // A policy that runs `ls` forever is labelled a loop.
    let (ws, id, _) = workspace();
    let looping = FixtureLlm::start(|_| Reply::bash("ls"));
    let report = eval(ws.path(), &id, &looping.spec("tool-model"), "6");
    assert_eq!(report["pass_rate"], serde_json::json!(0.0), "{report}");
    assert_eq!(report["failure_modes"]["loop"], 1, "{report}");
    let result = episode_result(ws.path(), &id);
    assert_eq!(result["end_reason"], "max_turns");
    assert_eq!(result["failure_mode"], "loop");
    assert_eq!(looping.requests().len(), 6);
}

/// A model that reads only text: it answers from a script and keeps every
/// conversation it was sent.
struct TextModel {
    replies: Mutex<Vec<String>>,
    seen: Arc<Mutex<Vec<Vec<ChatMessage>>>>,
}

#[async_trait::async_trait]
impl ChatModel for TextModel {
    fn name(&self) -> &str {
        "text-model"
    }
    async fn chat(
        &self,
        messages: &[ChatMessage],
        _: &SamplingParams,
    ) -> Result<ChatResponse, LlmError> {
        self.seen.lock().unwrap().push(messages.to_vec());
        let mut replies = self.replies.lock().unwrap();
        let content = if replies.is_empty() {
            String::new()
        } else {
            replies.remove(0)
        };
        Ok(ChatResponse {
            content,
            tool_calls: Vec::new(),
            usage: Default::default(),
            finish_reason: Some("stop".into()),
            attempts: 1,
        })
    }
}

#[test]
fn a_text_model_reads_the_tools_the_hermes_way() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = TextModel {
        replies: Mutex::new(vec![
            "<think>Write it.</think>\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"echo hi > out.txt && cat out.txt\"}}\n</tool_call>".into(),
            "<tool_call>\n{\"name\": \"bash\", \"arguments\": \"{broken\"}\n</tool_call>".into(),
            "<tool_call>{\"name\": \"finish\", \"arguments\": {}}</tool_call>".into(),
        ]),
        seen: seen.clone(),
    };
    let policy = PolicyFactory::chat(Arc::new(model), SamplingParams::default());
    let task = endless::task::Task {
        meta: Default::default(),
        instruction: "Write hi to out.txt.".into(),
        truth: String::new(),
        environment: Default::default(),
        tests: Default::default(),
        solution: Default::default(),
    };
    let mut agent = policy.start(&task, 0).unwrap();
    let mut term = BashTerminal::new();
    let config = EpisodeConfig {
        command_timeout: Duration::from_secs(20),
        ..EpisodeConfig::default()
    }
    .with_protocol(Protocol::tools());
    let t = run_episode(
        &task.instruction,
        agent.as_mut(),
        &mut term,
        &config,
        &mut NoObserver,
    );
    assert_eq!((t.end_reason, t.turns()), (EndReason::Done, 3));
    let kinds: Vec<StepKind> = t.steps.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [StepKind::Command, StepKind::Malformed, StepKind::Done]
    );
    assert_eq!(
        std::fs::read_to_string(term.path().join("out.txt")).unwrap(),
        "hi\n"
    );
    let seen = seen.lock().unwrap();
    // The tools are described in the system prompt, the Hermes way.
    let system = &seen[0][0];
    assert_eq!(system.role, Role::System);
    assert!(system
        .content
        .starts_with(endless::agent::protocol::TOOLS_SYSTEM_PROMPT));
    assert!(system.content.contains("<tools>\n{") && system.content.contains("\"name\":\"bash\""));
    assert!(system.content.contains("<tool_call></tool_call> XML tags"));
    // The observation is a user turn of <tool_response> blocks.
    let answer = seen[1].last().unwrap();
    assert_eq!(answer.role, Role::User);
    assert!(
        answer
            .content
            .starts_with("<tool_response>\nCommand executed successfully. Output: hi")
            && answer.content.ends_with("(exit_code=0)\n</tool_response>"),
        "{}",
        answer.content
    );
    // Bad arguments: the call's error, then the nudge, in the same turn.
    let nudge = seen[2].last().unwrap();
    assert!(nudge
        .content
        .contains("Error: the arguments of bash are not valid JSON"));
    assert!(nudge
        .content
        .ends_with(endless::agent::protocol::TOOLS_CORRECTIVE_MESSAGE));
    // The oracle speaks tool calls under this profile too.
    let mut oracle = endless::agent::policy::ScriptedPolicy::new(vec!["echo ok".into()]);
    let mut term = BashTerminal::new();
    let t = run_episode("task", &mut oracle, &mut term, &config, &mut NoObserver);
    assert_eq!((t.end_reason, t.turns()), (EndReason::Done, 2));
    assert_eq!(t.steps[0].command.as_deref(), Some("echo ok"));
}

/// `endless serve` on a random port; killed when dropped.
struct Served {
    child: std::process::Child,
    url: String,
    token: String,
}

impl Served {
    fn start(ws: &std::path::Path) -> Served {
        use std::io::BufRead;
        let token_file = ws.join("serve.token");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
            .arg("--workspace")
            .arg(ws)
            .args(["serve", "--bind", "127.0.0.1:0", "--token-file"])
            .arg(&token_file)
            .env("XDG_CACHE_HOME", ws.join(".cache"))
            .env("XDG_STATE_HOME", ws.join(".state"))
            .env("XDG_CONFIG_HOME", ws.join(".config"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let url = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the server did not say where it listens");
            if let Some(at) = line.find("listening on ") {
                break line[at + "listening on ".len()..].trim().to_string();
            }
        };
        let token = std::fs::read_to_string(&token_file).unwrap();
        let token = token.lines().next().unwrap().trim().to_string();
        Served { child, url, token }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_served_tools_session_takes_tool_calls_and_answers_with_tool_messages() {
    let (ws, id, solve) = workspace();
    let served = Served::start(ws.path());
    let (status, opened) = served
        .post(
            "/v1/sessions",
            serde_json::json!({"task_id": id, "protocol": "tools"}),
        )
        .await;
    assert_eq!(status, 200, "{opened}");
    assert_eq!(opened["protocol"], "tools");
    let tools = opened["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "finish"], "{opened}");
    assert_eq!(
        opened["messages"][0]["content"],
        endless::agent::protocol::TOOLS_SYSTEM_PROMPT
    );
    let step = format!(
        "/v1/sessions/{}/step",
        opened["session_id"].as_str().unwrap()
    );
    let call = |id: &str, name: &str, args: String| serde_json::json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    // Bad arguments: the call is answered with its error, then the nudge.
    let (status, bad) = served
        .post(
            &step,
            serde_json::json!({"message": {"role": "assistant", "content": null, "refusal": null,
                "tool_calls": [call("c1", "bash", "{\"command\": ".into())]}}),
        )
        .await;
    assert_eq!(status, 200, "{bad}");
    assert_eq!(bad["done"], false);
    assert_eq!(bad["info"]["turn"], 1);
    assert_eq!(bad["messages"][0]["role"], "tool");
    assert_eq!(bad["messages"][0]["tool_call_id"], "c1");
    assert!(bad["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));
    assert_eq!(bad["messages"][1]["role"], "user");
    assert_eq!(
        bad["observation"],
        endless::agent::protocol::TOOLS_CORRECTIVE_MESSAGE
    );
    // The solution through bash; a second call in the same reply is not run.
    let oracle = endless::agent::policy::oracle_command(&solve);
    let (status, ran) = served
        .post(
            &step,
            serde_json::json!({"message": {"role": "assistant", "content": "<think>solve</think>",
                "tool_calls": [
                    call("c2", "bash", serde_json::json!({"command": oracle}).to_string()),
                    call("c3", "execute", serde_json::json!({"command": "rm -rf /home/user"}).to_string()),
                ]}}),
        )
        .await;
    assert_eq!(status, 200, "{ran}");
    let messages = ran["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{ran}");
    assert_eq!(
        (&messages[0]["tool_call_id"], &messages[1]["tool_call_id"]),
        (&serde_json::json!("c2"), &serde_json::json!("c3"))
    );
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .ends_with("(exit_code=0)"));
    assert_eq!(messages[0]["content"], ran["observation"]);
    assert_eq!(
        messages[1]["content"],
        endless::agent::tool_calls::NOT_RUN_NOTE
    );
    // A text reply with a Hermes call works too; `finish` ends it, passed.
    let (status, done) = served
        .post(
            &step,
            serde_json::json!({"reply": "<tool_call>{\"name\": \"finish\", \"arguments\": {}}</tool_call>"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (&done["done"], &done["reward"]),
        (&serde_json::json!(true), &serde_json::json!(1.0)),
        "{done}"
    );
    assert_eq!(done["info"]["passed"], true);
    // A body with both forms, or neither, is refused with a clear error.
    let (status, e) = served
        .post(
            &step,
            serde_json::json!({"reply": "x", "message": {"content": "y"}}),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("not both"), "{e}");
}
