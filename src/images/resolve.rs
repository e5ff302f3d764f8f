//! From what a task's definition writes (`FROM ubuntu:24.04`, `From:
//! python:3.13-slim`) to the base it builds on: aliases first, then the local
//! store, then a pull (through a configured mirror), then the configured
//! fallback. Every substitution is written down in [`Base::note`], so that a
//! task built on something other than what it asked for says so.

use std::collections::HashSet;
use std::sync::Mutex;

use super::{
    is_host, no_progress, pull_from, stand_in_for, ImageError, ImageRef, ImageStore, ProgressFn,
    StoredImage,
};
use crate::config::{BaseFallback, ImagesConfig, PullPolicy};

/// The base a definition resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// The host's system directories.
    Host {
        /// Why, when the definition asked for an image.
        note: Option<String>,
    },
    /// A stored image.
    Image {
        /// The image.
        image: StoredImage,
        /// Set when it is a substitute (an alias) for what was asked.
        note: Option<String>,
    },
}

impl Base {
    /// What was substituted, if anything.
    pub fn note(&self) -> Option<&str> {
        match self {
            Base::Host { note } | Base::Image { note, .. } => note.as_deref(),
        }
    }
}

/// Resolves bases for one backend, remembering pulls that failed so that a
/// batch of tasks on an unreachable image tries the registry once.
#[derive(Debug, Default)]
pub struct Resolver {
    settings: ImagesConfig,
    failed: Mutex<HashSet<String>>,
}

impl Resolver {
    /// A resolver with the `[images]` settings.
    pub fn new(settings: ImagesConfig) -> Resolver {
        Resolver {
            settings,
            failed: Mutex::new(HashSet::new()),
        }
    }

    /// The settings it resolves with.
    pub fn settings(&self) -> &ImagesConfig {
        &self.settings
    }

    /// The base `written` (a definition's `FROM`, or `None`) resolves to in `store`.
    pub fn resolve(&self, store: &ImageStore, written: Option<&str>) -> Result<Base, ImageError> {
        self.resolve_reporting(store, written, &no_progress)
    }

    /// [`Resolver::resolve`], reporting a pull's progress to `progress`.
    pub fn resolve_reporting(
        &self,
        store: &ImageStore,
        written: Option<&str>,
        progress: ProgressFn<'_>,
    ) -> Result<Base, ImageError> {
        self.resolve_inner(store, written, progress, false)
    }

    /// The image `written` resolves to through aliases, the store, its
    /// stand-in or a pull, never the `[images] fallback` (for a task's
    /// prebuilt `docker_image`, which is used only when it can be had).
    pub fn resolve_available(
        &self,
        store: &ImageStore,
        written: &str,
        progress: ProgressFn<'_>,
    ) -> Result<Base, ImageError> {
        self.resolve_inner(store, Some(written), progress, true)
    }

    fn resolve_inner(
        &self,
        store: &ImageStore,
        written: Option<&str>,
        progress: ProgressFn<'_>,
        strict: bool,
    ) -> Result<Base, ImageError> {
        let fall_back = |target: &str, alias_note: Option<String>, err: ImageError| {
            if strict {
                Err(ImageError::Unavailable {
                    reference: target.to_string(),
                    reason: err.to_string(),
                })
            } else {
                self.fall_back(target, alias_note, err)
            }
        };
        let Some(written) = written.map(str::trim).filter(|w| !w.is_empty()) else {
            return Ok(Base::Host { note: None });
        };
        if is_host(written) {
            return Ok(Base::Host { note: None });
        }
        let (target, alias_note) = match self.alias_of(written) {
            Some(to) => (
                to.to_string(),
                Some(format!("{written} is aliased to {to}")),
            ),
            None => (written.to_string(), None),
        };
        if is_host(&target) {
            return Ok(Base::Host { note: alias_note });
        }
        let reference = match ImageRef::parse(&target) {
            Ok(r) => r,
            // `./ubuntu_22.04.sif` (Apptainer's localimage) and the like.
            Err(e) => {
                return fall_back(&target, alias_note, e);
            }
        };
        if let Some(image) = store.get(&reference) {
            store.touch(&reference);
            return Ok(Base::Image {
                image,
                note: alias_note,
            });
        }
        // A stand-in built by `endless images stand-ins` serves it, as an alias would.
        if let Some((stand_in, image)) = store.stand_in(&reference) {
            if let Ok(r) = ImageRef::parse(&image.reference) {
                store.touch(&r);
            }
            let note = stand_in.note(&target);
            return Ok(Base::Image {
                image,
                note: Some(match alias_note {
                    Some(a) => format!("{a}; {note}"),
                    None => note,
                }),
            });
        }
        let canonical = reference.canonical();
        let err = match self.settings.pull {
            PullPolicy::Never => ImageError::NotStored(canonical.clone()),
            PullPolicy::Auto if self.failed_before(&canonical) => ImageError::Registry {
                reference: canonical.clone(),
                registry: reference.registry().to_string(),
                reason: "an earlier pull in this run failed".into(),
            },
            PullPolicy::Auto => {
                let source = self.source_of(&reference)?;
                match pull_from(store, &reference, &source, progress) {
                    Ok(_) => match store.get(&reference) {
                        Some(image) => {
                            return Ok(Base::Image {
                                image,
                                note: alias_note,
                            })
                        }
                        None => ImageError::NotStored(canonical.clone()),
                    },
                    Err(e) => {
                        if let Ok(mut failed) = self.failed.lock() {
                            failed.insert(canonical.clone());
                        }
                        e
                    }
                }
            }
        };
        fall_back(&target, alias_note, err)
    }

