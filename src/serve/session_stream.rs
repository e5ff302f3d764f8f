//! `GET /v1/sessions/{id}/stream`: one of the caller's sessions live, as
//! NDJSON (see [`super::watch`] for what it carries). NDJSON rather than
//! server-sent events: it is what the exec route already streams, any HTTP
//! client reads it line by line (`curl -N`, `httpx.iter_lines`, `reqwest`),
//! and a watcher that reconnects starts again from the present (there is
//! no replay for SSE's `Last-Event-ID` to resume from).
//!
//! Lines, each a JSON object with a `type`: `session` (first: the session's
//! id, task, run, turns so far), `started`, `output` (`data`: terminal text
//! as its audience sees it), `turn` (a finished turn: `turn`, `kind`,
//! `command`, `exit_code`, `timed_out`, `error`), `lagged` (what was
//! missed: `chunks` of output the server fell behind on, or `values` of
//! this stream the watcher read too slowly for), `ping` (every 15 s of
//! silence), and `end`
//! (last: `end_reason`, `passed`, `turns`, ...), after which the answer
//! ends. A session that already ended answers `session`, then `end`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::app::App;
use super::error::ApiError;
use super::ndjson::Lines;

/// Silence after which a watcher gets a `ping` line (proxies and client
/// read timeouts see the stream alive while an agent thinks).
const PING_EVERY: Duration = Duration::from_secs(15);

/// `GET /v1/sessions/{id}/stream`.
pub async fn stream(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let client = app.auth.check(&headers)?;
    let slot = app.registry.get(&id, &client)?;
    let (mut rx, ended) = slot.watch.subscribe();
    let (lines, response) = Lines::channel();
    let hello = json!({
        "type": "session",
        "session_id": slot.id,
        "task_id": slot.task.id(),
        "run_id": slot.run_id,
        "turns": slot.turns.load(std::sync::atomic::Ordering::Relaxed),
        "max_turns": slot.max_turns.get(),
    });
    drop(slot);
    tokio::spawn(async move {
        if !lines.send(&hello).await {
            return;
        }
        if let Some(end) = ended {
            lines.send(&end).await;
            return;
        }
        loop {
            let value = tokio::select! {
                got = rx.recv() => match got {
                    Ok(v) => v,
                    Err(RecvError::Lagged(n)) => json!({ "type": "lagged", "values": n }),
                    Err(RecvError::Closed) => return,
                },
                _ = tokio::time::sleep(PING_EVERY) => json!({ "type": "ping" }),
                _ = lines.closed() => return,
            };
            if !lines.send(&value).await || value["type"] == "end" {
                return;
            }
        }
    });
    Ok(response)
}
