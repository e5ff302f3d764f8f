//! `endless bench images`: container images side by side in one run.
//!
//! Debian's `docker-registry` serves a multi-layer image (a small userland
//! from the host's binaries plus data layers) on 127.0.0.1; then:
//! pull + unpack by endless against `skopeo copy` + `umoci unpack` of the
//! same image; a cached image's episode start; a 10-step Dockerfile built
//! cold and rebuilt after a change to step 9; and the disk taken by 20
//! tasks sharing that base and steps: the store (images stack their
//! steps' cached layers) against the bytes of its unique layers, side by
//! side with the layout where each image held a merged copy of its steps
//! (reproduced in the same run with `apply_layer`); and what a cached
//! sealed verifier environment adds to a cached episode's start plus
//! verification, against the same task verified by the built-in runtime
//! (pre-warmed where it can be, and cold), and what verifier environments
//! take on disk (see [`super::verifier_envs`]). Each episode is a session start
//! (with its verifier started ahead, as every episode's is), an agent turn
//! that is not timed ([`AGENT_TURN`]: shorter than any model's turn), and
//! the final tests; the time is the start's plus the verification's.

use std::collections::{BTreeSet, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::sandbox::Stats;
use super::verifier_envs::EnvDisk;
use crate::images::{ImageRef, ImageStore};
use crate::sandbox::local::{build_record, LocalBackend, StepOutcome};
use crate::sandbox::{Backend, SessionOptions, VerifierPath};
use crate::task::{FileTree, Task, TaskMeta};

/// The local backend's episode-start budget (median), in milliseconds.
pub const START_BUDGET_MS: f64 = 50.0;

/// The whole benchmark.
#[derive(Debug, Serialize)]
pub struct ImagesBench {
    /// `debug` or `release`.
    pub profile: &'static str,
    /// The test image: layers and compressed bytes.
    pub image_layers: usize,
    /// Compressed bytes of its layers.
    pub image_bytes: u64,
    /// Pull + unpack into an empty store, endless.
    pub endless_pull_unpack: Stats,
    /// `skopeo copy` + `umoci unpack` of the same image.
    pub skopeo_umoci: Option<Stats>,
    /// endless' median over skopeo + umoci's (below 1: endless is faster).
    pub ratio: Option<f64>,
    /// Why skopeo + umoci were not measured.
    pub skopeo_skipped: Option<String>,
    /// Episode start on a cached image built `FROM` the registry image.
    pub episode_start: Stats,
    /// Whether its median is within [`START_BUDGET_MS`].
    pub start_within_budget: bool,
    /// The 10-step Dockerfile, cold, in seconds.
    pub cold_build_s: f64,
    /// The same after a change to step 9, in seconds.
    pub rebuild_s: f64,
    /// Rebuild over cold build.
    pub rebuild_ratio: f64,
    /// Steps (numbers) the rebuild ran (the others came from the cache).
    pub rebuild_ran: Vec<usize>,
    /// Tasks sharing one base for the disk figure.
    pub tasks: usize,
    /// Bytes on disk for them all (store, step cache, images; files stored
    /// once are counted once).
    pub disk_shared_bytes: u64,
    /// What separate copies would take (each image with its own base).
    pub disk_copies_bytes: u64,
    /// Bytes of the unique layers alone (the base's unpacked layers and
    /// each cached step layer, once).
    pub unique_layer_bytes: u64,
    /// The whole store (`disk_shared_bytes`) over `unique_layer_bytes`
    /// (goal: under 1.2; images stack their steps' layers).
    pub store_over_unique: f64,
    /// The same store laid out as before, each image with a merged copy
    /// of its steps' layers (the copies made in this run, counted too).
    pub copy_layout_bytes: u64,
    /// `copy_layout_bytes` over `unique_layer_bytes`.
    pub copy_over_unique: f64,
    /// Episode start + verification, the built-in runtime (pre-warmed
    /// where the backend has it).
    pub verify_builtin: Stats,
    /// The same with the built-in runtime cold (a fresh interpreter).
    pub verify_builtin_cold: Stats,
    /// The same task with its tests in a cached sealed verifier
    /// environment (`[verifier] python`), its verifier started with the
    /// session.
    pub verify_env: Stats,
    /// The same without an agent turn (the verification waits for the
    /// verifier started with the session: what a cold one costs).
    pub verify_env_no_turn: Stats,
    /// `verify_env` over `verify_builtin` (medians; goal: under 1.2).
    pub verify_env_ratio: f64,
    /// `verify_env` over `verify_builtin_cold` (medians).
    pub verify_env_over_cold: f64,
    /// What sealed verifier environments take on disk, shared and under a
    /// cap.
    pub verifier_envs: EnvDisk,
}

impl std::fmt::Display for ImagesBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        writeln!(
            f,
            "images ({} build); test image: {} layers, {:.1} MB compressed",
            self.profile,
            self.image_layers,
            mb(self.image_bytes)
        )?;
        let s = &self.endless_pull_unpack;
        writeln!(
            f,
            "  pull + unpack, endless:         median {:>8.1} ms  (min {:.1}, max {:.1}, {} runs)",
            s.median_ms, s.min_ms, s.max_ms, s.runs
        )?;
        match (&self.skopeo_umoci, &self.skopeo_skipped) {
            (Some(s), _) => writeln!(
                f,
                "  skopeo copy + umoci unpack:     median {:>8.1} ms  (min {:.1}, max {:.1}); ratio endless/them {:.2}",
                s.median_ms,
                s.min_ms,
                s.max_ms,
                self.ratio.unwrap_or(f64::NAN)
            )?,
            (None, Some(why)) => writeln!(f, "  skopeo + umoci: skipped ({why})")?,
            (None, None) => {}
        }
        let s = &self.episode_start;
        writeln!(
            f,
            "  episode start, cached image:    median {:>8.1} ms  (p95 {:.1}; budget {START_BUDGET_MS} ms: {})",
            s.median_ms,
            s.p95_ms,
            if self.start_within_budget { "ok" } else { "OVER" }
        )?;
        writeln!(
            f,
            "  10-step Dockerfile: cold {:.2} s, after changing step 9 {:.2} s (ratio {:.2}); rebuild ran steps {:?}",
            self.cold_build_s, self.rebuild_s, self.rebuild_ratio, self.rebuild_ran
        )?;
        write!(
            f,
            "  disk, {} tasks on one base: {:.1} MB shared vs {:.1} MB as copies ({:.1}x less)",
            self.tasks,
            mb(self.disk_shared_bytes),
            mb(self.disk_copies_bytes),
            self.disk_copies_bytes as f64 / self.disk_shared_bytes.max(1) as f64
        )?;
        write!(
            f,
            "\n  store vs its unique layers: {:.1} MB vs {:.1} MB ({:.2}x; goal < 1.2x: {}); \
             as copies: {:.1} MB ({:.2}x)",
            mb(self.disk_shared_bytes),
            mb(self.unique_layer_bytes),
            self.store_over_unique,
            if self.store_over_unique < 1.2 {
                "ok"
            } else {
                "OVER"
            },
            mb(self.copy_layout_bytes),
            self.copy_over_unique
        )?;
        let (b, c, e) = (
            &self.verify_builtin,
            &self.verify_builtin_cold,
            &self.verify_env,
        );
        write!(
            f,
            "\n  episode start + verification (an untimed {} ms agent turn between), built-in runtime: median {:.1} ms (cold {:.1} ms); \
             sealed verifier env (cached, started with the session): median {:.1} ms ({} runs; without the agent turn {:.1} ms)\n  \
             verifier env over built-in: {:.2}x (goal < 1.2x: {}); over built-in cold: {:.2}x",
            AGENT_TURN.as_millis(),
            b.median_ms,
            c.median_ms,
            e.median_ms,
            e.runs,
            self.verify_env_no_turn.median_ms,
            self.verify_env_ratio,
            if self.verify_env_ratio < 1.2 {
                "ok"
            } else {
                "OVER"
            },
            self.verify_env_over_cold
        )?;
        write!(f, "\n{}", self.verifier_envs)
    }
}

