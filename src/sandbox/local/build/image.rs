//! Building a task's image: its setup steps run one by one, as root of a
//! user namespace, each in an overlay on the steps before it; each step's
//! upper directories are a layer of the per-step cache (`stepcache.rs`).
//! The image references its steps' layers (recorded, top first, in
//! [`Image::step_layers`]) and sessions stack them as overlay lower
//! directories under the image's own small layer (`env.sh`): nothing is
//! copied. Two cases copy (merge with `flatten.rs`) instead: a build with
//! more than [`MAX_STEP_LAYERS`] layers (overlayfs stacks at most 500
//! lower directories, and the base image has its own), whose layers are
//! merged into the image's directory as they pass the cap; and the
//! derived builds of verifier environments, whose output is moved out of
//! the image (`verifier_env.rs`). Each step is reported as
//! [`Progress::Step`] as it starts (or comes from the cache).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::buildstep::{FromStage, StepRun};
use super::stepcache::{self, BuiltStep, StepCache, StepMeta, StepOutcome};
use super::{flatten, steps};
use crate::fsutil::UntrustedDir;
use crate::images::{Progress, ProgressFn, StoredImage};
use crate::sandbox::image::{home_of, image_hash, Image};
use crate::sandbox::isolate::layout;
use crate::sandbox::isolate::layout::IMAGE_META;
use crate::sandbox::local::LocalBackend;
use crate::sandbox::SandboxError;
use crate::task::envdef::{parse_task, EnvDefinition, Step};
use crate::task::{write_tree, Task};

/// The most step layers a build stacks; past it, its layers so far are
/// merged (copied) into the image's directory. Overlayfs takes at most
/// 500 lower directories per mount, and a session adds the image's own
/// layer and its base's layers (one per image layer, or the host's).
pub const MAX_STEP_LAYERS: usize = 128;

impl LocalBackend {
    /// Build (or find in the cache) the image of `task`, reporting the
    /// base's pull and the steps to `progress`.
    pub(in crate::sandbox::local) fn build_image(
        &self,
        task: &Task,
        progress: ProgressFn<'_>,
    ) -> Result<Image, SandboxError> {
        if task.meta.environment.network && !self.allow_network {
            return Err(SandboxError::NetworkNotAllowed {
                task: task.id().to_string(),
            });
        }
        let parsed = parse_task(task)?;
        let (def, origin) = self.prebuilt_or_definition(task, parsed, progress);
        let cache = self.layout.images();
        let full = |e| super::diskfull::classify(e, &cache);
        let mut image = self
            .build_image_noted(task, &def, origin, Merge::Stack, progress)
            .map_err(full)?;
        // The limits of the task asking, not of the one that built the
        // cached image (a served sandbox's `cpus` and `memory_mb`).
        image.cpu_millis = task_cpu_millis(task);
        image.memory_mb = task_memory_mb(task);
        image.storage_mb = task_storage_mb(task);
        // The sealed verifier environment the tests ask for, if any.
        let env_built = self
            .ensure_verifier_env(task, &def, &image, progress)
            .map_err(full)?;
        super::evict::touch_image(&image.path);
        self.keep_within_cap(&image, env_built)?;
        Ok(image)
    }

    /// Evict what was least recently used past `[images] max_store_gb`
    /// (never `image`, just built or found), once `image` or its verifier
    /// environment (`env_built`, which may take longer than the image) was
    /// just built.
    fn keep_within_cap(&self, image: &Image, env_built: bool) -> Result<(), SandboxError> {
        let Some(gb) = self.resolver.settings().max_store_gb.filter(|g| *g > 0.0) else {
            return Ok(());
        };
        // Only after a build: a cache hit adds nothing (and an episode's
        // start should not walk the cache).
        if !env_built && !super::evict::just_built(&image.path) {
            return Ok(());
        }
        let Some(cache_dir) = self
            .layout
            .images()
            .parent()
            .and_then(|p| p.parent())
            .map(Path::to_path_buf)
        else {
            return Ok(());
        };
        // Pooled sandboxes hold their images: let eviction have them.
        if let Some(pool) = &self.pool {
            pool.drain(|i| i.hash != image.hash);
        }
        super::evict::enforce_cap(
            &cache_dir,
            &self.images,
            (gb * 1e9) as u64,
            std::slice::from_ref(&image.hash),
        )?;
        Ok(())
    }

    /// Build (or find in the cache) the image of `task` from its parsed
    /// definition `def`.
    pub(super) fn build_image_from(
        &self,
        task: &Task,
        def: &EnvDefinition,
        progress: ProgressFn<'_>,
    ) -> Result<Image, SandboxError> {
        self.build_image_noted(task, def, None, Merge::Copy, progress)
    }

