//! `endless episodes import DIR`: a Harbor job (or trial) directory
//! brought into the workspace as a run, `harbor-<job name>`, its episodes
//! written the way endless writes its own (`<n>.json` result, `<n>.jsonl`
//! trajectory, the agent's terminal recording as `<n>.cast` when it made
//! one, and the trial's own ATIF as `<n>.atif.json`), indexed, so
//! that the Episodes view, the inspector, failure labels, ratings and
//! reviews work on it and `workspace rebuild` keeps it. Every trial is
//! read and checked before anything is written; the run directory appears
//! whole (built aside, then renamed) or not at all. Importing a job again
//! under the same run replaces the earlier import when asked (`--replace`);
//! a job with unfinished trials imports its finished ones when asked
//! (`--skip-unfinished`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::harbor_job::{read_job, span, Job, Trial};
use crate::agent::atif::atif_to_steps;
use crate::agent::{
    classify_failure, episode_row, failure_labels, EndReason, EpisodePaths, EpisodeResult, Step,
    StepKind, TestOutcome, Timings,
};
use crate::llm::{ChatMessage, TokenUsage};
use crate::store::Workspace;

/// The run kind of imported runs (and the prefix of their ids).
pub const IMPORTED_KIND: &str = "harbor";

/// What an import did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportReport {
    /// The run created.
    pub run: String,
    /// Its directory.
    pub run_dir: PathBuf,
    /// Episodes imported (one per trial).
    pub episodes: usize,
    /// Of those, passed (reward 1).
    pub passed: usize,
    /// Of those, ended by an error Harbor recorded.
    pub errors: usize,
    /// The trial directories left out because they did not finish.
    pub skipped: Vec<String>,
    /// An earlier import of the run was replaced.
    pub replaced: bool,
}

/// How to import a Harbor job.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// The run id (default: `harbor-<job name>`).
    pub run: Option<String>,
    /// Replace an earlier import under the same run id (its episodes, and
    /// their ratings and labels, are dropped).
    pub replace: bool,
    /// Import the finished trials of a job with unfinished ones.
    pub skip_unfinished: bool,
}

/// A task id endless can use as a directory name.
fn task_id(name: &str) -> String {
    let id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_matches(|c| c == '.' || c == '-').to_string();
    if id.is_empty() {
        "task".into()
    } else {
        id
    }
}

/// The policy spec recorded for a trial: `harbor:AGENT[@MODEL]`.
fn policy(trial: &Trial) -> String {
    let a = &trial.result.agent_info;
    match &a.model_info {
        Some(m) => match &m.provider {
            Some(p) => format!("harbor:{}@{p}/{}", a.name, m.name),
            None => format!("harbor:{}@{}", a.name, m.name),
        },
        None => format!("harbor:{}", a.name),
    }
}

/// How Harbor's exception ends the episode: the agent's own time or
/// context running out are its failures; anything else is infrastructure.
fn end_reason(exception: Option<&str>) -> EndReason {
    match exception {
        None => EndReason::Done,
        Some("AgentTimeoutError") => EndReason::Timeout,
        Some("ContextLengthExceededError") => EndReason::ContextExhausted,
        Some("OutputLengthExceededError") => EndReason::MaxTurns,
        Some(_) => EndReason::Error,
    }
}

/// The last `n` bytes of `text` (on a character boundary).
fn tail(text: &str, n: usize) -> &str {
    let mut at = text.len().saturating_sub(n);
    while !text.is_char_boundary(at) {
        at += 1;
    }
    &text[at..]
}