/// Run the benchmark: `runs` pulls on each side, `10 * runs` session starts.
pub fn run(runs: usize) -> Result<ImagesBench> {
    let runs = runs.max(1);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench images builds in mapped user namespaces: run it as root");
    }
    let registry = Registry::start()?;
    let reference = format!("127.0.0.1:{}/bench/base:1", registry.port);
    let (layers, image_bytes) = push_image(&reference)?;
    let work = tempfile::tempdir()?;
    let parsed = ImageRef::parse(&reference)?;

    // Pull + unpack, each run into an empty store.
    let owner = LocalBackend::new(&work.path().join("probe"))?.layer_owners();
    let mut ours = Vec::new();
    for i in 0..runs {
        let store = ImageStore::new(&work.path().join(format!("store-{i}")));
        let t = Instant::now();
        crate::images::pull(&store, &parsed)?;
        let image = store
            .get(&parsed)
            .context("the pulled image is not registered")?;
        store.layer_dirs(&image, owner)?;
        ours.push(t.elapsed());
    }
    let endless_pull_unpack = Stats::from(&mut ours).context("no samples")?;
    let (skopeo_umoci, skopeo_skipped) = match skopeo_umoci(&reference, work.path(), runs) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let ratio = skopeo_umoci
        .as_ref()
        .map(|s| endless_pull_unpack.median_ms / s.median_ms);

    // Episode start on a cached image from the registry.
    let cache = work.path().join("cache");
    let backend = LocalBackend::new(&cache)?;
    let image = backend.prepare(&task(
        "start",
        &format!("FROM {reference}\nRUN echo ready > /opt/ready\n"),
    ))?;
    let opts = SessionOptions::default();
    backend.start(&image, &opts)?.close();
    let mut starts = Vec::new();
    for _ in 0..runs * 10 {
        let t = Instant::now();
        let s = backend.start(&image, &opts)?;
        starts.push(t.elapsed());
        s.close();
    }
    let episode_start = Stats::from(&mut starts).context("no samples")?;

    // The 10-step Dockerfile, cold and after a change to step 9.
    let builds = LocalBackend::new(&work.path().join("builds"))?;
    let t = Instant::now();
    builds.prepare(&task("ten", &ten_steps("nine")))?;
    let cold_build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let rebuilt = builds.prepare(&task("ten", &ten_steps("NINE")))?;
    let rebuild_s = t.elapsed().as_secs_f64();
    let rebuild_ran = build_record(&rebuilt)
        .iter()
        .filter(|s| s.outcome == StepOutcome::Built)
        .map(|s| s.index)
        .collect();

    // Disk: 20 tasks on one base, sharing two steps, each with two of its
    // own (one replacing a shared file: a whiteout in its layer).
    let tasks = 20;
    let disk_cache = work.path().join("disk");
    let disk = LocalBackend::new(&disk_cache)?;
    let mut one_image = 0;
    let mut built = Vec::new();
    for i in 0..tasks {
        let image = disk.prepare(&task(
            &format!("disk-{i}"),
            &format!(
                "FROM {reference}\n\
                 RUN mkdir -p /opt/shared && head -c 2000000 /dev/zero | tr '\\0' x > /opt/shared/blob\n\
                 RUN mkdir -p /opt/lib && for f in $(seq 1 200); do echo lib-$f > /opt/lib/$f; done\n\
                 RUN echo task-{i} > /opt/id && rm /opt/lib/{}\n\
                 RUN head -c {} /dev/zero | tr '\\0' y > /opt/own\n",
                i + 1,
                100_000 * (i + 1)
            ),
        ))?;
        if i == 0 {
            let steps: Vec<PathBuf> = image.step_layers.values().flatten().cloned().collect();
            one_image = du(std::slice::from_ref(&image.path)) + du(&image.base_layers) + du(&steps);
        }
        built.push(image);
    }
    let disk_shared_bytes = du(&[disk_cache.join("images"), disk_cache.join("local")]);
    let unique_layer_bytes = du(&[
        disk_cache.join("images/layers"),
        disk_cache.join("local/steps"),
    ]);
    // The layout before: each image with a merged copy of its steps.
    let copies = work.path().join("copies");
    for image in &built {
        for (part, layers) in &image.step_layers {
            let into = copies.join(&image.hash).join(part);
            for layer in layers.iter().rev() {
                crate::sandbox::local::apply_layer(layer, &into, "trusted.overlay.opaque")
                    .with_context(|| format!("copy step layer {}", layer.display()))?;
            }
        }
    }
    let copy_layout_bytes = du(&[
        disk_cache.join("images"),
        disk_cache.join("local"),
        copies.clone(),
    ]);
    // A cached verifier environment against the built-in runtime.
    let [verify_builtin, verify_builtin_cold, verify_env, verify_env_no_turn] =
        verifier_env_cost(&work.path().join("verify"), runs * 4)?;
    // Three images of their own asking for the same environment.
    let python = host_python()?;
    let same_env: Vec<Task> = (0..3)
        .map(|i| {
            let mut t = task(
                &format!("env-disk-{i}"),
                &format!("FROM host\nRUN echo {i} > /opt/id\n"),
            );
            t.meta.verifier.python = Some(python.clone());
            t
        })
        .collect();
    let verifier_envs = super::verifier_envs::measure(&work.path().join("envs"), &same_env)?;
    Ok(ImagesBench {
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        image_layers: layers,
        image_bytes,
        endless_pull_unpack,
        skopeo_umoci,
        ratio,
        skopeo_skipped,
        start_within_budget: episode_start.median_ms <= START_BUDGET_MS,
        episode_start,
        cold_build_s,
        rebuild_s,
        rebuild_ratio: rebuild_s / cold_build_s,
        rebuild_ran,
        tasks,
        disk_shared_bytes,
        disk_copies_bytes: one_image * tasks as u64,
        unique_layer_bytes,
        store_over_unique: disk_shared_bytes as f64 / unique_layer_bytes.max(1) as f64,
        copy_layout_bytes,
        copy_over_unique: copy_layout_bytes as f64 / unique_layer_bytes.max(1) as f64,
        verify_env_ratio: verify_env.median_ms / verify_builtin.median_ms,
        verify_env_over_cold: verify_env.median_ms / verify_builtin_cold.median_ms,
        verify_builtin,
        verify_builtin_cold,
        verify_env,
        verify_env_no_turn,
        verifier_envs,
    })
}

