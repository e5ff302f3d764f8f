//! Live sessions of other machines: the `endless serve` nodes configured
//! under `[[tui.remote]]` are asked for their sessions
//! (`GET /v1/sessions`) every few seconds, and each running one is
//! watched through its stream (`GET /v1/sessions/{id}/stream`, NDJSON)
//! into a Live pane, through the same [`LiveEvent`]s as local episodes:
//! the server has taken the protocol markers out and echoed each command
//! after its prompt, and the pane's vt100 screen shows the rest. A pane is
//! titled `NODE: task#sample`; output a slow watcher missed (`lagged`) is
//! said in the pane, the end shows as a local episode's, and a stream cut
//! before its end marks the pane CONNECTION LOST.
//!
//! The HTTP client is the crate's `reqwest` on a current-thread tokio
//! runtime of the watcher's own thread.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::RemoteNode;
use crate::tui::action::{Action, LiveEvent, Msg};

/// Terminal size the panes of remote sessions emulate (the stream does
/// not say the sandbox's).
const PANE_SIZE: (u16, u16) = (48, 160);

/// A stream silent this long is taken for lost (the server pings after
/// 15 s of silence).
const SILENCE: Duration = Duration::from_secs(45);

/// Sessions of one node watched (as panes) at once: a node listing more
/// gets the first ones, and the TUI says once how many it left out.
pub const MAX_PANES_PER_NODE: usize = crate::tui::views::live::MAX_PANES;

/// Largest `GET /v1/sessions` answer read from a node (about 4,000
/// sessions); a larger one is an error of that node, read no further.
pub const MAX_LIST_BYTES: usize = 1 << 20;

/// Longest NDJSON line of a session's stream (the server sends output in
/// pieces of a few KiB); a longer one ends the watch as a lost connection.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Why a remote node cannot be used or asked.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A `[[tui.remote]]` entry is wrong.
    #[error("[[tui.remote]] {name:?}: {field}: {message}")]
    Config {
        /// The node's name.
        name: String,
        /// The field at fault.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The node did not answer, or answered an error.
    #[error("node {name} ({url}): {message}")]
    Node {
        /// The node's name.
        name: String,
        /// Its URL.
        url: String,
        /// What happened.
        message: String,
    },
}

/// A remote `endless serve` node, its token resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Remote {
    /// The name its panes are marked with.
    pub name: String,
    /// Its base URL, without a trailing `/`.
    pub url: String,
    token: Option<String>,
}

