//! The four-stage generation pipeline against the fixture OpenAI-compatible
//! server playing generator and solver, on the real sandbox.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use endless::agent::{PolicyFactory, PolicyOptions};
use endless::audit::{AuditOptions, Check};
use endless::generate::config::{AuditMode, AuditStage, PipelineConfig};
use endless::generate::funnel::{CandidateOutcome, Funnel, Stage};
use endless::generate::pipeline::{run_pipeline, InfraFailed};
use endless::llm::{OpenAiChat, OpenAiConfig, RetryPolicy, SamplingParams};
use endless::store::{TaskFilter, Workspace};
use endless::task::EnvKind;
use support::fixture_llm::{FixtureLlm, Reply, Request};

const TASK: &str = "<task>Please write the word hello into ~/out.txt.</task>\n<truth>Initially /home/user exists and /home/user/out.txt does not. Expected: /home/user/out.txt containing hello.</truth>";
const GOOD_ENV: &str = "<setup>\n```bash\nmkdir -p /home/user/docs\necho notes > /home/user/docs/readme.txt\nchown -R user:user /home/user\n```\n</setup>\n<test_initial_state>\nimport os\n\ndef test_home():\n    assert os.path.isfile('/home/user/docs/readme.txt')\n\ndef test_no_output_yet():\n    assert not os.path.exists('/home/user/out.txt')\n</test_initial_state>";
const BROKEN_ENV: &str = "<setup>\necho 'cannot find the data' >&2\nexit 3\n</setup>\n<test_initial_state>\ndef test_x():\n    assert True\n</test_initial_state>";
const GOOD_FINAL: &str = "<test_final_state>\n```python\ndef test_out():\n    assert open('/home/user/out.txt').read().strip() == 'hello', 'out.txt must say hello'\n```\n</test_final_state>";
/// Final tests that accept an empty `out.txt`: only its existence is checked.
const WEAK_FINAL: &str = "<test_final_state>\nimport os\n\ndef test_out():\n    assert os.path.exists('/home/user/out.txt'), 'out.txt is missing'\n</test_final_state>";
const VACUOUS_FINAL: &str =
    "<test_final_state>\ndef test_nothing():\n    assert 1 + 1 == 2\n</test_final_state>";

#[derive(Clone, Copy)]
enum Solver {
    Solves,
    GivesUp,
}

/// A generator/solver that answers by the prompt it is sent.
fn scripted(
    env: &'static str,
    final_tests: &'static str,
    solver: Solver,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |req: &Request| {
        let first = req
            .messages()
            .first()
            .map(|m| m.1.clone())
            .unwrap_or_default();
        if first.contains("You write realistic tasks") {
            Reply::text(TASK)
        } else if first.contains("You build the starting environment") {
            Reply::text(env)
        } else if first.contains("You write the completion check") {
            Reply::text(final_tests)
        } else {
            match (solver, req.turn()) {
                (Solver::Solves, 0) => Reply::command("echo hello > /home/user/out.txt"),
                _ => Reply::done(),
            }
        }
    }
}

struct Run {
    funnel: Funnel,
    ws: tempfile::TempDir,
}

fn pipeline(server: &FixtureLlm, ws_root: &Path, count: usize, seed: u64) -> Funnel {
    pipeline_with(server, ws_root, count, seed, None)
}

/// [`pipeline`] with an audit stage.
fn pipeline_with(
    server: &FixtureLlm,
    ws_root: &Path,
    count: usize,
    seed: u64,
    audit: Option<AuditStage>,
) -> Funnel {
    let url = server.url();
    pipeline_at(&url, &url, ws_root, count, seed, audit).unwrap()
}

/// The pipeline with the model servers at `url` (generator) and
/// `solver_url` (solver).
fn pipeline_at(
    url: &str,
    solver_url: &str,
    ws_root: &Path,
    count: usize,
    seed: u64,
    audit: Option<AuditStage>,
) -> anyhow::Result<Funnel> {
    let cache = ws_root.join(".cache");
    let backend: Arc<dyn endless::sandbox::Backend> =
        endless::sandbox::backend_by_name("local", &cache)
            .unwrap()
            .into();
    let mut cfg = OpenAiConfig::new("fixture-gen", url);
    cfg.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
    };
    cfg.max_concurrency = 8;
    let generator = Arc::new(OpenAiChat::new(cfg).unwrap());
    let solver = PolicyFactory::from_spec(
        &format!("openai:fixture-solver@{solver_url}"),
        &PolicyOptions::default(),
    )
    .unwrap();
    let config = PipelineConfig {
        allow_installs: false,
        count,
        seed,
        run_dir: ws_root.join("runs/gen-test"),
        definition: EnvKind::SetupSh,
        max_env_attempts: 3,
        solutions: 2,
        solve_max_turns: 4,
        solve_concurrency: 2,
        command_timeout: Duration::from_secs(20),
        concurrency: 2,
        sandbox_concurrency: 2,
        task_sampling: SamplingParams::default(),
        test_sampling: SamplingParams::default(),
        generator_name: "fixture-gen".into(),
        solver_name: "fixture-solver".into(),
        shard: None,
        audit,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run_pipeline(
        ws_root.to_path_buf(),
        config,
        generator,
        solver,
        backend,
        None,
    ))
}

