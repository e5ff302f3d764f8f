//! The session registry: ids, quotas, ownership, which sessions are idle,
//! and the creates waiting for a free place (see [`super::queue`]). Each
//! session holds one episode in its own sandbox.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::auth::Client;
use super::error::ApiError;
use super::idempotency;
pub use super::slot::{NewSession, Slot, State};
use super::waiters::{QueueLimits, Waiter, Waiters};

/// The sessions and the waiting creates, under one lock (a place freed
/// goes to the first waiter that can take it, before any other create).
#[derive(Default)]
struct Inner {
    slots: HashMap<String, Arc<Slot>>,
    waiters: Waiters,
}

/// All sessions of a server.
pub struct Registry {
    inner: Mutex<Inner>,
    /// Open sessions allowed at once, in all.
    pub max_sessions: usize,
    /// Open sessions allowed at once per client.
    pub per_client: usize,
    /// How many creates may wait, and for how long.
    pub queue: QueueLimits,
    /// Next free sample number per (run, task).
    samples: Mutex<HashMap<(String, String), u32>>,
}

/// How [`Registry::admit`] answered a create.
pub enum Admission {
    /// A new session, reserved in the `Starting` state.
    Reserved(Arc<Slot>),
    /// The session an earlier create with the same key made.
    Existing(Arc<Slot>),
    /// Waiting in line as `ticket`: the session comes through `rx`.
    Queued {
        /// The waiter's ticket, for [`Registry::leave`].
        ticket: u64,
        /// Where its reserved session arrives (closed: refused).
        rx: oneshot::Receiver<Arc<Slot>>,
    },
}

