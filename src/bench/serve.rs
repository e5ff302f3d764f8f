//! `endless bench serve`: oracle episodes driven over HTTP by many
//! concurrent clients against one in-process `endless serve`, beside the
//! same episodes run in-process (as `endless eval` runs them), with the
//! same concurrency. Reports sessions per minute, step latency p50/p99 on
//! both sides, the server's overhead per step, memory per open session,
//! and the memory of a real `endless serve` after `--clients` sessions at
//! once on each allocator (see [`super::serve_memory`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use parking_lot::Mutex;
use serde::Serialize;

use crate::agent::{
    BackendProvider, EpisodeConfig, EpisodePaths, RecordedEpisode, Recording, SandboxProvider,
    Started,
};
use crate::llm::TokenUsage;
use crate::rl::RewardMode;
use crate::serve::{Auth, Server, Settings};
use crate::store::Workspace;
use crate::task::Task;
use crate::workbench::Context;

use super::serve_memory::ServerMemory;

/// The reply that says done.
const DONE: &str = "<think>Finished.</think>\n<action>done</action>";

/// One side of the comparison.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    /// Episodes run.
    pub episodes: usize,
    /// Episodes whose final tests passed.
    pub passed: usize,
    /// Wall-clock seconds for all of them.
    pub wall_secs: f64,
    /// Finished episodes per minute.
    pub sessions_per_minute: f64,
    /// Latency of a command step (the oracle's command), milliseconds.
    pub step_p50_ms: f64,
    /// 99th percentile of the same.
    pub step_p99_ms: f64,
    /// Latency of the final step (done: final tests and recording), ms.
    pub done_p50_ms: f64,
    /// 99th percentile of the same.
    pub done_p99_ms: f64,
}

/// Memory of open sessions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    /// Sessions held open while measuring.
    pub open_sessions: usize,
    /// Growth of the server process's resident memory, per session, KiB.
    pub server_kib_per_session: f64,
    /// Resident memory of each session's sandbox processes, KiB.
    pub sandbox_kib_per_session: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct ServeBench {
    /// Concurrent clients (and in-process workers).
    pub clients: usize,
    /// Distinct tasks the episodes cycle through.
    pub tasks: usize,
    /// Over HTTP.
    pub http: Side,
    /// In-process.
    pub in_process: Side,
    /// HTTP p50 command-step latency minus in-process, milliseconds.
    pub overhead_p50_ms: f64,
    /// HTTP p99 command-step latency minus in-process, milliseconds.
    pub overhead_p99_ms: f64,
    /// The server's own time per command step, measured per request: the
    /// client's latency minus the episode's step inside the server (its
    /// `Server-Timing` header): HTTP, JSON, routing, the worker hand-off.
    pub server_overhead: Overhead,
    /// HTTP over in-process: sessions per minute.
    pub ratio_sessions_per_minute: f64,
    /// HTTP over in-process: step latency p50.
    pub ratio_step_p50: f64,
    /// HTTP over in-process: step latency p99.
    pub ratio_step_p99: f64,
    /// Memory per open session (over HTTP).
    pub memory: Memory,
    /// The allocator this process (both sides above) runs on.
    pub allocator: &'static str,
    /// A real `endless serve`'s memory after `clients` sessions at once,
    /// per allocator.
    pub server_memory: Vec<ServerMemory>,
    /// The figures against issue 32's goals.
    pub goals: Goals,
}

/// The server's own time per step, from [`ServeBench::server_overhead`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overhead {
    /// Steps measured.
    pub steps: usize,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
}

/// Server overhead per step at p50 under this (issue 32's goal).
pub const OVERHEAD_GOAL_MS: f64 = 1.0;
/// `endless serve`'s memory after the sessions, at most this many times
/// the C library allocator's figure (issue 32's goal).
pub const MEMORY_GOAL_RATIO: f64 = 2.0;