    /// The definition to build: a task's prebuilt `[environment]
    /// docker_image` (no steps) when it can be had (stored, aliased, a
    /// stand-in or pulled), else its own definition; and a note saying
    /// which, when the task names a prebuilt image.
    fn prebuilt_or_definition(
        &self,
        task: &Task,
        def: EnvDefinition,
        progress: ProgressFn<'_>,
    ) -> (EnvDefinition, Option<Origin>) {
        let Some(prebuilt) = prebuilt_image(task) else {
            return (def, None);
        };
        match self
            .resolver
            .resolve_available(&self.images, &prebuilt, progress)
        {
            Ok(_) => {
                let note = format!(
                    "the prebuilt image {prebuilt} (task.toml [environment] docker_image) is used; {} is not built",
                    if def.file.is_empty() { "the definition" } else { def.file.as_str() }
                );
                let prebuilt_def = EnvDefinition {
                    base: Some(prebuilt),
                    steps: Vec::new(),
                    session_script: def.session_script,
                    file: "task.toml [environment] docker_image".into(),
                    lines: Vec::new(),
                    stages: Vec::new(),
                };
                (
                    prebuilt_def,
                    Some(Origin {
                        note,
                        prebuilt: true,
                    }),
                )
            }
            Err(e) => {
                let note = format!(
                    "the prebuilt image {prebuilt} (task.toml [environment] docker_image) is unavailable ({e}); {} is built instead",
                    if def.file.is_empty() { "the definition" } else { def.file.as_str() }
                );
                (
                    def,
                    Some(Origin {
                        note,
                        prebuilt: false,
                    }),
                )
            }
        }
    }

    /// [`LocalBackend::build_image_from`], with where the definition came
    /// from (`origin`) joined to the base note, its steps' layers stacked
    /// or copied as `merge` says.
    fn build_image_noted(
        &self,
        task: &Task,
        def: &EnvDefinition,
        origin: Option<Origin>,
        merge: Merge,
        progress: ProgressFn<'_>,
    ) -> Result<Image, SandboxError> {
        let layout = &self.layout;
        layout.ensure()?;
        let (base, base_note) = self.resolve_base(def, progress)?;
        // Held until the build ends: no eviction forgets the base (and
        // prunes the layers the build stands on) meanwhile.
        let _base_hold = base
            .as_ref()
            .map(|(stored, _)| self.images.hold(&stored.reference))
            .transpose()?;
        let base_note = match (origin.as_ref().map(|o| o.note.clone()), base_note) {
            (Some(o), Some(b)) => Some(format!("{o}; {b}")),
            (o, b) => o.or(b),
        };
        let base_id = self.base_fingerprint(base.as_ref().map(|(stored, _)| stored));
        // A prebuilt image and the same task built from its definition are
        // different images.
        let hash = if origin.as_ref().is_some_and(|o| o.prebuilt) {
            image_hash(task, "local", &format!("{base_id}|prebuilt"))
        } else {
            image_hash(task, "local", &base_id)
        };
        let dir = layout.images().join(&hash);
        let roots = [layout.steps(), self.images.layers_root()];
        if let Some(image) = load_meta(&dir, &roots) {
            return Ok(image);
        }
        // Two builds of one image: the second waits, then finds it built.
        let _lock = stepcache::lock(
            &layout
                .images()
                .join(format!("{hash}{}", stepcache::BUILD_LOCK)),
        )?;
        if let Some(image) = load_meta(&dir, &roots) {
            return Ok(image);
        }
        let mut rnd = [0u8; 6];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let build = layout.images().join(format!(
            ".build-{}-{hash}-{}",
            std::process::id(),
            hex::encode(rnd)
        ));
        // The step layers the build uses, held (shared) until the image
        // that names them is in place: a prune meanwhile keeps them.
        let mut in_use = Vec::new();
        let noted = base_note.clone();
        let result = self.build_into(
            task,
            def,
            Base {
                image: base.as_ref(),
                id: &base_id,
                note: base_note,
            },
            &hash,
            &build,
            BuildOut {
                merge,
                in_use: &mut in_use,
                progress,
            },
        );
        let image = match result {
            Ok(image) => image,
            Err(e) => {
                layout::remove_tree(&build);
                return Err(with_base_note(e, noted));
            }
        };
        // Under the lock, what is there without metadata is an unfinished
        // leftover; the image appears complete or not at all.
        if dir.exists() {
            layout::remove_tree(&dir);
        }
        // trusted: our finished build directory, into the private image cache
        if let Err(e) = std::fs::rename(&build, &dir) {
            layout::remove_tree(&build);
            return Err(SandboxError::io("store the built image", &dir)(e));
        }
        Ok(load_meta(&dir, &roots).unwrap_or(image))
    }

