//! `endless serve` end to end: the real binary on 127.0.0.1, real sandboxes,
//! driven over HTTP like a trainer would.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::cli::{endless, json as ok_json};

/// A running `endless serve` on a workspace, stopped with SIGTERM on drop.
struct Served {
    child: Child,
    url: String,
    token: String,
    stderr: std::sync::mpsc::Receiver<String>,
    /// What it said on stderr before it listened.
    said_at_start: Vec<String>,
}

impl Served {
    fn start(ws: &Path, extra: &[&str]) -> Served {
        let token_file = ws.join("serve.token");
        let mut child = Command::new(env!("CARGO_BIN_EXE_endless"))
            .arg("--workspace")
            .arg(ws)
            .args(["serve", "--bind", "127.0.0.1:0", "--token-file"])
            .arg(&token_file)
            .args(extra)
            .env("XDG_CACHE_HOME", ws.join(".cache"))
            .env("XDG_STATE_HOME", ws.join(".state"))
            .env("XDG_CONFIG_HOME", ws.join(".config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut said_at_start = Vec::new();
        let url = loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the server did not say where it listens");
            if let Some(at) = line.find("listening on ") {
                break line[at + "listening on ".len()..].trim().to_string();
            }
            said_at_start.push(line);
        };
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .to_string();
        Served {
            child,
            url,
            token,
            stderr: rx,
            said_at_start,
        }
    }

    fn client(&self) -> Api {
        Api {
            http: reqwest::Client::new(),
            url: self.url.clone(),
            token: Some(self.token.clone()),
        }
    }

    /// SIGTERM, then the exit status and everything it said on stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        };
        let said: Vec<String> = self.stderr.try_iter().collect();
        (status, said.join("\n"))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tiny client for the API.
struct Api {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Api {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(
            reqwest::Method::POST,
            path,
            Some(body.to_string().into_bytes()),
        )
        .await
    }
    async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, None).await
    }
}

/// POST a step with a `len`-byte body and read the answer: its status and JSON body.
fn huge_step(server: &Served, id: &str, len: usize) -> (u16, Value) {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /v1/sessions/{id}/step HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n{{\"reply\": \"",
        server.token
    );
    s.write_all(head.as_bytes()).unwrap();
    // Keep sending the body while reading the answer: the server answers
    // once it has read past its limit, before the body ends.
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0;
        while sent < len && w.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (
        status,
        serde_json::from_str(body).unwrap_or(Value::String(text.clone())),
    )
}

/// A workspace with a few offline tasks; returns it and the first task id.
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

fn oracle_reply(ws: &Path, task: &str) -> String {
    let script =
        std::fs::read_to_string(ws.join("tasks").join(task).join("solution/solve.sh")).unwrap();
    format!(
        "<think>Run the solution.</think>\n<command>{}</command>",
        endless::agent::policy::oracle_command(&script)
    )
}

/// Every process below `pid` (children, grandchildren...).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r.to_string()) else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        parents.push((p, ppid));
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out.remove(0);
    out
}

/// The descendants of `pid` that belong to sessions: all but the backend's
/// pre-warmed verifier (`... -c PROGRAM zygote`), which lives as long as
/// the server (its own children, verifications in flight, do count).
fn session_processes(pid: u32) -> Vec<u32> {
    descendants(pid)
        .into_iter()
        .filter(|p| {
            !std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.ends_with(b"\0zygote\0"))
        })
        .collect()
}

fn episodes(ws: &Path) -> Vec<endless::store::EpisodeRow> {
    endless::store::Workspace::open(ws)
        .unwrap()
        .list_episodes(None)
        .unwrap()
}

