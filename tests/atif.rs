//! Issue 32's ATIF "done when", through the real `endless` binary and the
//! real sandbox: oracle, failing, taken-over and forked episodes exported
//! with `endless episodes export --format atif` read back as ATIF-v1.8
//! (and, where the Python 3.12 venv with PyPI's `atif` is built, validate
//! with its pydantic models); `[record] atif = true` writes the document
//! beside each result as episodes finish; the checked-in Harbor job
//! directory imports as a run and exports again.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use endless::agent::atif::{parse_atif, Source};
use endless::agent::{
    EpisodeConfig, EpisodePaths, HumanCommand, HumanTurn, RecordedEpisode, Recording,
    SandboxProvider, StartOptions, Started, Terminal, TerminalError, Verification,
};
use endless::llm::TokenUsage;
use endless::sandbox::ExecResult;
use endless::store::Workspace;
use endless::task::Task;
use support::cli::{endless, json};

/// The venv's Python with PyPI's `atif`, when it is built.
fn atif_python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pyenv312/bin/python");
    let ok = p.exists()
        && std::process::Command::new(&p)
            .args(["-c", "import atif"])
            .status()
            .is_ok_and(|s| s.success());
    ok.then_some(p)
}

/// A terminal a human takes over before the agent's second command: they
/// run `command` in the same sandbox session, as the TUI's ctrl-t does.
struct TakenOver<T> {
    inner: T,
    execs: u32,
    command: String,
    human: Option<HumanTurn>,
}

impl<T: Terminal> Terminal for TakenOver<T> {
    fn exec(&mut self, command: &str, timeout: Duration) -> Result<ExecResult, TerminalError> {
        self.execs += 1;
        if self.execs == 2 {
            let t0 = Instant::now();
            let result = self.inner.exec(&self.command, timeout);
            self.human = Some(HumanTurn {
                taken_at: chrono::Utc::now(),
                taken: t0,
                held_secs: t0.elapsed().as_secs_f64(),
                commands: vec![HumanCommand {
                    command: self.command.clone(),
                    secs: t0.elapsed().as_secs_f64(),
                    result,
                }],
            });
        }
        self.inner.exec(command, timeout)
    }
    fn take_human(&mut self) -> Option<HumanTurn> {
        self.human.take()
    }
}

struct TakeoverProvider<P> {
    inner: P,
    command: String,
}

impl<P: SandboxProvider> SandboxProvider for TakeoverProvider<P> {
    type Term = TakenOver<P::Term>;
    fn start(&self, task: &Task, options: &StartOptions) -> Result<Self::Term, TerminalError> {
        Ok(TakenOver {
            inner: self.inner.start(task, options)?,
            execs: 0,
            command: self.command.clone(),
            human: None,
        })
    }
    fn verify(&self, term: &mut Self::Term, task: &Task) -> Result<Verification, TerminalError> {
        self.inner.verify(&mut term.inner, task)
    }
}

/// One episode of `task` whose session a human took over (running the
/// oracle's solution), recorded and indexed in run `takeover-1`.
fn taken_over_episode(ws_dir: &Path, task_id: &str) -> Option<()> {
    let cache = tempfile::Builder::new()
        .prefix("endless-atif-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let backend = match endless::sandbox::local::LocalBackend::new(cache.path()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIP the take-over: local backend unavailable here: {e}");
            return None;
        }
    };
    let ws = Workspace::open(ws_dir).unwrap();
    let task = ws.load_task(task_id).unwrap();
    let solve = task.solve_script().expect("offline tasks have a solution");
    let provider = TakeoverProvider {
        inner: endless::agent::BackendProvider::new(Arc::new(backend)),
        command: endless::agent::policy::oracle_command(solve),
    };
    let run_dir = ws.runs_dir().join("takeover-1");
    let recording = Recording {
        paths: EpisodePaths::new(&run_dir, task.id(), 0),
        record_cast: true,
        events: None,
    };
    let config = EpisodeConfig::for_task(&task, Some(8), Duration::from_secs(60));
    let Started::Running(mut ep) =
        RecordedEpisode::start(&provider, &task, 0, "script:takeover", &config, recording).unwrap()
    else {
        panic!("the sandbox did not start");
    };
    for reply in [
        "<command>ls</command>",
        "<command>true</command>",
        "<action>done</action>",
    ] {
        ep.step(reply, TokenUsage::default(), 0.01);
    }
    let result = ep.finish(&provider, &task).unwrap();
    assert!(result.taken_over.is_some(), "{result:?}");
    ws.upsert_run(
        "takeover-1",
        "run",
        "script:takeover",
        &serde_json::json!({}),
    )
    .unwrap();
    endless::agent::index_episode(&ws, "takeover-1", &result).unwrap();
    Some(())
}

