//! A team of rayon's threads that stays awake, spinning, for the length of
//! one decoding step.
//!
//! A GGUF decoding step is about 150 short parallel loops (four matmuls and
//! an attention per layer, then the output layer), each a few tens of
//! microseconds, with serial candle ops between them. Handed to rayon one by
//! one, every loop waits for a worker that fell asleep during the serial
//! part to be woken: rayon's futex wake and sleep were 12% of a step of
//! SmolLM2-135M at 2 threads (`perf`, this crate's `bench sample`).
//! llama.cpp keeps its threads spinning between the ops of a graph instead;
//! this does the same for one closure: [`with_spinning_team`] runs it on one
//! of rayon's threads (the leader) while the pool's other threads spin,
//! taking the work items that [`run`] publishes, until it returns. Workers
//! claim items from a shared counter, so a thread that is late or
//! descheduled only leaves its share to the others; the leader alone can
//! finish every loop.

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// Idle polls before a waiting thread starts yielding its core: with
/// `pause` at ~140 cycles (recent Intel), about a millisecond, far longer
/// than the serial parts of a step (tens of microseconds).
const SPINS: u32 = 1 << 14;

/// One more idle poll after `polls` before it: spin, then yield the core.
fn idle_poll(polls: &mut u32) {
    *polls = polls.saturating_add(1);
    if *polls < SPINS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One parallel loop: `items` calls of `body`, claimed through `next`.
struct Job<'a> {
    body: &'a (dyn Fn(usize) + Sync),
    items: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl Job<'_> {
    /// Claim and run items until none are left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Relaxed);
            if i >= self.items {
                return;
            }
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| (self.body)(i))) {
                *self.panic.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
            self.done.fetch_add(1, Release);
        }
    }
}

/// What the leader shares with the spinning workers.
struct Team {
    /// The loop being run, or null between loops. Points into the leader's
    /// stack: the leader clears it, then waits for `users` to reach zero,
    /// before that frame ends.
    job: AtomicPtr<Job<'static>>,
    /// Workers that may still hold the pointer read from `job`.
    users: AtomicUsize,
    /// Set when the leader's closure has returned (or panicked).
    finished: AtomicBool,
}

impl Team {
    /// A worker's part: take items of each published loop until the leader
    /// finishes.
    fn serve(&self) {
        let mut idle = 0u32;
        while !self.finished.load(Acquire) {
            if self.job.load(Acquire).is_null() {
                idle_poll(&mut idle);
                continue;
            }
            // Registered before reading the pointer again (both SeqCst, as
            // the leader's clear and count): either this read sees null, or
            // the leader sees this worker and waits for it.
            self.users.fetch_add(1, SeqCst);
            let job = self.job.load(SeqCst);
            if !job.is_null() {
                // SAFETY: the leader keeps the job alive while `users` counts
                // this worker (see `Published`).
                unsafe { (*job).work() };
            }
            self.users.fetch_sub(1, SeqCst);
            idle = 0;
        }
    }
}

thread_local! {
    /// The team this thread leads, while it runs [`with_spinning_team`]'s closure.
    static LEADING: Cell<*const Team> = const { Cell::new(ptr::null()) };
}

/// Marks the current thread as `team`'s leader until dropped; on drop
/// (return or unwinding) releases the workers.
struct Leading<'a>(&'a Team);

impl<'a> Leading<'a> {
    fn enter(team: &'a Team) -> Self {
        LEADING.with(|l| l.set(team));
        Self(team)
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        LEADING.with(|l| l.set(ptr::null()));
        self.0.finished.store(true, Release);
    }
}

/// Withdraws a published job on drop, once no worker can still touch it.
struct Published<'a>(&'a Team);

impl Drop for Published<'_> {
    fn drop(&mut self) {
        self.0.job.store(ptr::null_mut(), SeqCst);
        while self.0.users.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
    }
}