/// How long a client pauses between steps (a slow LLM call): longer than
/// the runtime keeps an idle blocking thread (10 s).
const CLIENT_PAUSE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_session_outlives_a_long_client_pause() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &[]);
    let api = server.client();
    let (s, opened) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    let step = |word: &'static str| {
        let path = format!("/v1/sessions/{id}/step");
        let reply = format!("<command>echo {word}-$((6*7))</command>");
        let api = &api;
        async move { api.post(&path, json!({ "reply": reply })).await }
    };
    let (s, before) = step("before").await;
    assert_eq!(s, 200, "{before}");
    assert!(
        before["observation"]
            .as_str()
            .unwrap()
            .contains("before-42"),
        "{before}"
    );
    tokio::time::sleep(CLIENT_PAUSE).await;
    let (s, after) = step("after").await;
    assert_eq!((s, &after["done"]), (200, &json!(false)), "{after}");
    assert!(
        after["observation"].as_str().unwrap().contains("after-42"),
        "{after}"
    );
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oracle_episode_over_http_earns_reward_one_and_is_recorded() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--reward", "binary"]);
    let api = server.client();
    let (s, health) = api.get("/v1/health").await;
    assert_eq!(
        (s, health["status"].as_str()),
        (200, Some("ok")),
        "{health}"
    );
    let (s, tasks) = api.get("/v1/tasks").await;
    assert_eq!(s, 200);
    assert_eq!(tasks.as_array().unwrap().len(), 2, "{tasks}");
    let (s, train) = api.get("/v1/tasks?split=train").await;
    assert_eq!(s, 200, "{train}");
    let (s, _) = api.get("/v1/tasks?split=nope").await;
    assert_eq!(s, 400);

    let (s, opened) = api
        .post(
            "/v1/sessions",
            json!({"task_id": task, "seed": 7, "run": "oracle"}),
        )
        .await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    let messages = opened["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(opened["run_id"], "serve-oracle");
    assert_eq!(opened["protocol"], "endless");

    let (s, garbled) = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": "no tags here"}),
        )
        .await;
    assert_eq!(s, 200, "{garbled}");
    assert_eq!(garbled["done"], false);
    assert!(garbled["observation"]
        .as_str()
        .unwrap()
        .contains("could not be parsed"));

    let (s, ran) = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": oracle_reply(ws.path(), &task)}),
        )
        .await;
    assert_eq!((s, &ran["done"]), (200, &json!(false)), "{ran}");
    assert_eq!(ran["info"]["turn"], 2);

    let (s, done) = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": "<think>Finished.</think><action>done</action>"}),
        )
        .await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["done"], true);
    assert_eq!(done["reward"], 1.0, "{done}");
    assert_eq!(done["info"]["end_reason"], "done");
    assert_eq!(done["info"]["passed"], true);
    assert!(!done["info"]["tests"].as_array().unwrap().is_empty());

    let (s, again) = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": "<action>done</action>"}),
        )
        .await;
    assert_eq!(s, 409, "{again}");
    assert!(again["error"].as_str().unwrap().contains("over"));

    let (s, closed) = api.delete(&format!("/v1/sessions/{id}")).await;
    assert_eq!(s, 200, "{closed}");
    assert_eq!(closed["result"]["reward"], 1.0);
    let (s, _) = api.delete(&format!("/v1/sessions/{id}")).await;
    assert_eq!(s, 404);

    let (_, metrics) = api.get("/metrics").await;
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(metrics.contains("endless_serve_steps_total 3"), "{metrics}");
    assert!(
        metrics.contains("endless_serve_open_sessions 0"),
        "{metrics}"
    );
    assert!(metrics.contains("endless_serve_episodes_total{outcome=\"passed\"} 1"));

    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    let rows = episodes(ws.path());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].run_id.as_str(), rows[0].passed),
        ("serve-oracle", true)
    );
    assert!(ws.path().join(&rows[0].path).is_file());
    let runs = endless::store::Workspace::open(ws.path())
        .unwrap()
        .list_runs()
        .unwrap();
    assert!(runs
        .iter()
        .any(|r| r.id == "serve-oracle" && r.kind == "serve"));
}

