//! `endless images load FILE`: images from a `docker save` archive or an OCI
//! image layout (a directory or a tar of one), for machines without a
//! registry. Every blob is digest-checked on its way into the store, paths
//! named inside the archive may not leave it, and an image is registered only
//! once all of its blobs are stored, so a bad archive leaves nothing
//! half-registered.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::pull::parse_config;
use super::store::{file_digest, StoredImage, StoredLayer};
use super::{ImageError, ImageRef, ImageStore};

/// Media type of the uncompressed layers of a classic `docker save`.
const DOCKER_TAR: &str = "application/vnd.docker.image.rootfs.diff.tar";
/// Annotation naming an image in an OCI layout's index.
const REF_NAME: &str = "org.opencontainers.image.ref.name";

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
    let meta = std::fs::metadata(path).map_err(ImageError::io("read archive", path))?;
    let (dir, extracted) = if meta.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let tmp = store.temp_path("load")?;
        std::fs::create_dir_all(&tmp).map_err(ImageError::io("create store directory", &tmp))?;
        let file = std::fs::File::open(path).map_err(ImageError::io("read archive", path))?;
        let mut archive = tar::Archive::new(std::io::BufReader::new(file));
        archive.set_preserve_permissions(false);
        archive.set_unpack_xattrs(false);
        if let Err(e) = archive.unpack(&tmp) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(ImageError::Malformed {
                reference: label,
                reason: format!("not a tar archive of an image: {e}"),
            });
        }
        (tmp.clone(), Some(tmp))
    };
    let result = load_dir(store, &dir, &label, tag);
    if let Some(tmp) = extracted {
        let _ = std::fs::remove_dir_all(tmp);
    }
    result
}

/// The images of an unpacked archive: `manifest.json` (docker save) first,
/// else `index.json` (OCI layout).
fn load_dir(
    store: &ImageStore,
    dir: &Path,
    label: &str,
    tag: Option<&str>,
) -> Result<Vec<LoadReport>, ImageError> {
    let malformed = |reason: String| ImageError::Malformed {
        reference: label.to_string(),
        reason,
    };
    let mut images = if dir.join("manifest.json").is_file() {
        docker_images(store, dir, label)?
    } else if dir.join("index.json").is_file() {
        oci_images(store, dir, label)?
    } else {
        return Err(malformed(
            "neither a `docker save` archive (manifest.json) nor an OCI layout (index.json)".into(),
        ));
    };
    if images.is_empty() {
        return Err(malformed("it holds no image".into()));
    }
    if let Some(tag) = tag {
        if images.len() != 1 {
            return Err(malformed(format!(
                "--tag names one image, but it holds {}",
                images.len()
            )));
        }
        images[0].0 = Some(tag.to_string());
    }
    // Check every name before registering anything.
    let mut named = Vec::new();
    for (name, image) in images {
        let name = name
            .ok_or_else(|| malformed("an image in it has no name: give one with --tag".into()))?;
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

/// A path named inside the archive, kept inside it.
fn inside(dir: &Path, name: &str, label: &str) -> Result<PathBuf, ImageError> {
    let rel = Path::new(name);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ImageError::HostileEntry {
            layer: label.to_string(),
            entry: name.to_string(),
            reason: "paths in an image archive stay inside it".into(),
        });
    }
    let path = dir.join(rel);
    let meta = std::fs::symlink_metadata(&path).map_err(ImageError::io("read archive", &path))?;
    if !meta.is_file() {
        return Err(ImageError::HostileEntry {
            layer: label.to_string(),
            entry: name.to_string(),
            reason: "not a regular file".into(),
        });
    }
    Ok(path)
}

/// Copy `src` into the store as `digest` (checked), unless it is there.
fn store_blob(store: &ImageStore, src: &Path, digest: &str, label: &str) -> Result<(), ImageError> {
    if store.has_blob(digest) {
        return Ok(());
    }
    let tmp = store.temp_path("blob")?;
    std::fs::copy(src, &tmp).map_err(ImageError::io("copy blob", src))?;
    store.put_blob(&tmp, digest, label)
}

fn read_json(path: &Path, label: &str) -> Result<Value, ImageError> {
    let bytes = std::fs::read(path).map_err(ImageError::io("read archive", path))?;
    serde_json::from_slice(&bytes).map_err(|e| ImageError::Malformed {
        reference: label.to_string(),
        reason: format!("{}: {e}", path.display()),
    })
}