fn run(env: &'static str, final_tests: &'static str, solver: Solver) -> (Run, FixtureLlm) {
    let server = FixtureLlm::start(scripted(env, final_tests, solver));
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline(&server, ws.path(), 1, 1);
    (Run { funnel, ws }, server)
}

fn only_reject(funnel: &Funnel) -> (Stage, String) {
    assert_eq!(funnel.sampled, 1);
    let (stage, reasons) = funnel.rejects.iter().next().expect("a reject");
    (*stage, reasons.keys().next().unwrap().clone())
}

#[test]
fn a_good_candidate_is_accepted_with_provenance_and_pass_at_k() {
    let (r, _server) = run(GOOD_ENV, GOOD_FINAL, Solver::Solves);
    assert_eq!(r.funnel.accepted(), 1, "{}", r.funnel);
    let ws = Workspace::open(r.ws.path()).unwrap();
    let rows = ws.list_tasks(&TaskFilter::default()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].pass_at_k.get("1"), Some(&1.0));
    let task = ws.load_task(&rows[0].id).unwrap();
    assert!(task.instruction.contains("hello"));
    assert!(task.truth.contains("Expected"));
    assert!(
        task.tests.contains("test_initial_state.py") && task.tests.contains("test_final_state.py")
    );
    let p = &task.meta.provenance;
    assert_eq!(p.model, "fixture-gen");
    assert_eq!(p.attempts.get("environment"), Some(&1));
    assert!(p.extra.contains_key("prompt_hashes") && p.extra.contains_key("seconds"));
    let record = p.solvability.as_ref().expect("the stage-4 record");
    assert_eq!(record.solver, "fixture-solver");
    assert_eq!((record.samples, record.successes), (Some(2), Some(2)));
    assert_eq!(record.pass_at_k.get("1"), Some(&1.0));
    // Stage 3's run of the final tests on the initial state is the partial
    // reward's baseline, current for the accepted task.
    let baseline = task.baseline().expect("a current baseline");
    assert!(!baseline.failing.is_empty(), "{baseline:?}");
    // The solution episodes are kept as curation material.
    assert!(r
        .ws
        .path()
        .join("runs/gen-test/solutions/cand-1-00000/episodes")
        .is_dir());
}

#[test]
fn final_tests_that_pass_initially_are_rejected_at_stage_3() {
    let (r, _s) = run(GOOD_ENV, VACUOUS_FINAL, Solver::Solves);
    let (stage, reason) = only_reject(&r.funnel);
    assert_eq!(stage, Stage::CompletionTests);
    assert_eq!(reason, "final tests pass on the initial state");
    let rejected = r.ws.path().join("rejected/cand-1-00000");
    assert!(rejected.join("reject.toml").is_file() && rejected.join("log.jsonl").is_file());
    assert!(rejected.join("tests/test_final_state.py").is_file());
}

#[test]
fn a_broken_environment_is_rejected_after_exactly_three_attempts_with_feedback() {
    let (r, server) = run(BROKEN_ENV, GOOD_FINAL, Solver::Solves);
    let (stage, reason) = only_reject(&r.funnel);
    assert_eq!(stage, Stage::Environment);
    assert!(reason.contains("after 3 attempts"), "{reason}");
    let env_requests: Vec<Request> = server
        .requests()
        .into_iter()
        .filter(|q| {
            q.messages()
                .first()
                .is_some_and(|m| m.1.contains("You build the starting environment"))
        })
        .collect();
    assert_eq!(env_requests.len(), 3);
    for q in &env_requests[1..] {
        let last = q.last_message();
        assert!(
            last.contains("That attempt failed") && last.contains("cannot find the data"),
            "{last}"
        );
    }
}

/// The initial tests of stage-2 replies below: these check a file that the
/// setup must create.
const STRICT_TESTS: &str = "<test_initial_state>\nimport os\n\ndef test_readme_exists():\n    assert os.path.isfile('/home/user/docs/readme.txt'), 'readme.txt is missing'\n</test_initial_state>";
const NO_README_SETUP: &str =
    "<setup>\nmkdir -p /home/user/docs\nchown -R user:user /home/user\n</setup>";
const WEAK_TESTS: &str =
    "<test_initial_state>\ndef test_anything():\n    assert True\n</test_initial_state>";

