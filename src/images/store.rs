//! The local image store, content-addressed and shared by every task:
//!
//! ```text
//! <root>/blobs/sha256/<hex>          compressed layers and configs, digest-checked
//! <root>/layers/<hex>-<owner>/       each layer unpacked once per owner (see unpack.rs)
//! <root>/refs/<sha256 of ref>.json   what a reference resolved to, written last
//! <root>/holds/<sha256 of ref>.lock  builds' holds on it (see hold.rs)
//! ```
//!
//! A reference is registered only once all its blobs are stored and
//! verified, so an interrupted pull leaves nothing half-registered.
//!
//! The store's root and its directories (`blobs`, `layers`, `refs`, `tmp`)
//! are mode 0700: only the operator enters them (the sandbox reaches
//! unpacked layers through overlay mounts made by the operator). Unpacked
//! layers hold no set-user-id or set-group-id files (see unpack.rs).
//!
//! trusted: every path here is the private image store's own (0700, written
//! only by endless); the untrusted archives and layers it is filled from are
//! read in `load.rs` and `unpack.rs`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::unpack::{unpack_layer, LayerOwners, UnpackOptions};
use super::{ImageError, ImageRef};

/// The most bytes one layer may unpack to.
pub const MAX_LAYER_BYTES: u64 = 32 << 30;

/// One layer of a stored image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredLayer {
    /// `sha256:<hex>` of the compressed blob.
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// Its compressed size in bytes.
    pub size: u64,
}

/// The parts of an image's config the sandbox honours.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `KEY=value` environment entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// The working directory, if set.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The user, if set.
    #[serde(default)]
    pub user: Option<String>,
}

/// A reference as registered in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredImage {
    /// The canonical reference.
    pub reference: String,
    /// Digest of the (platform) manifest it resolved to.
    pub manifest_digest: String,
    /// Layers, bottom first.
    pub layers: Vec<StoredLayer>,
    /// The honoured parts of the image config.
    pub config: ImageConfig,
}

impl StoredImage {
    /// Compressed bytes of all its layers.
    pub fn size(&self) -> u64 {
        self.layers.iter().map(|l| l.size).sum()
    }
}

/// The store under one directory.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
}

