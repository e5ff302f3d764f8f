//! Storing identical sealed verifier environments once. Each task image
//! builds its own environment (on top of its own steps), yet tasks that ask
//! for the same tests' Python and packages on one base end up with the same
//! files: one interpreter, one standard library, the same wheels (13 GB for
//! one `torch` environment). Once a new environment is in place, each of its
//! files that has a twin in another image's environment becomes a hard link
//! to it (see [`crate::fsutil::link_identical`]: regular files, byte for
//! byte, same owner and mode, no link followed; Python sources also keep
//! their twin's modification time, which their cached bytecode records).
//! The cache counts each file once, so shared environments count once
//! toward `[images] max_store_gb`; evicting one image leaves the others'
//! links, and so the files, in place.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::fsutil::{link_identical, Shared, UntrustedDir};
use crate::sandbox::isolate::layout::VERIFIER_ENVS;
use crate::sandbox::local::LocalBackend;

/// The most environments of other images one new environment is compared
/// with (the same spec's first, then the newest).
const MAX_TWINS: usize = 4;

impl LocalBackend {
    /// Share the files of environment `name`, just stored in image
    /// `image_hash`, with the identical ones of other images' environments;
    /// what was shared. Never fails the build: a file that cannot be
    /// shared stays a copy.
    pub(super) fn share_verifier_env(&self, image_hash: &str, name: &str) -> Shared {
        let images = self.layout.images();
        let env = images.join(image_hash).join(VERIFIER_ENVS).join(name);
        let Ok(tree) = UntrustedDir::open(&env) else {
            return Shared::default();
        };
        let mut total = Shared::default();
        for twin in twins(&images, image_hash, name) {
            let Ok(from) = UntrustedDir::open(&twin) else {
                continue;
            };
            match link_identical(&tree, &from, &is_python_source) {
                Ok(s) => {
                    total.files += s.files;
                    total.bytes += s.bytes;
                }
                Err(e) => tracing::debug!("sharing {} with {}: {e}", env.display(), twin.display()),
            }
        }
        if total.files > 0 {
            tracing::info!(
                "verifier environment {name} of image {image_hash}: {} files ({:.1} MB) stored once with other images' environments",
                total.files,
                total.bytes as f64 / 1e6
            );
        }
        total
    }
}

fn is_python_source(name: &OsStr) -> bool {
    name.as_encoded_bytes().ends_with(b".py")
}

/// The environments of other images than `image_hash` to compare with:
/// complete ones, environment `name` (the same spec) first, then the
/// newest; at most [`MAX_TWINS`].
fn twins(images: &Path, image_hash: &str, name: &str) -> Vec<PathBuf> {
    let mut found: Vec<(bool, SystemTime, PathBuf)> = Vec::new();
    // trusted: the private image cache's own directories (images and their
    // environment directories are made and named by endless)
    for image in std::fs::read_dir(images).into_iter().flatten().flatten() {
        let hash = image.file_name();
        if hash == image_hash || hash.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let image_dir = image.path();
        // trusted: as above
        for env in std::fs::read_dir(image_dir.join(VERIFIER_ENVS))
            .into_iter()
            .flatten()
            .flatten()
        {
            let env_name = env.file_name().to_string_lossy().into_owned();
            if !super::verifier_env::is_complete_at(&image_dir, &env_name) {
                continue;
            }
            let when = env
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((env_name == name, when, env.path()));
        }
    }
    found.sort_by_key(|f| std::cmp::Reverse((f.0, f.1)));
    found
        .into_iter()
        .take(MAX_TWINS)
        .map(|(_, _, p)| p)
        .collect()
}
