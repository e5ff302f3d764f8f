//! Holds on stored images: a build shares a lock on each stored image it
//! builds from (its base, its stages' bases, the images it copies from)
//! until it ends, and eviction forgets a stored image only while it holds
//! that lock alone, so that no unpacked layer a running build uses is
//! pruned under it.
//!
//! ```text
//! <root>/holds/<sha256 of ref>.lock   flock(2): shared by builds, exclusive to forget
//! ```
//!
//! trusted: every path here is the private image store's own.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::{ImageError, ImageRef, ImageStore};

/// A build's hold on one stored image: released when dropped.
#[derive(Debug)]
pub struct StoreHold {
    _lock: File,
}

impl ImageStore {
    fn hold_file(&self, reference: &str) -> Result<(File, PathBuf), ImageError> {
        let dir = self.root().join("holds");
        crate::fsutil::create_private_dir(&dir)
            .map_err(ImageError::io("create store directory", &dir))?;
        let key = hex::encode(Sha256::digest(reference.as_bytes()));
        let path = dir.join(format!("{key}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(ImageError::io("open lock file", &path))?;
        Ok((file, path))
    }

    /// Hold the stored image `reference` until the hold is
    /// dropped: waits while an eviction decides about it, and fails when it
    /// was forgotten meanwhile.
    pub fn hold(&self, reference: &str) -> Result<StoreHold, ImageError> {
        let parsed = ImageRef::parse(reference)?;
        let (file, path) = self.hold_file(&parsed.canonical())?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) } < 0 {
            return Err(ImageError::io("lock", &path)(
                std::io::Error::last_os_error(),
            ));
        }
        if self.get(&parsed).is_none() {
            return Err(ImageError::NotStored(reference.to_string()));
        }
        Ok(StoreHold { _lock: file })
    }

    /// Forget `reference` unless a build holds it: `None` when held, else
    /// whether it was stored (its blobs stay until `prune`).
    pub fn remove_unless_held(&self, reference: &ImageRef) -> Result<Option<bool>, ImageError> {
        let (file, path) = self.hold_file(&reference.canonical())?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Ok(None);
            }
            return Err(ImageError::io("lock", &path)(e));
        }
        self.remove(reference).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::StoredImage;

    #[test]
    fn a_held_image_is_not_forgotten_and_a_forgotten_one_is_not_held() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        let reference = ImageRef::parse("debian:bookworm").unwrap();
        let image = StoredImage {
            reference: reference.canonical(),
            manifest_digest: format!("sha256:{}", "a".repeat(64)),
            layers: Vec::new(),
            config: Default::default(),
        };
        store.register(&image).unwrap();
        let hold = store.hold(&reference.canonical()).unwrap();
        // A second hold (another build) shares it.
        let again = store.hold(&reference.canonical()).unwrap();
        assert_eq!(store.remove_unless_held(&reference).unwrap(), None);
        assert!(store.get(&reference).is_some());
        drop((hold, again));
        assert_eq!(store.remove_unless_held(&reference).unwrap(), Some(true));
        assert!(store.get(&reference).is_none());
        let err = store.hold(&reference.canonical()).unwrap_err().to_string();
        assert!(err.contains("not in the local store"), "{err}");
    }
}