/// `sha256:<hex>` -> `<hex>`, checked.
pub fn digest_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// `sha256:<hex>` of a file's content.
pub fn file_digest(path: &Path) -> Result<String, ImageError> {
    let mut f = std::fs::File::open(path).map_err(ImageError::io("read blob", path))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(ImageError::io("read blob", path))?;
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

impl ImageStore {
    /// The store under `root` (created on first write).
    pub fn new(root: &Path) -> ImageStore {
        ImageStore {
            root: root.to_path_buf(),
        }
    }

    /// The store's root directory.
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob with `digest` lives.
    pub fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        digest_hex(digest).map(|h| self.root.join("blobs/sha256").join(h))
    }

    fn ref_path(&self, reference: &str) -> PathBuf {
        let key = hex::encode(Sha256::digest(reference.as_bytes()));
        self.root.join("refs").join(format!("{key}.json"))
    }

    /// Whether the blob with `digest` is stored.
    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_some_and(|p| p.is_file())
    }

    /// `<root>/<rel>` (`/`-separated), created if missing; the root and
    /// every directory on the way are made mode 0700.
    fn private_dir(&self, rel: &str) -> Result<PathBuf, ImageError> {
        let mut dir = self.root.clone();
        let make = |d: &Path| {
            crate::fsutil::create_private_dir(d)
                .map_err(ImageError::io("create store directory", d))
        };
        make(&dir)?;
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            dir.push(part);
            make(&dir)?;
        }
        Ok(dir)
    }

    /// A fresh temporary path in the store, for a download in progress.
    pub fn temp_path(&self, label: &str) -> Result<PathBuf, ImageError> {
        let dir = self.private_dir("tmp")?;
        let mut rnd = [0u8; 8];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        Ok(dir.join(format!(
            "{}-{label}-{}",
            std::process::id(),
            hex::encode(rnd)
        )))
    }

    /// Move the downloaded file `tmp` into the store as `digest`, after
    /// checking that its content has that digest. `reference` names the
    /// image in errors.
    pub fn put_blob(&self, tmp: &Path, digest: &str, reference: &str) -> Result<(), ImageError> {
        let actual = file_digest(tmp)?;
        let target = self
            .blob_path(digest)
            .ok_or_else(|| ImageError::Malformed {
                reference: reference.to_string(),
                reason: format!("`{digest}` is not a sha256 digest"),
            })?;
        if actual != digest {
            let _ = std::fs::remove_file(tmp);
            return Err(ImageError::DigestMismatch {
                reference: reference.to_string(),
                expected: digest.to_string(),
                actual,
            });
        }
        self.private_dir("blobs/sha256")?;
        std::fs::rename(tmp, &target).map_err(ImageError::io("store blob", &target))
    }

    /// Register `image` under its reference (the last step of a pull).
    pub fn register(&self, image: &StoredImage) -> Result<(), ImageError> {
        let path = self.ref_path(&image.reference);
        self.private_dir("refs")?;
        let bytes = serde_json::to_vec_pretty(image).map_err(|e| ImageError::Malformed {
            reference: image.reference.clone(),
            reason: e.to_string(),
        })?;
        crate::fsutil::write_atomic(&path, &bytes).map_err(ImageError::io("register image", &path))
    }

    /// The stored image `reference` resolves to, if pulled.
    pub fn get(&self, reference: &ImageRef) -> Option<StoredImage> {
        let bytes = std::fs::read(self.ref_path(&reference.canonical())).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every registered image.
    pub fn list(&self) -> Vec<StoredImage> {
        let mut out: Vec<StoredImage> = std::fs::read_dir(self.root.join("refs"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| std::fs::read(e.path()).ok())
                    .filter_map(|b| serde_json::from_slice(&b).ok())
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| a.reference.cmp(&b.reference));
        out
    }

    /// Mark `reference` as used now (for least-recently-used eviction).
    pub fn touch(&self, reference: &ImageRef) {
        let path = self.ref_path(&reference.canonical());
        if let Ok(f) = std::fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
    }

    /// When `reference` (canonical) was last used (registered, or resolved
    /// for a build); the epoch when unknown.
    pub fn last_use(&self, reference: &str) -> std::time::SystemTime {
        std::fs::metadata(self.ref_path(reference))
            .and_then(|m| m.modified())
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
    }

    fn stand_in_path(&self, requested: &str) -> PathBuf {
        let key = hex::encode(Sha256::digest(requested.as_bytes()));
        self.root.join("stand-ins").join(format!("{key}.json"))
    }

    /// Record that `stand_in.requested` is served by the stored image
    /// `stand_in.name` (written after that image is registered).
    pub fn record_stand_in(&self, stand_in: &super::StandIn) -> Result<(), ImageError> {
        self.private_dir("stand-ins")?;
        let path = self.stand_in_path(&stand_in.requested);
        let bytes = serde_json::to_vec_pretty(stand_in).map_err(|e| ImageError::Malformed {
            reference: stand_in.requested.clone(),
            reason: e.to_string(),
        })?;
        crate::fsutil::write_atomic(&path, &bytes).map_err(ImageError::io("record stand-in", &path))
    }

    /// The stand-in recorded for `reference`, if its image is still stored.
    pub fn stand_in(&self, reference: &ImageRef) -> Option<(super::StandIn, StoredImage)> {
        let bytes = std::fs::read(self.stand_in_path(&reference.canonical())).ok()?;
        let stand_in: super::StandIn = serde_json::from_slice(&bytes).ok()?;
        let image = self.get(&ImageRef::parse(&stand_in.name).ok()?)?;
        Some((stand_in, image))
    }

    /// Every recorded stand-in whose image is stored.
    pub fn stand_ins(&self) -> Vec<super::StandIn> {
        let mut out: Vec<super::StandIn> = std::fs::read_dir(self.root.join("stand-ins"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| std::fs::read(e.path()).ok())
                    .filter_map(|b| serde_json::from_slice::<super::StandIn>(&b).ok())
                    .filter(|s| ImageRef::parse(&s.name).is_ok_and(|r| self.get(&r).is_some()))
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| a.requested.cmp(&b.requested));
        out
    }

    /// Forget `reference` (its blobs stay until `prune`); whether it was there.
    pub fn remove(&self, reference: &ImageRef) -> Result<bool, ImageError> {
        let path = self.ref_path(&reference.canonical());
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ImageError::io("remove image", &path)(e)),
        }
    }

    /// Where unpacked layers live (see [`ImageStore::layer_dirs`]).
    pub fn layers_root(&self) -> PathBuf {
        self.root.join("layers")
    }

    /// The unpacked layer directories of `image`, top first (overlay order),
    /// unpacking each layer once for `owners`.
    pub fn layer_dirs(
        &self,
        image: &StoredImage,
        owners: LayerOwners,
    ) -> Result<Vec<PathBuf>, ImageError> {
        let owner = owners.dir_suffix();
        let mut dirs = Vec::new();
        for layer in &image.layers {
            let hex = digest_hex(&layer.digest).ok_or_else(|| ImageError::Malformed {
                reference: image.reference.clone(),
                reason: format!("layer digest `{}` is not sha256", layer.digest),
            })?;
            let dir = self.layers_root().join(format!("{hex}-{owner}"));
            if !dir.is_dir() {
                let blob = self
                    .blob_path(&layer.digest)
                    .filter(|p| p.is_file())
                    .ok_or_else(|| ImageError::NotStored(image.reference.clone()))?;
                let tmp = self.temp_path(&format!("layer-{}", &hex[..12]))?;
                std::fs::create_dir_all(&tmp)
                    .map_err(ImageError::io("create layer directory", &tmp))?;
                let opts = UnpackOptions {
                    owners,
                    max_bytes: MAX_LAYER_BYTES,
                };
                let result = unpack_layer(&blob, &layer.media_type, &tmp, &layer.digest, opts);
                match result {
                    Ok(report) => {
                        for note in report.notes {
                            tracing::warn!("image {}: {note}", image.reference);
                        }
                    }
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&tmp);
                        return Err(e);
                    }
                }
                self.private_dir("layers")?;
                if std::fs::rename(&tmp, &dir).is_err() {
                    // Another process unpacked it first.
                    let _ = std::fs::remove_dir_all(&tmp);
                }
            }
            dirs.push(dir);
        }
        dirs.reverse();
        Ok(dirs)
    }
}

