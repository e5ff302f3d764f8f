//! Keeping the cache within `[images] max_store_gb`, and `endless images
//! prune --keep-recent N`: built task images and stored base images are
//! evicted least recently used first (last use: the mtime of a built
//! image's `last-use` file, touched at each build or cache hit, and of a
//! stored image's reference file, touched at each resolve), then the build
//! steps and layers nothing names any more. What a build or a live
//! session holds (locked, see [`hold`]; a build also holds the stored
//! images it builds from or copies from, see [`ImageStore::hold`]) and what
//! was used in the last [`IN_USE_WINDOW`] (what running work is about to
//! start) is never evicted. Sealed verifier environments live in their
//! image's directory: they count toward the cap (files shared between
//! images' identical environments once, see `env_sharing.rs`) and go with
//! their image.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::stepcache::{self, prune_steps};
use crate::images::{ImageRef, ImageStore};
use crate::sandbox::isolate::layout;
use crate::sandbox::{Image, SandboxError};

/// Images used this recently are taken to be in use.
pub const IN_USE_WINDOW: Duration = Duration::from_secs(600);

/// The file whose mtime is a built image's last use.
const LAST_USE: &str = "last-use";

/// What an eviction or prune removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvictReport {
    /// Built task images removed.
    pub built_images: usize,
    /// Stored base images forgotten.
    pub stored_images: usize,
    /// Build-step layers removed.
    pub step_layers: usize,
    /// Bytes freed (approximate: files counted once).
    pub bytes: u64,
    /// The cache's bytes on disk afterwards.
    pub bytes_after: u64,
}

/// Mark the built image at `dir` (or stored image) as used now.
pub fn touch(path: &Path) {
    let now = SystemTime::now();
    // trusted: the private image cache's own entries
    let _ = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(now));
}

/// Mark the built image directory `dir` as used now.
pub fn touch_image(dir: &Path) {
    touch(&dir.join(LAST_USE));
}

/// Mark the built image directory `dir` as last used (and built) at
/// `when`, as if nothing had used it since.
pub fn set_last_use(dir: &Path, when: SystemTime) -> std::io::Result<()> {
    for f in [LAST_USE, layout::IMAGE_META] {
        touch(&dir.join(f));
        // trusted: the private image cache's own entries
        std::fs::File::options()
            .append(true)
            .open(dir.join(f))?
            .set_modified(when)?;
    }
    Ok(())
}

/// Whether the built image at `dir` was built in the last minute.
pub fn just_built(dir: &Path) -> bool {
    SystemTime::now()
        .duration_since(last_use(&dir.join(layout::IMAGE_META)))
        .is_ok_and(|d| d < Duration::from_secs(60))
}

fn last_use(path: &Path) -> SystemTime {
    // trusted: the private image cache's own entries
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A live session's hold on its image and step layers: their lock files
/// locked shared for as long as it lives. Eviction and pruning lock them
/// exclusively and skip what they cannot lock.
pub struct Held {
    _locks: Vec<File>,
}

/// Hold `image` (its directory and each of its step layers) for a session
/// (see [`Held`]). Waits while one is being evicted; fails when the image
/// is gone.
pub fn hold(image: &Image) -> Result<Held, SandboxError> {
    let mut dirs = vec![image.path.clone()];
    for (part, layers) in &image.step_layers {
        let depth = Path::new(part).components().count();
        for layer in layers {
            if let Some(dir) = layer.ancestors().nth(depth) {
                if !dirs.iter().any(|d| d == dir) {
                    dirs.push(dir.to_path_buf());
                }
            }
        }
    }
    let mut locks = Vec::with_capacity(dirs.len());
    for dir in &dirs {
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let path = dir.with_file_name(format!("{name}.lock"));
        // trusted: the private image cache's own entries
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(SandboxError::io("open lock file", &path))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) } < 0 {
            return Err(SandboxError::io("lock", &path)(
                std::io::Error::last_os_error(),
            ));
        }
        if !dir.is_dir() {
            return Err(SandboxError::Start(format!(
                "{} was evicted from the cache before the session started; prepare the image again",
                dir.display()
            )));
        }
        locks.push(file);
    }
    Ok(Held { _locks: locks })
}

/// Bytes under `path` on disk, each inode once.
pub fn disk_bytes(path: &Path) -> u64 {
    disk_bytes_of(std::slice::from_ref(&path))
}