/// Like [`scripted`] with a good candidate, but stage 2 answers `env(turn)`.
fn env_by_turn(
    env: impl Fn(usize) -> String + Send + Sync + 'static,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    let rest = scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves);
    move |req: &Request| {
        let stage2 = req
            .messages()
            .first()
            .is_some_and(|m| m.1.contains("You build the starting environment"));
        if stage2 {
            Reply::text(env(req.turn()))
        } else {
            rest(req)
        }
    }
}

fn env_requests(server: &FixtureLlm) -> Vec<Request> {
    server
        .requests()
        .into_iter()
        .filter(|q| {
            q.messages()
                .first()
                .is_some_and(|m| m.1.contains("You build the starting environment"))
        })
        .collect()
}

#[test]
fn repair_rounds_cannot_weaken_the_initial_tests() {
    // The environment never creates readme.txt; from the second round on, the
    // model also sends tests that pass on anything, without claiming a test error.
    let server = FixtureLlm::start(env_by_turn(|turn| {
        let tests = if turn == 0 { STRICT_TESTS } else { WEAK_TESTS };
        format!("{NO_README_SETUP}\n{tests}")
    }));
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline(&server, ws.path(), 1, 1);
    let (stage, reason) = only_reject(&funnel);
    assert_eq!(stage, Stage::Environment, "judged on the original tests");
    assert!(reason.contains("after 3 attempts"), "{reason}");
    let reqs = env_requests(&server);
    assert_eq!(reqs.len(), 3);
    for q in &reqs[1..] {
        let last = q.last_message();
        assert!(
            last.contains("Fix the environment") && last.contains("<tests_error>"),
            "{last}"
        );
    }
    for q in &reqs[2..] {
        let last = q.last_message();
        assert!(
            last.contains("was ignored") && last.contains("test_readme_exists"),
            "{last}"
        );
    }
    let kept = std::fs::read_to_string(
        ws.path()
            .join("rejected/cand-1-00000/tests/test_initial_state.py"),
    )
    .unwrap();
    assert!(kept.contains("readme.txt"), "{kept}");
}

#[test]
fn a_claimed_test_error_replaces_the_tests_and_is_recorded() {
    // Round 1's tests check a file the truth never mentions; round 2 says so.
    let server = FixtureLlm::start(env_by_turn(|turn| {
        if turn == 0 {
            GOOD_ENV.replace("docs/readme.txt')", "docs/missing.txt')")
        } else {
            format!(
                "<tests_error>test_home checks docs/missing.txt, which the truth never mentions</tests_error>\n{GOOD_ENV}"
            )
        }
    }));
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline(&server, ws.path(), 1, 1);
    assert_eq!(funnel.accepted(), 1, "{funnel}");
    let ws = Workspace::open(ws.path()).unwrap();
    let task = ws.load_task("gen-1-00000").unwrap();
    let tests = task.tests.text("test_initial_state.py").unwrap();
    assert!(tests.contains("docs/readme.txt") && !tests.contains("missing.txt"));
    let p = &task.meta.provenance;
    assert_eq!(p.attempts.get("environment"), Some(&2));
    let revisions = p.extra["initial_test_revisions"].as_array().unwrap();
    assert_eq!(revisions.len(), 1);
    assert_eq!(revisions[0]["round"].as_integer(), Some(2));
    assert!(revisions[0]["reason"]
        .as_str()
        .unwrap()
        .contains("never mentions"));
}

#[test]
fn an_unsolvable_candidate_is_rejected_at_stage_4() {
    let (r, _s) = run(GOOD_ENV, GOOD_FINAL, Solver::GivesUp);
    let (stage, reason) = only_reject(&r.funnel);
    assert_eq!(stage, Stage::Solvability);
    assert!(reason.starts_with("pass@2 = 0"), "{reason}");
}

#[test]
fn malformed_task_replies_are_rejected_at_stage_1() {
    let server = FixtureLlm::start(|_req: &Request| {
        Reply::text("Sure! <task>Do something.</task> (I forgot the truth)")
    });
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline(&server, ws.path(), 1, 1);
    let (stage, reason) = only_reject(&funnel);
    assert_eq!(stage, Stage::Task);
    assert!(reason.contains("<truth>"), "{reason}");
}

