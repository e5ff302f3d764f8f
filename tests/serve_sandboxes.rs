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

    // Over the cap: 429, and the first one still works.
    let over = api
        .post("/v1/sandboxes", json!({"image": "debian:bookworm"}), &[])
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