/// The steps of a trial: its ATIF trajectory's, or the oracle's one
/// command (`solution/solve.sh`, its output in `agent/oracle.txt`).
fn trial_steps(trial: &Trial) -> (Vec<ChatMessage>, Vec<Step>, TokenUsage) {
    if let Some(doc) = &trial.trajectory {
        let t = atif_to_steps(doc);
        return (t.messages, t.steps, t.tokens);
    }
    if let Some(log) = &trial.oracle_log {
        let mut step = Step::new(1, StepKind::Done);
        step.command = Some("bash /solution/solve.sh".into());
        step.output = log.clone();
        step.exec_secs = trial
            .result
            .agent_execution
            .as_ref()
            .and_then(|t| t.secs())
            .unwrap_or(0.0);
        return (Vec::new(), vec![step], TokenUsage::default());
    }
    (Vec::new(), Vec::new(), TokenUsage::default())
}

/// The verifier's tests: the CTRF report's, else one per reward.
fn tests(trial: &Trial, rewards: &BTreeMap<String, f64>) -> Vec<TestOutcome> {
    let stdout = trial
        .test_stdout
        .as_deref()
        .map(|s| tail(s, 2000).to_string());
    if !trial.tests.is_empty() {
        return trial
            .tests
            .iter()
            .filter(|t| t.status != "skipped")
            .map(|t| TestOutcome {
                name: t.name.clone(),
                passed: t.status == "passed",
                message: (t.status != "passed").then(|| {
                    t.message
                        .clone()
                        .or_else(|| stdout.clone())
                        .unwrap_or_else(|| t.status.clone())
                }),
            })
            .collect();
    }
    rewards
        .iter()
        .map(|(name, value)| TestOutcome {
            name: name.clone(),
            passed: *value >= 1.0,
            message: (*value < 1.0).then(|| {
                let why = format!("{name} = {value}");
                match &stdout {
                    Some(out) => format!("{why}\n{out}"),
                    None => why,
                }
            }),
        })
        .collect()
}

/// One trial as an endless episode (sample `sample` of its task), with
/// the conversation its trajectory recorded.
pub fn trial_episode(trial: &Trial, sample: u32) -> (EpisodeResult, Vec<ChatMessage>) {
    let r = &trial.result;
    let exception = r.exception_info.as_ref();
    let mut end = end_reason(exception.map(|e| e.exception_type.as_str()));
    let rewards = trial.rewards.clone().unwrap_or_default();
    let reward = match rewards.get("reward") {
        Some(v) => *v,
        None if rewards.is_empty() => 0.0,
        None => rewards.values().sum::<f64>() / rewards.len() as f64,
    };
    // Harbor verified even though something failed: its reward stands.
    if end == EndReason::Error && !rewards.is_empty() {
        end = EndReason::Done;
    }
    let (messages, steps, mut tokens) = trial_steps(trial);
    if let Some(ctx) = &r.agent_result {
        tokens.prompt_tokens = ctx.n_input_tokens.unwrap_or(tokens.prompt_tokens);
        tokens.completion_tokens = ctx.n_output_tokens.unwrap_or(tokens.completion_tokens);
    }
    let passed = reward >= 1.0 && end.can_verify();
    let (failure_mode, earliest_failing_step) = if passed {
        (None, None)
    } else {
        let (m, s) = classify_failure(&steps, end);
        (Some(m), s)
    };
    let secs = |t: &Option<super::harbor_job::TimingInfo>| {
        t.as_ref().and_then(|t| t.secs()).unwrap_or(0.0)
    };
    let timings = Timings {
        sandbox_start_secs: secs(&r.environment_setup),
        agent_secs: secs(&r.agent_execution),
        policy_secs: steps.iter().map(|s| s.policy_secs).sum(),
        exec_secs: steps.iter().map(|s| s.exec_secs).sum(),
        verify_secs: secs(&r.verifier),
        total_secs: match (&r.started_at, &r.finished_at) {
            (Some(a), Some(b)) => span(a, b).unwrap_or(0.0),
            _ => 0.0,
        },
    };
    let episode = EpisodeResult {
        task: task_id(&r.task_name),
        category: r.source.clone().unwrap_or_else(|| IMPORTED_KIND.into()),
        complexity: None,
        sample,
        policy: policy(trial),
        passed,
        reward,
        turns: steps.iter().filter(|s| s.kind != StepKind::Human).count() as u32,
        end_reason: end,
        failure_mode,
        failure_labels: if passed {
            Vec::new()
        } else {
            failure_labels(&steps, end)
        },
        earliest_failing_step,
        error: exception.map(|e| format!("{}: {}", e.exception_type, e.exception_message)),
        tests: tests(trial, &rewards),
        steps,
        tokens,
        timings,
        verifier: Some(format!("harbor ({})", r.trial_name)),
        limits: None,
        taken_over: None,
        forked_from: None,
    };
    (episode, messages)
}

