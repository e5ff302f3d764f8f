//! One session of the server: its episode's state, owner, task, run,
//! idempotency memory and idleness, and what a new one needs.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use parking_lot::Mutex;

use super::auth::Client;
use super::idempotency::{Key, Remembered};
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
    /// The `Idempotency-Key` of the create that made it, and a hash of
    /// what that create asked.
    pub create_key: Option<(Key, u64)>,
    /// The create's answer (JSON), once the sandbox runs: a retried create
    /// gets it again.
    pub opened_reply: OnceLock<Bytes>,
    /// The last keyed step's answer, for a retry of that step.
    pub last_reply: Mutex<Option<Remembered>>,
    /// Its live stream for watchers (see [`super::watch`]).
    pub watch: Arc<super::watch::Watch>,
    /// When it was opened (for ordering).
    pub(super) opened: Instant,
    last_used: Mutex<Instant>,
    open: AtomicBool,
}

impl Slot {
    /// A new session for `new`, in the `Starting` state.
    pub fn new(new: NewSession) -> Slot {
        Slot {
            id: new_id(),
            owner: new.owner,
            task: new.task,
            run_id: new.run_id,
            state: Mutex::new(State::Starting),
            sample: OnceLock::new(),
            max_turns: OnceLock::new(),
            turns: AtomicU32::new(0),
            opened_at: crate::store::now(),
            create_key: new.key,
            opened_reply: OnceLock::new(),
            last_reply: Mutex::new(None),
            watch: Arc::default(),
            opened: Instant::now(),
            last_used: Mutex::new(Instant::now()),
            open: AtomicBool::new(true),
        }
    }

    /// Mark it used now; returns the seconds since its last use (the
    /// client's time to reply).
    pub fn touch(&self) -> f64 {
        let mut t = self.last_used.lock();
        let secs = t.elapsed().as_secs_f64();
        *t = Instant::now();
        secs
    }

    /// Time since its last use.
    pub fn idle_for(&self) -> Duration {
        self.last_used.lock().elapsed()
    }

    /// Whether its episode still runs (it counts against the limits).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Its episode is over: it no longer counts against the limits (the
    /// registry gives its place to the next waiter).
    pub(super) fn mark_finished(&self) {
        self.open.store(false, Ordering::Relaxed);
    }
}

/// What a new session needs.
#[derive(Clone)]
pub struct NewSession {
    /// The client opening it (counts against its quota).
    pub owner: Client,
    /// The task it runs.
    pub task: Arc<Task>,
    /// The run it is recorded under.
    pub run_id: String,
    /// The create's `Idempotency-Key` and a hash of what it asks.
    pub key: Option<(Key, u64)>,
}

/// A fresh random id shaped like a UUID (v4).
pub(super) fn new_id() -> String {
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
