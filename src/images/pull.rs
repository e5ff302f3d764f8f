//! Pulling an image from an OCI registry with `oci-client`: the manifest
//! (a manifest list resolves to this machine's platform), the config and
//! every layer, each digest-checked before it enters the store. Layers and
//! bytes done are reported as [`Progress::Pull`] while it runs.
//!
//! Registries on loopback addresses are reached over plain HTTP, as Docker
//! does. Credentials come from `ENDLESS_REGISTRY_USERNAME` /
//! `ENDLESS_REGISTRY_PASSWORD`, else from `~/.docker/config.json`'s `auths`
//! entry for the registry, else the pull is anonymous.

use base64::Engine;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError};
use oci_client::secrets::RegistryAuth;
use oci_client::Client;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use super::store::{ImageConfig, StoredImage, StoredLayer};
use super::{no_progress, ImageError, ImageRef, ImageStore, Progress, ProgressFn};

/// Layer media types we can unpack.
pub(super) const LAYER_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];

/// What a pull did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PullReport {
    /// The canonical reference.
    pub reference: String,
    /// The manifest digest it resolved to.
    pub manifest_digest: String,
    /// Layers in the image.
    pub layers: usize,
    /// Layers downloaded now (the others were in the store already).
    pub downloaded: usize,
    /// Compressed bytes downloaded now.
    pub bytes: u64,
}

/// Pull `reference` into `store` (blocking; runs its own runtime on a
/// thread of its own, so it may be called from anywhere).
pub fn pull(store: &ImageStore, reference: &ImageRef) -> Result<PullReport, ImageError> {
    pull_from(store, reference, reference, &no_progress)
}

/// Pull `reference` from `source` (the same image on a mirror) and register
/// it under `reference`, reporting layers and bytes to `progress`.
pub fn pull_from(
    store: &ImageStore,
    reference: &ImageRef,
    source: &ImageRef,
    progress: ProgressFn<'_>,
) -> Result<PullReport, ImageError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ImageError::io("start a runtime", "tokio")(e))?;
                rt.block_on(pull_async(store, reference, source, progress))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(ImageError::Malformed {
                    reference: "(pull)".into(),
                    reason: "the pull thread panicked".into(),
                })
            })
    })
}

/// A download's file, counting what is written to it and reporting the
/// bytes of the whole pull now and then (every 1% or 256 KiB).
struct Counting<'a, W> {
    inner: W,
    /// Bytes of the pull done before this download, and in this one so far.
    before: u64,
    written: u64,
    reported: u64,
    report: &'a (dyn Fn(u64) + Sync),
    every: u64,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counting<'_, W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            this.written += *n as u64;
            if this.written - this.reported >= this.every {
                this.reported = this.written;
                (this.report)(this.before + this.written);
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn auth_for(registry: &str) -> RegistryAuth {
    if let (Ok(user), Ok(pass)) = (
        std::env::var("ENDLESS_REGISTRY_USERNAME"),
        std::env::var("ENDLESS_REGISTRY_PASSWORD"),
    ) {
        return RegistryAuth::Basic(user, pass);
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let config = home
        .map(|h| h.join(".docker/config.json"))
        // trusted: the operator's Docker credentials
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let entry = config.as_ref().and_then(|c| {
        let auths = c.get("auths")?.as_object()?;
        auths
            .iter()
            .find(|(k, _)| k.trim_start_matches("https://").trim_end_matches('/') == registry)
            .and_then(|(_, v)| v.get("auth")?.as_str())
    });
    entry
        .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| {
            s.split_once(':')
                .map(|(u, p)| RegistryAuth::Basic(u.into(), p.into()))
        })
        .unwrap_or(RegistryAuth::Anonymous)
}

/// A client for `reference`'s registry (plain HTTP on loopback).
pub fn client_for(reference: &ImageRef) -> Client {
    let protocol = if reference.is_loopback() {
        ClientProtocol::HttpsExcept(vec![reference.registry().to_string()])
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        ..Default::default()
    })
}

