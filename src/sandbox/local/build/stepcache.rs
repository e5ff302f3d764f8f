//! The per-step build cache: each setup step that changes the filesystem
//! leaves a layer (the upper directories of the overlay it ran in), stored
//! once under a key made of its parent's key and its own inputs (the
//! instruction after ARG/ENV substitution, the digests of the files it
//! copies). Tasks that share a prefix of steps build it once; a rebuild
//! after a change starts at the changed step.
//!
//! ```text
//! <cache>/local/steps/<key>/root/        the step's upper directory
//! <cache>/local/steps/<key>/sys/<dir>/   (host base) one per system directory
//! <cache>/local/steps/<key>/step.json    what ran, when, how long, the agent's ids
//! <cache>/local/steps/<key>.lock         held while the step is built
//! ```
//!
//! A layer is built under a `.build-<pid>-...` name and renamed into place
//! when complete, so a failed, killed or out-of-space build leaves nothing
//! that a later build would take for a finished layer.
//!
//! Built images reference their steps' layers (sessions stack them, see
//! `image.rs`), so a layer lives as long as an image's `build.json` names
//! it. A build holds the lock of each layer it uses shared (exclusive only
//! while it builds one) until its image is in place; [`prune_steps`]
//! removes only layers whose lock it can take exclusively.
//!
//! The cache directory is mode 0700, and a step's output keeps no
//! set-user-id or set-group-id bit: they are stripped from every file and
//! directory of the layer before it is stored (a step's `chmod u+s` would
//! otherwise leave, in the host's cache, a program that runs with the
//! sandbox root's host ids, or the operator's when rootless).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::sandbox::isolate::layout;
use crate::sandbox::{Image, SandboxError};
use crate::task::envdef::Step;
use crate::task::FileTree;

/// Where a built image records how each of its steps was had.
pub const BUILD_RECORD: &str = "build.json";

/// How one step of a build was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepOutcome {
    /// Run now; its layer is cached for later builds.
    Built,
    /// Its layer was in the cache.
    Cached,
    /// It only sets state for later steps (`ENV`, `USER`): no layer.
    Config,
}

/// One step of an image build, as recorded in the image's `build.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltStep {
    /// Step number (0: the agent account; the last: finishing touches).
    pub index: usize,
    /// The step, as written (with its file and line where known).
    pub step: String,
    /// Its cache key.
    pub key: String,
    /// How it was had.
    pub outcome: StepOutcome,
    /// The earlier stage it belongs to (multi-stage builds; `None`: the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<usize>,
    /// Seconds it took now (running, or merging a cached layer).
    pub seconds: f64,
}

/// What is stored beside a cached layer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMeta {
    /// The step, as written.
    pub step: String,
    /// Seconds it took to run.
    pub seconds: f64,
    /// When it ran (RFC 3339).
    pub created: String,
    /// The agent's uid and gid, reported by the finishing step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<(u32, u32)>,
}