impl Registry {
    /// An empty registry with these limits (and the default queue).
    pub fn new(max_sessions: usize, per_client: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_sessions: max_sessions.max(1),
            per_client: per_client.max(1),
            queue: QueueLimits::default(),
            samples: Mutex::new(HashMap::new()),
        }
    }

    /// The same registry with these queue limits.
    pub fn with_queue(mut self, queue: QueueLimits) -> Self {
        self.queue = queue;
        self
    }

    /// Sessions whose episode has not ended.
    pub fn open_count(&self) -> usize {
        self.inner
            .lock()
            .slots
            .values()
            .filter(|s| s.is_open())
            .count()
    }

    /// Creates waiting for a place.
    pub fn waiting(&self) -> usize {
        self.inner.lock().waiters.len()
    }

    /// Admit a create: the session an earlier create with its key made, a
    /// new session when there is a place for it, else (with `wait`) a place
    /// in the queue. Refused (429) when full and not waiting or the queue
    /// is full, 503 once the queue is closed.
    pub fn admit(&self, new: NewSession, wait: bool) -> Result<Admission, ApiError> {
        let mut inner = self.inner.lock();
        if inner.waiters.closed {
            return Err(ApiError::Draining);
        }
        if let Some((key, fingerprint)) = &new.key {
            let earlier = inner.slots.values().find(|s| {
                s.owner == new.owner && s.create_key.as_ref().is_some_and(|(k, _)| k == key)
            });
            if let Some(slot) = earlier {
                if slot
                    .create_key
                    .as_ref()
                    .is_some_and(|(_, f)| f != fingerprint)
                {
                    return Err(idempotency::reused_for_create(key));
                }
                return Ok(Admission::Existing(slot.clone()));
            }
        }
        let full = match self.room_for(&inner, &new.owner) {
            Ok(()) => return Ok(Admission::Reserved(insert(&mut inner, new))),
            Err(full) => full,
        };
        if !wait {
            return Err(full);
        }
        let (tx, rx) = oneshot::channel();
        let ticket = inner.waiters.enqueue(new, tx, self.queue.max_waiting)?;
        Ok(Admission::Queued { ticket, rx })
    }

    /// Take waiter `ticket` out of the queue (gone, timed out); nothing if
    /// it was served or refused already.
    pub fn leave(&self, ticket: u64) {
        self.inner.lock().waiters.remove(ticket);
    }

    /// Whether the queue refuses creates (the server drains).
    pub fn queue_closed(&self) -> bool {
        self.inner.lock().waiters.closed
    }

    /// Refuse every waiting create and all later ones (the server drains).
    pub fn close_queue(&self) {
        let mut inner = self.inner.lock();
        inner.waiters.closed = true;
        // Dropping their senders wakes them: they answer 503.
        inner.waiters.clear();
    }

    /// `Ok` when `owner` may open one more session now, else the 429 that
    /// says which limit is reached.
    fn room_for(&self, inner: &Inner, owner: &Client) -> Result<(), ApiError> {
        let open: Vec<&Arc<Slot>> = inner.slots.values().filter(|s| s.is_open()).collect();
        if open.len() >= self.max_sessions {
            return Err(ApiError::TooManySessions(format!(
                "the server runs its maximum of {} sessions; finish or delete one, or wait in the queue (POST /v1/sessions?wait=SECONDS)",
                self.max_sessions
            )));
        }
        if open.iter().filter(|s| &s.owner == owner).count() >= self.per_client {
            return Err(ApiError::TooManySessions(format!(
                "this token already has its quota of {} open sessions",
                self.per_client
            )));
        }
        Ok(())
    }

    /// Give freed places to the waiters, first come first served (a waiter
    /// whose own token is at its quota lets those behind it pass).
    fn dispatch(&self, inner: &mut Inner) {
        if inner.waiters.is_empty() {
            return;
        }
        let mut i = 0;
        while i < inner.waiters.len() {
            if inner.slots.values().filter(|s| s.is_open()).count() >= self.max_sessions {
                return;
            }
            let owner = inner.waiters.get(i).new.owner.clone();
            if self.room_for(inner, &owner).is_err() {
                i += 1;
                continue;
            }
            let Waiter { new, tx, .. } = inner.waiters.take(i);
            let slot = insert(inner, new);
            if let Err(slot) = tx.send(slot) {
                // The waiter is gone: the place is free again.
                inner.slots.remove(&slot.id);
            }
        }
    }

    /// The session `id` of `client` (another client's session is not found).
    pub fn get(&self, id: &str, client: &Client) -> Result<Arc<Slot>, ApiError> {
        validate_id(id)?;
        self.inner
            .lock()
            .slots
            .get(id)
            .filter(|s| &s.owner == client)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("no session {id}")))
    }

    /// Whether session `id` is still registered.
    pub fn contains(&self, id: &str) -> bool {
        self.inner.lock().slots.contains_key(id)
    }

    /// The sessions of `client`, oldest first.
    pub fn of(&self, client: &Client) -> Vec<Arc<Slot>> {
        let mut mine: Vec<Arc<Slot>> = self
            .inner
            .lock()
            .slots
            .values()
            .filter(|s| &s.owner == client)
            .cloned()
            .collect();
        mine.sort_by_key(|s| s.opened);
        mine
    }

    /// Forget session `id` (its place goes to the next waiter).
    pub fn remove(&self, id: &str) -> Option<Arc<Slot>> {
        let mut inner = self.inner.lock();
        let slot = inner.slots.remove(id);
        self.dispatch(&mut inner);
        slot
    }

    /// Session `slot`'s episode is over: it no longer counts against the
    /// limits (its place goes to the next waiter).
    pub fn finish(&self, slot: &Slot) {
        let mut inner = self.inner.lock();
        slot.mark_finished();
        self.dispatch(&mut inner);
    }

    /// Remove and return the sessions idle for longer than `idle` that no
    /// request is using.
    pub fn take_idle(&self, idle: Duration) -> Vec<Arc<Slot>> {
        let mut inner = self.inner.lock();
        let ids: Vec<String> = inner
            .slots
            .values()
            // A session still starting is not idle (its start may outlast
            // the timeout); neither is one a request holds.
            .filter(|s| {
                s.idle_for() > idle
                    && s.state
                        .try_lock()
                        .is_some_and(|state| !matches!(*state, State::Starting))
            })
            .map(|s| s.id.clone())
            .collect();
        let taken = ids.iter().filter_map(|id| inner.slots.remove(id)).collect();
        self.dispatch(&mut inner);
        taken
    }

    /// Remove and return every session.
    pub fn take_all(&self) -> Vec<Arc<Slot>> {
        self.inner.lock().slots.drain().map(|(_, s)| s).collect()
    }

    /// The next unused sample number of `task` in run `run_id`, whose
    /// directory is `run_dir` (existing episodes there are skipped).
    pub fn next_sample(&self, run_dir: &Path, run_id: &str, task: &str) -> u32 {
        let mut samples = self.samples.lock();
        let next = samples
            .entry((run_id.to_string(), task.to_string()))
            .or_insert_with(|| first_free_sample(&run_dir.join("episodes").join(task)));
        let n = *next;
        *next += 1;
        n
    }
}

/// Register a new session for `new` in the `Starting` state.
fn insert(inner: &mut Inner, new: NewSession) -> Arc<Slot> {
    let slot = Arc::new(Slot::new(new));
    inner.slots.insert(slot.id.clone(), slot.clone());
    slot
}

