//! The sandbox registry of `/v1/sandboxes`: bare sandboxes a client drives
//! command by command (a Harbor environment, see `python/endless_env/
//! harbor.py`), with the same ownership, quotas, wait queue, idle reaping
//! and journal as sessions. Unlike a session, a sandbox runs no episode and
//! records nothing in the workspace: what happens inside is the client's.
//!
//! Over `--max-sessions` a create waits in line (first come, first served,
//! `?wait=SECONDS`, at most `--max-wait`, at most `--max-queue` waiting)
//! for a deleted or reaped sandbox's place. A sandbox is idle when no
//! request of its client is in flight: a command whose client went away
//! no longer counts (it is killed), so the idle timer reaps the sandbox.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::auth::Client;
use super::error::ApiError;
use super::sandbox_journal::{SandboxEntry, SandboxJournal};
use super::sandbox_ops::Identity;
use super::sessions::validate_id;
use super::waiters::QueueLimits;
use crate::sandbox::Session;

/// Where a sandbox is.
pub enum SandboxState {
    /// Its image is being built or its sandbox started.
    Starting,
    /// Ready for commands.
    Ready(Box<Session>),
    /// Deleted or reaped (a request that raced the deletion sees this).
    Closed,
}

/// One sandbox.
pub struct Sandbox {
    /// Its id (uuid-shaped).
    pub id: String,
    /// The client that created it; no other may use it.
    pub owner: Client,
    /// What it was made from (`task:ID`, `image:REF`, `environment:HASH`).
    pub source: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Who commands run as, once started.
    pub identity: OnceLock<Identity>,
    /// The sandbox (locked by the one request using it; others wait).
    pub state: Mutex<SandboxState>,
    /// A pidfd of the sandbox's outermost process, once started: a
    /// deletion kills through it without waiting for the request using it.
    killer: OnceLock<OwnedFd>,
    /// Set when it is being deleted: no request starts in it any more.
    closing: AtomicBool,
    created: Instant,
    last_used: Mutex<Instant>,
    /// Requests of its client in flight (none: it may be idle).
    active: AtomicUsize,
    /// Its place among the server's `--max-sessions`, given back when it
    /// leaves the registry.
    place: Mutex<Option<OwnedSemaphorePermit>>,
}

/// A request in flight on a sandbox (see [`Sandbox::busy`]): the sandbox
/// is not idle while one lives, and is used now when it ends.
pub struct Busy(Arc<Sandbox>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A create waiting in line, counted in [`Sandboxes::waiting`] until
/// dropped (also when its client goes away mid-wait).
struct InLine<'a>(&'a AtomicUsize);

