//! Images as use cases: which tasks of the workspace build on which base
//! image (or copy from it) (for `endless images list` and the TUI), with the `[images]`
//! aliases applied; pulls reported as job progress; a task's image and
//! build-cache state (the TUI's Env tab).

use std::collections::BTreeMap;

use anyhow::Result;

use super::Context;
use crate::images::{ImageError, ImageRef, ImageStore, Progress, PullReport, Resolver};
use crate::jobs::JobContext;
use crate::sandbox::local::{image_store_dir, BuildState, LocalBackend};
use crate::sandbox::SandboxError;
use crate::task::envdef::parse_task;
use crate::task::Task;

/// The image store of the workspace's sandbox cache.
pub fn image_store(ctx: &Context) -> ImageStore {
    ImageStore::new(&image_store_dir(&ctx.paths.cache_dir.join("sandbox")))
}

/// A progress callback for a job that is one pull or one build: bytes of
/// the pull or steps of the build as its progress, the step or the layers
/// and megabytes as its stage.
pub fn job_progress(job: &JobContext) -> impl Fn(&Progress) + Sync + '_ {
    move |p: &Progress| {
        let (done, total) = p.counts();
        job.progress(done, total, &p.line());
    }
}

/// Pull `references` (through the configured mirrors) into the store, one
/// after the other, reporting each pull's layers and bytes through `job`.
pub fn pull_images(
    ctx: &Context,
    references: &[String],
    job: &JobContext,
) -> Result<Vec<PullReport>> {
    let store = image_store(ctx);
    let resolver = Resolver::new(ctx.config.images.clone());
    let progress = job_progress(job);
    let mut reports = Vec::new();
    for r in references {
        job.check()?;
        let reference = ImageRef::parse(r)?;
        let source = resolver.source_of(&reference)?;
        let report = crate::images::pull_from(&store, &reference, &source, &progress)?;
        job.log(format!(
            "{}: {} layers ({} downloaded, {})",
            report.reference,
            report.layers,
            report.downloaded,
            crate::images::megabytes(report.bytes)
        ));
        reports.push(report);
    }
    Ok(reports)
}

/// Canonical image reference -> ids of the workspace's tasks that build on
/// it or copy from it (`COPY --from` an image); tasks on the host base, or
/// whose definition does not parse, are left out.
pub fn image_users(ctx: &Context) -> Result<BTreeMap<String, Vec<String>>> {
    let ws = ctx.workspace()?;
    let resolver = Resolver::new(ctx.config.images.clone());
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for id in ws.task_ids()? {
        let Ok(task) = ws.load_task(&id) else {
            continue;
        };
        let Ok(def) = parse_task(&task) else {
            continue;
        };
        // The image's base and those of earlier stages, images copied from
        // (`COPY --from=ghcr.io/astral-sh/uv:0.8.14`) included: a build
        // needs them all.
        let bases = std::iter::once(def.base.as_deref())
            .chain(def.stages.iter().map(|s| s.base.as_deref()))
            .filter_map(|b| resolver.target_of(b));
        for image in bases {
            let tasks = users.entry(image).or_default();
            if !tasks.contains(&id) {
                tasks.push(id.clone());
            }
        }
    }
    Ok(users)
}

/// A task's environment as the TUI's Env tab shows it: the base its
/// definition asks for, and what a build on the `local` backend would do
/// now (the base it resolves to, whether the image is built, each step
/// cached or not), or why that cannot be said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TaskEnv {
    /// The task.
    pub task_id: String,
    /// The base as written (`FROM`, `From:`; `None`: none, the host's).
    pub written: Option<String>,
    /// The build's state, or why it is unknown (a base not pulled yet, a
    /// definition that does not parse, another backend).
    pub build: Result<BuildState, String>,
}

/// The [`TaskEnv`] of `task` on the `local` backend `backend` (see
/// [`Context::backend`]'s settings); nothing is built or pulled.
pub fn task_env(backend: &LocalBackend, task: &Task) -> TaskEnv {
    let written = parse_task(task).ok().and_then(|d| d.base);
    let build = backend.build_state(task).map_err(|e| match e {
        SandboxError::Image(ImageError::NotStored(r)) => {
            format!(
                "{r} is not stored yet: the first build pulls it (or `endless images pull {r}`)"
            )
        }
        e => e.to_string(),
    });
    TaskEnv {
        task_id: task.id().to_string(),
        written,
        build,
    }
}

/// [`task_env`] of task `id` of the workspace, on a `local` backend with
/// the workspace's `[images]` settings and cache; another configured
/// backend has no build cache to show.
pub fn workspace_task_env(ctx: &Context, id: &str) -> Result<TaskEnv> {
    let task = ctx.workspace()?.load_task(id)?;
    if ctx.config.sandbox.backend != "local" {
        return Ok(TaskEnv {
            task_id: id.to_string(),
            written: parse_task(&task).ok().and_then(|d| d.base),
            build: Err(format!(
                "the `{}` backend keeps no step cache to show",
                ctx.config.sandbox.backend
            )),
        });
    }
    let backend = LocalBackend::new(&ctx.paths.cache_dir.join("sandbox"))?
        .with_images(ctx.config.images.clone());
    Ok(task_env(&backend, &task))
}
