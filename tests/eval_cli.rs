//! The CLI end to end on offline tasks in the real sandbox: generation,
//! oracle evaluation, and the failure modes of scripted policies.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

mod support;

use support::cli::{endless, json};

#[test]
fn offline_generation_is_deterministic_and_resumable() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let ra = json(&endless(
        a.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "40",
            "--seed",
            "3",
            "--json",
        ],
    ));
    assert_eq!(ra["written"], 40);
    json(&endless(
        b.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "40",
            "--seed",
            "3",
            "--json",
        ],
    ));
    let again = json(&endless(
        a.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "40",
            "--seed",
            "3",
            "--json",
        ],
    ));
    assert_eq!(
        (again["written"].as_u64(), again["existing"].as_u64()),
        (Some(0), Some(40))
    );
    let list = json(&endless(a.path(), &["tasks", "list", "--json"]));
    let categories: std::collections::BTreeSet<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["category"].as_str().unwrap())
        .collect();
    assert!(categories.len() >= 12, "{categories:?}");
    for row in list.as_array().unwrap() {
        let id = row["id"].as_str().unwrap();
        let da = std::fs::read_dir(a.path().join("tasks").join(id))
            .unwrap()
            .count();
        assert!(da >= 5, "{id} is missing files");
        let ta = std::fs::read(
            a.path()
                .join("tasks")
                .join(id)
                .join("tests/test_final_state.py"),
        )
        .unwrap();
        let tb = std::fs::read(
            b.path()
                .join("tasks")
                .join(id)
                .join("tests/test_final_state.py"),
        )
        .unwrap();
        assert_eq!(ta, tb, "{id} differs between two runs with the same seed");
    }
}

#[test]
fn oracle_passes_and_scripted_failures_are_classified() {
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "4",
            "--seed",
            "11",
            "--json",
        ],
    ));
    let report = json(&endless(
        ws.path(),
        &["eval", "--policy", "oracle", "--samples", "2", "--json"],
    ));
    assert_eq!(report["episodes"], 8);
    assert_eq!(report["pass_rate"], 1.0, "{report:#}");
    assert_eq!(report["pass_at_k"]["2"], 1.0);
    for key in [
        "episodes",
        "pass_rate",
        "pass_at_k",
        "failure_modes",
        "per_category",
    ] {
        assert!(report.get(key).is_some(), "eval --json lacks {key}");
    }
    // Re-running the same evaluation resumes: nothing runs again.
    let again = json(&endless(
        ws.path(),
        &["eval", "--policy", "oracle", "--samples", "2", "--json"],
    ));
    assert_eq!(again["episodes"], 8);
    assert_eq!(again["run"], report["run"]);

    let looping = ws.path().join("loop.txt");
    std::fs::write(&looping, "ls -la\n".repeat(12)).unwrap();
    let spec = format!("script:{}", looping.display());
    let report = json(&endless(
        ws.path(),
        &["eval", "--policy", &spec, "--max-turns", "8", "--json"],
    ));
    assert_eq!(report["failure_modes"]["loop"], 4, "{report:#}");
    // Each looping episode also ran out of turns: both labels, loop primary;
    // the paper view counts every failure under both.
    assert_eq!(report["failure_modes"]["turn_exhaustion"], 0, "{report:#}");
    assert_eq!(report["failure_labels"]["loop"], 4, "{report:#}");
    assert_eq!(report["failure_labels"]["turn_exhaustion"], 4, "{report:#}");
    assert_eq!(report["failures"], 4);
    assert_eq!(report["multi_label_failures"], 4);
    assert_eq!(report["paper_view"]["loop"], 1.0);
    assert_eq!(report["paper_view"]["turn_exhaustion"], 1.0);

    let done_only = ws.path().join("done.txt");
    std::fs::write(&done_only, "").unwrap();
    let spec = format!("script:{}", done_only.display());
    let report = json(&endless(ws.path(), &["eval", "--policy", &spec, "--json"]));
    assert_eq!(report["failure_modes"]["premature_done"], 4, "{report:#}");
    assert_eq!(report["failure_labels"]["premature_done"], 4, "{report:#}");
    assert_eq!(report["multi_label_failures"], 0);

    let id = endless(ws.path(), &["tasks", "list", "--json"]);
    let first = json(&id)[0]["id"].as_str().unwrap().to_string();
    let run = json(&endless(
        ws.path(),
        &["run", &first, "--policy", "oracle", "--json"],
    ));
    for key in [
        "task",
        "passed",
        "turns",
        "end_reason",
        "failure_mode",
        "tests",
        "steps",
    ] {
        assert!(run.get(key).is_some(), "run --json lacks {key}");
    }
    assert_eq!(run["passed"], true);
    assert_eq!(run["end_reason"], "done");
    assert!(run["steps"][0]["command"]
        .as_str()
        .unwrap()
        .contains("ENDLESS_SOLVE_EOF"));
}

