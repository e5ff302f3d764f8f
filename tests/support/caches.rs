//! The image caches tests keep between runs, each bounded. Images and build
//! steps are keyed by content, so a later run reuses what an earlier one
//! built; every build evicts, least recently used first, what earlier runs
//! left past [`MAX_GB`] (never what was used in the last ten minutes, so a
//! run's own images all stay while it lasts).

use std::path::{Path, PathBuf};

use endless::sandbox::local::LocalBackend;

/// The most each kept cache may take, in GB, once its run is over.
pub const MAX_GB: f64 = 4.0;

/// `/var/tmp/endless-tests-<uid>/<name>`, made if missing: one per user, as
/// the sandbox refuses a cache another user owns.
pub fn dir(name: &str) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = PathBuf::from(format!("/var/tmp/endless-tests-{uid}/{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A local backend on the kept cache `name`, bounded by [`MAX_GB`]; `None`
/// (after a SKIP line) where this machine cannot run one.
pub fn backend(name: &str) -> Option<LocalBackend> {
    let bounded = endless::config::ImagesConfig {
        max_store_gb: Some(MAX_GB),
        ..Default::default()
    };
    match LocalBackend::new(&dir(name)) {
        Ok(b) => Some(b.with_images(bounded)),
        Err(e) => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            None
        }
    }
}

/// The workspace `target/tmp/<name>` for the real binary (see
/// [`super::cli`]): its cache survives between runs, everything else is made
/// fresh. Its `endless.toml` bounds the cache by [`MAX_GB`], never pulls,
/// never falls back to the host, and adds `images` (lines of the `[images]`
/// table, then tables under it such as `[images.aliases]`).
pub fn workspace(name: &str, images: &str) -> PathBuf {
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&ws).unwrap();
    for entry in std::fs::read_dir(&ws).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name().is_some_and(|n| n == ".cache") {
            continue;
        }
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    std::fs::write(
        ws.join("endless.toml"),
        format!(
            "[images]\nmax_store_gb = {MAX_GB:.1}\npull = \"never\"\nfallback = \"error\"\n{images}"
        ),
    )
    .unwrap();
    ws
}
