//! The four stages, each a function from a candidate to either the next
//! stage or a reject reason.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::candidate::{stage_key, Candidate};
use super::config::Shared;
use super::funnel::Stage;
use super::initial_tests::{InitialTests, TestsDecision};
use super::prompts::PromptName;
use super::record::Exchange;
use super::reply::section;
use crate::agent::{run_rollouts, BackendProvider, EndReason, RolloutConfig};
use crate::llm::{ChatMessage, LlmError, SamplingParams};
use crate::sandbox::SessionOptions;
use crate::task::{Baseline, EnvKind, Solvability, FINAL_TESTS, INITIAL_TESTS};
use crate::verify::{verify, TestReport, TestSet};

/// A candidate was rejected at this stage for this reason.
pub type Reject = (Stage, String);

/// Why a candidate stopped before the end of the stages.
#[derive(Debug)]
pub enum Stop {
    /// Rejected: the candidate itself failed a stage.
    Reject(Stage, String),
    /// Infrastructure failed at this stage (the model server, or every
    /// solution episode): no judgement of the candidate.
    Infra(Stage, String),
}

impl From<Reject> for Stop {
    fn from((stage, reason): Reject) -> Stop {
        Stop::Reject(stage, reason)
    }
}

/// Ask the generator model, keeping the exchange in the candidate's log. A
/// failure of the server ([`LlmError::is_infrastructure`]) is
/// [`Stop::Infra`]; a request the server refuses is a rejection.
pub async fn ask(
    shared: &Shared,
    cand: &mut Candidate,
    stage: Stage,
    attempt: u32,
    messages: &[ChatMessage],
    params: &SamplingParams,
) -> Result<String, Stop> {
    let t0 = Instant::now();
    let reply = shared
        .generator
        .chat(messages, params)
        .await
        .map_err(|e: LlmError| {
            if e.is_infrastructure() {
                Stop::Infra(stage, e.to_string())
            } else {
                Stop::Reject(stage, format!("generator model failed: {e}"))
            }
        })?;
    shared.answered.fetch_add(1, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    cand.usage.add(reply.usage);
    cand.log.push(Exchange {
        stage,
        attempt,
        prompt: messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default(),
        reply: reply.content.clone(),
        seconds: secs,
        prompt_tokens: reply.usage.prompt_tokens,
        completion_tokens: reply.usage.completion_tokens,
    });
    Ok(reply.content)
}

/// Stage 1: a user-style task in `<task>` and the privileged truth in `<truth>`.
pub async fn task(shared: &Shared, cand: &mut Candidate) -> Result<(), Stop> {
    let stage = Stage::Task;
    let attempt = cand.attempt(stage);
    let level = cand.spec.level.level.to_string();
    let prompt = shared
        .prompts
        .render(
            PromptName::Task,
            &[
                ("category", &cand.spec.category),
                ("complexity", &level),
                ("complexity_name", &cand.spec.level.name),
                ("complexity_description", &cand.spec.level.description),
                ("scenario", &cand.spec.scenario),
                ("home", "/home/user"),
                ("tools", SANDBOX_TOOLS),
            ],
        )
        .map_err(|e| (stage, e.to_string()))?;
    cand.prompt_hashes
        .insert(stage_key(stage).into(), prompt.template_hash);
    let reply = ask(
        shared,
        cand,
        stage,
        attempt,
        &[ChatMessage::user(prompt.text)],
        &shared.config.task_sampling,
    )
    .await?;
    cand.task.instruction = section(&reply, "task").map_err(|e| (stage, e.to_string()))?;
    cand.task.truth = section(&reply, "truth").map_err(|e| (stage, e.to_string()))?;
    cand.task.meta.task.name = cand
        .task
        .instruction
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(80)
        .collect();
    Ok(())
}

/// What the sandbox base offers, told to the model so it does not ask for the impossible.
pub const SANDBOX_TOOLS: &str = "bash, coreutils, findutils, grep, sed, mawk (awk), tar, gzip, bzip2, xz, zip/unzip, sqlite3, git, jq, bc, file, procps, and python3 (standard library only)";

pub fn sandbox_facts(shared: &Shared) -> String {
    format!(
        "a Linux sandbox; the agent's session has no network. The agent works as the unprivileged user `user` (uid 1000) with HOME=/home/user and cannot use sudo. Available tools: {SANDBOX_TOOLS}. {} The environment definition runs once as root to build the initial state ({}).",
        if shared.config.allow_installs {
            "The environment definition may install software the task needs (`apt-get update && apt-get install -y ...`, `pip install ...`): it runs with network access, the agent's session does not."
        } else {
            "Nothing can be installed."
        },
        match shared.config.definition {
            EnvKind::SetupSh => "a bash script run with the definition's own directory as the working directory",
            EnvKind::ApptainerDef => "an Apptainer definition: its %post section runs as root; %files may only copy files you do not have, so write data in %post",
            EnvKind::Dockerfile => "a Dockerfile: FROM is mapped to the sandbox base; RUN, ENV, WORKDIR and USER are supported",
        }
    )
}

pub fn definition_instructions(kind: EnvKind) -> (&'static str, &'static str) {
    match kind {
        EnvKind::SetupSh => ("setup", "a bash script run as root that creates every initial file (use heredocs or printf), then runs `chown -R user:user /home/user`."),
        EnvKind::ApptainerDef => ("container_def", "an Apptainer definition (Bootstrap: docker, From: ubuntu:22.04) whose %post section creates every initial file and ends with `chown -R user:user /home/user`."),
        EnvKind::Dockerfile => ("dockerfile", "a Dockerfile (FROM ubuntu:22.04) whose RUN steps create every initial file and end with `chown -R user:user /home/user`."),
    }
}

fn failing_summary(report: &TestReport) -> String {
    let mut out = String::new();
    for t in report.tests.iter().filter(|t| !t.passed) {
        out.push_str(&format!(
            "FAILED {}: {}\n",
            t.name,
            t.message.lines().take(8).collect::<Vec<_>>().join("\n")
        ));
    }
    if report.tests.is_empty() {
        let tail: Vec<&str> = report.output.lines().rev().take(30).collect();
        out.push_str("no test ran; pytest said:\n");
        for l in tail.into_iter().rev() {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Run `f` on a blocking thread under the sandbox bound.
async fn in_sandbox<T: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let _permit = shared
        .sandboxes
        .acquire()
        .await
        .expect("semaphore is never closed");
    tokio::task::spawn_blocking(f)
        .await
        .expect("sandbox work does not panic")
}

/// Build the candidate's image and run its initial tests; `Err` is feedback for the model.
async fn build_and_check_initial(shared: &Shared, cand: &Candidate) -> Result<(), String> {
    let backend = shared.backend.clone();
    let task = cand.task.clone();
    in_sandbox(shared, move || {
        let image = backend
            .prepare(&task)
            .map_err(|e| format!("building the environment failed:\n{e}"))?;
        let mut session = backend
            .start(&image, &SessionOptions::default())
            .map_err(|e| format!("starting a session failed: {e}"))?;
        let report = verify(&mut session, &task, TestSet::Initial)
            .map_err(|e| format!("running the initial tests failed: {e}"))?;
        if report.passed {
            Ok(())
        } else {
            Err(format!(
                "the initial-state tests failed on the built environment:\n{}",
                failing_summary(&report)
            ))
        }
    })
    .await
}

/// Stage 2: environment definition + initial tests, built and checked, with
/// up to `max_env_attempts` attempts fed the previous error. Repair rounds fix
/// the environment only; the tests change only when the model says they are
/// wrong (see [`InitialTests`]), and each such change is recorded.
pub async fn environment(shared: &Shared, cand: &mut Candidate) -> Result<(), Stop> {
    let stage = Stage::Environment;
    let kind = shared.config.definition;
    let (tag, instructions) = definition_instructions(kind);
    let facts = sandbox_facts(shared);
    let prompt = shared
        .prompts
        .render(
            PromptName::Environment,
            &[
                ("task", &cand.task.instruction),
                ("truth", &cand.task.truth),
                ("sandbox_facts", &facts),
                ("definition_file", kind.file_name()),
                ("definition_instructions", instructions),
                ("definition_tag", tag),
            ],
        )
        .map_err(|e| (stage, e.to_string()))?;
    cand.prompt_hashes
        .insert(stage_key(stage).into(), prompt.template_hash);
    environment_rounds(shared, cand, vec![ChatMessage::user(prompt.text)], None).await
}

/// Stage 2's attempts: each reply (the first one `first` when given, as a
/// repair's revised bundle is, else asked for with `messages`) is built and
/// its initial tests run; a failure is fed back for the next attempt, up
/// to `max_env_attempts` in all.
pub async fn environment_rounds(
    shared: &Shared,
    cand: &mut Candidate,
    mut messages: Vec<ChatMessage>,
    mut first: Option<String>,
) -> Result<(), Stop> {
    let stage = Stage::Environment;
    let kind = shared.config.definition;
    let (tag, _) = definition_instructions(kind);
    let mut last_error = String::new();
    let mut initial_tests = InitialTests::default();
    for _ in 0..shared.config.max_env_attempts.max(1) {
        let attempt = cand.attempt(stage);
        let t0 = Instant::now();
        let reply = match first.take() {
            Some(reply) => reply,
            None => {
                ask(
                    shared,
                    cand,
                    stage,
                    attempt,
                    &messages,
                    &shared.config.test_sampling,
                )
                .await?
            }
        };
        messages.push(ChatMessage::assistant(reply.clone()));
        let parsed =
            section(&reply, tag).and_then(|d| initial_tests.take(&reply, attempt).map(|t| (d, t)));
        let feedback = match parsed {
            Err(e) => format!("the reply could not be used: {e}"),
            Ok((definition, (tests, decision))) => {
                // Other files (a repaired task's data) stay as they are.
                cand.task.environment.insert(
                    kind.file_name(),
                    definition.into_bytes(),
                    kind == EnvKind::SetupSh,
                );
                cand.task.tests.insert_text(INITIAL_TESTS, tests);
                let note = match decision {
                    TestsDecision::Revised(revision) => {
                        cand.test_revisions.push(revision);
                        ""
                    }
                    TestsDecision::ChangeIgnored => "Your changed <test_initial_state> was ignored (it came without <tests_error>): the environment was checked against the tests as first written.\n",
                    TestsDecision::FirstWritten | TestsDecision::Kept => "",
                };
                match build_and_check_initial(shared, cand).await {
                    Ok(()) => {
                        cand.add_time(stage, t0.elapsed().as_secs_f64());
                        return Ok(());
                    }
                    Err(e) => format!("{note}{e}"),
                }
            }
        };
        cand.add_time(stage, t0.elapsed().as_secs_f64());
        last_error = feedback.clone();
        let repair = shared
            .prompts
            .render(
                PromptName::EnvironmentRepair,
                &[
                    ("stage", "attempt failed"),
                    ("error", &truncate(&feedback, 6000)),
                    ("definition_file", kind.file_name()),
                    ("definition_tag", tag),
                ],
            )
            .map_err(|e| (stage, e.to_string()))?;
        messages.push(ChatMessage::user(repair.text));
    }
    Err(Stop::Reject(
        stage,
        format!(
            "no working environment after {} attempts; last error: {}",
            shared.config.max_env_attempts.max(1),
            last_error.lines().next().unwrap_or("")
        ),
    ))
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[... truncated]", &s[..end])
}

/// Stage 3: completion tests that compile and fail on the initial state.
pub async fn completion_tests(shared: &Shared, cand: &mut Candidate) -> Result<(), Stop> {
    let stage = Stage::CompletionTests;
    let attempt = cand.attempt(stage);
    let initial = cand
        .task
        .tests
        .text(INITIAL_TESTS)
        .unwrap_or("")
        .to_string();
    let prompt = shared
        .prompts
        .render(
            PromptName::FinalTests,
            &[
                ("task", &cand.task.instruction),
                ("truth", &cand.task.truth),
                ("initial_tests", &initial),
            ],
        )
        .map_err(|e| (stage, e.to_string()))?;
    cand.prompt_hashes
        .insert(stage_key(stage).into(), prompt.template_hash);
    let t0 = Instant::now();
    let reply = ask(
        shared,
        cand,
        stage,
        attempt,
        &[ChatMessage::user(prompt.text)],
        &shared.config.test_sampling,
    )
    .await?;
    let tests = section(&reply, "test_final_state").map_err(|e| (stage, e.to_string()))?;
    check_completion_tests(shared, cand, tests, t0).await
}

/// Stage 3's check of completion tests `tests` (however written): they
/// compile, run, and fail on the initial state; their verdicts there are
/// kept as the partial reward's baseline.
pub async fn check_completion_tests(
    shared: &Shared,
    cand: &mut Candidate,
    tests: String,
    t0: Instant,
) -> Result<(), Stop> {
    let stage = Stage::CompletionTests;
    compiles(&tests).map_err(|e| (stage, format!("final tests do not compile: {e}")))?;
    cand.task.tests.insert_text(FINAL_TESTS, tests);
    let backend = shared.backend.clone();
    let task = cand.task.clone();
    let report = in_sandbox(shared, move || -> Result<TestReport, String> {
        let image = backend.prepare(&task).map_err(|e| e.to_string())?;
        let mut session = backend
            .start(&image, &SessionOptions::default())
            .map_err(|e| e.to_string())?;
        verify(&mut session, &task, TestSet::Final).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| (stage, format!("running the final tests failed: {e}")))?;
    cand.add_time(stage, t0.elapsed().as_secs_f64());
    if report.tests.is_empty() {
        return Err(Stop::Reject(
            stage,
            format!(
                "final tests did not run: {}",
                failing_summary(&report).lines().nth(1).unwrap_or("")
            ),
        ));
    }
    if report.passed {
        return Err(Stop::Reject(
            stage,
            "final tests pass on the initial state".into(),
        ));
    }
    // The partial reward's baseline; ignored later if the tests or the
    // environment change after this (its digest no longer matches).
    cand.task.meta.provenance.baseline =
        Some(Baseline::from_verdicts(&cand.task, report.verdicts()));
    Ok(())
}

/// Check Python syntax with the host interpreter.
fn compiles(source: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = dir.path().join("test_final_state.py");
    std::fs::write(&file, source).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])",
        ])
        .arg(&file)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(err
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" "))
    }
}