/// The trajectory file endless writes (`<n>.jsonl`): a start line, the
/// conversation, the steps, an end line.
fn trajectory_lines(e: &EpisodeResult, messages: &[ChatMessage]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut line = |v: serde_json::Value| -> Result<()> {
        serde_json::to_writer(&mut out, &v)?;
        out.write_all(b"\n")?;
        Ok(())
    };
    line(
        serde_json::json!({"type": "start", "task": e.task, "sample": e.sample, "policy": e.policy}),
    )?;
    for m in messages {
        line(serde_json::json!({"type": "message", "message": m}))?;
    }
    for s in &e.steps {
        line(serde_json::json!({"type": "step", "step": s}))?;
    }
    line(serde_json::json!({
        "type": "end", "end_reason": e.end_reason, "passed": e.passed,
        "failure_mode": e.failure_mode, "failure_labels": e.failure_labels, "error": e.error,
    }))?;
    Ok(out)
}

/// When a trial finished, as RFC 3339 UTC (`None` when Harbor did not say).
fn finished_at(trial: &Trial) -> Option<String> {
    let t = trial.result.finished_at.as_deref()?;
    let utc = chrono::DateTime::parse_from_rfc3339(t)
        .map(|t| t.with_timezone(&chrono::Utc))
        .or_else(|_| t.parse::<chrono::NaiveDateTime>().map(|n| n.and_utc()))
        .ok()?;
    Some(utc.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// A run id from a job's name.
fn default_run_id(job: &Job) -> String {
    format!("{IMPORTED_KIND}-{}", task_id(&job.name))
}

/// Write `bytes` to `path`.
fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    // trusted: our own staging directory in the workspace
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Import the Harbor job or trial directory `dir` into `ws` as run `run`
/// (default `harbor-<job name>`). Refuses a run id already in use.
pub fn import_harbor(ws: &Workspace, dir: &Path, run: Option<&str>) -> Result<ImportReport> {
    let options = ImportOptions {
        run: run.map(str::to_string),
        ..ImportOptions::default()
    };
    import_harbor_with(ws, dir, &options)
}

/// [`import_harbor`] with every option.
pub fn import_harbor_with(
    ws: &Workspace,
    dir: &Path,
    options: &ImportOptions,
) -> Result<ImportReport> {
    let job = read_job(dir, options.skip_unfinished)?;
    let run_id = options.run.clone().unwrap_or_else(|| default_run_id(&job));
    if run_id.is_empty() || run_id.starts_with('.') || run_id.contains(['/', '\\']) {
        bail!("--run {run_id:?}: not a usable run id");
    }
    let run_dir = ws.runs_dir().join(&run_id);
    let existing = ws.list_runs()?.into_iter().find(|r| r.id == run_id);
    let exists = run_dir.exists() || existing.is_some();
    if exists && !options.replace {
        bail!(
            "run {run_id} already exists in the workspace ({}): import under another id with \
             --run, or replace it with --replace",
            run_dir.display()
        );
    }
    if let Some(r) = existing.as_ref().filter(|r| r.kind != IMPORTED_KIND) {
        bail!(
            "run {run_id} is a {} run, not an import: --replace replaces only imported runs",
            r.kind
        );
    }
    // Everything is read and converted before anything is written.
    let mut per_task: BTreeMap<String, u32> = BTreeMap::new();
    let mut episodes = Vec::new();
    for trial in &job.trials {
        let next = per_task
            .entry(task_id(&trial.result.task_name))
            .or_default();
        let (episode, messages) = trial_episode(trial, *next);
        *next += 1;
        episodes.push((trial, episode, messages));
    }
    let staged = crate::fsutil::AtomicDir::new(&run_dir)
        .with_context(|| format!("creating {}", run_dir.display()))?;
    for (trial, e, messages) in &episodes {
        let paths = EpisodePaths::new(staged.path(), &e.task, e.sample);
        if let Some(parent) = paths.result.parent() {
            // trusted: our own staging directory in the workspace
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        write(&paths.trajectory, &trajectory_lines(e, messages)?)?;
        // Read beneath the job directory again, as the trial was.
        if let Some(cast) = job.recording(trial)? {
            write(&paths.cast, &cast)?;
        }
        if let Some(bytes) = job.trajectory_bytes(trial)? {
            write(&paths.result.with_extension("atif.json"), &bytes)?;
        }
        write(&paths.result, &serde_json::to_vec_pretty(e)?)?;
    }
    if exists {
        // The earlier import goes whole: readers see it or the new one.
        crate::fsutil::replace_dir_atomic(staged.path(), &run_dir)
            .with_context(|| format!("replacing {}", run_dir.display()))?;
        ws.forget_episodes(&run_id)?;
    } else {
        staged
            .commit()
            .with_context(|| format!("moving the imported run into {}", run_dir.display()))?;
    }
    let indexed = (|| -> Result<()> {
        let first = episodes.first().map(|(_, e, _)| e.policy.clone());
        ws.upsert_run(
            &run_id,
            IMPORTED_KIND,
            first.as_deref().unwrap_or(IMPORTED_KIND),
            &serde_json::json!({"imported_from": job.dir.display().to_string(), "job": job.name}),
        )?;
        for (trial, e, _) in &episodes {
            // Listed by when the trial finished, not when it was imported.
            let mut row = episode_row(ws, &run_id, e);
            row.created_at = finished_at(trial).unwrap_or_default();
            ws.index_episode(&row)?;
        }
        ws.finish_run(
            &run_id,
            &serde_json::json!({
                "episodes": episodes.len(),
                "passed": episodes.iter().filter(|(_, e, _)| e.passed).count(),
            }),
        )?;
        Ok(())
    })();
    if let Err(e) = indexed {
        // trusted: our own staging directory in the workspace
        let _ = std::fs::remove_dir_all(&run_dir);
        return Err(e.context(format!("indexing the imported run {run_id}")));
    }
    Ok(ImportReport {
        run: run_id,
        run_dir,
        episodes: episodes.len(),
        passed: episodes.iter().filter(|(_, e, _)| e.passed).count(),
        errors: episodes
            .iter()
            .filter(|(_, e, _)| e.end_reason == EndReason::Error)
            .count(),
        skipped: job.unfinished.clone(),
        replaced: exists,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::FailureMode;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-job")
    }

    fn copy_dir(from: &Path, to: &Path) {
        for e in walkdir::WalkDir::new(from) {
            let e = e.unwrap();
            let dest = to.join(e.path().strip_prefix(from).unwrap());
            if e.file_type().is_dir() {
                std::fs::create_dir_all(&dest).unwrap();
            } else {
                std::fs::copy(e.path(), &dest).unwrap();
            }
        }
    }

    /// The run directories under `runs/` (hidden ones included).
    fn runs(ws: &Workspace) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(ws.runs_dir())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn a_harbor_job_becomes_an_indexed_run_that_a_rebuild_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let report = import_harbor(&ws, &fixture(), None).unwrap();
        assert_eq!(report.run, "harbor-harbor-fixture-job");
        assert_eq!((report.episodes, report.passed, report.errors), (3, 1, 0));
        let rows = ws.list_episodes(Some(&report.run)).unwrap();
        let key = |r: &crate::store::EpisodeRow| (r.task_id.clone(), r.sample);
        let mut keys: Vec<_> = rows.iter().map(key).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                ("fix-permissions".into(), 0),
                ("hello-world".into(), 0),
                ("hello-world".into(), 1)
            ]
        );
        let load = |task: &str, sample| {
            let p = EpisodePaths::new(&report.run_dir, task, sample);
            crate::agent::load_result(&p.result).unwrap()
        };
        let pass = load("hello-world", 0);
        assert!(pass.passed && pass.reward == 1.0);
        assert_eq!(pass.policy, "harbor:terminus-2@openai/gpt-fixture");
        assert_eq!(pass.steps.len(), 2);
        assert_eq!(
            pass.steps[0].command.as_deref(),
            Some("echo 'Hello, world!' > /app/hello.txt")
        );
        assert_eq!(pass.steps[1].kind, StepKind::Done);
        assert_eq!(pass.tests.len(), 2);
        assert_eq!(pass.tokens.prompt_tokens, 900);
        assert_eq!(pass.timings.total_secs, 30.0);
        let looped = load("fix-permissions", 0);
        assert_eq!(looped.failure_mode, Some(FailureMode::Loop));
        assert!(looped.failure_labels.contains(&FailureMode::PrematureDone));
        assert!(looped.tests[0]
            .message
            .as_deref()
            .unwrap()
            .contains("not executable"));
        let timeout = load("hello-world", 1);
        assert_eq!(timeout.end_reason, EndReason::Timeout);
        assert_eq!(timeout.failure_mode, Some(FailureMode::Timeout));
        assert!(timeout
            .error
            .as_deref()
            .unwrap()
            .starts_with("AgentTimeoutError"));
        // Written as endless writes its own: the conversation is in the
        // trajectory, the trial's ATIF beside the result.
        let p = EpisodePaths::new(&report.run_dir, "hello-world", 0);
        let messages = crate::agent::atif::read_recorded(&p.trajectory).messages;
        assert!(messages[0].content.contains("Hello, world!"));
        assert!(p.result.with_extension("atif.json").is_file());
        let run = ws
            .list_runs()
            .unwrap()
            .into_iter()
            .find(|r| r.id == report.run)
            .unwrap();
        assert_eq!(run.kind, IMPORTED_KIND);
        // Reviews and a rebuild keep it.
        ws.rate_episode(
            &report.run,
            "fix-permissions",
            0,
            Some(2),
            Some("agent_error"),
            "loops",
        )
        .unwrap();
        std::fs::remove_file(dir.path().join("endless.db")).unwrap();
        let (ws, rebuilt) = crate::workbench::open_rebuilding(dir.path()).unwrap();
        assert!(rebuilt.is_some());
        let rows = ws.list_episodes(Some(&report.run)).unwrap();
        assert_eq!(rows.len(), 3);
        let rated = rows
            .iter()
            .find(|r| r.task_id == "fix-permissions")
            .unwrap();
        assert_eq!((rated.rating, rated.notes.as_str()), (Some(2), "loops"));
        // The same id twice is refused.
        let e = import_harbor(&ws, &fixture(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("already exists") && e.contains("--replace"),
            "{e}"
        );
    }

    /// Issue 49: a job imported again replaces the earlier import when
    /// asked, and a job with an unfinished trial imports the finished ones
    /// when asked.
    #[test]
    fn a_job_is_imported_again_with_replace_and_without_its_unfinished_trials() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path().join("ws").as_path()).unwrap();
        let job = dir.path().join("job");
        copy_dir(&fixture(), &job);
        let first = import_harbor(&ws, &job, None).unwrap();
        assert!(!first.replaced && first.skipped.is_empty());
        // A trial still running: no result.json yet.
        let running = job.join("hello-world__Zx81mQv");
        std::fs::remove_file(running.join("result.json")).unwrap();
        let e = format!("{:#}", import_harbor(&ws, &job, None).unwrap_err());
        assert!(e.contains("did not finish"), "{e}");
        let again = ImportOptions {
            replace: true,
            skip_unfinished: true,
            ..ImportOptions::default()
        };
        let report = import_harbor_with(&ws, &job, &again).unwrap();
        assert!(report.replaced);
        assert_eq!(report.skipped, ["hello-world__Zx81mQv"]);
        assert_eq!(report.run, first.run);
        assert_eq!(report.episodes, first.episodes - 1);
        let rows = ws.list_episodes(Some(&report.run)).unwrap();
        assert_eq!(rows.len(), report.episodes);
        let hello = rows.iter().filter(|r| r.task_id == "hello-world").count();
        assert_eq!(hello, 1, "{rows:?}");
        assert!(!EpisodePaths::new(&report.run_dir, "hello-world", 1)
            .result
            .exists());
        // Only imports are replaced.
        ws.upsert_run("mine", "eval", "oracle", &serde_json::json!({}))
            .unwrap();
        let mine = ImportOptions {
            run: Some("mine".into()),
            ..again
        };
        let e = import_harbor_with(&ws, &job, &mine)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an import"), "{e}");
    }

    #[test]
    fn harbors_context_overflow_is_context_exhaustion() {
        assert_eq!(
            end_reason(Some("ContextLengthExceededError")),
            EndReason::ContextExhausted
        );
        assert_eq!(
            end_reason(Some("OutputLengthExceededError")),
            EndReason::MaxTurns
        );
    }

    #[test]
    fn one_trial_directory_imports_alone_with_its_terminal_recording() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path().join("ws").as_path()).unwrap();
        let trial = dir.path().join("trial");
        copy_dir(&fixture().join("fix-permissions__Kp9wZr2"), &trial);
        let cast = "{\"version\": 2, \"width\": 80, \"height\": 24}\n[0.1, \"o\", \"root@sandbox:/app# \"]\n";
        std::fs::write(trial.join("agent/recording.cast"), cast).unwrap();
        let report = import_harbor(&ws, &trial, Some("one")).unwrap();
        assert_eq!((report.run.as_str(), report.episodes), ("one", 1));
        let p = EpisodePaths::new(&report.run_dir, "fix-permissions", 0);
        assert_eq!(std::fs::read_to_string(p.cast).unwrap(), cast);
    }

    #[test]
    fn bad_input_is_refused_by_file_and_field_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path().join("ws").as_path()).unwrap();
        let before = runs(&ws);
        let fail = |job: &Path| {
            let e = format!("{:#}", import_harbor(&ws, job, None).unwrap_err());
            assert_eq!(runs(&ws), before, "nothing half-imported: {e}");
            assert!(ws.list_runs().unwrap().is_empty());
            e
        };
        // Not a job directory.
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(fail(&empty).contains("not a Harbor job or trial directory"));
        // A malformed ATIF trajectory in the last trial.
        let job = dir.path().join("job");
        copy_dir(&fixture(), &job);
        let traj = job.join("hello-world__Zx81mQv/agent/trajectory.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&traj).unwrap()).unwrap();
        v["steps"][1]["source"] = "robot".into();
        std::fs::write(&traj, v.to_string()).unwrap();
        let e = fail(&job);
        assert!(
            e.contains("hello-world__Zx81mQv/agent/trajectory.json"),
            "{e}"
        );
        assert!(e.contains("steps[1].source"), "{e}");
        std::fs::remove_file(&traj).unwrap();
        // A missing reward.
        let trial = job.join("fix-permissions__Kp9wZr2");
        std::fs::remove_file(trial.join("verifier/reward.txt")).unwrap();
        let result = trial.join("result.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
        v["verifier_result"] = serde_json::Value::Null;
        std::fs::write(&result, v.to_string()).unwrap();
        let e = fail(&job);
        assert!(
            e.contains("fix-permissions__Kp9wZr2/result.json") && e.contains("missing reward"),
            "{e}"
        );
        // A mistyped field.
        v["agent_info"] = serde_json::json!({"name": 3});
        std::fs::write(&result, v.to_string()).unwrap();
        let e = fail(&job);
        assert!(e.contains("agent_info.name"), "{e}");
    }
}
