//! A built task image, as returned by [`Backend::prepare`](super::Backend::prepare).

use std::collections::BTreeMap;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::task::Task;

/// A task's environment, built once and cached; sessions start from it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Image {
    /// Backend that built it.
    pub backend: String,
    /// Content hash of the environment definition, its files and the
    /// settings that shape the image.
    pub hash: String,
    /// Where it lives: the layer directory (`local`), the `.sif` file
    /// (`apptainer`) or the build context (`oci`).
    pub path: PathBuf,
    /// Image reference for container engines (`oci`), if any.
    pub reference: Option<String>,
    /// Task it was built for.
    pub task_id: String,
    /// Account the agent's shell runs as.
    pub user: String,
    /// Its uid inside the sandbox.
    pub uid: u32,
    /// Its gid inside the sandbox.
    pub gid: u32,
    /// Its home directory.
    pub home: String,
    /// Where the shell starts.
    pub workdir: String,
    /// Whether sessions get network access.
    pub network: bool,
    /// Thousandths of a CPU core a session may use (the task's
    /// `[environment] cpus`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u32>,
    /// Memory in MiB a session may use (the task's `[environment]
    /// memory_mb`), when set: it lowers the backend's limit, never raises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Size in MiB of a session's writable layer (the task's `[environment]
    /// storage_mb` or `storage`), when set: the backend caps it
    /// (`[images] max_session_storage_mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_mb: Option<u64>,
    /// The pulled image this one was built `FROM`: its canonical reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// That image's unpacked layers, top first (`local`; empty: the host base).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_layers: Vec<PathBuf>,
    /// What the base is a substitute for, when the task asked for another
    /// (an alias, or the host's directories in place of an unavailable image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_note: Option<String>,
    /// The cached build-step layers stacked under the image's own layer
    /// (`local`), by overlay part (`root`, `sys/<dir>` on the host base),
    /// top first; parts no step wrote to are absent. Empty for images
    /// that hold a copy of their steps' files (built before layers were
    /// shared, or past the stacking cap).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub step_layers: BTreeMap<String, Vec<PathBuf>>,
}

impl Image {
    /// A plain image of backend `backend` for unit tests: task `task_id`,
    /// user `user` (1000:1000, home and working directory its home), no
    /// network, limits, base or layers.
    #[cfg(test)]
    pub(crate) fn for_test(backend: &str, hash: &str, path: &str, task_id: &str) -> Image {
        Image {
            backend: backend.into(),
            hash: hash.into(),
            path: path.into(),
            reference: None,
            task_id: task_id.into(),
            user: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
            workdir: "/home/user".into(),
            network: false,
            cpu_millis: None,
            memory_mb: None,
            storage_mb: None,
            base: None,
            base_layers: Vec::new(),
            step_layers: Default::default(),
            base_note: None,
        }
    }

    /// The step layers stacked for overlay part `part`, top first (see
    /// [`Image::step_layers`]).
    pub fn step_lowers(&self, part: &str) -> &[PathBuf] {
        self.step_layers.get(part).map_or(&[], Vec::as_slice)
    }
}

/// The content hash of what shapes a task's image on `backend`: every file
/// under `environment/`, the agent account, the workdir and network flag.
pub fn image_hash(task: &Task, backend: &str, extra: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"endless-image-v1\0");
    h.update(backend.as_bytes());
    h.update(b"\0");
    h.update(extra.as_bytes());
    h.update(b"\0");
    h.update(task.meta.agent.user.as_bytes());
    h.update(b"\0");
    h.update(task.meta.environment.workdir.as_bytes());
    h.update([task.meta.environment.network as u8]);
    for (path, entry) in task.environment.iter() {
        h.update((path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update([entry.executable as u8]);
        h.update((entry.bytes.len() as u64).to_le_bytes());
        h.update(&entry.bytes);
    }
    hex::encode(h.finalize())
}

/// The home directory of `user`.
pub fn home_of(user: &str) -> String {
    if user == "root" {
        "/root".into()
    } else {
        format!("/home/{user}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{FileTree, TaskMeta};

    fn task() -> Task {
        let mut t = Task {
            meta: TaskMeta::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: FileTree::default(),
            tests: FileTree::default(),
            solution: FileTree::default(),
        };
        t.meta.agent.user = "user".into();
        t.environment.insert_text("setup.sh", "echo hi");
        t
    }

    #[test]
    fn hash_follows_environment_only() {
        let a = task();
        let mut b = task();
        b.instruction = "changed".into();
        b.tests.insert_text("test_final_state.py", "x");
        assert_eq!(image_hash(&a, "local", ""), image_hash(&b, "local", ""));
        b.environment.insert_text("files/a", "1");
        assert_ne!(image_hash(&a, "local", ""), image_hash(&b, "local", ""));
        assert_ne!(image_hash(&a, "local", ""), image_hash(&a, "oci", ""));
        let mut c = task();
        c.meta.environment.network = true;
        assert_ne!(image_hash(&a, "local", ""), image_hash(&c, "local", ""));
    }
}
