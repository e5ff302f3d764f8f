//! A real `endless serve` on 127.0.0.1 (any free port) for tests, and a
//! small client that keeps each answer's status, headers and body.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `endless serve` on a workspace, killed on drop.
pub struct Served {
    /// The server process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its bearer token.
    pub token: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Served {
    /// `endless serve` on `ws` with `extra` flags, once it listens.
    pub fn start(ws: &Path, extra: &[&str]) -> Served {
        Self::start_with_env(ws, extra, &[])
    }

    /// [`Served::start`] with `env` set (and `ENDLESS_ALLOCATOR` unset
    /// unless `env` sets it).
    pub fn start_with_env(ws: &Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let token_file = ws.join("serve.token");
        let mut child = Command::new(env!("CARGO_BIN_EXE_endless"))
            .env_remove("ENDLESS_ALLOCATOR")
            .envs(env.iter().copied())
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
        let url = loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the server did not say where it listens");
            if let Some(at) = line.find("listening on ") {
                break line[at + "listening on ".len()..].trim().to_string();
            }
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
        }
    }

    /// A client with the server's token.
    pub fn client(&self) -> Api {
        Api {
            http: reqwest::Client::new(),
            url: self.url.clone(),
            token: self.token.clone(),
        }
    }

    /// Resident memory of the server process, MiB.
    pub fn rss_mib(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap()
            / 1024.0
    }

    /// Send SIGTERM (the server drains, then exits).
    pub fn terminate(&self) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// SIGTERM, then the exit status and everything it said on stderr.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        self.terminate();
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

/// One answer: status, headers, and the body as JSON (or a JSON string of
/// the text when it is not JSON).
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// Its headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body exactly as sent.
    pub raw: String,
    /// The body as JSON.
    pub body: Value,
}

impl Answer {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// A tiny client for the API.
#[derive(Clone)]
pub struct Api {
    /// The HTTP client.
    pub http: reqwest::Client,
    /// The server's base URL.
    pub url: String,
    /// The bearer token sent.
    pub token: String,
}

impl Api {
    /// `method path` with a JSON `body` and extra `headers`.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let raw = resp.text().await.unwrap();
        let body = serde_json::from_str(&raw).unwrap_or(Value::String(raw.clone()));
        Answer {
            status,
            headers,
            raw,
            body,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, None, &[]).await
    }

    /// `POST path` with a JSON body and extra headers.
    pub async fn post(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Answer {
        self.send(reqwest::Method::POST, path, Some(&body), headers)
            .await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Answer {
        self.send(reqwest::Method::DELETE, path, None, &[]).await
    }
}
