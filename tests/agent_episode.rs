//! Episodes against the fixture OpenAI-compatible server and a plain bash
//! terminal: end reasons, failure modes, retries, bad replies, policies.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::Path;
use std::time::Duration;

use endless::agent::protocol::CORRECTIVE_MESSAGE;
use endless::agent::FailureMode;
use endless::agent::{
    run_sandboxed_episode, EndReason, EpisodeConfig, EpisodePaths, EpisodeResult, PolicyFactory,
    PolicyOptions, StepKind,
};
use endless::llm::RetryPolicy;
use support::bash_terminal::{hello_task, BashProvider};
use support::fixture_llm::{FixtureLlm, Reply, Request};

fn fast_options() -> PolicyOptions {
    PolicyOptions {
        retry: RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
        },
        request_timeout: Duration::from_secs(5),
        ..PolicyOptions::default()
    }
}

fn config() -> EpisodeConfig {
    EpisodeConfig {
        max_turns: 8,
        command_timeout: Duration::from_secs(10),
        episode_timeout: None,
        ..EpisodeConfig::default()
    }
}

fn run_with(
    spec: &str,
    options: &PolicyOptions,
    config: &EpisodeConfig,
    dir: &Path,
) -> EpisodeResult {
    let policy = PolicyFactory::from_spec(spec, options).expect("policy spec");
    let task = hello_task("hello", "file_ops", 1);
    let paths = EpisodePaths::new(dir, task.id(), 0);
    run_sandboxed_episode(
        &BashProvider::default(),
        &task,
        0,
        &policy,
        config,
        &paths,
        false,
        None,
    )
    .expect("episode")
}

fn run(server: &FixtureLlm) -> EpisodeResult {
    let dir = tempfile::tempdir().unwrap();
    run_with(
        &server.spec("fixture-model"),
        &fast_options(),
        &config(),
        dir.path(),
    )
}

fn solver(req: &Request) -> Reply {
    match req.turn() {
        0 => Reply::command("echo hello > hello.txt"),
        _ => Reply::done(),
    }
}

#[test]
fn model_solves_task_and_requests_are_well_formed() {
    let server = FixtureLlm::start(solver);
    let r = run(&server);
    assert!(r.passed, "{r:?}");
    assert_eq!(r.end_reason, EndReason::Done);
    assert_eq!(r.failure_mode, None);
    assert_eq!(r.turns, 2);
    assert!(r.tokens.total() > 0);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].body["model"], "fixture-model");
    assert!(reqs[0].body["temperature"].is_number() && reqs[0].body["top_p"].is_number());
    assert!(
        reqs[0].messages()[0].1.contains("<command>"),
        "system prompt first"
    );
    assert_eq!(
        reqs[1].last_message(),
        "Command executed successfully. Output: \n\n(exit_code=0)"
    );
}

#[test]
fn failed_command_observation_uses_reference_wording() {
    let server = FixtureLlm::start(|req| match req.turn() {
        0 => Reply::command("echo oops; exit 3"),
        _ => Reply::done(),
    });
    let r = run(&server);
    assert_eq!(
        server.requests()[1].last_message(),
        "Command failed. Output: oops\n\n\n(exit_code=3)"
    );
    assert_eq!(r.steps[0].exit_code, Some(3));
    assert_eq!(r.end_reason, EndReason::Done);
    assert_eq!(r.failure_mode, Some(FailureMode::PrematureDone));
    assert_eq!(r.earliest_failing_step, Some(0));
}

#[test]
fn repeated_command_is_a_loop() {
    let server = FixtureLlm::start(|_| Reply::command("ls"));
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::MaxTurns);
    assert_eq!(r.turns, 8);
    assert_eq!(r.failure_mode, Some(FailureMode::Loop));
    assert_eq!(r.earliest_failing_step, Some(0));
}

#[test]
fn repeated_pair_is_a_loop_starting_late() {
    let server = FixtureLlm::start(|req| match req.turn() {
        0 => Reply::command("pwd"),
        t if t % 2 == 1 => Reply::command("ls"),
        _ => Reply::command("cat x"),
    });
    let r = run(&server);
    assert_eq!(r.failure_mode, Some(FailureMode::Loop));
    assert_eq!(r.earliest_failing_step, Some(1));
}

#[test]
fn distinct_commands_exhaust_turns() {
    let server = FixtureLlm::start(|req| Reply::command(&format!("echo step {}", req.turn())));
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::MaxTurns);
    assert_eq!(r.failure_mode, Some(FailureMode::TurnExhaustion));
}

#[test]
fn done_without_work_is_premature() {
    let server = FixtureLlm::start(|_| Reply::done());
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::Done);
    assert_eq!(r.turns, 1);
    assert_eq!(r.failure_mode, Some(FailureMode::PrematureDone));
    assert!(!r.passed && r.tests.len() == 1 && !r.tests[0].passed);
}

