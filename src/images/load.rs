//! `endless images load FILE`: images from a `docker save` archive or an OCI
//! image layout (a directory or a tar of one), for machines without a
//! registry. Every blob is digest-checked on its way into the store, and an
//! image is registered only once all of its blobs are stored, so a bad
//! archive leaves nothing half-registered.
//!
//! Every file named inside the archive (manifests, configs, layers) is
//! opened through a descriptor of the archive's root with
//! [`crate::fsutil::open_beneath`] (`openat2` with `RESOLVE_BENEATH`): a
//! name with `..` or an absolute path, or one that reaches through a
//! symlink to anything outside the archive, is refused as a
//! [`ImageError::HostileEntry`] naming the archive and the entry, so an
//! archive cannot make `endless` read the operator's files into the store.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::pull::parse_config;
use super::store::{StoredImage, StoredLayer};
use super::{ImageError, ImageRef, ImageStore};
use crate::fsutil::{is_escape, open_beneath, open_dir};

/// Media type of the uncompressed layers of a classic `docker save`.
const DOCKER_TAR: &str = "application/vnd.docker.image.rootfs.diff.tar";
/// Annotation naming an image in an OCI layout's index.
const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The largest JSON document (manifest, index, config) read from an archive.
const MAX_JSON_BYTES: u64 = 16 << 20;

/// What a load registered.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    /// The canonical reference.
    pub reference: String,
    /// The manifest digest (for a classic `docker save`, the digest of the
    /// config and layer list, which has no manifest of its own).
    pub manifest_digest: String,
    /// Layers in the image.
    pub layers: usize,
}

/// Load every image in `path` (a `docker save` tar, an OCI layout directory
/// or a tar of one) into `store`. `tag` names the image when the archive
/// holds exactly one and names it differently or not at all.
pub fn load(
    store: &ImageStore,
    path: &Path,
    tag: Option<&str>,
) -> Result<Vec<LoadReport>, ImageError> {
    let label = path.display().to_string();
    // trusted: the archive the operator named; its contents are read beneath it
    let meta = std::fs::metadata(path).map_err(ImageError::io("read archive", path))?;
    let (dir, extracted) = if meta.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let tmp = store.temp_path("load")?;
        extract(path, &tmp, &label)?;
        (tmp.clone(), Some(tmp))
    };
    let result = open_dir(&dir)
        .map_err(ImageError::io("read archive", path))
        .and_then(|root| {
            let archive = Archive {
                root,
                label: &label,
            };
            load_dir(store, &archive, tag)
        });
    if let Some(tmp) = extracted {
        // trusted: our own temporary in the private image store
        let _ = std::fs::remove_dir_all(tmp);
    }
    result
}

/// Unpack the tar `path` into the fresh store directory `tmp` (removed
/// again when it fails). What it holds is only ever opened beneath `tmp`.
fn extract(path: &Path, tmp: &Path, label: &str) -> Result<(), ImageError> {
    crate::fsutil::create_private_dir(tmp)
        .map_err(ImageError::io("create store directory", tmp))?;
    // trusted: the archive the operator named; its contents are read beneath it
    let file = File::open(path).map_err(ImageError::io("read archive", path))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    archive.set_preserve_permissions(false);
    archive.set_unpack_xattrs(false);
    archive.unpack(tmp).map_err(|e| {
        // trusted: our own temporary in the private image store
        let _ = std::fs::remove_dir_all(tmp);
        ImageError::Malformed {
            reference: label.to_string(),
            reason: format!("not a tar archive of an image: {e}"),
        }
    })
}

/// An archive (or layout) being read: its root, opened once, and the name
/// it is reported under. Every entry is opened beneath the root.
struct Archive<'a> {
    root: File,
    label: &'a str,
}

