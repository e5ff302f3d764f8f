//! Errors of the image store: each names the image, registry, layer or
//! entry concerned and what to do.

use std::path::PathBuf;

/// Everything that can go wrong while pulling, storing and unpacking images.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The reference does not parse.
    #[error("`{reference}` is not an image reference: {reason}")]
    BadReference {
        /// What was given.
        reference: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The registry could not be reached or refused the request.
    #[error("pulling {reference} from registry {registry} failed: {reason} (registries on loopback addresses are reached over plain HTTP; set ENDLESS_REGISTRY_USERNAME / ENDLESS_REGISTRY_PASSWORD or log in with `docker login` for private ones)")]
    Registry {
        /// The image.
        reference: String,
        /// Its registry.
        registry: String,
        /// What the registry or the network said.
        reason: String,
    },
    /// A downloaded blob does not have the digest its descriptor names.
    #[error(
        "blob {expected} of {reference} arrived with digest {actual}: refused (nothing was stored)"
    )]
    DigestMismatch {
        /// The image.
        reference: String,
        /// The digest the manifest names.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// A layer uses a format we cannot unpack.
    #[error("layer {digest} of {reference} has media type `{media_type}`, which is not supported (tar and tar+gzip are)")]
    UnsupportedLayer {
        /// The image.
        reference: String,
        /// The layer.
        digest: String,
        /// Its media type.
        media_type: String,
    },
    /// A layer holds an entry that would land outside it or that we refuse.
    #[error("layer {layer}: entry `{entry}` refused: {reason}")]
    HostileEntry {
        /// The layer's digest (or file).
        layer: String,
        /// The tar entry's path.
        entry: String,
        /// Why it is refused.
        reason: String,
    },
    /// A task's base image can be neither found nor pulled, and `[images]
    /// fallback` is `error`.
    #[error("base image {reference} is unavailable: {reason} (pull or load it with `endless images pull|load`, map it to another image or to `host` under [images.aliases], set a registry mirror under [images.mirrors], or set [images] fallback = \"host\")")]
    Unavailable {
        /// The image (after aliases).
        reference: String,
        /// Why it could not be had.
        reason: String,
    },
    /// A reference of a family with stand-ins (python, ubuntu, debian, uv)
    /// whose version or variant has none.
    #[error("{reference} has no stand-in: {reason} (stand-ins exist for {exist})")]
    NoStandIn {
        /// The image asked for.
        reference: String,
        /// Why there is none.
        reason: String,
        /// What exists.
        exist: String,
    },
    /// PyPI could not be reached or has no usable file.
    #[error("PyPI: {0}")]
    Pypi(String),
    /// An outside tool (mmdebstrap) is missing or failed.
    #[error("{tool}: {reason}")]
    Tool {
        /// The tool.
        tool: String,
        /// What went wrong.
        reason: String,
    },
    /// The image is not in the store.
    #[error("image {0} is not in the local store: pull it with `endless images pull {0}`")]
    NotStored(String),
    /// The image's manifest or config is malformed.
    #[error("image {reference}: {reason}")]
    Malformed {
        /// The image.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// A filesystem operation failed.
    #[error("{what} ({path}): {source}")]
    Io {
        /// What was being done.
        what: String,
        /// On which path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl ImageError {
    /// Wrap an I/O error with what was being done and on which path.
    pub fn io(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        let path = path.into();
        move |source| ImageError::Io { what, path, source }
    }
}
