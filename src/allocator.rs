//! The process's memory allocator: mimalloc, or the C library's with
//! `ENDLESS_ALLOCATOR=system` (to compare the two in one benchmark run).
//!
//! Why not glibc's: candle gives every op's output a buffer of its own, so
//! sampling and training churn through buffers of many sizes on several
//! threads. glibc keeps what they free in per-thread arenas it can only
//! shrink from the top; in a PPO run of the 1.9M-parameter `tiny` policy the
//! process held 7.3 GB resident, of which `malloc_trim` found all but 520 MB
//! free, and it grew back by about 4 GB in two minutes of rollouts. Every
//! sandbox the run starts is a `fork` of this process (the spawn runs
//! `pre_exec` code), which copies the page tables of all that memory: 45%
//! of the rollout phase's CPU went to `copy_page_range` and the child's
//! `execve` tearing the copy down again, and 15% to faulting in pages glibc
//! had given back. mimalloc returns freed pages to the system soon after
//! and keeps sizes apart, so the process stays near what it really uses.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

use mimalloc::MiMalloc;

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

/// mimalloc unless `ENDLESS_ALLOCATOR` is `system`, decided once, at the
/// first allocation, before any memory could come from the other one.
pub struct Switchable;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        UNDECIDED => {
            // `getenv` allocates nothing; the first allocation happens on
            // the main thread before any other thread exists.
            // SAFETY: a NUL-terminated name; the value is only read here.
            let value = unsafe { libc::getenv(c"ENDLESS_ALLOCATOR".as_ptr()) };
            // SAFETY: `getenv` returns null or a NUL-terminated string.
            let system = !value.is_null()
                && unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() == b"system";
            let c = if system { SYSTEM } else { MIMALLOC };
            CHOICE.store(c, Ordering::Relaxed);
            c
        }
        c => c,
    }
}

/// The allocator [`choice`] picked.
fn chosen() -> &'static dyn GlobalAlloc {
    if choice() == SYSTEM {
        &System
    } else {
        &MiMalloc
    }
}

// SAFETY: every call goes to the one allocator chosen before the first
// allocation, so memory is always freed by the allocator that gave it.
unsafe impl GlobalAlloc for Switchable {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { chosen().alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { chosen().alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the same allocator (see above).
        unsafe { chosen().dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from the same allocator (see above).
        unsafe { chosen().realloc(ptr, layout, new_size) }
    }
}
