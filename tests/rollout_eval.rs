//! The rollout engine (tasks x samples, files, resume, errors) and the
//! evaluation reports, against the fixture server and a bash sandbox.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::sync::Arc;
use std::time::Duration;

use endless::agent::FailureMode;
use endless::agent::{
    load_run, run_rollouts, EndReason, PolicyFactory, PolicyOptions, RolloutConfig, RolloutEvent,
};
use endless::eval::{compare_runs, evaluate, format_table, write_markdown_report};
use endless::llm::RetryPolicy;
use support::bash_terminal::{hello_task, BashProvider};
use support::fixture_llm::{FixtureLlm, Reply, Request};

fn options() -> PolicyOptions {
    PolicyOptions {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
        },
        request_timeout: Duration::from_secs(5),
        ..PolicyOptions::default()
    }
}

/// Task "solve-*" is solved, "loop-*" loops, "quit-*" says done at once.
fn behaviour(req: &Request) -> Reply {
    let instruction = req.instruction();
    if instruction.contains("[solve]") {
        match req.turn() {
            0 => Reply::command("echo hello > hello.txt"),
            _ => Reply::done(),
        }
    } else if instruction.contains("[loop]") {
        Reply::command("ls -la")
    } else {
        Reply::done()
    }
}

fn tasks() -> Vec<endless::task::Task> {
    let mut out = Vec::new();
    for (id, cat, cx, tag) in [
        ("solve-1", "files", 1, "[solve]"),
        ("loop-1", "logs", 2, "[loop]"),
        ("quit-1", "logs", 3, "[quit]"),
    ] {
        let mut t = hello_task(id, cat, cx);
        t.instruction = format!("{} {tag}", t.instruction);
        t.meta.agent.max_turns = 6;
        out.push(t);
    }
    out
}