    fn build_into(
        &self,
        task: &Task,
        def: &EnvDefinition,
        base: Base,
        hash: &str,
        build: &Path,
        out: BuildOut,
    ) -> Result<Image, SandboxError> {
        let BuildOut {
            merge,
            in_use,
            progress,
        } = out;
        let layout = &self.layout;
        let io = |what: &str, p: &Path| SandboxError::io(what.to_string(), p.to_path_buf());
        let user = task.meta.agent.user.clone();
        let home = home_of(&user);
        let workdir = task.meta.environment.workdir.clone();
        let scratch = build.join("scratch");
        let ctx = scratch.join("ctx");
        // trusted: our fresh build directory
        std::fs::create_dir_all(&ctx).map_err(io("create build directory", &ctx))?;
        write_tree(&ctx, &task.environment)?;
        self.give_to_build_root(&ctx)?;
        let rootless = self.is_rootless();
        let network = task.meta.environment.network || self.build_network();
        let needed = needed_stages(def);
        let step_count: usize = needed
            .iter()
            .map(|&i| def.stages[i].steps.len())
            .sum::<usize>()
            + def.steps.len()
            + 2;
        let shared = Shared {
            ctx: &ctx,
            scratch: &scratch,
            rootless,
            network,
            deadline: Instant::now() + self.build_timeout,
            progress,
            steps: step_count,
            step: std::cell::Cell::new(0),
            merge,
            opaque_attr: if self.user_xattrs() {
                "user.overlay.opaque"
            } else {
                "trusted.overlay.opaque"
            },
        };
        let mut record = Vec::new();
        // Earlier stages first (multi-stage builds), each merged apart.
        let mut stages: Vec<Option<Target>> = (0..def.stages.len()).map(|_| None).collect();
        // The stored images of the stages (images copied from included),
        // held as the image's base is.
        let mut stage_holds = Vec::new();
        for i in needed {
            let stage = &def.stages[i];
            let stage_def = EnvDefinition {
                base: stage.base.clone(),
                ..Default::default()
            };
            let (stage_base, _) = self.resolve_base(&stage_def, progress)?;
            if let Some((stored, _)) = &stage_base {
                stage_holds.push(self.images.hold(&stored.reference)?);
            }
            let id = self.base_fingerprint(stage_base.as_ref().map(|(stored, _)| stored));
            let target =
                self.target(scratch.join(format!("stage-{i}")), stage_base, &id, &shared)?;
            let plan = stage_plan(task, def, i, &stage_keys(&stages));
            let mut target = target;
            self.run_plan(
                &plan,
                &mut target,
                &stages,
                &shared,
                Some(i),
                &mut record,
                in_use,
            )?;
            stages[i] = Some(target);
        }
        // The image's own stage: the agent account, the steps, the finish.
        let mut target = self.target(build.to_path_buf(), base.image.cloned(), base.id, &shared)?;
        let plan = image_plan(task, def, &stage_keys(&stages));
        let ids = self.run_plan(
            &plan,
            &mut target,
            &stages,
            &shared,
            None,
            &mut record,
            in_use,
        )?;
        layout::remove_tree(&scratch);
        // The image's own layer goes on top of its steps' layers: copied
        // layers (past the cap) are merged all the way up first.
        if target.flattened {
            target.flatten(shared.opaque_attr)?;
        }
        let step_layers = target.step_layers();
        let (uid, gid) = if user == "root" {
            (0, 0)
        } else {
            ids.unwrap_or((1000, 1000))
        };
        // The image's own file, above every step's layer, read by the
        // agent's shell. Merged step layers may have left a link at
        // `/.endless` (a step's `ln -s /etc/profile.d /.endless`): the
        // directory is endless's, so whatever stands there is replaced,
        // never written through.
        let env_sh = build.join("root/.endless/env.sh");
        let env_text = format!("{}{}", target.image_env, steps::env_file(def));
        UntrustedDir::open(&build.join("root"))
            .and_then(|root| root.ensure_dir(".endless", 0o755))
            .and_then(|dir| dir.write_atomic("env.sh", env_text.as_bytes(), 0o644))
            .map_err(io("write env.sh", &env_sh))?;
        let record_bytes =
            serde_json::to_vec_pretty(&record).map_err(|e| SandboxError::Start(e.to_string()))?;
        let record_path = build.join(stepcache::BUILD_RECORD);
        crate::fsutil::write_atomic(&record_path, &record_bytes)
            .map_err(io("write build record", &record_path))?;
        let image = Image {
            backend: "local".into(),
            hash: hash.to_string(),
            path: layout.images().join(hash),
            reference: None,
            task_id: task.id().to_string(),
            user,
            uid,
            gid,
            home,
            workdir,
            network: task.meta.environment.network,
            cpu_millis: task_cpu_millis(task),
            memory_mb: task_memory_mb(task),
            storage_mb: task_storage_mb(task),
            base: base.image.map(|(stored, _)| stored.reference.clone()),
            base_layers: base.image.map(|(_, dirs)| dirs.clone()).unwrap_or_default(),
            base_note: base.note,
            step_layers,
        };
        let meta =
            serde_json::to_vec_pretty(&image).map_err(|e| SandboxError::Start(e.to_string()))?;
        let meta_path = build.join(IMAGE_META);
        crate::fsutil::write_atomic(&meta_path, &meta)
            .map_err(io("write image metadata", &meta_path))?;
        Ok(image)
    }