/// `--reward partial` pays only for progress over the initial state: on a
/// family whose tests partly pass untouched (the old fraction-passed reward
/// paid about 0.6 for doing nothing), saying done at once earns 0 and the
/// oracle 1. The tasks were never validated, so the server measures each
/// baseline once, lazily.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partial_reward_pays_nothing_for_doing_nothing() {
    let ws = tempfile::tempdir().unwrap();
    ok_json(&endless(
        ws.path(),
        &[
            "generate",
            "--offline",
            "--count",
            "1",
            "--seed",
            "3",
            "--families",
            "cleanup-temp-files",
            "--json",
        ],
    ));
    let list = ok_json(&endless(ws.path(), &["tasks", "list", "--json"]));
    let task = list[0]["id"].as_str().unwrap().to_string();
    let server = Served::start(ws.path(), &["--reward", "partial"]);
    let api = server.client();
    let mut rewards = Vec::new();
    for replies in [vec![], vec![oracle_reply(ws.path(), &task)]] {
        let (s, opened) = api
            .post("/v1/sessions", json!({"task_id": task, "run": "partial"}))
            .await;
        assert_eq!(s, 200, "{opened}");
        let id = opened["session_id"].as_str().unwrap().to_string();
        for reply in replies {
            let (s, ran) = api
                .post(&format!("/v1/sessions/{id}/step"), json!({"reply": reply}))
                .await;
            assert_eq!((s, &ran["done"]), (200, &json!(false)), "{ran}");
        }
        let (s, done) = api
            .post(
                &format!("/v1/sessions/{id}/step"),
                json!({"reply": "<think>Finished.</think><action>done</action>"}),
            )
            .await;
        assert_eq!((s, &done["done"]), (200, &json!(true)), "{done}");
        rewards.push((
            done["reward"].as_f64().unwrap(),
            done["info"]["tests"].clone(),
        ));
        let (s, _) = api.delete(&format!("/v1/sessions/{id}")).await;
        assert_eq!(s, 200);
    }
    let (nothing, tests) = &rewards[0];
    assert_eq!(*nothing, 0.0, "doing nothing earned {nothing}: {tests}");
    assert!(
        tests
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["passed"] == true),
        "some tests pass untouched here: {tests}"
    );
    assert_eq!(rewards[1].0, 1.0, "the oracle: {}", rewards[1].1);
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_follow_the_servers_protocol_or_their_own() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--protocol", "reference"]);
    let api = server.client();
    let (s, opened) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(
        (s, &opened["protocol"]),
        (200, &json!("reference")),
        "{opened}"
    );
    let id = opened["session_id"].as_str().unwrap().to_string();
    // The reference's nudge, and done anywhere ends before the command runs.
    let (_, garbled) = api
        .post(&format!("/v1/sessions/{id}/step"), json!({"reply": "hmm"}))
        .await;
    assert!(
        garbled["observation"]
            .as_str()
            .unwrap()
            .starts_with("Could not parse a single <command>"),
        "{garbled}"
    );
    let (_, done) = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": "<action>done</action><command>touch /tmp/x</command>"}),
        )
        .await;
    assert_eq!(
        (&done["done"], &done["observation"]),
        (&json!(true), &json!("")),
        "{done}"
    );
    let (s, ours) = api
        .post(
            "/v1/sessions",
            json!({"task_id": task, "protocol": "endless"}),
        )
        .await;
    assert_eq!((s, &ours["protocol"]), (200, &json!("endless")), "{ours}");
    let id = ours["session_id"].as_str().unwrap().to_string();
    let (_, garbled) = api
        .post(&format!("/v1/sessions/{id}/step"), json!({"reply": "hmm"}))
        .await;
    assert!(
        garbled["observation"]
            .as_str()
            .unwrap()
            .contains("could not be parsed"),
        "{garbled}"
    );
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clean_json_errors() {
    let (ws, task) = workspace();
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(ws.path().join("serve.token"))
            .unwrap();
        writeln!(f, "first-client-token\nsecond-client-token").unwrap();
    }
    let server = Served::start(ws.path(), &["--max-sessions", "1"]);
    let api = server.client();
    let expect = |what: &str, (s, body): (u16, Value), want: u16| {
        assert_eq!(s, want, "{what}: {body}");
        assert!(
            body["error"].is_string(),
            "{what}: not a JSON error: {body}"
        );
    };
    let raw = |body: &[u8]| Some(body.to_vec());
    expect(
        "malformed JSON",
        api.send(
            reqwest::Method::POST,
            "/v1/sessions",
            raw(b"{\"task_id\": "),
        )
        .await,
        400,
    );
    expect(
        "non-UTF-8 body",
        api.send(
            reqwest::Method::POST,
            "/v1/sessions",
            raw(b"{\"task_id\": \"\xff\xfe\"}"),
        )
        .await,
        400,
    );
    expect(
        "missing field",
        api.post("/v1/sessions", json!({})).await,
        400,
    );
    expect(
        "unknown task",
        api.post("/v1/sessions", json!({"task_id": "nope"})).await,
        404,
    );
    expect(
        "path-like task",
        api.post("/v1/sessions", json!({"task_id": "../../etc"}))
            .await,
        404,
    );
    expect(
        "bad run name",
        api.post("/v1/sessions", json!({"task_id": task, "run": "../x"}))
            .await,
        400,
    );
    let (s, body) = api
        .post("/v1/sessions", json!({"task_id": task, "protocol": "ours"}))
        .await;
    expect("unknown protocol", (s, body.clone()), 400);
    assert!(
        body["error"].as_str().unwrap().contains("protocol"),
        "{body}"
    );
    expect("unknown route", api.get("/v2/nothing").await, 404);
    expect(
        "unknown session",
        api.post(
            "/v1/sessions/0123abcd-0000-4000-8000-000000000000/step",
            json!({"reply": "x"}),
        )
        .await,
        404,
    );
    expect(
        "path-like session id",
        api.post("/v1/sessions/..%2F..%2Fetc/step", json!({"reply": "x"}))
            .await,
        400,
    );
    expect("not a uuid", api.delete("/v1/sessions/abc").await, 400);

    let wrong = Api {
        token: Some("wrong".into()),
        ..server.client()
    };
    expect("wrong token", wrong.get("/v1/tasks").await, 401);
    let none = Api {
        token: None,
        ..server.client()
    };
    expect(
        "no token",
        none.post("/v1/sessions", json!({"task_id": task})).await,
        401,
    );

    let (s, opened) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    expect(
        "over --max-sessions",
        api.post("/v1/sessions", json!({"task_id": task})).await,
        429,
    );
    // A 10 MB reply: the server answers 413 from the announced length.
    let (status, body) = huge_step(&server, &id, 10 << 20);
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("too large"),
        "{body}"
    );
    let other = Api {
        token: Some("second-client-token".into()),
        ..server.client()
    };
    expect(
        "another token's session",
        other
            .post(&format!("/v1/sessions/{id}/step"), json!({"reply": "x"}))
            .await,
        404,
    );
    // The session survived all that.
    let (s, stepped) = api
        .post(
            &format!("/v1/sessions/{id}/step"),
            json!({"reply": "<command>pwd</command>"}),
        )
        .await;
    assert_eq!(s, 200, "{stepped}");
    let (s, closed) = api.delete(&format!("/v1/sessions/{id}")).await;
    assert_eq!(s, 200, "{closed}");
    assert_eq!(closed["result"]["info"]["end_reason"], "error");
    assert!(closed["result"]["info"]["error"]
        .as_str()
        .unwrap()
        .contains("interrupted"));
    let (s, _) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "a deleted session frees its place");
    let (_, metrics) = api.get("/metrics").await;
    assert!(metrics
        .as_str()
        .unwrap()
        .contains("endless_serve_errors_total{status=\"429\"} 1"));
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_is_reaped_and_a_stopped_server_records_open_sessions() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--idle-timeout", "1"]);
    let api = server.client();
    let (s, opened) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{opened}");
    // The client goes away; the reaper ends the session.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, m) = api.get("/metrics").await;
        if m.as_str().unwrap().contains("endless_serve_reaped_total 1")
            && session_processes(server.child.id()).is_empty()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not reaped: {m}\n{:?}",
            session_processes(server.child.id())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let id = opened["session_id"].as_str().unwrap();
    let (s, _) = api
        .post(&format!("/v1/sessions/{id}/step"), json!({"reply": "x"}))
        .await;
    assert_eq!(s, 404);

    // A session open at SIGTERM is recorded as interrupted.
    let (s, _) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200);
    let pid = server.child.id();
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    assert!(descendants(pid).is_empty());
    let rows = episodes(ws.path());
    assert_eq!(rows.len(), 2, "{rows:?}\n{said}");
    assert!(rows.iter().all(|r| r.end_reason == "error" && !r.passed));
    let result: Value =
        serde_json::from_slice(&std::fs::read(ws.path().join(&rows[1].path)).unwrap()).unwrap();
    assert!(
        result["error"].as_str().unwrap().contains("interrupted"),
        "{result}"
    );
}