impl Remote {
    /// A node as configured: its token from the environment variable
    /// `token_env` names or the file `token_file` names (`vars`: the
    /// environment).
    pub fn from_config(
        node: &RemoteNode,
        vars: &BTreeMap<String, String>,
    ) -> Result<Remote, RemoteError> {
        let bad = |field, message: String| RemoteError::Config {
            name: node.name.clone(),
            field,
            message,
        };
        if node.name.trim().is_empty() {
            return Err(bad("name", "empty".into()));
        }
        let url = node.url.trim().trim_end_matches('/').to_string();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad(
                "url",
                format!("{:?} is not an http:// or https:// URL", node.url),
            ));
        }
        let token = match (&node.token_env, &node.token_file) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "token_env",
                    "give token_env or token_file, not both".into(),
                ))
            }
            (Some(var), None) => match vars.get(var).map(|t| t.trim()) {
                Some(t) if !t.is_empty() => Some(t.to_string()),
                _ => return Err(bad("token_env", format!("${var} is not set"))),
            },
            (None, Some(path)) => Some(token_in(path).map_err(|m| bad("token_file", m))?),
            (None, None) => None,
        };
        Ok(Remote {
            name: node.name.clone(),
            url,
            token,
        })
    }

    fn get(&self, http: &reqwest::Client, path: &str) -> reqwest::RequestBuilder {
        let req = http.get(format!("{}{path}", self.url));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    fn error(&self, message: impl Into<String>) -> RemoteError {
        RemoteError::Node {
            name: self.name.clone(),
            url: self.url.clone(),
            message: message.into(),
        }
    }

    /// `GET /v1/sessions`: the token's sessions on this node.
    pub async fn sessions(&self, http: &reqwest::Client) -> Result<Vec<Value>, RemoteError> {
        let resp = self
            .get(http, "/v1/sessions")
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| self.error(e.to_string()))?;
        let status = resp.status();
        let bytes = read_capped(resp, MAX_LIST_BYTES)
            .await
            .map_err(|e| self.error(format!("HTTP {status}: {e}")))?;
        let body: Value = serde_json::from_slice(&bytes)
            .map_err(|e| self.error(format!("HTTP {status}: {e}")))?;
        if !status.is_success() {
            return Err(self.error(format!("HTTP {status}: {}", body["error"])));
        }
        match body {
            Value::Array(v) => Ok(v),
            other => Err(self.error(format!("GET /v1/sessions: not a list: {other}"))),
        }
    }

    /// Watch session `view` (as `GET /v1/sessions` lists it) until its end,
    /// the stream's end or `stop`, handing each Live event to `send`
    /// (which says whether anyone still listens).
    pub async fn watch(
        &self,
        http: &reqwest::Client,
        view: &Value,
        stop: &AtomicBool,
        send: &mut (dyn FnMut(Action) -> bool + Send),
    ) {
        let id = view["session_id"].as_str().unwrap_or_default();
        let key = format!("{}:{id}", self.name);
        let title = format!(
            "{}: {}#{}",
            self.name,
            view["task_id"].as_str().unwrap_or("?"),
            view["sample"].as_u64().unwrap_or(0)
        );
        let lost = |why: String| {
            vec![
                LiveEvent::Feed {
                    key: key.clone(),
                    bytes: format!("\r\n[connection to {} lost: {why}]\r\n", self.name)
                        .into_bytes(),
                },
                LiveEvent::Lost { key: key.clone() },
            ]
        };
        let mut opened = false;
        let mut events = |evs: Vec<LiveEvent>, opened: &mut bool| -> bool {
            for ev in evs {
                if !*opened && !matches!(ev, LiveEvent::Open { .. }) {
                    // Nothing to show before the pane is open.
                    continue;
                }
                *opened = true;
                if !send(Action::Live(LiveEvent::Watched(Box::new(ev)))) {
                    return false;
                }
            }
            true
        };
        let resp = match self
            .get(http, &format!("/v1/sessions/{id}/stream"))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                let why = format!("HTTP {}", r.status());
                let _ = send(Action::Error(self.error(why).to_string()));
                return;
            }
            Err(e) => {
                let _ = send(Action::Error(self.error(e.to_string()).to_string()));
                return;
            }
        };
        let mut reader = StreamReader::new(resp);
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match tokio::time::timeout(SILENCE, reader.next()).await {
                Ok(Ok(Some(event))) => {
                    let end = event["type"] == "end";
                    let evs = live_events(&key, &title, &self.name, &event);
                    if !events(evs, &mut opened) || end {
                        return;
                    }
                }
                Ok(Ok(None)) => {
                    events(
                        lost("the stream ended before the session did".into()),
                        &mut opened,
                    );
                    return;
                }
                Ok(Err(why)) => {
                    events(lost(why), &mut opened);
                    return;
                }
                Err(_) => {
                    events(
                        lost(format!("silent for {}s", SILENCE.as_secs())),
                        &mut opened,
                    );
                    return;
                }
            }
        }
    }
}