/// Run `f` on one of rayon's threads with the pool's other threads spinning
/// beside it, ready for the loops [`run`] hands them, until `f` returns.
/// With one thread, or when already leading a team, just runs `f`.
///
/// The workers spin for the whole of `f`: use it for a burst of short
/// loops (a decoding step), not for anything that waits.
pub fn with_spinning_team<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_num_threads() <= 1 || LEADING.with(|l| !l.get().is_null()) {
        return f();
    }
    let team = Team {
        job: AtomicPtr::new(ptr::null_mut()),
        users: AtomicUsize::new(0),
        finished: AtomicBool::new(false),
    };
    let led = AtomicBool::new(false);
    let f = Mutex::new(Some(f));
    // The first thread to arrive leads: a worker busy elsewhere joins late
    // (or after `f` is done, and leaves at once) without holding `f` up.
    rayon::broadcast(|_| {
        if led.swap(true, AcqRel) {
            team.serve();
            return None;
        }
        let f = f.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        let _leading = Leading::enter(&team);
        Some(f())
    })
    .into_iter()
    .flatten()
    .next()
    .expect("one thread of the broadcast leads")
}

/// Run `body(0..items)` on the team the current thread leads, the leader
/// taking items too; `false` (nothing run) when it leads none.
pub(super) fn run(items: usize, body: &(dyn Fn(usize) + Sync)) -> bool {
    let team = LEADING.with(|l| l.get());
    if team.is_null() {
        return false;
    }
    // SAFETY: `LEADING` is set only while the team lives (`Leading`).
    let team = unsafe { &*team };
    let job = Job {
        body,
        items,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        panic: Mutex::new(None),
    };
    // SAFETY (lifetime erased): `Published` clears the pointer and waits
    // for every worker holding it before `job` goes out of scope.
    let erased = &job as *const Job<'_> as *mut Job<'static>;
    team.job.store(erased, SeqCst);
    let published = Published(team);
    job.work();
    let mut polls = 0u32;
    while job.done.load(Acquire) < items {
        idle_poll(&mut polls);
    }
    drop(published);
    if let Some(e) = job.panic.into_inner().unwrap_or_else(|p| p.into_inner()) {
        resume_unwind(e);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn every_item_runs_once_in_each_loop() {
        let pool = pool(3);
        let total = pool.install(|| {
            with_spinning_team(|| {
                let sum = AtomicU64::new(0);
                for round in 0..200u64 {
                    let hits: Vec<AtomicU64> = (0..37).map(|_| AtomicU64::new(0)).collect();
                    assert!(run(37, &|i| {
                        hits[i].fetch_add(1, Relaxed);
                        sum.fetch_add(round * 37 + i as u64, Relaxed);
                    }));
                    assert!(hits.iter().all(|h| h.load(Relaxed) == 1));
                }
                sum.into_inner()
            })
        });
        assert_eq!(total, (0..200 * 37).sum::<u64>());
    }

    #[test]
    fn without_a_team_nothing_runs() {
        assert!(!run(4, &|_| panic!("must not run")));
    }

    #[test]
    fn one_thread_runs_the_closure_without_a_team() {
        let pool = pool(1);
        let led = pool.install(|| with_spinning_team(|| LEADING.with(|l| !l.get().is_null())));
        assert!(!led);
    }

    #[test]
    fn a_panicking_item_reaches_the_leader_and_the_pool_stays_usable() {
        let pool = pool(2);
        let caught = pool.install(|| {
            catch_unwind(AssertUnwindSafe(|| {
                with_spinning_team(|| {
                    run(8, &|i| {
                        if i == 5 {
                            panic!("item 5");
                        }
                    })
                })
            }))
        });
        let message = caught.unwrap_err();
        assert_eq!(message.downcast_ref::<&str>(), Some(&"item 5"));
        // The workers left the team: the pool still runs ordinary work.
        assert_eq!(pool.install(|| with_spinning_team(|| 7)), 7);
    }

    #[test]
    fn nested_teams_run_inline() {
        let pool = pool(2);
        let v = pool.install(|| with_spinning_team(|| with_spinning_team(|| 41) + 1));
        assert_eq!(v, 42);
    }
}
