//! A fixture OpenAI-compatible chat server on 127.0.0.1 (random port),
//! scripted per request, that records every request it receives.
//!
//! ```ignore
//! let server = FixtureLlm::start(|req: &Request| Reply::text(format!("<command>echo {}</command>", req.turn())));
//! let url = server.url(); // http://127.0.0.1:PORT/v1
//! ```

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when it was not JSON).
    pub body: serde_json::Value,
}

impl Request {
    /// The chat messages sent.
    pub fn messages(&self) -> Vec<(String, String)> {
        self.body["messages"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        (
                            m["role"].as_str().unwrap_or("").to_string(),
                            m["content"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    /// How many assistant replies the conversation already has (0 on the first turn).
    pub fn turn(&self) -> usize {
        self.messages()
            .iter()
            .filter(|(r, _)| r == "assistant")
            .count()
    }
    /// The first user message (the task instruction).
    pub fn instruction(&self) -> String {
        self.messages()
            .into_iter()
            .find(|(r, _)| r == "user")
            .map(|m| m.1)
            .unwrap_or_default()
    }
    /// The last message's content (the latest observation).
    pub fn last_message(&self) -> String {
        self.messages()
            .last()
            .map(|m| m.1.clone())
            .unwrap_or_default()
    }
    /// The `tools` array the request offered (empty when none).
    pub fn tools(&self) -> Vec<serde_json::Value> {
        self.body["tools"].as_array().cloned().unwrap_or_default()
    }
    /// The names of the functions the request offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().map(String::from))
            .collect()
    }
    /// The `tool` messages sent: (`tool_call_id`, content), in order.
    pub fn tool_messages(&self) -> Vec<(String, String)> {
        self.body["messages"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|m| m["role"] == "tool")
                    .map(|m| {
                        (
                            m["tool_call_id"].as_str().unwrap_or("").to_string(),
                            m["content"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    /// The `tool_calls` of every assistant message sent, in order.
    pub fn sent_tool_calls(&self) -> Vec<serde_json::Value> {
        self.body["messages"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|m| m["role"] == "assistant")
                    .filter_map(|m| m["tool_calls"].as_array())
                    .flatten()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
    /// A header's value (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A chat completion whose message content is this text.
    Text(String),
    /// A chat completion whose content is `null`.
    NullContent,
    /// A chat completion with `tool_calls`: (function name, arguments as
    /// JSON text, sent as they are even when not valid JSON), and this
    /// content (`None`: `null`). Call ids are `call_<turn>_<index>`.
    ToolCalls {
        content: Option<String>,
        calls: Vec<(String, String)>,
    },
    /// An HTTP error status with a body (and an optional `Retry-After` in seconds).
    Status {
        code: u16,
        body: String,
        retry_after: Option<u32>,
    },
    /// A 200 response whose body is these raw bytes (garbage, not UTF-8, ...).
    RawBody(Vec<u8>),
    /// Wait, then answer.
    Slow(Duration, Box<Reply>),
    /// Close the connection without answering.
    Hangup,
}

impl Reply {
    /// A chat completion with this text.
    pub fn text(t: impl Into<String>) -> Self {
        Reply::Text(t.into())
    }
    /// A well-formed command reply.
    pub fn command(cmd: &str) -> Self {
        Reply::Text(format!(
            "<think>I will run a command.</think>\n<command>{cmd}</command>"
        ))
    }
    /// A well-formed done reply.
    pub fn done() -> Self {
        Reply::Text("<think>The task is complete.</think>\n<action>done</action>".into())
    }
    /// A reply that calls `name` with `arguments` (JSON text).
    pub fn tool_call(name: &str, arguments: &str) -> Self {
        Reply::tool_calls(&[(name, arguments)])
    }
    /// A reply with these calls, in order, and no content.
    pub fn tool_calls(calls: &[(&str, &str)]) -> Self {
        Reply::ToolCalls {
            content: None,
            calls: calls
                .iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
        }
    }
    /// A `bash` call running `cmd`.
    pub fn bash(cmd: &str) -> Self {
        Reply::tool_call("bash", &serde_json::json!({ "command": cmd }).to_string())
    }
    /// A `finish` call.
    pub fn finish() -> Self {
        Reply::tool_call("finish", "{}")
    }
    /// An HTTP error.
    pub fn status(code: u16) -> Self {
        Reply::Status {
            code,
            body: format!("{{\"error\":\"fixture status {code}\"}}"),
            retry_after: None,
        }
    }

    /// HTTP 400 with an error body in OpenAI's format.
    pub fn invalid_request(message: &str, param: &str, code: &str) -> Self {
        Reply::Status {
            code: 400,
            body: serde_json::json!({"error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": code,
            }})
            .to_string(),
            retry_after: None,
        }
    }
}

/// What OpenAI's API answers an o-series (reasoning) model for this request,
/// when it rejects it: `max_tokens` is refused in favour of
/// `max_completion_tokens`, and `temperature` / `top_p` other than their
/// default 1 are refused, one error at a time, in the API's own words.
pub fn reasoning_model_rejection(request: &Request) -> Option<Reply> {
    let body = &request.body;
    if body.get("max_tokens").is_some() {
        return Some(Reply::invalid_request(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        ));
    }
    for param in ["temperature", "top_p"] {
        if let Some(v) = body.get(param).filter(|v| v.as_f64() != Some(1.0)) {
            return Some(Reply::invalid_request(
                &format!("Unsupported value: '{param}' does not support {v} with this model. Only the default (1) value is supported."),
                param,
                "unsupported_value",
            ));
        }
    }
    None
}

type Responder = dyn Fn(&Request) -> Reply + Send + Sync;

/// The running fixture server; stops when dropped.
pub struct FixtureLlm {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl FixtureLlm {
    /// Start a server that answers each request with `responder(request)`.
    pub fn start(responder: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let responder: Arc<Responder> = Arc::new(responder);
        let (reqs, stop2) = (requests.clone(), stop.clone());
        thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(600);
            while !stop2.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (reqs, responder) = (reqs.clone(), responder.clone());
                        thread::spawn(move || handle(stream, &reqs, responder.as_ref()));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self {
            port,
            requests,
            stop,
        }
    }

    /// A server that answers with `replies` in order, then with `fallback`.
    pub fn queue(replies: Vec<Reply>, fallback: Reply) -> Self {
        let q = Mutex::new(VecDeque::from(replies));
        Self::start(move |_| {
            q.lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| fallback.clone())
        })
    }

    /// A server that answers like OpenAI's API for an o-series model: the
    /// 400s of [`reasoning_model_rejection`], else `reply`.
    pub fn reasoning_model(reply: Reply) -> Self {
        Self::start(move |req| reasoning_model_rejection(req).unwrap_or_else(|| reply.clone()))
    }

    /// Base URL, ending in `/v1`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The `openai:` policy spec for `model` on this server.
    pub fn spec(&self, model: &str) -> String {
        format!("openai:{model}@{}", self.url())
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FixtureLlm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn handle(stream: TcpStream, requests: &Mutex<Vec<Request>>, responder: &Responder) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim().to_string());
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Request {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    };
    requests.lock().unwrap().push(request.clone());
    let mut reply = responder(&request);
    while let Reply::Slow(d, inner) = reply {
        thread::sleep(d);
        reply = *inner;
    }
    let mut stream = stream;
    let (status, extra, body): (u16, String, Vec<u8>) = match reply {
        Reply::Text(t) => (
            200,
            String::new(),
            completion(&request, serde_json::Value::String(t)),
        ),
        Reply::NullContent => (
            200,
            String::new(),
            completion(&request, serde_json::Value::Null),
        ),
        Reply::ToolCalls { content, calls } => (
            200,
            String::new(),
            tool_call_completion(&request, content, &calls),
        ),
        Reply::Status {
            code,
            body,
            retry_after,
        } => (
            code,
            retry_after
                .map(|s| format!("Retry-After: {s}\r\n"))
                .unwrap_or_default(),
            body.into_bytes(),
        ),
        Reply::RawBody(b) => (200, String::new(), b),
        Reply::Hangup | Reply::Slow(..) => return,
    };
    let head = format!(
        "HTTP/1.1 {status} Fixture\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
    let _ = stream.flush();
}

fn completion(request: &Request, content: serde_json::Value) -> Vec<u8> {
    let prompt: usize = request.messages().iter().map(|m| m.1.len()).sum();
    let completion = content.as_str().map_or(0, str::len);
    serde_json::to_vec(&serde_json::json!({
        "id": "fixture",
        "object": "chat.completion",
        "model": request.body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt / 4 + 1, "completion_tokens": completion / 4 + 1},
    }))
    .unwrap()
}

fn tool_call_completion(
    request: &Request,
    content: Option<String>,
    calls: &[(String, String)],
) -> Vec<u8> {
    let turn = request.turn();
    let calls: Vec<serde_json::Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, arguments))| {
            serde_json::json!({
                "id": format!("call_{turn}_{i}"),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "id": "fixture",
        "object": "chat.completion",
        "model": request.body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }))
    .unwrap()
}
