//! A pool of pre-started sandboxes (`[sandbox] pool = N`): for each image
//! asked for, up to N sandboxes started ahead by a background thread, so
//! that an episode's start is a hand-out instead of a start.
//!
//! A pooled sandbox IS a fresh one, started earlier by the same code with
//! the same image: it is keyed by everything of the [`Image`] that shapes a
//! sandbox (user, ids, network, limits, layers; the backend's own settings
//! are the same for all its sandboxes), and what differs per episode (the
//! terminal size, recording, live budget and wall clock of
//! [`SessionOptions`](crate::sandbox::SessionOptions)) is applied at
//! hand-out (`Session::adopt`). Each is handed out once and never comes
//! back. Sandboxes of an image nobody asked for within the idle lifetime
//! (`[sandbox] pool_idle_secs`), of an older image of the same task (an
//! image change) or of an image eviction wants are closed (drained). The
//! pool never holds more than the backend's session limit leaves room for
//! (live sessions and pooled ones together).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Image, SandboxError, Session};

/// How long the filler waits after a failed start before it tries that
/// image again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The pool's settings (`[sandbox] pool`, `pool_idle_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolSettings {
    /// Sandboxes kept ready per image (0: no pool).
    pub size: usize,
    /// How long an image's pool lives after its last request.
    pub idle: Duration,
}

impl PoolSettings {
    /// The settings `[sandbox] pool` and `pool_idle_secs` give.
    pub fn of(config: &crate::config::SandboxConfig) -> PoolSettings {
        PoolSettings {
            size: config.pool,
            idle: Duration::from_secs(config.pool_idle_secs.max(1)),
        }
    }
}

/// What a pool holds: a started sandbox (a [`Session`]),
/// which can end while it waits and is closed when drained.
pub trait Pooled: Send + 'static {
    /// Whether it is still usable.
    fn alive(&mut self) -> bool;
    /// End it and release what it holds.
    fn close(self);
    /// The host pid of its outermost process.
    fn pid(&self) -> u32;
}

impl Pooled for Session {
    fn alive(&mut self) -> bool {
        self.is_alive()
    }
    fn close(self) {
        Session::close(self)
    }
    fn pid(&self) -> u32 {
        Session::pid(self)
    }
}

/// Starts one sandbox of an image (the backend's own start).
pub type Starter<T> = Arc<dyn Fn(&Image) -> Result<T, SandboxError> + Send + Sync>;

/// The pool's figures (`sandbox doctor`, serve's `/metrics`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PoolStats {
    /// Sandboxes kept ready per image.
    pub size: usize,
    /// Idle lifetime of an image's pool, seconds.
    pub idle_secs: u64,
    /// Sandboxes ready now, over all images.
    pub ready: usize,
    /// Sandboxes being started for the pool now.
    pub starting: usize,
    /// Images with a pool.
    pub images: usize,
    /// Starts served from the pool.
    pub hits: u64,
    /// Starts the pool had nothing for (started directly).
    pub misses: u64,
    /// Sandboxes the pool started.
    pub started: u64,
    /// Pool starts that failed.
    pub failed: u64,
    /// Pooled sandboxes closed unused (idle, image change, eviction, ended).
    pub drained: u64,
    /// Why the last pool start failed.
    pub last_error: Option<String>,
}

/// One image's pool.
struct Entry<T> {
    image: Image,
    ready: VecDeque<T>,
    starting: usize,
    asked: Instant,
    retry_at: Option<Instant>,
}

struct Inner<T> {
    entries: BTreeMap<String, Entry<T>>,
    stats: PoolStats,
    closed: bool,
    /// Sandboxes to close, outside the lock.
    doomed: Vec<T>,
}

/// The pool of one backend (see the module docs).
pub struct Pool<T: Pooled> {
    settings: PoolSettings,
    inner: Mutex<Inner<T>>,
    wake: Condvar,
    /// The most sandboxes (live sessions and pooled ones) the backend may
    /// hold at once.
    limit: AtomicUsize,
    /// Live sessions of the backend, pooled ones included (see [`Ticket`]).
    live: Arc<AtomicUsize>,
}