    /// The fingerprint of a base (part of the image hash and step keys).
    pub(in crate::sandbox::local) fn base_fingerprint(&self, base: Option<&StoredImage>) -> String {
        match base {
            Some(stored) => format!("{}|image:{}", self.base_id(), stored.manifest_digest),
            None => self.base_id(),
        }
    }

    /// A merge to build into at `farm`, on `base` (fingerprint `id`).
    fn target(
        &self,
        farm: PathBuf,
        base: Option<(StoredImage, Vec<PathBuf>)>,
        id: &str,
        shared: &Shared,
    ) -> Result<Target, SandboxError> {
        let io = |what: &str, p: &Path| SandboxError::io(what.to_string(), p.to_path_buf());
        let mut parts = vec!["root".to_string()];
        if base.is_none() {
            parts.extend(self.layout.system_dirs.iter().map(|d| format!("sys/{d}")));
        }
        for part in &parts {
            let p = farm.join(part);
            // trusted: our fresh build directory
            std::fs::create_dir_all(&p).map_err(io("create build directory", &p))?;
        }
        let root = farm.join("root");
        // trusted: our fresh build directory
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod build directory", &root))?;
        // The image's own environment (PATH, LANG, ...) comes first.
        let image_env = base
            .as_ref()
            .map(|(stored, _)| image_env_exports(&stored.config))
            .unwrap_or_default();
        Ok(Target {
            farm,
            steps: Vec::new(),
            flattened: false,
            parts,
            base_layers: base.map(|(_, dirs)| dirs),
            key: stepcache::root_key(id, shared.rootless, shared.network),
            image_env,
        })
    }