impl Archive<'_> {
    fn hostile(&self, name: &str, reason: &str) -> ImageError {
        ImageError::HostileEntry {
            layer: self.label.to_string(),
            entry: name.to_string(),
            reason: reason.to_string(),
        }
    }

    fn malformed(&self, reason: String) -> ImageError {
        ImageError::Malformed {
            reference: self.label.to_string(),
            reason,
        }
    }

    /// The regular file `name` of the archive, and its size; `None` when
    /// it is absent.
    fn try_open(&self, name: &str) -> Result<Option<(File, u64)>, ImageError> {
        let file =
            match open_beneath(&self.root, Path::new(name)) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) if is_escape(&e) => return Err(self.hostile(
                    name,
                    "it resolves outside the archive (through a symlink, `..` or an absolute path)",
                )),
                Err(e) => return Err(self.io(name)(e)),
            };
        let meta = file.metadata().map_err(self.io(name))?;
        if !meta.is_file() {
            return Err(self.hostile(name, "not a regular file"));
        }
        Ok(Some((file, meta.len())))
    }

    /// The regular file `name` of the archive, and its size.
    fn open(&self, name: &str) -> Result<(File, u64), ImageError> {
        self.try_open(name)?
            .ok_or_else(|| self.malformed(format!("`{name}` is named but not in the archive")))
    }

    fn io(&self, name: &str) -> impl FnOnce(std::io::Error) -> ImageError + use<'_> {
        ImageError::io(format!("read entry `{name}` of archive"), self.label)
    }

    /// The content of the small file `name` (a manifest, index or config).
    fn read_small(&self, name: &str) -> Result<Vec<u8>, ImageError> {
        let (file, size) = self.open(name)?;
        if size > MAX_JSON_BYTES {
            return Err(self.malformed(format!(
                "`{name}` has {size} bytes, more than a manifest or config may ({MAX_JSON_BYTES})"
            )));
        }
        let mut bytes = Vec::new();
        file.take(MAX_JSON_BYTES)
            .read_to_end(&mut bytes)
            .map_err(self.io(name))?;
        Ok(bytes)
    }

    fn read_json(&self, name: &str) -> Result<Value, ImageError> {
        let bytes = self.read_small(name)?;
        serde_json::from_slice(&bytes).map_err(|e| self.malformed(format!("{name}: {e}")))
    }

    /// Whether the archive holds the file `name` (a symlink out of it is
    /// an error, not an absence).
    fn has(&self, name: &str) -> Result<bool, ImageError> {
        Ok(self.try_open(name)?.is_some())
    }
}

/// The images of an unpacked archive: `manifest.json` (docker save) first,
/// else `index.json` (OCI layout).
fn load_dir(
    store: &ImageStore,
    archive: &Archive,
    tag: Option<&str>,
) -> Result<Vec<LoadReport>, ImageError> {
    let mut images = if archive.has("manifest.json")? {
        docker_images(store, archive)?
    } else if archive.has("index.json")? {
        oci_images(store, archive)?
    } else {
        return Err(archive.malformed(
            "neither a `docker save` archive (manifest.json) nor an OCI layout (index.json)".into(),
        ));
    };
    if images.is_empty() {
        return Err(archive.malformed("it holds no image".into()));
    }
    if let Some(tag) = tag {
        if images.len() != 1 {
            return Err(archive.malformed(format!(
                "--tag names one image, but it holds {}",
                images.len()
            )));
        }
        images[0].0 = Some(tag.to_string());
    }
    // Check every name before registering anything.
    let mut named = Vec::new();
    for (name, image) in images {
        let name = name.ok_or_else(|| {
            archive.malformed("an image in it has no name: give one with --tag".into())
        })?;
        let reference = ImageRef::parse(&name)?;
        named.push((reference, image));
    }
    let mut reports = Vec::new();
    for (reference, mut image) in named {
        image.reference = reference.canonical();
        store.register(&image)?;
        reports.push(LoadReport {
            reference: image.reference.clone(),
            manifest_digest: image.manifest_digest.clone(),
            layers: image.layers.len(),
        });
    }
    Ok(reports)
}

/// `sha256:<hex>` of `bytes`.
fn bytes_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `sha256:<hex>` of the content of `file` (entry `name`), and whether it
/// starts like a gzip stream.
fn hash_entry(archive: &Archive, file: &File, name: &str) -> Result<(String, bool), ImageError> {
    let mut magic = [0u8; 2];
    let n = file.read_at(&mut magic, 0).map_err(archive.io(name))?;
    let mut h = Sha256::new();
    let mut reader = file;
    reader.seek(SeekFrom::Start(0)).map_err(archive.io(name))?;
    std::io::copy(&mut reader, &mut h).map_err(archive.io(name))?;
    let digest = format!("sha256:{}", hex::encode(h.finalize()));
    Ok((digest, n == 2 && magic == [0x1f, 0x8b]))
}

/// Copy the open entry `name` into the store as `digest`, unless it is
/// there; the store checks the digest of what was copied.
fn store_entry(
    store: &ImageStore,
    archive: &Archive,
    file: &File,
    name: &str,
    digest: &str,
) -> Result<(), ImageError> {
    if store.has_blob(digest) {
        return Ok(());
    }
    let tmp = store.temp_path("blob")?;
    let copied = copy_file(file, &tmp);
    if let Err(e) = copied {
        // trusted: our own temporary in the private image store
        let _ = std::fs::remove_file(&tmp);
        return Err(archive.io(name)(e));
    }
    store.put_blob(&tmp, digest, archive.label)
}