    /// The canonical reference `written` asks for once aliases are applied
    /// (`None`: the host base, or no reference at all), without touching
    /// the store or the network.
    pub fn target_of(&self, written: Option<&str>) -> Option<String> {
        let written = written
            .map(str::trim)
            .filter(|w| !w.is_empty() && !is_host(w))?;
        let target = self.alias_of(written).unwrap_or(written);
        if is_host(target) {
            return None;
        }
        ImageRef::parse(target).ok().map(|r| r.canonical())
    }

    /// Where a pull of `reference` goes: its mirror, if one is configured.
    pub fn source_of(&self, reference: &ImageRef) -> Result<ImageRef, ImageError> {
        match self.settings.mirrors.get(reference.registry_name()) {
            Some(mirror) => reference.on_registry(mirror),
            None => Ok(reference.clone()),
        }
    }

    fn alias_of(&self, written: &str) -> Option<&str> {
        if let Some(to) = self.settings.aliases.get(written) {
            return Some(to);
        }
        // `ubuntu:24.04` also matches an alias written `docker.io/library/ubuntu:24.04`.
        let canonical = ImageRef::parse(written).ok()?.canonical();
        self.settings
            .aliases
            .iter()
            .find(|(from, _)| ImageRef::parse(from).is_ok_and(|r| r.canonical() == canonical))
            .map(|(_, to)| to.as_str())
    }

    fn failed_before(&self, canonical: &str) -> bool {
        self.failed
            .lock()
            .map(|f| f.contains(canonical))
            .unwrap_or(false)
    }

    fn fall_back(
        &self,
        target: &str,
        alias_note: Option<String>,
        err: ImageError,
    ) -> Result<Base, ImageError> {
        let hint = stand_in_hint(target);
        match self.settings.fallback {
            BaseFallback::Error => Err(ImageError::Unavailable {
                reference: target.to_string(),
                reason: format!("{err}{hint}"),
            }),
            BaseFallback::Host => {
                let why = match alias_note {
                    Some(a) => format!("{a}, which is unavailable ({err}{hint})"),
                    None => format!("{target} is unavailable ({err}{hint})"),
                };
                Ok(Base::Host {
                    note: Some(format!(
                        "{why}: built on the host's system directories instead \
                         ([images] fallback = \"host\")"
                    )),
                })
            }
        }
    }
}