    /// Run (or take from the cache) the steps of `plan` in order, adding
    /// each step's layer to `target`; returns the agent's ids reported by
    /// a finishing step. `stage`: the earlier stage being built, if any.
    /// The lock of each layer used, shared, goes to `in_use`.
    #[allow(clippy::too_many_arguments)]
    fn run_plan(
        &self,
        plan: &[Planned],
        target: &mut Target,
        stages: &[Option<Target>],
        shared: &Shared,
        stage: Option<usize>,
        record: &mut Vec<BuiltStep>,
        in_use: &mut Vec<stepcache::Lock>,
    ) -> Result<Option<(u32, u32)>, SandboxError> {
        let cache = StepCache::new(&self.layout.steps());
        let mut state = steps::StepState::default();
        let mut ids = None;
        for planned in plan {
            target.key = stepcache::chain(&target.key, &planned.input);
            let key = target.key.clone();
            let t0 = Instant::now();
            let outcome = match &planned.body {
                None => {
                    shared.report(&planned.what, false);
                    StepOutcome::Config
                }
                Some(body) => {
                    // Held shared while the image uses it (no prune takes
                    // it); its build lock, exclusive, while it is built.
                    let held = cache.lock_shared(&key)?;
                    let building = match cache.get(&key) {
                        Some(_) => None,
                        None => Some(cache.build_lock(&key)?),
                    };
                    let (meta, outcome) = match cache.get(&key) {
                        Some(meta) => {
                            shared.report(&planned.what, true);
                            (meta, StepOutcome::Cached)
                        }
                        None => {
                            shared.report(&planned.what, false);
                            let from = match planned.step {
                                Some(Step::CopyFrom { index, .. }) => {
                                    stages.get(*index).and_then(Option::as_ref)
                                }
                                _ => None,
                            };
                            let script = steps::step_script(
                                planned.n,
                                body,
                                &state,
                                &target.image_env,
                                shared.rootless,
                            );
                            let meta = self.build_step(
                                &cache,
                                &key,
                                plan,
                                StepRunInputs {
                                    planned,
                                    script,
                                    body,
                                    target,
                                    from,
                                    shared,
                                },
                            )?;
                            (meta, StepOutcome::Built)
                        }
                    };
                    drop(building);
                    in_use.push(held);
                    if meta.ids.is_some() {
                        ids = meta.ids;
                    }
                    target.add_layer(cache.layer(&key), shared)?;
                    outcome
                }
            };
            if let Some(step) = planned.step {
                state.after(planned.n, step);
            }
            record.push(BuiltStep {
                index: planned.n,
                step: planned.what.clone(),
                key,
                outcome,
                stage,
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
        Ok(ids)
    }

    /// Run step `run.planned` into a new layer and store it in `cache` as
    /// `key`; a failure names the step, its line and its output, and
    /// leaves nothing in the cache.
    fn build_step(
        &self,
        cache: &StepCache,
        key: &str,
        plan: &[Planned],
        run: StepRunInputs,
    ) -> Result<StepMeta, SandboxError> {
        let io = |what: &str, p: &Path| SandboxError::io(what.to_string(), p.to_path_buf());
        let n = run.planned.n;
        let what = &run.planned.what;
        let timeout = run
            .shared
            .deadline
            .saturating_duration_since(Instant::now());
        if timeout.is_zero() {
            return Err(SandboxError::SetupStep {
                index: n,
                step: format!("{what} (timed out after {:?})", self.build_timeout),
                code: None,
                output: "the build ran out of time before this step".into(),
                base_note: None,
            });
        }
        let scratch = run.shared.scratch;
        let mut rnd = [0u8; 4];
        rand::Rng::fill(&mut rand::rng(), &mut rnd);
        let tag = format!("{n}-{}", hex::encode(rnd));
        let steps_dir = scratch.join(format!("steps-{tag}"));
        let ctx_copy = scratch.join(format!("ctx-{tag}"));
        let from_dir = scratch.join(format!("from-{tag}"));
        let ctx = if run.body.writable_context {
            // trusted: our fresh build directory
            std::fs::create_dir_all(&ctx_copy).map_err(io("create build directory", &ctx_copy))?;
            copy_tree(run.shared.ctx, &ctx_copy)
                .map_err(io("copy the build context", &ctx_copy))?;
            ctx_copy.clone()
        } else {
            run.shared.ctx.to_path_buf()
        };
        let from = run.from.map(|stage| FromStage {
            merged: &stage.farm,
            steps: &stage.steps,
            parts: &stage.parts,
            base_layers: stage.base_layers.as_deref(),
            scratch: &from_dir,
        });
        let layer = cache.temp()?;
        let t0 = Instant::now();
        let result = self.run_step(&StepRun {
            script: run.script,
            file: run.body.file.clone(),
            ctx: &ctx,
            ctx_writable: run.body.writable_context,
            steps_dir: steps_dir.clone(),
            merged: &run.target.farm,
            steps: &run.target.steps,
            parts: &run.target.parts,
            base_layers: run.target.base_layers.as_deref(),
            layer: &layer,
            from,
            network: run.shared.network,
            timeout,
        });
        for d in [&steps_dir, &ctx_copy, &from_dir] {
            layout::remove_tree(d);
        }
        let failed = |e: SandboxError| {
            // Whether the disk is full is seen before the layer is removed.
            let e = super::diskfull::classify(e, &layer);
            layout::remove_tree(&layer);
            e
        };
        let out = result.map_err(failed)?;
        if out.code != Some(0) {
            let e = step_error(plan, n, what, &out, self.build_timeout);
            let e = match self.is_rootless() {
                true => super::single_id::with_single_id_hint(e),
                false => e,
            };
            return Err(failed(e));
        }
        let meta = StepMeta {
            step: what.clone(),
            seconds: t0.elapsed().as_secs_f64(),
            created: chrono::Utc::now().to_rfc3339(),
            ids: steps::user_ids(&out.output),
        };
        cache.commit(&layer, key, &meta).map_err(failed)?;
        Ok(meta)
    }
}

/// Where a task's definition came from, when it names a prebuilt image.
struct Origin {
    /// What the result says (prebuilt image used, or the definition built
    /// because it was unavailable).
    note: String,
    /// Whether the prebuilt image is used.
    prebuilt: bool,
}

/// `[environment] docker_image` of the task (Harbor's prebuilt image), if set.
fn prebuilt_image(task: &Task) -> Option<String> {
    task.meta
        .environment
        .extra
        .get("docker_image")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// What a build was started from.
struct Base<'a> {
    /// The stored base image and its unpacked layers (`None`: the host's
    /// directories).
    image: Option<&'a (StoredImage, Vec<PathBuf>)>,
    /// Its fingerprint (part of every step key).
    id: &'a str,
    /// What it substitutes, if anything.
    note: Option<String>,
}

/// What every step of one build shares.
struct Shared<'a> {
    /// The build context (read-only to the steps).
    ctx: &'a Path,
    /// Where a step's temporary directories go.
    scratch: &'a Path,
    rootless: bool,
    network: bool,
    /// When the build's time is up.
    deadline: Instant,
    /// Where each step is reported.
    progress: ProgressFn<'a>,
    /// Steps in the whole build (earlier stages included), and the number
    /// of the last one reported.
    steps: usize,
    step: std::cell::Cell<usize>,
    /// Whether step layers are stacked or copied into the image.
    merge: Merge,
    /// The name overlayfs reads opaque directories by (see `flatten.rs`).
    opaque_attr: &'static str,
}

/// How a built image holds its steps' files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merge {
    /// It references the cached step layers (up to [`MAX_STEP_LAYERS`]).
    Stack,
    /// It holds a merged copy of them (see the module docs).
    Copy,
}

/// Where a build's result and what it holds go.
struct BuildOut<'a, 'p> {
    merge: Merge,
    /// The locks of the step layers used (see `run_plan`).
    in_use: &'a mut Vec<stepcache::Lock>,
    progress: ProgressFn<'p>,
}

impl Shared<'_> {
    /// Report the next step.
    fn report(&self, what: &str, cached: bool) {
        let index = self.step.get() + 1;
        self.step.set(index);
        (self.progress)(&Progress::Step {
            index,
            steps: self.steps,
            what: what.to_string(),
            cached,
        });
    }
}