#[test]
fn no_auth_is_refused_off_loopback() {
    let ws = tempfile::tempdir().unwrap();
    let out = endless(ws.path(), &["serve", "--bind", "0.0.0.0:0", "--no-auth"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}

/// `/v1/health` and `/metrics` need the token like every request, unless
/// `--open-metrics` or `[serve] open_metrics = true` opens those two (on
/// loopback only; the rest of the API still needs the token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_need_the_token_unless_opened() {
    let ws = tempfile::tempdir().unwrap();
    let statuses = |server: &Served| {
        let (with, without) = (
            server.client(),
            Api {
                token: None,
                ..server.client()
            },
        );
        async move {
            let mut out = Vec::new();
            for path in ["/v1/health", "/metrics", "/v1/tasks"] {
                out.push((with.get(path).await.0, without.get(path).await.0));
            }
            out
        }
    };
    let server = Served::start(ws.path(), &[]);
    assert_eq!(statuses(&server).await, [(200, 401); 3], "by default");
    assert!(server.stop().0.success());
    let opened = [(200, 200), (200, 200), (200, 401)];
    let server = Served::start(ws.path(), &["--open-metrics"]);
    assert_eq!(statuses(&server).await, opened, "--open-metrics");
    assert!(server.stop().0.success());
    std::fs::write(
        ws.path().join("endless.toml"),
        "[serve]\nopen_metrics = true\n",
    )
    .unwrap();
    let server = Served::start(ws.path(), &[]);
    assert_eq!(statuses(&server).await, opened, "[serve] open_metrics");
    assert!(server.stop().0.success());
    let out = endless(ws.path(), &["serve", "--bind", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("open_metrics") && err.contains("loopback"),
        "{err}"
    );
}

/// Lines of the mount table that mention `path`.
fn mounts_under(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .map(str::to_string)
        .collect()
}

/// Entries of every `sessions` directory of the sandbox cache under `ws`.
fn sandbox_session_dirs(ws: &Path) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(ws.join(".cache"))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_dir() && e.file_name() == "sessions")
        .flat_map(|e| {
            std::fs::read_dir(e.path())
                .unwrap()
                .map(|x| x.unwrap().path())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_with_sigkill_leaves_nothing_and_the_next_reports_its_lost_sessions() {
    let (ws, task) = workspace();
    let mut server = Served::start(ws.path(), &["--run", "k"]);
    let api = server.client();
    let (s, opened) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{opened}");
    let lost_id = opened["session_id"].as_str().unwrap().to_string();
    let (s, _) = api
        .post(
            &format!("/v1/sessions/{lost_id}/step"),
            json!({"reply": "<command>echo hi</command>"}),
        )
        .await;
    assert_eq!(s, 200);
    // Under load: two more sessions open, one of them mid-step.
    let (s, second) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{second}");
    let (s, third) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{third}");
    let third_id = third["session_id"].as_str().unwrap().to_string();
    // (A raw request: the connection drops when the server dies.)
    let busy = tokio::spawn(
        reqwest::Client::new()
            .post(format!("{}/v1/sessions/{third_id}/step", server.url))
            .bearer_auth(&server.token)
            .json(&json!({"reply": "<command>sleep 30</command>"}))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = server.child.id();
    let sandbox = descendants(pid);
    assert!(!sandbox.is_empty(), "no sandbox process under the server");

    // SIGKILL: nothing gets recorded, but the sandbox dies with its parent.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // The client of the step in flight sees the connection drop, not a hang.
    let answer = tokio::time::timeout(Duration::from_secs(10), busy)
        .await
        .expect("a client of the killed server hung")
        .unwrap();
    assert!(answer.is_err(), "{answer:?}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let alive: Vec<u32> = sandbox
            .iter()
            .copied()
            .filter(|p| Path::new(&format!("/proc/{p}")).exists())
            .filter(|p| {
                // Zombies are dead already (reaped by whoever adopted them).
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| !s.contains(") Z "))
                    .unwrap_or(false)
            })
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sandbox processes outlived the server: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        mounts_under(ws.path()).is_empty(),
        "{:?}",
        mounts_under(ws.path())
    );
    assert!(episodes(ws.path()).is_empty());

    // The next server on the workspace records it as interrupted, says so
    // on stderr and in /v1/health, and cleans the dead one's sandbox dirs.
    let server = Served::start(ws.path(), &["--run", "k"]);
    let api = server.client();
    let (s, health) = api.get("/v1/health").await;
    assert_eq!(s, 200);
    assert_eq!(health["lost_sessions"], 3, "{health}");
    let rows = episodes(ws.path());
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r.end_reason == "error" && !r.passed));
    let first = rows
        .iter()
        .find(|r| u64::from(r.sample) == opened["sample"].as_u64().unwrap())
        .unwrap();
    let result: Value =
        serde_json::from_slice(&std::fs::read(ws.path().join(&first.path)).unwrap()).unwrap();
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains(&lost_id) && error.contains("interrupted"),
        "{error}"
    );
    // A new session works, and uses the next sample.
    let (s, again) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["sample"], 3, "{again}");
    assert!(
        sandbox_session_dirs(ws.path())
            .iter()
            .all(|d| !d.to_string_lossy().contains(&format!("/{pid}-"))),
        "{:?}",
        sandbox_session_dirs(ws.path())
    );
    let early = server.said_at_start.join("\n");
    assert!(
        early.contains(&format!("lost session {lost_id}")),
        "{early}"
    );
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    // Reported once: a third start finds nothing.
    let server = Served::start(ws.path(), &["--run", "k"]);
    let (_, health) = server.client().get("/v1/health").await;
    assert_eq!(health["lost_sessions"], 0, "{health}");
    let (status, _) = server.stop();
    assert!(status.success());
    assert_eq!(episodes(ws.path()).len(), 4);
}

