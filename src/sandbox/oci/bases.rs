//! The bases of an OCI build, from the same sources as the `local`
//! backend's: `[images]` aliases, then an image the engine already has,
//! then endless's image store (its stand-ins, and pulls as `[images] pull`
//! allows). A stored image is loaded into the engine as an OCI layout
//! (`podman load`) under `localhost/endless-base:<digest>`, and the
//! definition's `FROM` lines name it: the build itself never pulls.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::super::container::command;
use super::super::session::run_with_timeout;
use super::super::SandboxError;
use super::cli::Cli;
use crate::images::{no_progress, Base, ImageRef, ImageStore, Resolver, StoredImage};
use crate::task::envdef::{EnvDefinition, DEFAULT_BASE};

/// One base as the engine will build on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineBase {
    /// What the definition writes (`ubuntu:24.04`).
    pub written: String,
    /// What the engine builds on: the written name, an alias's target, or
    /// the tag a stored image is loaded under.
    pub name: String,
    /// The stored image to load, when the store serves it.
    pub stored: Option<StoredImage>,
    /// Its identity (image id or manifest digest), for the image hash.
    pub id: String,
    /// Set when a substitute (alias, stand-in) serves it.
    pub note: Option<String>,
}

/// The image references a definition builds on (stage names left out;
/// no `FROM` at all builds on the renderer's default).
pub fn written_bases(def: &EnvDefinition) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut stages: Vec<&str> = Vec::new();
    let all = def
        .stages
        .iter()
        .map(|s| (s.base.as_deref(), s.name.as_deref()))
        .chain([(def.base.as_deref(), None)]);
    for (base, name) in all {
        let base = base.unwrap_or(DEFAULT_BASE).trim();
        if !base.is_empty()
            && base != "scratch"
            && !stages.contains(&base)
            && !out.iter().any(|b| b == base)
        {
            out.push(base.to_string());
        }
        stages.extend(name);
    }
    out
}

/// Where each base of `def` comes from (nothing is loaded yet).
pub fn resolve(
    cli: &Cli,
    store: &ImageStore,
    resolver: &Resolver,
    def: &EnvDefinition,
) -> Result<Vec<EngineBase>, SandboxError> {
    written_bases(def)
        .into_iter()
        .map(|written| resolve_one(cli, store, resolver, written))
        .collect()
}

fn resolve_one(
    cli: &Cli,
    store: &ImageStore,
    resolver: &Resolver,
    written: String,
) -> Result<EngineBase, SandboxError> {
    let target = resolver.target_of(Some(&written));
    let canonical = ImageRef::parse(&written).ok().map(|w| w.canonical());
    let aliased = target
        .as_deref()
        .filter(|t| canonical.as_deref() != Some(*t));
    let engine_name = aliased.unwrap_or(&written).to_string();
    if let Some(id) = engine_image_id(cli, &engine_name)? {
        return Ok(EngineBase {
            note: aliased.map(|t| format!("{written} is aliased to {t}")),
            written,
            name: engine_name,
            stored: None,
            id,
        });
    }
    match resolver.resolve_available(store, &written, &no_progress) {
        Ok(Base::Image { image, note }) => Ok(EngineBase {
            written,
            name: tag_of(&image),
            id: image.manifest_digest.clone(),
            stored: Some(image),
            note,
        }),
        Ok(Base::Host { .. }) => Err(SandboxError::Unavailable {
            backend: "oci".into(),
            reason: format!(
                "{written} names the host's system directories, which only the local backend builds on"
            ),
        }),
        Err(e) => Err(SandboxError::Unavailable {
            backend: "oci".into(),
            reason: format!(
                "the base {written} is neither among {}'s images nor in endless's image store: {e}",
                cli.program().display()
            ),
        }),
    }
}

/// The tag a stored image is loaded into the engine under.
pub fn tag_of(image: &StoredImage) -> String {
    let hex = image
        .manifest_digest
        .trim_start_matches("sha256:")
        .chars()
        .take(16)
        .collect::<String>();
    format!("localhost/endless-base:{hex}")
}

