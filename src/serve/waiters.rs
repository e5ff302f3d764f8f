//! The line of creates waiting for a session place (see [`super::queue`]):
//! first come, first served; a retry with the same `Idempotency-Key` takes
//! its twin's place.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::error::ApiError;
use super::idempotency::reused_for_create;
use super::slot::{NewSession, Slot};

/// How many creates may wait, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct QueueLimits {
    /// Creates waiting at once; more are refused (429).
    pub max_waiting: usize,
    /// The longest wait a create may ask for (longer asks are cut to it).
    pub max_wait: Duration,
}

impl Default for QueueLimits {
    fn default() -> Self {
        Self {
            max_waiting: 1024,
            max_wait: Duration::from_secs(600),
        }
    }
}

/// One create in line.
pub struct Waiter {
    /// Its ticket (a retry with the same key takes a new one in its place).
    pub ticket: u64,
    /// The session it asks for.
    pub new: NewSession,
    /// Where its reserved session goes.
    pub tx: oneshot::Sender<Arc<Slot>>,
}

/// The creates in line, oldest first.
#[derive(Default)]
pub struct Waiters {
    list: VecDeque<Waiter>,
    next_ticket: u64,
    /// Set when the server drains: no create waits any more.
    pub closed: bool,
}

impl Waiters {
    /// Creates in line.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The `i`th waiter from the front.
    pub fn get(&self, i: usize) -> &Waiter {
        &self.list[i]
    }

    /// Take the `i`th waiter out of line.
    pub fn take(&mut self, i: usize) -> Waiter {
        self.list.remove(i).expect("a waiter at an index below len")
    }

    /// Take waiter `ticket` out of line, if it is still there.
    pub fn remove(&mut self, ticket: u64) {
        self.list.retain(|w| w.ticket != ticket);
    }

    /// Drop every waiter (each sees its channel closed).
    pub fn clear(&mut self) {
        self.list.clear();
    }

    /// Put `new` in line (at the back, or in the place of a waiter of the
    /// same client with the same key: a retry keeps its turn, and the
    /// request it replaces is answered 409); its ticket. 429 when `max`
    /// already wait.
    pub fn enqueue(
        &mut self,
        new: NewSession,
        tx: oneshot::Sender<Arc<Slot>>,
        max: usize,
    ) -> Result<u64, ApiError> {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        if let Some((key, fingerprint)) = &new.key {
            let same = self.list.iter_mut().find(|w| {
                w.new.owner == new.owner && w.new.key.as_ref().is_some_and(|(k, _)| k == key)
            });
            if let Some(w) = same {
                if w.new.key.as_ref().is_some_and(|(_, f)| f != fingerprint) {
                    return Err(reused_for_create(key));
                }
                *w = Waiter { ticket, new, tx };
                return Ok(ticket);
            }
        }
        if self.list.len() >= max {
            return Err(ApiError::TooManySessions(format!(
                "the server runs all the sessions it may and {} creates already wait; retry later",
                self.list.len()
            )));
        }
        self.list.push_back(Waiter { ticket, new, tx });
        Ok(ticket)
    }
}
