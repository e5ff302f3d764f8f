//! `endless serve` inside a trainer: creates over the limit wait in line
//! (first come, first served, capped, with `Retry-After` on every 429 and
//! 503), a waiter that goes away or a drain leaks no place, and a step or
//! create retried with its `Idempotency-Key` gets the first answer and
//! never runs twice. The real binary on 127.0.0.1 with real sandboxes.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::cli::{endless, json as ok_json};
use support::served::{Answer, Api, Served};

/// A workspace with two offline tasks; returns it and the first task id.
fn workspace() -> (tempfile::TempDir, String) {
    let ws = tempfile::tempdir().unwrap();
    ok_json(&endless(
        ws.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "2",
            "--seed",
            "5",
            "--json",
        ],
    ));
    let list = ok_json(&endless(ws.path(), &["tasks", "list", "--json"]));
    let id = list[0]["id"].as_str().unwrap().to_string();
    (ws, id)
}

async fn open(api: &Api, task: &str) -> String {
    let a = api
        .post("/v1/sessions", json!({ "task_id": task }), &[])
        .await;
    assert_eq!(a.status, 200, "{}", a.raw);
    a.body["session_id"].as_str().unwrap().to_string()
}

async fn queued(api: &Api) -> u64 {
    api.get("/v1/health").await.body["queued"].as_u64().unwrap()
}