/// `docker save`: `manifest.json` lists each image's config, tags and
/// layer files (uncompressed tars, or OCI blobs in newer Docker).
fn docker_images(
    store: &ImageStore,
    dir: &Path,
    label: &str,
) -> Result<Vec<(Option<String>, StoredImage)>, ImageError> {
    let manifest = read_json(&dir.join("manifest.json"), label)?;
    let entries = manifest.as_array().ok_or_else(|| ImageError::Malformed {
        reference: label.to_string(),
        reason: "manifest.json is not a list".into(),
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let text = |k: &str| entry.get(k).and_then(Value::as_str);
        let config_name = text("Config").ok_or_else(|| ImageError::Malformed {
            reference: label.to_string(),
            reason: "manifest.json: an entry has no `Config`".into(),
        })?;
        let config_path = inside(dir, config_name, label)?;
        let config_bytes =
            std::fs::read(&config_path).map_err(ImageError::io("read archive", &config_path))?;
        let config = parse_config(&config_bytes, label)?;
        let mut layers = Vec::new();
        let mut id = Sha256::new();
        id.update(&config_bytes);
        for layer in entry
            .get("Layers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = layer.as_str().ok_or_else(|| ImageError::Malformed {
                reference: label.to_string(),
                reason: "manifest.json: a layer is not a path".into(),
            })?;
            let path = inside(dir, name, label)?;
            let digest = file_digest(&path)?;
            store_blob(store, &path, &digest, label)?;
            id.update(digest.as_bytes());
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            layers.push(StoredLayer {
                digest,
                media_type: layer_media_type(&path)?,
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

/// A classic layer file is a plain tar; newer `docker save` writes OCI blobs,
/// which may be gzipped.
fn layer_media_type(path: &Path) -> Result<String, ImageError> {
    use std::io::Read;
    let mut magic = [0u8; 2];
    let mut f = std::fs::File::open(path).map_err(ImageError::io("read archive", path))?;
    let n = f
        .read(&mut magic)
        .map_err(ImageError::io("read archive", path))?;
    Ok(if n == 2 && magic == [0x1f, 0x8b] {
        "application/vnd.docker.image.rootfs.diff.tar.gzip".into()
    } else {
        DOCKER_TAR.into()
    })
}

/// An OCI image layout: `index.json` names manifests (or indexes of
/// per-platform manifests) in `blobs/<alg>/<hex>`.
fn oci_images(
    store: &ImageStore,
    dir: &Path,
    label: &str,
) -> Result<Vec<(Option<String>, StoredImage)>, ImageError> {
    let index = read_json(&dir.join("index.json"), label)?;
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
        let manifest_digest = platform_manifest(dir, &manifest_digest, label)?;
        let manifest = read_json(&blob_in(dir, &manifest_digest, label)?, label)?;
        let config_digest = manifest
            .get("config")
            .ok_or_else(|| ImageError::Malformed {
                reference: label.to_string(),
                reason: format!("manifest {manifest_digest} has no config"),
            })
            .and_then(|c| descriptor_digest(c, label))?;
        let config_path = blob_in(dir, &config_digest, label)?;
        store_blob(store, &config_path, &config_digest, label)?;
        let config_bytes =
            std::fs::read(&config_path).map_err(ImageError::io("read archive", &config_path))?;
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
            let path = blob_in(dir, &digest, label)?;
            store_blob(store, &path, &digest, label)?;
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
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

/// The file of blob `digest` in the layout, checked against its digest.
fn blob_in(dir: &Path, digest: &str, label: &str) -> Result<PathBuf, ImageError> {
    let hex = super::digest_hex(digest).ok_or_else(|| ImageError::Malformed {
        reference: label.to_string(),
        reason: format!("`{digest}` is not a sha256 digest"),
    })?;
    let path = inside(dir, &format!("blobs/sha256/{hex}"), label)?;
    let actual = file_digest(&path)?;
    if actual != digest {
        return Err(ImageError::DigestMismatch {
            reference: label.to_string(),
            expected: digest.to_string(),
            actual,
        });
    }
    Ok(path)
}

/// A manifest digest, or the digest of this machine's entry when it names
/// an index of per-platform manifests (nested at most a few deep).
fn platform_manifest(dir: &Path, digest: &str, label: &str) -> Result<String, ImageError> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let mut digest = digest.to_string();
    for _ in 0..4 {
        let doc = read_json(&blob_in(dir, &digest, label)?, label)?;
        let Some(entries) = doc.get("manifests").and_then(Value::as_array) else {
            return Ok(digest);
        };
        let found = entries.iter().find(|m| {
            let p = m.get("platform");
            let field = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_str);
            field("os") == Some("linux") && field("architecture") == Some(arch)
        });
        digest = match found {
            Some(m) => descriptor_digest(m, label)?,
            None => {
                return Err(ImageError::Malformed {
                    reference: label.to_string(),
                    reason: format!("no manifest for linux/{arch} in index {digest}"),
                })
            }
        };
    }
    Err(ImageError::Malformed {
        reference: label.to_string(),
        reason: "indexes nested too deep".into(),
    })
}