/// A task on the host base whose test checks a file a step wrote: with
/// `python`, its tests run in a sealed verifier environment with that
/// Python (the host's own version, so it builds offline: no packages).
fn verified_task(id: &str, python: Option<&str>) -> Task {
    let mut t = task(id, "RUN echo ready > /opt/ready\n");
    t.tests.insert_text(
        "test_final_state.py",
        "def test_ready():\n    assert open('/opt/ready').read().strip() == 'ready'\n",
    );
    t.meta.verifier.python = python.map(str::to_owned);
    t
}

/// The agent's turn in a timed episode (not timed itself).
const AGENT_TURN: Duration = Duration::from_millis(500);

/// Medians of `runs` cached episode starts + verifications (each passing;
/// see the module docs): the built-in runtime as the backend runs it, the
/// same cold, the task whose tests run in its sealed verifier environment,
/// and that task without an agent turn.
fn verifier_env_cost(cache: &Path, runs: usize) -> Result<[Stats; 4]> {
    use crate::verify::{prestart, verify, TestSet};
    let runs = runs.max(3);
    let backend = LocalBackend::new(cache)?;
    let cold = LocalBackend::new(cache)?.with_cold_verifier();
    let python = host_python()?;
    let plain = verified_task("verify-builtin", None);
    let sealed = verified_task("verify-env", Some(&python));
    let measure = |b: &LocalBackend, task: &Task, turn: Duration| -> Result<Stats> {
        // Built (and the environment with it) before anything is timed.
        let image = b.prepare(task)?;
        let mut samples = Vec::new();
        for i in 0..=runs {
            let t = Instant::now();
            let mut s = b.start(&image, &SessionOptions::default())?;
            prestart(&mut s, task);
            let started = t.elapsed();
            std::thread::sleep(turn);
            let t = Instant::now();
            let report = verify(&mut s, task, TestSet::Final)?;
            let took = started + t.elapsed();
            s.close();
            if !report.passed {
                bail!("{}: the verification failed: {}", task.id(), report.output);
            }
            let sealed = task.meta.verifier.python.is_some();
            if sealed && !turn.is_zero() && report.verifier != VerifierPath::Prestarted {
                bail!(
                    "{}: the verifier did not run as started with the session: {}",
                    task.id(),
                    report.verifier.describe()
                );
            }
            // The first run warms what a cached episode finds warm.
            if i > 0 {
                samples.push(took);
            }
        }
        Stats::from(&mut samples).context("no samples")
    };
    Ok([
        measure(&backend, &plain, AGENT_TURN)?,
        measure(&cold, &plain, AGENT_TURN)?,
        measure(&backend, &sealed, AGENT_TURN)?,
        measure(&backend, &sealed, Duration::ZERO)?,
    ])
}

