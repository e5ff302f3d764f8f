//! Attacks on the limits of `endless serve`'s sandbox API (issue 46): a
//! client that deletes a sandbox mid-command to run more than
//! `--max-sessions`, asks for every core or more memory than the operator
//! allows, or names an image on the server's own loopback or private
//! network (SSRF). The server runs as we are (root, then uid 65534).

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use super::support::served::{Api, Served};
use super::*;

/// A workspace whose server builds on the host's system directories;
/// `pull`: whether it may pull base images (as a default server does).
fn workspace(pull: bool) -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join(".config/endless");
    std::fs::create_dir_all(&config).unwrap();
    let text = if pull {
        "[images]\nfallback = \"host\"\n"
    } else {
        "[images]\npull = \"never\"\n"
    };
    std::fs::write(config.join("config.toml"), text).unwrap();
    ws
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A number no other process has on its command line.
fn marker() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{}{}", 1000 + std::process::id() % 9000, t.subsec_micros())
}

/// Host pids whose command line is `sleep <marker>`.
fn sleepers(marker: &str) -> Vec<i32> {
    let want = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
        })
        .collect()
}

async fn create(api: &Api, body: Value) -> (u16, String, Value) {
    let a = api.post("/v1/sandboxes", body, &[]).await;
    let id = a.body["sandbox_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (a.status, id, a.body)
}

#[test]
fn a_deleted_sandbox_keeps_its_slot_until_its_command_is_dead() {
    both(
        "served_limits::a_deleted_sandbox_keeps_its_slot_until_its_command_is_dead",
        |_| {
            let ws = workspace(false);
            let served = Served::start(ws.path(), &["--max-sessions", "1"]);
            let api = served.client();
            let mark = marker();
            runtime().block_on(async {
                let (status, id, body) = create(&api, json!({"image": "debian:bookworm"})).await;
                assert_eq!(status, 201, "{body}");
                // A long command, running while the sandbox is deleted.
                let runner = api.clone();
                let (path, command) = (
                    format!("/v1/sandboxes/{id}/exec"),
                    json!({"command": format!("sleep {mark}"), "timeout_sec": 120}),
                );
                let exec = tokio::spawn(async move { runner.post(&path, command, &[]).await });
                let t0 = Instant::now();
                while sleepers(&mark).is_empty() {
                    assert!(t0.elapsed() < T, "the command never started");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let deleter = api.clone();
                let gone = format!("/v1/sandboxes/{id}");
                let delete = tokio::spawn(async move { deleter.delete(&gone).await });
                // Until a second sandbox is created, the first one's command
                // must be dead: the server never runs two at once.
                let t0 = Instant::now();
                let second = loop {
                    let (status, second, body) =
                        create(&api, json!({"image": "debian:bookworm"})).await;
                    if status == 201 {
                        assert!(
                            sleepers(&mark).is_empty(),
                            "a second sandbox started while the deleted one's command still runs"
                        );
                        break second;
                    }
                    assert_eq!(status, 429, "{body}");
                    assert!(t0.elapsed() < T, "the deleted sandbox never freed its slot");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                let deleted = delete.await.unwrap();
                assert_eq!(deleted.status, 200, "{}", deleted.raw);
                assert!(
                    sleepers(&mark).is_empty(),
                    "DELETE left the command running"
                );
                // The exec's stream ended (its command was killed), long before its timeout.
                let ran = tokio::time::timeout(T, exec).await.unwrap().unwrap();
                assert!(ran.status == 200 || ran.status == 404, "{}", ran.raw);
                api.delete(&format!("/v1/sandboxes/{second}")).await;
            });
        },
    );
}

/// The cores of this machine.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The memory limit (bytes) and CPU quota (microseconds per 100 ms) the
/// host gives the sandbox of process `pid`: its cgroups where it has them,
/// else the address-space rlimit of its processes (and no CPU quota).
fn limits_of(pid: i32) -> (u64, Option<u64>) {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path_of = |controller: &str| {
        cgroups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            (names.split(',').any(|n| n == controller) && path.contains("endless"))
                .then(|| path.to_string())
        })
    };
    let read = |file: String| {
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let quota = path_of("cpu")
        .map(|p| read(format!("/sys/fs/cgroup/cpu{p}/cpu.cfs_quota_us")))
        .filter(|q| *q > 0);
    if let Some(p) = path_of("memory") {
        // The writable layer (1 GiB tmpfs) is charged to the same limit.
        let limit = read(format!("/sys/fs/cgroup/memory{p}/memory.limit_in_bytes"));
        return (limit - (1 << 30), quota);
    }
    // Without cgroups: the address-space rlimit of the sandbox's processes
    // (its shell; a command run beside it by the API has none, see
    // docs/security.md).
    let ns = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let own = ns(pid).unwrap();
    let limits: Vec<u64> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| ns(*p).as_ref() == Some(&own))
        .filter_map(|p| {
            let text = std::fs::read_to_string(format!("/proc/{p}/limits")).ok()?;
            let line = text.lines().find(|l| l.starts_with("Max address space"))?;
            line.split_whitespace().nth(3)?.parse().ok()
        })
        .collect();
    assert!(
        !limits.is_empty(),
        "no process of the sandbox has a memory limit"
    );
    assert!(limits.windows(2).all(|w| w[0] == w[1]), "{limits:?}");
    (limits[0], quota)
}

#[test]
fn served_cpus_and_memory_stay_within_the_operators_maximum() {
    both(
        "served_limits::served_cpus_and_memory_stay_within_the_operators_maximum",
        |_| {
            let ws = workspace(false);
            let served = Served::start(ws.path(), &["--max-memory-mb", "2048"]);
            let api = served.client();
            runtime().block_on(async {
                // Above the maximum: refused, naming the field and the maximum.
                let over = (cores() + 1) as f64;
                for (body, field, max) in [
                    (
                        json!({"image": "debian:bookworm", "cpus": 1024}),
                        "cpus",
                        cores().to_string(),
                    ),
                    (
                        json!({"image": "debian:bookworm", "cpus": over}),
                        "cpus",
                        cores().to_string(),
                    ),
                    (
                        json!({"image": "debian:bookworm", "memory_mb": 4096}),
                        "memory_mb",
                        "2048".to_string(),
                    ),
                ] {
                    let (status, _, said) = create(&api, body.clone()).await;
                    assert_eq!(status, 400, "{body}: {said}");
                    let e = said["error"].as_str().unwrap();
                    assert!(e.starts_with(field) && e.contains(&max), "{body}: {e}");
                }
                // Within it: honoured, as the sandbox's limits.
                let (status, id, said) = create(
                    &api,
                    json!({"image": "debian:bookworm", "cpus": 0.5, "memory_mb": 300}),
                )
                .await;
                assert_eq!(status, 201, "{said}");
                let mark = marker();
                let runner = api.clone();
                let path = format!("/v1/sandboxes/{id}/exec");
                let command = json!({"command": format!("sleep {mark}"), "timeout_sec": 60});
                let exec = tokio::spawn(async move { runner.post(&path, command, &[]).await });
                let t0 = Instant::now();
                let pid = loop {
                    if let Some(pid) = sleepers(&mark).first() {
                        break *pid;
                    }
                    assert!(t0.elapsed() < T, "the command never started");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                };
                let (memory, quota) = limits_of(pid);
                assert_eq!(
                    memory,
                    300 << 20,
                    "memory_mb 300 is not the sandbox's limit"
                );
                if let Some(q) = quota {
                    assert_eq!(q, 50_000, "cpus 0.5 is not the sandbox's CPU quota");
                }
                api.delete(&format!("/v1/sandboxes/{id}")).await;
                let _ = exec.await;
            });
        },
    );
}

/// A TCP listener on 127.0.0.1 that counts the connections it gets (and
/// closes each at once).
fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            count.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, seen)
}