impl<'a> InLine<'a> {
    /// Join the line of `boxes`; 429 when `--max-queue` creates wait already.
    fn join(boxes: &'a Sandboxes) -> Result<Self, ApiError> {
        if boxes.waiting.fetch_add(1, Ordering::SeqCst) >= boxes.queue.max_waiting {
            boxes.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::TooManySessions(format!(
                "the server runs its maximum of {} sandboxes and {} creates already wait; \
                 retry later",
                boxes.max, boxes.queue.max_waiting
            )));
        }
        Ok(InLine(&boxes.waiting))
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Mark it used now.
    pub fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().elapsed()
    }

    /// A request of its client begins: the sandbox is not idle until the
    /// returned guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.touch();
        Busy(self.clone())
    }

    /// Whether no request is in flight and none came for longer than `idle`.
    fn is_idle(&self, idle: Duration) -> bool {
        self.active.load(Ordering::SeqCst) == 0 && self.idle_for() > idle
    }

    /// Keep a way to kill `session`'s processes from another request (a
    /// pidfd: never another process that got its pid).
    pub fn arm(&self, session: &Session) {
        let pid = session.pid() as libc::pid_t;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
        // descriptor or -1; the session's child is not reaped while it lives.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if let Ok(fd) = i32::try_from(fd) {
            if fd >= 0 {
                // SAFETY: a descriptor pidfd_open just returned, owned by no one else.
                let _ = self.killer.set(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }

    /// Whether it is being deleted (no request may start in it).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Start deleting it: refuse new requests, and kill every process of
    /// the sandbox now (a command running in it included).
    fn kill(&self) {
        self.closing.store(true, Ordering::SeqCst);
        if let Some(fd) = self.killer.get() {
            // SAFETY: pidfd_send_signal(2) on our own pidfd; no siginfo.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            }
        }
    }

    /// The view `GET /v1/sandboxes/{id}` gives, without waiting for a
    /// request using it (a busy sandbox shows as `ready`).
    pub fn view(&self) -> serde_json::Value {
        let state = match self.state.try_lock().as_deref() {
            Some(SandboxState::Starting) => "starting",
            Some(SandboxState::Closed) => "closed",
            Some(SandboxState::Ready(_)) | None => "ready",
        };
        let who = self.identity.get();
        serde_json::json!({
            "sandbox_id": self.id,
            "source": self.source,
            "state": state,
            "created_at": self.created_at,
            "user": who.map(|w| w.user.clone()),
            "uid": who.map(|w| w.uid),
            "workdir": who.map(|w| w.workdir.clone()),
            "idle_secs": self.idle_for().as_secs_f64(),
        })
    }
}

/// Open sandboxes and their quotas.
pub struct Sandboxes {
    boxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    /// Open sandboxes at once, in all.
    pub max: usize,
    /// The `max` places (a fair semaphore: waiters get them in order).
    places: Arc<Semaphore>,
    /// Creates waiting for a place now.
    waiting: AtomicUsize,
    /// Told whenever a sandbox leaves (creates at their token's quota
    /// wait for it).
    freed: tokio::sync::Notify,
    /// How many creates may wait, and for how long.
    queue: QueueLimits,
    per_client: usize,
    journal: Option<SandboxJournal>,
    /// Sandboxes an earlier server left when it died (found at start).
    pub lost: Vec<SandboxEntry>,
}

impl Sandboxes {
    /// A registry of at most `max` sandboxes (`per_client` per token),
    /// journaled in `journal`, whose leftovers of dead servers are taken
    /// as lost now.
    pub fn new(max: usize, per_client: usize, journal: Option<SandboxJournal>) -> Self {
        let lost = journal
            .as_ref()
            .map(SandboxJournal::recover)
            .unwrap_or_default();
        for l in &lost {
            tracing::warn!(
                sandbox = l.sandbox_id,
                source = l.source,
                pid = l.pid,
                "a sandbox ended with its server (killed or crashed); forgotten"
            );
        }
        Self {
            boxes: Mutex::new(HashMap::new()),
            max,
            places: Arc::new(Semaphore::new(max)),
            waiting: AtomicUsize::new(0),
            freed: tokio::sync::Notify::new(),
            queue: QueueLimits::default(),
            per_client,
            journal,
            lost,
        }
    }

    /// Open sandboxes now.
    pub fn open_count(&self) -> usize {
        self.boxes.lock().len()
    }

    /// Let creates wait in line within `queue` (`--max-queue`, `--max-wait`).
    pub fn with_queue(mut self, queue: QueueLimits) -> Self {
        self.queue = queue;
        self
    }

    /// The longest wait a create may ask for.
    pub fn max_wait(&self) -> Duration {
        self.queue.max_wait
    }

    /// Creates waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Refuse every waiting create and every later one (503): the server
    /// drains.
    pub fn close_queue(&self) {
        self.places.close();
        self.freed.notify_waiters();
    }

    /// Reserve a sandbox for `owner` (state `Starting`) if a place is free
    /// now, within the quotas; 429 otherwise.
    pub fn reserve(&self, owner: Client, source: String) -> Result<Arc<Sandbox>, ApiError> {
        self.check_quota(&owner)?;
        let place = match self.places.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(ApiError::Draining),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                return Err(ApiError::TooManySessions(format!(
                    "the server runs its maximum of {} sandboxes; delete one, or wait for a \
                     place (?wait=SECONDS)",
                    self.max
                )))
            }
        };
        self.insert(owner, source, place)
    }

    /// [`Sandboxes::reserve`], waiting in line up to `wait` for a place
    /// (first come, first served), or for one of the token's own sandboxes
    /// to go when it is at its quota: 429 when none came in time or too
    /// many wait already, 503 when the server drains meanwhile. A create
    /// whose client goes away leaves the line (the future is dropped).
    pub async fn acquire(
        &self,
        owner: Client,
        source: String,
        wait: Duration,
    ) -> Result<Arc<Sandbox>, ApiError> {
        if wait.is_zero() {
            return self.reserve(owner, source);
        }
        let deadline = tokio::time::Instant::now() + wait;
        let _in_line = InLine::join(self)?;
        let late = |what: &str| {
            ApiError::TooManySessions(format!(
                "no {what} became free within {:.0} s of waiting; retry later",
                wait.as_secs_f64()
            ))
        };
        loop {
            // Armed before the quota is read: a sandbox that goes in
            // between wakes it.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.places.is_closed() {
                return Err(ApiError::Draining);
            }
            if self.check_quota(&owner).is_err() {
                if tokio::time::timeout_at(deadline, freed).await.is_err() {
                    return Err(late("place within this token's quota"));
                }
                continue;
            }
            let place = match tokio::time::timeout_at(deadline, self.places.clone().acquire_owned())
                .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(_)) => return Err(ApiError::Draining),
                Err(_) => return Err(late("sandbox place")),
            };
            // Another create of the same token may have got in meanwhile:
            // then the place goes back and the quota is waited for.
            if let Ok(sandbox) = self.insert(owner.clone(), source.clone(), place) {
                return Ok(sandbox);
            }
        }
    }

    /// 429 when `owner` already has its quota of open sandboxes.
    fn check_quota(&self, owner: &Client) -> Result<(), ApiError> {
        self.quota_left(&self.boxes.lock(), owner)
    }

    fn quota_left(
        &self,
        boxes: &HashMap<String, Arc<Sandbox>>,
        owner: &Client,
    ) -> Result<(), ApiError> {
        if boxes.values().filter(|s| &s.owner == owner).count() >= self.per_client {
            return Err(ApiError::TooManySessions(format!(
                "this token already has its quota of {} open sandboxes",
                self.per_client
            )));
        }
        Ok(())
    }

    /// A new sandbox for `owner` in `place`, if the token's quota lets it
    /// (checked again with the place held: another create of the same
    /// token may have got in meanwhile).
    fn insert(
        &self,
        owner: Client,
        source: String,
        place: OwnedSemaphorePermit,
    ) -> Result<Arc<Sandbox>, ApiError> {
        let mut boxes = self.boxes.lock();
        self.quota_left(&boxes, &owner)?;
        let sandbox = Arc::new(Sandbox {
            id: new_id(),
            owner,
            source,
            created_at: crate::store::now(),
            identity: OnceLock::new(),
            state: Mutex::new(SandboxState::Starting),
            killer: OnceLock::new(),
            closing: AtomicBool::new(false),
            created: Instant::now(),
            last_used: Mutex::new(Instant::now()),
            active: AtomicUsize::new(0),
            place: Mutex::new(Some(place)),
        });
        boxes.insert(sandbox.id.clone(), sandbox.clone());
        Ok(sandbox)
    }

    /// Note a started sandbox in the journal.
    pub fn journal(&self, sandbox: &Sandbox) -> Result<(), ApiError> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let entry = SandboxEntry {
            sandbox_id: sandbox.id.clone(),
            source: sandbox.source.clone(),
            owner: sandbox.owner.0.clone(),
            pid: std::process::id(),
            created_at: sandbox.created_at.clone(),
        };
        journal.record(&entry).map_err(|e| {
            ApiError::Internal(format!(
                "cannot journal the sandbox in {}: {e}",
                journal.dir().display()
            ))
        })
    }

    /// The sandbox `id` of `client` (another client's is not found).
    pub fn get(&self, id: &str, client: &Client) -> Result<Arc<Sandbox>, ApiError> {
        validate_id(id)
            .map_err(|_| ApiError::BadRequest("invalid sandbox id (expected a UUID)".into()))?;
        self.boxes
            .lock()
            .get(id)
            .filter(|s| &s.owner == client)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("no sandbox {id}")))
    }

    /// The sandboxes of `client`, oldest first.
    pub fn of(&self, client: &Client) -> Vec<Arc<Sandbox>> {
        let mut mine: Vec<Arc<Sandbox>> = self
            .boxes
            .lock()
            .values()
            .filter(|s| &s.owner == client)
            .cloned()
            .collect();
        mine.sort_by_key(|s| s.created);
        mine
    }

    /// Forget sandbox `id` (its journal entry too) and give its place to
    /// the next waiting create.
    pub fn remove(&self, id: &str) -> Option<Arc<Sandbox>> {
        if let Some(j) = &self.journal {
            j.remove(id);
        }
        let gone = self.boxes.lock().remove(id);
        if let Some(s) = &gone {
            s.place.lock().take();
            self.freed.notify_waiters();
        }
        gone
    }

    /// Remove and return the sandboxes with no request in flight and none
    /// for longer than `idle` (one still starting is never idle; a command
    /// whose client went away is no request), giving their places back.
    pub fn take_idle(&self, idle: Duration) -> Vec<Arc<Sandbox>> {
        let mut boxes = self.boxes.lock();
        let ids: Vec<String> = boxes
            .values()
            .filter(|s| {
                s.is_idle(idle)
                    && !s
                        .state
                        .try_lock()
                        .is_some_and(|st| matches!(*st, SandboxState::Starting))
            })
            .map(|s| s.id.clone())
            .collect();
        let taken: Vec<Arc<Sandbox>> = ids.iter().filter_map(|id| boxes.remove(id)).collect();
        drop(boxes);
        for s in &taken {
            if let Some(j) = &self.journal {
                j.remove(&s.id);
            }
            s.place.lock().take();
        }
        if !taken.is_empty() {
            self.freed.notify_waiters();
        }
        taken
    }

    /// Remove and return every sandbox.
    pub fn take_all(&self) -> Vec<Arc<Sandbox>> {
        let all: Vec<Arc<Sandbox>> = self.boxes.lock().drain().map(|(_, s)| s).collect();
        for s in &all {
            if let Some(j) = &self.journal {
                j.remove(&s.id);
            }
            s.place.lock().take();
        }
        self.freed.notify_waiters();
        all
    }
}