/// Poll until `queued` creates wait (or fail after 10 s).
async fn until_queued(api: &Api, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while queued(api).await != n {
        assert!(Instant::now() < deadline, "never {n} waiting");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn assert_retry_after(a: &Answer, status: u16) {
    assert_eq!(a.status, status, "{}", a.raw);
    let secs: u64 = a.header("retry-after").parse().unwrap_or_else(|_| {
        panic!("no Retry-After on a {status}: {:?}", a.headers);
    });
    assert!((1..=60).contains(&secs), "Retry-After: {secs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_over_the_limit_wait_in_line_first_come_first_served() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--max-sessions", "1", "--max-queue", "2"]);
    let api = server.client();
    let first = open(&api, &task).await;
    // Without asking to wait: a 429 that says when to retry.
    let refused = api
        .post("/v1/sessions", json!({ "task_id": task }), &[])
        .await;
    assert_retry_after(&refused, 429);
    assert!(refused.body["error"].as_str().unwrap().contains("wait"));
    // Two waiters, the second asking through `Prefer: wait`.
    let order = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let waiter = |name: &'static str, path: &'static str, prefer: &'static str| {
        let (api, task, order) = (api.clone(), task.clone(), order.clone());
        tokio::spawn(async move {
            let headers: Vec<(&str, &str)> = if prefer.is_empty() {
                vec![]
            } else {
                vec![("prefer", prefer)]
            };
            let a = api.post(path, json!({ "task_id": task }), &headers).await;
            order.lock().push(name);
            a
        })
    };
    let b = waiter("b", "/v1/sessions?wait=60", "");
    until_queued(&api, 1).await;
    let c = waiter("c", "/v1/sessions", "wait=60");
    until_queued(&api, 2).await;
    // The queue holds two: a third waiter is refused at once.
    let full = api
        .post("/v1/sessions?wait=60", json!({ "task_id": task }), &[])
        .await;
    assert_retry_after(&full, 429);
    assert!(
        full.body["error"]
            .as_str()
            .unwrap()
            .contains("already wait"),
        "{}",
        full.raw
    );
    // Deleting the first session lets the first waiter in, only it.
    let del = api.delete(&format!("/v1/sessions/{first}")).await;
    assert_eq!(del.status, 200, "{}", del.raw);
    let b = b.await.unwrap();
    assert_eq!(b.status, 200, "{}", b.raw);
    assert_eq!(queued(&api).await, 1);
    assert_eq!(*order.lock(), ["b"]);
    // An episode that ends frees its place before its session is deleted.
    let b_id = b.body["session_id"].as_str().unwrap();
    let done = api
        .post(
            &format!("/v1/sessions/{b_id}/step"),
            json!({"reply": "<action>done</action>"}),
            &[],
        )
        .await;
    assert_eq!(done.body["done"], true, "{}", done.raw);
    let c = c.await.unwrap();
    assert_eq!(c.status, 200, "{}", c.raw);
    assert_eq!(*order.lock(), ["b", "c"]);
    let health = api.get("/v1/health").await.body;
    assert_eq!(
        (health["sessions"].as_u64(), health["queued"].as_u64()),
        (Some(1), Some(0))
    );
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_gets_429_and_leaves_the_line() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--max-sessions", "1", "--max-wait", "1"]);
    let api = server.client();
    open(&api, &task).await;
    let t0 = Instant::now();
    // Asks for a minute; the server's --max-wait cuts it to one second.
    let late = api
        .post("/v1/sessions?wait=60", json!({ "task_id": task }), &[])
        .await;
    assert_retry_after(&late, 429);
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(late.body["error"].as_str().unwrap().contains("within 1 s"));
    assert_eq!(queued(&api).await, 0);
    let bad = api
        .post("/v1/sessions?wait=-3", json!({ "task_id": task }), &[])
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);
    assert!(bad.body["error"].as_str().unwrap().contains("wait"));
    let unknown = api
        .post("/v1/sessions?wiat=3", json!({ "task_id": task }), &[])
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.raw);
    assert!(unknown.body["error"].as_str().unwrap().contains("\"wiat\""));
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// Send a waiting create on a raw connection and hang up once it is in line.
fn abandoned_create(server: &Served, task: &str) {
    let addr = server.url.trim_start_matches("http://");
    let body = json!({ "task_id": task }).to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/sessions?wait=60 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.token,
        body.len()
    )
    .unwrap();
    s.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_goes_away_leaks_no_place() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--max-sessions", "1"]);
    let api = server.client();
    let first = open(&api, &task).await;
    abandoned_create(&server, &task);
    // The server notices the hang-up and takes it out of line.
    until_queued(&api, 0).await;
    assert_eq!(
        api.delete(&format!("/v1/sessions/{first}")).await.status,
        200
    );
    // The freed place went to nobody: a create without waiting gets it.
    let again = api
        .post("/v1/sessions", json!({ "task_id": task }), &[])
        .await;
    assert_eq!(again.status, 200, "{}", again.raw);
    let health = api.get("/v1/health").await.body;
    assert_eq!(health["sessions"], 1, "{health}");
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_answers_waiters_503_at_once() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--max-sessions", "1"]);
    let api = server.client();
    open(&api, &task).await;
    let waiter = {
        let (api, task) = (api.clone(), task.clone());
        tokio::spawn(async move {
            api.post("/v1/sessions?wait=120", json!({ "task_id": task }), &[])
                .await
        })
    };
    until_queued(&api, 1).await;
    let t0 = Instant::now();
    server.terminate();
    let refused = waiter.await.unwrap();
    assert_retry_after(&refused, 503);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    // The session left open is recorded as interrupted; no other was made.
    let rows = endless::store::Workspace::open(ws.path())
        .unwrap()
        .list_episodes(None)
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
}

