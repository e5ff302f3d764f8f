//! `--shard I/N`: four shards of offline generation, of validation and of
//! an oracle evaluation, each in its own shard workspace, merged with
//! `endless workspace merge`, equal one unsharded run (the same task
//! bundles, verdicts, report and pass@k); a merge of incomplete shards is
//! refused, naming them; bad `--shard` values are clear errors.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// `endless --workspace WS ARGS...`, with cache, state and config shared by
/// every workspace below `home`.
fn endless(home: &Path, ws: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws)
        .arg("--create")
        .args(args)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".state"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .output()
        .unwrap()
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn json(out: Output) -> Value {
    let out = ok(out);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Every file of every task bundle (but the curation and verdict files,
/// which hold times), by path.
fn bundles(ws: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "curation.json" || name == "validation.json" {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&ws.join("tasks"), &ws.join("tasks"), &mut out);
    out
}

/// A workspace `name` below `home` with the offline tasks of `seed`.
fn with_tasks(home: &Path, name: &str, count: usize, seed: u64) -> PathBuf {
    let ws = home.join(name);
    ok(endless(
        home,
        &ws,
        &[
            "generate",
            "--offline",
            "--count",
            &count.to_string(),
            "--seed",
            &seed.to_string(),
        ],
    ));
    ws
}

/// `endless workspace shards DIR --count 4` from `main`; the shard paths.
fn make_shards(home: &Path, main: &Path, dir: &Path) -> Vec<PathBuf> {
    ok(endless(
        home,
        main,
        &["workspace", "shards", dir.to_str().unwrap(), "--count", "4"],
    ));
    (0..4).map(|i| dir.join(format!("shard-{i}"))).collect()
}

fn merge(home: &Path, main: &Path, dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["workspace", "merge", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    endless(home, main, &args)
}

fn task_ids(home: &Path, ws: &Path) -> Vec<String> {
    let list = json(endless(home, ws, &["tasks", "list", "--json"]));
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn four_generation_shards_merge_to_the_tasks_of_one_run() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let whole = with_tasks(home, "whole", 12, 5);
    let main = home.join("main");
    std::fs::create_dir_all(&main).unwrap();
    let shards = make_shards(home, &main, &home.join("gen"));
    let mut written = 0;
    for (i, shard) in shards.iter().enumerate() {
        let report = json(endless(
            home,
            shard,
            &[
                "generate",
                "--offline",
                "--count",
                "12",
                "--seed",
                "5",
                "--json",
                "--shard",
                &format!("{i}/4"),
            ],
        ));
        written += report["written"].as_u64().unwrap();
    }
    assert_eq!(written, 12, "each task is written by exactly one shard");
    ok(merge(home, &main, &home.join("gen"), &[]));
    assert_eq!(task_ids(home, &main), task_ids(home, &whole));
    assert_eq!(bundles(&main), bundles(&whole));
    // Merging again changes nothing.
    let again = json(merge(home, &main, &home.join("gen"), &[]));
    for m in again["merges"].as_array().unwrap() {
        assert_eq!(m["tasks_added"], 0, "{again}");
        assert!(m["conflicts"].as_array().unwrap().is_empty(), "{again}");
    }
}

#[test]
fn four_validation_shards_merge_to_the_verdicts_of_one_run_and_missing_ones_are_named() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let whole = with_tasks(home, "whole", 8, 7);
    let main = with_tasks(home, "main", 8, 7);
    ok(endless(home, &whole, &["tasks", "validate", "--all"]));
    let shards = make_shards(home, &main, &home.join("val"));
    for (i, shard) in shards.iter().enumerate().take(3) {
        ok(endless(
            home,
            shard,
            &["tasks", "validate", "--all", "--shard", &format!("{i}/4")],
        ));
    }
    // A shard run again resumes: what it validated stays, nothing re-runs.
    let verdict_files = |ws: &Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(ws.join("tasks"))
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let f = e.path().join("validation.json");
                std::fs::read(&f)
                    .ok()
                    .map(|b| (e.file_name().to_string_lossy().into_owned(), b))
            })
            .collect()
    };
    let before_rerun = verdict_files(&shards[0]);
    assert!(!before_rerun.is_empty(), "shard 0 has tasks");
    let again = ok(endless(
        home,
        &shards[0],
        &["tasks", "validate", "--all", "--shard", "0/4"],
    ));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("resuming;") && err.contains("0 of 0 tasks valid"),
        "{err}"
    );
    assert_eq!(verdict_files(&shards[0]), before_rerun);
    // Shard 3 has not run: the merge refuses, naming it, and merges nothing.
    let before = bundles(&main);
    let out = merge(home, &main, &home.join("val"), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shard 3 of 4 (0-based) is missing"), "{err}");
    assert!(err.contains("--allow-partial"), "{err}");
    assert_eq!(bundles(&main), before);
    let stored = endless(home, &main, &["tasks", "validate", "--all", "--stored"]);
    assert!(
        !stored.status.success(),
        "nothing was validated in main yet"
    );
    ok(endless(
        home,
        &shards[3],
        &["tasks", "validate", "--all", "--shard", "3/4"],
    ));
    let merged = json(merge(home, &main, &home.join("val"), &[]));
    assert_eq!(merged["job"]["kind"], "validate");
    let verdicts = |ws: &Path| -> Vec<(String, Value, Value)> {
        let v = json(endless(
            home,
            ws,
            &["tasks", "validate", "--all", "--stored", "--json"],
        ));
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["id"].as_str().unwrap().to_string(),
                    x["ok"].clone(),
                    x["problems"].clone(),
                )
            })
            .collect()
    };
    let (ours, theirs) = (verdicts(&main), verdicts(&whole));
    assert_eq!(ours.len(), 8);
    assert!(ours.iter().all(|(_, ok, _)| ok.is_boolean()), "{ours:?}");
    assert_eq!(ours, theirs);
    // The bundles too: the baselines validation recorded came along.
    assert_eq!(bundles(&main), bundles(&whole));
    let again = json(merge(home, &main, &home.join("val"), &[]));
    for m in again["merges"].as_array().unwrap() {
        assert_eq!(m["verdicts_merged"], 0, "{again}");
        assert!(m["conflicts"].as_array().unwrap().is_empty(), "{again}");
    }
}

