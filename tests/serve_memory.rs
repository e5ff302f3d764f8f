//! The server's memory: `endless serve` runs on the C library's allocator
//! (mimalloc held 440-490 MB after 64 concurrent sessions, glibc about
//! 60-70 MB), and `endless bench serve` shows both side by side.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::path::Path;

use serde_json::json;
use support::cli::{endless, json as ok_json};
use support::served::{Api, Served};

fn workspace() -> (tempfile::TempDir, Vec<String>) {
    let ws = tempfile::tempdir().unwrap();
    ok_json(&endless(
        ws.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "3",
            "--seed",
            "9",
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

fn oracle_reply(ws: &Path, task: &str) -> String {
    let script =
        std::fs::read_to_string(ws.join("tasks").join(task).join("solution/solve.sh")).unwrap();
    format!(
        "<command>{}</command>",
        endless::agent::policy::oracle_command(&script)
    )
}

/// `n` oracle episodes at once (through the queue); how many passed.
async fn episodes(api: &Api, ws: &Path, tasks: &[String], n: usize) -> usize {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let api = api.clone();
        let task = tasks[i % tasks.len()].clone();
        let reply = oracle_reply(ws, &task);
        set.spawn(async move {
            let a = api
                .post("/v1/sessions?wait=600", json!({ "task_id": task }), &[])
                .await;
            assert_eq!(a.status, 200, "{}", a.raw);
            let step = format!(
                "/v1/sessions/{}/step",
                a.body["session_id"].as_str().unwrap()
            );
            let mut last = api.post(&step, json!({ "reply": reply }), &[]).await;
            if last.body["done"] != true {
                last = api
                    .post(&step, json!({ "reply": "<action>done</action>" }), &[])
                    .await;
            }
            last.body["info"]["passed"] == true
        });
    }
    let mut passed = 0;
    while let Some(ok) = set.join_next().await {
        passed += usize::from(ok.unwrap());
    }
    passed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_on_the_system_allocator_and_stays_small_after_64_sessions() {
    let (ws, tasks) = workspace();
    let mut after = Vec::new();
    for allocator in [None, Some("mimalloc")] {
        let env: Vec<(&str, &str)> = allocator
            .map(|a| ("ENDLESS_ALLOCATOR", a))
            .into_iter()
            .collect();
        let server = Served::start_with_env(ws.path(), &["--max-sessions", "64"], &env);
        let api = server.client();
        let health = api.get("/v1/health").await.body;
        assert_eq!(
            health["allocator"],
            allocator.unwrap_or("system"),
            "{health}"
        );
        assert_eq!(episodes(&api, ws.path(), &tasks, 64).await, 64);
        after.push(server.rss_mib());
        let (status, said) = server.stop();
        assert!(status.success(), "{said}");
    }
    let (system, mimalloc) = (after[0], after[1]);
    // Measured: 60-70 MB on glibc's allocator, 440-490 MB on mimalloc's.
    assert!(
        system < 160.0,
        "endless serve holds {system:.0} MiB after 64 sessions (mimalloc: {mimalloc:.0} MiB)"
    );
}

#[test]
fn bench_serve_shows_the_servers_memory_on_both_allocators() {
    let ws = tempfile::tempdir().unwrap();
    let out = endless(
        ws.path(),
        &[
            "--create",
            "bench",
            "serve",
            "--clients",
            "4",
            "--episodes",
            "4",
            "--json",
        ],
    );
    let report = ok_json(&out);
    assert_eq!(
        report["allocator"], "system",
        "bench serve runs as serve does"
    );
    let rows = report["server_memory"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["allocator"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["system", "mimalloc"]);
    for r in rows {
        assert_eq!(
            (r["sessions"].as_u64(), r["passed"].as_u64()),
            (Some(4), Some(4)),
            "{r}"
        );
        let (start, after) = (
            r["start_mib"].as_f64().unwrap(),
            r["after_mib"].as_f64().unwrap(),
        );
        assert!(start > 1.0 && after >= start * 0.5, "{r}");
    }
    assert_eq!(rows[0]["serve_default"], true);
    assert!(report["overhead_p50_ms"].is_number());
}
