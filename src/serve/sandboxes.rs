//! The sandbox registry of `/v1/sandboxes`: bare sandboxes a client drives
//! command by command (a Harbor environment, see `python/endless_env/
//! harbor.py`), with the same ownership, quotas, idle reaping and journal
//! as sessions. Unlike a session, a sandbox runs no episode and records
//! nothing in the workspace: what happens inside is the client's.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::auth::Client;
use super::error::ApiError;
use super::sandbox_journal::{SandboxEntry, SandboxJournal};
use super::sandbox_ops::Identity;
use super::sessions::validate_id;
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
            per_client,
            journal,
            lost,
        }
    }

    /// Open sandboxes now.
    pub fn open_count(&self) -> usize {
        self.boxes.lock().len()
    }

    /// Reserve a sandbox for `owner` (state `Starting`), within the quotas.
    pub fn reserve(&self, owner: Client, source: String) -> Result<Arc<Sandbox>, ApiError> {
        let mut boxes = self.boxes.lock();
        if boxes.len() >= self.max {
            return Err(ApiError::TooManySessions(format!(
                "the server runs its maximum of {} sandboxes; delete one",
                self.max
            )));
        }
        if boxes.values().filter(|s| s.owner == owner).count() >= self.per_client {
            return Err(ApiError::TooManySessions(format!(
                "this token already has its quota of {} open sandboxes",
                self.per_client
            )));
        }
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

    /// Forget sandbox `id` (its journal entry too).
    pub fn remove(&self, id: &str) -> Option<Arc<Sandbox>> {
        if let Some(j) = &self.journal {
            j.remove(id);
        }
        self.boxes.lock().remove(id)
    }

    /// Remove and return the sandboxes idle for longer than `idle` that
    /// no request is using (one still starting is never idle).
    pub fn take_idle(&self, idle: Duration) -> Vec<Arc<Sandbox>> {
        let mut boxes = self.boxes.lock();
        let ids: Vec<String> = boxes
            .values()
            .filter(|s| {
                s.idle_for() > idle
                    && s.state
                        .try_lock()
                        .is_some_and(|st| !matches!(*st, SandboxState::Starting))
            })
            .map(|s| s.id.clone())
            .collect();
        let taken: Vec<Arc<Sandbox>> = ids.iter().filter_map(|id| boxes.remove(id)).collect();
        drop(boxes);
        if let Some(j) = &self.journal {
            for s in &taken {
                j.remove(&s.id);
            }
        }
        taken
    }

    /// Remove and return every sandbox.
    pub fn take_all(&self) -> Vec<Arc<Sandbox>> {
        let all: Vec<Arc<Sandbox>> = self.boxes.lock().drain().map(|(_, s)| s).collect();
        if let Some(j) = &self.journal {
            for s in &all {
                j.remove(&s.id);
            }
        }
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
}