#[test]
fn four_eval_shards_merge_to_the_report_and_pass_at_k_of_one_run() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let whole = with_tasks(home, "whole", 6, 9);
    let main = with_tasks(home, "main", 6, 9);
    let eval = ["eval", "--policy", "oracle", "--samples", "2", "--json"];
    let one = json(endless(home, &whole, &eval));
    let run = one["run"].as_str().unwrap().to_string();
    let shards = make_shards(home, &main, &home.join("ev"));
    let mut episodes = 0;
    for (i, shard) in shards.iter().enumerate() {
        let mut args = eval.to_vec();
        let label = format!("{i}/4");
        args.extend(["--shard", &label]);
        let part = json(endless(home, shard, &args));
        assert_eq!(
            part["run"],
            run.as_str(),
            "every shard has the whole run's id"
        );
        episodes += part["episodes"].as_u64().unwrap();
        if i == 0 {
            // A shard run again resumes: nothing new runs.
            let again = json(endless(home, shard, &args));
            assert_eq!(again["episodes"], part["episodes"]);
        }
    }
    assert_eq!(episodes, 12);
    let merged = json(merge(home, &main, &home.join("ev"), &[]));
    assert_eq!(merged["finished"], run.as_str(), "{merged}");
    let report =
        |ws: &Path| std::fs::read_to_string(ws.join("runs").join(&run).join("report.md")).unwrap();
    assert_eq!(report(&main), report(&whole));
    let pass = |ws: &Path| -> Vec<(String, Value)> {
        json(endless(home, ws, &["tasks", "list", "--json"]))
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["id"].as_str().unwrap().to_string(),
                    t["pass_at_k"].clone(),
                )
            })
            .collect()
    };
    let p = pass(&main);
    assert!(p.iter().all(|(_, k)| k["1"] == 1.0), "{p:?}");
    assert_eq!(p, pass(&whole));
    // The run's summary in the index: the unsharded run's report.
    let summary = |ws: &Path| -> Value {
        let db = rusqlite::Connection::open(ws.join("endless.db")).unwrap();
        let (s, c): (String, String) = db
            .query_row(
                "SELECT summary, config FROM runs WHERE id = ?1",
                [&run],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        serde_json::json!({ "summary": serde_json::from_str::<Value>(&s).unwrap(), "config": serde_json::from_str::<Value>(&c).unwrap() })
    };
    let (mut a, mut b) = (summary(&main), summary(&whole));
    // Wall-clock fields differ between runs.
    for v in [&mut a, &mut b] {
        strip_times(v);
    }
    assert_eq!(a, b);
    let again = json(merge(home, &main, &home.join("ev"), &[]));
    for m in again["merges"].as_array().unwrap() {
        assert_eq!(m["episodes_added"], 0, "{again}");
        assert!(m["conflicts"].as_array().unwrap().is_empty(), "{again}");
    }
    assert_eq!(report(&main), report(&whole));
}

/// Remove keys that hold durations or times.
fn strip_times(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| {
                !(k.contains("sec")
                    || k.contains("time")
                    || k.contains("duration")
                    || k.ends_with("_at"))
            });
            for x in map.values_mut() {
                strip_times(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_times),
        _ => {}
    }
}

#[test]
fn partial_merges_are_asked_for_and_bad_shards_are_clear_errors() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let main = with_tasks(home, "main", 4, 3);
    let shards = make_shards(home, &main, &home.join("val"));
    ok(endless(
        home,
        &shards[1],
        &["tasks", "validate", "--all", "--shard", "1/4"],
    ));
    let out = merge(home, &main, &home.join("val"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shards 0, 2, 3 of 4 (0-based) are missing"),
        "{err}"
    );
    let partial = json(merge(home, &main, &home.join("val"), &["--allow-partial"]));
    assert_eq!(partial["job"]["missing"], serde_json::json!([0, 2, 3]));
    assert_eq!(partial["merges"].as_array().unwrap().len(), 1);
    for (bad, why) in [
        ("4/4", "I must be below N"),
        ("0/0", "N must be 1 to"),
        ("a/4", "is not a whole number"),
        ("3", "is not I/N"),
    ] {
        for args in [
            vec!["tasks", "validate", "--all", "--shard", bad],
            vec!["eval", "--policy", "oracle", "--shard", bad],
            vec!["generate", "--offline", "--shard", bad],
        ] {
            let out = endless(home, &main, &args);
            assert!(!out.status.success(), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(why) && err.contains("--shard"),
                "{args:?}: {err}"
            );
        }
    }
    let out = endless(home, &main, &["generate", "--shard", "0/2"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--offline"));
}
