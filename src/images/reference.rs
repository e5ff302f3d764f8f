//! Image references (`ubuntu:24.04`, `ghcr.io/org/app@sha256:...`,
//! `127.0.0.1:5000/test:1`), parsed with `oci-client`'s rules (Docker Hub and
//! `library/` by default, `latest` when no tag is given).

use oci_client::Reference;

use super::ImageError;

/// The name of the base made of the host's own system directories.
pub const HOST: &str = "host";

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    inner: Reference,
}

impl ImageRef {
    /// Parse `text`.
    pub fn parse(text: &str) -> Result<ImageRef, ImageError> {
        let text = text.trim();
        text.parse::<Reference>()
            .map(|inner| ImageRef { inner })
            .map_err(|e| ImageError::BadReference {
                reference: text.to_string(),
                reason: e.to_string(),
            })
    }

    /// The full, canonical form (`docker.io/library/ubuntu:24.04`).
    pub fn canonical(&self) -> String {
        self.inner.whole()
    }

    /// The registry host (and port).
    pub fn registry(&self) -> &str {
        self.inner.resolve_registry()
    }

    /// Whether the registry is on a loopback address (reached over plain
    /// HTTP without configuration, as Docker does).
    pub fn is_loopback(&self) -> bool {
        let registry = self.inner.registry();
        let host = match registry.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(rest),
            None => match registry.rsplit_once(':') {
                Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
                _ => registry,
            },
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The registry as written, before Docker Hub's redirection
    /// (`docker.io`, `ghcr.io`, `127.0.0.1:5000`): what mirrors are keyed by.
    pub fn registry_name(&self) -> &str {
        self.inner.registry()
    }

    /// The same repository, tag and digest on another registry (a mirror).
    pub fn on_registry(&self, registry: &str) -> Result<ImageRef, ImageError> {
        let repository = self.inner.repository().to_string();
        let registry = registry.trim().trim_end_matches('/').to_string();
        if registry.is_empty() || registry.contains("://") {
            return Err(ImageError::BadReference {
                reference: registry,
                reason: "a mirror is a registry host (and port), without a scheme".into(),
            });
        }
        let inner = match (self.inner.tag(), self.inner.digest()) {
            (Some(tag), Some(digest)) => Reference::with_tag_and_digest(
                registry,
                repository,
                tag.to_string(),
                digest.to_string(),
            ),
            (_, Some(digest)) => Reference::with_digest(registry, repository, digest.to_string()),
            (tag, None) => {
                Reference::with_tag(registry, repository, tag.unwrap_or("latest").to_string())
            }
        };
        Ok(ImageRef { inner })
    }

    /// The `oci-client` reference.
    pub fn as_oci(&self) -> &Reference {
        &self.inner
    }
}

/// Whether `text` names the host base rather than an image.
pub fn is_host(text: &str) -> bool {
    text.trim() == HOST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_get_docker_defaults() {
        let r = ImageRef::parse("ubuntu:24.04").unwrap();
        assert_eq!(r.canonical(), "docker.io/library/ubuntu:24.04");
        assert!(!r.is_loopback());
        let r = ImageRef::parse("127.0.0.1:5000/endless/test:1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert!(r.is_loopback());
        assert!(ImageRef::parse("localhost:5000/x").unwrap().is_loopback());
        assert!(ImageRef::parse("not a reference!").is_err());
        assert!(is_host("host") && !is_host("ubuntu"));
    }
}