#[test]
fn malformed_replies_get_corrected_and_cost_turns() {
    let server = FixtureLlm::start(|_| Reply::text("I would like to list files."));
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::MaxTurns);
    assert_eq!(r.turns, 8);
    assert!(r.steps.iter().all(|s| s.kind == StepKind::Malformed));
    assert_eq!(r.failure_mode, Some(FailureMode::FormatError));
    assert_eq!(server.requests()[1].last_message(), CORRECTIVE_MESSAGE);
}

#[test]
fn empty_null_enormous_and_non_utf8_replies_are_handled() {
    let big = format!(
        "<think>{}</think><command>echo hello > hello.txt</command>",
        "x".repeat(3_000_000)
    );
    let mut raw =
        br#"{"choices":[{"message":{"content":"<command>echo hello > hello.txt</command> "#
            .to_vec();
    raw.extend_from_slice(&[0xff, 0xfe, 0xfd]);
    raw.extend_from_slice(br#""}}]}"#);
    let server = FixtureLlm::queue(
        vec![
            Reply::text(""),
            Reply::NullContent,
            Reply::text("x".repeat(2_000_000)),
            Reply::text(big),
            Reply::RawBody(raw),
        ],
        Reply::done(),
    );
    let r = run(&server);
    let kinds: Vec<StepKind> = r.steps.iter().map(|s| s.kind).collect();
    use StepKind::*;
    assert_eq!(
        kinds,
        vec![Malformed, Malformed, Malformed, Command, Command, Done]
    );
    assert!(r.passed, "{:?}", r.error);
}

#[test]
fn garbage_body_is_an_error_not_a_failure() {
    let server = FixtureLlm::queue(
        vec![Reply::RawBody(b"<html>oops</html>".to_vec())],
        Reply::done(),
    );
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::Error);
    assert_eq!(r.failure_mode, Some(FailureMode::Error));
    assert!(
        r.error
            .as_deref()
            .unwrap_or("")
            .contains("not a chat completion"),
        "{:?}",
        r.error
    );
}

#[test]
fn retries_on_429_and_5xx_then_succeeds() {
    let server = FixtureLlm::queue(
        vec![
            Reply::Status {
                code: 429,
                body: "slow down".into(),
                retry_after: Some(0),
            },
            Reply::status(500),
            Reply::status(503),
            Reply::command("echo hello > hello.txt"),
        ],
        Reply::done(),
    );
    let r = run(&server);
    assert!(r.passed, "{:?}", r.error);
    assert_eq!(server.requests().len(), 5);
}

#[test]
fn gives_up_after_max_retries_and_on_client_errors() {
    let server = FixtureLlm::start(|_| Reply::status(502));
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::Error);
    assert!(
        r.error.as_deref().unwrap_or("").contains("HTTP 502"),
        "{:?}",
        r.error
    );
    assert_eq!(server.requests().len(), 5, "1 try + 4 retries");

    let server = FixtureLlm::start(|_| Reply::status(400));
    let r = run(&server);
    assert_eq!(r.end_reason, EndReason::Error);
    assert_eq!(server.requests().len(), 1, "400 is not retried");
}

#[test]
fn slow_replies_time_out_and_are_retried() {
    let server = FixtureLlm::queue(
        vec![Reply::Slow(
            Duration::from_millis(1500),
            Box::new(Reply::done()),
        )],
        Reply::command("echo hello > hello.txt"),
    );
    let mut options = fast_options();
    options.request_timeout = Duration::from_millis(300);
    let server2 =
        FixtureLlm::start(|_| Reply::Slow(Duration::from_millis(1500), Box::new(Reply::done())));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.max_turns = 2;
    let r = run_with(&server.spec("m"), &options, &cfg, dir.path());
    assert_eq!(
        r.steps[0].kind,
        StepKind::Command,
        "the slow first reply was retried"
    );
    options.retry.max_retries = 1;
    let r = run_with(&server2.spec("m"), &options, &cfg, dir.path());
    assert_eq!(r.end_reason, EndReason::Error);
    assert!(
        r.error.as_deref().unwrap_or("").contains("timed out"),
        "{:?}",
        r.error
    );
    assert_eq!(server2.requests().len(), 2);
}

#[test]
fn unreachable_server_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let r = run_with(
        &format!("openai:m@http://127.0.0.1:{port}/v1"),
        &fast_options(),
        &config(),
        dir.path(),
    );
    assert_eq!(r.end_reason, EndReason::Error);
    assert_eq!(r.failure_mode, Some(FailureMode::Error));
    let e = r.error.unwrap_or_default();
    assert!(
        e.contains("cannot reach the model server") && e.contains(&port.to_string()),
        "{e}"
    );
}

#[test]
fn command_and_episode_timeouts() {
    let server = FixtureLlm::queue(vec![Reply::command("sleep 5")], Reply::done());
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.command_timeout = Duration::from_millis(300);
    let r = run_with(&server.spec("m"), &fast_options(), &cfg, dir.path());
    assert!(r.steps[0].timed_out);
    assert!(server.requests()[1]
        .last_message()
        .starts_with("Command timed out after 0.3 seconds"));
    assert_eq!(r.end_reason, EndReason::Done);

    let server = FixtureLlm::start(|_| Reply::command("sleep 5"));
    cfg.command_timeout = Duration::from_secs(10);
    cfg.episode_timeout = Some(Duration::from_millis(500));
    let r = run_with(&server.spec("m"), &fast_options(), &cfg, dir.path());
    assert_eq!(r.end_reason, EndReason::Timeout);
    assert_eq!(r.failure_mode, Some(FailureMode::Timeout));
    assert_eq!(r.earliest_failing_step, Some(0));
}