/// A fresh random id shaped like a UUID (v4), as session ids are.
fn new_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// End `sandbox`'s processes: killed at once, then the sandbox torn down
/// once a request using it has seen them die. Returns whether it was
/// still starting (its create then ends it, and gives up its place).
/// Blocking.
pub fn shut(sandbox: &Sandbox) -> bool {
    sandbox.kill();
    let old = std::mem::replace(&mut *sandbox.state.lock(), SandboxState::Closed);
    let starting = matches!(old, SandboxState::Starting);
    if let SandboxState::Ready(session) = old {
        session.close();
    }
    starting
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_ownership_and_idleness() {
        let dir = tempfile::tempdir().unwrap();
        let j = SandboxJournal::in_dir(dir.path().join("sandboxes"));
        let r = Sandboxes::new(3, 2, Some(j.clone()));
        let (a, b) = (Client("a".into()), Client("b".into()));
        let a1 = r.reserve(a.clone(), "image:x".into()).unwrap();
        let _a2 = r.reserve(a.clone(), "image:x".into()).unwrap();
        let e = r.reserve(a.clone(), "image:x".into()).unwrap_err();
        assert!(e.to_string().contains("quota of 2"), "{e}");
        let b1 = r.reserve(b.clone(), "image:x".into()).unwrap();
        assert!(r
            .reserve(b.clone(), "image:x".into())
            .unwrap_err()
            .to_string()
            .contains("maximum of 3"));
        assert!(matches!(r.get(&a1.id, &b), Err(ApiError::NotFound(_))));
        assert!(r.get(&a1.id, &a).is_ok());
        assert!(matches!(r.get("../x", &a), Err(ApiError::BadRequest(_))));
        assert_eq!(r.of(&a).len(), 2);
        r.journal(&a1).unwrap();
        assert!(j.dir().join(format!("{}.json", a1.id)).exists());
        // Starting sandboxes are never idle; a ready (here: closed) one is.
        *b1.state.lock() = SandboxState::Closed;
        std::thread::sleep(Duration::from_millis(20));
        let idle: Vec<String> = r
            .take_idle(Duration::from_millis(5))
            .iter()
            .map(|s| s.id.clone())
            .collect();
        assert_eq!(idle, std::slice::from_ref(&b1.id));
        assert!(r.remove(&a1.id).is_some());
        assert!(!j.dir().join(format!("{}.json", a1.id)).exists());
        assert_eq!(r.take_all().len(), 1);
        assert_eq!(r.open_count(), 0);
    }

    /// Issue 49: over the maximum a create waits for a place (or for one
    /// of its token's own sandboxes at its quota), and a sandbox with a
    /// request in flight is not idle.
    #[tokio::test]
    async fn creates_wait_for_a_place_and_busy_sandboxes_are_not_idle() {
        let r = Arc::new(Sandboxes::new(2, 2, None));
        let (a, b) = (Client("a".into()), Client("b".into()));
        let a1 = r.reserve(a.clone(), "image:x".into()).unwrap();
        let _b1 = r.reserve(b.clone(), "image:x".into()).unwrap();
        let e = r
            .acquire(a.clone(), "image:x".into(), Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("within"), "{e}");
        assert_eq!(r.waiting(), 0);
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move {
                r.acquire(
                    Client("c".into()),
                    "image:x".into(),
                    Duration::from_secs(10),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(r.waiting(), 1);
        r.remove(&a1.id);
        let c1 = waiter.await.unwrap().unwrap();
        assert_eq!(c1.owner, Client("c".into()));
        // At its quota (1 here), a token's create waits for its own.
        let q = Arc::new(Sandboxes::new(3, 1, None));
        let mine = q.reserve(a.clone(), "image:x".into()).unwrap();
        let waiter = {
            let q = q.clone();
            let a = a.clone();
            tokio::spawn(async move {
                q.acquire(a, "image:x".into(), Duration::from_secs(10))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        q.remove(&mine.id);
        assert!(waiter.await.unwrap().is_ok());
        // Busy: never idle; done: idle again after the timeout.
        *c1.state.lock() = SandboxState::Closed;
        let busy = c1.busy();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(r.take_idle(Duration::from_millis(5)).is_empty());
        drop(busy);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(r.take_idle(Duration::from_millis(5)).len(), 1);
        // Draining refuses waiters.
        r.close_queue();
        let e = r
            .acquire(a, "image:x".into(), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(e, ApiError::Draining), "{e}");
    }
}