/// Send `head` (and then one byte every 300 ms, if `trickle`), and return
/// what the server answered and how long it took to answer or hang up.
fn slow_client(server: &Served, head: &str, trickle: bool) -> (String, Duration) {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let t0 = Instant::now();
    s.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < Duration::from_secs(20) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                if trickle && s.write_all(b"x").is_err() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    (String::from_utf8_lossy(&answer).into_owned(), t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_clients_are_cut_off_without_harm() {
    let (ws, _task) = workspace();
    let server = Served::start(ws.path(), &["--read-timeout", "1"]);
    let addr = server.url.trim_start_matches("http://").to_string();
    // Headers trickled a byte at a time: the connection is closed.
    let (answer, took) = slow_client(
        &server,
        &format!("POST /v1/sessions HTTP/1.1\r\nHost: {addr}\r\nX-Slow: "),
        true,
    );
    assert!(
        took < Duration::from_secs(10),
        "held for {took:?}: {answer}"
    );
    assert!(!answer.contains("200 OK"), "{answer}");
    // A body that never completes: 408 with a JSON error.
    let (answer, took) = slow_client(
        &server,
        &format!(
            "POST /v1/sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"task_id\": ",
            server.token
        ),
        false,
    );
    assert!(took < Duration::from_secs(10), "held for {took:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"error\""), "{answer}");
    // The server is fine, and counted the timeout.
    let api = server.client();
    let (s, health) = api.get("/v1/health").await;
    assert_eq!((s, health["status"].as_str()), (200, Some("ok")));
    let (_, m) = api.get("/metrics").await;
    assert!(m.as_str().unwrap().contains("status=\"408\""), "{m}");
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    assert!(!said.contains("panicked"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_times_max_sessions_at_once_get_clean_429s() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &["--max-sessions", "2"]);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let api = server.client();
        let task = task.clone();
        set.spawn(async move { api.post("/v1/sessions", json!({"task_id": task})).await });
    }
    let mut opened = Vec::new();
    let mut refused = 0;
    while let Some(r) = set.join_next().await {
        let (s, body) = r.unwrap();
        match s {
            200 => opened.push(body["session_id"].as_str().unwrap().to_string()),
            429 => {
                assert!(
                    body["error"].as_str().unwrap().contains("maximum"),
                    "{body}"
                );
                refused += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert!(!opened.is_empty() && opened.len() <= 2, "{opened:?}");
    assert_eq!(opened.len() + refused, 20);
    let api = server.client();
    let (_, health) = api.get("/v1/health").await;
    assert_eq!(health["sessions"], opened.len(), "{health}");
    for id in &opened {
        let (s, _) = api.delete(&format!("/v1/sessions/{id}")).await;
        assert_eq!(s, 200);
    }
    let (s, again) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{again}");
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// Write `tokens` as the workspace's token file (mode 0600), one per line.
fn write_tokens(ws: &Path, tokens: &[&str]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(ws.join("serve.token"))
        .unwrap();
    for t in tokens {
        writeln!(f, "{t}").unwrap();
    }
}

/// RFC 7235: the auth scheme is case-insensitive (`bearer`, `BEARER`); the
/// token itself is matched exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive_and_the_token_exact() {
    let ws = tempfile::tempdir().unwrap();
    write_tokens(ws.path(), &["Mixed-Case-Token"]);
    let server = Served::start(ws.path(), &[]);
    let http = reqwest::Client::new();
    let status = |value: &'static str| {
        let req = http
            .get(format!("{}/v1/tasks", server.url))
            .header("authorization", value);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            (status, body)
        }
    };
    for ok in [
        "Bearer Mixed-Case-Token",
        "bearer Mixed-Case-Token",
        "BEARER Mixed-Case-Token",
        "bEaReR Mixed-Case-Token",
    ] {
        let (s, body) = status(ok).await;
        assert_eq!(s, 200, "{ok}: {body}");
    }
    for bad in [
        "Bearer mixed-case-token",
        "bearer MIXED-CASE-TOKEN",
        "Basic Mixed-Case-Token",
        "BearerMixed-Case-Token",
    ] {
        let (s, body) = status(bad).await;
        assert_eq!(s, 401, "{bad}: {body}");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// A misspelt field is refused with a 400 naming it, not silently ignored;
/// every field the Python client sends is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_request_fields_are_refused_and_named() {
    let (ws, task) = workspace();
    let server = Served::start(ws.path(), &[]);
    let api = server.client();
    let (s, body) = api
        .post("/v1/sessions", json!({"task_id": task, "temprature": 0.7}))
        .await;
    assert_eq!(s, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("unknown field \"temprature\" in the request body"),
        "{error}"
    );
    let (s, body) = api.get("/v1/tasks?stauts=candidate").await;
    assert_eq!(s, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("unknown field \"stauts\" in the query"),
        "{error}"
    );
    // Everything python/endless_env's Client.open sends.
    let (s, opened) = api
        .post(
            "/v1/sessions",
            json!({"task_id": task, "max_turns": 4, "seed": 1, "run": "fields",
                   "policy": "pytest", "protocol": "endless"}),
        )
        .await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    let step = format!("/v1/sessions/{id}/step");
    let (s, body) = api
        .post(
            &step,
            json!({"reply": "<command>pwd</command>", "logprobs": []}),
        )
        .await;
    assert_eq!(s, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("unknown field \"logprobs\""), "{error}");
    let (s, stepped) = api
        .post(&step, json!({"reply": "<command>pwd</command>"}))
        .await;
    assert_eq!(s, 200, "{stepped}");
    assert_eq!(stepped["info"]["turn"], 1, "the refused step took no turn");
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// After SIGTERM and until it exits, the server answers new requests 503
/// with a JSON error (instead of refusing connections) while the request
/// in flight finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_answers_503_until_it_exits() {
    let (ws, task) = workspace();
    let mut server = Served::start(ws.path(), &[]);
    let api = server.client();
    let (s, opened) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    let busy = tokio::spawn(
        reqwest::Client::new()
            .post(format!("{}/v1/sessions/{id}/step", server.url))
            .bearer_auth(&server.token)
            .json(&json!({"reply": "<command>sleep 4; echo slept</command>"}))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    // Each request on a fresh connection, as a new client would.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (s, body) = server.client().get("/v1/tasks").await;
        if s == 503 {
            break;
        }
        assert_eq!(s, 200, "{body}");
        assert!(Instant::now() < deadline, "no 503 after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (what, (s, body)) in [
        (
            "open",
            server
                .client()
                .post("/v1/sessions", json!({"task_id": task}))
                .await,
        ),
        ("health", server.client().get("/v1/health").await),
        ("sessions", server.client().get("/v1/sessions").await),
        ("unknown route", server.client().get("/v2/x").await),
        (
            "step",
            server
                .client()
                .post(&format!("/v1/sessions/{id}/step"), json!({"reply": "x"}))
                .await,
        ),
    ] {
        assert_eq!(s, 503, "{what}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("shutting down"),
            "{what}: {body}"
        );
    }
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "exited before the step in flight finished"
    );
    let answer = busy.await.unwrap().unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let stepped: Value = answer.json().await.unwrap();
    assert!(
        stepped["observation"].as_str().unwrap().contains("slept"),
        "{stepped}"
    );
    // Until it exits, a new request gets 503 or finds it gone: never a
    // hang, never anything else.
    loop {
        if server.child.try_wait().unwrap().is_some() {
            break;
        }
        let attempt = reqwest::Client::new()
            .get(format!("{}/v1/tasks", server.url))
            .bearer_auth(&server.token)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(resp) = attempt {
            assert_eq!(resp.status().as_u16(), 503);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
    let rows = episodes(ws.path());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].end_reason, "error", "recorded as interrupted");
}

/// `GET /v1/sessions/{id}` and `GET /v1/sessions`: a token sees its own
/// sessions (task, run, sample, state, turns, the result once finished),
/// and no other token's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_lists_and_inspects_its_own_sessions() {
    let (ws, task) = workspace();
    write_tokens(ws.path(), &["first-client-token", "second-client-token"]);
    let server = Served::start(ws.path(), &["--reward", "binary"]);
    let api = server.client();
    let other = Api {
        token: Some("second-client-token".into()),
        ..server.client()
    };
    let (s, list) = api.get("/v1/sessions").await;
    assert_eq!((s, list), (200, json!([])));
    let (s, opened) = api
        .post("/v1/sessions", json!({"task_id": task, "run": "look"}))
        .await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    let path = format!("/v1/sessions/{id}");
    let (s, view) = api.get(&path).await;
    assert_eq!(s, 200, "{view}");
    assert_eq!(view["session_id"], id.as_str());
    assert_eq!(view["task_id"], task.as_str());
    assert_eq!(view["run_id"], "serve-look");
    assert_eq!(view["sample"], opened["sample"]);
    assert_eq!(view["max_turns"], opened["max_turns"]);
    assert_eq!(
        (&view["state"], &view["turns"]),
        (&json!("running"), &json!(0))
    );
    assert!(view["result"].is_null(), "{view}");
    let (s, _) = api
        .post(
            &format!("{path}/step"),
            json!({"reply": "<command>pwd</command>"}),
        )
        .await;
    assert_eq!(s, 200);
    let (_, view) = api.get(&path).await;
    assert_eq!(view["turns"], 1, "{view}");

    // Another token sees nothing of it.
    let (s, body) = other.get(&path).await;
    assert_eq!(s, 404, "{body}");
    assert!(body["error"].is_string());
    let (s, theirs) = other.get("/v1/sessions").await;
    assert_eq!((s, theirs), (200, json!([])));
    let (s, _) = api.get("/v1/sessions/abc").await;
    assert_eq!(s, 400);

    let (s, done) = api
        .post(
            &format!("{path}/step"),
            json!({"reply": oracle_reply(ws.path(), &task)}),
        )
        .await;
    assert_eq!(s, 200, "{done}");
    let (s, done) = api
        .post(
            &format!("{path}/step"),
            json!({"reply": "<action>done</action>"}),
        )
        .await;
    assert_eq!((s, &done["done"]), (200, &json!(true)), "{done}");
    let (s, view) = api.get(&path).await;
    assert_eq!(s, 200, "{view}");
    assert_eq!(
        (&view["state"], &view["turns"]),
        (&json!("finished"), &json!(3))
    );
    assert_eq!(view["result"]["reward"], 1.0, "{view}");
    assert_eq!(view["result"]["info"]["passed"], true, "{view}");

    let (s, second) = api.post("/v1/sessions", json!({"task_id": task})).await;
    assert_eq!(s, 200, "{second}");
    let (s, list) = api.get("/v1/sessions").await;
    assert_eq!(s, 200, "{list}");
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str(), second["session_id"].as_str().unwrap()]);
    assert_eq!(list[0]["state"], "finished");
    assert_eq!(list[1]["state"], "running");

    let (s, _) = api.delete(&path).await;
    assert_eq!(s, 200);
    let (s, _) = api.get(&path).await;
    assert_eq!(s, 404);
    let (_, list) = api.get("/v1/sessions").await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// `GET /v1/openapi.json` is an OpenAPI 3 document, and every operation it
/// lists is served (the unit test `the_openapi_document_lists_every_route`
/// checks the converse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_the_served_routes() {
    let ws = tempfile::tempdir().unwrap();
    let server = Served::start(ws.path(), &[]);
    let api = server.client();
    let (s, doc) = api.get("/v1/openapi.json").await;
    assert_eq!(s, 200, "{doc}");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let none = Api {
        token: None,
        ..server.client()
    };
    assert_eq!(none.get("/v1/openapi.json").await.0, 401);
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 7, "{paths:?}");
    for (path, ops) in paths {
        let path = path.replace("{id}", "0123abcd-0000-4000-8000-000000000000");
        for method in ops.as_object().unwrap().keys() {
            if method == "parameters" {
                continue;
            }
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body = (m == reqwest::Method::POST).then(|| b"{}".to_vec());
            let (s, answer) = api.send(m, &path, body).await;
            let unrouted = s == 405
                || answer["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("no such route"));
            assert!(!unrouted, "{method} {path}: {s} {answer}");
        }
    }
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}