/// A stack being built: the image's, or an earlier stage's.
struct Target {
    /// The image's own directory (or the stage's): one directory per part,
    /// holding the copied layers (past the cap, or all when copying) and,
    /// at the end, the image's own files.
    farm: PathBuf,
    /// The step layers stacked over `farm`, bottom first.
    steps: Vec<PathBuf>,
    /// Whether layers were merged into `farm`.
    flattened: bool,
    /// Its overlay parts (`root`, then `sys/<dir>` on the host base).
    parts: Vec<String>,
    /// The base image's layers, top first (`None`: the host's directories).
    base_layers: Option<Vec<PathBuf>>,
    /// The key of the last step merged (the root key at first).
    key: String,
    /// `export` lines of the base image's environment.
    image_env: String,
}

impl Target {
    /// Add the cached step layer `layer` on top (see the module docs).
    fn add_layer(&mut self, layer: PathBuf, shared: &Shared) -> Result<(), SandboxError> {
        self.steps.push(layer);
        if shared.merge == Merge::Copy || self.steps.len() > MAX_STEP_LAYERS {
            self.flatten(shared.opaque_attr)?;
        }
        Ok(())
    }

    /// Merge the stacked step layers into `farm`, bottom first.
    fn flatten(&mut self, opaque_attr: &str) -> Result<(), SandboxError> {
        for layer in self.steps.drain(..) {
            for part in &self.parts {
                let (from, to) = (layer.join(part), self.farm.join(part));
                flatten::apply_layer(&from, &to, opaque_attr)
                    .map_err(SandboxError::io("merge step layer", &from))?;
            }
        }
        self.flattened = true;
        Ok(())
    }

    /// The stacked layers' directories for each part that holds anything,
    /// top first (what [`Image::step_layers`] records).
    fn step_layers(&self) -> std::collections::BTreeMap<String, Vec<PathBuf>> {
        self.parts
            .iter()
            .map(|part| (part.clone(), stepcache::layer_parts(&self.steps, part)))
            .filter(|(_, dirs)| !dirs.is_empty())
            .collect()
    }
}

/// One step of a plan.
pub(in crate::sandbox::local) struct Planned<'a> {
    /// Its number (0: the agent account).
    n: usize,
    /// What its key covers besides its parent.
    pub(in crate::sandbox::local) input: String,
    /// What it runs (`None`: it only sets state for later steps).
    pub(in crate::sandbox::local) body: Option<steps::StepBody>,
    /// How it is named in records and errors.
    pub(in crate::sandbox::local) what: String,
    /// The definition's step (`None` for the account and finishing steps).
    step: Option<&'a Step>,
}

/// What `build_step` needs besides the cache.
struct StepRunInputs<'a> {
    planned: &'a Planned<'a>,
    script: String,
    body: &'a steps::StepBody,
    target: &'a Target,
    from: Option<&'a Target>,
    shared: &'a Shared<'a>,
}

/// The steps of earlier stage `i` of `def`, keyed with the final keys
/// `keys` of the stages before it.
pub(in crate::sandbox::local) fn stage_plan<'d>(
    task: &Task,
    def: &'d EnvDefinition,
    i: usize,
    keys: &[String],
) -> Vec<Planned<'d>> {
    let stage = &def.stages[i];
    stage
        .steps
        .iter()
        .enumerate()
        .map(|(j, step)| Planned {
            n: j + 1,
            input: stepcache::step_input(step, &task.environment, keys),
            body: steps::body(step, j + 1),
            what: describe_with(step, stage.lines.get(j), &def.file),
            step: Some(step),
        })
        .collect()
}