#[test]
fn server_errors_are_retried_and_a_killed_run_resumes_without_duplicates() {
    let failures = Arc::new(AtomicUsize::new(0));
    let f = failures.clone();
    let inner = scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves);
    let server = FixtureLlm::start(move |req: &Request| {
        if f.fetch_add(1, Ordering::SeqCst) < 2 {
            Reply::status(500)
        } else {
            inner(req)
        }
    });
    let ws = tempfile::tempdir().unwrap();
    let first = pipeline(&server, ws.path(), 2, 9);
    assert_eq!(first.accepted(), 2, "{first}");
    // A kill after storing a task but before journalling it: the journal entry is lost.
    std::fs::remove_file(ws.path().join("runs/gen-test/candidates/cand-9-00001.json")).unwrap();
    let stage1 = |s: &FixtureLlm| {
        s.requests()
            .iter()
            .filter(|q| {
                q.messages()
                    .first()
                    .is_some_and(|m| m.1.contains("You write realistic tasks"))
            })
            .count()
    };
    let before = stage1(&server);
    let second = pipeline(&server, ws.path(), 3, 9);
    assert_eq!(second.sampled, 3);
    assert_eq!(
        stage1(&server) - before,
        2,
        "only the unfinished candidates run again"
    );
    let ws = Workspace::open(ws.path()).unwrap();
    let ids = ws.task_ids().unwrap();
    assert_eq!(ids, vec!["gen-9-00000", "gen-9-00001", "gen-9-00002"]);
    assert!(matches!(second.accepted(), 3));
    let _ = CandidateOutcome::Accepted {
        task_id: String::new(),
        audit: None,
    };
}

/// `http://127.0.0.1:PORT/v1` on a port nothing listens on (bound, then released).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

/// The stage-1 (task) requests `server` received: one per candidate tried.
fn task_requests(server: &FixtureLlm) -> usize {
    server
        .requests()
        .iter()
        .filter(|q| {
            q.messages()
                .first()
                .is_some_and(|m| m.1.contains("You write realistic tasks"))
        })
        .count()
}

/// The candidates a run's journal holds as finished.
fn journalled(ws: &Path) -> usize {
    std::fs::read_dir(ws.join("runs/gen-test/candidates")).map_or(0, |d| d.count())
}

#[test]
fn a_run_whose_server_never_answers_fails_naming_it_and_rejects_nothing() {
    let url = closed_port_url();
    let ws = tempfile::tempdir().unwrap();
    let err = pipeline_at(&url, &url, ws.path(), 2, 2, None).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains(&url) && message.contains("cannot reach the model server"),
        "{message}"
    );
    let failed = err
        .downcast_ref::<InfraFailed>()
        .expect("the run's own failure, with its funnel");
    let funnel = &failed.funnel;
    assert_eq!(
        (funnel.sampled, funnel.infra_errors),
        (0, 2),
        "infrastructure errors are not finished candidates: {funnel}"
    );
    assert!(funnel.rejects.is_empty(), "{funnel}");
    assert_eq!(
        funnel.infra_reasons[&Stage::Task].values().sum::<usize>(),
        2
    );
    // Nothing was stored as rejected or journalled as finished...
    assert!(!ws.path().join("rejected/cand-2-00000").exists());
    assert_eq!(journalled(ws.path()), 0);
    // ...so the same run resumed against a server that answers does the work.
    let server = FixtureLlm::start(scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves));
    let funnel = pipeline(&server, ws.path(), 2, 2);
    assert_eq!(task_requests(&server), 2, "both candidates are tried again");
    assert_eq!((funnel.accepted(), funnel.infra_errors), (2, 0), "{funnel}");
}

#[test]
fn a_failing_server_is_counted_apart_from_rejections_and_retried_on_resume() {
    // The server answers HTTP 503 to every request of the first candidate
    // it hears from, until it is healed; the other candidate goes through.
    let poisoned: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let healed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (p, h) = (poisoned.clone(), healed.clone());
    let inner = scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves);
    let server = FixtureLlm::start(move |req: &Request| {
        let first = req.messages().first().map(|m| m.1.clone());
        let mut bad = p.lock().unwrap();
        if first
            .as_ref()
            .is_some_and(|f| f.contains("You write realistic tasks"))
        {
            bad.get_or_insert_with(|| first.clone().unwrap_or_default());
        }
        if !h.load(Ordering::SeqCst) && bad.is_some() && *bad == first {
            Reply::status(503)
        } else {
            inner(req)
        }
    });
    let ws = tempfile::tempdir().unwrap();
    let first = pipeline(&server, ws.path(), 2, 9);
    assert_eq!(first.accepted(), 1, "{first}");
    assert_eq!((first.sampled, first.infra_errors), (1, 1), "{first}");
    assert!(first.rejects.is_empty(), "not a rejection: {first}");
    let table = first.to_string();
    assert!(
        table.contains("infrastructure errors") && table.contains("HTTP 503"),
        "{table}"
    );
    let json = serde_json::to_value(&first).unwrap();
    assert_eq!(json["infra_errors"], 1, "{json:#}");
    assert_eq!(
        journalled(ws.path()),
        1,
        "only the accepted one is finished"
    );
    assert!(!ws.path().join("rejected").join("cand-9-00000").exists());
    assert!(!ws.path().join("rejected").join("cand-9-00001").exists());
    // Resumed with the server healed: the failed candidate runs again.
    healed.store(true, Ordering::SeqCst);
    let before = task_requests(&server);
    let second = pipeline(&server, ws.path(), 2, 9);
    assert_eq!(task_requests(&server) - before, 1);
    assert_eq!((second.accepted(), second.infra_errors), (2, 0), "{second}");
}