/// The bench's figures against its goals.
#[derive(Debug, Clone, Serialize)]
pub struct Goals {
    /// Built with optimizations (the goals are for a release build).
    pub release_build: bool,
    /// Server overhead per step at p50 is under [`OVERHEAD_GOAL_MS`].
    pub overhead_met: bool,
    /// `endless serve`'s memory after the sessions (on the allocator it
    /// runs on) over the C library allocator's (glibc's), when both ran.
    pub memory_vs_glibc: Option<f64>,
    /// That ratio is at most [`MEMORY_GOAL_RATIO`].
    pub memory_met: Option<bool>,
}

impl Goals {
    /// The goals of a run with these figures.
    fn of(overhead_p50_ms: f64, memory: &[ServerMemory]) -> Goals {
        let after = |pick: &dyn Fn(&ServerMemory) -> bool| {
            memory.iter().find(|m| pick(m)).map(|m| m.after_mib)
        };
        let ratio = match (
            after(&|m| m.serve_default),
            after(&|m| m.allocator == "system"),
        ) {
            (Some(serve), Some(glibc)) if glibc > 0.0 => Some(serve / glibc),
            _ => None,
        };
        Goals {
            release_build: !cfg!(debug_assertions),
            overhead_met: overhead_p50_ms < OVERHEAD_GOAL_MS,
            memory_vs_glibc: ratio,
            memory_met: ratio.map(|r| r <= MEMORY_GOAL_RATIO),
        }
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

impl std::fmt::Display for ServeBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "bench serve: {} clients, {} tasks, oracle episodes",
            self.clients, self.tasks
        )?;
        writeln!(
            f,
            "{:<22} {:>12} {:>12} {:>10}",
            "", "http", "in-process", "ratio"
        )?;
        let row = |f: &mut std::fmt::Formatter<'_>, name: &str, a: f64, b: f64| {
            let ratio = if b > 0.0 { a / b } else { f64::NAN };
            writeln!(f, "{name:<22} {a:>12.2} {b:>12.2} {ratio:>10.2}")
        };
        row(
            f,
            "episodes (passed)",
            self.http.passed as f64,
            self.in_process.passed as f64,
        )?;
        row(
            f,
            "sessions / minute",
            self.http.sessions_per_minute,
            self.in_process.sessions_per_minute,
        )?;
        row(
            f,
            "step p50 (ms)",
            self.http.step_p50_ms,
            self.in_process.step_p50_ms,
        )?;
        row(
            f,
            "step p99 (ms)",
            self.http.step_p99_ms,
            self.in_process.step_p99_ms,
        )?;
        row(
            f,
            "done step p50 (ms)",
            self.http.done_p50_ms,
            self.in_process.done_p50_ms,
        )?;
        row(
            f,
            "done step p99 (ms)",
            self.http.done_p99_ms,
            self.in_process.done_p99_ms,
        )?;
        writeln!(
            f,
            "step latency, http minus in-process (both sides' sandboxes vary): p50 {:.2} ms, p99 {:.2} ms",
            self.overhead_p50_ms, self.overhead_p99_ms
        )?;
        writeln!(
            f,
            "server overhead per step (each request's latency minus its step inside the server, {} steps): p50 {:.3} ms, p99 {:.3} ms",
            self.server_overhead.steps, self.server_overhead.p50_ms, self.server_overhead.p99_ms
        )?;
        writeln!(
            f,
            "memory per open session ({} open): server {:.0} KiB, sandbox {:.0} KiB",
            self.memory.open_sessions,
            self.memory.server_kib_per_session,
            self.memory.sandbox_kib_per_session
        )?;
        writeln!(f, "allocator of both sides above: {}", self.allocator)?;
        super::serve_memory::table(&self.server_memory, f)?;
        writeln!(f)?;
        let g = &self.goals;
        writeln!(
            f,
            "goal: server overhead per step p50 under {OVERHEAD_GOAL_MS} ms with {} clients: {:.3} ms, {}{}",
            self.clients,
            self.server_overhead.p50_ms,
            verdict(g.overhead_met),
            if g.release_build {
                ""
            } else {
                " (a debug build: the goal is for a release build)"
            }
        )?;
        match (g.memory_vs_glibc, g.memory_met) {
            (Some(r), Some(met)) => write!(
                f,
                "goal: `endless serve`'s memory after {} sessions within {MEMORY_GOAL_RATIO}x of glibc's: {r:.2}x, {}",
                self.clients,
                verdict(met)
            ),
            _ => write!(f, "goal: `endless serve`'s memory against glibc's: not measured"),
        }
    }
}

