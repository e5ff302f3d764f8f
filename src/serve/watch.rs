//! A session's live stream for watchers (`GET /v1/sessions/{id}/stream`,
//! e.g. the TUI's Live on another machine): the session's terminal output
//! as its audience shows it (markers taken out, command lines echoed), its
//! turns, and its end, as JSON values fanned out to every watcher.
//!
//! The episode reports to the session's [`Watch`] through its recording's
//! event channel (see [`crate::agent::Recording::events`]); a task per
//! session forwards those events and the sandbox's live output. Output is
//! only decoded while someone watches. A watcher that falls behind by more
//! than [`CAPACITY`] values is told how many it missed.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use super::utf8_pieces::Utf8Pieces;
use crate::agent::{EpisodeResult, LiveStream, RolloutEvent};

/// Values a watcher may fall behind by before it misses some.
pub const CAPACITY: usize = 256;

/// The fan-out of one session's stream.
pub struct Watch {
    tx: broadcast::Sender<Value>,
    /// The last value, once the session ended (later watchers get it
    /// alone).
    ended: Mutex<Option<Value>>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            tx: broadcast::channel(CAPACITY).0,
            ended: Mutex::new(None),
        }
    }
}

impl Watch {
    /// A new watcher: what comes from now on, or the end value if the
    /// session has ended (then nothing comes).
    pub fn subscribe(&self) -> (broadcast::Receiver<Value>, Option<Value>) {
        let ended = self.ended.lock();
        (self.tx.subscribe(), ended.clone())
    }

    /// Whether anyone watches.
    fn watched(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    fn send(&self, value: Value) {
        let _ = self.tx.send(value);
    }

    /// The session ended: `value` is its last (sent once).
    fn end(&self, value: Value) {
        let mut ended = self.ended.lock();
        if ended.is_none() {
            *ended = Some(value.clone());
            let _ = self.tx.send(value);
        }
    }

    /// The sender to put in the episode's recording, forwarding what the
    /// episode reports to the watchers (on the current tokio runtime;
    /// `None` outside one: the session is then not watchable).
    pub fn feed(self: &Arc<Self>) -> Option<UnboundedSender<RolloutEvent>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(forward(self.clone(), rx));
        Some(tx)
    }
}

