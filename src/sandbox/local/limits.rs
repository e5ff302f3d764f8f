//! Resource limits: cgroup v1 (pids, memory) when writable, else rlimits.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Limits applied to every session (and image build) of the local backend.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Limits {
    /// Most processes (and threads) at once.
    pub pids: u32,
    /// Most memory in bytes (the episode's tmpfs counts too).
    pub memory_bytes: u64,
    /// Size of the episode's writable layer (tmpfs) in bytes.
    pub disk_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pids: 512,
            memory_bytes: 4 << 30,
            disk_bytes: 4 << 30,
        }
    }
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Whether cgroup v1 pids and memory controllers are writable here.
pub fn cgroups_available() -> bool {
    ["pids", "memory"].iter().all(|c| {
        let dir = Path::new(CGROUP_ROOT).join(c);
        dir.join("cgroup.procs").exists() && std::fs::create_dir_all(dir.join("endless")).is_ok()
    })
}

/// The cgroups of one session.
pub struct Cgroups {
    dirs: Vec<PathBuf>,
}

impl Cgroups {
    /// Create `endless/<id>` under the pids and memory controllers with
    /// `limits`; `None` when cgroups are not usable (the caller falls back
    /// to rlimits).
    pub fn create(id: &str, limits: &Limits) -> Option<Cgroups> {
        let pids = Path::new(CGROUP_ROOT).join("pids/endless").join(id);
        let mem = Path::new(CGROUP_ROOT).join("memory/endless").join(id);
        let mut made = Cgroups { dirs: Vec::new() };
        for dir in [&pids, &mem] {
            if std::fs::create_dir_all(dir).is_err() {
                made.remove();
                return None;
            }
            made.dirs.push(dir.clone());
        }
        let ok = std::fs::write(pids.join("pids.max"), limits.pids.to_string()).is_ok()
            && std::fs::write(
                mem.join("memory.limit_in_bytes"),
                limits.memory_bytes.to_string(),
            )
            .is_ok();
        // Without swap accounting this file is absent; the limit above still holds.
        let _ = std::fs::write(
            mem.join("memory.memsw.limit_in_bytes"),
            limits.memory_bytes.to_string(),
        );
        if !ok {
            made.remove();
            return None;
        }
        Some(made)
    }

    /// The `cgroup.procs` files a child writes `0` to, to join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Process ids in the session's cgroup.
    pub fn pids(&self) -> Vec<i32> {
        let Some(dir) = self.dirs.first() else {
            return Vec::new();
        };
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// SIGKILL every process in the cgroup except `keep`.
    pub fn kill_except(&self, keep: &[i32]) {
        for pid in self.pids() {
            if !keep.contains(&pid) {
                // SAFETY: kill(2) on a process of this session's cgroup.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Kill everything, wait (up to `wait`) until the cgroup is empty, and remove it.
    pub fn kill_all_and_remove(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() >= until {
                break;
            }
            self.kill_except(&[]);
            std::thread::sleep(Duration::from_millis(2));
        }
        self.remove();
    }

    fn remove(&mut self) {
        for dir in self.dirs.drain(..) {
            for _ in 0..50 {
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        if !self.dirs.is_empty() {
            self.kill_all_and_remove(Duration::from_secs(2));
        }
    }
}

/// Kill what is left in cgroups of sessions whose owner process died, and
/// remove those cgroups.
pub fn remove_stale_cgroups() {
    let base = Path::new(CGROUP_ROOT).join("pids/endless");
    let Ok(entries) = std::fs::read_dir(&base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = super::layout::owner_pid(&name) else {
            continue;
        };
        if super::layout::pid_alive(pid) {
            continue;
        }
        let mut stale = Cgroups {
            dirs: vec![
                entry.path(),
                Path::new(CGROUP_ROOT).join("memory/endless").join(&name),
            ],
        };
        stale.kill_all_and_remove(Duration::from_secs(2));
    }
}

/// rlimits used when cgroups are not available.
pub fn fallback_rlimits(limits: &Limits) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    vec![
        (libc::RLIMIT_NPROC, limits.pids as libc::rlim_t),
        (libc::RLIMIT_AS, limits.memory_bytes as libc::rlim_t),
    ]
}