/// The `q` quantile of `v` (nearest rank), 0 for none.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * q).round() as usize]
}

fn side(passed: usize, episodes: usize, wall: Duration, steps: &[f64], dones: &[f64]) -> Side {
    let wall_secs = wall.as_secs_f64();
    Side {
        episodes,
        passed,
        wall_secs,
        sessions_per_minute: if wall_secs > 0.0 {
            episodes as f64 * 60.0 / wall_secs
        } else {
            0.0
        },
        step_p50_ms: quantile(steps, 0.5),
        step_p99_ms: quantile(steps, 0.99),
        done_p50_ms: quantile(dones, 0.5),
        done_p99_ms: quantile(dones, 0.99),
    }
}

/// The oracle's reply for `task`.
fn oracle_reply(task: &Task) -> Result<String> {
    let script = task
        .solve_script()
        .with_context(|| format!("task {} has no solution/solve.sh", task.id()))?;
    Ok(format!(
        "<think>Run the solution.</think>\n<command>{}</command>",
        crate::agent::policy::oracle_command(script)
    ))
}

/// Resident memory of process `pid`, KiB.
fn rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}

/// Resident memory of every process below this one, KiB.
fn children_rss_kib() -> f64 {
    let me = std::process::id();
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let (_, rest) = s.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                .unwrap_or(0);
            parent_of.push((pid, ppid));
        }
    }
    let mut tree = vec![me];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree[1..].iter().map(|p| rss_kib(*p)).sum()
}

