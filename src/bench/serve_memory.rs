//! The server's memory in `endless bench serve`: a real `endless serve`
//! process per allocator (the C library's, which `serve` runs on, and
//! mimalloc, the other commands' default), each driven through the same
//! concurrent oracle sessions, with its resident memory read after them.
//! The allocator is chosen per process at start (see
//! [`crate::allocator`]), hence one server process each.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

/// One server process's memory.
#[derive(Debug, Clone, Serialize)]
pub struct ServerMemory {
    /// `system` (the C library's) or `mimalloc`.
    pub allocator: String,
    /// Whether `endless serve` runs on this allocator.
    pub serve_default: bool,
    /// Sessions run, all at once.
    pub sessions: usize,
    /// Of which passed.
    pub passed: usize,
    /// Resident memory once listening, MiB.
    pub start_mib: f64,
    /// Resident memory after the sessions ended, MiB.
    pub after_mib: f64,
    /// Peak resident memory, MiB.
    pub peak_mib: f64,
}

/// Resident and peak resident memory of `pid`, MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A child `endless serve`, killed if still running when dropped.
struct Spawned {
    child: Child,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `endless serve` on workspace `root` with `allocator`; it and its URL.
fn start(root: &Path, allocator: &str, sessions: usize) -> Result<(Spawned, String)> {
    let exe = std::env::current_exe().context("cannot find the endless binary")?;
    let mut child = Command::new(exe)
        .arg("--workspace")
        .arg(root)
        .args(["serve", "--bind", "127.0.0.1:0", "--no-auth", "--run"])
        .arg(format!("bench-memory-{allocator}"))
        .arg("--max-sessions")
        .arg(sessions.to_string())
        .env("ENDLESS_ALLOCATOR", allocator)
        // Its journal stays in the bench's scratch space.
        .env("XDG_STATE_HOME", root.join(".state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start endless serve")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let child = Spawned { child };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("listening on ") {
                let _ = tx.send(line[at + "listening on ".len()..].trim().to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .with_context(|| format!("endless serve ({allocator}) did not start listening"))?;
    Ok((child, url))
}

/// One oracle episode over HTTP: open, the oracle's `reply`, `done`,
/// delete; whether it passed.
async fn episode(
    http: &reqwest::Client,
    base: &str,
    task: &str,
    reply: &str,
    done: &str,
) -> Result<bool> {
    let post = |url: String, body: serde_json::Value| async move {
        let resp = http.post(&url).json(&body).send().await?;
        let status = resp.status();
        let value: serde_json::Value = resp.json().await?;
        if !status.is_success() {
            bail!("{url}: HTTP {status}: {value}");
        }
        Ok::<_, anyhow::Error>(value)
    };
    let opened = post(
        format!("{base}/v1/sessions?wait=600"),
        serde_json::json!({"task_id": task, "policy": "oracle"}),
    )
    .await?;
    let id = opened["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let step = format!("{base}/v1/sessions/{id}/step");
    let mut last = post(step.clone(), serde_json::json!({ "reply": reply })).await?;
    if last["done"] != serde_json::json!(true) {
        last = post(step, serde_json::json!({ "reply": done })).await?;
    }
    http.delete(format!("{base}/v1/sessions/{id}"))
        .send()
        .await?;
    Ok(last["info"]["passed"] == serde_json::json!(true))
}

/// Memory of one `endless serve` on `allocator` after `sessions` oracle
/// episodes at once, cycling through `tasks` (ids, oracle replies); `done`
/// is the reply that ends an episode.
pub async fn measure(
    root: &Path,
    allocator: &str,
    tasks: &[(String, String)],
    done: &'static str,
    sessions: usize,
) -> Result<ServerMemory> {
    let (mut child, url) = start(root, allocator, sessions)?;
    let pid = child.child.id();
    let (start_mib, _) = rss_mib(pid);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(sessions)
        .timeout(Duration::from_secs(900))
        .build()?;
    let tasks = Arc::new(tasks.to_vec());
    let mut set = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let (http, url, tasks) = (http.clone(), url.clone(), tasks.clone());
        set.spawn(async move {
            let (task, reply) = &tasks[i % tasks.len()];
            episode(&http, &url, task, reply, done).await
        });
    }
    let mut passed = 0;
    while let Some(r) = set.join_next().await {
        if r.context("a client task failed")?? {
            passed += 1;
        }
    }
    let (after_mib, peak_mib) = rss_mib(pid);
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            bail!("endless serve ({allocator}) did not exit after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(ServerMemory {
        allocator: allocator.to_string(),
        serve_default: allocator == "system",
        sessions,
        passed,
        start_mib,
        after_mib,
        peak_mib,
    })
}

/// The table of [`ServerMemory`] rows, for the report.
pub fn table(rows: &[ServerMemory], f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    let Some(n) = rows.first().map(|r| r.sessions) else {
        return Ok(());
    };
    writeln!(
        f,
        "server memory, {n} sessions at once (one `endless serve` process each):"
    )?;
    writeln!(
        f,
        "  {:<12} {:>10} {:>10} {:>10} {:>8}",
        "allocator", "start MiB", "after MiB", "peak MiB", "passed"
    )?;
    for r in rows {
        let name = if r.serve_default {
            format!("{} *", r.allocator)
        } else {
            r.allocator.clone()
        };
        writeln!(
            f,
            "  {name:<12} {:>10.1} {:>10.1} {:>10.1} {:>8}",
            r.start_mib, r.after_mib, r.peak_mib, r.passed
        )?;
    }
    write!(f, "  (* the allocator `endless serve` runs on)")
}
