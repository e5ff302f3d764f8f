//! Background jobs started from the Jobs view. Every job runs through the
//! [`JobManager`] on its own thread, never on the UI thread; its events are
//! forwarded to the event loop as [`Action::Job`].

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::mpsc::Sender;
use std::time::Duration;

use super::app::Action;
use super::event::Msg;
use crate::jobs::{JobContext, JobId, JobManager};

/// What to launch, with the values of its form.
#[derive(Debug, Clone, PartialEq)]
pub enum JobSpec {
    /// Episodes of `policy` on the selected tasks (see `tui::eval_job`).
    Eval {
        policy: String,
        /// Comma-separated ids or `*` globs; empty: all but rejected/archived.
        tasks: String,
        samples: u32,
        max_turns: Option<u32>,
        concurrency: usize,
    },
    /// Validate these tasks (empty: every task).
    Validate { tasks: Vec<String> },
    /// The LLM generation pipeline (`endless generate --llm`).
    Generate {
        url: String,
        model: String,
        count: usize,
        solutions: u32,
    },
    /// Offline (procedural) generation (`endless generate --offline`).
    Offline { count: usize, seed: u64 },
    /// A training run (`endless train`; see `tui::train_job`).
    Train(super::train_job::TrainSpec),
}

impl JobSpec {
    /// The job kind journalled in the workspace.
    pub fn kind(&self) -> &'static str {
        match self {
            JobSpec::Eval { .. } => "eval",
            JobSpec::Validate { .. } => "validate",
            JobSpec::Generate { .. } => "generate",
            JobSpec::Offline { .. } => "generate-offline",
            JobSpec::Train(_) => "train",
        }
    }

    fn params(&self) -> serde_json::Value {
        match self {
            JobSpec::Eval {
                policy,
                tasks,
                samples,
                max_turns,
                concurrency,
            } => serde_json::json!({
                "policy": policy, "tasks": tasks, "samples": samples,
                "max_turns": max_turns, "concurrency": concurrency,
            }),
            JobSpec::Validate { tasks } => serde_json::json!({ "tasks": tasks }),
            JobSpec::Generate {
                url,
                model,
                count,
                solutions,
            } => serde_json::json!({
                "url": url, "model": model, "count": count, "solutions": solutions,
            }),
            JobSpec::Offline { count, seed } => serde_json::json!({ "count": count, "seed": seed }),
            JobSpec::Train(spec) => spec.params(),
        }
    }
}

/// Owns the job manager and forwards its events to the UI.
pub struct Launcher {
    manager: JobManager,
    root: PathBuf,
    tx: Sender<Msg>,
}

