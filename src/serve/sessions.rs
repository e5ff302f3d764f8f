//! The session registry: ids, quotas, ownership, and which sessions are
//! idle. Each session holds one episode in its own sandbox.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::auth::Client;
use super::error::ApiError;
use crate::agent::{EpisodeResult, RecordedEpisode};
use crate::sandbox::Session;
use crate::task::Task;

/// Where a session's episode is.
pub enum State {
    /// The sandbox is starting.
    Starting,
    /// The agent is acting.
    Running(Box<RecordedEpisode<Session>>),
    /// The episode is over and recorded.
    Finished(Box<EpisodeResult>),
}

/// One session.
pub struct Slot {
    /// Its id (uuid-shaped).
    pub id: String,
    /// The client that created it; no other may use it.
    pub owner: Client,
    /// The task it runs.
    pub task: Arc<Task>,
    /// The run its episode is recorded under.
    pub run_id: String,
    /// The episode (locked by the one request using it).
    pub state: Mutex<State>,
    /// The episode's sample index, once chosen.
    pub sample: OnceLock<u32>,
    /// The turn limit in force, once the episode is configured.
    pub max_turns: OnceLock<u32>,
    /// Turns taken so far (readable while a step holds `state`).
    pub turns: AtomicU32,
    /// When it was opened (RFC 3339).
    pub opened_at: String,
    opened: Instant,
    last_used: Mutex<Instant>,
    open: AtomicBool,
}

impl Slot {
    /// Mark it used now; returns the seconds since its last use (the
    /// client's time to reply).
    pub fn touch(&self) -> f64 {
        let mut t = self.last_used.lock();
        let secs = t.elapsed().as_secs_f64();
        *t = Instant::now();
        secs
    }

    /// Its episode is over (it no longer counts against quotas).
    pub fn close(&self) {
        self.open.store(false, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().elapsed()
    }
}

/// All sessions of a server.
pub struct Registry {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// Open sessions allowed at once, in all.
    pub max_sessions: usize,
    /// Open sessions allowed at once per client.
    pub per_client: usize,
    /// Next free sample number per (run, task).
    samples: Mutex<HashMap<(String, String), u32>>,
}

/// What a new session needs.
pub struct NewSession {
    /// The client opening it (counts against its quota).
    pub owner: Client,
    /// The task it runs.
    pub task: Arc<Task>,
    /// The run it is recorded under.
    pub run_id: String,
}

impl Registry {
    /// An empty registry with these limits.
    pub fn new(max_sessions: usize, per_client: usize) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            max_sessions: max_sessions.max(1),
            per_client: per_client.max(1),
            samples: Mutex::new(HashMap::new()),
        }
    }

    /// Sessions whose episode has not ended.
    pub fn open_count(&self) -> usize {
        self.slots
            .lock()
            .values()
            .filter(|s| s.open.load(Ordering::Relaxed))
            .count()
    }

    /// Register a new session in the `Starting` state, within the limits.
    pub fn reserve(&self, new: NewSession) -> Result<Arc<Slot>, ApiError> {
        let mut slots = self.slots.lock();
        let open: Vec<&Arc<Slot>> = slots
            .values()
            .filter(|s| s.open.load(Ordering::Relaxed))
            .collect();
        if open.len() >= self.max_sessions {
            return Err(ApiError::TooManySessions(format!(
                "the server runs its maximum of {} sessions; finish or delete one",
                self.max_sessions
            )));
        }
        if open.iter().filter(|s| s.owner == new.owner).count() >= self.per_client {
            return Err(ApiError::TooManySessions(format!(
                "this token already has its quota of {} open sessions",
                self.per_client
            )));
        }
        let slot = Arc::new(Slot {
            id: new_id(),
            owner: new.owner,
            task: new.task,
            run_id: new.run_id,
            state: Mutex::new(State::Starting),
            sample: OnceLock::new(),
            max_turns: OnceLock::new(),
            turns: AtomicU32::new(0),
            opened_at: crate::store::now(),
            opened: Instant::now(),
            last_used: Mutex::new(Instant::now()),
            open: AtomicBool::new(true),
        });
        slots.insert(slot.id.clone(), slot.clone());
        Ok(slot)
    }

    /// The session `id` of `client` (another client's session is not found).
    pub fn get(&self, id: &str, client: &Client) -> Result<Arc<Slot>, ApiError> {
        validate_id(id)?;
        self.slots
            .lock()
            .get(id)
            .filter(|s| &s.owner == client)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("no session {id}")))
    }

    /// The sessions of `client`, oldest first.
    pub fn of(&self, client: &Client) -> Vec<Arc<Slot>> {
        let mut mine: Vec<Arc<Slot>> = self
            .slots
            .lock()
            .values()
            .filter(|s| &s.owner == client)
            .cloned()
            .collect();
        mine.sort_by_key(|s| s.opened);
        mine
    }

    /// Forget session `id`.
    pub fn remove(&self, id: &str) -> Option<Arc<Slot>> {
        self.slots.lock().remove(id)
    }

    /// Remove and return the sessions idle for longer than `idle` that no
    /// request is using.
    pub fn take_idle(&self, idle: Duration) -> Vec<Arc<Slot>> {
        let mut slots = self.slots.lock();
        let ids: Vec<String> = slots
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
        ids.iter().filter_map(|id| slots.remove(id)).collect()
    }

    /// Remove and return every session.
    pub fn take_all(&self) -> Vec<Arc<Slot>> {
        self.slots.lock().drain().map(|(_, s)| s).collect()
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

/// A fresh random id shaped like a UUID (v4).
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
        };
        let (starting, done) = (r.reserve(new()).unwrap(), r.reserve(new()).unwrap());
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