/// Copy all of `file` into a new file at `to`, flushed to disk.
fn copy_file(file: &File, to: &Path) -> std::io::Result<()> {
    let mut reader = file;
    reader.seek(SeekFrom::Start(0))?;
    // trusted: our own temporary in the private image store
    let mut out = File::create(to)?;
    std::io::copy(&mut reader, &mut out)?;
    out.sync_all()
}

/// Store `bytes` (read from the archive) as `digest`, unless it is there.
fn store_bytes(
    store: &ImageStore,
    bytes: &[u8],
    digest: &str,
    label: &str,
) -> Result<(), ImageError> {
    if store.has_blob(digest) {
        return Ok(());
    }
    let tmp = store.temp_path("blob")?;
    // trusted: our own temporary in the private image store
    std::fs::write(&tmp, bytes).map_err(ImageError::io("write blob", &tmp))?;
    store.put_blob(&tmp, digest, label)
}

/// `docker save`: `manifest.json` lists each image's config, tags and
/// layer files (uncompressed tars, or OCI blobs in newer Docker).
fn docker_images(
    store: &ImageStore,
    archive: &Archive,
) -> Result<Vec<(Option<String>, StoredImage)>, ImageError> {
    let manifest = archive.read_json("manifest.json")?;
    let entries = manifest
        .as_array()
        .ok_or_else(|| archive.malformed("manifest.json is not a list".into()))?;
    let mut out = Vec::new();
    for entry in entries {
        let text = |k: &str| entry.get(k).and_then(Value::as_str);
        let config_name = text("Config")
            .ok_or_else(|| archive.malformed("manifest.json: an entry has no `Config`".into()))?;
        let config_bytes = archive.read_small(config_name)?;
        let config = parse_config(&config_bytes, archive.label)?;
        let mut layers = Vec::new();
        let mut id = Sha256::new();
        id.update(&config_bytes);
        for layer in entry
            .get("Layers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = layer
                .as_str()
                .ok_or_else(|| archive.malformed("manifest.json: a layer is not a path".into()))?;
            let (file, size) = archive.open(name)?;
            let (digest, gzip) = hash_entry(archive, &file, name)?;
            store_entry(store, archive, &file, name, &digest)?;
            id.update(digest.as_bytes());
            // A classic layer file is a plain tar; newer `docker save`
            // writes OCI blobs, which may be gzipped.
            let media_type = if gzip {
                "application/vnd.docker.image.rootfs.diff.tar.gzip"
            } else {
                DOCKER_TAR
            };
            layers.push(StoredLayer {
                digest,
                media_type: media_type.into(),
                size,
            });
        }
        let name = entry
            .get("RepoTags")
            .and_then(Value::as_array)
            .and_then(|t| t.first())
            .and_then(Value::as_str)
            .map(str::to_owned);
        out.push((
            name,
            StoredImage {
                reference: String::new(),
                manifest_digest: format!("sha256:{}", hex::encode(id.finalize())),
                layers,
                config,
            },
        ));
    }
    Ok(out)
}

/// An OCI image layout: `index.json` names manifests (or indexes of
/// per-platform manifests) in `blobs/<alg>/<hex>`.
fn oci_images(
    store: &ImageStore,
    archive: &Archive,
) -> Result<Vec<(Option<String>, StoredImage)>, ImageError> {
    let label = archive.label;
    let index = archive.read_json("index.json")?;
    let mut out = Vec::new();
    for desc in index
        .get("manifests")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = desc
            .get("annotations")
            .and_then(|a| a.get(REF_NAME))
            .and_then(Value::as_str)
            // A bare tag (`24.04`) names no repository: --tag must.
            .filter(|n| n.contains(':') || n.contains('/'))
            .map(str::to_owned);
        let manifest_digest = descriptor_digest(desc, label)?;
        let manifest_digest = platform_manifest(archive, &manifest_digest)?;
        let manifest = blob_json(archive, &manifest_digest)?;
        let config_digest = manifest
            .get("config")
            .ok_or_else(|| archive.malformed(format!("manifest {manifest_digest} has no config")))
            .and_then(|c| descriptor_digest(c, label))?;
        let config_bytes = blob_bytes(archive, &config_digest)?;
        store_bytes(store, &config_bytes, &config_digest, label)?;
        let config = parse_config(&config_bytes, label)?;
        let mut layers = Vec::new();
        for layer in manifest
            .get("layers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let digest = descriptor_digest(layer, label)?;
            let media_type = layer
                .get("mediaType")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if !super::pull::LAYER_TYPES.contains(&media_type.as_str()) {
                return Err(ImageError::UnsupportedLayer {
                    reference: label.to_string(),
                    digest,
                    media_type,
                });
            }
            let name = blob_name(archive, &digest)?;
            let (file, size) = archive.open(&name)?;
            // Checked even when the store has it: a layout with a tampered
            // blob is refused as a whole.
            let (actual, _) = hash_entry(archive, &file, &name)?;
            if actual != digest {
                return Err(ImageError::DigestMismatch {
                    reference: label.to_string(),
                    expected: digest,
                    actual,
                });
            }
            store_entry(store, archive, &file, &name, &digest)?;
            layers.push(StoredLayer {
                digest,
                media_type,
                size,
            });
        }
        out.push((
            name,
            StoredImage {
                reference: String::new(),
                manifest_digest,
                layers,
                config,
            },
        ));
    }
    Ok(out)
}