impl Launcher {
    /// A launcher journalling into the workspace at `root`; events go to `tx`.
    pub fn new(root: &Path, tx: Sender<Msg>) -> anyhow::Result<Launcher> {
        let manager = JobManager::new(Some(root))?;
        let mut events = manager.subscribe();
        let fwd = tx.clone();
        std::thread::Builder::new()
            .name("job events".into())
            .spawn(move || loop {
                match events.blocking_recv() {
                    Ok(ev) => {
                        if fwd.send(Msg::Action(Action::Job(ev))).is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            })?;
        Ok(Launcher {
            manager,
            root: root.to_path_buf(),
            tx,
        })
    }

    /// Start a job; returns its id.
    pub fn launch(&self, spec: JobSpec) -> anyhow::Result<JobId> {
        let root = self.root.clone();
        let tx = self.tx.clone();
        let params = spec.params();
        let kind = spec.kind();
        let id = match spec {
            JobSpec::Eval {
                policy,
                tasks,
                samples,
                max_turns,
                concurrency,
            } => self.manager.spawn(kind, params, move |ctx| {
                let opts = super::eval_job::EvalOptions {
                    policy,
                    tasks: (!tasks.is_empty()).then_some(tasks),
                    samples,
                    max_turns,
                    concurrency,
                };
                super::eval_job::run(ctx, &root, &opts, &tx)
            })?,
            JobSpec::Validate { tasks } => self
                .manager
                .spawn(kind, params, move |ctx| validate_job(ctx, &root, tasks))?,
            JobSpec::Generate {
                url,
                model,
                count,
                solutions,
            } => {
                let args = vec![
                    "generate".into(),
                    "--count".into(),
                    count.to_string(),
                    "--llm".into(),
                    url,
                    "--model".into(),
                    model,
                    "--solutions".into(),
                    solutions.to_string(),
                ];
                self.manager
                    .spawn(kind, params, move |ctx| cli_job(ctx, &root, &args))?
            }
            JobSpec::Offline { count, seed } => {
                let args = vec![
                    "generate".into(),
                    "--offline".into(),
                    "--count".into(),
                    count.to_string(),
                    "--seed".into(),
                    seed.to_string(),
                ];
                self.manager
                    .spawn(kind, params, move |ctx| cli_job(ctx, &root, &args))?
            }
            JobSpec::Train(spec) => self.manager.spawn(kind, params, move |ctx| {
                super::train_job::run(ctx, &root, &spec)
            })?,
        };
        Ok(id)
    }

    /// Ask a running job to stop.
    pub fn cancel(&self, id: &str) -> bool {
        self.manager.cancel(&JobId(id.to_string()))
    }
}

/// Validate each task (all when `tasks` is empty) with progress.
fn validate_job(ctx: &JobContext, root: &Path, tasks: Vec<String>) -> anyhow::Result<String> {
    let ws = crate::store::Workspace::open(root)?;
    let ids = if tasks.is_empty() {
        ws.list_tasks(&Default::default())?
            .into_iter()
            .map(|r| r.id)
            .collect()
    } else {
        tasks
    };
    let total = ids.len() as u64;
    let mut valid = 0;
    let mut last = String::new();
    for (i, id) in ids.iter().enumerate() {
        ctx.check()?;
        ctx.progress(i as u64, total, id);
        last = match super::validate::validate_task(&ws, id) {
            Ok(s) => {
                valid += 1;
                format!("{id}: {s}")
            }
            Err(e) => format!("{id}: INVALID: {e}"),
        };
        ctx.log(last.clone());
    }
    ctx.progress(total, total, "done");
    // One task: its verdict says more than a count.
    Ok(if total == 1 {
        last
    } else {
        format!("{valid}/{total} valid")
    })
}

/// Run `endless <args> --workspace <root>` as a child process: its stderr
/// lines become log lines, cancellation kills it.
fn cli_job(ctx: &JobContext, root: &Path, args: &[String]) -> anyhow::Result<String> {
    let exe = std::env::current_exe()?;
    let mut child = Process::new(&exe)
        .args(args)
        .arg("--workspace")
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let t = line_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                // Progress bars redraw with \r: keep the last state.
                let line = line.rsplit('\r').next().unwrap_or("").trim().to_string();
                if !line.is_empty() && t.send(line).is_err() {
                    return;
                }
            }
        });
    }
    drop(line_tx);
    let mut last = String::new();
    loop {
        if ctx.is_cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            ctx.check()?;
        }
        match line_rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                last = line.clone();
                ctx.log(line);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait()?;
    if status.success() {
        Ok(last)
    } else {
        anyhow::bail!(
            "{} ({status})",
            if last.is_empty() { "failed" } else { &last }
        )
    }
}

/// Defaults of the launch forms, from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct JobDefaults {
    pub policy: String,
    pub samples: u32,
    pub concurrency: usize,
    pub llm_url: String,
    pub llm_model: String,
    pub solutions: u32,
    pub count: usize,
}

impl Default for JobDefaults {
    fn default() -> Self {
        JobDefaults {
            policy: "oracle".into(),
            samples: 1,
            concurrency: 2,
            llm_url: "http://localhost:8000/v1".into(),
            llm_model: String::new(),
            solutions: 16,
            count: 10,
        }
    }
}

impl JobDefaults {
    /// Defaults from the `[llm]` and `[generate]` sections.
    pub fn from_config(config: &crate::config::Config) -> JobDefaults {
        JobDefaults {
            llm_url: config.llm.url.clone(),
            llm_model: config.llm.model.clone(),
            solutions: config.generate.solutions,
            ..JobDefaults::default()
        }
    }
}