/// Stage 4: `solutions` episodes with the solver; keep the task when any passes.
/// Returns the record for `[provenance.solvability]`.
pub async fn solvability(shared: &Shared, cand: &mut Candidate) -> Result<Solvability, Stop> {
    let stage = Stage::Solvability;
    cand.attempt(stage);
    let n = shared.config.solutions.max(1);
    let mut config = RolloutConfig::new(shared.config.run_dir.join("solutions").join(&cand.id));
    config.samples = n;
    config.concurrency = shared.config.solve_concurrency.max(1);
    config.max_turns = Some(shared.config.solve_max_turns);
    config.command_timeout = shared.config.command_timeout;
    config.record_cast = true;
    let provider = Arc::new(BackendProvider::new(shared.backend.clone()));
    let t0 = Instant::now();
    let summary = run_rollouts(
        config,
        vec![cand.task.clone()],
        shared.solver.clone(),
        provider,
        None,
    )
    .await
    .map_err(|e| Stop::Infra(stage, format!("solution episodes failed: {e}")))?;
    cand.add_time(stage, t0.elapsed().as_secs_f64());
    let passed = summary.episodes.iter().filter(|e| e.passed).count();
    let errors: Vec<&crate::agent::EpisodeResult> = summary
        .episodes
        .iter()
        .filter(|e| e.end_reason == EndReason::Error)
        .collect();
    for e in &summary.episodes {
        cand.usage.add(e.tokens);
    }
    if passed == 0 && !errors.is_empty() && errors.len() == summary.episodes.len() {
        // No episode measured the candidate: the solver's server or the
        // sandbox failed, not the task.
        return Err(Stop::Infra(
            stage,
            format!(
                "every solution episode ended in an infrastructure error: {}",
                errors[0].error.as_deref().unwrap_or("no error recorded")
            ),
        ));
    }
    let errors = errors.len();
    if passed == 0 {
        let detail = if errors > 0 {
            format!(" ({errors} ended in an error)")
        } else {
            String::new()
        };
        return Err(Stop::Reject(
            stage,
            format!("pass@{n} = 0: none of {n} solution episodes passed{detail}"),
        ));
    }
    let table = crate::eval::pass_at_k_table(&[(summary.episodes.len(), passed)]);
    let count = |n: usize| Some(u32::try_from(n).unwrap_or(u32::MAX));
    Ok(Solvability {
        solver: shared.config.solver_name.clone(),
        samples: count(summary.episodes.len()),
        successes: count(passed),
        pass_at_k: table.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        source: String::new(),
    })
}