#[test]
fn a_missing_local_model_is_a_clear_error() {
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
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
    let id = json(&endless(ws.path(), &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = endless(
        ws.path(),
        &["run", &id, "--policy", "local:/nonexistent/model-dir"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/model-dir"), "{err}");
}

#[test]
fn eval_runs_under_the_reference_protocol_and_bad_settings_are_named() {
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
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
    let id = json(&endless(ws.path(), &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let report = json(&endless(
        ws.path(),
        &[
            "eval",
            "--tasks",
            &id,
            "--policy",
            "oracle",
            "--protocol",
            "reference",
            "--json",
        ],
    ));
    assert_eq!(
        (&report["episodes"], &report["pass_rate"]),
        (&serde_json::json!(1), &serde_json::json!(1.0)),
        "{report}"
    );
    let out = endless(
        ws.path(),
        &["eval", "--policy", "oracle", "--protocol", "ours"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--protocol") && err.contains("reference"),
        "{err}"
    );
    let printed = json(&endless(
        ws.path(),
        &[
            "train",
            "--print-config",
            "--json",
            "--protocol",
            "reference",
        ],
    ));
    assert_eq!(printed["recipe"]["protocol"], "reference", "{printed}");
    // A prompt file that cannot be read names the key and the file.
    std::fs::write(
        ws.path().join("endless.toml"),
        "[agent]\nsystem_prompt_file = \"/nonexistent/prompt.txt\"\n",
    )
    .unwrap();
    let out = endless(ws.path(), &["run", &id, "--policy", "oracle"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("system_prompt_file") && err.contains("/nonexistent/prompt.txt"),
        "{err}"
    );
}

/// A failed scripted episode, forked at step 1 and continued by the oracle,
/// passes; the fork re-ran the parent's first command and links to its parent.
#[test]
fn a_fork_of_a_failed_episode_continued_by_the_oracle_passes_and_links_to_its_parent() {
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
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
    let id = json(&endless(ws.path(), &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let script = ws.path().join("agent.txt");
    std::fs::write(&script, "echo forked-prefix > /tmp/fork-marker\nfalse\n").unwrap();
    let spec = format!("script:{}", script.display());
    let parent = endless(ws.path(), &["run", &id, "--policy", &spec, "--json"]);
    let parent: serde_json::Value = serde_json::from_slice(&parent.stdout).unwrap();
    assert_eq!(parent["passed"], false, "{parent}");
    let run = std::fs::read_dir(ws.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("run-"))
        .unwrap();
    let key = format!("{run}/{id}/0");
    let fork = json(&endless(
        ws.path(),
        &[
            "run",
            &id,
            "--fork",
            &key,
            "--at-step",
            "1",
            "--policy",
            "oracle",
            "--json",
        ],
    ));
    assert_eq!(fork["passed"], true, "{fork}");
    assert_eq!(fork["policy"], "oracle");
    let link = &fork["forked_from"];
    assert_eq!(
        (
            &link["run"],
            &link["sample"],
            &link["at_step"],
            &link["replayed"]
        ),
        (
            &serde_json::json!(run),
            &serde_json::json!(0),
            &serde_json::json!(1),
            &serde_json::json!(1)
        ),
        "{fork}"
    );
    assert_eq!(link["policy"], spec);
    // The index has the link at once (no `workspace rebuild`): the TUI's
    // `⑂`, `/fork` and `m` read it there.
    let ws_index = endless::store::Workspace::open(ws.path()).unwrap();
    let row = ws_index
        .list_episodes(None)
        .unwrap()
        .into_iter()
        .find(|e| e.run_id != run)
        .expect("the fork is indexed");
    assert_eq!(
        row.forked_from.as_deref(),
        Some(format!("{key}@1").as_str()),
        "{row:?}"
    );
    // The parent's first command ran first, then the oracle's.
    let steps = fork["steps"].as_array().unwrap();
    assert!(
        steps[0]["command"]
            .as_str()
            .unwrap()
            .contains("forked-prefix"),
        "{fork}"
    );
    // Bad forks are named.
    let out = endless(
        ws.path(),
        &["run", &id, "--fork", "nope/x/0", "--policy", "oracle"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the episode result"), "{err}");
    let out = endless(
        ws.path(),
        &[
            "run",
            &id,
            "--fork",
            &key,
            "--at-step",
            "99",
            "--policy",
            "oracle",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--at-step 99"),
        "{err}"
    );
}

/// A reader that goes away (`endless ... --json | head -c 0`) is an error
/// message, not a panic.
#[test]
fn json_output_to_a_closed_pipe_does_not_panic() {
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
        &["generate", "--offline", "--count", "3", "--json"],
    ));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws.path())
        .args(["generate", "--offline", "--count", "3", "--json"])
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .env("XDG_CONFIG_HOME", ws.path().join(".config"))
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("Broken pipe"), "{stderr}");
}

/// Issue 47 item 3: an evaluation killed with SIGKILL mid-episode leaves a
/// trajectory and no result. The next command on the workspace records the
/// episode as interrupted (its own end reason, unscored, with the steps it
/// took) and indexes it; it stays through a lost index and `workspace
/// rebuild`.
#[test]
fn a_killed_evaluations_episode_is_recorded_as_interrupted_and_kept() {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let ws = tempfile::tempdir().unwrap();
    json(&endless(
        ws.path(),
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
    let id = json(&endless(ws.path(), &["tasks", "list", "--json"]))[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let script = ws.path().join("slow.txt");
    std::fs::write(&script, "sleep 1\n".repeat(120)).unwrap();
    let mut eval = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws.path())
        .args(["eval", "--tasks", &id, "--policy"])
        .arg(format!("script:{}", script.display()))
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .env("XDG_CONFIG_HOME", ws.path().join(".config"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Its own group, for the cleanup below.
        .process_group(0)
        .spawn()
        .unwrap();
    let group = eval.id();
    // Wait for its second step: the episode is running.
    let runs = ws.path().join("runs");
    let t0 = Instant::now();
    let trajectory = loop {
        let found = std::fs::read_dir(&runs).ok().and_then(|rd| {
            rd.flatten()
                .map(|r| r.path().join("episodes").join(&id).join("0.jsonl"))
                .find(|p| {
                    std::fs::read_to_string(p)
                        .is_ok_and(|t| t.matches("\"type\":\"step\"").count() >= 2)
                })
        });
        if let Some(p) = found {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "the episode never ran two steps"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eval.kill().unwrap();
    eval.wait().unwrap();
    let result_path = trajectory.with_extension("json");
    assert!(!result_path.exists(), "a SIGKILL leaves no result");
    // The next command on the workspace records it.
    json(&endless(ws.path(), &["tasks", "list", "--json"]));
    let interrupted = |why: &str| {
        let rows = endless::store::Workspace::open(ws.path())
            .unwrap()
            .list_episodes(None)
            .unwrap();
        assert_eq!(rows.len(), 1, "{why}: {rows:?}");
        let row = &rows[0];
        assert_eq!(
            (
                row.end_reason.as_str(),
                row.passed,
                row.failure_mode.as_deref()
            ),
            ("interrupted", false, Some("error")),
            "{why}: {row:?}"
        );
        assert!(row.turns >= 2, "{why}: {row:?}");
    };
    interrupted("after the kill");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&result_path).unwrap()).unwrap();
    assert_eq!(result["end_reason"], "interrupted", "{result:#}");
    assert!(
        result["error"].as_str().unwrap().contains("interrupted"),
        "{result:#}"
    );
    assert_eq!(result["steps"][0]["command"], "sleep 1", "{result:#}");
    // Again: nothing changes (idempotent).
    json(&endless(ws.path(), &["tasks", "list", "--json"]));
    interrupted("a second look");
    // The index lost and rebuilt from the files: still there.
    std::fs::remove_file(ws.path().join("endless.db")).unwrap();
    let _ = std::fs::remove_file(ws.path().join("endless.db-wal"));
    let _ = std::fs::remove_file(ws.path().join("endless.db-shm"));
    json(&endless(ws.path(), &["workspace", "rebuild", "--json"]));
    interrupted("after a rebuild");
    // What the killed evaluation left running (its sandbox), if anything.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(std::process::Stdio::null())
        .status();
}