/// The image's own steps: the agent account, the definition's steps
/// (keyed with the final keys `keys` of the earlier stages), the finish.
pub(in crate::sandbox::local) fn image_plan<'d>(
    task: &Task,
    def: &'d EnvDefinition,
    keys: &[String],
) -> Vec<Planned<'d>> {
    let user = &task.meta.agent.user;
    let home = home_of(user);
    let workdir = &task.meta.environment.workdir;
    let mut plan = vec![Planned {
        n: 0,
        input: format!("ACCOUNT\0{user}\0{home}"),
        body: steps::account_body(user, &home),
        what: "create the agent account".into(),
        step: None,
    }];
    for (i, step) in def.steps.iter().enumerate() {
        plan.push(Planned {
            n: i + 1,
            input: stepcache::step_input(step, &task.environment, keys),
            body: steps::body(step, i + 1),
            what: describe_at(def, i + 1),
            step: Some(step),
        });
    }
    plan.push(Planned {
        n: def.steps.len() + 1,
        input: format!("FINISH\0{user}\0{home}\0{workdir}"),
        body: Some(steps::finish_body(user, &home, workdir)),
        what: "finish the image (workdir, home ownership)".into(),
        step: None,
    });
    plan
}

/// The earlier stages the image's steps copy from, and those they copy
/// from, in build order.
pub(in crate::sandbox::local) fn needed_stages(def: &EnvDefinition) -> Vec<usize> {
    let mut needed = vec![false; def.stages.len()];
    let mark = |steps: &[Step], needed: &mut Vec<bool>| {
        for s in steps {
            if let Step::CopyFrom { index, .. } = s {
                if let Some(slot) = needed.get_mut(*index) {
                    *slot = true;
                }
            }
        }
    };
    mark(&def.steps, &mut needed);
    for i in (0..def.stages.len()).rev() {
        if needed[i] {
            mark(&def.stages[i].steps, &mut needed);
        }
    }
    (0..def.stages.len()).filter(|i| needed[*i]).collect()
}

/// The final keys of the stages built so far (empty for the others).
fn stage_keys(stages: &[Option<Target>]) -> Vec<String> {
    stages
        .iter()
        .map(|s| s.as_ref().map(|t| t.key.clone()).unwrap_or_default())
        .collect()
}

/// A step as written, with its file and line where known.
fn describe_with(step: &Step, line: Option<&usize>, file: &str) -> String {
    let text = steps::describe(step);
    match line {
        Some(&l) if l > 0 && !file.is_empty() => format!("{file} line {l}: {text}"),
        _ => text,
    }
}

/// Step `n` of `def` (1-based) as written, with its file and line.
fn describe_at(def: &EnvDefinition, n: usize) -> String {
    describe_with(&def.steps[n - 1], def.lines.get(n - 1), &def.file)
}

/// Copy the tree `from` into the empty directory `to` (regular files and
/// directories: what a build context holds).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in walkdir::WalkDir::new(from).min_depth(1) {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(from)
            .map_err(std::io::Error::other)?;
        let dest = to.join(rel);
        if entry.file_type().is_dir() {
            // trusted: our build context, written from the task
            std::fs::create_dir_all(&dest)?;
        } else if entry.file_type().is_file() {
            // trusted: our build context, written from the task
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// `e` with `note` (on the base the build stood on) when it is a failed
/// step's and says nothing of its base yet: what failed may be the base's
/// difference from the image asked for.
fn with_base_note(e: SandboxError, note: Option<String>) -> SandboxError {
    match e {
        SandboxError::SetupStep {
            index,
            step,
            code,
            output,
            base_note: None,
        } => SandboxError::SetupStep {
            index,
            step,
            code,
            output,
            base_note: note,
        },
        other => other,
    }
}

/// The error of step `n` (described as `what`) of `plan` whose run ended
/// with `out`.
fn step_error(
    plan: &[Planned],
    n: usize,
    what: &str,
    out: &crate::sandbox::session::CommandOutput,
    limit: Duration,
) -> SandboxError {
    if let Some((at, code, text)) = steps::failed_step(&out.output) {
        // A bad `USER` shows when the next step switches to it.
        let step = plan
            .iter()
            .find(|p| p.n == at)
            .map(|p| p.what.clone())
            .unwrap_or_else(|| what.to_string());
        return SandboxError::SetupStep {
            index: at,
            step,
            code,
            output: text,
            base_note: None,
        };
    }
    let text = steps::last_step(&out.output)
        .map(|(_, t)| t)
        .unwrap_or_else(|| out.output.clone());
    SandboxError::SetupStep {
        index: n,
        step: if out.timed_out {
            format!("{what} (timed out after {limit:?})")
        } else {
            what.to_string()
        },
        code: out.code,
        output: steps::without_markers(&text),
        base_note: None,
    }
}

/// `export` lines for an image config's `KEY=value` environment entries.
fn image_env_exports(config: &crate::images::ImageConfig) -> String {
    config
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| format!("export {k}={}\n", steps::sq(v)))
        .collect()
}