/// The body of `resp`, refused (and read no further) past `max` bytes.
async fn read_capped(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(format!("the answer is larger than {}", mib(max)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `n` bytes as whole MiB (`1 MiB`).
fn mib(n: usize) -> String {
    format!("{} MiB", n >> 20)
}

/// The first line of `path` that is not blank or a `#` comment.
fn token_in(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no token in it", path.display()))
}

/// The nodes of `[[tui.remote]]`, their tokens resolved from `vars`;
/// names must differ.
pub fn remotes(
    nodes: &[RemoteNode],
    vars: &BTreeMap<String, String>,
) -> Result<Vec<Remote>, RemoteError> {
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for n in nodes {
        if !names.insert(n.name.clone()) {
            return Err(RemoteError::Config {
                name: n.name.clone(),
                field: "name",
                message: "two nodes have this name".into(),
            });
        }
        out.push(Remote::from_config(n, vars)?);
    }
    Ok(out)
}

/// Reads NDJSON values off a streamed answer.
pub struct StreamReader {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl StreamReader {
    /// Read `resp`'s body line by line.
    pub fn new(resp: reqwest::Response) -> StreamReader {
        StreamReader {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next value (`None`: the body ended); `Err` with why the
    /// connection broke, or a line was not JSON or longer than
    /// [`MAX_LINE_BYTES`] (read no further).
    pub async fn next(&mut self) -> Result<Option<Value>, String> {
        loop {
            if self.buf.len() > MAX_LINE_BYTES && !self.buf.contains(&b'\n') {
                self.buf = Vec::new();
                return Err(format!(
                    "a stream line is longer than {}",
                    mib(MAX_LINE_BYTES)
                ));
            }
            if let Some(at) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=at).collect();
                let text = String::from_utf8_lossy(&line);
                if text.trim().is_empty() {
                    continue;
                }
                return serde_json::from_str(text.trim())
                    .map(Some)
                    .map_err(|e| format!("a stream line is not JSON ({e})"));
            }
            match self.resp.chunk().await {
                Ok(Some(bytes)) => self.buf.extend_from_slice(&bytes),
                Ok(None) => return Ok(None),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// The Live events of one stream value of session `key` on node `node`
/// (its pane titled `title`).
pub fn live_events(key: &str, title: &str, node: &str, event: &Value) -> Vec<LiveEvent> {
    let key = key.to_string();
    match event["type"].as_str().unwrap_or("") {
        "session" => vec![LiveEvent::Open {
            key,
            title: title.to_string(),
            policy: format!("served by {node}"),
            rows: PANE_SIZE.0,
            cols: PANE_SIZE.1,
            input: None,
        }],
        "output" => match event["data"].as_str() {
            Some(data) if !data.is_empty() => vec![LiveEvent::Feed {
                key,
                bytes: data.as_bytes().to_vec(),
            }],
            _ => Vec::new(),
        },
        "turn" => {
            let kind = serde_json::from_value(event["kind"].clone())
                .unwrap_or(crate::agent::StepKind::Command);
            vec![LiveEvent::Step {
                key,
                turn: event["turn"].as_u64().unwrap_or(0) as u32,
                command: crate::tui::action::pane_command(kind, event["command"].as_str()),
            }]
        }
        "lagged" => vec![LiveEvent::Feed {
            key,
            bytes: format!(
                "\r\n[lagged: this watcher missed {} pieces of output]\r\n",
                event["values"].as_u64().unwrap_or(0)
            )
            .into_bytes(),
        }],
        "end" => {
            let mut out = Vec::new();
            let error = event["error"].as_str().filter(|e| !e.is_empty());
            if let (Some(e), None) = (error, event["passed"].as_bool()) {
                out.push(LiveEvent::Feed {
                    key: key.clone(),
                    bytes: format!("\r\n[ended: {e}]\r\n").into_bytes(),
                });
            }
            out.push(LiveEvent::Finished {
                key,
                passed: event["passed"].as_bool().unwrap_or(false),
                failure: event["failure_mode"].as_str().map(str::to_string),
            });
            out
        }
        // `ping`, `started` and what later servers add: nothing to show.
        _ => Vec::new(),
    }
}

/// The watcher thread; it stops when dropped.
pub struct RemoteWatcher {
    stop: Arc<AtomicBool>,
}

impl RemoteWatcher {
    /// Ask `nodes` for their sessions every `every` and watch each
    /// running one into a Live pane (events sent as
    /// `Action::Live(LiveEvent::Watched(..))`, errors as
    /// `Action::Error`, each once until it changes).
    pub fn spawn(nodes: Vec<Remote>, tx: Sender<Msg>, every: Duration) -> RemoteWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let _ = std::thread::Builder::new()
            .name("remote sessions".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(poll(nodes, tx, every, flag));
            });
        RemoteWatcher { stop }
    }
}

impl Drop for RemoteWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

async fn poll(nodes: Vec<Remote>, tx: Sender<Msg>, every: Duration, stop: Arc<AtomicBool>) {
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            let _ = tx.send(Msg::Action(Action::Error(format!("remote nodes: {e}"))));
            return;
        }
    };
    // Per node: the sessions watched (or once watched and still listed),
    // and how many watches run now (at most MAX_PANES_PER_NODE).
    let mut watched: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let running: BTreeMap<String, Arc<AtomicUsize>> = nodes
        .iter()
        .map(|n| (n.name.clone(), Arc::default()))
        .collect();
    let mut said: BTreeMap<String, String> = BTreeMap::new();
    let mut cut_said: BTreeSet<String> = BTreeSet::new();
    while !stop.load(Ordering::Relaxed) {
        for node in &nodes {
            match node.sessions(&http).await {
                Ok(views) => {
                    said.remove(&node.name);
                    let live: Vec<Value> = views
                        .into_iter()
                        .filter(|v| {
                            v["session_id"].is_string() && v["state"].as_str() != Some("finished")
                        })
                        .collect();
                    let seen = watched.entry(node.name.clone()).or_default();
                    // A session no longer listed never comes back: forget it.
                    seen.retain(|id| live.iter().any(|v| v["session_id"] == id.as_str()));
                    let active = &running[&node.name];
                    let mut left_out = 0usize;
                    for view in live.iter() {
                        let id = view["session_id"].as_str().unwrap_or_default();
                        if seen.contains(id) {
                            continue;
                        }
                        if active.load(Ordering::SeqCst) >= MAX_PANES_PER_NODE {
                            left_out += 1;
                            continue;
                        }
                        seen.insert(id.to_string());
                        active.fetch_add(1, Ordering::SeqCst);
                        let (node, http, tx, stop, active, view) = (
                            node.clone(),
                            http.clone(),
                            tx.clone(),
                            stop.clone(),
                            active.clone(),
                            view.clone(),
                        );
                        tokio::spawn(async move {
                            let mut send = |a| tx.send(Msg::Action(a)).is_ok();
                            node.watch(&http, &view, &stop, &mut send).await;
                            active.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                    if left_out > 0 && cut_said.insert(node.name.clone()) {
                        let text = format!(
                            "node {}: {} running sessions listed; at most {MAX_PANES_PER_NODE} are watched at once, the others are left out",
                            node.name,
                            live.len()
                        );
                        if tx.send(Msg::Action(Action::Error(text))).is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    if said.get(&node.name) != Some(&text) {
                        said.insert(node.name.clone(), text.clone());
                        if tx.send(Msg::Action(Action::Error(text))).is_err() {
                            return;
                        }
                    }
                }
            }
        }
        let start = std::time::Instant::now();
        while start.elapsed() < every && !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(token_env: Option<&str>, url: &str) -> RemoteNode {
        RemoteNode {
            name: "gpu-1".into(),
            url: url.into(),
            token_env: token_env.map(str::to_string),
            token_file: None,
        }
    }

    #[test]
    fn a_node_takes_its_token_from_the_environment_and_bad_entries_are_named() {
        let vars: BTreeMap<String, String> =
            [("NODE_TOKEN".to_string(), "s3cret\n".to_string())].into();
        let r =
            Remote::from_config(&node(Some("NODE_TOKEN"), "http://10.0.0.2:8765/"), &vars).unwrap();
        assert_eq!(r.url, "http://10.0.0.2:8765");
        assert_eq!(r.token.as_deref(), Some("s3cret"));
        let err = Remote::from_config(&node(Some("UNSET_TOKEN"), "http://x"), &vars)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"gpu-1\"") && err.contains("token_env") && err.contains("$UNSET_TOKEN"),
            "{err}"
        );
        let err = Remote::from_config(&node(None, "10.0.0.2:8765"), &vars)
            .unwrap_err()
            .to_string();
        assert!(err.contains("url"), "{err}");
        let two = [node(None, "http://a"), node(None, "http://b")];
        assert!(remotes(&two, &vars)
            .unwrap_err()
            .to_string()
            .contains("two nodes"));
    }

    #[test]
    fn stream_values_become_the_panes_events() {
        let ev = |v: Value| live_events("gpu-1:s1", "gpu-1: t#0", "gpu-1", &v);
        assert!(
            matches!(&ev(json!({"type": "session", "session_id": "s1"}))[..],
            [LiveEvent::Open { title, input: None, .. }] if title == "gpu-1: t#0")
        );
        assert!(
            matches!(&ev(json!({"type": "output", "data": "$ ls\r\n"}))[..],
            [LiveEvent::Feed { bytes, .. }] if bytes == b"$ ls\r\n")
        );
        assert!(
            matches!(&ev(json!({"type": "turn", "turn": 2, "kind": "command", "command": "ls"}))[..],
            [LiveEvent::Step { turn: 2, command, .. }] if command == "ls")
        );
        assert!(matches!(&ev(json!({"type": "lagged", "values": 7}))[..],
            [LiveEvent::Feed { bytes, .. }] if String::from_utf8_lossy(bytes).contains("missed 7")));
        assert!(
            matches!(&ev(json!({"type": "end", "passed": false, "failure_mode": "wrong_output"}))[..],
            [LiveEvent::Finished { passed: false, failure: Some(f), .. }] if f == "wrong_output")
        );
        assert!(ev(json!({"type": "ping"})).is_empty());
    }

    /// A node that answers every request on its own terms: `GET
    /// /v1/sessions` with `list`, a stream with `stream` (written again
    /// and again until the client hangs up when `endless`). Returns its
    /// URL and how many streams it has open now.
    async fn hostile_node(
        list: Vec<u8>,
        stream: Vec<u8>,
        endless: bool,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let streams = open.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let (list, stream, open) = (list.clone(), stream.clone(), streams.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let is_stream = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .is_some_and(|l| l.contains("/stream"));
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";
                    if conn.write_all(ok).await.is_err() {
                        return;
                    }
                    let body = if is_stream { stream } else { list };
                    if is_stream {
                        open.fetch_add(1, Ordering::SeqCst);
                    }
                    loop {
                        if conn.write_all(&body).await.is_err() || !endless && !is_stream {
                            break;
                        }
                        if !endless {
                            // A stream that stays open, silent.
                            let mut sink = [0u8; 64];
                            let _ = conn.read(&mut sink).await;
                            break;
                        }
                    }
                    if is_stream {
                        open.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        (url, open)
    }

    fn remote(url: &str) -> Remote {
        Remote::from_config(&node(None, url), &BTreeMap::new()).unwrap()
    }

    /// Issue 46: a node listing 1,500 running sessions gets
    /// [`MAX_PANES_PER_NODE`] panes, and the cut is said once.
    #[test]
    fn a_node_with_too_many_sessions_gets_its_share_of_panes() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let list: Vec<Value> = (0..1500)
            .map(|i| json!({"session_id": format!("s{i}"), "task_id": "t", "sample": 0, "state": "running"}))
            .collect();
        let (url, open) = rt.block_on(hostile_node(
            serde_json::to_vec(&list).unwrap(),
            b"{\"type\": \"session\"}\n".to_vec(),
            false,
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let watcher = RemoteWatcher::spawn(vec![remote(&url)], tx, Duration::from_millis(100));
        let mut panes = BTreeSet::new();
        let mut said = Vec::new();
        let until = std::time::Instant::now() + Duration::from_secs(3);
        while let Ok(msg) =
            rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
        {
            match msg {
                Msg::Action(Action::Live(LiveEvent::Watched(ev))) => {
                    if let LiveEvent::Open { key, .. } = *ev {
                        panes.insert(key);
                    }
                }
                Msg::Action(Action::Error(e)) => said.push(e),
                _ => {}
            }
        }
        drop(watcher);
        assert_eq!(panes.len(), MAX_PANES_PER_NODE, "panes opened for one node");
        assert!(open.load(Ordering::SeqCst) <= MAX_PANES_PER_NODE);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("1500") && said[0].contains(&MAX_PANES_PER_NODE.to_string()),
            "{}",
            said[0]
        );
    }

    /// Issue 46: an endless stream line and an endless session list are
    /// read up to their caps, then given up with a reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn endless_lines_and_lists_stop_at_their_caps() {
        let (url, _) = hostile_node(
            b"[".to_vec(),
            b"{\"type\": \"output\", \"data\": \"aaaaaaaaaaaaaaaa".repeat(1024),
            true,
        )
        .await;
        let node = remote(&url);
        let http = reqwest::Client::new();
        let e = tokio::time::timeout(Duration::from_secs(20), node.sessions(&http))
            .await
            .expect("the list was read without end")
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 MiB"), "{e}");
        let resp = node
            .get(&http, "/v1/sessions/s1/stream")
            .send()
            .await
            .unwrap();
        let mut reader = StreamReader::new(resp);
        let e = tokio::time::timeout(Duration::from_secs(20), reader.next())
            .await
            .expect("the line was read without end")
            .unwrap_err();
        assert!(e.contains("1 MiB"), "{e}");
        assert!(
            reader.buf.len() <= MAX_LINE_BYTES + (1 << 20),
            "{}",
            reader.buf.len()
        );
    }
}