/// What to say about stand-ins when `target` cannot be had: the command
/// that builds its stand-in, or why it has none (empty for other images).
fn stand_in_hint(target: &str) -> String {
    let Ok(reference) = ImageRef::parse(target) else {
        return String::new();
    };
    match stand_in_for(&reference) {
        Ok(Some(s)) => format!(
            "; a stand-in exists: build it with `endless images stand-ins --only {target}` \
             (it serves {target} as {}{})",
            s.name,
            if s.differs.is_empty() {
                String::new()
            } else {
                format!(": {}", s.differs.join("; "))
            }
        ),
        Ok(None) => String::new(),
        Err(e) => format!("; {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::{ImageConfig, StoredLayer};

    fn settings(pull: PullPolicy, fallback: BaseFallback) -> ImagesConfig {
        ImagesConfig {
            pull,
            fallback,
            ..ImagesConfig::default()
        }
    }

    fn stored(reference: &str) -> StoredImage {
        StoredImage {
            reference: ImageRef::parse(reference).unwrap().canonical(),
            manifest_digest: format!("sha256:{}", "a".repeat(64)),
            layers: vec![StoredLayer {
                digest: format!("sha256:{}", "b".repeat(64)),
                media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                size: 1,
            }],
            config: ImageConfig::default(),
        }
    }

    #[test]
    fn host_and_no_base_are_the_host() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        let r = Resolver::new(ImagesConfig::default());
        assert_eq!(r.resolve(&store, None).unwrap(), Base::Host { note: None });
        assert_eq!(
            r.resolve(&store, Some("host")).unwrap(),
            Base::Host { note: None }
        );
    }

    #[test]
    fn aliases_substitute_and_say_so() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        store.register(&stored("debian:bookworm")).unwrap();
        let mut s = settings(PullPolicy::Never, BaseFallback::Error);
        s.aliases.insert(
            "docker.io/library/ubuntu:24.04".into(),
            "debian:bookworm".into(),
        );
        s.aliases.insert("ubuntu:22.04".into(), "host".into());
        let r = Resolver::new(s);
        match r.resolve(&store, Some("ubuntu:24.04")).unwrap() {
            Base::Image { image, note } => {
                assert_eq!(image.reference, "docker.io/library/debian:bookworm");
                assert_eq!(
                    note.as_deref(),
                    Some("ubuntu:24.04 is aliased to debian:bookworm")
                );
            }
            other => panic!("{other:?}"),
        }
        let host = r.resolve(&store, Some("ubuntu:22.04")).unwrap();
        assert!(matches!(host, Base::Host { note: Some(ref n) } if n.contains("aliased to host")));
        // The store's own image needs no note.
        let own = r.resolve(&store, Some("debian:bookworm")).unwrap();
        assert_eq!(own.note(), None);
    }

    #[test]
    fn a_missing_image_falls_back_or_fails_as_configured() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        let strict = Resolver::new(settings(PullPolicy::Never, BaseFallback::Error));
        let e = strict
            .resolve(&store, Some("python:3.13-slim"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("python:3.13-slim") && e.contains("[images]"),
            "{e}"
        );
        let lenient = Resolver::new(settings(PullPolicy::Never, BaseFallback::Host));
        let base = lenient.resolve(&store, Some("python:3.13-slim")).unwrap();
        let note = base.note().unwrap();
        assert!(note.contains("python:3.13-slim is unavailable"), "{note}");
        assert!(matches!(base, Base::Host { .. }));
        // Apptainer's `localimage` paths are no references: the fallback applies.
        let local = lenient.resolve(&store, Some("./ubuntu_22.04.sif")).unwrap();
        assert!(local.note().is_some());
    }

    #[test]
    fn mirrors_redirect_pulls_but_not_names() {
        let mut s = ImagesConfig::default();
        s.mirrors
            .insert("docker.io".into(), "127.0.0.1:5999".into());
        let r = Resolver::new(s);
        let reference = ImageRef::parse("ubuntu:24.04").unwrap();
        let source = r.source_of(&reference).unwrap();
        assert_eq!(source.canonical(), "127.0.0.1:5999/library/ubuntu:24.04");
        assert!(source.is_loopback());
        let other = ImageRef::parse("ghcr.io/x/y:1").unwrap();
        assert_eq!(r.source_of(&other).unwrap(), other);
    }

    #[test]
    fn stand_ins_serve_their_references_and_errors_name_the_command() {
        let d = tempfile::tempdir().unwrap();
        let store = ImageStore::new(d.path());
        let strict = Resolver::new(settings(PullPolicy::Never, BaseFallback::Error));
        let e = strict
            .resolve(&store, Some("python:3.13-slim-bookworm"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a stand-in exists")
                && e.contains("endless images stand-ins --only python:3.13-slim-bookworm"),
            "{e}"
        );
        let e = strict
            .resolve(&store, Some("python:3.8-slim"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("has no stand-in") && e.contains("python:3.9 to python:3.14"),
            "{e}"
        );
        // Once built and recorded, the stand-in serves it, with a note.
        let stand_in = stand_in_for(&ImageRef::parse("python:3.13-slim-bookworm").unwrap())
            .unwrap()
            .unwrap();
        store.register(&stored(&stand_in.name)).unwrap();
        store.record_stand_in(&stand_in).unwrap();
        match strict
            .resolve(&store, Some("python:3.13-slim-bookworm"))
            .unwrap()
        {
            Base::Image { image, note } => {
                assert_eq!(image.reference, "localhost/stand-in/python:3.13-slim");
                let note = note.unwrap();
                assert!(
                    note.contains("stand-in localhost/stand-in/python:3.13-slim")
                        && note.contains("trixie instead of bookworm"),
                    "{note}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(store.stand_ins().len(), 1);
        // Its image removed, the record no longer serves.
        store
            .remove(&ImageRef::parse(&stand_in.name).unwrap())
            .unwrap();
        assert!(strict
            .resolve(&store, Some("python:3.13-slim-bookworm"))
            .is_err());
        assert!(store.stand_ins().is_empty());
    }
}