/// `endless bench serve`: `episodes` oracle episodes with `clients`
/// concurrent clients, over HTTP and in-process.
pub fn run(ctx: &Context, clients: usize, episodes: usize) -> Result<ServeBench> {
    if clients == 0 || episodes == 0 {
        bail!("--clients and --episodes must be at least 1");
    }
    let work = tempfile::tempdir()?;
    let mut ws = Workspace::open(work.path())?;
    let n_tasks = episodes.clamp(1, 4);
    let (job, _events) = crate::jobs::JobContext::standalone("bench serve");
    let request = crate::workbench::generate::OfflineRequest {
        count: n_tasks,
        seed: 1,
        ..Default::default()
    };
    crate::workbench::generate::offline_into(&mut ws, &request, &job)?;
    let ids = ws.task_ids()?;
    let tasks: Vec<Arc<Task>> = ids
        .iter()
        .map(|id| ws.load_task(id).map(Arc::new))
        .collect::<Result<_, _>>()?;
    if tasks.is_empty() {
        bail!("no offline task could be generated here (see `endless sandbox doctor`)");
    }
    let replies: Vec<String> = tasks
        .iter()
        .map(|t| oracle_reply(t))
        .collect::<Result<_>>()?;
    let backend: Arc<dyn crate::sandbox::Backend> = ctx.backend()?.into();
    let provider = Arc::new(BackendProvider::new(backend.clone()));
    for task in &tasks {
        provider
            .prepare(task)
            .with_context(|| format!("building the environment of {}", task.id()))?;
    }
    let command_timeout = Duration::from_secs(120);
    // Untimed: one episode per task, so that neither side pays for first
    // sandbox starts and cold caches.
    let warm = Workspace::open(work.path())?;
    in_process(
        &provider,
        warm,
        "bench-warm-up",
        &tasks,
        &replies,
        clients,
        tasks.len(),
        command_timeout,
    )?;
    let in_process = in_process(
        &provider,
        ws,
        "bench-in-process",
        &tasks,
        &replies,
        clients,
        episodes,
        command_timeout,
    )?;

    let rt = tokio::runtime::Runtime::new()?;
    let (http, memory, server_overhead) = rt.block_on(over_http(
        work.path(),
        backend,
        &tasks,
        &replies,
        clients,
        episodes,
        command_timeout,
    ))?;
    let pairs: Vec<(String, String)> = tasks
        .iter()
        .map(|t| t.id().to_string())
        .zip(replies.iter().cloned())
        .collect();
    let mut server_memory = Vec::new();
    for allocator in ["system", "mimalloc"] {
        server_memory.push(
            rt.block_on(super::serve_memory::measure(
                work.path(),
                allocator,
                &pairs,
                DONE,
                clients,
            ))
            .with_context(|| format!("measuring endless serve on {allocator}"))?,
        );
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let overhead_p50_ms = http.step_p50_ms - in_process.step_p50_ms;
    Ok(ServeBench {
        goals: Goals::of(server_overhead.p50_ms, &server_memory),
        server_overhead,
        clients,
        tasks: tasks.len(),
        overhead_p50_ms,
        overhead_p99_ms: http.step_p99_ms - in_process.step_p99_ms,
        ratio_sessions_per_minute: ratio(http.sessions_per_minute, in_process.sessions_per_minute),
        ratio_step_p50: ratio(http.step_p50_ms, in_process.step_p50_ms),
        ratio_step_p99: ratio(http.step_p99_ms, in_process.step_p99_ms),
        http,
        in_process,
        memory,
        allocator: crate::allocator::name(),
        server_memory,
    })
}

/// The episodes in this process: `clients` threads, each starting an
/// episode, stepping it with the oracle's reply, then done, and recording
/// and indexing it as `endless eval` does.
#[allow(clippy::too_many_arguments)]
fn in_process(
    provider: &BackendProvider,
    ws: Workspace,
    run_id: &str,
    tasks: &[Arc<Task>],
    replies: &[String],
    clients: usize,
    episodes: usize,
    command_timeout: Duration,
) -> Result<Side> {
    ws.upsert_run(run_id, "bench", "oracle", &serde_json::json!({}))?;
    let run_dir = ws.runs_dir().join(run_id);
    let next = AtomicUsize::new(0);
    let steps = Mutex::new(Vec::new());
    let dones = Mutex::new(Vec::new());
    let passed = AtomicUsize::new(0);
    let errors = Mutex::new(Vec::new());
    let ws = Mutex::new(ws);
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..clients.min(episodes) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= episodes {
                    break;
                }
                let task = &tasks[i % tasks.len()];
                let config = EpisodeConfig::for_task(task, None, command_timeout);
                let recording = Recording {
                    paths: EpisodePaths::new(&run_dir, task.id(), i as u32),
                    record_cast: true,
                    events: None,
                };
                let mut episode = match RecordedEpisode::start(
                    provider, task, i as u32, "oracle", &config, recording,
                ) {
                    Ok(Started::Running(e)) => e,
                    Ok(Started::Failed(r)) => {
                        errors.lock().push(r.error.unwrap_or_default());
                        continue;
                    }
                    Err(e) => {
                        errors.lock().push(e.to_string());
                        continue;
                    }
                };
                let t = Instant::now();
                let first = episode.step(&replies[i % tasks.len()], TokenUsage::default(), 0.0);
                steps.lock().push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                if !first.done {
                    episode.step(DONE, TokenUsage::default(), 0.0);
                }
                let result = episode.finish(provider, task);
                if let Ok(r) = &result {
                    let _ = crate::agent::index_episode(&ws.lock(), run_id, r);
                    if r.passed {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                dones.lock().push(t.elapsed().as_secs_f64() * 1e3);
                if let Err(e) = result {
                    errors.lock().push(e.to_string());
                }
            });
        }
    });
    let wall = t0.elapsed();
    if let Some(e) = errors.lock().first() {
        tracing::warn!(errors = errors.lock().len(), first = %e, "in-process episodes failed");
    }
    let steps = steps.into_inner();
    let dones = dones.into_inner();
    Ok(side(
        passed.load(Ordering::Relaxed),
        episodes,
        wall,
        &steps,
        &dones,
    ))
}