#[test]
fn oracle_script_and_replay_policies() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_with("oracle", &fast_options(), &config(), dir.path());
    assert!(r.passed, "{r:?}");
    assert_eq!(r.turns, 2);
    assert!(r.steps[0]
        .command
        .as_deref()
        .unwrap()
        .starts_with("bash <<'ENDLESS_SOLVE_EOF'"));
    assert!(r.steps[0].output.contains("solved"));

    let replay_src = dir.path().join("episodes/hello/0.jsonl");
    let dir2 = tempfile::tempdir().unwrap();
    let r2 = run_with(
        &format!("replay:{}", replay_src.display()),
        &fast_options(),
        &config(),
        dir2.path(),
    );
    assert!(r2.passed);
    assert_eq!(r2.steps[0].command, r.steps[0].command);
    let r3 = run_with(
        &format!(
            "replay:{}",
            dir.path().join("episodes/hello/0.json").display()
        ),
        &fast_options(),
        &config(),
        dir2.path(),
    );
    assert!(r3.passed);

    let script = dir.path().join("cmds.sh");
    std::fs::write(&script, "# comment\necho hel > part\necho lo >> part\ntr -d '\\n' < part > hello.txt; echo >> hello.txt\n").unwrap();
    let r4 = run_with(
        &format!("script:{}", script.display()),
        &fast_options(),
        &config(),
        dir2.path(),
    );
    assert!(r4.passed, "{r4:?}");
    assert_eq!(r4.turns, 4);
}

#[test]
fn missing_replay_and_bad_specs_are_clear_errors() {
    let e = PolicyFactory::from_spec("replay:/no/such/episode.jsonl", &PolicyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/no/such/episode.jsonl") && e.contains("cannot read"),
        "{e}"
    );
    let e = PolicyFactory::from_spec("script:", &PolicyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("file path"), "{e}");
    let e = PolicyFactory::from_spec("openai:gpt-4o", &PolicyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("openai:MODEL@URL"), "{e}");
}

#[test]
fn episode_files_are_written() {
    let server = FixtureLlm::start(solver);
    let dir = tempfile::tempdir().unwrap();
    let r = run_with(&server.spec("m"), &fast_options(), &config(), dir.path());
    let base = dir.path().join("episodes/hello");
    let lines = std::fs::read_to_string(base.join("0.jsonl")).unwrap();
    let types: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("start"));
    assert_eq!(types.last().map(String::as_str), Some("end"));
    assert_eq!(types.iter().filter(|t| *t == "step").count(), 2);
    assert!(base.join("0.junit.xml").exists());
    let saved: EpisodeResult =
        serde_json::from_slice(&std::fs::read(base.join("0.json")).unwrap()).unwrap();
    assert_eq!(
        (saved.steps.len(), saved.passed, saved.end_reason),
        (r.steps.len(), r.passed, r.end_reason)
    );
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "task",
        "passed",
        "turns",
        "end_reason",
        "failure_mode",
        "tests",
        "steps",
    ] {
        assert!(json.get(key).is_some(), "run --json needs {key}");
    }
    assert_eq!(json["end_reason"], "done");
    assert!(json["failure_mode"].is_null());
    assert!(json["steps"][0]["command"].is_string() && json["steps"][0]["exit_code"] == 0);
}

#[test]
fn client_sends_key_and_sampling_and_bounds_concurrency() {
    use endless::llm::{ChatMessage, ChatModel, OpenAiChat, OpenAiConfig, SamplingParams};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (f, p) = (in_flight.clone(), peak.clone());
    let server = FixtureLlm::start(move |_| {
        let now = f.fetch_add(1, Ordering::SeqCst) + 1;
        p.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(150));
        f.fetch_sub(1, Ordering::SeqCst);
        Reply::done()
    });
    let mut config = OpenAiConfig::new("m", server.url());
    config.api_key = Some("sekret".into());
    config.max_concurrency = 2;
    let client = Arc::new(OpenAiChat::new(config).unwrap());
    let params = SamplingParams {
        temperature: 0.5,
        top_p: 0.9,
        max_tokens: Some(77),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let (client, params) = (client.clone(), params.clone());
            set.spawn(async move { client.chat(&[ChatMessage::user("hi")], &params).await });
        }
        while let Some(r) = set.join_next().await {
            let r = r.unwrap().unwrap();
            assert!(r.content.contains("done"));
            assert_eq!(r.attempts, 1);
        }
    });
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "at most 2 requests in flight"
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 6);
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sekret"));
    assert_eq!(reqs[0].body["max_tokens"], 77);
    assert_eq!(reqs[0].body["temperature"].as_f64(), Some(0.5));
    assert!((reqs[0].body["top_p"].as_f64().unwrap() - 0.9).abs() < 1e-6);
}