/// Counts one live session of a backend while it lives.
pub struct Ticket(Arc<AtomicUsize>);

impl Ticket {
    /// Count one more in `live`.
    pub fn new(live: &Arc<AtomicUsize>) -> Ticket {
        live.fetch_add(1, Ordering::SeqCst);
        Ticket(live.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a sandbox is pooled under: every field of its image.
pub fn key(image: &Image) -> String {
    serde_json::to_string(image).unwrap_or_else(|_| format!("{image:?}"))
}

impl<T: Pooled> Pool<T> {
    /// A pool with `settings` whose background thread starts sandboxes with
    /// `start`; `live` counts the backend's live sessions, the pooled ones
    /// included (for the limit: each holds a [`Ticket`]).
    pub fn new(settings: PoolSettings, start: Starter<T>, live: Arc<AtomicUsize>) -> Arc<Pool<T>> {
        let pool = Arc::new(Pool {
            settings,
            inner: Mutex::new(Inner {
                entries: BTreeMap::new(),
                stats: PoolStats {
                    size: settings.size,
                    idle_secs: settings.idle.as_secs(),
                    ..PoolStats::default()
                },
                closed: false,
                doomed: Vec::new(),
            }),
            wake: Condvar::new(),
            limit: AtomicUsize::new(usize::MAX),
            live,
        });
        let weak = Arc::downgrade(&pool);
        let spawned = std::thread::Builder::new()
            .name("endless-pool".into())
            .spawn(move || fill(weak, start));
        if let Err(e) = spawned {
            pool.lock().stats.last_error = Some(format!("the pool's thread: {e}"));
        }
        pool
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sandbox of `image` started ahead, handed out once (`None`: none is
    /// ready; the caller starts one). Asks the pool to keep `image`'s
    /// sandboxes ready from now on, and drains those of the same task's
    /// other images (an image change; not another size of the same image,
    /// e.g. a served sandbox's own `cpus`).
    pub fn take(&self, image: &Image) -> Option<T> {
        let key = key(image);
        let mut got = None;
        let doomed = {
            let mut g = self.lock();
            let g = &mut *g;
            if g.closed {
                return None;
            }
            let changed: Vec<String> = g
                .entries
                .iter()
                .filter(|(_, e)| e.image.task_id == image.task_id && e.image.hash != image.hash)
                .map(|(k, _)| k.clone())
                .collect();
            for k in changed {
                if let Some(e) = g.entries.remove(&k) {
                    g.doomed.extend(e.ready);
                }
            }
            let entry = g.entries.entry(key).or_insert_with(|| Entry {
                image: image.clone(),
                ready: VecDeque::new(),
                starting: 0,
                asked: Instant::now(),
                retry_at: None,
            });
            entry.asked = Instant::now();
            while let Some(mut s) = entry.ready.pop_front() {
                if s.alive() {
                    got = Some(s);
                    break;
                }
                g.doomed.push(s);
            }
            match got {
                Some(_) => g.stats.hits += 1,
                None => g.stats.misses += 1,
            }
            std::mem::take(&mut g.doomed)
        };
        self.wake.notify_all();
        self.close_all(doomed);
        got
    }

    /// Close the pooled sandboxes of the images `drop` picks (by hash),
    /// e.g. before eviction; returns how many were closed.
    pub fn drain(&self, drop: impl Fn(&Image) -> bool) -> usize {
        let doomed = {
            let mut g = self.lock();
            let g = &mut *g;
            let keys: Vec<String> = g
                .entries
                .iter()
                .filter(|(_, e)| drop(&e.image))
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                if let Some(e) = g.entries.remove(&k) {
                    g.doomed.extend(e.ready);
                }
            }
            std::mem::take(&mut g.doomed)
        };
        let n = doomed.len();
        self.close_all(doomed);
        n
    }

    /// Hold at most `n` sandboxes at once, live sessions and pooled ones
    /// together (e.g. serve's `--max-sessions`); pooled ones past it are
    /// closed.
    pub fn set_limit(&self, n: usize) {
        self.limit.store(n, Ordering::SeqCst);
        let doomed = {
            let mut g = self.lock();
            shed(&mut g, self.live.load(Ordering::SeqCst).saturating_sub(n));
            std::mem::take(&mut g.doomed)
        };
        self.close_all(doomed);
    }

    /// The host pids of the sandboxes ready now.
    pub fn pids(&self) -> Vec<u32> {
        let g = self.lock();
        g.entries
            .values()
            .flat_map(|e| e.ready.iter().map(Pooled::pid))
            .collect()
    }

    /// The pool's figures now.
    pub fn stats(&self) -> PoolStats {
        let g = self.lock();
        let mut s = g.stats.clone();
        s.ready = g.entries.values().map(|e| e.ready.len()).sum();
        s.starting = g.entries.values().map(|e| e.starting).sum();
        s.images = g.entries.len();
        s
    }

    fn close_all(&self, doomed: Vec<T>) {
        if doomed.is_empty() {
            return;
        }
        let n = doomed.len() as u64;
        for s in doomed {
            s.close();
        }
        self.lock().stats.drained += n;
    }

    /// Stop filling and close every pooled sandbox.
    pub fn shut(&self) {
        let doomed = {
            let mut g = self.lock();
            g.closed = true;
            let entries = std::mem::take(&mut g.entries);
            let mut doomed = std::mem::take(&mut g.doomed);
            doomed.extend(entries.into_values().flat_map(|e| e.ready));
            doomed
        };
        self.wake.notify_all();
        self.close_all(doomed);
    }

    /// The next image to start a sandbox for, if any needs one and the
    /// limit leaves room; drops idle images' pools into `doomed`.
    fn next(&self, g: &mut Inner<T>) -> Option<(String, Image)> {
        let now = Instant::now();
        let idle = self.settings.idle;
        let expired: Vec<String> = g
            .entries
            .iter()
            .filter(|(_, e)| now.duration_since(e.asked) >= idle && e.starting == 0)
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            if let Some(e) = g.entries.remove(&k) {
                g.doomed.extend(e.ready);
            }
        }
        // Pooled sandboxes are live sessions already; those starting not yet.
        let (live, limit) = (
            self.live.load(Ordering::SeqCst),
            self.limit.load(Ordering::SeqCst),
        );
        shed(g, live.saturating_sub(limit));
        let starting: usize = g.entries.values().map(|e| e.starting).sum();
        if live + starting >= limit {
            return None;
        }
        let size = self.settings.size;
        let (k, e) = g
            .entries
            .iter_mut()
            .filter(|(_, e)| e.ready.len() + e.starting < size)
            .filter(|(_, e)| e.retry_at.is_none_or(|t| t <= now))
            .min_by_key(|(_, e)| e.ready.len() + e.starting)?;
        e.starting += 1;
        Some((k.clone(), e.image.clone()))
    }
}

/// Move up to `excess` ready sandboxes to `g.doomed` (past the limit).
fn shed<T>(g: &mut Inner<T>, mut excess: usize) {
    for e in g.entries.values_mut() {
        while excess > 0 {
            let Some(s) = e.ready.pop_back() else { break };
            g.doomed.push(s);
            excess -= 1;
        }
    }
}

/// The filler: starts sandboxes for the images that need them, one at a
/// time, until the pool is dropped or shut.
fn fill<T: Pooled>(pool: std::sync::Weak<Pool<T>>, start: Starter<T>) {
    loop {
        let Some(p) = pool.upgrade() else { return };
        let mut g = p.lock();
        if g.closed {
            return;
        }
        let job = p.next(&mut g);
        let doomed = std::mem::take(&mut g.doomed);
        match job {
            Some((key, image)) => {
                drop(g);
                p.close_all(doomed);
                let result = start(&image);
                let mut g = p.lock();
                let g = &mut *g;
                let entry = g.entries.get_mut(&key);
                match (result, entry) {
                    (Ok(s), Some(e)) if !g.closed => {
                        e.starting -= 1;
                        e.ready.push_back(s);
                        g.stats.started += 1;
                    }
                    (Ok(s), e) => {
                        if let Some(e) = e {
                            e.starting -= 1;
                        }
                        g.stats.started += 1;
                        g.doomed.push(s);
                    }
                    (Err(err), e) => {
                        if let Some(e) = e {
                            e.starting -= 1;
                            e.retry_at = Some(Instant::now() + RETRY_AFTER);
                        }
                        g.stats.failed += 1;
                        g.stats.last_error = Some(err.to_string());
                    }
                }
            }
            None if doomed.is_empty() => {
                // Wake at a request, or to expire idle pools.
                let wait = p.settings.idle.min(Duration::from_secs(1));
                drop(p.wake.wait_timeout(g, wait));
            }
            None => {
                drop(g);
                p.close_all(doomed);
            }
        }
    }
}

impl<T: Pooled> Drop for Pool<T> {
    fn drop(&mut self) {
        let g = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        g.closed = true;
        let doomed: Vec<T> = std::mem::take(&mut g.entries)
            .into_values()
            .flat_map(|e| e.ready)
            .chain(std::mem::take(&mut g.doomed))
            .collect();
        for s in doomed {
            s.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// What the pool holds in these tests: a numbered item that says when
    /// it is closed and counts as live while it exists, as a session does.
    struct Item {
        id: usize,
        closed: Arc<Mutex<Vec<usize>>>,
        _live: Ticket,
    }

    impl Pooled for Item {
        fn alive(&mut self) -> bool {
            true
        }
        fn close(self) {
            self.closed.lock().unwrap().push(self.id);
        }
        fn pid(&self) -> u32 {
            self.id as u32
        }
    }

    struct Rig {
        pool: Arc<Pool<Item>>,
        closed: Arc<Mutex<Vec<usize>>>,
        live: Arc<AtomicUsize>,
    }

    fn rig(size: usize, idle: Duration) -> Rig {
        let closed = Arc::new(Mutex::new(Vec::new()));
        let live = Arc::new(AtomicUsize::new(0));
        let next = Arc::new(AtomicUsize::new(0));
        let (c, l) = (closed.clone(), live.clone());
        let start: Starter<Item> = Arc::new(move |_image: &Image| {
            std::thread::sleep(Duration::from_millis(2));
            Ok(Item {
                id: next.fetch_add(1, Ordering::SeqCst),
                closed: c.clone(),
                _live: Ticket::new(&l),
            })
        });
        Rig {
            pool: Pool::new(PoolSettings { size, idle }, start, live.clone()),
            closed,
            live,
        }
    }

    fn image(task: &str, hash: &str) -> Image {
        Image::for_test("local", hash, &format!("/c/{hash}"), task)
    }

    /// Wait until `cond` holds of the pool's figures (at most 10 s).
    fn until(pool: &Pool<Item>, cond: impl Fn(&PoolStats) -> bool) -> PoolStats {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = pool.stats();
            if cond(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "pool stuck at {s:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn each_sandbox_is_handed_out_once() {
        let r = rig(2, Duration::from_secs(60));
        let img = image("t", "h1");
        assert!(
            r.pool.take(&img).is_none(),
            "nothing is ready before a request"
        );
        let mut seen = HashSet::new();
        for _ in 0..20 {
            until(&r.pool, |s| s.ready == 2);
            let item = r.pool.take(&img).expect("a ready sandbox");
            assert!(seen.insert(item.id), "sandbox {} handed out twice", item.id);
            item.close();
        }
        let s = r.pool.stats();
        assert_eq!((s.hits, s.misses), (20, 1));
        // What was handed out is closed by its taker, never by the pool.
        let closed = r.closed.lock().unwrap().clone();
        assert_eq!(closed.len(), 20);
        assert!(closed.iter().all(|id| seen.contains(id)));
    }

    #[test]
    fn eviction_and_an_image_change_drain_the_pool() {
        let r = rig(3, Duration::from_secs(60));
        let (a, b) = (image("t", "h1"), image("u", "h2"));
        assert!(r.pool.take(&a).is_none());
        assert!(r.pool.take(&b).is_none());
        until(&r.pool, |s| s.ready == 6);
        // Eviction of h1: its pool goes, h2's stays.
        assert_eq!(r.pool.drain(|i| i.hash == "h1"), 3);
        let s = r.pool.stats();
        assert_eq!((s.ready, s.images, s.drained), (3, 1, 3));
        assert!(r.pool.take(&a).is_none(), "the drained pool is empty");
        until(&r.pool, |s| s.ready == 6);
        // The same image with other limits is another pool, and no change.
        let mut b_small = b.clone();
        b_small.cpu_millis = Some(500);
        assert!(r.pool.take(&b_small).is_none());
        assert_eq!(r.pool.stats().drained, 3);
        until(&r.pool, |s| s.ready == 9);
        // Task u's image changed: its old sandboxes are closed, not handed out.
        let b2 = image("u", "h3");
        assert!(r.pool.take(&b2).is_none());
        let s = r.pool.stats();
        assert_eq!(s.drained, 9);
        assert_eq!(r.closed.lock().unwrap().len(), 9);
        until(&r.pool, |s| s.ready == 6);
        r.pool.shut();
        assert_eq!(r.pool.stats().ready, 0);
        assert_eq!(r.live.load(Ordering::SeqCst), 0, "every sandbox was closed");
    }

    #[test]
    fn pools_of_idle_images_are_drained() {
        let r = rig(2, Duration::from_millis(300));
        assert!(r.pool.take(&image("t", "h1")).is_none());
        until(&r.pool, |s| s.ready == 2);
        // The filler closes an expired pool's sandboxes after it drops the
        // pool, so `drained` can lag `images` for a moment.
        let s = until(&r.pool, |s| s.images == 0 && s.drained == 2);
        assert_eq!(s.ready, 0);
    }

    #[test]
    fn refills_under_load_and_never_hands_out_twice() {
        let r = rig(4, Duration::from_secs(60));
        let img = image("t", "h1");
        r.pool.take(&img);
        until(&r.pool, |s| s.ready == 4);
        let seen = Arc::new(Mutex::new(Vec::new()));
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let (pool, seen, img) = (&r.pool, seen.clone(), img.clone());
                scope.spawn(move || {
                    for _ in 0..50 {
                        if let Some(item) = pool.take(&img) {
                            seen.lock().unwrap().push(item.id);
                            item.close();
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            }
        });
        let seen = seen.lock().unwrap().clone();
        let unique: HashSet<usize> = seen.iter().copied().collect();
        assert_eq!(unique.len(), seen.len(), "a sandbox was handed out twice");
        // More were handed out than the pool holds: it refilled meanwhile.
        assert!(seen.len() > 4, "only {} handed out", seen.len());
        // And it is full again once the load stops.
        until(&r.pool, |s| s.ready == 4);
    }

    #[test]
    fn the_pool_stays_within_the_session_limit() {
        let r = rig(5, Duration::from_secs(60));
        r.pool.set_limit(3);
        let img = image("t", "h1");
        r.pool.take(&img);
        until(&r.pool, |s| s.ready == 3);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(r.pool.stats().ready, 3, "no more than the limit");
        // A live session takes room from the pool.
        let taken = r.pool.take(&img).unwrap();
        let other = Item {
            id: 1000,
            closed: r.closed.clone(),
            _live: Ticket::new(&r.live),
        };
        r.pool.take(&image("u", "h2")); // a request wakes the filler
        until(&r.pool, |s| s.ready == 1);
        // A lower limit closes pooled sandboxes past it.
        r.pool.set_limit(2);
        assert_eq!(r.pool.stats().ready, 0);
        assert_eq!(r.live.load(Ordering::SeqCst), 2);
        taken.close();
        other.close();
        until(&r.pool, |s| s.ready == 2);
    }
}