/// [`post`], also returning the episode's own time of a step in the
/// server, milliseconds (its `Server-Timing: step;dur=MS` header).
async fn post_timed(
    http: &reqwest::Client,
    url: &str,
    body: serde_json::Value,
) -> Result<(serde_json::Value, Option<f64>)> {
    let resp = http.post(url).json(&body).send().await?;
    let status = resp.status();
    let step_ms = resp
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(step_duration_ms);
    let value: serde_json::Value = resp.json().await?;
    if !status.is_success() {
        bail!("{url}: HTTP {status}: {value}");
    }
    Ok((value, step_ms))
}

/// `dur` of the `step` metric of a `Server-Timing` header.
fn step_duration_ms(header: &str) -> Option<f64> {
    header.split(',').find_map(|metric| {
        let mut parts = metric.split(';').map(str::trim);
        (parts.next()? == "step").then_some(())?;
        parts.find_map(|p| p.strip_prefix("dur=")?.parse().ok())
    })
}

/// POST `body` to `url`; the answer's JSON, or why not.
async fn post(
    http: &reqwest::Client,
    url: &str,
    body: serde_json::Value,
) -> Result<serde_json::Value> {
    let resp = http.post(url).json(&body).send().await?;
    let status = resp.status();
    let value: serde_json::Value = resp.json().await?;
    if !status.is_success() {
        bail!("{url}: HTTP {status}: {value}");
    }
    Ok(value)
}