fn config(dir: &std::path::Path) -> RolloutConfig {
    let mut c = RolloutConfig::new(dir);
    c.samples = 4;
    c.concurrency = 6;
    c.command_timeout = Duration::from_secs(10);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_write_files_resume_and_evaluate() {
    let server = FixtureLlm::start(behaviour);
    let dir = tempfile::tempdir().unwrap();
    let policy = PolicyFactory::from_spec(&server.spec("m"), &options()).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let summary = run_rollouts(
        config(dir.path()),
        tasks(),
        policy.clone(),
        Arc::new(BashProvider::default()),
        Some(tx),
    )
    .await
    .unwrap();
    assert_eq!(summary.episodes.len(), 12);
    assert_eq!((summary.ran, summary.resumed), (12, 0));
    let mut finished = 0;
    let mut started = 0;
    while let Ok(ev) = rx.try_recv() {
        match ev {
            RolloutEvent::Finished { .. } => finished += 1,
            RolloutEvent::Started { .. } => started += 1,
            _ => {}
        }
    }
    assert_eq!((started, finished), (12, 12));
    for t in ["solve-1", "loop-1", "quit-1"] {
        for s in 0..4 {
            for ext in ["jsonl", "cast", "junit.xml", "json"] {
                let p = dir.path().join(format!("episodes/{t}/{s}.{ext}"));
                assert!(p.exists(), "{}", p.display());
            }
        }
    }

    let report = evaluate(&summary.episodes);
    assert_eq!(report.episodes, 12);
    assert!((report.pass_rate - 4.0 / 12.0).abs() < 1e-9);
    assert!((report.pass_at_k[&1] - 1.0 / 3.0).abs() < 1e-9);
    assert!((report.pass_at_k[&4] - 1.0 / 3.0).abs() < 1e-9);
    assert_eq!(report.failure_modes[&FailureMode::Loop], 4);
    assert_eq!(report.failure_modes[&FailureMode::PrematureDone], 4);
    assert_eq!(report.failure_modes[&FailureMode::Error], 0);
    assert_eq!(report.per_category["files"].pass_rate, 1.0);
    assert_eq!(report.per_category["logs"].pass_rate, 0.0);
    assert_eq!(
        report.per_complexity["2"].failure_modes[&FailureMode::Loop],
        4
    );
    let json = serde_json::to_value(&report).unwrap();
    for key in [
        "episodes",
        "pass_rate",
        "pass_at_k",
        "failure_modes",
        "per_category",
    ] {
        assert!(json.get(key).is_some(), "eval --json needs {key}");
    }
    assert_eq!(
        json["pass_at_k"]["1"].as_f64().map(|v| (v * 3.0).round()),
        Some(1.0)
    );
    assert_eq!(json["failure_modes"]["turn_exhaustion"], 0);
    assert_eq!(json["failure_modes"]["loop"], 4);
    let table = format_table(&report);
    assert!(
        table.contains("pass@1 33.3%") && table.contains("logs"),
        "{table}"
    );
    let md = write_markdown_report(&report, "fixture run", &dir.path().join("report")).unwrap();
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("| loop | 4 |") && text.contains("| files | 4 | 0 | 4 | 100.0% |"),
        "{text}"
    );
    for png in ["pass_rate_by_category.png", "failure_modes.png"] {
        let bytes = std::fs::read(dir.path().join("report").join(png)).unwrap();
        assert_eq!(&bytes[..4], b"\x89PNG");
    }

    // Running the same command again resumes: nothing re-runs.
    let again = run_rollouts(
        config(dir.path()),
        tasks(),
        policy.clone(),
        Arc::new(BashProvider::default()),
        None,
    )
    .await
    .unwrap();
    assert_eq!((again.ran, again.resumed), (0, 12));
    let key = |e: &endless::agent::EpisodeResult| {
        (
            e.task.clone(),
            e.sample,
            e.passed,
            e.turns,
            e.end_reason,
            e.failure_mode,
        )
    };
    assert!(again
        .episodes
        .iter()
        .map(key)
        .eq(summary.episodes.iter().map(key)));

    // A crash mid-episode leaves a trajectory but no result, or the result
    // recorded for it as interrupted: only those re-run, even where
    // infrastructure errors are not retried (they had no result before).
    std::fs::remove_file(dir.path().join("episodes/loop-1/2.json")).unwrap();
    let third = dir.path().join("episodes/loop-1/3.json");
    let mut interrupted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&third).unwrap()).unwrap();
    interrupted["end_reason"] = "interrupted".into();
    std::fs::write(&third, interrupted.to_string()).unwrap();
    let before = server.requests().len();
    let mut no_retry = config(dir.path());
    no_retry.retry_errors = false;
    let resumed = run_rollouts(
        no_retry,
        tasks(),
        policy,
        Arc::new(BashProvider::default()),
        None,
    )
    .await
    .unwrap();
    assert_eq!((resumed.ran, resumed.resumed), (2, 10));
    assert_eq!(
        server.requests().len() - before,
        12,
        "two looping episodes of 6 turns"
    );
    assert_eq!(load_run(dir.path()).len(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_marked_and_the_run_continues() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let policy =
        PolicyFactory::from_spec(&format!("openai:m@http://127.0.0.1:{port}/v1"), &options())
            .unwrap();
    let summary = run_rollouts(
        config(dir.path()),
        tasks(),
        policy,
        Arc::new(BashProvider::default()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(summary.episodes.len(), 12);
    assert!(summary
        .episodes
        .iter()
        .all(|e| e.end_reason == EndReason::Error));
    let report = evaluate(&summary.episodes);
    assert_eq!(
        (report.errors, report.failure_modes[&FailureMode::Error]),
        (12, 12)
    );
    assert_eq!(report.pass_rate, 0.0);

    // Errors re-run on resume (here: the server is now up and solves everything).
    let server = FixtureLlm::start(|req| match req.turn() {
        0 => Reply::command("echo hello > hello.txt"),
        _ => Reply::done(),
    });
    let policy = PolicyFactory::from_spec(&server.spec("m"), &options()).unwrap();
    let fixed = run_rollouts(
        config(dir.path()),
        tasks(),
        policy,
        Arc::new(BashProvider::default()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(fixed.ran, 12);
    assert!(fixed.episodes.iter().all(|e| e.passed));
    let cmp = compare_runs(&summary.episodes, &fixed.episodes);
    assert_eq!(
        cmp.newly_solved.len(),
        0,
        "error episodes do not count as tried"
    );
    assert_eq!(cmp.only_in_b.len(), 3);

    // A sandbox that fails to start gives error episodes, not a failed run.
    let dir2 = tempfile::tempdir().unwrap();
    let broken = BashProvider {
        fail_start: Some("no backend".into()),
    };
    let s = run_rollouts(
        config(dir2.path()),
        tasks(),
        PolicyFactory::Oracle,
        Arc::new(broken),
        None,
    )
    .await
    .unwrap();
    assert!(s.episodes.iter().all(|e| e.end_reason == EndReason::Error
        && e.error.as_deref().unwrap_or("").contains("no backend")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_rollouts_and_run_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let a = run_rollouts(
        config(dir.path()),
        tasks(),
        PolicyFactory::Oracle,
        Arc::new(BashProvider::default()),
        None,
    )
    .await
    .unwrap();
    assert!(a.episodes.iter().all(|e| e.passed && e.turns == 2));
    let server = FixtureLlm::start(behaviour);
    let dir2 = tempfile::tempdir().unwrap();
    let policy = PolicyFactory::from_spec(&server.spec("m"), &options()).unwrap();
    let b = run_rollouts(
        config(dir2.path()),
        tasks(),
        policy,
        Arc::new(BashProvider::default()),
        None,
    )
    .await
    .unwrap();
    let cmp = compare_runs(&a.episodes, &b.episodes);
    let failed: Vec<&str> = cmp.newly_failed.iter().map(|f| f.task.as_str()).collect();
    assert_eq!(failed, vec!["loop-1", "quit-1"]);
    assert!(cmp.newly_solved.is_empty());
    assert_eq!(cmp.pass_rate_a, 1.0);

    let bench = endless::bench::rollout::bench_rollout(
        Arc::new(BashProvider::default()),
        tasks(),
        4,
        4,
        dir.path(),
    )
    .await
    .unwrap();
    assert_eq!((bench.episodes, bench.passed, bench.errors), (12, 12, 0));
    assert!(bench.episodes_per_minute > 0.0 && bench.mean_exec_secs > 0.0);
    assert!(bench.summary().contains("episodes/min"));
}

const FINAL_UPPER: &str = r#"
def test_output_upper():
    assert open("/home/user/out.txt").read() == "HELLO\n", "out.txt must hold HELLO"
"#;

fn upper_task(id: &str) -> endless::task::Task {
    let mut t = hello_task(id, "text", 1);
    t.instruction = "Upper-case ~/data/a.txt into ~/out.txt".into();
    t.tests = Default::default();
    t.tests.insert_text("test_final_state.py", FINAL_UPPER);
    t.environment.insert_text(
        "setup.sh",
        "mkdir -p /home/user/data\necho hello > /home/user/data/a.txt\n",
    );
    t.solution = Default::default();
    t.solution.insert(
        "solve.sh",
        b"tr a-z A-Z < ~/data/a.txt > ~/out.txt\n".to_vec(),
        true,
    );
    t
}

/// Episodes on the real local sandbox (skips where it cannot run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_sandbox_oracle_and_model_episodes() {
    if !std::path::Path::new(endless::verify::PYTHON).exists() {
        eprintln!("SKIP: {} is missing", endless::verify::PYTHON);
        return;
    }
    let cache = tempfile::Builder::new()
        .prefix("endless-agent-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let backend = match endless::sandbox::local::LocalBackend::new(cache.path()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            return;
        }
    };
    let provider = Arc::new(endless::agent::BackendProvider::new(Arc::new(backend)));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.samples = 2;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = run_rollouts(
        cfg,
        vec![upper_task("upper")],
        PolicyFactory::Oracle,
        provider.clone(),
        Some(tx),
    )
    .await
    .unwrap();
    for e in &s.episodes {
        assert!(e.passed, "{e:?}");
        assert_eq!(e.tests[0].name, "test_final_state::test_output_upper");
        assert!(e.timings.sandbox_start_secs > 0.0 && e.timings.verify_secs > 0.0);
    }
    for ext in ["jsonl", "cast", "junit.xml", "json"] {
        assert!(
            dir.path().join(format!("episodes/upper/1.{ext}")).exists(),
            "{ext}"
        );
    }
    let mut streams = 0;
    while let Ok(ev) = rx.try_recv() {
        if let RolloutEvent::Started {
            stream: Some(_), ..
        } = ev
        {
            streams += 1;
        }
    }
    assert_eq!(
        streams, 2,
        "every started episode offers its live byte stream"
    );

    // A model that says done at once: premature done, with the failing test named.
    let server = FixtureLlm::start(|req| match req.turn() {
        0 => Reply::command("cat ~/data/a.txt"),
        _ => Reply::done(),
    });
    let dir2 = tempfile::tempdir().unwrap();
    let mut cfg = config(dir2.path());
    cfg.samples = 1;
    let policy = PolicyFactory::from_spec(&server.spec("m"), &options()).unwrap();
    let s = run_rollouts(cfg, vec![upper_task("upper")], policy, provider, None)
        .await
        .unwrap();
    let e = &s.episodes[0];
    assert_eq!(e.failure_mode, Some(FailureMode::PrematureDone), "{e:?}");
    assert_eq!(e.steps[0].output.trim_end(), "hello");
    assert!(
        !e.tests[0].passed
            && e.tests[0]
                .message
                .as_deref()
                .unwrap_or("")
                .contains("HELLO")
    );
    assert!(server.requests()[1]
        .last_message()
        .starts_with("Command executed successfully. Output: hello"));
}

/// Throughput of oracle episodes on the real sandbox; run with
/// `cargo test --test rollout_eval bench_ -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_oracle_rollouts_on_local_sandbox() {
    let cache = tempfile::Builder::new()
        .prefix("endless-bench-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let Ok(backend) = endless::sandbox::local::LocalBackend::new(cache.path()) else {
        eprintln!("SKIP: local backend unavailable");
        return;
    };
    let provider = Arc::new(endless::agent::BackendProvider::new(Arc::new(backend)));
    let tasks: Vec<_> = (0..8).map(|i| upper_task(&format!("upper-{i}"))).collect();
    let work = tempfile::tempdir().unwrap();
    for concurrency in [1, 4] {
        let b = endless::bench::rollout::bench_rollout(
            provider.clone(),
            tasks.clone(),
            4,
            concurrency,
            work.path(),
        )
        .await
        .unwrap();
        eprintln!("{}", b.summary());
        assert_eq!(b.passed, 32);
    }
    let cache2 = tempfile::Builder::new()
        .prefix("endless-bench-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let backend = Arc::new(endless::sandbox::local::LocalBackend::new(cache2.path()).unwrap());
    for concurrency in [1, 4] {
        let b = endless::bench::rollout::bench_rollout_offline(
            backend.clone(),
            8,
            4,
            concurrency,
            7,
            work.path(),
        )
        .await
        .unwrap();
        eprintln!("offline: {}", b.summary());
        assert_eq!(b.errors, 0);
    }
}
