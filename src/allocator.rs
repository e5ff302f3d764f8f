//! The process's memory allocator: mimalloc, except for `endless serve`
//! (and `endless bench serve`, which measures it), which runs on the C
//! library's; `ENDLESS_ALLOCATOR=system` or `=mimalloc` chooses for any
//! command (to compare the two in one benchmark run).
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
//!
//! During a training update ([`HoldFreedMemory`]) mimalloc keeps what is
//! freed: the update allocates and frees the same large buffers at every
//! layer, and purging them after 10 ms made the kernel zero them again on
//! the next touch (a quarter of a 10M-parameter PPO update's CPU time went
//! to `clear_page`; 60,000 page faults in six steps against 1,000 without
//! purging). Memory is purged again once the update is over, before the
//! next rollouts fork sandboxes.
//!
//! Why not mimalloc for `serve`: the server is a long-lived process whose
//! many short requests run on tokio's blocking pool (a thread per
//! concurrent session). mimalloc commits its arenas eagerly and keeps
//! per-thread pages, so after 64 concurrent sessions the server held
//! 463 MB resident against 66 MB with glibc's (`endless bench serve`
//! shows both); the server does no tensor work for mimalloc to win back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

use mimalloc::MiMalloc;

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

/// mimalloc or the C library's, decided once, at the first allocation,
/// before any memory could come from the other one: `ENDLESS_ALLOCATOR`
/// (`system` or `mimalloc`) if set, else the C library's for the commands
/// [`system_for`] names, else mimalloc.
pub struct Switchable;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        UNDECIDED => {
            // `getenv` and the reads below allocate nothing; the first
            // allocation happens on the main thread before any other
            // thread exists.
            // SAFETY: a NUL-terminated name; the value is only read here.
            let value = unsafe { libc::getenv(c"ENDLESS_ALLOCATOR".as_ptr()) };
            let named = if value.is_null() {
                None
            } else {
                // SAFETY: `getenv` returns null or a NUL-terminated string.
                Some(unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes())
            };
            let system = match named {
                Some(b"system") => true,
                Some(b"mimalloc") => false,
                _ => {
                    let mut buf = [0u8; 4096];
                    let n = read_cmdline(&mut buf);
                    system_for(&buf[..n])
                }
            };
            let c = if system { SYSTEM } else { MIMALLOC };
            CHOICE.store(c, Ordering::Relaxed);
            c
        }
        c => c,
    }
}

/// Whether the command line `cmdline` (NUL-separated, as in
/// `/proc/self/cmdline`) runs a command that uses the C library's
/// allocator: `serve`, and `bench serve`. Global options before the
/// command (`--workspace DIR`, `--workspace=DIR`, `--create`) are skipped.
pub fn system_for(cmdline: &[u8]) -> bool {
    let mut words = cmdline.split(|b| *b == 0).skip(1).filter(|w| !w.is_empty());
    let mut positional = || loop {
        let w = words.next()?;
        if w == b"--workspace" {
            words.next();
        } else if !w.starts_with(b"-") {
            return Some(w);
        }
    };
    match positional() {
        Some(b"serve") => true,
        Some(b"bench") => positional() == Some(b"serve"),
        _ => false,
    }
}

/// Read `/proc/self/cmdline` into `buf` without allocating; the bytes read
/// (0 when it cannot be read).
fn read_cmdline(buf: &mut [u8]) -> usize {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/cmdline".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return 0;
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: writes at most `buf.len() - len` bytes into `buf[len..]`.
        let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    len
}

/// The allocator this process runs on: `"mimalloc"` or `"system"` (also
/// when [`Switchable`] is not the global allocator, as in tests: then it
/// has never been asked for memory, and Rust's default is the system's).
pub fn name() -> &'static str {
    if CHOICE.load(Ordering::Relaxed) == MIMALLOC {
        "mimalloc"
    } else {
        "system"
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

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`,
/// `mimalloc.h`; the Rust bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// While held, mimalloc purges nothing it frees (no return of pages to the
/// system to fault back in); dropping it restores the delay it had. Does
/// nothing on the system allocator. Hold it around work that frees and
/// allocates the same large buffers over and over, never across sandbox
/// starts (they fork the process, page tables and all).
#[must_use = "purging resumes when this is dropped"]
pub struct HoldFreedMemory {
    previous: Option<std::ffi::c_long>,
}

impl HoldFreedMemory {
    /// Stop purging until the value is dropped.
    pub fn start() -> Self {
        if name() != "mimalloc" {
            return Self { previous: None };
        }
        // SAFETY: mimalloc's options are plain integers it reads on use.
        let previous = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        // SAFETY: as above; -1 is mimalloc's "never purge".
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
        Self {
            previous: Some(previous),
        }
    }
}

impl Drop for HoldFreedMemory {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // SAFETY: see `start`.
            unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, previous) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::system_for;

    #[test]
    fn the_purge_delay_option_is_mimallocs() {
        // mimalloc reads `MIMALLOC_PURGE_DELAY` into this option: with the
        // variable set (checked with MIMALLOC_PURGE_DELAY=123) a wrong index
        // would read another option's value.
        // SAFETY: reads an option.
        let v = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        match std::env::var("MIMALLOC_PURGE_DELAY") {
            Ok(set) => assert_eq!(v.to_string(), set),
            Err(_) => assert!(v > 0, "purging is on by default, delayed: {v}"),
        }
    }

    fn cmd(words: &[&str]) -> Vec<u8> {
        words.iter().flat_map(|w| w.bytes().chain([0])).collect()
    }

    #[test]
    fn serve_and_its_bench_run_on_the_system_allocator() {
        for yes in [
            &["endless", "serve"][..],
            &[
                "endless",
                "--workspace",
                "ws",
                "serve",
                "--bind",
                "127.0.0.1:0",
            ],
            &["endless", "--workspace=ws", "--create", "serve"],
            &["/usr/bin/endless", "bench", "serve", "--clients", "64"],
        ] {
            assert!(system_for(&cmd(yes)), "{yes:?}");
        }
        for no in [
            &["endless"][..],
            &["endless", "train"],
            &["endless", "--workspace", "serve", "train"],
            &["endless", "bench", "ppo"],
            &["endless", "eval", "serve"],
        ] {
            assert!(!system_for(&cmd(no)), "{no:?}");
        }
        assert!(!system_for(b""));
    }
}