#[test]
fn a_solver_server_that_never_answers_stops_the_candidate_unjudged() {
    let server = FixtureLlm::start(scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves));
    let solver_url = closed_port_url();
    let ws = tempfile::tempdir().unwrap();
    let err = pipeline_at(&server.url(), &solver_url, ws.path(), 1, 3, None).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("every solution episode ended in an infrastructure error")
            && message.contains(&solver_url),
        "{message}"
    );
    let failed = err.downcast_ref::<InfraFailed>().unwrap();
    assert!(failed.answered, "the generator answered");
    let funnel = &failed.funnel;
    assert_eq!((funnel.sampled, funnel.infra_errors), (0, 1), "{funnel}");
    assert!(
        funnel.infra_reasons.contains_key(&Stage::Solvability),
        "{funnel}"
    );
    assert!(funnel.rejects.is_empty(), "not pass@2 = 0: {funnel}");
    assert_eq!(journalled(ws.path()), 0);
    assert!(!ws.path().join("rejected/cand-3-00000").exists());
}

#[test]
fn old_unreachable_rejections_are_retried_on_resume() {
    // A journal and reject written before infrastructure errors were told
    // apart: the candidate was "rejected" because the server was down.
    let ws = tempfile::tempdir().unwrap();
    let reason = "generator model failed: cannot reach the model server at http://127.0.0.1:9/v1/chat/completions: error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)";
    let journal = ws.path().join("runs/gen-test/candidates");
    std::fs::create_dir_all(&journal).unwrap();
    std::fs::write(
        journal.join("cand-1-00000.json"),
        serde_json::json!({"outcome": "rejected", "stage": "task", "reason": reason}).to_string(),
    )
    .unwrap();
    let rejected = ws.path().join("rejected/cand-1-00000");
    std::fs::create_dir_all(&rejected).unwrap();
    std::fs::write(
        rejected.join("reject.toml"),
        format!("candidate = \"cand-1-00000\"\nstage = \"task\"\nreason = {reason:?}\n"),
    )
    .unwrap();
    let server = FixtureLlm::start(scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves));
    let funnel = pipeline(&server, ws.path(), 1, 1);
    assert_eq!(task_requests(&server), 1, "the server is asked again");
    assert_eq!(funnel.accepted(), 1, "{funnel}");
    assert!(funnel.rejects.is_empty(), "{funnel}");
    assert!(
        !rejected.exists(),
        "the accepted candidate is no longer listed as rejected"
    );
}

#[test]
fn cli_generate_against_a_closed_port_fails_and_the_resumed_run_calls_the_server() {
    let ws = tempfile::tempdir().unwrap();
    let generate = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
            .arg("--workspace")
            .arg(ws.path())
            .args([
                "generate",
                "--count",
                "2",
                "--seed",
                "6",
                "--llm",
                url,
                "--model",
                "fixture",
                "--solutions",
                "2",
                "--json",
            ])
            .env("XDG_CACHE_HOME", ws.path().join(".cache"))
            .env("XDG_STATE_HOME", ws.path().join(".state"))
            .env("XDG_CONFIG_HOME", ws.path().join(".config"))
            .output()
            .unwrap()
    };
    let url = closed_port_url();
    let out = generate(&url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&url) && stderr.contains("cannot reach the model server"),
        "{stderr}"
    );
    // The run is recorded with what happened: nothing finished, two
    // infrastructure errors.
    let recorded = recorded_funnel(ws.path(), "gen-6");
    assert_eq!(recorded["sampled"], 0, "{recorded:#}");
    assert_eq!(recorded["infra_errors"], 2, "{recorded:#}");
    let server = FixtureLlm::start(scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves));
    let out = generate(&server.url());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(task_requests(&server), 2, "the resumed run asks the server");
    let funnel: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(funnel["sampled"], 2, "{funnel:#}");
    assert_eq!(funnel["passed"]["solvability"], 2, "{funnel:#}");
    assert_eq!(funnel["infra_errors"], 0, "{funnel:#}");
}

/// The audit stage with cheap checks: the shortcuts (an empty `out.txt`
/// is one) and the oracle's mutants (skipped: generated tasks carry no
/// oracle, and the stage must say so rather than fail).
fn cheap_audit(mode: AuditMode) -> AuditStage {
    AuditStage {
        mode,
        options: AuditOptions {
            checks: vec![Check::CheapSolutions, Check::WeakTests],
            budget: Duration::from_secs(120),
            ..AuditOptions::default()
        },
    }
}

