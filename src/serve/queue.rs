//! The wait queue of session creates. Over `--max-sessions` (or a token's
//! quota) a create that asks to wait (`POST /v1/sessions?wait=SECONDS`, or
//! `Prefer: wait=SECONDS`) gets in line instead of a 429: a place freed by
//! an episode that ends goes to the first waiter that can take it (first
//! come, first served; one whose own token is at its quota lets those
//! behind it pass). The queue and the wait are capped (`--max-queue`,
//! `--max-wait`). A waiter whose client goes away leaves the line, and a
//! place granted to it in the meantime is given back; a drain refuses
//! every waiter with 503.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use tokio::sync::oneshot;

use super::error::ApiError;
use super::sessions::{Admission, NewSession, Registry, Slot};
pub use super::waiters::QueueLimits;

/// How long a create asks to wait: `?wait=SECONDS` or `Prefer: wait=SECONDS`
/// (RFC 7240; the query wins), cut to `max`. A bad value is a 400.
pub fn asked_wait(
    query: Option<f64>,
    headers: &HeaderMap,
    max: Duration,
) -> Result<Duration, ApiError> {
    let secs = match query {
        Some(s) => Some(s),
        None => prefer_wait(headers)?,
    };
    let Some(secs) = secs else {
        return Ok(Duration::ZERO);
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(ApiError::BadRequest(format!(
            "wait: a number of seconds >= 0, not {secs}"
        )));
    }
    Ok(Duration::from_secs_f64(secs.min(max.as_secs_f64())))
}

/// The `wait` preference of `Prefer` headers, if any.
pub fn prefer_wait(headers: &HeaderMap) -> Result<Option<f64>, ApiError> {
    for value in headers.get_all(axum::http::header::HeaderName::from_static("prefer")) {
        let text = value.to_str().unwrap_or_default();
        for pref in text.split([',', ';']) {
            let Some((name, v)) = pref.split_once('=') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("wait") {
                let v = v.trim().trim_matches('"');
                return v.parse::<f64>().map(Some).map_err(|_| {
                    ApiError::BadRequest(format!("Prefer: wait={v:?} is not a number of seconds"))
                });
            }
        }
    }
    Ok(None)
}

/// How a create got its session.
pub enum Acquired {
    /// A new session, reserved (now or after waiting).
    New(Arc<Slot>),
    /// The session an earlier create with the same `Idempotency-Key` made.
    Existing(Arc<Slot>),
}

/// A place in line: leaving it (also by being dropped, when the client goes
/// away) takes the ticket out, and gives back a place granted meanwhile.
struct Ticket<'a> {
    registry: &'a Registry,
    ticket: u64,
    rx: oneshot::Receiver<Arc<Slot>>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // Once out of line no place can be granted to it any more; one
        // granted before is in the channel.
        self.registry.leave(self.ticket);
        if let Ok(slot) = self.rx.try_recv() {
            self.registry.remove(&slot.id);
        }
    }
}

/// A session for `new`: at once if there is a place, else after waiting in
/// line up to `wait` (zero: no wait). 429 when it cannot get one in time
/// (or the queue is full), 503 when the server drains meanwhile, 409 when
/// a retry with the same key took its place in line.
pub async fn acquire(
    registry: &Registry,
    new: NewSession,
    wait: Duration,
) -> Result<Acquired, ApiError> {
    let (ticket, rx) = match registry.admit(new, !wait.is_zero())? {
        Admission::Reserved(slot) => return Ok(Acquired::New(slot)),
        Admission::Existing(slot) => return Ok(Acquired::Existing(slot)),
        Admission::Queued { ticket, rx } => (ticket, rx),
    };
    let mut ticket = Ticket {
        registry,
        ticket,
        rx,
    };
    match tokio::time::timeout(wait, &mut ticket.rx).await {
        Ok(Ok(slot)) => Ok(Acquired::New(slot)),
        Ok(Err(_)) if registry.queue_closed() => Err(ApiError::Draining),
        Ok(Err(_)) => Err(ApiError::Conflict(
            "a retry of this create (same Idempotency-Key) took its place in the queue".into(),
        )),
        Err(_) => Err(ApiError::TooManySessions(format!(
            "no session place became free within {:.0} s of waiting; retry later",
            wait.as_secs_f64()
        ))),
    }
}

/// The answer the first create with a key got (for a retry with that
/// key): once its sandbox runs; a 409 when its start failed.
pub async fn first_answer(registry: &Registry, slot: &Slot) -> Result<Bytes, ApiError> {
    loop {
        if let Some(body) = slot.opened_reply.get() {
            return Ok(body.clone());
        }
        if !registry.contains(&slot.id) {
            return Err(ApiError::Conflict(
                "the first create with this Idempotency-Key failed; retry with a new key".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefer(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("prefer", v.parse().unwrap());
        h
    }

    #[test]
    fn waits_come_from_the_query_or_prefer_and_are_capped() {
        let max = Duration::from_secs(60);
        let none = HeaderMap::new();
        assert_eq!(asked_wait(None, &none, max).unwrap(), Duration::ZERO);
        assert_eq!(
            asked_wait(Some(2.5), &none, max).unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(asked_wait(Some(1e9), &none, max).unwrap(), max);
        assert_eq!(
            asked_wait(None, &prefer("respond-async, wait=7"), max).unwrap(),
            Duration::from_secs(7)
        );
        assert_eq!(
            asked_wait(Some(1.0), &prefer("wait=7"), max).unwrap(),
            Duration::from_secs(1)
        );
        for bad in [Some(-1.0), Some(f64::NAN)] {
            assert_eq!(asked_wait(bad, &none, max).unwrap_err().status(), 400);
        }
        let e = asked_wait(None, &prefer("wait=soon"), max).unwrap_err();
        assert!(e.to_string().contains("Prefer"), "{e}");
    }
}