/// One more than the largest `<n>.*` file in `dir` (0 when none).
fn first_free_sample(dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            name.split('.').next()?.parse::<u32>().ok()
        })
        .map(|n| n.saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// Session ids are lowercase hex in the 8-4-4-4-12 shape, nothing else.
pub fn validate_id(id: &str) -> Result<(), ApiError> {
    let groups: Vec<&str> = id.split('-').collect();
    let shape_ok = groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| {
            g.len() == n && g.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        });
    if shape_ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(
            "invalid session id (expected a UUID)".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::EpisodeResult;
    use crate::serve::idempotency::Key;
    use crate::serve::slot::new_id;

    #[test]
    fn ids_are_uuid_shaped_and_validated() {
        let id = new_id();
        assert!(validate_id(&id).is_ok(), "{id}");
        for bad in [
            "",
            "..",
            "../../etc/passwd",
            "abc",
            "ABCDEF01-2345-4678-9abc-def012345678",
            "0123456701234567012345670123456701",
        ] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_session_still_starting_is_never_taken_as_idle() {
        let r = Registry::new(4, 4);
        let task = crate::task::Task {
            meta: crate::task::TaskMeta::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: crate::task::FileTree::default(),
            tests: crate::task::FileTree::default(),
            solution: crate::task::FileTree::default(),
        };
        let new = || NewSession {
            owner: crate::serve::auth::Client("c".into()),
            task: Arc::new(task.clone()),
            run_id: "run".into(),
            key: None,
        };
        let (starting, done) = (reserve(&r, new()), reserve(&r, new()));
        let id = crate::agent::EpisodeId {
            task: "t".into(),
            category: String::new(),
            complexity: None,
            sample: 0,
            policy: "http".into(),
        };
        let result = EpisodeResult::failed_to_start(id, "x".into(), Default::default());
        *done.state.lock() = State::Finished(Box::new(result));
        std::thread::sleep(Duration::from_millis(20));
        let taken: Vec<String> = r
            .take_idle(Duration::from_millis(10))
            .iter()
            .map(|s| s.id.clone())
            .collect();
        assert_eq!(taken, std::slice::from_ref(&done.id));
        assert!(r.get(&starting.id, &starting.owner).is_ok());
    }

    fn reserve(r: &Registry, new: NewSession) -> Arc<Slot> {
        match r.admit(new, false) {
            Ok(Admission::Reserved(slot)) => slot,
            _ => panic!("no place"),
        }
    }

    fn task() -> Arc<crate::task::Task> {
        Arc::new(crate::task::Task {
            meta: crate::task::TaskMeta::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: crate::task::FileTree::default(),
            tests: crate::task::FileTree::default(),
            solution: crate::task::FileTree::default(),
        })
    }

    fn of(client: &str) -> NewSession {
        NewSession {
            owner: Client(client.into()),
            task: task(),
            run_id: "run".into(),
            key: None,
        }
    }

    fn queued(r: &Registry, new: NewSession) -> oneshot::Receiver<Arc<Slot>> {
        match r.admit(new, true) {
            Ok(Admission::Queued { rx, .. }) => rx,
            _ => panic!("not queued"),
        }
    }

    #[test]
    fn freed_places_go_to_waiters_in_order_past_those_at_their_quota() {
        // Two places in all, one per client.
        let r = Registry::new(2, 1);
        let a = reserve(&r, of("a"));
        let b = reserve(&r, of("b"));
        assert!(matches!(
            r.admit(of("c"), false),
            Err(ApiError::TooManySessions(_))
        ));
        let mut a2 = queued(&r, of("a"));
        let mut c = queued(&r, of("c"));
        let mut d = queued(&r, of("d"));
        assert_eq!(r.waiting(), 3);
        // a's place frees: a2 (first in line) takes it.
        r.finish(&a);
        let a2 = a2.try_recv().unwrap();
        assert!(c.try_recv().is_err() && d.try_recv().is_err());
        // Then c, the next in line.
        r.remove(&a2.id);
        assert!(c.try_recv().is_ok());
        assert_eq!(r.waiting(), 1);
        // A waiter gone before its turn gives the place to the next one.
        let mut e = queued(&r, of("e"));
        drop(d);
        r.remove(&b.id);
        assert!(
            e.try_recv().is_ok(),
            "the place skipped the vanished waiter"
        );
        assert_eq!((r.open_count(), r.waiting()), (2, 0));
    }

    #[test]
    fn a_retry_takes_its_waiting_twins_place_and_a_closed_queue_refuses() {
        let r = Registry::new(1, 1);
        let first = reserve(&r, of("a"));
        let key = |k: &str| {
            Some((
                Key::from_headers(&{
                    let mut h = axum::http::HeaderMap::new();
                    h.insert("idempotency-key", k.parse().unwrap());
                    h
                })
                .unwrap()
                .unwrap(),
                1,
            ))
        };
        let mut x = queued(
            &r,
            NewSession {
                key: key("x"),
                ..of("b")
            },
        );
        let mut y = queued(&r, of("c"));
        let mut x2 = queued(
            &r,
            NewSession {
                key: key("x"),
                ..of("b")
            },
        );
        assert_eq!(r.waiting(), 2, "the retry replaced its twin");
        assert!(matches!(
            x.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        r.remove(&first.id);
        assert!(x2.try_recv().is_ok(), "the retry kept the first place");
        r.close_queue();
        assert!(matches!(
            y.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        assert!(matches!(r.admit(of("d"), true), Err(ApiError::Draining)));
    }

    #[test]
    fn samples_continue_after_those_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let ep = dir.path().join("episodes/t");
        std::fs::create_dir_all(&ep).unwrap();
        std::fs::write(ep.join("4.json"), "{}").unwrap();
        let r = Registry::new(1, 1);
        assert_eq!(r.next_sample(dir.path(), "run", "t"), 5);
        assert_eq!(r.next_sample(dir.path(), "run", "t"), 6);
        assert_eq!(r.next_sample(dir.path(), "run", "u"), 0);
    }
}
