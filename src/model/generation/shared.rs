//! [`SharedModel`]: one [`LocalModel`] serving many concurrent callers (the
//! episodes of a rollout, the requests of a chat endpoint), batching their
//! requests.
//!
//! A caller's request waits in a queue. Whoever finds the model free takes
//! every waiting request and samples them as one batch
//! ([`LocalModel::generate_many_cached`]) while new requests queue for the
//! next one. Callers that hold a [`Seat`] are conversations that come back: a
//! batch waits up to the gathering window for every seated caller to have a
//! request in, so that episodes stepping in lockstep share each forward pass,
//! and each seat keeps its prompt's KV cache, so that its next turn runs only
//! the new tokens.

use crate::model::error::{LocalError, Result};
use crate::model::generation::local_model::{Generation, LocalModel, PromptCache};
use crate::model::generation::sampling::Sampler;
use crate::model::text::tokenizer::ChatTokenizer;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a batch waits for seated callers by default.
pub const DEFAULT_GATHER: Duration = Duration::from_millis(40);

/// A model shared by concurrent callers; see the module docs.
pub struct SharedModel {
    model: Mutex<LocalModel>,
    tokenizer: ChatTokenizer,
    context_window: usize,
    queue: Mutex<Queue>,
    changed: Condvar,
    gather: Duration,
}

#[derive(Default)]
struct Queue {
    /// The prompt cache of each seat taken and not given back.
    seats: HashMap<u64, PromptCache>,
    next_seat: u64,
    next_id: u64,
    /// Some caller is sampling a batch.
    busy: bool,
    waiting: Vec<Request>,
    /// Batches sampled so far.
    batches: u64,
    done: HashMap<u64, std::result::Result<(Generation, Sampler), String>>,
}

struct Request {
    id: u64,
    seat: Option<u64>,
    prompt: Vec<u32>,
    sampler: Sampler,
    since: Instant,
}

/// A conversation that will come back with more requests (an episode);
/// dropping it says it will not, and frees its cache.
pub struct Seat {
    shared: Arc<SharedModel>,
    id: u64,
}

impl Seat {
    /// The model this seat is at.
    pub fn model(&self) -> &SharedModel {
        &self.shared
    }

    /// Like [`SharedModel::generate`], continuing this conversation's cache.
    pub fn generate(&self, prompt: Vec<u32>, sampler: &mut Sampler) -> Result<Generation> {
        self.shared.request(Some(self.id), prompt, sampler)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.seats.remove(&self.id);
        }
        self.shared.changed.notify_all();
    }
}

fn poisoned<T>(_: T) -> LocalError {
    LocalError::Generation("a caller of the shared model panicked".into())
}

impl SharedModel {
    /// Share `model`; a batch waits up to `gather` for seated callers.
    pub fn new(model: LocalModel, gather: Duration) -> Arc<Self> {
        Arc::new(Self {
            tokenizer: model.tokenizer().clone(),
            context_window: model.context_window(),
            model: Mutex::new(model),
            queue: Mutex::default(),
            changed: Condvar::new(),
            gather,
        })
    }

    /// The model's tokenizer and chat template.
    pub fn tokenizer(&self) -> &ChatTokenizer {
        &self.tokenizer
    }

    /// See [`LocalModel::context_window`].
    pub fn context_window(&self) -> usize {
        self.context_window
    }

    /// Batches sampled so far (fewer than requests when requests were batched).
    pub fn batches(&self) -> u64 {
        self.queue.lock().map(|q| q.batches).unwrap_or(0)
    }

    /// Take a seat: batches wait (briefly) for this caller's requests.
    pub fn seat(self: &Arc<Self>) -> Seat {
        let mut id = 0;
        if let Ok(mut q) = self.queue.lock() {
            id = q.next_seat;
            q.next_seat += 1;
            q.seats.insert(id, PromptCache::default());
        }
        Seat {
            shared: self.clone(),
            id,
        }
    }

    /// Sample a continuation of `prompt` with `sampler` (whose state moves
    /// on as if it had sampled alone), batched with concurrent requests.
    pub fn generate(&self, prompt: Vec<u32>, sampler: &mut Sampler) -> Result<Generation> {
        self.request(None, prompt, sampler)
    }

    fn request(
        &self,
        seat: Option<u64>,
        prompt: Vec<u32>,
        sampler: &mut Sampler,
    ) -> Result<Generation> {
        let mut q = self.queue.lock().map_err(poisoned)?;
        let id = q.next_id;
        q.next_id += 1;
        q.waiting.push(Request {
            id,
            seat,
            prompt,
            sampler: sampler.clone(),
            since: Instant::now(),
        });
        self.changed.notify_all();
        loop {
            if let Some(result) = q.done.remove(&id) {
                let (generation, moved_on) = result.map_err(LocalError::Generation)?;
                *sampler = moved_on;
                return Ok(generation);
            }
            let oldest = q.waiting.iter().map(|r| r.since).min();
            let left = oldest.map_or(Duration::ZERO, |t| self.gather.saturating_sub(t.elapsed()));
            let everyone_in = q.waiting.len() >= q.seats.len().max(1);
            if !q.busy && !q.waiting.is_empty() && (everyone_in || left.is_zero()) {
                q = self.run_batch(q)?;
                continue;
            }
            let wait = if q.busy || left.is_zero() {
                Duration::from_secs(1)
            } else {
                left
            };
            q = self.changed.wait_timeout(q, wait).map_err(poisoned)?.0;
        }
    }

    /// Sample every waiting request as one batch, with the queue unlocked
    /// meanwhile; results go to `done`.
    fn run_batch<'a>(&'a self, mut q: MutexGuard<'a, Queue>) -> Result<MutexGuard<'a, Queue>> {
        q.busy = true;
        q.batches += 1;
        let batch = std::mem::take(&mut q.waiting);
        let mut ids = Vec::with_capacity(batch.len());
        let mut seats = Vec::with_capacity(batch.len());
        let mut prompts = Vec::with_capacity(batch.len());
        let mut samplers = Vec::with_capacity(batch.len());
        let mut caches = Vec::with_capacity(batch.len());
        for r in batch {
            ids.push(r.id);
            let cache = r.seat.and_then(|s| q.seats.get_mut(&s)).map(std::mem::take);
            caches.push(cache.unwrap_or_default());
            seats.push(r.seat);
            prompts.push(r.prompt);
            samplers.push(r.sampler);
        }
        drop(q);
        // A panic must not leave the queue busy for ever: it fails this batch.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut m = self
                .model
                .lock()
                .map_err(|_| "the model lock is poisoned".to_string())?;
            m.generate_many_cached(&prompts, &mut samplers, &mut caches)
                .map(|(generations, _)| generations)
                .map_err(|e| e.to_string())
        }))
        .unwrap_or_else(|_| Err("sampling panicked".to_string()));
        let mut q = self.queue.lock().map_err(poisoned)?;
        q.busy = false;
        // Caches go back to seats still taken.
        for (seat, cache) in seats.into_iter().zip(caches) {
            if let Some(slot) = seat.and_then(|s| q.seats.get_mut(&s)) {
                *slot = cache;
            }
        }
        match result {
            Ok(generations) => {
                for ((id, g), s) in ids.into_iter().zip(generations).zip(samplers) {
                    q.done.insert(id, Ok((g, s)));
                }
            }
            Err(e) => {
                for id in ids {
                    q.done.insert(id, Err(e.clone()));
                }
            }
        }
        self.changed.notify_all();
        Ok(q)
    }
}
