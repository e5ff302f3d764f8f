//! File descriptors handed to sandboxed processes.
//!
//! Whoever starts `endless` may leave descriptors open without close-on-exec
//! (a directory opened by a shell, a socket): inherited by a sandbox, they
//! would reach host files through `/proc/self/fd/N`. Every spawn path marks
//! every descriptor from 3 up close-on-exec in the child, except the few the
//! child is meant to have.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Mark every descriptor from 3 up close-on-exec, then clear the flag on
/// `keep`.
///
/// # Safety
/// Meant for `pre_exec`: makes only async-signal-safe system calls.
pub unsafe fn close_inherited(keep: &[RawFd]) -> std::io::Result<()> {
    // SAFETY: descriptor-flag system calls on plain integers, and a zeroed
    // `rlimit` (a struct of integers) for `getrlimit` to fill.
    unsafe {
        let rc = libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if rc < 0 {
            // Kernels before 5.11: walk the table.
            let mut lim: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(65_536) as RawFd
            } else {
                1024
            };
            for fd in 3..max {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        for &fd in keep {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Mark every descriptor this process inherited from 3 up close-on-exec.
/// `endless` opens its own descriptors close-on-exec; this covers those it
/// was started with.
pub fn seal_inherited() {
    // SAFETY: only changes descriptor flags.
    unsafe {
        let _ = close_inherited(&[]);
    }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fresh descriptors that we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are valid and owned by nobody else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// `Err(errno)` when a system call returned a negative value.
pub fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Give the calling process a private copy of its mount namespace, whose
/// mounts do not propagate back.
///
/// # Safety
/// Async-signal-safe (meant for `pre_exec`).
pub unsafe fn private_mount_namespace() -> std::io::Result<()> {
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        make_mounts_private()
    }
}

/// Stop every mount of the calling process's namespace from propagating.
///
/// # Safety
/// Async-signal-safe.
pub unsafe fn make_mounts_private() -> std::io::Result<()> {
    unsafe {
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))
    }
}