/// Bytes under all of `roots` on disk, each inode once however many hard
/// links (in however many of them) it has.
pub fn disk_bytes_of(roots: &[&Path]) -> u64 {
    let mut seen = HashSet::new();
    roots
        .iter()
        .flat_map(|root| walkdir::WalkDir::new(root).into_iter().flatten())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| {
            seen.insert((
                std::os::unix::fs::MetadataExt::dev(m),
                std::os::unix::fs::MetadataExt::ino(m),
            ))
        })
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .sum()
}

/// A built image in the cache.
struct Built {
    dir: PathBuf,
    hash: String,
    base: Option<String>,
    used: SystemTime,
}

fn built_images(cache_dir: &Path) -> Vec<Built> {
    // trusted: the private image cache's own entries
    let mut out: Vec<Built> = std::fs::read_dir(cache_dir.join("local/images"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.path().join(layout::IMAGE_META).is_file())
        .map(|e| {
            let dir = e.path();
            // trusted: the private image cache's own entries
            let base = std::fs::read(dir.join(layout::IMAGE_META))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|v| v.get("base").and_then(|b| b.as_str()).map(str::to_owned));
            let used = last_use(&dir.join(LAST_USE)).max(last_use(&dir.join(layout::IMAGE_META)));
            Built {
                hash: e.file_name().to_string_lossy().into_owned(),
                dir,
                base,
                used,
            }
        })
        .collect();
    out.sort_by_key(|b| b.used);
    out
}

/// Remove the built image `b` unless a session or a build holds it; its
/// bytes if removed.
fn remove_built(cache_dir: &Path, b: &Built) -> Result<Option<u64>, SandboxError> {
    let images = cache_dir.join("local/images");
    let Some(_used) = stepcache::try_lock(&images.join(format!("{}.lock", b.hash)))? else {
        return Ok(None);
    };
    let building = images.join(format!("{}{}", b.hash, stepcache::BUILD_LOCK));
    let Some(_built) = stepcache::try_lock(&building)? else {
        return Ok(None);
    };
    let bytes = disk_bytes(&b.dir);
    // Renamed first, so that nothing sees a half-removed image.
    let doomed = b
        .dir
        .with_file_name(format!(".evict-{}-{}", std::process::id(), b.hash));
    // trusted: the private image cache's own entries
    match std::fs::rename(&b.dir, &doomed) {
        Ok(()) => {}
        // Another process evicted it first.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SandboxError::io("evict image", &b.dir)(e)),
    }
    layout::remove_tree(&doomed);
    Ok(Some(bytes))
}

/// Evict least recently used built and stored images (never those in
/// `keep` or used within [`IN_USE_WINDOW`]) until the cache under
/// `cache_dir` takes at most `max_bytes`; then prune steps and layers.
pub fn enforce_cap(
    cache_dir: &Path,
    store: &ImageStore,
    max_bytes: u64,
    keep: &[String],
) -> Result<EvictReport, SandboxError> {
    let mut report = EvictReport::default();
    let mut usage = disk_bytes(cache_dir);
    let before = usage;
    if usage <= max_bytes {
        report.bytes_after = usage;
        return Ok(report);
    }
    let now = SystemTime::now();
    let recent = |t: SystemTime| now.duration_since(t).map_or(true, |d| d < IN_USE_WINDOW);
    for b in built_images(cache_dir) {
        if usage <= max_bytes {
            break;
        }
        if keep.contains(&b.hash) || recent(b.used) {
            continue;
        }
        if remove_built(cache_dir, &b)?.is_some() {
            report.built_images += 1;
        }
        let steps = prune_steps(cache_dir)?;
        report.step_layers += steps.layers;
        usage = disk_bytes(cache_dir);
    }
    if usage > max_bytes {
        let bases: HashSet<String> = built_images(cache_dir)
            .into_iter()
            .filter_map(|b| b.base)
            .collect();
        let mut stored: Vec<(SystemTime, String)> = store
            .list()
            .into_iter()
            .map(|i| (store.last_use(&i.reference), i.reference))
            .collect();
        stored.sort();
        for (used, reference) in stored {
            if usage <= max_bytes {
                break;
            }
            if bases.contains(&reference) || recent(used) {
                continue;
            }
            if let Ok(r) = ImageRef::parse(&reference) {
                if store.remove_unless_held(&r)? == Some(true) {
                    report.stored_images += 1;
                    store.prune()?;
                    usage = disk_bytes(cache_dir);
                }
            }
        }
    }
    report.bytes_after = disk_bytes(cache_dir);
    report.bytes = before.saturating_sub(report.bytes_after);
    Ok(report)
}

