//! `sandbox doctor`: which backends work here, and what to install or
//! enable where they do not.

use std::fmt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::session::run_with_timeout;
use super::{apptainer, local, oci, Backend, SessionOptions};
use crate::task::{FileTree, Task, TaskMeta};

/// One finding.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it is fine.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it is not fine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The verdict on one backend.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendStatus {
    /// `local`, `apptainer` or `oci`.
    pub name: String,
    /// Whether sessions can run here.
    pub works: bool,
    /// The checks behind the verdict.
    pub checks: Vec<Check>,
}

/// What `sandbox doctor` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DoctorReport {
    /// One entry per backend.
    pub backends: Vec<BackendStatus>,
    /// The verifier's interpreter (`/usr/bin/python3` with pytest).
    pub verifier: Check,
    /// Base images: the store, the `[images]` settings, registry reachability.
    pub images: Vec<Check>,
}

fn check(name: &str, ok: bool, detail: impl Into<String>, fix: &str) -> Check {
    Check {
        name: name.into(),
        ok,
        detail: detail.into(),
        fix: (!ok).then(|| fix.to_string()),
    }
}

fn output_of(argv: &[&str]) -> Option<(bool, String)> {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    let out = run_with_timeout(cmd, Duration::from_secs(15)).ok()?;
    let text = out.output.trim();
    // On failure the last line says why; on success the first line is the answer.
    let line = if out.code == Some(0) {
        text.lines().next()
    } else {
        text.lines().last()
    };
    Some((out.code == Some(0), line.unwrap_or("").to_string()))
}

/// Inspect this machine. `verifier_python` is the interpreter the verifier
/// runs pytest with (`verify::PYTHON`, passed in: the verifier sits above
/// the sandbox).
pub fn doctor(verifier_python: &str) -> DoctorReport {
    DoctorReport {
        images: Vec::new(),
        backends: vec![doctor_local(), doctor_apptainer(), doctor_oci()],
        verifier: {
            let found = output_of(&[
                verifier_python,
                "-c",
                "import pytest; print(pytest.__version__)",
            ]);
            let (ok, detail) = found.unwrap_or((false, format!("{} not found", verifier_python)));
            check(
                "pytest for the verifier",
                ok,
                format!("{}: pytest {detail}", verifier_python),
                "install pytest for the system interpreter (Debian/Ubuntu: `apt-get install python3-pytest`)",
            )
        },
    }
}