/// `GET path` read as NDJSON as it arrives: the status, and each line
/// (parsed) with when it came, until the answer ends (then the channel
/// closes).
async fn ndjson_lines(
    api: &Api,
    path: &str,
) -> (u16, tokio::sync::mpsc::UnboundedReceiver<(Value, Instant)>) {
    let mut req = api.http.get(format!("{}{path}", api.url));
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    let mut resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    if status == 200 {
        assert_eq!(
            resp.headers()["content-type"],
            "application/x-ndjson",
            "{path}"
        );
    }
    tokio::spawn(async move {
        let mut buf = Vec::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            buf.extend_from_slice(&chunk);
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let v: Value = serde_json::from_slice(&line).unwrap();
                if tx.send((v, Instant::now())).is_err() {
                    return;
                }
            }
        }
    });
    (status, rx)
}

/// The next line of `rx` that is not a `ping` (within 60 s).
async fn next_line(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(Value, Instant)>,
) -> (Value, Instant) {
    loop {
        let got = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("no line within 60 s")
            .expect("the stream ended");
        if got.0["type"] != "ping" {
            return got;
        }
    }
}

/// Issue 36: a session's terminal output and turns, live over the API
/// (what the TUI's Live shows of another node's sessions), to its own
/// token only, ending with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_streams_its_terminal_and_turns_live_to_its_token() {
    let (ws, task) = workspace();
    write_tokens(ws.path(), &["first-client-token", "second-client-token"]);
    let server = Served::start(ws.path(), &["--reward", "binary"]);
    let api = server.client();
    let other = Api {
        token: Some("second-client-token".into()),
        ..server.client()
    };
    let (s, opened) = api
        .post("/v1/sessions", json!({"task_id": task, "run": "watch"}))
        .await;
    assert_eq!(s, 200, "{opened}");
    let id = opened["session_id"].as_str().unwrap().to_string();
    let path = format!("/v1/sessions/{id}");

    // Another token, no token, a bad id: refused.
    assert_eq!(ndjson_lines(&other, &format!("{path}/stream")).await.0, 404);
    let none = Api {
        token: None,
        ..server.client()
    };
    assert_eq!(ndjson_lines(&none, &format!("{path}/stream")).await.0, 401);
    assert_eq!(ndjson_lines(&api, "/v1/sessions/abc/stream").await.0, 400);

    let (s, mut rx) = ndjson_lines(&api, &format!("{path}/stream")).await;
    assert_eq!(s, 200);
    let (hello, _) = next_line(&mut rx).await;
    assert_eq!(hello["type"], "session", "{hello}");
    assert_eq!(hello["session_id"], id.as_str());
    assert_eq!(hello["task_id"], task.as_str());
    assert_eq!(hello["turns"], 0);

    // The command's first line arrives while it still runs (it sleeps 2 s
    // before its second); the shell's echo of the command line shows
    // `$((40+2))`, its output `42`.
    let step = {
        let api = Api {
            token: Some("first-client-token".into()),
            ..server.client()
        };
        let path = path.clone();
        tokio::spawn(async move {
            let answer = api
                .post(
                    &format!("{path}/step"),
                    json!({"reply": "<command>echo FIRST-$((40+2)); sleep 2; echo SECOND-$((40+3))</command>"}),
                )
                .await;
            (answer, Instant::now())
        })
    };
    let mut output = String::new();
    let first_at = loop {
        let (v, at) = next_line(&mut rx).await;
        assert_eq!(v["type"], "output", "{v}");
        output.push_str(v["data"].as_str().unwrap());
        if output.contains("FIRST-42") {
            break at;
        }
    };
    assert!(
        output.contains("echo FIRST-$((40+2))"),
        "the command line is echoed: {output:?}"
    );
    let turn = loop {
        let (v, _) = next_line(&mut rx).await;
        match v["type"].as_str() {
            Some("output") => output.push_str(v["data"].as_str().unwrap()),
            Some("turn") => break v,
            _ => panic!("{v}"),
        }
    };
    let ((s, stepped), stepped_at) = step.await.unwrap();
    assert_eq!(s, 200, "{stepped}");
    assert!(
        stepped_at.duration_since(first_at) > Duration::from_millis(1500),
        "the first line came {:?} before the step's answer",
        stepped_at.duration_since(first_at)
    );
    assert!(output.contains("SECOND-43"), "{output:?}");
    assert!(!output.contains("__ENDLESS"), "markers leak: {output:?}");
    assert_eq!(
        (turn["turn"].as_u64(), turn["kind"].as_str()),
        (Some(1), Some("command")),
        "{turn}"
    );
    assert_eq!(turn["exit_code"], 0, "{turn}");

    // A second watcher joins mid-session; both see the end, then the
    // answers end.
    let (_, mut late) = ndjson_lines(&api, &format!("{path}/stream")).await;
    assert_eq!(next_line(&mut late).await.0["turns"], 1);
    let (s, done) = api
        .post(
            &format!("{path}/step"),
            json!({"reply": "<action>done</action>"}),
        )
        .await;
    assert_eq!((s, &done["done"]), (200, &json!(true)), "{done}");
    for rx in [&mut rx, &mut late] {
        let end = loop {
            let (v, _) = next_line(rx).await;
            if v["type"] == "end" {
                break v;
            }
            assert!(
                ["output", "turn"].contains(&v["type"].as_str().unwrap()),
                "{v}"
            );
        };
        assert_eq!(end["end_reason"], done["info"]["end_reason"], "{end}");
        assert_eq!(end["passed"], false, "{end}");
        assert_eq!(end["turns"], 2, "{end}");
        let closed = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        assert!(
            matches!(closed, Ok(None)),
            "the stream did not end: {closed:?}"
        );
    }

    // A session that ended answers its hello and its end at once.
    let (s, mut after) = ndjson_lines(&api, &format!("{path}/stream")).await;
    assert_eq!(s, 200);
    assert_eq!(next_line(&mut after).await.0["type"], "session");
    assert_eq!(next_line(&mut after).await.0["type"], "end");
    let closed = tokio::time::timeout(Duration::from_secs(10), after.recv()).await;
    assert!(matches!(closed, Ok(None)), "{closed:?}");
    let (s, _) = api.delete(&path).await;
    assert_eq!(s, 200);
    let (status, said) = server.stop();
    assert!(status.success(), "{said}");
}