/// Next chunk of `live`, or never when there is none.
async fn next_chunk(live: &mut Option<LiveStream>) -> Result<Arc<[u8]>, RecvError> {
    match live {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Forward `events` (and the live output they hand over) to `watch`
/// until the episode ends.
async fn forward(watch: Arc<Watch>, mut events: UnboundedReceiver<RolloutEvent>) {
    let mut live: Option<LiveStream> = None;
    let mut text = Utf8Pieces::default();
    loop {
        // Output first: what a command printed comes before its turn.
        tokio::select! {
            biased;
            chunk = next_chunk(&mut live) => match chunk {
                Ok(bytes) if watch.watched() => {
                    let piece = text.push(&bytes);
                    if !piece.is_empty() {
                        watch.send(json!({ "type": "output", "data": piece }));
                    }
                }
                Ok(_) => text = Utf8Pieces::default(),
                Err(RecvError::Lagged(n)) => {
                    watch.send(json!({ "type": "lagged", "chunks": n }));
                }
                Err(RecvError::Closed) => live = None,
            },
            event = events.recv() => match event {
                Some(RolloutEvent::Started { task, sample, stream }) => {
                    live = stream;
                    watch.send(json!({ "type": "started", "task_id": task, "sample": sample }));
                }
                Some(RolloutEvent::Step { step, .. }) => watch.send(json!({
                    "type": "turn",
                    "turn": step.turn,
                    "kind": step.kind,
                    "command": step.command,
                    "exit_code": step.exit_code,
                    "timed_out": step.timed_out,
                    "error": step.error,
                    "exec_secs": step.exec_secs,
                })),
                Some(RolloutEvent::Finished { result }) => {
                    // What the terminal still had.
                    while let Some(rx) = live.as_mut() {
                        match rx.try_recv() {
                            Ok(bytes) if watch.watched() => {
                                let piece = text.push(&bytes);
                                if !piece.is_empty() {
                                    watch.send(json!({ "type": "output", "data": piece }));
                                }
                            }
                            Ok(_) => {}
                            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                            Err(_) => live = None,
                        }
                    }
                    watch.end(end_of(&result));
                    return;
                }
                Some(RolloutEvent::Planned { .. }) => {}
                None => {
                    watch.end(json!({
                        "type": "end",
                        "error": "the episode ended without a result (see the server's log)",
                    }));
                    return;
                }
            },
        }
    }
}

/// The last value of a session whose episode ended as `result`.
fn end_of(result: &EpisodeResult) -> Value {
    json!({
        "type": "end",
        "turns": result.turns,
        "end_reason": result.end_reason,
        "passed": result.passed,
        "failure_mode": result.failure_mode.map(|m| m.as_str()),
        "error": result.error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{EpisodeId, Step, StepKind};

    fn result() -> EpisodeResult {
        let id = EpisodeId {
            task: "t".into(),
            category: String::new(),
            complexity: None,
            sample: 0,
            policy: "http".into(),
        };
        EpisodeResult::failed_to_start(id, "x".into(), Default::default())
    }

    #[tokio::test]
    async fn watchers_get_output_turns_and_the_end_and_late_ones_the_end_alone() {
        let watch = Arc::new(Watch::default());
        let tx = watch.feed().unwrap();
        let (mut rx, ended) = watch.subscribe();
        assert!(ended.is_none());
        let (live_tx, live_rx) = broadcast::channel::<Arc<[u8]>>(8);
        tx.send(RolloutEvent::Started {
            task: "t".into(),
            sample: 3,
            stream: Some(live_rx),
        })
        .unwrap();
        assert_eq!(rx.recv().await.unwrap()["type"], "started");
        // A character cut between two chunks arrives whole.
        live_tx.send(Arc::from(&b"$ ls\n\xc3"[..])).unwrap();
        live_tx.send(Arc::from(&b"\xa9\n"[..])).unwrap();
        let mut out = String::new();
        while out.len() < "$ ls\né\n".len() {
            let v = rx.recv().await.unwrap();
            assert_eq!(v["type"], "output", "{v}");
            out.push_str(v["data"].as_str().unwrap());
        }
        assert_eq!(out, "$ ls\né\n");
        let mut step = Step::new(1, StepKind::Command);
        step.command = Some("ls".into());
        step.exit_code = Some(0);
        tx.send(RolloutEvent::Step {
            task: "t".into(),
            sample: 3,
            step: Box::new(step),
        })
        .unwrap();
        let turn = rx.recv().await.unwrap();
        assert_eq!(
            (turn["type"].as_str(), turn["turn"].as_u64()),
            (Some("turn"), Some(1))
        );
        assert_eq!(turn["command"], "ls");
        tx.send(RolloutEvent::Finished {
            result: Box::new(result()),
        })
        .unwrap();
        let end = rx.recv().await.unwrap();
        assert_eq!(end["type"], "end");
        assert_eq!(end["passed"], false);
        let (_, ended) = watch.subscribe();
        assert_eq!(ended, Some(end));
    }

    #[tokio::test]
    async fn an_episode_gone_without_a_result_ends_its_stream() {
        let watch = Arc::new(Watch::default());
        let tx = watch.feed().unwrap();
        let (mut rx, _) = watch.subscribe();
        drop(tx);
        let end = rx.recv().await.unwrap();
        assert_eq!(end["type"], "end");
        assert!(end["error"].as_str().unwrap().contains("without a result"));
    }

    #[test]
    fn outside_a_runtime_a_session_is_not_watchable() {
        assert!(Arc::new(Watch::default()).feed().is_none());
    }
}
