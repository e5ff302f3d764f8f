//! The wait a cgroup v1 move pays, started before the move.
//!
//! Moving a process into a cgroup takes the kernel's cgroup threadgroup
//! lock for writing, which first waits for an RCU grace period unless a
//! move ended within the last one: 5-12 ms here, most of a pre-warmed
//! verification. The verifier's test runner can only be moved once it was
//! forked inside the sandbox, a few milliseconds after the request; so
//! when the request goes out we move this process into the pids cgroup it
//! is already in (a move that changes nothing), and the runner's move then
//! shares that grace period or follows in the one after it.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::thread::JoinHandle;

/// A no-op cgroup move running on its own thread.
pub(super) struct GracePeriod(Option<JoinHandle<()>>);

impl GracePeriod {
    /// Start it (nothing when this process is in no cgroup v1 pids
    /// hierarchy we can write to; it is only ever a head start).
    pub(super) fn start() -> GracePeriod {
        let Some(procs) = own_pids_cgroup() else {
            return GracePeriod(None);
        };
        let spawned = std::thread::Builder::new()
            .name("cgroup-grace".into())
            .spawn(move || {
                // Our own pid into our own cgroup: nothing moves.
                let _ = std::fs::write(procs, std::process::id().to_string());
            });
        GracePeriod(spawned.ok())
    }

    /// Wait until the move has returned.
    pub(super) fn join(mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

/// `cgroup.procs` of the cgroup v1 pids hierarchy's cgroup this process is
/// in (the controller the session limits always use), read once.
fn own_pids_cgroup() -> Option<PathBuf> {
    static PROCS: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROCS
        .get_or_init(|| {
            let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            pids_cgroup_procs(&text)
        })
        .clone()
}

/// The pids hierarchy's `cgroup.procs` named by `/proc/self/cgroup` text.
fn pids_cgroup_procs(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if !controllers.split(',').any(|c| c == "pids") || !path.starts_with('/') {
            return None;
        }
        let procs = PathBuf::from(format!(
            "/sys/fs/cgroup/pids{}/cgroup.procs",
            path.trim_end_matches('/')
        ));
        procs.exists().then_some(procs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_pids_line_only() {
        let text = "9:name=systemd:/\n8:pids:/\n4:memory:/a/b\n0::/\n";
        let got = pids_cgroup_procs(text);
        let root = PathBuf::from("/sys/fs/cgroup/pids/cgroup.procs");
        assert_eq!(got, root.exists().then_some(root));
        assert_eq!(pids_cgroup_procs("4:memory:/a\n0::/\n"), None);
        assert_eq!(
            pids_cgroup_procs("8:pids:/no/such/cgroup-of-endless\n"),
            None
        );
    }
}
