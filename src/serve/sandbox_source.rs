//! What a sandbox is made from: a served task's environment (by id), an
//! environment directory the client uploads (a Harbor task's
//! `environment/`, with its `Dockerfile` and build context), or an image
//! reference (a `FROM` line of its own). Uploaded environments become a
//! minimal Harbor task read by the same reader as every Harbor task, so the
//! image is built (and cached) as any task's is.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use super::registry_guard::{check_reference, check_task};
use super::sandbox_limits::{SandboxLimits, Shape};
use super::tar_io::{unpack_environment, TarError};
use crate::store::Workspace;
use crate::task::formats::Format;
use crate::task::{ReadLimits, Task};

/// Largest environment directory accepted, unpacked.
pub const MAX_ENVIRONMENT_BYTES: u64 = 256 << 20;

/// Why no task could be made for a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The request is wrong (named field and why).
    #[error("{0}")]
    Invalid(String),
    /// No such workspace task.
    #[error("no task {0:?}")]
    NoTask(String),
    /// The uploaded environment is refused.
    #[error("environment: {0}")]
    Archive(#[from] TarError),
    /// Writing or reading the environment on the server failed.
    #[error("cannot prepare the environment: {0}")]
    Io(String),
}

/// Where a sandbox comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A workspace task's environment.
    Task(String),
    /// An environment directory (tar, plain or gzip), optionally built on
    /// `image` when it has no Dockerfile of its own.
    Environment {
        /// The archive.
        archive: Vec<u8>,
        /// Base image for an environment without a Dockerfile.
        image: Option<String>,
    },
    /// An image reference alone.
    Image(String),
}

impl Source {
    /// A short label: `task:ID`, `image:REF`, `environment:HASH`.
    pub fn label(&self) -> String {
        match self {
            Source::Task(id) => format!("task:{id}"),
            Source::Image(r) => format!("image:{r}"),
            Source::Environment { archive, .. } => format!("environment:{}", short_hash(archive)),
        }
    }
}

fn short_hash(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))[..12].to_string()
}

/// An image reference as it may appear after `FROM`: no whitespace or
/// control characters, at most 256 bytes.
fn check_image(reference: &str) -> Result<(), SourceError> {
    let ok = !reference.is_empty()
        && reference.len() <= 256
        && !reference.starts_with('-')
        && reference
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'\\' | b'$' | b'`'));
    if ok {
        Ok(())
    } else {
        Err(SourceError::Invalid(format!(
            "image: {reference:?} is not an image reference (name[:tag][@digest], no spaces or quotes)"
        )))
    }
}

/// The task a sandbox of `source` starts from, within the operator's
/// `limits` (its CPUs and memory, and the registries of a client's images).
/// Blocking (reads the workspace, unpacks and reads the environment,
/// resolves registry hosts).
pub fn task_for(
    source: &Source,
    shape: &Shape,
    limits: &SandboxLimits,
    ws: &parking_lot::Mutex<Workspace>,
) -> Result<Task, SourceError> {
    limits.check(shape).map_err(SourceError::Invalid)?;
    if shape.network && matches!(source, Source::Task(_)) {
        return Err(SourceError::Invalid(
            "network: a workspace task's sandbox has the network its task says \
             ([environment] network)"
                .into(),
        ));
    }
    let allowed = &limits.allow_registries;
    let refused = |e: super::registry_guard::Refused| SourceError::Invalid(e.0);
    let mut task = match source {
        Source::Task(id) => ws
            .lock()
            .load_task(id)
            .map_err(|_| SourceError::NoTask(id.clone()))?,
        Source::Image(reference) => {
            check_image(reference)?;
            check_reference("image", reference, allowed).map_err(refused)?;
            built(source, &[], Some(reference), shape)?
        }
        Source::Environment { archive, image } => {
            if let Some(r) = image {
                check_image(r)?;
                check_reference("image", r, allowed).map_err(refused)?;
            }
            built(source, archive, image.as_deref(), shape)?
        }
    };
    // A client's Dockerfile names its bases (and `COPY --from` images).
    if !matches!(source, Source::Task(_)) {
        check_task(&task, allowed).map_err(refused)?;
    }
    if let Some(w) = &shape.workdir {
        task.meta.environment.workdir = w.clone();
    }
    limits.apply(&mut task, shape);
    Ok(task)
}

/// A minimal Harbor task around the environment `archive` (or none),
/// read back with the Harbor reader.
fn built(
    source: &Source,
    archive: &[u8],
    image: Option<&str>,
    shape: &Shape,
) -> Result<Task, SourceError> {
    let io = |e: std::io::Error| SourceError::Io(e.to_string());
    let tmp = private_tempdir().map_err(io)?;
    // The directory's name is the task id: the same environment, the same id.
    let name = match source.label().split_once(':') {
        Some((_, rest)) if matches!(source, Source::Environment { .. }) => {
            format!("sandbox-{rest}")
        }
        _ => format!("sandbox-{}", short_hash(source.label().as_bytes())),
    };
    let dir = tmp.path().join(name);
    let env_dir = dir.join("environment");
    for d in [&dir, &env_dir, &dir.join("tests")] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(d)
            .map_err(io)?;
    }
    if !archive.is_empty() {
        unpack_environment(archive, &env_dir, MAX_ENVIRONMENT_BYTES)?;
    }
    let dockerfile = env_dir.join("Dockerfile");
    if std::fs::symlink_metadata(&dockerfile).is_err() {
        let Some(image) = image else {
            return Err(SourceError::Invalid(
                "environment: the archive has no Dockerfile at its top and no image was named"
                    .into(),
            ));
        };
        let mut text = format!("FROM {image}\n");
        // An image's own WORKDIR is not known here: Docker's default is /.
        let workdir = shape.workdir.as_deref().unwrap_or("/");
        text.push_str(&format!("WORKDIR {workdir}\n"));
        write_private(&dockerfile, &text).map_err(io)?;
    }
    write_private(&dir.join("task.toml"), &task_toml(shape)).map_err(io)?;
    write_private(
        &dir.join("instruction.md"),
        "A sandbox of the endless sandbox API.\n",
    )
    .map_err(io)?;
    read(&dir)
}