/// The engine's id of its image `name`, if it has it.
fn engine_image_id(cli: &Cli, name: &str) -> Result<Option<String>, SandboxError> {
    let cmd = command(&cli.argv(&["image", "inspect", "--format", "{{.Id}}", name]))?;
    let out = run_with_timeout(cmd, Duration::from_secs(30))?;
    Ok((out.code == Some(0)).then(|| out.output.trim().to_string()))
}

/// Load the stored bases the engine lacks, each through an OCI layout
/// under `scratch` (removed afterwards); the store holds them meanwhile.
pub fn load(
    cli: &Cli,
    store: &ImageStore,
    bases: &[EngineBase],
    scratch: &Path,
) -> Result<(), SandboxError> {
    for base in bases {
        let Some(image) = &base.stored else { continue };
        if engine_image_id(cli, &base.name)?.is_some() {
            continue;
        }
        if !cli.is_podman() {
            return Err(SandboxError::Unavailable {
                backend: "oci".into(),
                reason: format!(
                    "{} serves {} from endless's image store, which only podman loads \
                     (`podman load` of an OCI layout directory); install podman, or give {} \
                     the image yourself",
                    base.name,
                    base.written,
                    cli.program().display()
                ),
            });
        }
        let _hold = store.hold(&image.reference)?;
        let dir = scratch.join(format!(
            "layout-{}-{}",
            std::process::id(),
            image.manifest_digest.trim_start_matches("sha256:")
        ));
        let result =
            write_layout(store, image, &dir).and_then(|()| load_layout(cli, &dir, &base.name));
        // trusted: our own scratch directory in the private cache
        let _ = std::fs::remove_dir_all(&dir);
        result?;
    }
    Ok(())
}

/// `image` as an OCI image layout at `dir`: its blobs linked from the store,
/// a config and manifest written for them.
fn write_layout(store: &ImageStore, image: &StoredImage, dir: &Path) -> Result<(), SandboxError> {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(SandboxError::io("create OCI layout", &blobs))?;
    let mut diff_ids = Vec::new();
    let mut layers = Vec::new();
    for layer in &image.layers {
        let src = store
            .blob_path(&layer.digest)
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                SandboxError::Start(format!(
                    "the stored image {} lacks its layer {}",
                    image.reference, layer.digest
                ))
            })?;
        let hex = layer.digest.trim_start_matches("sha256:");
        let dst = blobs.join(hex);
        if std::fs::hard_link(&src, &dst).is_err() {
            std::os::unix::fs::symlink(&src, &dst)
                .map_err(SandboxError::io("link a layer into the OCI layout", &dst))?;
        }
        diff_ids.push(diff_id(&src, &layer.media_type, &layer.digest)?);
        layers.push(
            json!({"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}),
        );
    }
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let mut config = json!({"Env": image.config.env});
    if let Some(w) = &image.config.workdir {
        config["WorkingDir"] = json!(w);
    }
    if let Some(u) = &image.config.user {
        config["User"] = json!(u);
    }
    let config = json!({
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        // One entry per layer: buildah checks that history and layers agree.
        "history": image.layers.iter().map(|l| json!({"created_by": format!("endless: {} layer {}", image.reference, l.digest)})).collect::<Vec<_>>(),
    });
    let config = put_json(&blobs, &config)?;
    let manifest = put_json(
        &blobs,
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.0, "size": config.1},
            "layers": layers,
        }),
    )?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest.0, "size": manifest.1}],
    });
    for (name, text) in [
        ("index.json", index.to_string()),
        (
            "oci-layout",
            r#"{"imageLayoutVersion":"1.0.0"}"#.to_string(),
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(SandboxError::io("write OCI layout", &path))?;
    }
    Ok(())
}

/// Store `value` as a blob; its digest and size.
fn put_json(blobs: &Path, value: &serde_json::Value) -> Result<(String, usize), SandboxError> {
    let bytes = value.to_string().into_bytes();
    let hex = hex::encode(Sha256::digest(&bytes));
    let path = blobs.join(&hex);
    std::fs::write(&path, &bytes).map_err(SandboxError::io("write OCI layout", &path))?;
    Ok((format!("sha256:{hex}"), bytes.len()))
}

