//! Moving data between a workspace and the outside: `endless tasks export
//! --format skyrl|jsonl` (datasets for RL trainers) and `endless workspace
//! merge` (episodes recorded on other nodes).

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;
use support::cli::{endless, json as ok_json};

/// A workspace with `n` offline tasks; returns it and the task ids.
fn workspace(n: usize, seed: u64) -> (tempfile::TempDir, Vec<String>) {
    let ws = tempfile::tempdir().unwrap();
    ok_json(&endless(
        ws.path(),
        &[
            "generate",
            "--offline",
            "--count",
            &n.to_string(),
            "--seed",
            &seed.to_string(),
            "--json",
        ],
    ));
    let list = ok_json(&endless(ws.path(), &["tasks", "list", "--json"]));
    let ids = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    (ws, ids)
}

fn parquet_rows(path: &Path) -> (i64, Vec<String>) {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let meta = reader.metadata().file_metadata();
    let columns = meta
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.path().string())
        .collect();
    (meta.num_rows(), columns)
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn skyrl_and_jsonl_datasets_hold_the_eval_prompt_and_split_by_seed() {
    let (ws, ids) = workspace(4, 3);
    let out = ws.path().join("data");
    let done = ok_json(&endless(
        ws.path(),
        &[
            "tasks",
            "export",
            "--all",
            "--format",
            "skyrl",
            "--dev-count",
            "1",
            "--seed",
            "9",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(done["train"], 3);
    assert_eq!(done["validation"], 1);
    let (train_rows, columns) = parquet_rows(&out.join("train.parquet"));
    let (dev_rows, _) = parquet_rows(&out.join("validation.parquet"));
    assert_eq!((train_rows, dev_rows), (3, 1));
    // Issue 49: readable by the group, as other exports.
    for name in ["train.parquet", "validation.parquet"] {
        let mode = std::fs::metadata(out.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "{name}: {mode:o}");
    }
    assert_eq!(
        columns,
        [
            "data_source",
            "prompt.list.element.role",
            "prompt.list.element.content",
            "env_class",
            "reward_spec.method",
            "reward_spec.ground_truth",
            "extra_info.task_id",
            "extra_info.max_turns",
            "extra_info.max_time",
        ]
    );
    // No staging files are left beside the outputs.
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // The same rows as JSON lines, with the same split for the same seed.
    let out2 = ws.path().join("data2");
    ok_json(&endless(
        ws.path(),
        &[
            "tasks",
            "export",
            "--all",
            "--format",
            "jsonl",
            "--dev-count",
            "1",
            "--seed",
            "9",
            "--out",
            out2.to_str().unwrap(),
            "--json",
        ],
    ));
    let train = jsonl(&out2.join("train.jsonl"));
    let dev = jsonl(&out2.join("validation.jsonl"));
    assert_eq!((train.len(), dev.len()), (3, 1));
    let mut seen: Vec<String> = train
        .iter()
        .chain(&dev)
        .map(|r| r["extra_info"]["task_id"].as_str().unwrap().to_string())
        .collect();
    seen.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(seen, want);
    let row = &dev[0];
    assert_eq!(row["env_class"], "endless");
    assert_eq!(row["data_source"], "endless");
    assert_eq!(row["reward_spec"]["method"], "rule");
    assert_eq!(
        row["reward_spec"]["ground_truth"],
        row["extra_info"]["task_id"]
    );
    assert!(row["extra_info"]["max_turns"].as_i64().unwrap() >= 1);
    assert!(row["extra_info"]["max_time"].as_f64().is_some());
    // The prompt is the one `endless eval` and `serve` give a policy.
    let task_id = row["extra_info"]["task_id"].as_str().unwrap();
    let task = endless::store::Workspace::open(ws.path())
        .unwrap()
        .load_task(task_id)
        .unwrap();
    let want: Vec<Value> = endless::agent::protocol::initial_messages(
        &endless::agent::protocol::Protocol::endless(),
        &task.instruction,
    )
    .iter()
    .map(|m| serde_json::to_value(m).unwrap())
    .collect();
    assert_eq!(row["prompt"].as_array().unwrap(), &want);
    assert_eq!(row["prompt"][0]["role"], "system");
    assert_eq!(row["prompt"][1]["role"], "user");
}

#[test]
fn dataset_export_rejects_bad_selections_clearly() {
    let (ws, ids) = workspace(2, 4);
    let out = ws.path().join("data");
    let o = out.to_str().unwrap();
    let run = |args: &[&str]| {
        let r = endless(ws.path(), args);
        assert!(!r.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&r.stderr).into_owned()
    };
    let err = run(&["tasks", "export", "nope-1", "--format", "skyrl", "--out", o]);
    assert!(err.contains("\"nope-1\""), "{err}");
    let err = run(&[
        "tasks",
        "export",
        "--all",
        "--format",
        "skyrl",
        "--dev-count",
        "5",
        "--out",
        o,
    ]);
    assert!(err.contains("--dev-count 5"), "{err}");
    let err = run(&["tasks", "export", "--format", "jsonl", "--out", o]);
    assert!(err.contains("--all or --status"), "{err}");
    let err = run(&[
        "tasks", "export", "--all", "--format", "native", "--seed", "3", "--out", o,
    ]);
    assert!(err.contains("--format skyrl or jsonl"), "{err}");
    assert!(!out.join("train.parquet").exists());
    let err = run(&[
        "tasks", "export", "--status", "accepted", "--format", "jsonl", "--out", o,
    ]);
    assert!(err.contains("no tasks to export"), "{err}");

    // --status picks the tasks with that status.
    let set = endless(
        ws.path(),
        &["tasks", "set", &ids[1], "--status", "accepted"],
    );
    assert!(set.status.success(), "{set:?}");
    let done = ok_json(&endless(
        ws.path(),
        &[
            "tasks", "export", "--status", "accepted", "--format", "jsonl", "--out", o, "--json",
        ],
    ));
    assert_eq!(
        (done["train"].as_u64(), done["validation"].as_u64()),
        (Some(1), Some(0))
    );
    let rows = jsonl(&out.join("train.jsonl"));
    assert_eq!(rows[0]["extra_info"]["task_id"], ids[1].as_str());
}

/// `eval --policy oracle` of one task; returns the run id.
fn oracle_eval(ws: &Path, task: &str) -> String {
    let out = ok_json(&endless(
        ws,
        &["eval", "--policy", "oracle", "--tasks", task, "--json"],
    ));
    out["run"]
        .as_str()
        .unwrap_or_else(|| panic!("no run in {out}"))
        .to_string()
}

fn episodes(ws: &Path) -> Vec<endless::store::EpisodeRow> {
    endless::store::Workspace::open(ws)
        .unwrap()
        .list_episodes(None)
        .unwrap()
}

fn merge(ws: &Path, other: &Path) -> std::process::Output {
    endless(
        ws,
        &["workspace", "merge", other.to_str().unwrap(), "--json"],
    )
}

#[test]
fn merge_brings_other_nodes_episodes_once_and_reports_conflicts() {
    // Two nodes with the same tasks, each evaluating another one.
    let (a, ids) = workspace(2, 5);
    let (b, ids_b) = workspace(2, 5);
    assert_eq!(ids, ids_b);
    let run_a = oracle_eval(a.path(), &ids[0]);
    let run_b = oracle_eval(b.path(), &ids[1]);
    assert_ne!(run_a, run_b);

    let report = ok_json(&merge(a.path(), b.path()));
    assert_eq!(report["runs_added"], 1, "{report}");
    assert_eq!(report["episodes_added"], 1, "{report}");
    assert_eq!(report["conflicts"].as_array().unwrap().len(), 0, "{report}");
    let merged = episodes(a.path());
    assert_eq!(merged.len(), 2);
    let theirs = merged.iter().find(|e| e.run_id == run_b).unwrap();
    assert!(theirs.passed);
    assert!(a.path().join(&theirs.path).is_file(), "{}", theirs.path);
    let files_after_first: Vec<_> = walkdir::WalkDir::new(a.path().join("runs"))
        .into_iter()
        .map(|e| e.unwrap().path().to_path_buf())
        .collect();

    // Twice changes nothing.
    let again = ok_json(&merge(a.path(), b.path()));
    assert_eq!(again["runs_added"], 0, "{again}");
    assert_eq!(again["episodes_added"], 0, "{again}");
    assert_eq!(again["episodes_unchanged"], 1, "{again}");
    assert_eq!(episodes(a.path()), merged);
    let files_after_second: Vec<_> = walkdir::WalkDir::new(a.path().join("runs"))
        .into_iter()
        .map(|e| e.unwrap().path().to_path_buf())
        .collect();
    assert_eq!(files_after_first, files_after_second);

    // A third node that recorded the same run, task and sample as this
    // one, with other content: a conflict, reported; ours is kept.
    let (c, _) = workspace(2, 5);
    let run_c = oracle_eval(c.path(), &ids[0]);
    assert_eq!(run_c, run_a);
    let ours = std::fs::read(a.path().join(&merged[0].path)).unwrap();
    let out = merge(a.path(), c.path());
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let conflicts = report["conflicts"].as_array().unwrap();
    assert!(
        conflicts.iter().any(|c| c
            .as_str()
            .unwrap()
            .contains(&format!("{run_a}/{}/0", ids[0]))),
        "{report}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("conflict: "));
    assert_eq!(std::fs::read(a.path().join(&merged[0].path)).unwrap(), ours);
    assert_eq!(episodes(a.path()), merged);
}

#[test]
fn merge_of_something_not_a_workspace_names_the_path() {
    let (a, _) = workspace(1, 6);
    let empty = tempfile::tempdir().unwrap();
    for (other, why) in [
        (empty.path().to_path_buf(), "no endless.db"),
        (empty.path().join("nope"), "no such directory"),
        (a.path().to_path_buf(), "that is this workspace"),
    ] {
        let out = merge(a.path(), &other);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&other.display().to_string()), "{err}");
        assert!(err.contains(why), "{err}");
    }
    std::fs::write(empty.path().join("endless.db"), b"not sqlite at all").unwrap();
    let out = merge(a.path(), empty.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("not an endless workspace"), "{err}");
    // Nothing was created in the other directory.
    assert!(!empty.path().join("runs").exists());
}

/// Whether an offline task id (`FAMILY-SEED-cN`) is held out: the documented
/// split (`procgen::split_of`).
fn held_out(id: &str) -> bool {
    let mut parts = id.rsplitn(3, '-');
    let (_, seed, family) = (parts.next(), parts.next(), parts.next());
    let seed: u64 = seed.unwrap().parse().unwrap();
    endless::procgen::split_of(family.unwrap(), seed) == endless::procgen::Split::Dev
}

#[test]
fn an_export_keeps_every_held_out_task_out_of_train() {
    let (ws, ids) = workspace(30, 7);
    let dev: Vec<&String> = ids.iter().filter(|id| held_out(id)).collect();
    assert!(!dev.is_empty(), "the sample has held-out tasks: {ids:?}");
    let out = ws.path().join("data");
    ok_json(&endless(
        ws.path(),
        &[
            "tasks",
            "export",
            "--all",
            "--format",
            "jsonl",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ));
    let ids_in = |name: &str| -> Vec<String> {
        jsonl(&out.join(name))
            .iter()
            .map(|r| r["extra_info"]["task_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (train, validation) = (ids_in("train.jsonl"), ids_in("validation.jsonl"));
    for id in &dev {
        assert!(validation.contains(id), "{id} is held out: {validation:?}");
        assert!(!train.contains(id), "{id} leaked into train");
    }
    assert_eq!(train.len() + validation.len(), ids.len());
    assert_eq!(
        validation.len(),
        dev.len(),
        "only held-out tasks are held out"
    );
}