#[test]
fn the_audit_stage_rejects_tests_that_accept_an_empty_file_and_resumes_without_re_auditing() {
    let server = FixtureLlm::start(scripted(GOOD_ENV, WEAK_FINAL, Solver::Solves));
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline_with(
        &server,
        ws.path(),
        1,
        1,
        Some(cheap_audit(AuditMode::Reject)),
    );
    assert_eq!(funnel.passed.get(&Stage::Solvability), Some(&1), "{funnel}");
    assert_eq!((funnel.accepted(), funnel.audited), (0, 1), "{funnel}");
    let (stage, reason) = only_reject(&funnel);
    assert_eq!(stage, Stage::Audit);
    assert_eq!(reason, "audit findings: cheap-solution");
    assert!(
        funnel.to_string().contains("rejected at Audit:"),
        "{funnel}"
    );
    assert!(Workspace::open(ws.path())
        .unwrap()
        .task_ids()
        .unwrap()
        .is_empty());
    // The reject keeps the audit report, with the shortcut's evidence.
    let rejected = ws.path().join("rejected/cand-1-00000");
    let report = endless::audit::file::read(&rejected)
        .unwrap()
        .expect("audit.json");
    assert_eq!(report.labels(), vec!["cheap-solution".to_string()]);
    let finding = report.findings().next().unwrap();
    assert!(finding.summary.contains("empty-files"), "{finding:?}");
    let weak = report
        .checks
        .iter()
        .find(|c| c.check == Check::WeakTests)
        .unwrap();
    assert_eq!(weak.status.word(), "skipped", "{weak:?}");
    let reject: toml::Value =
        toml::from_str(&std::fs::read_to_string(rejected.join("reject.toml")).unwrap()).unwrap();
    assert_eq!(reject["stage"].as_str(), Some("audit"));
    // A resumed run takes the decision from the journal: no model call, no
    // second audit.
    let stamp = std::fs::metadata(rejected.join("audit.json"))
        .unwrap()
        .modified()
        .unwrap();
    let asked = server.requests().len();
    let again = pipeline_with(
        &server,
        ws.path(),
        1,
        1,
        Some(cheap_audit(AuditMode::Reject)),
    );
    assert_eq!(again, funnel);
    assert_eq!(server.requests().len(), asked);
    let after = std::fs::metadata(rejected.join("audit.json"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(after, stamp);

    // Tests that check the content pass the same audit and are kept.
    let server = FixtureLlm::start(scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves));
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline_with(
        &server,
        ws.path(),
        1,
        1,
        Some(cheap_audit(AuditMode::Reject)),
    );
    assert_eq!((funnel.accepted(), funnel.audited), (1, 1), "{funnel}");
    assert!(funnel.flagged.is_empty(), "{funnel}");
    let row = Workspace::open(ws.path())
        .unwrap()
        .audit_row("gen-1-00000")
        .unwrap()
        .expect("the clean audit is indexed");
    assert!(row.labels.is_empty() && row.findings == 0, "{row:?}");
}

#[test]
fn cli_generate_audit_flag_keeps_the_candidate_and_stores_its_findings() {
    let server = FixtureLlm::start(scripted(GOOD_ENV, WEAK_FINAL, Solver::Solves));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let funnel = endless_in(
        home.path(),
        &ws,
        &[
            "generate",
            "--count",
            "1",
            "--seed",
            "5",
            "--llm",
            &server.url(),
            "--model",
            "fixture",
            "--solutions",
            "1",
            "--audit",
            "flag",
            "--audit-checks",
            "cheap-solutions",
            "--json",
        ],
    );
    assert_eq!(funnel["passed"]["audit"], 1, "{funnel:#}");
    assert_eq!(funnel["audited"], 1, "{funnel:#}");
    assert_eq!(funnel["flagged"]["cheap-solution"], 1, "{funnel:#}");
    // Stored as `tasks audit` stores it: the file beside the task, the index.
    let w = Workspace::open(&ws).unwrap();
    assert!(ws.join("tasks/gen-5-00000/audit.json").is_file());
    let row = w.audit_row("gen-5-00000").unwrap().expect("indexed");
    assert_eq!(row.labels, vec!["cheap-solution".to_string()]);
    assert_eq!(
        w.tasks_with_audit_labels(&["cheap-solution".into()])
            .unwrap(),
        vec!["gen-5-00000".to_string()]
    );
    // ... and current for it: `tasks audit` takes the stored report.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(&ws)
        .args([
            "tasks",
            "audit",
            "gen-5-00000",
            "--checks",
            "cheap-solutions",
            "--json",
        ])
        .env("XDG_CACHE_HOME", home.path().join(".cache"))
        .env("XDG_STATE_HOME", home.path().join(".state"))
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .output()
        .unwrap();
    let outcomes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcomes[0]["resumed"], true, "{outcomes:#}");
    // Bad flags are clear errors.
    for (args, says) in [
        (
            vec!["--audit", "flag", "--audit-checks", "weak"],
            "--audit-checks",
        ),
        (vec!["--offline", "--audit", "flag"], "--offline"),
        (vec!["--audit-checks", "flaky"], "--audit"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
            .arg("--workspace")
            .arg(&ws)
            .args([
                "generate",
                "--count",
                "1",
                "--llm",
                &server.url(),
                "--model",
                "m",
            ])
            .args(&args)
            .env("XDG_CACHE_HOME", home.path().join(".cache"))
            .env("XDG_STATE_HOME", home.path().join(".state"))
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn cli_generate_prints_the_funnel() {
    let server = FixtureLlm::start(scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves));
    let ws = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws.path())
        .args([
            "generate",
            "--count",
            "2",
            "--seed",
            "5",
            "--llm",
            &server.url(),
            "--model",
            "fixture",
            "--solutions",
            "2",
            "--json",
        ])
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .env("XDG_CONFIG_HOME", ws.path().join(".config"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let funnel: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(funnel["sampled"], 2);
    assert_eq!(funnel["passed"]["solvability"], 2, "{funnel:#}");
}

/// Benchmark (run with `cargo test --release --test generate_pipeline bench_ -- --ignored --nocapture`):
/// 50 candidates at concurrency 16 with 200 ms of model latency per call,
/// side by side with the same run at zero latency. The critical-path ideal is
/// the larger of the latency-only path (each candidate needs 3 generator
/// calls and, its solution episodes running in parallel, 2 solver turns; 50
/// candidates at 16 in flight make 4 waves) and the sandbox-bound time (the
/// zero-latency run); the overhead ratio is wall time over that ideal.
#[test]
#[ignore]
fn bench_pipeline_overhead() {
    let (count, concurrency, solutions) = (50usize, 16usize, 4u32);
    let timed = |latency: Duration| -> (f64, usize) {
        let inner = scripted(GOOD_ENV, GOOD_FINAL, Solver::Solves);
        let server =
            FixtureLlm::start(move |req: &Request| Reply::Slow(latency, Box::new(inner(req))));
        let ws = tempfile::tempdir().unwrap();
        let cache = ws.path().join(".cache");
        let backend: Arc<dyn endless::sandbox::Backend> =
            endless::sandbox::backend_by_name("local", &cache)
                .unwrap()
                .into();
        let mut cfg = OpenAiConfig::new("fixture-gen", server.url());
        cfg.max_concurrency = 64;
        let generator = Arc::new(OpenAiChat::new(cfg).unwrap());
        let options = PolicyOptions {
            max_concurrency: 64,
            ..PolicyOptions::default()
        };
        let solver = PolicyFactory::from_spec(&server.spec("fixture-solver"), &options).unwrap();
        let config = PipelineConfig {
            allow_installs: false,
            count,
            seed: 3,
            run_dir: ws.path().join("runs/bench"),
            definition: EnvKind::SetupSh,
            max_env_attempts: 3,
            solutions,
            solve_max_turns: 4,
            solve_concurrency: solutions as usize,
            command_timeout: Duration::from_secs(60),
            concurrency,
            sandbox_concurrency: 4,
            task_sampling: SamplingParams::default(),
            test_sampling: SamplingParams::default(),
            generator_name: "fixture-gen".into(),
            solver_name: "fixture-solver".into(),
            shard: None,
            audit: None,
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let t0 = std::time::Instant::now();
        let funnel = rt
            .block_on(run_pipeline(
                ws.path().to_path_buf(),
                config,
                generator,
                solver,
                backend,
                None,
            ))
            .unwrap();
        assert_eq!(funnel.accepted(), count, "{funnel}");
        (t0.elapsed().as_secs_f64(), server.requests().len())
    };
    let latency = Duration::from_millis(200);
    let (sandbox_bound, _) = timed(Duration::ZERO);
    let (wall, calls) = timed(latency);
    let latency_path = count.div_ceil(concurrency) as f64 * 5.0 * latency.as_secs_f64();
    let ideal = latency_path.max(sandbox_bound);
    println!(
        "{}",
        serde_json::json!({
            "candidates": count, "concurrency": concurrency, "solutions": solutions,
            "latency_ms": 200, "model_calls": calls, "wall_secs": wall,
            "zero_latency_wall_secs": sandbox_bound, "latency_only_path_secs": latency_path,
            "critical_path_ideal_secs": ideal, "overhead_ratio": wall / ideal,
        })
    );
}

/// Prints the funnel of a fixture run whose candidates differ by the category
/// they were sampled with (run with `-- --ignored --nocapture`).
/// A category hash of a request's task (mixed runs).
fn kind(req: &Request) -> u64 {
    let first = req
        .messages()
        .first()
        .map(|m| m.1.clone())
        .unwrap_or_default();
    let task = first.split("<task>").nth(1).unwrap_or(&first).to_string();
    task.bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 5
}

/// A generator/solver whose candidates differ by category: malformed
/// tasks, broken environments, vacuous final tests, unsolvable ones and
/// good ones.
fn mixed_reply(req: &Request) -> Reply {
    let first = req
        .messages()
        .first()
        .map(|m| m.1.clone())
        .unwrap_or_default();
    if first.contains("You write realistic tasks") {
        // The category decides what kind of candidate this is.
        let k = first
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            % 5;
        return Reply::text(match k {
            0 => "<task>no truth given</task>".to_string(),
            _ => TASK.replace("hello", &format!("hello{k}")),
        });
    }
    let k = ["hello1", "hello2", "hello3", "hello4"]
        .iter()
        .position(|w| first.contains(w))
        .map(|p| p as u64 + 1)
        .unwrap_or(kind(req));
    if first.contains("You build the starting environment") {
        Reply::text(if k == 1 { BROKEN_ENV } else { GOOD_ENV })
    } else if first.contains("You write the completion check") {
        Reply::text(if k == 2 {
            VACUOUS_FINAL.to_string()
        } else {
            GOOD_FINAL.replace("hello", &format!("hello{k}"))
        })
    } else {
        let words = ["hello1", "hello2", "hello3", "hello4"];
        let found = words.iter().position(|w| req.instruction().contains(*w));
        let word = found.map_or("hello", |p| words[p]);
        match (found.map_or(0, |p| p as u64 + 1), req.turn()) {
            (3, _) => Reply::done(),
            (_, 0) => Reply::command(&format!("echo {word} > /home/user/out.txt")),
            _ => Reply::done(),
        }
    }
}

#[test]
#[ignore]
fn funnel_of_a_mixed_fixture_run() {
    let server = FixtureLlm::start(mixed_reply);
    let ws = tempfile::tempdir().unwrap();
    let funnel = pipeline(&server, ws.path(), 20, 4);
    println!("{funnel}");
}

/// `endless --workspace WS --create ARGS...` with cache, state and config
/// below `home` (shared by every workspace of a test).
fn endless_in(home: &Path, ws: &Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws)
        .arg("--create")
        .args(args)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".state"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// The funnel a workspace recorded for run `id`.
fn recorded_funnel(ws: &Path, id: &str) -> serde_json::Value {
    let ws = Workspace::open(ws).unwrap();
    let run = ws.list_runs().unwrap().into_iter().find(|r| r.id == id);
    run.unwrap_or_else(|| panic!("no run {id}")).summary
}

#[test]
fn two_llm_generation_shards_merge_to_the_tasks_and_funnel_of_one_run() {
    // Candidates of every kind: the funnel has rejects at each stage.
    let server = FixtureLlm::start(mixed_reply);
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let url = server.url();
    let generate = |ws: &Path, extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--count",
            "10",
            "--seed",
            "4",
            "--llm",
            &url,
            "--model",
            "fixture",
            "--solutions",
            "2",
            "--json",
        ];
        args.extend_from_slice(extra);
        endless_in(home, ws, &args)
    };
    let whole = home.join("whole");
    let unsharded = generate(&whole, &[]);
    assert_eq!(unsharded["sampled"], 10, "{unsharded:#}");

    let main = home.join("main");
    let dir = home.join("gen");
    endless_in(
        home,
        &main,
        &["workspace", "shards", dir.to_str().unwrap(), "--count", "2"],
    );
    let mut sampled = 0;
    for i in 0..2 {
        let part = generate(
            &dir.join(format!("shard-{i}")),
            &["--shard", &format!("{i}/2")],
        );
        sampled += part["sampled"].as_u64().unwrap();
    }
    assert_eq!(sampled, 10, "each candidate is run by exactly one shard");
    let merged = endless_in(
        home,
        &main,
        &["workspace", "merge", dir.to_str().unwrap(), "--json"],
    );
    assert_eq!(merged["finished"], "gen-4", "{merged:#}");
    let ids = |ws: &Path| {
        let ws = Workspace::open(ws).unwrap();
        let mut ids: Vec<String> = ws
            .list_tasks(&TaskFilter::default())
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&main), ids(&whole));
    assert_eq!(
        recorded_funnel(&main, "gen-4"),
        recorded_funnel(&whole, "gen-4")
    );
    // Merging again changes nothing.
    endless_in(
        home,
        &main,
        &["workspace", "merge", dir.to_str().unwrap(), "--json"],
    );
    assert_eq!(
        recorded_funnel(&main, "gen-4"),
        recorded_funnel(&whole, "gen-4")
    );
}
