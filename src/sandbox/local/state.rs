//! What a build of a task would do now, without building or pulling: the
//! base it resolves to, whether its image is built, and for each step
//! whether its layer is in the step cache (and how big it is) or would be
//! built. The step keys are computed as the build computes them
//! (`build/image.rs`), so "cached" here means the build takes it from the cache.
//! A task with a prebuilt `[environment] docker_image` that can be had
//! (stored, aliased, a stand-in) shows that image's plan, as the build uses
//! it; when it cannot, the definition's, with a note saying why.

use std::path::Path;

use serde::Serialize;

use super::build::image::{image_plan, needed_stages, stage_plan};
use super::build::stepcache::{self, StepCache};
use super::LocalBackend;
use crate::config::PullPolicy;
use crate::images::{self, StoredImage};
use crate::sandbox::image::image_hash;
use crate::sandbox::isolate::layout::IMAGE_META;
use crate::sandbox::SandboxError;
use crate::task::envdef::{parse_task, EnvDefinition};
use crate::task::Task;

/// The build-cache state of a task on the `local` backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildState {
    /// The stored base image (`None`: the host's system directories).
    pub base: Option<BaseImage>,
    /// What the base substitutes (an alias, the fallback), if anything.
    pub note: Option<String>,
    /// The image's hash, when it is built.
    pub built: Option<String>,
    /// Every step the build runs, earlier stages first.
    pub steps: Vec<StepState>,
}

/// A stored base image, as a build would use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaseImage {
    /// Its canonical reference.
    pub reference: String,
    /// Its manifest digest.
    pub digest: String,
    /// Its layers' compressed size in bytes.
    pub bytes: u64,
}

/// One step of a build and its cache state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepState {
    /// The earlier stage it belongs to (`None`: the image's own steps).
    pub stage: Option<usize>,
    /// The step as written (`environment/Dockerfile line 3: RUN make`).
    pub what: String,
    /// Its layer's state.
    pub cache: StepCacheState,
}

/// Whether a step's layer is cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "bytes", rename_all = "snake_case")]
pub enum StepCacheState {
    /// In the cache, holding this many bytes of files: the build takes it.
    Cached(u64),
    /// Not in the cache: the build runs it.
    Runs,
    /// It only sets state for later steps (`ENV`, `USER`): no layer.
    Config,
}

impl LocalBackend {
    /// What building `task` would do now (see the module docs). Nothing is
    /// pulled: a base image that is not stored is an error
    /// ([`images::ImageError::NotStored`]) naming it.
    pub fn build_state(&self, task: &Task) -> Result<BuildState, SandboxError> {
        let def = parse_task(task)?;
        let mut settings = self.resolver.settings().clone();
        let pulls = matches!(settings.pull, PullPolicy::Auto);
        settings.pull = PullPolicy::Never;
        let peek = images::Resolver::new(settings);
        let stored = |written: Option<&str>| -> Result<_, SandboxError> {
            // What a build would pull is not there yet (rather than the
            // fallback a build without pulls would take).
            if let Some(target) = peek.target_of(written).filter(|_| pulls) {
                let reference = images::ImageRef::parse(&target)?;
                if self.images.get(&reference).is_none() {
                    return Err(images::ImageError::NotStored(target).into());
                }
            }
            let base = peek.resolve(&self.images, written)?;
            let note = base.note().map(str::to_owned);
            let image = match base {
                images::Base::Image { image, .. } => Some(image),
                images::Base::Host { .. } => None,
            };
            Ok((image, note))
        };
        let (def, origin, prebuilt) = prebuilt_plan(task, def, &peek, &self.images, pulls)?;
        let (base, note) = stored(def.base.as_deref())?;
        let note = match (origin, note) {
            (Some(o), Some(b)) => Some(format!("{o}; {b}")),
            (o, b) => o.or(b),
        };
        let base_id = self.base_fingerprint(base.as_ref());
        // As the build names them: a prebuilt image is another image.
        let hash = if prebuilt {
            image_hash(task, "local", &format!("{base_id}|prebuilt"))
        } else {
            image_hash(task, "local", &base_id)
        };
        let built = self
            .layout
            .images()
            .join(&hash)
            .join(IMAGE_META)
            .is_file()
            .then_some(hash);
        let rootless = self.is_rootless();
        let network = task.meta.environment.network || self.build_network();
        let cache = StepCache::new(&self.layout.steps());
        let state_of = |key: &str, runs_something: bool| match cache.get(key) {
            _ if !runs_something => StepCacheState::Config,
            Some(_) => StepCacheState::Cached(files_bytes(&cache.layer(key))),
            None => StepCacheState::Runs,
        };
        let mut steps = Vec::new();
        let mut stage_keys = vec![String::new(); def.stages.len()];
        for i in needed_stages(&def) {
            let (stage_base, _) = stored(def.stages[i].base.as_deref())?;
            let id = self.base_fingerprint(stage_base.as_ref());
            let mut key = stepcache::root_key(&id, rootless, network);
            for planned in stage_plan(task, &def, i, &stage_keys) {
                key = stepcache::chain(&key, &planned.input);
                steps.push(StepState {
                    stage: Some(i),
                    cache: state_of(&key, planned.body.is_some()),
                    what: planned.what,
                });
            }
            stage_keys[i] = key;
        }
        let mut key = stepcache::root_key(&base_id, rootless, network);
        for planned in image_plan(task, &def, &stage_keys) {
            key = stepcache::chain(&key, &planned.input);
            steps.push(StepState {
                stage: None,
                cache: state_of(&key, planned.body.is_some()),
                what: planned.what,
            });
        }
        Ok(BuildState {
            base: base.as_ref().map(base_image),
            note,
            built,
            steps,
        })
    }
}