/// The episodes over HTTP against a server in this process, then memory
/// with `clients` sessions open at once.
async fn over_http(
    root: &std::path::Path,
    backend: Arc<dyn crate::sandbox::Backend>,
    tasks: &[Arc<Task>],
    replies: &[String],
    clients: usize,
    episodes: usize,
    command_timeout: Duration,
) -> Result<(Side, Memory, Overhead)> {
    let server = Server {
        ws: Workspace::open(root)?,
        provider: BackendProvider::new(backend),
        auth: Auth::disabled(),
        settings: Settings {
            reward: RewardMode::Binary,
            idle_timeout: Duration::from_secs(600),
            command_timeout,
            default_run: "serve-bench".into(),
            read_timeout: Duration::from_secs(30),
            protocol: crate::agent::protocol::Protocol::endless(),
            atif: false,
            sandbox: crate::serve::SandboxLimits::default(),
        },
        bind: "127.0.0.1:0".parse()?,
        max_sessions: clients,
        per_token: clients,
        queue: Default::default(),
        journal: None,
        lost: Vec::new(),
    };
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run_until(
        move |addr| {
            let _ = bound_tx.send(addr);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let addr = bound_rx.await.context("the bench server did not start")?;
    let base = format!("http://{addr}");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .timeout(command_timeout * 3)
        .build()?;

    let next = Arc::new(AtomicUsize::new(0));
    let steps = Arc::new(Mutex::new(Vec::new()));
    let dones = Arc::new(Mutex::new(Vec::new()));
    let overheads = Arc::new(Mutex::new(Vec::new()));
    let passed = Arc::new(AtomicUsize::new(0));
    let ids: Vec<String> = tasks.iter().map(|t| t.id().to_string()).collect();
    let t0 = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..clients.min(episodes) {
        let (http, base, next, steps, dones, passed) = (
            http.clone(),
            base.clone(),
            next.clone(),
            steps.clone(),
            dones.clone(),
            passed.clone(),
        );
        let overheads = overheads.clone();
        let (ids, replies) = (ids.clone(), replies.to_vec());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= episodes {
                    return Ok::<(), anyhow::Error>(());
                }
                let k = i % ids.len();
                let opened = post(
                    &http,
                    &format!("{base}/v1/sessions"),
                    serde_json::json!({"task_id": ids[k], "policy": "oracle"}),
                )
                .await?;
                let id = opened["session_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let step_url = format!("{base}/v1/sessions/{id}/step");
                let t = Instant::now();
                let (mut last, inside_ms) =
                    post_timed(&http, &step_url, serde_json::json!({"reply": replies[k]})).await?;
                let client_ms = t.elapsed().as_secs_f64() * 1e3;
                steps.lock().push(client_ms);
                if let Some(inside) = inside_ms {
                    overheads.lock().push((client_ms - inside).max(0.0));
                }
                let t = Instant::now();
                if last["done"] != serde_json::json!(true) {
                    last = post(&http, &step_url, serde_json::json!({"reply": DONE})).await?;
                }
                dones.lock().push(t.elapsed().as_secs_f64() * 1e3);
                if last["info"]["passed"] == serde_json::json!(true) {
                    passed.fetch_add(1, Ordering::Relaxed);
                }
                http.delete(format!("{base}/v1/sessions/{id}"))
                    .send()
                    .await?;
            }
        });
    }
    let mut failure = None;
    while let Some(r) = workers.join_next().await {
        if let Err(e) = r.map_err(anyhow::Error::from).and_then(|r| r) {
            failure.get_or_insert(e);
        }
    }
    let wall = t0.elapsed();
    if let Some(e) = failure {
        let _ = stop_tx.send(());
        let _ = serving.await;
        return Err(e.context("an HTTP client failed"));
    }
    let side = side(
        passed.load(Ordering::Relaxed),
        episodes,
        wall,
        &steps.lock(),
        &dones.lock(),
    );
    let overheads = overheads.lock().clone();
    let overhead = Overhead {
        steps: overheads.len(),
        p50_ms: quantile(&overheads, 0.5),
        p99_ms: quantile(&overheads, 0.99),
    };

    // Memory: `clients` sessions open at once.
    let me = std::process::id();
    let (rss0, kids0) = (rss_kib(me), children_rss_kib());
    let mut open = Vec::new();
    for i in 0..clients {
        let opened = post(
            &http,
            &format!("{base}/v1/sessions"),
            serde_json::json!({"task_id": ids[i % ids.len()], "policy": "memory"}),
        )
        .await;
        match opened {
            Ok(o) => open.push(o["session_id"].as_str().unwrap_or_default().to_string()),
            Err(e) => {
                tracing::warn!(%e, "bench serve: cannot open more sessions");
                break;
            }
        }
    }
    let n = open.len().max(1) as f64;
    let memory = Memory {
        open_sessions: open.len(),
        server_kib_per_session: (rss_kib(me) - rss0).max(0.0) / n,
        sandbox_kib_per_session: (children_rss_kib() - kids0).max(0.0) / n,
    };
    for id in &open {
        let _ = http.delete(format!("{base}/v1/sessions/{id}")).send().await;
    }
    let _ = stop_tx.send(());
    serving.await??;
    Ok((side, memory, overhead))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(allocator: &str, serve_default: bool, after_mib: f64) -> ServerMemory {
        ServerMemory {
            allocator: allocator.into(),
            serve_default,
            sessions: 64,
            passed: 64,
            start_mib: 20.0,
            after_mib,
            peak_mib: after_mib,
        }
    }

    #[test]
    fn the_steps_server_timing_is_read() {
        assert_eq!(step_duration_ms("step;dur=12.5"), Some(12.5));
        assert_eq!(
            step_duration_ms("db;dur=1, step;desc=\"x\";dur=3"),
            Some(3.0)
        );
        assert_eq!(step_duration_ms("db;dur=1"), None);
        assert_eq!(step_duration_ms("step;dur=x"), None);
    }

    #[test]
    fn goals_compare_serves_allocator_with_glibcs() {
        let both = [
            memory("system", true, 50.0),
            memory("mimalloc", false, 300.0),
        ];
        let g = Goals::of(0.4, &both);
        assert!(g.overhead_met);
        assert_eq!((g.memory_vs_glibc, g.memory_met), (Some(1.0), Some(true)));
        let on_mimalloc = [
            memory("system", false, 50.0),
            memory("mimalloc", true, 300.0),
        ];
        let g = Goals::of(1.5, &on_mimalloc);
        assert!(!g.overhead_met);
        assert_eq!((g.memory_vs_glibc, g.memory_met), (Some(6.0), Some(false)));
        let g = Goals::of(0.1, &[]);
        assert_eq!((g.memory_vs_glibc, g.memory_met), (None, None));
    }
}
