//! `endless images build-base NAME`: a Debian root filesystem made with
//! `mmdebstrap` from an apt mirror, registered as a one-layer image, for
//! machines that reach Debian's archive but no container registry. With
//! `[images.aliases]` a task written for `ubuntu:24.04` can build on it.

use std::path::Path;
use std::process::Command;

use super::store::{file_digest, ImageConfig, StoredImage, StoredLayer};
use super::{ImageError, ImageRef, ImageStore, LoadReport};

/// Media type of an uncompressed layer.
const TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// What `build-base` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseSpec {
    /// Debian suite (`bookworm`, `trixie`).
    pub suite: String,
    /// The apt mirror (`http://deb.debian.org/debian`).
    pub mirror: String,
    /// Packages beyond the variant's.
    pub packages: Vec<String>,
    /// mmdebstrap's variant (`minbase`: apt and essentials only).
    pub variant: String,
    /// Shell commands run on the finished root (`$1`), as mmdebstrap's
    /// `--customize-hook`s.
    pub hooks: Vec<String>,
}

impl Default for BaseSpec {
    fn default() -> Self {
        BaseSpec {
            suite: "bookworm".into(),
            mirror: "http://deb.debian.org/debian".into(),
            packages: Vec::new(),
            variant: "minbase".into(),
            hooks: Vec::new(),
        }
    }
}

/// Write the root filesystem of `spec` as a tar at `out` with mmdebstrap.
pub fn debian_rootfs_tar(spec: &BaseSpec, out: &Path) -> Result<(), ImageError> {
    let bin = ["/usr/bin/mmdebstrap", "/usr/local/bin/mmdebstrap"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or_else(|| ImageError::Tool {
            tool: "mmdebstrap".into(),
            reason: "not installed (Debian/Ubuntu: `apt-get install mmdebstrap`)".into(),
        })?;
    for (what, value) in [("suite", &spec.suite), ("variant", &spec.variant)] {
        if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(ImageError::Tool {
                tool: "mmdebstrap".into(),
                reason: format!("--{what} {value:?} is not a Debian {what} name"),
            });
        }
    }
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--variant={}", spec.variant))
        .arg("--format=tar")
        .arg("--quiet");
    if !spec.packages.is_empty() {
        cmd.arg(format!("--include={}", spec.packages.join(",")));
    }
    for hook in &spec.hooks {
        cmd.arg(format!("--customize-hook={hook}"));
    }
    cmd.arg(&spec.suite).arg(out).arg(&spec.mirror);
    let output = cmd.output().map_err(|e| ImageError::Tool {
        tool: "mmdebstrap".into(),
        reason: e.to_string(),
    })?;
    if !output.status.success() {
        // trusted: our own temporary in the private image store
        let _ = std::fs::remove_file(out);
        let err = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        return Err(ImageError::Tool {
            tool: "mmdebstrap".into(),
            reason: format!(
                "building {} from {} failed ({}):\n{}",
                spec.suite,
                spec.mirror,
                output.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ),
        });
    }
    Ok(())
}

/// Register the root filesystem tar `rootfs` as the one-layer image `name`
/// (the tar is copied into the store, digest-checked).
pub fn register_rootfs(
    store: &ImageStore,
    name: &str,
    rootfs: &Path,
) -> Result<LoadReport, ImageError> {
    let env = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
    ]
    .map(String::from)
    .to_vec();
    register_layer(store, name, rootfs, env)
}

/// Register the uncompressed layer tar `rootfs` as the one-layer image
/// `name` with the environment `env` (`KEY=value` entries).
pub fn register_layer(
    store: &ImageStore,
    name: &str,
    rootfs: &Path,
    env: Vec<String>,
) -> Result<LoadReport, ImageError> {
    let reference = ImageRef::parse(name)?;
    let digest = file_digest(rootfs)?;
    if !store.has_blob(&digest) {
        let tmp = store.temp_path("rootfs")?;
        // trusted: the root filesystem the operator named, into our temporary
        std::fs::copy(rootfs, &tmp).map_err(ImageError::io("copy root filesystem", rootfs))?;
        store.put_blob(&tmp, &digest, name)?;
    }
    // trusted: the root filesystem the operator named, into our temporary
    let size = std::fs::metadata(rootfs).map(|m| m.len()).unwrap_or(0);
    let image = StoredImage {
        reference: reference.canonical(),
        manifest_digest: digest.clone(),
        layers: vec![StoredLayer {
            digest,
            media_type: TAR.into(),
            size,
        }],
        config: ImageConfig {
            env,
            workdir: None,
            user: None,
        },
    };
    store.register(&image)?;
    Ok(LoadReport {
        reference: image.reference,
        manifest_digest: image.manifest_digest,
        layers: 1,
    })
}

/// Build a Debian base with mmdebstrap and register it as `name`.
pub fn build_base(
    store: &ImageStore,
    name: &str,
    spec: &BaseSpec,
) -> Result<LoadReport, ImageError> {
    ImageRef::parse(name)?;
    let tmp = store.temp_path("base.tar")?;
    debian_rootfs_tar(spec, &tmp)?;
    let result = register_rootfs(store, name, &tmp);
    // trusted: our own temporary in the private image store
    let _ = std::fs::remove_file(&tmp);
    result
}