fn doctor_local() -> BackendStatus {
    let mut checks = Vec::new();
    let bwrap = local::bwrap_path();
    let version = bwrap
        .as_ref()
        .and_then(|b| output_of(&[&b.display().to_string(), "--version"]))
        .map(|(_, v)| v)
        .unwrap_or_default();
    checks.push(check(
        "bubblewrap",
        bwrap.is_some(),
        bwrap.as_ref().map(|b| format!("{} ({version})", b.display())).unwrap_or_else(|| "not found".into()),
        "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install bubblewrap`)",
    ));
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let userns = local::userns_problem();
    let mapping = if root {
        local::HostIdentity::Mapped(local::IdMap::for_host()).describe()
    } else {
        // SAFETY: getuid/getgid have no preconditions.
        unsafe { local::HostIdentity::Rootless(libc::getuid(), libc::getgid()).describe() }
    };
    checks.push(check(
        "uid mapping",
        root || userns.is_none(),
        if root || userns.is_none() {
            mapping
        } else {
            "not root and unprivileged user namespaces are unavailable".to_string()
        },
        userns.as_deref().unwrap_or("run as root"),
    ));
    if let Some(why) = crate::sandbox::subids::why_single_id() {
        checks.push(Check {
            name: "subordinate ids".into(),
            ok: true,
            detail: format!(
                "none: {why}; {}",
                crate::sandbox::subids::single_id_limits()
            ),
            fix: Some(format!(
                "as root: `{}`, and `apt-get install uidmap`",
                crate::sandbox::subids::grant_hint()
            )),
        });
    }
    let seccomp = local::seccomp_summary();
    checks.push(check(
        "seccomp",
        seccomp.is_ok(),
        seccomp.clone().unwrap_or_else(|e| e),
        "use a kernel with CONFIG_SECCOMP_FILTER",
    ));
    let pasta = local::pasta_path();
    checks.push(Check {
        name: "network".into(),
        ok: true,
        detail: match &pasta {
            Some(p) => format!(
                "sessions have no network; tasks with network = true get their own network namespace through {} \
                 (no host loopback, no other sessions); as root, image builds get one too (apt-get, pip)",
                p.display()
            ),
            None => "sessions have no network; tasks with network = true cannot run: pasta (passt) is not installed".into(),
        },
        fix: pasta.is_none().then(|| "apt-get install passt".to_string()),
    });
    let overlay = std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .contains("overlay");
    checks.push(check(
        "overlayfs",
        overlay,
        if overlay {
            "overlay is in /proc/filesystems"
        } else {
            "overlay filesystem not available"
        },
        "load the overlay module (`modprobe overlay`) or use a kernel with CONFIG_OVERLAY_FS",
    ));
    for tool in ["nsenter", "setpriv"] {
        let found = local::which(tool)
            .or_else(|| Some(Path::new("/usr/bin").join(tool)).filter(|p| p.exists()));
        checks.push(check(
            tool,
            found.is_some(),
            found
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "not found".into()),
            "install util-linux",
        ));
    }
    let cg = local::cgroups_available();
    let cpu = Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists();
    checks.push(Check {
        name: "cgroups (pids, memory, cpu)".into(),
        ok: true,
        detail: match (cg, cpu) {
            (true, true) => "cgroup v1 pids, memory and cpu are writable by this user: sessions \
                             are limited as a whole"
                .into(),
            (true, false) => "cgroup v1 pids and memory are writable by this user; no cpu \
                              controller: no CPU limit"
                .into(),
            (false, _) => format!(
                "not writable by this user: {} (each result says so in `limits`); to limit \
                 sessions as a whole, run as root or give this user the `endless` cgroups \
                 (mkdir /sys/fs/cgroup/{{pids,memory,cpu,freezer}}/endless and chown them)",
                local::RLIMITS_ONLY
            ),
        },
        fix: None,
    });
    let cold_by_env = matches!(std::env::var("ENDLESS_VERIFIER").as_deref(), Ok("cold"));
    checks.push(Check {
        name: "verifier".into(),
        ok: true,
        detail: match (root, cold_by_env) {
            (_, true) => {
                "cold: ENDLESS_VERIFIER=cold starts a fresh interpreter per verification".into()
            }
            (true, false) => {
                "pre-warmed: one runtime python with pytest imported per backend, forked per \
                 verification (ENDLESS_VERIFIER=cold turns it off)"
                    .into()
            }
            (false, false) => {
                "cold: a rootless backend starts a fresh interpreter per verification".into()
            }
        },
        fix: None,
    });
    let prerequisites = checks.iter().all(|c| c.ok);
    if prerequisites {
        checks.push(smoke_test());
    }
    let works = checks.iter().all(|c| c.ok);
    BackendStatus {
        name: "local".into(),
        works,
        checks,
    }
}