/// The task's `[environment] cpus` (Harbor's key) in thousandths of a
/// core, when it is a positive number.
fn task_cpu_millis(task: &Task) -> Option<u32> {
    let v = task.meta.environment.extra.get("cpus")?;
    let n = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
    (n > 0.0 && n.is_finite()).then(|| (n * 1000.0).clamp(10.0, 1e6) as u32)
}

/// The task's `[environment] memory_mb` (Harbor's key), when it is a
/// positive number.
fn task_memory_mb(task: &Task) -> Option<u64> {
    let v = task.meta.environment.extra.get("memory_mb")?;
    let n = v.as_integer().or_else(|| v.as_float().map(|f| f as i64))?;
    u64::try_from(n).ok().filter(|n| *n > 0)
}

/// The task's `[environment] storage_mb` (Harbor's key), or `storage`: MiB
/// as a positive number, or a size with a unit (`"10G"`, `"512Mi"`, `"2GB"`),
/// when one is set and readable.
fn task_storage_mb(task: &Task) -> Option<u64> {
    let env = &task.meta.environment.extra;
    let v = env.get("storage_mb").or_else(|| env.get("storage"))?;
    let mb = match v {
        toml::Value::Integer(i) => u64::try_from(*i).ok()?,
        toml::Value::Float(f) if f.is_finite() && *f > 0.0 => f.ceil() as u64,
        toml::Value::String(s) => size_mb(s)?,
        _ => return None,
    };
    (mb > 0).then_some(mb)
}

/// A size written with a unit (`10G`, `10GB`, `10Gi`, `512M`, `1T`; a bare
/// number is MiB) in MiB, rounded up.
fn size_mb(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().ok()?;
    let factor = match unit
        .trim()
        .to_ascii_lowercase()
        .trim_end_matches(['b', 'i'])
    {
        "" | "m" => 1.0,
        "k" => 1.0 / 1024.0,
        "g" => 1024.0,
        "t" => 1024.0 * 1024.0,
        _ => return None,
    };
    let mb = (n * factor).ceil();
    (mb.is_finite() && mb >= 1.0).then_some(mb as u64)
}

/// The built image in `dir`, if its metadata is there and every layer it
/// stacks is a directory under one of `roots` (this cache's step layers and
/// unpacked image layers). An image whose record names layers elsewhere (a
/// cache moved or reached by another path since) is built again, which
/// finds its steps cached; its sessions never mount another cache's layers.
fn load_meta(dir: &Path, roots: &[PathBuf]) -> Option<Image> {
    // trusted: the private image cache's own metadata file
    let bytes = std::fs::read(dir.join(IMAGE_META)).ok()?;
    let mut image: Image = serde_json::from_slice(&bytes).ok()?;
    image.path = dir.to_path_buf();
    let mut layers = image
        .base_layers
        .iter()
        .chain(image.step_layers.values().flatten());
    // trusted: stat of the private cache's own layer directories
    let in_place = layers.all(|p| roots.iter().any(|r| p.starts_with(r)) && p.is_dir());
    in_place.then_some(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_with(environment: &str) -> Task {
        let mut task = Task::minimal("t");
        task.meta.environment.extra = toml::from_str(environment).unwrap();
        task
    }

    #[test]
    fn storage_is_read_from_harbors_keys() {
        assert_eq!(
            task_storage_mb(&task_with("storage_mb = 10240")),
            Some(10_240)
        );
        assert_eq!(task_storage_mb(&task_with("storage = 2048")), Some(2048));
        assert_eq!(
            task_storage_mb(&task_with("storage = \"10G\"")),
            Some(10_240)
        );
        assert_eq!(
            task_storage_mb(&task_with("storage = \"512Mi\"")),
            Some(512)
        );
        assert_eq!(
            task_storage_mb(&task_with("storage = \"1.5GB\"")),
            Some(1536)
        );
        assert_eq!(task_storage_mb(&task_with("storage_mb = 0")), None);
        assert_eq!(task_storage_mb(&task_with("storage = \"lots\"")), None);
        assert_eq!(task_storage_mb(&task_with("cpus = 1")), None);
    }
}