fn descriptor_digest(desc: &Value, label: &str) -> Result<String, ImageError> {
    desc.get("digest")
        .and_then(Value::as_str)
        .filter(|d| super::digest_hex(d).is_some())
        .map(str::to_owned)
        .ok_or_else(|| ImageError::Malformed {
            reference: label.to_string(),
            reason: "a descriptor has no sha256 digest".into(),
        })
}

/// The entry of blob `digest` in the layout.
fn blob_name(archive: &Archive, digest: &str) -> Result<String, ImageError> {
    let hex = super::digest_hex(digest)
        .ok_or_else(|| archive.malformed(format!("`{digest}` is not a sha256 digest")))?;
    Ok(format!("blobs/sha256/{hex}"))
}

/// The content of the small blob `digest` (a manifest, index or config)
/// in the layout, checked against its digest.
fn blob_bytes(archive: &Archive, digest: &str) -> Result<Vec<u8>, ImageError> {
    let bytes = archive.read_small(&blob_name(archive, digest)?)?;
    let actual = bytes_digest(&bytes);
    if actual != digest {
        return Err(ImageError::DigestMismatch {
            reference: archive.label.to_string(),
            expected: digest.to_string(),
            actual,
        });
    }
    Ok(bytes)
}

fn blob_json(archive: &Archive, digest: &str) -> Result<Value, ImageError> {
    let bytes = blob_bytes(archive, digest)?;
    serde_json::from_slice(&bytes).map_err(|e| archive.malformed(format!("blob {digest}: {e}")))
}

/// A manifest digest, or the digest of this machine's entry when it names
/// an index of per-platform manifests (nested at most a few deep).
fn platform_manifest(archive: &Archive, digest: &str) -> Result<String, ImageError> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let mut digest = digest.to_string();
    for _ in 0..4 {
        let doc = blob_json(archive, &digest)?;
        let Some(entries) = doc.get("manifests").and_then(Value::as_array) else {
            return Ok(digest);
        };
        let found = entries.iter().find(|m| {
            let p = m.get("platform");
            let field = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_str);
            field("os") == Some("linux") && field("architecture") == Some(arch)
        });
        digest = match found {
            Some(m) => descriptor_digest(m, archive.label)?,
            None => {
                return Err(
                    archive.malformed(format!("no manifest for linux/{arch} in index {digest}"))
                )
            }
        };
    }
    Err(archive.malformed("indexes nested too deep".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive_at(dir: &Path) -> Archive<'static> {
        Archive {
            root: open_dir(dir).unwrap(),
            label: "test.tar",
        }
    }

    #[test]
    fn entries_are_opened_beneath_the_archive_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("archive");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/layer.tar"), "layer").unwrap();
        std::fs::write(d.path().join("outside.json"), "{}").unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        std::os::unix::fs::symlink("../a/layer.tar", root.join("b/layer.tar")).unwrap();
        std::os::unix::fs::symlink(d.path(), root.join("abs")).unwrap();
        std::os::unix::fs::symlink("..", root.join("up")).unwrap();
        let archive = archive_at(&root);
        assert_eq!(archive.read_small("a/layer.tar").unwrap(), b"layer");
        // Links between the archive's own files are followed.
        assert_eq!(archive.read_small("b/layer.tar").unwrap(), b"layer");
        assert!(!archive.has("manifest.json").unwrap());
        for name in [
            "abs/outside.json",
            "up/outside.json",
            "../outside.json",
            "/etc/passwd",
        ] {
            match archive.open(name) {
                Err(ImageError::HostileEntry { layer, entry, .. }) => {
                    assert_eq!((layer.as_str(), entry.as_str()), ("test.tar", name));
                }
                other => panic!("{name}: {:?}", other.map(|(_, n)| n)),
            }
        }
        match archive.open("a") {
            Err(ImageError::HostileEntry { reason, .. }) => assert!(reason.contains("regular")),
            other => panic!("{:?}", other.map(|(_, n)| n)),
        }
    }
}