/// `endless images prune --keep-recent N`: keep the `n` most recently used
/// built images (and the stored images they build on, and the `n` most
/// recently used stored images), remove the rest, then prune steps and
/// layers.
pub fn prune_keep_recent(
    cache_dir: &Path,
    store: &ImageStore,
    n: usize,
) -> Result<EvictReport, SandboxError> {
    let before = disk_bytes(cache_dir);
    let mut report = EvictReport::default();
    let mut built = built_images(cache_dir);
    built.reverse(); // newest first
    let mut kept_bases = HashSet::new();
    for (i, b) in built.iter().enumerate() {
        if i < n {
            kept_bases.extend(b.base.clone());
            continue;
        }
        if remove_built(cache_dir, b)?.is_some() {
            report.built_images += 1;
        } else {
            kept_bases.extend(b.base.clone());
        }
    }
    let mut stored: Vec<(SystemTime, String)> = store
        .list()
        .into_iter()
        .map(|i| (store.last_use(&i.reference), i.reference))
        .collect();
    stored.sort_by(|a, b| b.cmp(a)); // newest first
    for (i, (_, reference)) in stored.into_iter().enumerate() {
        if i < n || kept_bases.contains(&reference) {
            continue;
        }
        if let Ok(r) = ImageRef::parse(&reference) {
            if store.remove_unless_held(&r)? == Some(true) {
                report.stored_images += 1;
            }
        }
    }
    store.prune()?;
    report.step_layers = prune_steps(cache_dir)?.layers;
    report.bytes_after = disk_bytes(cache_dir);
    report.bytes = before.saturating_sub(report.bytes_after);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A built image of `mb` MB last used `ago` ago, on `base`.
    fn built(cache: &Path, hash: &str, mb: usize, ago: Duration, base: Option<&str>) {
        let dir = cache.join("local/images").join(hash);
        std::fs::create_dir_all(dir.join("farm")).unwrap();
        std::fs::write(dir.join("farm/data"), vec![7u8; mb << 20]).unwrap();
        let meta = serde_json::json!({ "base": base });
        std::fs::write(dir.join(layout::IMAGE_META), meta.to_string()).unwrap();
        set_last_use(&dir, SystemTime::now() - ago).unwrap();
    }

    fn hashes(cache: &Path) -> Vec<String> {
        let mut v: Vec<String> = built_images(cache).into_iter().map(|b| b.hash).collect();
        v.sort();
        v
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn the_cap_evicts_least_recently_used_and_spares_what_is_in_use() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(&d.path().join("images"));
        built(d.path(), "a-oldest", 2, 3 * HOUR, None);
        built(d.path(), "b-old", 2, 2 * HOUR, None);
        built(d.path(), "c-kept", 2, 4 * HOUR, None);
        built(d.path(), "d-in-use", 2, Duration::ZERO, None);
        let before = disk_bytes(d.path());
        // Room for three of the four: only the oldest goes.
        let r = enforce_cap(d.path(), &store, before - (1 << 20), &["c-kept".into()]).unwrap();
        assert_eq!(r.built_images, 1);
        assert_eq!(hashes(d.path()), ["b-old", "c-kept", "d-in-use"]);
        assert!(r.bytes_after <= before - (1 << 20));
        // Room for none: what is kept or in use stays all the same.
        let r = enforce_cap(d.path(), &store, 1, &["c-kept".into()]).unwrap();
        assert_eq!(r.built_images, 1);
        assert_eq!(hashes(d.path()), ["c-kept", "d-in-use"]);
        assert!(!std::fs::read_dir(d.path().join("local/images"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".evict")));
    }

    #[test]
    fn a_held_image_and_its_step_layers_outlive_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(&d.path().join("images"));
        built(d.path(), "held", 2, 3 * HOUR, None);
        built(d.path(), "free", 2, 3 * HOUR, None);
        // A step layer no build record names: only the hold keeps it.
        let layer = d.path().join("local/steps/k1");
        std::fs::create_dir_all(layer.join("sys/usr")).unwrap();
        std::fs::write(layer.join("sys/usr/data"), b"x").unwrap();
        let image: Image = serde_json::from_value(serde_json::json!({
            "backend": "local",
            "hash": "held",
            "path": d.path().join("local/images/held"),
            "task_id": "t",
            "user": "root",
            "uid": 0,
            "gid": 0,
            "home": "/root",
            "workdir": "/",
            "network": false,
            "step_layers": { "sys/usr": [layer.join("sys/usr")] },
        }))
        .unwrap();
        let held = hold(&image).unwrap();
        let r = enforce_cap(d.path(), &store, 0, &[]).unwrap();
        assert_eq!(r.built_images, 1);
        assert_eq!(hashes(d.path()), ["held"]);
        assert!(layer.join("sys/usr/data").is_file());
        drop(held);
        enforce_cap(d.path(), &store, 0, &[]).unwrap();
        assert!(hashes(d.path()).is_empty());
        assert!(!layer.exists());
        // An image evicted meanwhile is refused, not started.
        let err = hold(&image).err().unwrap().to_string();
        assert!(err.contains("was evicted"), "{err}");
    }

    #[test]
    fn an_image_another_eviction_took_first_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        built(d.path(), "gone", 1, 3 * HOUR, None);
        let b = built_images(d.path()).pop().unwrap();
        std::fs::remove_dir_all(&b.dir).unwrap();
        assert_eq!(remove_built(d.path(), &b).unwrap(), None);
    }

    #[test]
    fn stored_images_a_build_holds_outlive_the_cap_and_keep_recent() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(&d.path().join("images"));
        for r in ["debian:bookworm", "ghcr.io/astral-sh/uv:0.8.14", "alpine:3"] {
            let image = crate::images::StoredImage {
                reference: ImageRef::parse(r).unwrap().canonical(),
                manifest_digest: format!("sha256:{}", "a".repeat(64)),
                layers: Vec::new(),
                config: Default::default(),
            };
            store.register(&image).unwrap();
            // Last used long ago: only a hold keeps it.
            let refs = d.path().join("images/refs");
            for e in std::fs::read_dir(&refs).unwrap().flatten() {
                let f = std::fs::File::options()
                    .append(true)
                    .open(e.path())
                    .unwrap();
                f.set_modified(SystemTime::now() - 3 * HOUR).unwrap();
            }
        }
        built(d.path(), "big", 1, 3 * HOUR, None);
        let base = store.hold("docker.io/library/debian:bookworm").unwrap();
        let copied = store.hold("ghcr.io/astral-sh/uv:0.8.14").unwrap();
        let r = enforce_cap(d.path(), &store, 0, &[]).unwrap();
        assert_eq!((r.built_images, r.stored_images), (1, 1), "{r:?}");
        let left = |store: &ImageStore| -> Vec<String> {
            store.list().into_iter().map(|i| i.reference).collect()
        };
        assert_eq!(
            left(&store),
            [
                "docker.io/library/debian:bookworm",
                "ghcr.io/astral-sh/uv:0.8.14"
            ]
        );
        assert_eq!(
            prune_keep_recent(d.path(), &store, 0)
                .unwrap()
                .stored_images,
            0
        );
        drop((base, copied));
        assert_eq!(
            prune_keep_recent(d.path(), &store, 0)
                .unwrap()
                .stored_images,
            2
        );
        assert!(left(&store).is_empty());
    }

    #[test]
    fn keep_recent_keeps_the_newest_and_their_bases() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(&d.path().join("images"));
        built(
            d.path(),
            "new",
            1,
            HOUR,
            Some("docker.io/library/debian:bookworm"),
        );
        built(d.path(), "old", 1, 2 * HOUR, None);
        built(d.path(), "older", 1, 3 * HOUR, None);
        for r in ["debian:bookworm", "debian:trixie", "alpine:3"] {
            let image = crate::images::StoredImage {
                reference: ImageRef::parse(r).unwrap().canonical(),
                manifest_digest: format!("sha256:{}", "a".repeat(64)),
                layers: Vec::new(),
                config: Default::default(),
            };
            store.register(&image).unwrap();
        }
        let r = prune_keep_recent(d.path(), &store, 1).unwrap();
        assert_eq!(r.built_images, 2);
        assert_eq!(hashes(d.path()), ["new"]);
        // The newest stored image and the kept image's base stay.
        let left: Vec<String> = store.list().into_iter().map(|i| i.reference).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left.contains(&"docker.io/library/debian:bookworm".to_string()));
    }
}