/// The step records of a `local` image (empty for images built before the
/// per-step cache, or by another backend).
pub fn build_record(image: &Image) -> Vec<BuiltStep> {
    // trusted: metadata endless wrote beside the image or layer
    std::fs::read(image.path.join(BUILD_RECORD))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// The key of the first step: what the build starts from.
pub fn root_key(base_id: &str, rootless: bool, network: bool) -> String {
    chain(
        "endless-step-v1",
        &format!("{base_id}\0rootless={rootless}\0network={network}"),
    )
}

/// The key of a step whose parent has key `parent` and whose inputs are
/// described by `input`.
pub fn chain(parent: &str, input: &str) -> String {
    let mut h = Sha256::new();
    h.update(parent.as_bytes());
    h.update(b"\0");
    h.update((input.len() as u64).to_le_bytes());
    h.update(input.as_bytes());
    hex::encode(h.finalize())
}

/// What a step's key covers besides its parent: its text and, for steps
/// that read the build context, the digest of what they read; for a
/// `COPY --from`, the key of the stage it copies from (`stage_keys`).
pub fn step_input(step: &Step, context: &FileTree, stage_keys: &[String]) -> String {
    match step {
        Step::CopyFrom {
            index, src, dst, ..
        } => format!(
            "COPYFROM\0{}\0{src}\0{dst}",
            stage_keys.get(*index).map(String::as_str).unwrap_or("")
        ),
        Step::Copy { src, dst } => {
            format!("COPY\0{src}\0{dst}\0{}", tree_digest(context, Some(src)))
        }
        Step::Script(file) => format!("SCRIPT\0{file}\0{}", tree_digest(context, None)),
        Step::Run(s) => format!("RUN\0{s}"),
        Step::Env { key, value } => format!("ENV\0{key}\0{value}"),
        Step::Workdir(w) => format!("WORKDIR\0{w}"),
        Step::User(u) => format!("USER\0{u}"),
    }
}

/// The digest of the context files under `src` (all of them for `None`,
/// `.` or an empty path): names, executable bits and contents.
fn tree_digest(context: &FileTree, src: Option<&str>) -> String {
    let prefix = src
        .map(|s| s.trim_start_matches("./").trim_end_matches('/'))
        .filter(|s| !s.is_empty() && *s != ".");
    let mut h = Sha256::new();
    for (path, entry) in context.iter() {
        let inside = match prefix {
            None => true,
            Some(p) => path == p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')),
        };
        if inside {
            h.update((path.len() as u64).to_le_bytes());
            h.update(path.as_bytes());
            h.update([entry.executable as u8]);
            h.update((entry.bytes.len() as u64).to_le_bytes());
            h.update(&entry.bytes);
        }
    }
    hex::encode(h.finalize())
}

/// The step cache under one directory.
#[derive(Debug, Clone)]
pub struct StepCache {
    dir: PathBuf,
}

/// A lock on a file (exclusive, or shared), released on drop.
pub struct Lock {
    _file: File,
}

/// The suffix of a layer's or an image's build lock. Builders wait on it
/// exclusively; users hold the `.lock` beside it shared, and only a prune
/// takes that one exclusively (never waiting). Had builders waited on the
/// use lock, a second session of an image would wait for the first to end.
pub const BUILD_LOCK: &str = ".build.lock";

/// `flock(2)` `file` with `op`, retried when interrupted.
fn flock(file: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor we own; released when it closes.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Take the exclusive lock on `path` (created if missing), waiting for
/// whoever holds it.
pub fn lock(path: &Path) -> Result<Lock, SandboxError> {
    lock_as(path, libc::LOCK_EX)
}

/// Take the lock on `path` (created if missing) as `op` says (`LOCK_EX`
/// or `LOCK_SH`), waiting for whoever holds it otherwise.
fn lock_as(path: &Path, op: libc::c_int) -> Result<Lock, SandboxError> {
    if let Some(dir) = path.parent() {
        crate::fsutil::create_private_dir(dir)
            .map_err(SandboxError::io("create cache directory", dir))?;
    }
    // trusted: a lock file in the private cache
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(SandboxError::io("open lock file", path))?;
    flock(&file, op).map_err(SandboxError::io("lock", path))?;
    Ok(Lock { _file: file })
}

/// The part `part` (`root`, `sys/<dir>`) of each of `layers` (bottom
/// first) that holds anything, top first: the lower directories a stack
/// of them takes (an empty one changes nothing).
pub fn layer_parts(layers: &[PathBuf], part: &str) -> Vec<PathBuf> {
    layers
        .iter()
        .rev()
        .map(|l| l.join(part))
        // trusted: stored step layers, read-only once stored
        .filter(|d| std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some()))
        .collect()
}

impl StepCache {
    /// The cache under `dir`.
    pub fn new(dir: &Path) -> StepCache {
        StepCache {
            dir: dir.to_path_buf(),
        }
    }

    /// The layer directory of `key` (complete once its `step.json` exists).
    pub fn layer(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// The metadata of the cached layer `key`, if it is complete.
    pub fn get(&self, key: &str) -> Option<StepMeta> {
        // trusted: metadata endless wrote beside the image or layer
        let bytes = std::fs::read(self.layer(key).join("step.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Lock `key` exclusively while it is built (its build lock, apart from
    /// the use lock: a session holding the layer never stops a builder).
    pub fn build_lock(&self, key: &str) -> Result<Lock, SandboxError> {
        lock(&self.dir.join(format!("{key}{BUILD_LOCK}")))
    }

    /// Lock `key` shared while its layer is used: a prune skips it (waits
    /// while a prune removes it).
    pub fn lock_shared(&self, key: &str) -> Result<Lock, SandboxError> {
        lock_as(&self.dir.join(format!("{key}.lock")), libc::LOCK_SH)
    }

    /// A fresh directory to build a layer in.
    pub fn temp(&self) -> Result<PathBuf, SandboxError> {
        crate::fsutil::create_private_dir(&self.dir)
            .map_err(SandboxError::io("create cache directory", &self.dir))?;
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let p = self.dir.join(format!(
            ".build-{}-{}",
            std::process::id(),
            hex::encode(rnd)
        ));
        // trusted: our fresh layer directory
        std::fs::create_dir_all(&p).map_err(SandboxError::io("create layer directory", &p))?;
        Ok(p)
    }

    /// Complete the layer built in `tmp` as `key`: its set-id bits are
    /// stripped, its metadata is written, then it is renamed into place (a
    /// layer already there wins).
    pub fn commit(&self, tmp: &Path, key: &str, meta: &StepMeta) -> Result<PathBuf, SandboxError> {
        strip_setid(tmp)?;
        let bytes =
            serde_json::to_vec_pretty(meta).map_err(|e| SandboxError::Start(e.to_string()))?;
        let at = tmp.join("step.json");
        crate::fsutil::write_atomic(&at, &bytes).map_err(SandboxError::io("write step", &at))?;
        let dest = self.layer(key);
        if self.get(key).is_some() {
            layout::remove_tree(tmp);
        } else {
            if dest.exists() {
                layout::remove_tree(&dest); // an incomplete leftover
            }
            // trusted: our finished layer, into the private step cache
            std::fs::rename(tmp, &dest).map_err(SandboxError::io("store step layer", &dest))?;
        }
        Ok(dest)
    }
}

/// Remove the set-user-id and set-group-id bits from everything under
/// `dir` (symlinks are not followed). A directory its owner made
/// unreadable is opened up while it is walked, then given its mode back.
pub fn strip_setid(dir: &Path) -> Result<(), SandboxError> {
    /// Work left: a path to visit, or a directory's mode to restore once
    /// everything below it was visited.
    enum Todo {
        Visit(PathBuf),
        Restore(PathBuf, u32),
    }
    let mut todo = vec![Todo::Visit(dir.to_path_buf())];
    while let Some(next) = todo.pop() {
        let path = match next {
            Todo::Visit(path) => path,
            Todo::Restore(path, mode) => {
                set_mode(&path, mode, "restore step output mode")?;
                continue;
            }
        };
        // trusted: step output after its sandbox ended, links skipped
        let meta = std::fs::symlink_metadata(&path)
            .map_err(SandboxError::io("stat step output", &path))?;
        let mode = meta.mode() & 0o7777;
        let clean = crate::fsutil::without_setid(mode);
        if meta.file_type().is_symlink() {
            continue;
        }
        if clean != mode {
            set_mode(&path, clean, "strip set-id bits from step output")?;
        }
        if !meta.is_dir() {
            continue;
        }
        if clean & 0o700 != 0o700 && meta.uid() == current_uid() {
            // Our own locked directory (rootless): open it for the walk.
            set_mode(&path, clean | 0o700, "read step output")?;
            todo.push(Todo::Restore(path.clone(), clean));
        }
        let entries =
            // trusted: step output after its sandbox ended, links skipped
            std::fs::read_dir(&path).map_err(SandboxError::io("read step output", &path))?;
        for entry in entries {
            let entry = entry.map_err(SandboxError::io("read step output", &path))?;
            todo.push(Todo::Visit(entry.path()));
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32, what: &str) -> Result<(), SandboxError> {
    // trusted: step output after its sandbox ended, links skipped
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(SandboxError::io(what.to_string(), path))
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// What [`prune_steps`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StepPruneReport {
    /// Cached step layers no built image names.
    pub layers: usize,
    /// Bytes they took.
    pub bytes: u64,
}

/// Remove the cached step layers of the `local` backend caching under
/// `cache_dir` that no built image's `build.json` names, skipping those a
/// build holds (locked, shared or not). Images stack the layers they
/// name, so those stay; an evicted image's layers go here once no other
/// image names them.
///
/// A layer is locked before the records are read again: a build holds
/// its layers until its image (and its record) is in place, so a layer
/// locked here that no record then names is used by nothing, while a
/// record read only before the lock would miss an image that landed
/// meanwhile and take its layers from under it.
pub fn prune_steps(cache_dir: &Path) -> Result<StepPruneReport, SandboxError> {
    /// Layers locked at once (each lock is an open file).
    const BATCH: usize = 256;
    let local = cache_dir.join("local");
    let cache = StepCache::new(&local.join("steps"));
    let named = named_steps(&local.join("images"));
    // trusted: the private cache's own directories
    let unnamed: Vec<String> = std::fs::read_dir(&cache.dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && !n.ends_with(".lock") && !named.contains(n))
        .collect();
    let mut report = StepPruneReport::default();
    for batch in unnamed.chunks(BATCH) {
        let mut locked = Vec::new();
        for name in batch {
            // None: a build or a session is using it.
            if let Some(held) = try_lock(&cache.dir.join(format!("{name}.lock")))? {
                locked.push((name, held));
            }
        }
        let named = named_steps(&local.join("images"));
        for (name, _held) in locked.iter().filter(|(n, _)| !named.contains(*n)) {
            let path = cache.layer(name);
            report.bytes += walkdir::WalkDir::new(&path)
                .into_iter()
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file() && std::os::unix::fs::MetadataExt::nlink(m) == 1)
                .map(|m| m.len())
                .sum::<u64>();
            layout::remove_tree(&path);
            // trusted: the private cache's own directories
            let _ = std::fs::remove_file(cache.dir.join(format!("{name}.lock")));
            // trusted: the private cache's own directories
            let _ = std::fs::remove_file(cache.dir.join(format!("{name}{BUILD_LOCK}")));
            report.layers += 1;
        }
    }
    Ok(report)
}

/// The step keys the build records of the images under `images` name.
fn named_steps(images: &Path) -> std::collections::HashSet<String> {
    // trusted: the private cache's own directories
    std::fs::read_dir(images)
        .into_iter()
        .flatten()
        .flatten()
        // trusted: the private cache's own build records
        .filter_map(|entry| std::fs::read(entry.path().join(BUILD_RECORD)).ok())
        .flat_map(|bytes| serde_json::from_slice::<Vec<BuiltStep>>(&bytes).unwrap_or_default())
        .map(|s| s.key)
        .collect()
}

/// The lock on `path` if nobody holds it (`None`: someone does).
pub(super) fn try_lock(path: &Path) -> Result<Option<Lock>, SandboxError> {
    // trusted: a lock file in the private cache
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(SandboxError::io("open lock file", path))?;
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(Some(Lock { _file: file }));
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        return Ok(None);
    }
    Err(SandboxError::io("lock", path)(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_parents_and_copied_files() {
        let mut ctx = FileTree::default();
        ctx.insert_text("files/a.txt", "one");
        ctx.insert_text("other.txt", "x");
        let copy = Step::Copy {
            src: "files/".into(),
            dst: "/app/".into(),
        };
        let root = root_key("host", false, true);
        let k1 = chain(&root, &step_input(&copy, &ctx, &[]));
        assert_eq!(k1, chain(&root, &step_input(&copy, &ctx, &[])));
        assert_ne!(
            k1,
            chain(&root_key("host", true, true), &step_input(&copy, &ctx, &[]))
        );
        // A file the step does not copy leaves its key alone; one it copies changes it.
        ctx.insert_text("other.txt", "y");
        assert_eq!(k1, chain(&root, &step_input(&copy, &ctx, &[])));
        ctx.insert_text("files/a.txt", "two");
        assert_ne!(k1, chain(&root, &step_input(&copy, &ctx, &[])));
        // `files2/` is not under `files/`.
        let before = step_input(&copy, &ctx, &[]);
        ctx.insert_text("files2/b.txt", "z");
        assert_eq!(before, step_input(&copy, &ctx, &[]));
        // A script sees the whole context.
        let script = Step::Script("setup.sh".into());
        let s1 = step_input(&script, &ctx, &[]);
        ctx.insert_text("other.txt", "z");
        assert_ne!(s1, step_input(&script, &ctx, &[]));
    }

    #[test]
    fn layers_are_complete_or_absent() {
        let d = tempfile::tempdir().unwrap();
        let cache = StepCache::new(d.path());
        let tmp = cache.temp().unwrap();
        std::fs::create_dir_all(tmp.join("root/etc")).unwrap();
        assert!(cache.get("k").is_none());
        let meta = StepMeta {
            step: "RUN true".into(),
            ..Default::default()
        };
        let at = cache.commit(&tmp, "k", &meta).unwrap();
        assert!(at.join("root/etc").is_dir() && !tmp.exists());
        assert_eq!(cache.get("k").unwrap().step, "RUN true");
        // A second build of the same step keeps the first layer.
        let tmp2 = cache.temp().unwrap();
        cache.commit(&tmp2, "k", &meta).unwrap();
        assert!(at.join("root/etc").is_dir() && !tmp2.exists());
        let _held = cache.build_lock("k").unwrap();
    }
}

#[cfg(test)]
mod setid_tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn stored_step_layers_keep_no_set_id_bits_and_the_cache_is_private() {
        let d = tempfile::tempdir().unwrap();
        let cache = StepCache::new(&d.path().join("steps"));
        let tmp = cache.temp().unwrap();
        let root = tmp.join("root");
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::create_dir_all(root.join("locked/inner")).unwrap();
        for (f, m) in [
            ("usr/bin/su", 0o4755),
            ("usr/bin/wall", 0o2711),
            ("locked/inner/x", 0o6700),
        ] {
            std::fs::write(root.join(f), "x").unwrap();
            std::fs::set_permissions(root.join(f), std::fs::Permissions::from_mode(m)).unwrap();
        }
        std::fs::set_permissions(root.join("usr"), std::fs::Permissions::from_mode(0o2755))
            .unwrap();
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        std::os::unix::fs::symlink("/usr/bin/passwd", root.join("link")).unwrap();
        let at = cache.commit(&tmp, "k", &StepMeta::default()).unwrap();
        let root = at.join("root");
        assert_eq!(mode(&root.join("usr/bin/su")), 0o755);
        assert_eq!(mode(&root.join("usr/bin/wall")), 0o711);
        assert_eq!(mode(&root.join("usr")), 0o755);
        assert_eq!(
            mode(&root.join("locked")),
            0o000,
            "a locked directory keeps its mode"
        );
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert_eq!(mode(&root.join("locked/inner/x")), 0o700);
        assert_eq!(mode(&d.path().join("steps")), 0o700);
    }
}

#[cfg(test)]
mod prune_tests {
    use super::*;

    #[test]
    fn a_layer_in_use_never_stops_its_builder() {
        // A session holds a layer shared for its whole life; a second build
        // of the same image must still get the layer's build lock at once
        // (it once waited on the use lock until the session ended).
        let d = tempfile::tempdir().unwrap();
        let cache = StepCache::new(&d.path().join("local/steps"));
        let _session = cache.lock_shared("k").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = cache.dir.clone();
        std::thread::spawn(move || {
            let _building = StepCache::new(&dir).build_lock("k").unwrap();
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the build lock waited for a session's use of the layer");
        // A prune, though, skips the layer while the session holds it.
        assert!(try_lock(&cache.dir.join("k.lock")).unwrap().is_none());
    }

    #[test]
    fn prune_keeps_what_images_name_and_what_builds_hold() {
        let d = tempfile::tempdir().unwrap();
        let cache = StepCache::new(&d.path().join("local/steps"));
        let meta = StepMeta::default();
        for key in ["used", "unused", "held"] {
            let tmp = cache.temp().unwrap();
            std::fs::create_dir_all(tmp.join("root")).unwrap();
            std::fs::write(tmp.join("root/f"), key).unwrap();
            cache.commit(&tmp, key, &meta).unwrap();
        }
        let image = d.path().join("local/images/abc");
        std::fs::create_dir_all(&image).unwrap();
        let record = vec![BuiltStep {
            index: 1,
            step: "RUN x".into(),
            key: "used".into(),
            outcome: StepOutcome::Built,
            stage: None,
            seconds: 0.0,
        }];
        std::fs::write(
            image.join(BUILD_RECORD),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        // A build that used the layer holds its lock shared.
        let held = cache.lock_shared("held").unwrap();
        let reader = cache.lock_shared("held").unwrap();
        let report = prune_steps(d.path()).unwrap();
        assert_eq!(report.layers, 1);
        assert!(cache.get("used").is_some() && cache.get("held").is_some());
        assert!(cache.get("unused").is_none());
        drop(held);
        assert_eq!(
            prune_steps(d.path()).unwrap().layers,
            0,
            "a reader holds it"
        );
        drop(reader);
        assert_eq!(prune_steps(d.path()).unwrap().layers, 1);
        assert!(cache.get("held").is_none() && cache.get("used").is_some());
    }
}
