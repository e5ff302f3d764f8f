//! Detaching task-controlled processes from the operator's terminal.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Make `cmd`'s process the leader of a new session and process group
/// (`setsid`): it has no controlling terminal, so what it runs can neither
/// open the operator's `/dev/tty` nor inject input into it (`TIOCSTI`
/// works only on a process's controlling terminal), and one `kill(-pid)`
/// reaches all of it. Every spawn of task-controlled code goes through here
/// (build steps, verifiers, setup and root commands) or a PTY of its own.
pub fn detach_from_terminal(cmd: &mut Command) {
    // SAFETY: `leave_terminal` only makes async-signal-safe calls.
    unsafe {
        cmd.pre_exec(|| leave_terminal());
    }
}

/// Set in a spawned child, between fork and exec, once it leads a session
/// of its own: a process an earlier step forked from it (to enter a PID
/// namespace) stays in that session, within reach of `kill(-pid)`. Never
/// set in `endless` itself: each child has its own copy.
static IN_OWN_SESSION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Between fork and exec: become the leader of a new session (see
/// [`detach_from_terminal`]), unless this spawn did already, in this
/// process or in the one it was forked from. A step that forks before
/// exec calls this first, so the fork stays in the session.
///
/// # Safety
/// Meant for `pre_exec`: only async-signal-safe calls, no allocation.
pub unsafe fn leave_terminal() -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    if IN_OWN_SESSION.load(Ordering::Relaxed) {
        return Ok(());
    }
    // SAFETY: setsid is async-signal-safe; a freshly forked child is never
    // a process group leader, so it cannot fail with EPERM.
    if unsafe { libc::setsid() } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    IN_OWN_SESSION.store(true, Ordering::Relaxed);
    Ok(())
}