/// The `X.Y` version of the host's `/usr/bin/python3` (what a build on
/// the host base finds).
fn host_python() -> Result<String> {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .context("run /usr/bin/python3")?;
    if !out.status.success() {
        bail!("/usr/bin/python3 did not report its version");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn task(id: &str, dockerfile: &str) -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "bench".into(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = id.into();
    t.environment.insert_text("Dockerfile", dockerfile);
    t
}

/// Ten steps on the host base, each writing a few hundred files.
fn ten_steps(nine: &str) -> String {
    let mut s = String::from("FROM host\n");
    for i in 1..=10 {
        let word = if i == 9 { nine } else { "x" };
        s.push_str(&format!(
            "RUN mkdir -p /opt/s{i} && for f in $(seq 1 300); do echo {word}-$f > /opt/s{i}/$f; done\n"
        ));
    }
    s
}

/// Bytes on disk under `roots`, each file counted once however many hard
/// links it has.
fn du(roots: &[PathBuf]) -> u64 {
    let roots: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
    crate::sandbox::local::disk_bytes_of(&roots)
}

/// `skopeo copy` + `umoci unpack`, `runs` times, each into fresh directories.
fn skopeo_umoci(reference: &str, work: &Path, runs: usize) -> Result<Stats> {
    for tool in ["skopeo", "umoci"] {
        if crate::sandbox::local::which(tool).is_none() {
            bail!("{tool} is not installed (Debian: apt-get install skopeo umoci)");
        }
    }
    let mut samples = Vec::new();
    for i in 0..runs {
        let layout = work.join(format!("oci-{i}"));
        let bundle = work.join(format!("bundle-{i}"));
        let t = Instant::now();
        let out = Command::new("skopeo")
            .args(["copy", "--quiet", "--src-tls-verify=false"])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:bench", layout.display()))
            .output()?;
        if !out.status.success() {
            bail!("skopeo copy: {}", String::from_utf8_lossy(&out.stderr));
        }
        let out = Command::new("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:bench", layout.display()))
            .arg(&bundle)
            .output()?;
        if !out.status.success() {
            bail!("umoci unpack: {}", String::from_utf8_lossy(&out.stderr));
        }
        samples.push(t.elapsed());
    }
    Stats::from(&mut samples).context("no samples")
}

/// Debian's `docker-registry` on 127.0.0.1 at a free port, stopped on drop.
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start() -> Result<Registry> {
        let bin = crate::sandbox::local::which("docker-registry")
            .or_else(|| Some(PathBuf::from("/usr/bin/docker-registry")).filter(|p| p.exists()))
            .context(
                "docker-registry is not installed (Debian: apt-get install docker-registry)",
            )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )?;
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let registry = Registry {
            child,
            port,
            _dir: dir,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
                let mut head = String::new();
                let _ = s.read_to_string(&mut head);
                if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
                    return Ok(registry);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("docker-registry did not start on port {port}")
    }
}