/// The digest of a layer's uncompressed tar (its compressed digest when it is not compressed).
fn diff_id(blob: &Path, media_type: &str, digest: &str) -> Result<String, SandboxError> {
    if !media_type.contains("gzip") {
        return Ok(digest.to_string());
    }
    let file = std::fs::File::open(blob).map_err(SandboxError::io("read layer", blob))?;
    let mut gz = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file));
    let mut h = Sha256::new();
    std::io::copy(&mut gz, &mut h).map_err(SandboxError::io("decompress layer", blob))?;
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// `podman load` the layout at `dir`, then name it `name` only.
fn load_layout(cli: &Cli, dir: &Path, name: &str) -> Result<(), SandboxError> {
    let dir_text = dir.display().to_string();
    let out = run(cli, &["load", "--quiet", "-i", &dir_text], "load")?;
    let loaded = out
        .lines()
        .find_map(|l| l.split_once("Loaded image").map(|(_, r)| r))
        .and_then(|r| r.split_once(':').map(|(_, n)| n.trim().to_string()))
        .ok_or_else(|| SandboxError::Start(format!("`load` named no image: {out}")))?;
    // One load may name several; the first is ours.
    let loaded = loaded.split(',').next().unwrap_or("").trim().to_string();
    run(cli, &["tag", &loaded, name], "tag")?;
    if loaded != name {
        run(cli, &["untag", name, &loaded], "untag")?;
    }
    Ok(())
}

fn run(cli: &Cli, args: &[&str], what: &str) -> Result<String, SandboxError> {
    let out = run_with_timeout(command(&cli.argv(args))?, Duration::from_secs(600))?;
    if out.code != Some(0) {
        return Err(SandboxError::Start(format!(
            "`{} {what}` of a base image failed: {}",
            cli.program().display(),
            out.output.trim()
        )));
    }
    Ok(out.output)
}

/// `text` (a Dockerfile) with each `FROM` of a base built on under another
/// name (`bases`) naming that instead.
pub fn rewrite_from(text: &str, bases: &[EngineBase]) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        out.push_str(&rewrite_line(line, bases).unwrap_or_else(|| line.to_string()));
    }
    out
}

fn rewrite_line(line: &str, bases: &[EngineBase]) -> Option<String> {
    let indent = &line[..line.len() - line.trim_start().len()];
    let rest = line.trim_start();
    if !rest.get(..5)?.eq_ignore_ascii_case("from ") {
        return None;
    }
    let mut words: Vec<&str> = rest.split_whitespace().collect();
    let at = words.iter().skip(1).position(|w| !w.starts_with("--"))? + 1;
    let base = bases
        .iter()
        .find(|b| b.written == words[at] && b.name != b.written)?;
    words[at] = &base.name;
    let newline = if line.ends_with('\n') { "\n" } else { "" };
    Some(format!("{indent}{}{newline}", words.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::envdef::Stage;

    fn base(written: &str, name: &str) -> EngineBase {
        EngineBase {
            written: written.into(),
            name: name.into(),
            stored: None,
            id: "x".into(),
            note: None,
        }
    }

    #[test]
    fn from_lines_name_the_loaded_bases() {
        let bases = [
            base("ubuntu:24.04", "localhost/endless-base:0123"),
            base("python:3.13", "python:3.13"),
        ];
        let text = "FROM --platform=linux/amd64 ubuntu:24.04 AS build\nRUN echo FROM ubuntu:24.04\n  from ubuntu:24.04\nFROM python:3.13\nFROM build";
        assert_eq!(
            rewrite_from(text, &bases),
            "FROM --platform=linux/amd64 localhost/endless-base:0123 AS build\nRUN echo FROM ubuntu:24.04\n  from localhost/endless-base:0123\nFROM python:3.13\nFROM build"
        );
    }

    #[test]
    fn stage_names_and_scratch_are_not_bases() {
        let def = EnvDefinition {
            base: Some("build".into()),
            stages: vec![
                Stage {
                    name: Some("build".into()),
                    base: Some("golang:1.22".into()),
                    ..Default::default()
                },
                Stage {
                    name: Some("empty".into()),
                    base: Some("scratch".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(written_bases(&def), vec!["golang:1.22".to_string()]);
        assert_eq!(
            written_bases(&EnvDefinition::default()),
            vec![DEFAULT_BASE.to_string()]
        );
    }
}
