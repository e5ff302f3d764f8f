//! `/v1/sandboxes` end to end: the real `endless serve` on 127.0.0.1 and
//! real sandboxes, driven as a Harbor environment drives them (create from
//! a Harbor task's environment/, exec, files up and down as tar, delete),
//! with quotas, ownership, idle reaping and the journal.

#![allow(clippy::unwrap_used)] // tests fail loudly

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use support::served::{Api, Served};

/// A workspace whose server builds on the host's system directories
/// (base images are never pulled: no network in tests).
fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join(".config/endless");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "[images]\npull = \"never\"\n").unwrap();
    ws
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// A tar of `dir`'s content.
fn tar_of(dir: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir_all(".", dir).unwrap();
    b.into_inner().unwrap()
}

/// A tar of `(name, body)` files.
fn tar_files(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_path(name).unwrap();
        h.set_cksum();
        b.append(&h, body.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

/// The names and contents of the files in `archive`.
fn untar(archive: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in tar::Archive::new(archive).entries().unwrap() {
        let mut e = e.unwrap();
        if e.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let name = e
            .path()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches("./")
            .to_string();
        let mut body = String::new();
        e.read_to_string(&mut body).unwrap();
        out.push((name, body));
    }
    out
}

/// What an exec answered: stdout, stderr, and the final line.
struct Ran {
    status: u16,
    stdout: String,
    stderr: String,
    last: Value,
}

async fn exec(api: &Api, id: &str, body: Value) -> Ran {
    let a = api
        .post(&format!("/v1/sandboxes/{id}/exec"), body, &[])
        .await;
    let mut ran = Ran {
        status: a.status,
        stdout: String::new(),
        stderr: String::new(),
        last: a.body.clone(),
    };
    if a.status != 200 {
        return ran;
    }
    assert_eq!(a.header("content-type"), "application/x-ndjson");
    for line in a.raw.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        match v["stream"].as_str() {
            Some("stdout") => ran.stdout.push_str(v["data"].as_str().unwrap()),
            Some("stderr") => ran.stderr.push_str(v["data"].as_str().unwrap()),
            _ => ran.last = v,
        }
    }
    ran
}

async fn put_tar(api: &Api, id: &str, path: &str, archive: Vec<u8>) -> (u16, Value) {
    let r = api
        .http
        .put(format!("{}/v1/sandboxes/{id}/files", api.url))
        .query(&[("path", path)])
        .bearer_auth(&api.token)
        .body(archive)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get_tar(api: &Api, id: &str, path: &str) -> (u16, Vec<u8>) {
    let r = api
        .http
        .get(format!("{}/v1/sandboxes/{id}/files", api.url))
        .query(&[("path", path)])
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

fn environment_of(task: &str) -> Value {
    let archive = tar_of(&fixture(task).join("environment"));
    json!({ "environment": base64::engine::general_purpose::STANDARD.encode(archive) })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_harbor_environment_runs_commands_and_moves_files() {
    let ws = workspace();
    let served = Served::start(ws.path(), &[]);
    let api = served.client();

    let created = api
        .post(
            "/v1/sandboxes",
            environment_of("mixed/harbor-word-count"),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let id = created.body["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(created.body["user"], "root");
    assert_eq!(created.body["uid"], 0);
    assert_eq!(created.body["workdir"], "/app");
    assert!(created.body["source"]
        .as_str()
        .unwrap()
        .starts_with("environment:"));

    // The build context's files are there, in the Dockerfile's WORKDIR.
    let ran = exec(&api, &id, json!({"command": "wc -w < data/poem.txt"})).await;
    assert_eq!(
        (ran.stdout.trim(), ran.last["exit_code"].as_i64()),
        ("9", Some(0))
    );

    // stdout and stderr apart, the exit status as the command left it.
    let ran = exec(
        &api,
        &id,
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert_eq!(
        (ran.stdout.as_str(), ran.stderr.as_str()),
        ("out\n", "err\n")
    );
    assert_eq!(ran.last["exit_code"], 3);
    assert_eq!(ran.last["timed_out"], false);

    // cwd, env, user; each exec is a fresh process (no state carried).
    let ran = exec(
        &api,
        &id,
        json!({"command": "cd /; pwd; echo \"$FOO\"; id -un", "cwd": "/tmp", "env": {"FOO": "a b"}, "user": "root"}),
    )
    .await;
    assert_eq!(ran.stdout, "/\na b\nroot\n", "{}", ran.stderr);
    let ran = exec(&api, &id, json!({"command": "pwd", "cwd": "/tmp"})).await;
    assert_eq!(ran.stdout, "/tmp\n");
    let ran = exec(&api, &id, json!({"command": "true", "cwd": "/no/such/dir"})).await;
    assert_eq!(ran.last["exit_code"], 126);
    assert!(ran.stderr.contains("/no/such/dir"), "{}", ran.stderr);

    // A command past its timeout is killed; the sandbox goes on.
    let t0 = Instant::now();
    let ran = exec(&api, &id, json!({"command": "sleep 30", "timeout_sec": 1})).await;
    assert_eq!(ran.last["timed_out"], true);
    assert_eq!(ran.last["exit_code"], Value::Null);
    assert!(t0.elapsed() < Duration::from_secs(15));

    // Bad requests name the field.
    let ran = exec(&api, &id, json!({"command": "true", "user": "agent"})).await;
    assert_eq!(ran.status, 400);
    assert!(
        ran.last["error"].as_str().unwrap().starts_with("user:"),
        "{}",
        ran.last
    );
    let ran = exec(&api, &id, json!({"command": "true", "shell": "zsh"})).await;
    assert_eq!(ran.status, 400);
    assert!(
        ran.last["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `shell`"),
        "{}",
        ran.last
    );

    // Files up (a directory's content) and down (a directory, a file).
    let up = tar_files(&[
        ("test.sh", "#!/bin/bash\necho ok\n"),
        ("sub/data.txt", "x\n"),
    ]);
    let (status, body) = put_tar(&api, &id, "/tests", up).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["entries"], 2);
    let ran = exec(
        &api,
        &id,
        json!({"command": "bash /tests/test.sh && cat /tests/sub/data.txt"}),
    )
    .await;
    assert_eq!(ran.stdout, "ok\nx\n");
    exec(
        &api,
        &id,
        json!({"command": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"}),
    )
    .await;
    let (status, archive) = get_tar(&api, &id, "/logs/verifier").await;
    assert_eq!(status, 200);
    assert_eq!(
        untar(&archive),
        [("reward.txt".to_string(), "1\n".to_string())]
    );
    let (status, archive) = get_tar(&api, &id, "/app/data/poem.txt").await;
    assert_eq!(status, 200);
    let files = untar(&archive);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].0, "poem.txt");
    // Archives past the 1 MiB limit of JSON requests, both ways.
    let big = "0123456789abcdef".repeat(3 << 16);
    let (status, body) = put_tar(&api, &id, "/big", tar_files(&[("big.txt", &big)])).await;
    assert_eq!(status, 200, "{body}");
    let (status, archive) = get_tar(&api, &id, "/big/big.txt").await;
    assert_eq!(status, 200);
    assert_eq!(untar(&archive), [("big.txt".to_string(), big)]);
    let (status, _) = get_tar(&api, &id, "/no/such/file").await;
    assert_eq!(status, 404);
    let (status, _) = get_tar(&api, &id, "relative/path").await;
    assert_eq!(status, 400);

    // Listed, shown, deleted; gone after.
    let list = api.get("/v1/sandboxes").await;
    assert_eq!(list.body.as_array().unwrap().len(), 1);
    assert_eq!(
        api.get(&format!("/v1/sandboxes/{id}")).await.body["state"],
        "ready"
    );
    let health = api.get("/v1/health").await;
    assert_eq!(health.body["sandboxes"], 1);
    let deleted = api.delete(&format!("/v1/sandboxes/{id}")).await;
    assert_eq!(deleted.status, 200, "{}", deleted.raw);
    let ran = exec(&api, &id, json!({"command": "true"})).await;
    assert_eq!(ran.status, 404);
    assert_eq!(api.get("/v1/health").await.body["sandboxes"], 0);
    let (status, said) = served.stop();
    assert!(status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn images_tasks_quotas_and_bad_sources() {
    let ws = workspace();
    let served = Served::start(ws.path(), &["--max-sessions", "1"]);
    let api = served.client();
    let created = api
        .post(
            "/v1/sandboxes",
            json!({"image": "debian:bookworm", "workdir": "/work"}),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let id = created.body["sandbox_id"].as_str().unwrap().to_string();
    let ran = exec(&api, &id, json!({"command": "pwd"})).await;
    assert_eq!(ran.stdout, "/work\n", "{}", ran.stderr);

    // Over the cap, asking not to wait: 429, and the first one still works.
    let over = api
        .post(
            "/v1/sandboxes?wait=0",
            json!({"image": "debian:bookworm"}),
            &[],
        )
        .await;
    assert_eq!(over.status, 429, "{}", over.raw);
    assert_eq!(
        exec(&api, &id, json!({"command": "true"})).await.last["exit_code"],
        0
    );
    api.delete(&format!("/v1/sandboxes/{id}")).await;

    for (body, status, says) in [
        (json!({"task_id": "no-such-task"}), 404, "no task"),
        (json!({}), 400, "task_id, environment or image"),
        (
            json!({"task_id": "x", "image": "y"}),
            400,
            "cannot be combined",
        ),
        (json!({"image": "x\nRUN true"}), 400, "image:"),
        (json!({"environment": "%%%"}), 400, "not base64"),
        (
            json!({"image": "debian:bookworm", "lifetime_sec": -1}),
            400,
            "lifetime_sec",
        ),
        (
            json!({"image": "debian:bookworm", "workdir": "rel"}),
            400,
            "workdir",
        ),
    ] {
        let a = api.post("/v1/sandboxes", body.clone(), &[]).await;
        assert_eq!(a.status, status, "{body}: {}", a.raw);
        assert!(a.raw.contains(says), "{body}: {}", a.raw);
    }
    let no_dockerfile =
        base64::engine::general_purpose::STANDARD.encode(tar_files(&[("a.txt", "x")]));
    let a = api
        .post("/v1/sandboxes", json!({"environment": no_dockerfile}), &[])
        .await;
    assert_eq!(a.status, 400);
    assert!(a.raw.contains("no Dockerfile"), "{}", a.raw);
    // An environment without a Dockerfile, built on an image.
    let a = api
        .post(
            "/v1/sandboxes",
            json!({"environment": no_dockerfile, "image": "debian:bookworm", "workdir": "/app"}),
            &[],
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.raw);
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sandboxes_are_deleted_and_a_killed_servers_are_reported_lost() {
    let ws = workspace();
    let served = Served::start(ws.path(), &["--idle-timeout", "1"]);
    let api = served.client();
    let a = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(a.status, 201, "{}", a.raw);
    let id = a.body["sandbox_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.get(&format!("/v1/sandboxes/{id}")).await.status != 404 {
        assert!(
            Instant::now() < deadline,
            "the idle sandbox was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(served);

    // SIGKILL with a sandbox open: the next server reports it lost.
    let mut served = Served::start(ws.path(), &[]);
    let api = served.client();
    let a = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(a.status, 201, "{}", a.raw);
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    let served = Served::start(ws.path(), &[]);
    let health = served.client().get("/v1/health").await;
    assert_eq!(health.body["lost_sandboxes"], 1, "{}", health.raw);
    assert_eq!(health.body["sandboxes"], 0);
}

/// How long a client pauses between execs (a slow LLM call): longer than
/// the runtime keeps an idle blocking thread (10 s).
const CLIENT_PAUSE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_outlives_a_long_client_pause() {
    let ws = workspace();
    let served = Served::start(ws.path(), &[]);
    let api = served.client();
    let a = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(a.status, 201, "{}", a.raw);
    let id = a.body["sandbox_id"].as_str().unwrap().to_string();
    let ran = exec(&api, &id, json!({"command": "echo before-$((6*7))"})).await;
    assert_eq!((ran.status, ran.stdout.as_str()), (200, "before-42\n"));
    tokio::time::sleep(CLIENT_PAUSE).await;
    let ran = exec(&api, &id, json!({"command": "echo after-$((6*7))"})).await;
    assert_eq!(
        (ran.status, ran.stdout.as_str()),
        (200, "after-42\n"),
        "{} {}",
        ran.stderr,
        ran.last
    );
    assert_eq!(ran.last["exit_code"], 0, "{}", ran.last);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_served_tasks_environment_by_id_without_its_tests_or_solution() {
    let ws = workspace();
    let imported = std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
        .arg("--workspace")
        .arg(ws.path())
        .args(["tasks", "import"])
        .arg(fixture("harbor/drop-dir"))
        .env("XDG_CONFIG_HOME", ws.path().join(".config"))
        .env("XDG_CACHE_HOME", ws.path().join(".cache"))
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let served = Served::start(ws.path(), &[]);
    let api = served.client();
    let created = api
        .post("/v1/sandboxes", json!({"task_id": "drop-dir"}), &[])
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    assert_eq!(created.body["source"], "task:drop-dir");
    assert_eq!(created.body["workdir"], "/srv");
    let id = created.body["sandbox_id"].as_str().unwrap();
    // The task's environment, not its tests or its solution.
    let ran = exec(
        &api,
        id,
        json!({"command": "pwd; ls / /srv; ls /tests /solution 2>&1 | head -2"}),
    )
    .await;
    assert!(ran.stdout.starts_with("/srv\n"), "{}", ran.stdout);
    assert!(
        !ran.stdout.contains("test.sh") && !ran.stdout.contains("solve.sh"),
        "{}",
        ran.stdout
    );
}

/// Issue 32: an exec's output leaves the server as the command writes it
/// (Harbor shows an agent's long commands live), stdout and stderr apart,
/// then the exit status.
#[tokio::test(flavor = "multi_thread")]
async fn exec_output_arrives_as_the_command_writes_it() {
    let ws = workspace();
    let served = Served::start(ws.path(), &[]);
    let api = served.client();
    let created = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let id = created.body["sandbox_id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    let mut resp = api
        .http
        .post(format!("{}/v1/sandboxes/{id}/exec", api.url))
        .bearer_auth(&api.token)
        .json(&json!({"command": "echo a; echo e >&2; sleep 2; echo b", "timeout_sec": 30}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let (mut buf, mut lines) = (Vec::new(), Vec::<(Value, Duration)>::new());
    while let Some(chunk) = resp.chunk().await.unwrap() {
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            lines.push((serde_json::from_slice(&line).unwrap(), t0.elapsed()));
        }
    }
    let text = |stream: &str| -> String {
        lines
            .iter()
            .filter(|(v, _)| v["stream"] == stream)
            .map(|(v, _)| v["data"].as_str().unwrap())
            .collect()
    };
    assert_eq!(
        (text("stdout").as_str(), text("stderr").as_str()),
        ("a\nb\n", "e\n")
    );
    let first = lines.iter().find(|(v, _)| v["stream"] == "stdout").unwrap();
    let (last, ended) = lines.last().unwrap();
    assert_eq!(last["exit_code"], 0, "{last}");
    assert_eq!(last["timed_out"], false);
    assert!(last["duration_secs"].as_f64().unwrap() >= 2.0, "{last}");
    assert!(
        *ended - first.1 > Duration::from_millis(1500),
        "the first piece came at {:?}, the end at {ended:?}",
        first.1
    );
}

/// Issue 32: `user` in an exec: the sandbox's own user always; another
/// account of its /etc/passwd when the server runs as root (its sandboxes
/// map other ids); refused with a 400 naming `user` otherwise (see
/// tests/attacks/sandbox_exec_users.rs for what such a user can reach).
#[tokio::test(flavor = "multi_thread")]
async fn exec_runs_as_the_accounts_of_the_sandboxes_passwd() {
    let ws = workspace();
    let served = Served::start(ws.path(), &[]);
    let api = served.client();
    let created = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let id = created.body["sandbox_id"].as_str().unwrap().to_string();
    let own = created.body["user"].as_str().unwrap().to_string();
    let ran = exec(&api, &id, json!({"command": "id -un", "user": own})).await;
    assert_eq!(ran.stdout, format!("{own}\n"), "{}", ran.stderr);
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    for user in [json!("nobody"), json!(65534), json!("65534")] {
        let ran = exec(
            &api,
            &id,
            json!({"command": "id -un; id -g; echo $HOME", "user": user}),
        )
        .await;
        if root {
            assert_eq!(ran.status, 200, "{user}: {}", ran.last);
            assert_eq!(
                ran.stdout, "nobody\n65534\n/nonexistent\n",
                "{user}: {}",
                ran.stderr
            );
        } else {
            assert_eq!(ran.status, 400, "{user}: {}", ran.last);
            let e = ran.last["error"].as_str().unwrap();
            assert!(e.starts_with("user:") && e.contains("unprivileged"), "{e}");
        }
    }
    for (user, says) in [
        (
            json!("no-such-user"),
            "not an account of the sandbox's /etc/passwd",
        ),
        (json!(4242), "not an account of the sandbox's /etc/passwd"),
        (json!(-1), "neither an account name nor a uid"),
        (json!({"name": "root"}), "neither an account name nor a uid"),
    ] {
        let ran = exec(&api, &id, json!({"command": "true", "user": user})).await;
        assert_eq!(ran.status, 400, "{user}: {}", ran.last);
        let e = ran.last["error"].as_str().unwrap();
        assert!(e.starts_with("user:"), "{e}");
        if root {
            assert!(e.contains(says), "{user}: {e}");
        }
    }
}

/// The default route of a sandbox's `/proc/net/route` (a line whose
/// destination is 0.0.0.0), if it has one.
fn default_route(routes: &str) -> Option<&str> {
    routes
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().nth(1) == Some("00000000"))
}

/// A local Debian package source inside the sandbox (a package built there
/// with dpkg-deb, a `Packages` index, a `file:` source list), then
/// `apt-get update` and `apt-get install` from it. The host base images
/// (`pull = "never"`) have no dpkg database: it is made empty first.
const APT_FROM_A_LOCAL_SOURCE: &str = r#"set -e
mkdir -p /var/lib/dpkg/info /var/lib/dpkg/updates /var/lib/apt/lists/partial /var/cache/apt/archives/partial /var/log/apt
touch /var/lib/dpkg/status /var/lib/dpkg/available
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/local/bin /srv/repo
printf 'Package: endless-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <t@example.org>\nDescription: a package of the test\n' > /tmp/pkg/DEBIAN/control
printf '#!/bin/sh\necho hello from a package\n' > /tmp/pkg/usr/local/bin/endless-hello
chmod 755 /tmp/pkg/usr/local/bin/endless-hello
dpkg-deb --build /tmp/pkg /srv/repo/endless-hello_1.0_all.deb >/dev/null
cd /srv/repo
{ cat /tmp/pkg/DEBIAN/control
  echo "Filename: ./endless-hello_1.0_all.deb"
  echo "Size: $(stat -c %s endless-hello_1.0_all.deb)"
  echo "SHA256: $(sha256sum endless-hello_1.0_all.deb | cut -d' ' -f1)"
  echo; } > Packages
chmod -R a+rX /srv/repo
echo 'deb [trusted=yes] file:/srv/repo ./' > /srv/local.list
o="-o Dir::Etc::SourceList=/srv/local.list -o Dir::Etc::SourceParts=/nonexistent"
apt-get $o update
apt-get $o install -y --no-install-recommends endless-hello
endless-hello
"#;

/// Issue 49: a sandbox asking for the network gets it (a default route
/// through pasta) without the host's loopback; one that does not ask has
/// none; and `apt-get` as the sandbox's root works (it drops to `_apt`
/// with `setgroups`, which needs the root shell's capabilities).
#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_has_the_network_it_asks_for_and_apt_works_as_root() {
    let ws = workspace();
    let served = Served::start(ws.path(), &[]);
    let api = served.client();
    // A service on the host's loopback that no sandbox may reach.
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();

    let online = api
        .post(
            "/v1/sandboxes",
            json!({"image": "debian:bookworm", "network": true}),
            &[],
        )
        .await;
    assert_eq!(online.status, 201, "{}", online.raw);
    let id = online.body["sandbox_id"].as_str().unwrap().to_string();
    let ran = exec(&api, &id, json!({"command": "cat /proc/net/route"})).await;
    let route = default_route(&ran.stdout).unwrap_or_else(|| panic!("no route: {}", ran.stdout));
    // The gateway (little-endian hex) is where the host would be mapped.
    let gw = u32::from_str_radix(route.split_whitespace().nth(2).unwrap(), 16).unwrap();
    let gw = std::net::Ipv4Addr::from(gw.to_le_bytes());
    for addr in ["127.0.0.1".to_string(), gw.to_string()] {
        let probe = format!("timeout 5 bash -c 'echo > /dev/tcp/{addr}/{port}'");
        let ran = exec(&api, &id, json!({ "command": probe })).await;
        assert_ne!(
            ran.last["exit_code"], 0,
            "{addr}:{port} reached: {}",
            ran.last
        );
    }
    assert!(host.accept().is_err(), "the host's loopback was reached");

    let ran = exec(&api, &id, json!({ "command": APT_FROM_A_LOCAL_SOURCE })).await;
    assert_eq!(ran.last["exit_code"], 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.ends_with("hello from a package\n"),
        "{}",
        ran.stdout
    );
    assert!(!ran.stderr.contains("setgroups"), "{}", ran.stderr);
    // Its commands trust the host's CA bundle, as its shell does (a
    // TLS-inspecting proxy's CA: Harbor's verifier's curl and pip); the
    // caller's variables win.
    let host_ca = Path::new("/etc/ssl/certs/ca-certificates.crt");
    let show = "echo \"$SSL_CERT_FILE $CURL_CA_BUNDLE $PIP_CERT $REQUESTS_CA_BUNDLE\"; cat \"$SSL_CERT_FILE\"";
    let ran = exec(
        &api,
        &id,
        json!({ "command": show, "env": {"PIP_CERT": "/mine.crt"} }),
    )
    .await;
    if host_ca.is_file() {
        let ca = "/run/endless-ca/ca.crt";
        let (vars, bundle) = ran.stdout.split_once('\n').unwrap();
        assert_eq!(vars, format!("{ca} {ca} /mine.crt {ca}"), "{}", ran.stderr);
        assert_eq!(bundle, std::fs::read_to_string(host_ca).unwrap());
    }

    let offline = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(offline.status, 201, "{}", offline.raw);
    let id = offline.body["sandbox_id"].as_str().unwrap();
    let ran = exec(&api, id, json!({"command": "cat /proc/net/route"})).await;
    assert_eq!(default_route(&ran.stdout), None, "{}", ran.stdout);
    let ran = exec(&api, id, json!({"command": "echo \"[$SSL_CERT_FILE]\""})).await;
    assert_eq!(ran.stdout, "[]\n");
    // A served task's sandbox has its task's network, not the client's.
    let a = api
        .post(
            "/v1/sandboxes",
            json!({"task_id": "any", "network": true}),
            &[],
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.raw);
    assert!(a.raw.contains("network:"), "{}", a.raw);
}

/// Issue 49: over `--max-sessions`, creates wait in line for the place of
/// a deleted sandbox instead of a 429.
#[tokio::test(flavor = "multi_thread")]
async fn creates_over_the_limit_wait_in_line() {
    let ws = workspace();
    let served = Served::start(ws.path(), &["--max-sessions", "2"]);
    let api = served.client();
    let mut trials = tokio::task::JoinSet::new();
    for n in 0..6 {
        let api = api.clone();
        trials.spawn(async move {
            let a = api
                .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
                .await;
            assert_eq!(a.status, 201, "create {n}: {}", a.raw);
            let id = a.body["sandbox_id"].as_str().unwrap().to_string();
            let ran = exec(
                &api,
                &id,
                json!({"command": "sleep 1; echo trial-$((40+2))"}),
            )
            .await;
            assert_eq!(ran.stdout, "trial-42\n", "{}", ran.stderr);
            assert_eq!(api.delete(&format!("/v1/sandboxes/{id}")).await.status, 200);
        });
    }
    while let Some(done) = trials.join_next().await {
        done.unwrap();
    }
    let health = api.get("/v1/health").await;
    assert_eq!(health.body["sandboxes"], 0, "{}", health.raw);
    assert_eq!(health.body["queued_sandboxes"], 0, "{}", health.raw);
}

/// Start `command` in sandbox `id` on a raw connection, wait until it
/// runs (the answer's head), and close the connection: a client killed
/// mid-command.
async fn exec_and_hang_up(served: &Served, id: &str, command: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = served.url.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = json!({ "command": command }).to_string();
    let request = format!(
        "POST /v1/sandboxes/{id}/exec HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        served.token,
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "the server closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.extend_from_slice(&buf[..n]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    drop(conn);
}

/// Issue 49: a command whose client went away is killed (the next request
/// does not wait for it), and a sandbox whose client is gone is reaped by
/// the idle timer although its last command was meant to run for minutes.
#[tokio::test(flavor = "multi_thread")]
async fn a_clients_hang_up_kills_its_command_and_frees_the_sandbox() {
    let ws = workspace();
    let served = Served::start(ws.path(), &["--idle-timeout", "3"]);
    let api = served.client();
    let a = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
        .await;
    assert_eq!(a.status, 201, "{}", a.raw);
    let id = a.body["sandbox_id"].as_str().unwrap().to_string();
    exec_and_hang_up(&served, &id, "sleep 300").await;
    let start = Instant::now();
    let count = r"for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 300' || true";
    let ran = exec(&api, &id, json!({ "command": count })).await;
    assert_eq!(ran.last["exit_code"], 0, "{}", ran.last);
    assert_eq!(
        ran.stdout, "0\n",
        "the command of the client gone still runs"
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the next command waited {:?} for the one whose client went away",
        start.elapsed()
    );

    exec_and_hang_up(&served, &id, "sleep 300").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get(&format!("/v1/sandboxes/{id}")).await.status != 404 {
        assert!(
            Instant::now() < deadline,
            "the sandbox of a client gone was never reaped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The size of the file system at `/` in a sandbox, MiB (`df`).
async fn root_size_mb(api: &Api, id: &str) -> u64 {
    let ran = exec(api, id, json!({"command": "df -P -m / | tail -n 1"})).await;
    let size = ran.stdout.split_whitespace().nth(1);
    size.and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("df: {}\n{}", ran.stdout, ran.stderr))
}

/// `storage_mb` (Harbor's `[environment] storage_mb`) sizes a sandbox's
/// writable storage as it does a task's session; 0 is refused.
#[tokio::test(flavor = "multi_thread")]
async fn storage_mb_sizes_the_sandboxs_storage() {
    let ws = workspace();
    let served = Served::start(ws.path(), &[]);
    let api = served.client();
    let mut sizes = Vec::new();
    for body in [
        json!({"image": "debian:bookworm"}),
        json!({"image": "debian:bookworm", "storage_mb": 1536}),
    ] {
        let created = api.post("/v1/sandboxes", body, &[]).await;
        assert_eq!(created.status, 201, "{}", created.raw);
        let id = created.body["sandbox_id"].as_str().unwrap().to_string();
        sizes.push(root_size_mb(&api, &id).await);
    }
    assert_eq!(sizes, [1024, 1536]);
    let zero = api
        .post(
            "/v1/sandboxes",
            json!({"image": "debian:bookworm", "storage_mb": 0}),
            &[],
        )
        .await;
    assert_eq!(zero.status, 400, "{}", zero.raw);
    assert!(zero.raw.contains("storage_mb:"), "{}", zero.raw);
}