async fn pull_async(
    store: &ImageStore,
    reference: &ImageRef,
    source: &ImageRef,
    progress: ProgressFn<'_>,
) -> Result<PullReport, ImageError> {
    let name = reference.canonical();
    let registry_error = |e: OciDistributionError| match e {
        OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
            ImageError::DigestMismatch {
                reference: name.clone(),
                expected,
                actual,
            }
        }
        e => ImageError::Registry {
            reference: name.clone(),
            registry: source.registry().to_string(),
            reason: e.to_string(),
        },
    };
    let client = client_for(source);
    let auth = auth_for(source.registry());
    let oci = source.as_oci();
    let (manifest, manifest_digest) = client
        .pull_image_manifest(oci, &auth)
        .await
        .map_err(registry_error)?;
    let mut config_bytes = Vec::new();
    client
        .pull_blob(oci, &manifest.config, &mut config_bytes)
        .await
        .map_err(registry_error)?;
    let tmp = store.temp_path("config")?;
    // trusted: our own temporary in the private image store
    std::fs::write(&tmp, &config_bytes).map_err(ImageError::io("write config", &tmp))?;
    store.put_blob(&tmp, &manifest.config.digest, &name)?;
    let config = parse_config(&config_bytes, &name)?;
    let mut pulled_report = PullReport {
        reference: name.clone(),
        manifest_digest: manifest_digest.clone(),
        layers: manifest.layers.len(),
        downloaded: 0,
        bytes: 0,
    };
    let mut layers = Vec::new();
    let size = |l: &oci_client::manifest::OciDescriptor| l.size.max(0) as u64;
    let total: u64 = manifest.layers.iter().map(size).sum();
    let (mut layers_done, mut bytes_done) = (0, 0);
    for layer in manifest.layers.iter().filter(|l| store.has_blob(&l.digest)) {
        layers_done += 1;
        bytes_done += size(layer);
    }
    let report = |layers_done: usize, bytes_done: u64| {
        progress(&Progress::Pull {
            reference: name.clone(),
            layers_done,
            layers: manifest.layers.len(),
            bytes_done,
            bytes: total,
        })
    };
    report(layers_done, bytes_done);
    for layer in &manifest.layers {
        if !LAYER_TYPES.contains(&layer.media_type.as_str()) {
            return Err(ImageError::UnsupportedLayer {
                reference: name.clone(),
                digest: layer.digest.clone(),
                media_type: layer.media_type.clone(),
            });
        }
        if !store.has_blob(&layer.digest) {
            let tmp = store.temp_path("layer")?;
            // trusted: our own temporary in the private image store
            let file = tokio::fs::File::create(&tmp)
                .await
                .map_err(ImageError::io("create download", &tmp))?;
            let bytes_now = |b: u64| report(layers_done, b);
            let mut file = Counting {
                inner: file,
                before: bytes_done,
                written: 0,
                reported: 0,
                report: &bytes_now,
                every: (total / 100).max(256 << 10),
            };
            let pulled = client.pull_blob(oci, layer, &mut file).await;
            let flushed = tokio::io::AsyncWriteExt::flush(&mut file).await;
            drop(file);
            if let Err(e) = pulled {
                // trusted: our own temporary in the private image store
                let _ = std::fs::remove_file(&tmp);
                return Err(registry_error(e));
            }
            flushed.map_err(ImageError::io("write download", &tmp))?;
            store.put_blob(&tmp, &layer.digest, &name)?;
            pulled_report.downloaded += 1;
            pulled_report.bytes += size(layer);
            layers_done += 1;
            bytes_done += size(layer);
            report(layers_done, bytes_done);
        }
        layers.push(StoredLayer {
            digest: layer.digest.clone(),
            media_type: layer.media_type.clone(),
            size: layer.size.max(0) as u64,
        });
    }
    store.register(&StoredImage {
        reference: name.clone(),
        manifest_digest,
        layers,
        config,
    })?;
    Ok(pulled_report)
}

/// The honoured parts of an image config (`config.Env`, `WorkingDir`, `User`).
pub(super) fn parse_config(bytes: &[u8], reference: &str) -> Result<ImageConfig, ImageError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ImageError::Malformed {
            reference: reference.to_string(),
            reason: format!("image config is not JSON: {e}"),
        })?;
    let c = v.get("config").cloned().unwrap_or_default();
    let text = |k: &str| {
        c.get(k)
            .and_then(|x| x.as_str())
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    Ok(ImageConfig {
        env: c
            .get("Env")
            .and_then(|e| e.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        workdir: text("WorkingDir"),
        user: text("User"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_fields_are_read() {
        let c = parse_config(
            br#"{"architecture":"amd64","config":{"Env":["PATH=/usr/local/bin:/usr/bin","LANG=C.UTF-8"],"WorkingDir":"/app"}}"#,
            "x",
        )
        .unwrap();
        assert_eq!(c.env.len(), 2);
        assert_eq!(c.workdir.as_deref(), Some("/app"));
        assert!(parse_config(b"nope", "x").is_err());
    }
}
