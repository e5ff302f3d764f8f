//! The evaluation job: [`crate::workbench::eval()`] on a job thread (the
//! same use case as `endless eval`: same run ids, so a re-run resumes; same
//! indexing and pass@k), with the takeover provider around the sandbox and
//! every episode's terminal streamed to a live pane.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use anyhow::bail;

use crate::agent::{BackendProvider, RolloutEvent};
use crate::jobs::JobContext;
use crate::tui::action::{pane_command, Action, LiveEvent, Msg};
use crate::tui::takeover::TakeoverProvider;
use crate::workbench::cut_by_cancel;
use crate::workbench::{Context, EvalRequest, RolloutHooks, RunRequest};

fn send(tx: &Sender<Msg>, ev: LiveEvent) {
    let _ = tx.send(Msg::Action(Action::Live(ev)));
}

/// Live panes and takeover: what the TUI adds to an evaluation.
struct LivePanes<'a> {
    tx: &'a Sender<Msg>,
    policy: String,
    provider: Option<Arc<TakeoverProvider>>,
    /// The job: told the run's id once, and each turn (progress per turn).
    job: &'a JobContext,
    /// The run the job was told of.
    named: bool,
}

impl RolloutHooks for LivePanes<'_> {
    type Provider = TakeoverProvider;

    fn provider(&mut self, inner: BackendProvider, stop: Arc<AtomicBool>) -> Arc<TakeoverProvider> {
        let provider = Arc::new(TakeoverProvider::new(inner, stop));
        self.provider = Some(provider.clone());
        provider
    }

    /// The takeover provider ends running episodes on a cancel.
    fn cuts_running_on_cancel(&self) -> bool {
        true
    }

    fn on_event(&mut self, run_id: &str, event: RolloutEvent) {
        let (rows, cols) = (48u16, 160u16);
        if !self.named {
            // The job is shown by its run's id from now on.
            self.named = true;
            self.job.set_run(run_id);
        }
        if let RolloutEvent::Step { .. } = &event {
            self.job.turn();
        }
        match event {
            RolloutEvent::Planned { .. } => {}
            RolloutEvent::Started {
                task,
                sample,
                stream,
            } => {
                let key = format!("{run_id}/{task}/{sample}");
                send(
                    self.tx,
                    LiveEvent::Open {
                        key: key.clone(),
                        title: format!("{task}#{sample}"),
                        policy: self.policy.clone(),
                        rows,
                        cols,
                        input: self.provider.as_ref().and_then(|p| p.handle(&task, sample)),
                    },
                );
                if let Some(mut stream) = stream {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        use tokio::sync::broadcast::error::RecvError;
                        loop {
                            match stream.recv().await {
                                Ok(bytes) => send(
                                    &tx,
                                    LiveEvent::Feed {
                                        key: key.clone(),
                                        bytes: bytes.to_vec(),
                                    },
                                ),
                                Err(RecvError::Lagged(_)) => continue,
                                Err(RecvError::Closed) => return,
                            }
                        }
                    });
                }
            }
            RolloutEvent::Step { task, sample, step } => send(
                self.tx,
                LiveEvent::Step {
                    key: format!("{run_id}/{task}/{sample}"),
                    turn: step.turn,
                    command: pane_command(step.kind, step.command.as_deref()),
                },
            ),
            // Cut short by the cancel: not a failure of the agent.
            RolloutEvent::Finished { result } if cut_by_cancel(&result) => send(
                self.tx,
                LiveEvent::Cancelled {
                    key: format!("{run_id}/{}/{}", result.task, result.sample),
                },
            ),
            RolloutEvent::Finished { result } => send(
                self.tx,
                LiveEvent::Finished {
                    key: format!("{run_id}/{}/{}", result.task, result.sample),
                    passed: result.passed,
                    failure: result.failure_mode.map(|m| m.as_str().to_string()),
                },
            ),
        }
    }
}

/// Run the evaluation `req` in the workspace at `root`; returns a one-line
/// summary (or `Err(Cancelled)` once the job was cancelled: the episodes
/// that finished are still indexed and reported).
pub fn run(
    ctx: &JobContext,
    root: &Path,
    req: &EvalRequest,
    tx: &Sender<Msg>,
) -> anyhow::Result<String> {
    if !req.policy.contains(':') && req.policy.trim() == "human" {
        bail!(
            "the human policy needs a terminal of its own: use `endless run TASK --policy human`"
        );
    }
    let cctx = Context::new(Some(root.to_path_buf()))?;
    let mut hooks = LivePanes {
        tx,
        policy: req.policy.clone(),
        provider: None,
        job: ctx,
        named: false,
    };
    let outcome = crate::workbench::eval(&cctx, req, ctx, &mut hooks)?;
    ctx.check()?;
    let counted: Vec<_> = outcome
        .episodes
        .iter()
        .filter(|e| e.taken_over.is_none())
        .collect();
    let passed = counted.iter().filter(|e| e.passed).count();
    let taken = outcome.episodes.len() - counted.len();
    let taken = if taken > 0 {
        format!("; {taken} taken over by a human, not counted")
    } else {
        String::new()
    };
    // The job is shown by the run's id: the summary does not repeat it.
    Ok(format!("{passed}/{} episodes passed{taken}", counted.len()))
}

/// Run the fork `req` (a [`RunRequest`] with `fork` set) in the workspace
/// at `root`, its session in a live pane that can be taken over; returns a
/// one-line summary.
pub fn fork(
    ctx: &JobContext,
    root: &Path,
    req: &RunRequest,
    tx: &Sender<Msg>,
) -> anyhow::Result<String> {
    let cctx = Context::new(Some(root.to_path_buf()))?;
    let mut hooks = LivePanes {
        tx,
        policy: req.policy.clone(),
        provider: None,
        job: ctx,
        named: false,
    };
    let episode = crate::workbench::run_episode(&cctx, req, ctx, &mut hooks)?;
    ctx.check()?;
    let of = episode
        .forked_from
        .as_ref()
        .map(|f| format!("{}/{}/{} at step {}", f.run, f.task, f.sample, f.at_step))
        .unwrap_or_default();
    Ok(format!(
        "fork of {of} {} with {}",
        if episode.passed { "passed" } else { "failed" },
        episode.policy
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_human_policy_is_refused_before_anything_runs() {
        let (job, _rx) = crate::jobs::JobContext::standalone("eval");
        let (tx, _rx) = std::sync::mpsc::channel();
        let req = crate::workbench::EvalRequest {
            policy: "human".into(),
            tasks: None,
            samples: 1,
            max_turns: None,
            concurrency: 1,
            protocol: None,
            offline: false,
        };
        let err = super::run(&job, std::path::Path::new("/nonexistent"), &req, &tx)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("terminal of its own"), "{err}");
    }
}