#[test]
fn oracle_failing_taken_over_and_forked_episodes_export_as_valid_atif() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    json(&endless(
        w,
        &[
            "generate",
            "--offline",
            "--count",
            "1",
            "--seed",
            "5",
            "--json",
        ],
    ));
    let id = json(&endless(w, &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Written as it finishes, beside the result: `[record] atif = true`.
    std::fs::write(w.join("endless.toml"), "[record]\natif = true\n").unwrap();
    let oracle = json(&endless(w, &["run", &id, "--policy", "oracle", "--json"]));
    assert_eq!(oracle["passed"], true, "{oracle}");
    std::fs::remove_file(w.join("endless.toml")).unwrap();
    let script = w.join("agent.txt");
    std::fs::write(&script, "echo forked-prefix > /tmp/fork-marker\nfalse\n").unwrap();
    let spec = format!("script:{}", script.display());
    let failed = endless(w, &["run", &id, "--policy", &spec, "--json"]);
    let failed: serde_json::Value = serde_json::from_slice(&failed.stdout).unwrap();
    assert_eq!(failed["passed"], false, "{failed}");
    let runs: Vec<String> = std::fs::read_dir(w.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run-"))
        .collect();
    // The oracle's run wrote its ATIF as the episode finished; the
    // script's (without the key) did not.
    let beside: Vec<PathBuf> = runs
        .iter()
        .map(|r| {
            w.join("runs")
                .join(r)
                .join("episodes")
                .join(&id)
                .join("0.atif.json")
        })
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(beside.len(), 1, "{runs:?}");
    let doc = parse_atif(&beside[0], &std::fs::read_to_string(&beside[0]).unwrap()).unwrap();
    assert_eq!(doc.final_metrics.unwrap().extra.unwrap()["passed"], true);
    let failed_run = runs
        .iter()
        .find(|r| {
            let p = w
                .join("runs")
                .join(r)
                .join("episodes")
                .join(&id)
                .join("0.json");
            std::fs::read_to_string(p).is_ok_and(|t| t.contains("script:"))
        })
        .unwrap()
        .clone();
    // A fork written as it finishes learns its link: the replayed command
    // is copied context.
    std::fs::write(w.join("endless.toml"), "[record]\natif = true\n").unwrap();
    let fork = json(&endless(
        w,
        &[
            "run",
            &id,
            "--fork",
            &format!("{failed_run}/{id}/0"),
            "--at-step",
            "1",
            "--policy",
            "oracle",
            "--json",
        ],
    ));
    assert_eq!(fork["passed"], true, "{fork}");
    std::fs::remove_file(w.join("endless.toml")).unwrap();
    let fork_atif = std::fs::read_dir(w.join("runs"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .join("episodes")
                .join(&id)
                .join("0.atif.json")
        })
        .filter(|p| p.is_file() && !beside.contains(p))
        .collect::<Vec<_>>();
    assert_eq!(fork_atif.len(), 1, "{fork_atif:?}");
    let doc = parse_atif(
        &fork_atif[0],
        &std::fs::read_to_string(&fork_atif[0]).unwrap(),
    )
    .unwrap();
    assert!(!doc.extra.unwrap()["forked_from"].is_null());
    assert_eq!(doc.steps[2].is_copied_context, Some(true));
    let took_over = taken_over_episode(w, &id).is_some();

    let out = w.join("atif-out");
    let written = json(&endless(
        w,
        &[
            "episodes",
            "export",
            "--format",
            "atif",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ));
    let files: Vec<PathBuf> = written
        .as_array()
        .unwrap()
        .iter()
        .map(|e| PathBuf::from(e["path"].as_str().unwrap()))
        .collect();
    assert_eq!(files.len(), 3 + usize::from(took_over), "{written:#}");
    let mut seen = (false, false, false, false);
    for f in &files {
        let doc = parse_atif(f, &std::fs::read_to_string(f).unwrap()).unwrap();
        let extra = doc.extra.clone().unwrap();
        let verdict = doc.final_metrics.clone().unwrap().extra.unwrap();
        let agent_steps: Vec<_> = doc
            .steps
            .iter()
            .filter(|s| s.source == Source::Agent)
            .collect();
        assert!(!agent_steps.is_empty(), "{f:?}");
        assert_eq!(
            doc.steps[0].source,
            Source::System,
            "the system prompt comes first"
        );
        if !extra["forked_from"].is_null() {
            seen.3 = true;
            assert_eq!(doc.steps[2].is_copied_context, Some(true), "{f:?}");
            assert_eq!(verdict["passed"], true);
        } else if !extra["taken_over"].is_null() {
            seen.2 = true;
            let human = doc
                .steps
                .iter()
                .find(|s| s.source == Source::User && s.step_id > 2);
            assert!(human.is_some(), "the human's command is a user step: {f:?}");
        } else if verdict["passed"] == true {
            seen.0 = true;
            let call = &agent_steps[0].tool_calls.as_ref().unwrap()[0];
            assert_eq!(call.function_name, "bash");
            assert_eq!(
                agent_steps[0].llm_call_count,
                Some(0),
                "the oracle calls no model"
            );
        } else {
            seen.1 = true;
            assert_eq!(verdict["reward"], 0.0);
            assert!(!verdict["failure_labels"].as_array().unwrap().is_empty());
        }
    }
    assert_eq!(seen, (true, true, took_over, true), "{files:?}");
    if let Some(py) = atif_python() {
        let check = std::process::Command::new(py)
            .arg("-c")
            .arg(
                "import sys, json, atif\n\
                 for f in sys.argv[1:]:\n    atif.Trajectory.model_validate(json.load(open(f)))\n\
                 print(len(sys.argv) - 1)",
            )
            .args(&files)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    } else {
        eprintln!("note: no target/pyenv312 with `atif`: validated with endless's reader only");
    }
    // --run and --task narrow it; a run that does not exist is named.
    let one = json(&endless(
        w,
        &[
            "episodes",
            "export",
            "--run",
            &failed_run,
            "--task",
            &id,
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(one.as_array().unwrap().len(), 1);
    let bad = endless(w, &["episodes", "export", "--run", "nope", "--out", "x"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("\"nope\""));
}

#[test]
fn a_harbor_job_imports_as_a_run_and_exports_again() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-job");
    let report = json(&endless(
        w,
        &[
            "--create",
            "episodes",
            "import",
            job.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(report["run"], "harbor-harbor-fixture-job");
    assert_eq!(
        (report["episodes"].as_u64(), report["passed"].as_u64()),
        (Some(3), Some(1))
    );
    // Again under the same id: refused, by name.
    let again = endless(w, &["episodes", "import", job.to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    // A rebuild keeps it.
    json(&endless(w, &["workspace", "rebuild", "--json"]));
    let ws = Workspace::open(w).unwrap();
    assert_eq!(
        ws.list_episodes(Some("harbor-harbor-fixture-job"))
            .unwrap()
            .len(),
        3
    );
    // Exported back to ATIF, the steps and verdict survive.
    let out = w.join("back");
    let written = json(&endless(
        w,
        &[
            "episodes",
            "export",
            "--run",
            "harbor-harbor-fixture-job",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(written.as_array().unwrap().len(), 3);
    // The trial's own trajectory comes back as it was, not rebuilt.
    let f = out.join("harbor-harbor-fixture-job/fix-permissions/0.atif.json");
    let original = job.join("fix-permissions__Kp9wZr2/agent/trajectory.json");
    assert_eq!(
        std::fs::read(&f).unwrap(),
        std::fs::read(&original).unwrap()
    );
    let doc = parse_atif(&f, &std::fs::read_to_string(&f).unwrap()).unwrap();
    let commands: Vec<String> = doc
        .steps
        .iter()
        .filter_map(|s| s.tool_calls.as_ref())
        .flat_map(|c| {
            // `mark_task_complete` has no keystrokes.
            c.iter()
                .filter_map(|c| c.arguments.get("keystrokes"))
                .map(|k| k.as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(commands, vec!["ls -l /app/run.sh\n"; 3]);
    // Not a Harbor directory: named, nothing written.
    let empty = tempfile::tempdir().unwrap();
    let bad = endless(w, &["episodes", "import", empty.path().to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a Harbor job or trial directory"));
}

/// Real `harbor run` output (tests/fixtures/harbor-real: jobs the real
/// Harbor 0.26 CLI wrote running `oracle`, `nop` and `terminus-2` in
/// endless sandboxes, python/tests/test_harbor.py) imported and exported
/// again: a trial's own trajectory comes back equal to the original field
/// by field (timestamps, agent and model name, keystrokes and durations,
/// `mark_task_complete`, observations, `total_cached_tokens`), and a trial
/// whose agent wrote none (`oracle`, `nop`) exports a document with a step.
#[test]
fn a_real_harbor_job_round_trips_through_import_and_export_without_loss() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-real");
    let mut originals = 0;
    for job in ["terminus-2", "oracle", "nop"] {
        let run = format!("real-{job}");
        let dir = real.join(job);
        let mut args = vec!["episodes", "import", dir.to_str().unwrap(), "--run", &run];
        if job == "terminus-2" {
            args.insert(0, "--create");
        }
        json(&endless(w, &[&args[..], &["--json"]].concat()));
        let out = w.join("out");
        let written = json(&endless(
            w,
            &[
                "episodes",
                "export",
                "--run",
                &run,
                "--out",
                out.to_str().unwrap(),
                "--json",
            ],
        ));
        for entry in written.as_array().unwrap() {
            let path = PathBuf::from(entry["path"].as_str().unwrap());
            let text = std::fs::read_to_string(&path).unwrap();
            let doc = parse_atif(&path, &text).unwrap();
            assert!(!doc.steps.is_empty(), "{}: no step", path.display());
            // The trial's directory: `<task>__<id>`, one per task here.
            let task = entry["task"].as_str().unwrap();
            let trial = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .find(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{task}__"))
                })
                .unwrap()
                .path();
            let original = trial.join("agent/trajectory.json");
            if original.exists() {
                let want: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&original).unwrap()).unwrap();
                let got: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    got,
                    want,
                    "{} differs from {}",
                    path.display(),
                    original.display()
                );
                originals += 1;
            }
        }
    }
    assert_eq!(originals, 1, "the terminus-2 trial's trajectory");
}

/// A training step's rollouts (the policy being trained, sampled locally)
/// export with each reply's exact prompt and completion token ids and the
/// completion's log-probabilities.
#[test]
fn training_rollouts_export_with_token_ids_and_logprobs() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    json(&endless(
        w,
        &[
            "generate",
            "--offline",
            "--count",
            "2",
            "--seed",
            "3",
            "--json",
        ],
    ));
    let out = w.join("ckpt");
    json(&endless(
        w,
        &[
            "train",
            "--init",
            "tiny",
            "--steps",
            "1",
            "--samples",
            "2",
            "--max-turns",
            "2",
            "--max-tokens",
            "12",
            "--concurrency",
            "2",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ));
    let step = out.join("rollouts/step-000001");
    let x = w.join("x");
    let written = json(&endless(
        w,
        &[
            "episodes",
            "export",
            "--run",
            step.to_str().unwrap(),
            "--out",
            x.to_str().unwrap(),
            "--json",
        ],
    ));
    let files: Vec<PathBuf> = written
        .as_array()
        .unwrap()
        .iter()
        .map(|e| PathBuf::from(e["path"].as_str().unwrap()))
        .collect();
    assert_eq!(files.len(), 2, "{written:#}");
    for f in &files {
        let doc = parse_atif(f, &std::fs::read_to_string(f).unwrap()).unwrap();
        let agent: Vec<_> = doc
            .steps
            .iter()
            .filter(|s| s.source == Source::Agent)
            .collect();
        assert!(!agent.is_empty());
        let mut prompt = 0;
        for s in agent {
            let m = s.metrics.as_ref().expect("a sampled reply has metrics");
            let ids = m.completion_token_ids.as_ref().expect("token ids");
            let lp = m.logprobs.as_ref().expect("log-probs");
            assert!(!ids.is_empty() && ids.len() == lp.len(), "{f:?}");
            assert!(lp.iter().all(|l| l.is_finite() && *l <= 0.0), "{lp:?}");
            let p = m.prompt_token_ids.as_ref().unwrap().len();
            assert!(p > prompt, "each prompt holds the turns before it");
            prompt = p + ids.len();
        }
    }
    if let Some(py) = atif_python() {
        let check = std::process::Command::new(py)
            .arg("-c")
            .arg("import sys, json, atif\nfor f in sys.argv[1:]: atif.Trajectory.model_validate(json.load(open(f)))")
            .args(&files)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
}
