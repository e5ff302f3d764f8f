//! What sealed verifier environments take on disk, for `endless bench
//! images`: task images each with a step of its own and the same
//! `[verifier]` environment, so each builds its own. Their bytes as
//! separate copies (each environment on its own) side by side with the
//! bytes stored (files shared between the images' identical environments
//! counted once); then the cache brought
//! within a cap of half its size by eviction, environments counted. The
//! images are first marked as last used an hour ago: eviction never takes
//! what was used in the last ten minutes, and a benchmark does not wait.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use serde::Serialize;

use crate::images::ImageStore;
use crate::sandbox::local::{
    disk_bytes, disk_bytes_of, enforce_cap, env_dir, image_store_dir, set_last_use, LocalBackend,
};
use crate::sandbox::Backend;
use crate::task::formats::VerifierEnvSpec;
use crate::task::Task;

/// The figures (see the module docs).
#[derive(Debug, Serialize)]
pub struct EnvDisk {
    /// Environments built (one per image).
    pub environments: usize,
    /// Their bytes, each environment counted on its own.
    pub copies_bytes: u64,
    /// Their bytes as stored, each file once.
    pub stored_bytes: u64,
    /// `stored_bytes` over `copies_bytes` (below 1: shared).
    pub stored_over_copies: f64,
    /// The whole cache before eviction.
    pub cache_bytes: u64,
    /// The cap eviction kept to: half of `cache_bytes`.
    pub cap_bytes: u64,
    /// The whole cache after eviction.
    pub after_bytes: u64,
    /// Images eviction removed.
    pub evicted_images: usize,
    /// Whether `after_bytes` is within `cap_bytes`.
    pub within_cap: bool,
}

impl std::fmt::Display for EnvDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "  sealed verifier environments, {} images asking for the same: {:.1} MB as copies vs {:.1} MB stored ({:.2}x)\n  \
             cache with them {:.1} MB, cap {:.1} MB: {:.1} MB after evicting {} of the images (environments counted; within the cap: {})",
            self.environments,
            mb(self.copies_bytes),
            mb(self.stored_bytes),
            self.stored_over_copies,
            mb(self.cache_bytes),
            mb(self.cap_bytes),
            mb(self.after_bytes),
            self.evicted_images,
            if self.within_cap { "ok" } else { "OVER" }
        )
    }
}

/// Build `tasks` (images of their own asking for the same environment) in
/// the empty cache `cache`, then measure.
pub fn measure(cache: &Path, tasks: &[Task]) -> Result<EnvDisk> {
    let backend = LocalBackend::new(cache)?;
    let mut images = Vec::new();
    let mut envs: Vec<PathBuf> = Vec::new();
    for t in tasks {
        let spec = VerifierEnvSpec::from_section(&t.meta.verifier, Path::new("task.toml"))?;
        let image = backend.prepare(t)?;
        envs.push(env_dir(&image.path, &spec));
        images.push(image);
    }
    let copies_bytes = envs.iter().map(|e| disk_bytes(e)).sum();
    let roots: Vec<&Path> = envs.iter().map(PathBuf::as_path).collect();
    let stored_bytes = disk_bytes_of(&roots);
    let cache_bytes = disk_bytes(cache);
    let cap_bytes = cache_bytes / 2;
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for image in &images {
        set_last_use(&image.path, an_hour_ago)?;
    }
    let store = ImageStore::new(&image_store_dir(cache));
    let report = enforce_cap(cache, &store, cap_bytes, &[])?;
    Ok(EnvDisk {
        environments: tasks.len(),
        copies_bytes,
        stored_bytes,
        stored_over_copies: stored_bytes as f64 / copies_bytes.max(1) as f64,
        cache_bytes,
        cap_bytes,
        after_bytes: report.bytes_after,
        evicted_images: report.built_images,
        within_cap: report.bytes_after <= cap_bytes,
    })
}