/// Lines of `runs.txt` in the session's working directory, counted by a
/// step (unkeyed).
async fn runs(api: &Api, id: &str) -> String {
    let a = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": "<command>echo count=$(wc -l < runs.txt)</command>"}),
            &[],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.raw);
    let obs = a.body["observation"].as_str().unwrap();
    let at = obs.find("count=").unwrap_or_else(|| panic!("{obs}"));
    obs[at + "count=".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_step_with_its_key_gets_the_first_answer_and_runs_once() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &[]);
    let api = server.client();
    let id = open(&api, &task).await;
    let step = format!("/v1/sessions/{id}/step");
    let reply = json!({"reply": "<command>echo ran >> runs.txt; wc -l < runs.txt</command>"});
    let first = api
        .post(&step, reply.clone(), &[("Idempotency-Key", "k-1")])
        .await;
    assert_eq!(first.status, 200, "{}", first.raw);
    let again = api
        .post(&step, reply.clone(), &[("idempotency-key", "k-1")])
        .await;
    assert_eq!(again.status, 200, "{}", again.raw);
    assert_eq!(again.raw, first.raw, "the same answer, byte for byte");
    assert_eq!(runs(&api, &id).await, "1");
    // The key with another reply is refused, not answered with the old one.
    let other = api
        .post(
            &step,
            json!({"reply": "<command>rm runs.txt</command>"}),
            &[("Idempotency-Key", "k-1")],
        )
        .await;
    assert_eq!(other.status, 422, "{}", other.raw);
    assert!(other.body["error"].as_str().unwrap().contains("k-1"));
    let bad = api
        .post(&step, reply.clone(), &[("Idempotency-Key", "a b")])
        .await;
    assert_eq!(bad.status, 400, "{}", bad.raw);

    // The answer lost on the way: the client hangs up while the command
    // runs, and retries; the retry waits for the first run's answer.
    let addr = server.url.trim_start_matches("http://").to_string();
    let slow = json!({"reply": "<command>sleep 2; echo ran >> runs.txt; echo slow-done</command>"})
        .to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST {step} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nIdempotency-Key: k-2\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{slow}",
        server.token,
        slow.len()
    )
    .unwrap();
    s.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(s);
    let slow: Value = serde_json::from_str(&slow).unwrap();
    let retried = api.post(&step, slow, &[("Idempotency-Key", "k-2")]).await;
    assert_eq!(retried.status, 200, "{}", retried.raw);
    assert!(
        retried.body["observation"]
            .as_str()
            .unwrap()
            .contains("slow-done"),
        "{}",
        retried.raw
    );
    assert_eq!(runs(&api, &id).await, "2", "the slow command ran once");

    // The final step too: its retry gets the final answer, not a 409.
    let done = json!({"reply": "<action>done</action>"});
    let last = api
        .post(&step, done.clone(), &[("Idempotency-Key", "k-3")])
        .await;
    assert_eq!(last.body["done"], true, "{}", last.raw);
    let last_again = api.post(&step, done, &[("Idempotency-Key", "k-3")]).await;
    assert_eq!(last_again.raw, last.raw);
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    assert_eq!(
        endless::store::Workspace::open(ws.path())
            .unwrap()
            .list_episodes(None)
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_with_its_key_gets_the_same_session() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--max-sessions", "1"]);
    let api = server.client();
    let body = json!({ "task_id": task, "seed": 7 });
    let key = [("Idempotency-Key", "create-1")];
    let first = api.post("/v1/sessions", body.clone(), &key).await;
    assert_eq!(first.status, 200, "{}", first.raw);
    // Even at the limit (this session fills it), the retry gets its answer.
    let again = api.post("/v1/sessions?wait=5", body.clone(), &key).await;
    assert_eq!(again.status, 200, "{}", again.raw);
    assert_eq!(again.raw, first.raw);
    let other = api
        .post("/v1/sessions", json!({ "task_id": task, "seed": 8 }), &key)
        .await;
    assert_eq!(other.status, 422, "{}", other.raw);
    let health = api.get("/v1/health").await.body;
    assert_eq!(health["sessions"], 1, "{health}");
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// The OpenAPI document describes the wait, the key and Retry-After.
#[test]
fn the_openapi_document_describes_waiting_and_keys() {
    let doc: Value = serde_json::from_str(include_str!("../assets/serve/openapi.json")).unwrap();
    let key = &doc["components"]["parameters"]["IdempotencyKey"];
    assert_eq!(
        (&key["name"], &key["in"]),
        (&json!("Idempotency-Key"), &json!("header"))
    );
    let refs = |op: &Value| op["parameters"].to_string();
    let create = &doc["paths"]["/v1/sessions"]["post"];
    assert!(refs(create).contains("\"wait\"") && refs(create).contains("IdempotencyKey"));
    assert!(refs(&doc["paths"]["/v1/sessions/{id}/step"]["post"]).contains("IdempotencyKey"));
    let busy = &doc["components"]["responses"]["Busy"];
    assert!(busy["headers"]["Retry-After"].is_object(), "{busy}");
    assert_eq!(
        create["responses"]["429"]["$ref"],
        "#/components/responses/Busy"
    );
}