/// What [`ImageStore::prune`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Blobs no registered image uses.
    pub blobs: usize,
    /// Unpacked layer directories of those blobs.
    pub layers: usize,
    /// Leftovers of pulls and loads whose process is gone.
    pub temporaries: usize,
    /// Bytes freed (blobs and leftovers; unpacked layers are not counted).
    pub bytes: u64,
}

impl ImageStore {
    /// Remove the blobs and unpacked layers that no registered image uses,
    /// and the temporaries of pulls whose process is gone. Run it when no
    /// build is starting from an image being removed (`images rm` first).
    pub fn prune(&self) -> Result<PruneReport, ImageError> {
        let used: std::collections::HashSet<String> = self
            .list()
            .iter()
            .flat_map(|i| i.layers.iter())
            .filter_map(|l| digest_hex(&l.digest).map(str::to_owned))
            .collect();
        let mut report = PruneReport::default();
        let entries = |dir: PathBuf| {
            std::fs::read_dir(dir)
                .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        for blob in entries(self.root.join("blobs/sha256")) {
            let name = blob.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !used.contains(name) {
                let size = std::fs::metadata(&blob).map(|m| m.len()).unwrap_or(0);
                std::fs::remove_file(&blob).map_err(ImageError::io("remove blob", &blob))?;
                report.blobs += 1;
                report.bytes += size;
            }
        }
        for dir in entries(self.root.join("layers")) {
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let hex = name.split('-').next().unwrap_or("");
            if !used.contains(hex) {
                std::fs::remove_dir_all(&dir).map_err(ImageError::io("remove layer", &dir))?;
                report.layers += 1;
            }
        }
        for tmp in entries(self.root.join("tmp")) {
            let name = tmp.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let pid = name.split('-').next().unwrap_or("");
            if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
                let size = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
                let removed = if tmp.is_dir() {
                    std::fs::remove_dir_all(&tmp)
                } else {
                    std::fs::remove_file(&tmp)
                };
                removed.map_err(ImageError::io("remove leftover", &tmp))?;
                report.temporaries += 1;
                report.bytes += size;
            }
        }
        Ok(report)
    }

    /// Bytes the store takes on disk (blobs, unpacked layers, leftovers).
    pub fn disk_usage(&self) -> u64 {
        fn walk(p: &Path) -> u64 {
            let Ok(meta) = std::fs::symlink_metadata(p) else {
                return 0;
            };
            if meta.is_dir() {
                std::fs::read_dir(p)
                    .map(|rd| rd.flatten().map(|e| walk(&e.path())).sum())
                    .unwrap_or(0)
            } else {
                std::os::unix::fs::MetadataExt::blocks(&meta) * 512
            }
        }
        walk(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_checked_before_they_are_stored() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        let tmp = store.temp_path("t").unwrap();
        std::fs::write(&tmp, b"hello").unwrap();
        let wrong = format!("sha256:{}", "0".repeat(64));
        let e = store.put_blob(&tmp, &wrong, "x").unwrap_err();
        assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
        assert!(!store.has_blob(&wrong) && !tmp.exists());
        let tmp = store.temp_path("t").unwrap();
        std::fs::write(&tmp, b"hello").unwrap();
        let right = file_digest(&tmp).unwrap();
        store.put_blob(&tmp, &right, "x").unwrap();
        assert!(store.has_blob(&right));
        assert!(digest_hex("sha256:../../etc").is_none());
    }

    #[test]
    fn prune_keeps_what_registered_images_use() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        let put = |body: &[u8]| {
            let tmp = store.temp_path("t").unwrap();
            std::fs::write(&tmp, body).unwrap();
            let digest = file_digest(&tmp).unwrap();
            store.put_blob(&tmp, &digest, "x").unwrap();
            digest
        };
        let kept = put(b"kept layer");
        let dropped = put(b"unused layer");
        store
            .register(&StoredImage {
                reference: "docker.io/library/a:1".into(),
                manifest_digest: kept.clone(),
                layers: vec![StoredLayer {
                    digest: kept.clone(),
                    media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                    size: 10,
                }],
                config: ImageConfig::default(),
            })
            .unwrap();
        let hex = digest_hex(&dropped).unwrap().to_string();
        std::fs::create_dir_all(d.path().join("layers").join(format!("{hex}-self"))).unwrap();
        let report = store.prune().unwrap();
        assert_eq!((report.blobs, report.layers), (1, 1));
        assert!(store.has_blob(&kept) && !store.has_blob(&dropped));
        assert_eq!(store.prune().unwrap(), PruneReport::default());
    }
}
