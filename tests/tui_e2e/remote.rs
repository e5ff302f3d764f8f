//! Issue 36, end to end: the Live view watches the sessions of another
//! machine's `endless serve` (`[[tui.remote]]`), through the stream
//! endpoint of a real server started here on 127.0.0.1.

use super::*;
use endless::config::RemoteNode;
use endless::tui::action::{Action, LiveEvent};
use endless::tui::runtime::remote::Remote;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

#[path = "../support/served.rs"]
#[allow(dead_code)]
mod served;
use served::Served;

/// A workspace with one offline task; its id.
fn served_workspace() -> (tempfile::TempDir, String) {
    let ws = tempfile::tempdir().unwrap();
    let out = Command::new(endless_bin())
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .env("XDG_STATE_HOME", ws.path().join(".state"))
        .env("XDG_CONFIG_HOME", ws.path().join(".config"))
        .args(["--workspace", ws.path().to_str().unwrap(), "--create"])
        .args(["generate", "--offline", "--count", "1", "--seed", "5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = std::fs::read_dir(ws.path().join("tasks"))
        .unwrap()
        .flatten()
        .find_map(|e| e.file_name().into_string().ok())
        .unwrap();
    (ws, id)
}

async fn post(http: &reqwest::Client, server: &Served, path: &str, body: Value) -> Value {
    let resp = http
        .post(format!("{}{path}", server.url))
        .bearer_auth(&server.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

/// Watch `session` of `node` on a task of its own; the actions it sends.
fn watch(
    node: &Remote,
    http: &reqwest::Client,
    view: Value,
) -> (Arc<Mutex<Vec<Action>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (node, http, out) = (node.clone(), http.clone(), seen.clone());
    let task = tokio::spawn(async move {
        let stop = AtomicBool::new(false);
        let mut send = |a| {
            out.lock().unwrap().push(a);
            true
        };
        node.watch(&http, &view, &stop, &mut send).await;
    });
    (seen, task)
}

/// The Live events among `actions`.
fn live(actions: &[Action]) -> Vec<LiveEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Live(LiveEvent::Watched(ev)) => Some((**ev).clone()),
            _ => None,
        })
        .collect()
}

async fn until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(60), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn fed(events: &[LiveEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            LiveEvent::Feed { bytes, .. } => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        })
        .collect()
}

/// The stream reader against a real server: a session's pane opens with
/// the node's name, its output and turns arrive, its end finishes the
/// pane; a server that dies mid-session is a lost connection.
#[tokio::test(flavor = "multi_thread")]
async fn a_remote_sessions_stream_feeds_a_pane_and_a_dead_node_is_a_lost_connection() {
    let (ws, task) = served_workspace();
    let server = Served::start(ws.path(), &[]);
    let http = reqwest::Client::new();
    let vars: BTreeMap<String, String> = [("E2E_TOKEN".into(), server.token.clone())].into();
    let node = Remote::from_config(
        &RemoteNode {
            name: "n1".into(),
            url: server.url.clone(),
            token_env: Some("E2E_TOKEN".into()),
            token_file: None,
        },
        &vars,
    )
    .unwrap();
    let opened = post(
        &http,
        &server,
        "/v1/sessions",
        json!({"task_id": task, "run": "remote"}),
    )
    .await;
    let id = opened["session_id"].as_str().unwrap().to_string();
    let views = node.sessions(&http).await.unwrap();
    let view = views
        .iter()
        .find(|v| v["session_id"] == id.as_str())
        .unwrap()
        .clone();
    let (seen, watcher) = watch(&node, &http, view);
    until("the pane opens", || !live(&seen.lock().unwrap()).is_empty()).await;
    let step = format!("/v1/sessions/{id}/step");
    post(
        &http,
        &server,
        &step,
        json!({"reply": "<command>echo REMOTE-$((40+2))</command>"}),
    )
    .await;
    post(
        &http,
        &server,
        &step,
        json!({"reply": "<action>done</action>"}),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(60), watcher)
        .await
        .unwrap()
        .unwrap();
    let events = live(&seen.lock().unwrap());
    assert!(
        matches!(&events[0], LiveEvent::Open { title, input: None, .. } if *title == format!("n1: {task}#0")),
        "{events:?}"
    );
    assert!(fed(&events).contains("REMOTE-42"), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(e, LiveEvent::Step { turn: 1, command, .. } if command.contains("echo REMOTE"))),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(LiveEvent::Finished { .. })),
        "{events:?}"
    );

    // A second session; its node dies while it is watched.
    let opened = post(
        &http,
        &server,
        "/v1/sessions",
        json!({"task_id": task, "run": "remote"}),
    )
    .await;
    let id = opened["session_id"].as_str().unwrap().to_string();
    let view = node
        .sessions(&http)
        .await
        .unwrap()
        .into_iter()
        .find(|v| v["session_id"] == id.as_str())
        .unwrap();
    let (seen, watcher) = watch(&node, &http, view);
    until("the second pane opens", || {
        !live(&seen.lock().unwrap()).is_empty()
    })
    .await;
    drop(server);
    tokio::time::timeout(Duration::from_secs(60), watcher)
        .await
        .unwrap()
        .unwrap();
    let events = live(&seen.lock().unwrap());
    assert!(
        matches!(events.last(), Some(LiveEvent::Lost { .. })),
        "{events:?}"
    );
    assert!(fed(&events).contains("connection to n1 lost"), "{events:?}");
}

/// The TUI on a workspace of its own, with the server as `[[tui.remote]]`:
/// the remote session's output shows in a Live pane marked with the
/// node's name, and the node's death marks it CONNECTION LOST.
#[test]
fn a_remote_nodes_session_shows_in_a_live_pane_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let (ws, task) = served_workspace();
    let server = Served::start(ws.path(), &[]);
    let local = tempfile::tempdir().unwrap();
    drop(Workspace::open(local.path()).unwrap());
    let home = sandbox_home();
    let config = home.path().join("config/endless/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            "[[tui.remote]]\nname = \"gpu-7\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            server.url,
            ws.path().join("serve.token").display()
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();
    let name = format!("endless-e2e-remote-{}", std::process::id());
    let session = start_tui(name, local.path(), Some(home.path()), 160, 48);
    let s = &session.0;
    wait_for(s, "Tasks");
    tmux(&["send-keys", "-t", s, "F2"]);
    let opened = rt.block_on(post(
        &http,
        &server,
        "/v1/sessions",
        json!({"task_id": task, "run": "remote"}),
    ));
    let id = opened["session_id"].as_str().unwrap().to_string();
    wait_for(s, &format!("gpu-7: {task}#0"));
    let step = format!("/v1/sessions/{id}/step");
    rt.block_on(post(
        &http,
        &server,
        &step,
        json!({"reply": "<command>echo REMOTE-$((40+2))</command>"}),
    ));
    let screen = wait_for(s, "REMOTE-42");
    assert!(
        screen.contains("echo REMOTE-$((40+2))"),
        "the command line shows: {screen}"
    );
    assert!(!screen.contains("__ENDLESS"), "no marker: {screen}");
    drop(server);
    wait_for_up_to(s, "CONNECTION LOST", Duration::from_secs(30));
}