/// Build the test image and push it: (layers, compressed bytes).
fn push_image(reference: &str) -> Result<(usize, u64)> {
    use oci_client::client::{Config, ImageLayer};
    let mut tars = vec![userland()?];
    for layer in 0..3u32 {
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..800u32 {
            // Compressible, distinct content: a few KB per file.
            let body: Vec<u8> = format!("layer {layer} file {i}\n")
                .repeat(40 + (i % 80) as usize)
                .into_bytes();
            add(&mut b, &format!("opt/data{layer}/f{i}.txt"), &body, 0o644)?;
        }
        let noise: Vec<u8> = (0..(4u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(layer) >> 13) as u8)
            .collect();
        add(&mut b, &format!("opt/data{layer}/blob.bin"), &noise, 0o644)?;
        tars.push(b.into_inner()?);
    }
    let diff_ids: Vec<String> = tars
        .iter()
        .map(|t| format!("sha256:{}", hex::encode(Sha256::digest(t))))
        .collect();
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let mut layers = Vec::new();
    for t in tars {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&t)?;
        layers.push(ImageLayer::new(
            e.finish()?,
            "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            None,
        ));
    }
    let bytes = layers.iter().map(|l| l.data.len() as u64).sum();
    let config = Config::new(
        serde_json::to_vec(&config)?,
        "application/vnd.oci.image.config.v1+json".into(),
        None,
    );
    let parsed = ImageRef::parse(reference)?;
    let client = crate::images::client_for(&parsed);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(client.push(
            parsed.as_oci(),
            &layers,
            config,
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        ))
        .context("push the test image")?;
    Ok((layers.len(), bytes))
}

