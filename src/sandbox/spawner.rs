//! One thread, alive as long as the process, that forks every sandbox.
//!
//! bubblewrap's `--die-with-parent` is `PR_SET_PDEATHSIG`, which fires when
//! the *thread* that forked it exits, not the process. A sandbox spawned
//! from a tokio blocking thread was killed when the runtime retired that
//! thread (10 s idle): a served session or sandbox died whenever its client
//! paused. So sessions are forked here, by a thread that never exits and
//! does nothing else; the caller waits for the result (one channel round
//! trip, microseconds beside the fork itself).

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender, SyncSender};
use std::sync::OnceLock;

/// A command to spawn, and where its outcome goes.
type Request = (Command, SyncSender<io::Result<Child>>);

/// The spawner thread's queue (`None`: the thread could not be started).
static SPAWNER: OnceLock<Option<Sender<Request>>> = OnceLock::new();

/// Spawn `cmd` from the spawner thread, so that a child dying with its
/// parent thread lives as long as this process. The command (and what its
/// `pre_exec` closures own) is dropped once the child runs.
pub fn spawn(cmd: Command) -> io::Result<Child> {
    let queue = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("endless-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let child = cmd.spawn();
                    drop(cmd);
                    let _ = reply.send(child);
                }
            })
            .ok()
            .map(|_| tx)
    });
    let queue = queue
        .as_ref()
        .ok_or_else(|| io::Error::other("the sandbox spawner thread could not be started"))?;
    let (reply, answer) = mpsc::sync_channel(1);
    queue
        .send((cmd, reply))
        .map_err(|_| io::Error::other("the sandbox spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the sandbox spawner thread is gone"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child's parent-death signal is tied to the spawner thread, which
    /// outlives the (short-lived) thread that asked for the child.
    #[test]
    fn a_child_dying_with_its_parent_outlives_the_asking_thread() {
        let asked = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            // SAFETY: prctl is async-signal-safe.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            spawn(cmd).unwrap()
        });
        let mut child = asked.join().unwrap();
        // The asking thread has exited: were it the parent, the child
        // would get SIGKILL now.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(child.try_wait().unwrap().is_none(), "the child died");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