/// The pool of pre-started sandboxes with `settings` (`[sandbox] pool`):
/// off, or one sandbox handed out from it in a scratch cache, with what a
/// pooled sandbox holds (its processes and its cgroup's memory, which count
/// against the session's own limits as a fresh one's do).
pub fn doctor_pool(settings: super::pool::PoolSettings) -> Check {
    const NAME: &str = "pool of pre-started sandboxes";
    if settings.size == 0 {
        return check(
            NAME,
            true,
            "off ([sandbox] pool = 0): every episode starts its sandbox on request",
            "",
        );
    }
    let result = (|| {
        let dir = tempfile::tempdir().map_err(|e| super::SandboxError::Start(e.to_string()))?;
        let backend = local::LocalBackend::new(dir.path())?.with_pool(settings);
        let mut task = Task {
            meta: TaskMeta::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: FileTree::default(),
            tests: FileTree::default(),
            solution: FileTree::default(),
        };
        task.meta.task.id = "doctor-pool".into();
        let image = backend.prepare(&task)?;
        // The first request asks the pool to keep this image's sandboxes ready.
        backend.start(&image, &SessionOptions::default())?.close();
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while backend.pool_stats().is_none_or(|p| p.ready == 0) {
            if std::time::Instant::now() > until {
                let why = backend.pool_stats().and_then(|p| p.last_error);
                return Err(super::SandboxError::Start(format!(
                    "no sandbox was ready after 20 s{}",
                    why.map(|w| format!(": {w}")).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let footprint = pooled_footprint(&backend);
        let t = std::time::Instant::now();
        let s = backend.start(&image, &SessionOptions::default())?;
        let took = t.elapsed();
        let hits = backend.pool_stats().map_or(0, |p| p.hits);
        s.close();
        Ok::<_, super::SandboxError>((took, hits, footprint))
    })();
    match result {
        Ok((took, hits, footprint)) => check(
            NAME,
            hits > 0,
            format!(
                "{} per image, kept {} s after the last request; handed out in {:.1} ms{}",
                settings.size,
                settings.idle.as_secs(),
                took.as_secs_f64() * 1e3,
                footprint
            ),
            "the pool handed out nothing: see `endless sandbox doctor --json` and the log",
        ),
        Err(e) => check(NAME, false, e.to_string(), "see the error above"),
    }
}

/// What the pooled sandboxes of `backend` hold: processes and memory of
/// their cgroups (`; each holds ...`), or nothing where unknown.
fn pooled_footprint(backend: &local::LocalBackend) -> String {
    let Some(pids) = backend.pooled_pids().filter(|p| !p.is_empty()) else {
        return String::new();
    };
    let procs: usize = pids
        .iter()
        .map(|pid| 1 + local::descendants(*pid as i32).len())
        .sum();
    let memory: Option<u64> = pids.iter().map(|pid| cgroup_memory(*pid)).sum();
    format!(
        "; each holds {} processes{}, counted against its own limits",
        procs / pids.len(),
        memory
            .map(|m| format!(
                " and {} KiB of memory (its cgroup)",
                m / pids.len() as u64 / 1024
            ))
            .unwrap_or_default()
    )
}

/// The memory charged to the cgroup the children of `pid` (the sandbox's
/// processes) run in: cgroup v2's `memory.current`, or v1's
/// `memory.usage_in_bytes`.
fn cgroup_memory(pid: u32) -> Option<u64> {
    let child = *local::descendants(pid as i32).first()?;
    let text = std::fs::read_to_string(format!("/proc/{child}/cgroup")).ok()?;
    let file = text.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (controllers, path) = rest.split_once(':')?;
        match controllers {
            "" => Some(format!("/sys/fs/cgroup{path}/memory.current")),
            c if c.split(',').any(|c| c == "memory") => {
                Some(format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"))
            }
            _ => None,
        }
    })?;
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Build an empty task and run `echo` in it.
fn smoke_test() -> Check {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            return check(
                "smoke test",
                false,
                e.to_string(),
                "make the temp directory writable",
            )
        }
    };
    let result = (|| {
        let backend = local::LocalBackend::new(dir.path())?;
        let mut task = Task {
            meta: TaskMeta::default(),
            instruction: String::new(),
            truth: String::new(),
            environment: FileTree::default(),
            tests: FileTree::default(),
            solution: FileTree::default(),
        };
        task.meta.task.id = "doctor".into();
        let image = backend.prepare(&task)?;
        let mut s = backend.start(&image, &SessionOptions::default())?;
        let r = s.exec("echo ok-$((40+2))", Duration::from_secs(10))?;
        s.close();
        Ok::<_, super::SandboxError>(r.output)
    })();
    match result {
        Ok(out) if out.trim() == "ok-42" => check(
            "smoke test",
            true,
            "built an image, started a session, ran a command",
            "",
        ),
        Ok(out) => check(
            "smoke test",
            false,
            format!("unexpected output {out:?}"),
            "report this as a bug",
        ),
        Err(e) => check("smoke test", false, e.to_string(), "see the error above"),
    }
}

fn doctor_apptainer() -> BackendStatus {
    let bin = apptainer::apptainer_path();
    let version = bin
        .as_ref()
        .and_then(|b| output_of(&[&b.display().to_string(), "--version"]))
        .map(|(_, v)| v)
        .unwrap_or_default();
    let c = check(
        "apptainer",
        bin.is_some(),
        bin.map(|b| format!("{} ({version})", b.display()))
            .unwrap_or_else(|| "not found".into()),
        "install Apptainer: https://apptainer.org/docs/admin/main/installation.html \
         (Ubuntu: `add-apt-repository ppa:apptainer/ppa && apt-get install apptainer`); \
         rootless use needs unprivileged user namespaces",
    );
    BackendStatus {
        name: "apptainer".into(),
        works: c.ok,
        checks: vec![c],
    }
}

fn doctor_oci() -> BackendStatus {
    let mut checks = Vec::new();
    let engine = oci::engine_path();
    checks.push(check(
        "podman or docker",
        engine.is_some(),
        engine
            .as_ref()
            .map(|e| e.display().to_string())
            .unwrap_or_else(|| "neither found".into()),
        "install podman (`apt-get install podman`) or docker",
    ));
    if let Some(e) = &engine {
        let (ok, detail) =
            output_of(&[&e.display().to_string(), "info"]).unwrap_or((false, "did not run".into()));
        checks.push(check(
            "engine answers",
            ok,
            format!("`{} info`: {detail}", e.display()),
            "start the engine (docker: `dockerd`, or use podman); in a container, podman needs \
             user namespaces, a writable /sys/fs/cgroup and fuse-overlayfs",
        ));
        if ok {
            checks.push(starts_containers(e));
        }
    }
    BackendStatus {
        name: "oci".into(),
        works: checks.iter().all(|c| c.ok),
        checks,
    }
}

/// Whether the engine starts a container, and what endless adjusts for it
/// (see [`oci::cli::Cli::probe`]).
fn starts_containers(engine: &Path) -> Check {
    let probed = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|dir| oci::cli::Cli::probe(engine, dir.path()).map_err(|e| e.to_string()));
    let (ok, detail) = match probed {
        Ok(cli) if cli.adjustments.is_empty() => (true, "as installed".to_string()),
        Ok(cli) => (true, format!("adjusted: {}", cli.adjustments.join("; "))),
        Err(e) => (false, e),
    };
    check(
        "engine starts a container",
        ok,
        detail,
        "podman: install runc and set ENDLESS_OCI_RUNTIME=runc (docs/images.md, \"Container engines\")",
    )
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.backends {
            writeln!(
                f,
                "{:<10} {}",
                b.name,
                if b.works { "works" } else { "unavailable" }
            )?;
            for c in &b.checks {
                write_check(f, c)?;
            }
        }
        writeln!(f, "verifier")?;
        write_check(f, &self.verifier)?;
        if !self.images.is_empty() {
            writeln!(f, "images")?;
            for c in &self.images {
                write_check(f, c)?;
            }
        }
        Ok(())
    }
}

/// The image side of the doctor: the store under `store_dir`, what the
/// `[images]` settings do, and whether the registries pulls go to answer.
pub fn doctor_images(store_dir: &Path, settings: &crate::config::ImagesConfig) -> Vec<Check> {
    use crate::config::{BaseFallback, PullPolicy};
    let store = crate::images::ImageStore::new(store_dir);
    let mut checks = vec![Check {
        name: "image store".into(),
        ok: true,
        detail: format!(
            "{} ({} images, {:.1} MB on disk)",
            store_dir.display(),
            store.list().len(),
            store.disk_usage() as f64 / 1e6
        ),
        fix: None,
    }];
    checks.push(Check {
        name: "base images".into(),
        ok: true,
        detail: format!(
            "{}; {}; {} alias(es), {} mirror(s)",
            match settings.pull {
                PullPolicy::Auto => "missing images are pulled",
                PullPolicy::Never => "only stored images are used ([images] pull = \"never\")",
            },
            match settings.fallback {
                BaseFallback::Host =>
                    "an unavailable one is replaced by the host's directories, with a note",
                BaseFallback::Error => "an unavailable one fails the build",
            },
            settings.aliases.len(),
            settings.mirrors.len()
        ),
        fix: None,
    });
    if settings.pull == PullPolicy::Auto {
        let mut registries = vec![(
            "docker.io".to_string(),
            settings
                .mirrors
                .get("docker.io")
                .cloned()
                .unwrap_or_else(|| "registry-1.docker.io".into()),
        )];
        for (from, to) in &settings.mirrors {
            if from != "docker.io" {
                registries.push((from.clone(), to.clone()));
            }
        }
        for (name, host) in registries {
            let reachable = reachable(&host);
            checks.push(check(
                &format!("registry {name}"),
                reachable.is_ok(),
                match &reachable {
                    Ok(()) => format!("{host} answers"),
                    Err(e) => format!("{host}: {e}"),
                },
                "set a mirror under [images.mirrors], load images with `endless images load`, \
                 or map references under [images.aliases]",
            ));
        }
    }
    checks
}

/// Whether a TCP connection to `host` (port 443 unless given) opens within 3 s.
fn reachable(host: &str) -> Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let with_port = if host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        format!("{host}:443")
    };
    let addrs: Vec<_> = with_port
        .to_socket_addrs()
        .map_err(|e| format!("does not resolve ({e})"))?
        .collect();
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("unreachable ({last})"))
}

fn write_check(f: &mut fmt::Formatter<'_>, c: &Check) -> fmt::Result {
    writeln!(
        f,
        "  [{}] {}: {}",
        if c.ok { "ok" } else { "!!" },
        c.name,
        c.detail
    )?;
    if let Some(fix) = &c.fix {
        writeln!(f, "       fix: {fix}")?;
    }
    Ok(())
}