fn add(b: &mut tar::Builder<Vec<u8>>, path: &str, body: &[u8], mode: u32) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(mode);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, path, body)?;
    Ok(())
}

fn add_entry(
    b: &mut tar::Builder<Vec<u8>>,
    kind: tar::EntryType,
    path: &str,
    target: &str,
) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(if kind == tar::EntryType::Directory {
        0o755
    } else {
        0o777
    });
    h.set_entry_type(kind);
    if kind == tar::EntryType::Directory {
        b.append_data(&mut h, path, &[][..])?;
    } else {
        b.append_link(&mut h, path, target)?;
    }
    Ok(())
}

/// A small userland from the host's binaries and the libraries they load:
/// enough for build steps and the agent's shell.
fn userland() -> Result<Vec<u8>> {
    const BINS: &[&str] = &[
        "bash", "sh", "ls", "cat", "mkdir", "id", "rm", "cp", "grep", "sed", "chown", "chmod",
        "env", "setpriv", "runuser", "wc", "dirname", "sleep", "tr", "head", "seq", "echo",
    ];
    let mut b = tar::Builder::new(Vec::new());
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    for d in [
        "usr",
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "etc",
        "home",
        "root",
        "opt",
        "run",
        "var",
    ] {
        dirs.insert(d.into());
        add_entry(&mut b, tar::EntryType::Directory, d, "")?;
    }
    let mut tmp = tar::Header::new_gnu();
    tmp.set_size(0);
    tmp.set_mode(0o1777);
    tmp.set_entry_type(tar::EntryType::Directory);
    b.append_data(&mut tmp, "tmp", &[][..])?;
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        add_entry(&mut b, tar::EntryType::Symlink, link, target)?;
    }
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut names = Vec::new();
    for bin in BINS {
        let Some(path) = crate::sandbox::local::which(bin) else {
            continue;
        };
        let canon = std::fs::canonicalize(&path)?;
        names.push((bin.to_string(), canon.clone()));
        files.insert(canon.clone());
        let out = Command::new("ldd").arg(&canon).output()?;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let lib = line
                .split("=>")
                .last()
                .and_then(|s| s.split_whitespace().next())
                .filter(|s| s.starts_with('/'));
            if let Some(lib) = lib {
                files.insert(std::fs::canonicalize(lib)?);
                // Loaded by the name ldd shows, in the canonical directory.
                let shown = Path::new(lib);
                if let (Some(dir), Some(name)) = (shown.parent(), shown.file_name()) {
                    let as_loaded = std::fs::canonicalize(dir)?.join(name);
                    let canon = std::fs::canonicalize(lib)?;
                    if as_loaded != canon {
                        names.push((
                            as_loaded.strip_prefix("/")?.to_string_lossy().into_owned(),
                            canon,
                        ));
                    }
                }
            }
        }
    }
    for file in &files {
        let rel = file.strip_prefix("/")?;
        let mut ancestors: Vec<&Path> = rel
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        ancestors.reverse();
        for a in ancestors {
            let d = a.to_string_lossy().into_owned();
            if dirs.insert(d.clone()) {
                add_entry(&mut b, tar::EntryType::Directory, &d, "")?;
            }
        }
        add(&mut b, &rel.to_string_lossy(), &std::fs::read(file)?, 0o755)?;
    }
    let mut linked = HashSet::new();
    for (name, canon) in names {
        let at = if name.contains('/') {
            name
        } else {
            format!("usr/bin/{name}")
        };
        let target = format!("/{}", canon.strip_prefix("/")?.display());
        if Path::new("/").join(&at) != canon
            && !files.contains(&Path::new("/").join(&at))
            && linked.insert(at.clone())
        {
            add_entry(&mut b, tar::EntryType::Symlink, &at, &target)?;
        }
    }
    let loader = std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2")?;
    if Path::new("/usr/lib64/ld-linux-x86-64.so.2") != loader
        && linked.insert("usr/lib64/ld-linux-x86-64.so.2".into())
    {
        add_entry(
            &mut b,
            tar::EntryType::Symlink,
            "usr/lib64/ld-linux-x86-64.so.2",
            &loader.to_string_lossy(),
        )?;
    }
    add(
        &mut b,
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/bin/sh\n",
        0o644,
    )?;
    add(&mut b, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)?;
    Ok(b.into_inner()?)
}