/// The definition a build of `task` uses, as the build decides it: the
/// prebuilt `[environment] docker_image` (no steps) when it can be had
/// without a pull, else `def`; the note saying which (when the task names
/// a prebuilt image), and whether the prebuilt image is used. One that only
/// a pull could bring is an error naming it, as for any base.
fn prebuilt_plan(
    task: &Task,
    def: EnvDefinition,
    peek: &images::Resolver,
    store: &images::ImageStore,
    pulls: bool,
) -> Result<(EnvDefinition, Option<String>, bool), SandboxError> {
    let Some(prebuilt) = task
        .meta
        .environment
        .extra
        .get("docker_image")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
    else {
        return Ok((def, None, false));
    };
    let file = if def.file.is_empty() {
        "the definition".to_string()
    } else {
        def.file.clone()
    };
    match peek.resolve_available(store, &prebuilt, &images::no_progress) {
        Ok(_) => {
            let note = format!(
                "the prebuilt image {prebuilt} (task.toml [environment] docker_image) is used; {file} is not built"
            );
            let plan = EnvDefinition {
                base: Some(prebuilt),
                steps: Vec::new(),
                session_script: def.session_script,
                file: "task.toml [environment] docker_image".into(),
                lines: Vec::new(),
                stages: Vec::new(),
            };
            Ok((plan, Some(note), true))
        }
        Err(_) if pulls => Err(images::ImageError::NotStored(prebuilt).into()),
        Err(e) => {
            let note = format!(
                "the prebuilt image {prebuilt} (task.toml [environment] docker_image) is unavailable ({e}); {file} is built instead"
            );
            Ok((def, Some(note), false))
        }
    }
}

fn base_image(image: &StoredImage) -> BaseImage {
    BaseImage {
        reference: image.reference.clone(),
        digest: image.manifest_digest.clone(),
        bytes: image.size(),
    }
}

/// The bytes of the regular files under `dir` (a cached step's layer; its
/// `step.json` left out).
fn files_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter(|e| !(e.depth() == 1 && e.file_name() == "step.json"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BaseFallback, ImagesConfig};

    fn task(docker_image: Option<&str>) -> Task {
        let mut t = Task::minimal("prebuilt-state");
        t.environment
            .insert_text("Dockerfile", "RUN echo one > /opt/one\n");
        if let Some(image) = docker_image {
            t.meta
                .environment
                .extra
                .insert("docker_image".into(), image.into());
        }
        t
    }

    #[test]
    fn a_prebuilt_image_that_can_be_had_is_the_plan_shown() {
        let dir = tempfile::tempdir().unwrap();
        let prebuilt = "registry.example.invalid/tools:1";
        let settings = |alias: bool| ImagesConfig {
            pull: PullPolicy::Never,
            fallback: BaseFallback::Host,
            aliases: alias
                .then(|| (prebuilt.to_string(), images::HOST.to_string()))
                .into_iter()
                .collect(),
            ..ImagesConfig::default()
        };
        let Ok(backend) = LocalBackend::new(dir.path()) else {
            eprintln!("SKIP: no local backend here");
            return;
        };
        // The account, the RUN, the finish; without the RUN on a prebuilt image.
        let runs = |s: &BuildState| s.steps.len() == 3;
        // No prebuilt image: the Dockerfile's steps.
        let plain = backend.build_state(&task(None)).unwrap();
        assert!(runs(&plain) && plain.note.is_none(), "{plain:?}");
        // One that is served (here by an alias): its plan, none of the steps.
        let served = LocalBackend::new(dir.path())
            .unwrap()
            .with_images(settings(true));
        let state = served.build_state(&task(Some(prebuilt))).unwrap();
        assert!(!runs(&state), "{state:?}");
        let note = state.note.unwrap_or_default();
        assert!(
            note.contains("prebuilt image registry.example.invalid/tools:1")
                && note.contains("is used"),
            "{note}"
        );
        // One that cannot be had without a pull: the Dockerfile, and why.
        let missing = backend.with_images(settings(false));
        let state = missing.build_state(&task(Some(prebuilt))).unwrap();
        assert!(runs(&state), "{state:?}");
        let note = state.note.unwrap_or_default();
        assert!(
            note.contains("unavailable") && note.contains("built instead"),
            "{note}"
        );
    }
}