/// A fresh directory under the temporary directory that only the server's
/// user can enter (0700): what a client uploads is read there, unseen.
fn private_tempdir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("endless-sandbox-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
}

/// Write a new file only the server's user can read (0600).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?
        .write_all(text.as_bytes())
}

fn read(dir: &Path) -> Result<Task, SourceError> {
    Format::Harbor
        .read(dir, &ReadLimits::default())
        .map_err(|e| SourceError::Invalid(format!("environment: {e}")))
}

/// The `task.toml` of a sandbox's Harbor task.
fn task_toml(shape: &Shape) -> String {
    let mut t = String::from("version = \"1.0\"\n\n[agent]\n");
    let lifetime = shape.lifetime.unwrap_or(Duration::from_secs(3600));
    let network = if shape.network {
        "public"
    } else {
        "no-network"
    };
    t.push_str(&format!(
        "timeout_sec = {:.1}\n\n[environment]\nnetwork_mode = \"{network}\"\n",
        lifetime.as_secs_f64()
    ));
    if let Some(c) = shape.cpus {
        t.push_str(&format!("cpus = {c}\n"));
    }
    if let Some(m) = shape.memory_mb {
        t.push_str(&format!("memory_mb = {m}\n"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SandboxLimits {
        SandboxLimits::default()
    }

    /// Issue 46: the directory an uploaded environment is unpacked in is
    /// the server user's alone.
    #[test]
    fn uploads_are_unpacked_in_a_private_directory() {
        let tmp = private_tempdir().unwrap();
        let mode = std::fs::metadata(tmp.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let file = tmp.path().join("task.toml");
        write_private(&file, "x").unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            write_private(&file, "again").is_err(),
            "an existing file is never reused"
        );
    }

    fn ws() -> (tempfile::TempDir, parking_lot::Mutex<Workspace>) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, parking_lot::Mutex::new(ws))
    }

    #[test]
    fn an_uploaded_environment_becomes_a_harbor_task_with_its_workdir() {
        let mut b = tar::Builder::new(Vec::new());
        for (name, body) in [
            (
                "Dockerfile",
                &b"FROM debian:bookworm\nWORKDIR /srv\nCOPY data/x /srv/x\n"[..],
            ),
            ("data/x", b"hello\n"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_path(name).unwrap();
            h.set_cksum();
            b.append(&h, body).unwrap();
        }
        let archive = b.into_inner().unwrap();
        let (_d, ws) = ws();
        let source = Source::Environment {
            archive: archive.clone(),
            image: None,
        };
        let task = task_for(&source, &Shape::default(), &limits(), &ws).unwrap();
        assert_eq!(task.meta.environment.workdir, "/srv");
        assert_eq!(task.meta.agent.user, "root");
        assert!(
            !task.meta.environment.network,
            "API sandboxes are offline unless asked"
        );
        let online = Shape {
            network: true,
            ..Shape::default()
        };
        let task = task_for(&source, &online, &limits(), &ws).unwrap();
        assert!(task.meta.environment.network, "asked: the task has network");
        assert!(task.environment.contains("data/x"));
        assert!(task.id().starts_with("sandbox-"), "{}", task.id());
        // The same archive makes the same task id (one cached image).
        assert_eq!(
            task_for(&source, &Shape::default(), &limits(), &ws)
                .unwrap()
                .id(),
            task.id()
        );
    }

    #[test]
    fn images_and_missing_dockerfiles_are_checked() {
        let (_d, ws) = ws();
        let shape = Shape {
            workdir: Some("/app".into()),
            ..Shape::default()
        };
        let task = task_for(
            &Source::Image("python:3.12-slim".into()),
            &shape,
            &limits(),
            &ws,
        )
        .unwrap();
        assert_eq!(task.meta.environment.workdir, "/app");
        let bad = task_for(
            &Source::Image("x\nRUN rm -rf /".into()),
            &shape,
            &limits(),
            &ws,
        )
        .unwrap_err();
        assert!(bad.to_string().contains("image:"), "{bad}");
        let empty = Source::Environment {
            archive: tar::Builder::new(Vec::new()).into_inner().unwrap(),
            image: None,
        };
        let e = task_for(&empty, &shape, &limits(), &ws)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no Dockerfile"), "{e}");
        assert!(matches!(
            task_for(&Source::Task("nope".into()), &shape, &limits(), &ws),
            Err(SourceError::NoTask(_))
        ));
    }
}