/// The optional last stage: audit the solvable candidate as `endless tasks
/// audit` audits a stored task (as `task_id`, the id it is stored under).
/// The report is kept on the candidate (stored with the task or the
/// reject); with [`AuditMode::Reject`](super::config::AuditMode) a finding
/// rejects the candidate, the reason's first line naming the labels.
/// Returns the labels of the findings (empty: clean).
pub async fn audit(
    shared: &Shared,
    cand: &mut Candidate,
    stage_config: &super::config::AuditStage,
    task_id: &str,
) -> Result<Vec<String>, Stop> {
    let stage = Stage::Audit;
    cand.attempt(stage);
    let backend = shared.backend.clone();
    let mut task = cand.task.clone();
    task.meta.task.id = task_id.to_string();
    let options = stage_config.options.clone();
    let t0 = Instant::now();
    let report = in_sandbox(shared, move || {
        crate::audit::audit_task(backend.as_ref(), &task, &options, &|_| true)
    })
    .await
    .ok_or_else(|| (stage, "the audit stopped before its end".to_string()))?;
    cand.add_time(stage, t0.elapsed().as_secs_f64());
    let labels = report.labels();
    let summaries: Vec<String> = report
        .findings()
        .map(|f| format!("[{}] {}", f.label, f.summary))
        .collect();
    cand.audit = Some(report);
    if labels.is_empty() || stage_config.mode == super::config::AuditMode::Flag {
        return Ok(labels);
    }
    Err(Stop::Reject(
        stage,
        format!(
            "audit findings: {}\n{}",
            labels.join(", "),
            summaries.join("\n")
        ),
    ))
}
