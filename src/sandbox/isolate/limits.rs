//! Resource limits: cgroup v1 (pids, memory, and where present cpu and
//! freezer) when writable, else rlimits.
//!
//! The episode's writable layer is a tmpfs of its own size, and tmpfs pages
//! are charged to the memory cgroup of whoever writes them: the memory limit
//! is therefore set to the memory budget plus the layer's size, so that
//! filling the layer ends in `ENOSPC` (the shell survives) rather than in
//! the OOM killer.

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
    /// CPU time per wall-clock second (1.0 = one core).
    pub cpus: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pids: 512,
            memory_bytes: 4 << 30,
            disk_bytes: 1 << 30,
            cpus: 1.0,
        }
    }
}

/// The smallest writable layer a task's `storage` gives a session.
const MIN_LAYER_MB: u64 = 64;

/// The size in bytes of a session's writable layer: what the task asks
/// (`storage_mb`, MiB), at least [`MIN_LAYER_MB`] and at most `cap_mb`, else
/// `default` (the backend's own, which the cap lowers too).
pub fn layer_bytes(storage_mb: Option<u64>, default: u64, cap_mb: u64) -> u64 {
    let cap = cap_mb.max(MIN_LAYER_MB).saturating_mul(1 << 20);
    match storage_mb {
        Some(mb) => mb.max(MIN_LAYER_MB).saturating_mul(1 << 20).min(cap),
        None => default.min(cap),
    }
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Whether this process can make cgroups under the cgroup v1 pids and
/// memory controllers: tried by making (and removing) one, since an
/// `endless` directory another user made may exist without being ours.
pub fn cgroups_available() -> bool {
    ["pids", "memory"].iter().all(|c| {
        let dir = Path::new(CGROUP_ROOT).join(c);
        let probe = dir
            .join("endless")
            .join(format!("probe-{}", std::process::id()));
        let made = dir.join("cgroup.procs").exists() && std::fs::create_dir_all(&probe).is_ok();
        let _ = std::fs::remove_dir(&probe);
        made
    })
}

/// What a session limited by rlimits alone lacks (said in its results and
/// by `sandbox doctor`).
pub const RLIMITS_ONLY: &str = "rlimits only (no writable cgroups): memory is limited per process \
     (several processes may together use more), processes per user, and CPU not at all";

/// The cgroups of one session.
pub struct Cgroups {
    /// pids first (it lists the processes), then memory, then cpu and freezer when present.
    dirs: Vec<PathBuf>,
    /// The freezer cgroup, when the controller is mounted.
    freezer: Option<PathBuf>,
}

/// CFS period used for the CPU limit (microseconds).
const CPU_PERIOD_US: u64 = 100_000;

impl Cgroups {
    /// Create `endless/<id>` under the pids and memory controllers with
    /// `limits`; `None` when cgroups are not usable (the caller falls back
    /// to rlimits).
    pub fn create(id: &str, limits: &Limits) -> Option<Cgroups> {
        let dir = |c: &str| Path::new(CGROUP_ROOT).join(c).join("endless").join(id);
        let (pids, mem) = (dir("pids"), dir("memory"));
        let mut made = Cgroups {
            dirs: Vec::new(),
            freezer: None,
        };
        for dir in [&pids, &mem] {
            if std::fs::create_dir_all(dir).is_err() {
                made.remove();
                return None;
            }
            made.dirs.push(dir.clone());
        }
        let memory = limits.memory_bytes.saturating_add(limits.disk_bytes);
        let ok = std::fs::write(pids.join("pids.max"), limits.pids.to_string()).is_ok()
            && std::fs::write(mem.join("memory.limit_in_bytes"), memory.to_string()).is_ok();
        // Without swap accounting this file is absent; the limit above still holds.
        let _ = std::fs::write(mem.join("memory.memsw.limit_in_bytes"), memory.to_string());
        if !ok {
            made.remove();
            return None;
        }
        let cpu = dir("cpu");
        if Path::new(CGROUP_ROOT).join("cpu/cpu.cfs_quota_us").exists()
            && std::fs::create_dir_all(&cpu).is_ok()
        {
            made.dirs.push(cpu.clone());
            let quota = ((limits.cpus.max(0.01) * CPU_PERIOD_US as f64) as u64).max(1000);
            let _ = std::fs::write(cpu.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string());
            let _ = std::fs::write(cpu.join("cpu.cfs_quota_us"), quota.to_string());
        }
        let freezer = dir("freezer");
        if Path::new(CGROUP_ROOT).join("freezer/cgroup.procs").exists()
            && std::fs::create_dir_all(&freezer).is_ok()
        {
            made.dirs.push(freezer.clone());
            made.freezer = Some(freezer);
        }
        Some(made)
    }

    /// What these cgroups leave unlimited (`None`: nothing).
    pub fn gaps(&self) -> Option<String> {
        let cpu = Path::new(CGROUP_ROOT).join("cpu");
        (!self.dirs.iter().any(|d| d.starts_with(&cpu)))
            .then(|| "no CPU limit (no cpu cgroup controller)".to_string())
    }

    /// The `cgroup.procs` files a child writes `0` to, to join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Make cgroup `name` below each of the session's (within its limits,
    /// which hold for the whole subtree, and frozen and killed with it, but
    /// spared by [`Cgroups::kill_except`]); its `cgroup.procs` files.
    pub fn nested(&self, name: &str) -> std::io::Result<Vec<PathBuf>> {
        self.dirs
            .iter()
            .map(|d| {
                let dir = d.join(name);
                match std::fs::create_dir(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                    _ => Ok(dir.join("cgroup.procs")),
                }
            })
            .collect()
    }

    /// How many processes the memory limit's OOM killer has killed.
    pub fn oom_kills(&self) -> u64 {
        let Some(mem) = self.dirs.get(1) else {
            return 0;
        };
        std::fs::read_to_string(mem.join("memory.oom_control"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Process ids in the session's cgroup, and with `nested` in those
    /// below it too.
    fn pids(&self, nested: bool) -> Vec<i32> {
        let Some(dir) = self.dirs.first() else {
            return Vec::new();
        };
        let mut dirs = vec![dir.clone()];
        if nested {
            dirs.extend(subdirs(dir));
        }
        dirs.iter()
            .flat_map(|d| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    }

    /// SIGKILL every process in the cgroup except `keep` (and those in
    /// the [nested](Cgroups::nested) cgroups), again and again (frozen while
    /// signalled, so a fork bomb cannot outrun it) until only `keep` are
    /// left or `wait` has passed.
    pub fn kill_except(&self, keep: &[i32], wait: Duration) {
        self.kill(keep, false, wait);
    }

    fn kill(&self, keep: &[i32], nested: bool, wait: Duration) {
        let until = Instant::now() + wait;
        loop {
            let victims: Vec<i32> = self
                .pids(nested)
                .into_iter()
                .filter(|p| !keep.contains(p))
                .collect();
            if victims.is_empty() || Instant::now() >= until {
                break;
            }
            self.freeze(true);
            for pid in victims {
                // SAFETY: kill(2) on a process of this session's cgroup.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            self.freeze(false);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn freeze(&self, frozen: bool) {
        if let Some(f) = &self.freezer {
            let state = if frozen { "FROZEN" } else { "THAWED" };
            let _ = std::fs::write(f.join("freezer.state"), state);
        }
    }

    /// Kill everything (in the nested cgroups too), wait (up to `wait`)
    /// until the cgroup is empty, and remove it.
    pub fn kill_all_and_remove(&mut self, wait: Duration) {
        self.kill(&[], true, wait);
        self.remove();
    }

    fn remove(&mut self) {
        for dir in self.dirs.drain(..) {
            for dir in subdirs(&dir).into_iter().chain([dir]) {
                for _ in 0..50 {
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
}

/// The cgroups directly below `dir`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
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
            dirs: ["pids", "memory", "cpu", "freezer"]
                .iter()
                .map(|c| Path::new(CGROUP_ROOT).join(c).join("endless").join(&name))
                .filter(|d| d.exists())
                .collect(),
            freezer: Some(Path::new(CGROUP_ROOT).join("freezer/endless").join(&name))
                .filter(|d| d.exists()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writable_layer_is_the_tasks_storage_within_the_cap() {
        const MIB: u64 = 1 << 20;
        let default = Limits::default().disk_bytes;
        // Nothing asked: the backend's default (1 GiB), lowered by a smaller cap.
        assert_eq!(layer_bytes(None, default, 10_240), default);
        assert_eq!(layer_bytes(None, default, 512), 512 * MIB);
        // Asked: what the task says, at most the cap, at least 64 MiB.
        assert_eq!(layer_bytes(Some(1536), default, 10_240), 1536 * MIB);
        assert_eq!(layer_bytes(Some(40_960), default, 10_240), 10_240 * MIB);
        assert_eq!(layer_bytes(Some(1), default, 10_240), 64 * MIB);
    }
}