/// An environment archive (base64) whose Dockerfile builds `FROM base`.
fn environment_from(base: &str) -> String {
    let text = format!("FROM {base}\nRUN true\n");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(text.len() as u64);
    h.set_mode(0o644);
    h.set_path("Dockerfile").unwrap();
    h.set_cksum();
    b.append(&h, text.as_bytes()).unwrap();
    base64::engine::general_purpose::STANDARD.encode(b.into_inner().unwrap())
}

#[test]
fn served_images_cannot_name_the_servers_own_network() {
    both(
        "served_limits::served_images_cannot_name_the_servers_own_network",
        |_| {
            let (port, seen) = counting_listener();
            let ws = workspace(true);
            let served = Served::start(ws.path(), &[]);
            let api = served.client();
            runtime().block_on(async {
                for body in [
                    json!({"image": format!("127.0.0.1:{port}/x")}),
                    json!({"image": format!("localhost:{port}/x:1")}),
                    json!({"image": format!("[::1]:{port}/x")}),
                    json!({"image": "10.1.2.3:5000/x"}),
                    json!({"image": "169.254.169.254/latest"}),
                    json!({"environment": environment_from(&format!("127.0.0.1:{port}/y"))}),
                    json!({
                        "environment": environment_from("debian:bookworm"),
                        "image": format!("127.0.0.1:{port}/z"),
                    }),
                ] {
                    let (status, _, said) = create(&api, body.clone()).await;
                    assert_eq!(status, 400, "{body}: {said}");
                    let e = said["error"].as_str().unwrap_or_default();
                    assert!(
                        e.contains("image") && e.contains("--allow-registry"),
                        "{body}: {e}"
                    );
                }
            });
            assert_eq!(
                seen.load(Ordering::SeqCst),
                0,
                "the server connected to its own loopback for a client"
            );
            drop(served);

            // The operator allows that registry: the server goes there.
            let registry = format!("127.0.0.1:{port}");
            let served = Served::start(ws.path(), &["--allow-registry", &registry]);
            let api = served.client();
            runtime().block_on(async {
                let (status, _, said) =
                    create(&api, json!({"image": format!("{registry}/x")})).await;
                assert_ne!(status, 400, "{said}");
            });
            assert!(
                seen.load(Ordering::SeqCst) > 0,
                "an allowed registry was never asked"
            );
        },
    );
}
