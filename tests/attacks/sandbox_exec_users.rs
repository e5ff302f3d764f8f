//! Attacks through `user` in the sandbox API's exec (Harbor's verifier and
//! agents ask for root, or for another account): running as root inside a
//! sandbox, of a root task and of a non-root one, gains nothing outside
//! it; users the sandbox's /etc/passwd does not have, and ids the sandbox
//! does not map, are refused. The server runs as we are (root, then uid
//! 65534, whose sandboxes are rootless and run their own user only).

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::support::served::{Api, Served};
use super::*;

fn canary() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("USERS-CANARY-{}-{}", std::process::id(), t.as_nanos())
}

/// A workspace whose server builds on the host's system directories, with
/// one task whose agent runs as `user`, not root (no setup: a rootless
/// build maps no other id to chown files to).
fn workspace() -> (tempfile::TempDir, String) {
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join(".config/endless");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "[images]\npull = \"never\"\n").unwrap();
    let t = task("exec-users-agent", "user", "true\n");
    endless::store::Workspace::open(ws.path())
        .unwrap()
        .add_task(&t, endless::store::TaskStatus::Candidate)
        .unwrap();
    (ws, t.meta.task.id.clone())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Status, stdout, stderr and the final line (or error) of an exec.
async fn exec_as(api: &Api, id: &str, user: Value, command: &str) -> (u16, String, String, Value) {
    let a = api
        .post(
            &format!("/v1/sandboxes/{id}/exec"),
            json!({ "command": command, "user": user, "timeout_sec": 30 }),
            &[],
        )
        .await;
    let (mut out, mut err, mut last) = (String::new(), String::new(), a.body.clone());
    if a.status == 200 {
        for line in a.raw.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            match v["stream"].as_str() {
                Some("stdout") => out.push_str(v["data"].as_str().unwrap()),
                Some("stderr") => err.push_str(v["data"].as_str().unwrap()),
                _ => last = v,
            }
        }
    }
    (a.status, out, err, last)
}

async fn create(api: &Api, body: Value) -> (String, Value) {
    let a = api.post("/v1/sandboxes", body, &[]).await;
    assert_eq!(a.status, 201, "{}", a.raw);
    (a.body["sandbox_id"].as_str().unwrap().to_string(), a.body)
}

fn host_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The `user` values that mean root.
fn roots() -> [Value; 3] {
    [json!("root"), json!(0), json!("0")]
}

/// A 400 whose error names the `user` field.
fn refused(status: u16, last: &Value) {
    assert_eq!(status, 400, "{last}");
    let e = last["error"].as_str().unwrap_or_default();
    assert!(e.starts_with("user:"), "{e}");
}

#[test]
fn exec_as_root_inside_gains_nothing_outside() {
    both(
        "sandbox_exec_users::exec_as_root_inside_gains_nothing_outside",
        |_| {
            let (ws, task) = workspace();
            let tokens = ws.path().join("serve.token");
            let (ta, tb) = (canary(), canary() + "-b");
            std::fs::write(&tokens, format!("{ta}\n{tb}\n")).unwrap();
            std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            // A host directory with a secret only its owner may read.
            let host = tempfile::tempdir().unwrap();
            let secret = canary();
            let secret_file = host.path().join("secret.txt");
            std::fs::write(&secret_file, &secret).unwrap();
            std::fs::set_permissions(
                &secret_file,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .unwrap();
            let hostdir = host.path().display().to_string();
            let served = Served::start(ws.path(), &[]);
            let a = served.client();
            let b = Api {
                token: tb.clone(),
                ..a.clone()
            };
            runtime().block_on(async {
                // B's sandbox, with a file and a process of its own.
                let (theirs, _) = create(&b, json!({ "image": "debian:bookworm" })).await;
                let mark = canary();
                // (A pattern that does not match its own command line.)
                let pattern = format!("[{}]{}", &mark[..1], &mark[1..]);
                // The exec waits until the process runs under its new name: it
                // has left the exec's process group, which is killed at its end.
                let (s, started, err, _) = exec_as(
                    &b,
                    &theirs,
                    Value::Null,
                    &format!(
                        "echo {mark} > /tmp/mark; \
                         setsid bash -c 'exec -a {mark} sleep 300' </dev/null >/dev/null 2>&1 & \
                         for i in $(seq 400); do \
                         cat /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -q '{pattern}' && echo started && break; \
                         sleep 0.05; done"
                    ),
                )
                .await;
                assert_eq!(s, 200, "{err}");
                // Under a loaded machine the new name can take seconds: a
                // marker that never ran under it proves nothing below.
                assert!(started.contains("started"), "the marker process did not start in 20 s: {started}{err}");
                // It runs there (so that not seeing it elsewhere means something).
                let seen = format!("cat /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c '{pattern}'");
                let (_, out, _, _) = exec_as(&b, &theirs, Value::Null, &seen).await;
                assert_ne!(out.trim(), "0", "the marker process is gone");

                let (root_task, root_view) = create(&a, json!({ "image": "debian:bookworm" })).await;
                assert_eq!(root_view["uid"], 0, "{root_view}");
                let (user_task, user_view) = create(&a, json!({ "task_id": task })).await;
                assert_ne!(user_view["uid"], 0, "{user_view}");
                for (id, is_root_task) in [(&root_task, true), (&user_task, false)] {
                    for root in roots() {
                        let (s, out, err, last) = exec_as(&a, id, root.clone(), "id -u").await;
                        if !is_root_task && rootless() {
                            // A rootless sandbox maps its own user only.
                            refused(s, &last);
                            continue;
                        }
                        assert_eq!((s, out.as_str()), (200, "0\n"), "{root}: {err} {last}");
                    }
                    if !is_root_task && rootless() {
                        continue;
                    }
                    let root = json!("root");
                    // The host's secret is out of reach, by path or through /proc.
                    let (_, out, err, _) = exec_as(
                        &a,
                        id,
                        root.clone(),
                        &format!(
                            "cat {hostdir}/secret.txt; cat /proc/*/root{hostdir}/secret.txt; \
                             ls {hostdir}; find / -xdev -name secret.txt 2>/dev/null | head"
                        ),
                    )
                    .await;
                    assert!(!out.contains(&secret) && !err.contains(&secret), "{out}{err}");
                    // Writes land in the sandbox, never on the host.
                    let usr_canary = format!("/usr/bin/{}", canary());
                    let (_, _, err, last) = exec_as(
                        &a,
                        id,
                        root.clone(),
                        &format!(
                            "mkdir -p {hostdir} && echo pwned > {hostdir}/pwned; echo pwned > {usr_canary}; \
                             cat {hostdir}/pwned"
                        ),
                    )
                    .await;
                    assert_eq!(last["exit_code"], 0, "{err}");
                    assert_eq!(host_files(host.path()), ["secret.txt"]);
                    assert!(!Path::new(&usr_canary).exists());
                    // Root inside: Docker's default capabilities within its
                    // user namespace and no more, no new privileges, the
                    // sandbox's seccomp filter, and not root outside.
                    let (_, out, _, _) = exec_as(
                        &a,
                        id,
                        root.clone(),
                        "grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/self/uid_map",
                    )
                    .await;
                    let caps = root_inside_caps();
                    assert!(out.contains(&format!("CapEff:\t{caps}")), "{out}");
                    assert!(out.contains(&format!("CapPrm:\t{caps}")), "{out}");
                    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
                    assert!(out.contains("Seccomp:\t2"), "{out}");
                    let map: Vec<u64> = out
                        .lines()
                        .last()
                        .unwrap()
                        .split_whitespace()
                        .filter_map(|w| w.parse().ok())
                        .collect();
                    assert_eq!(map.first(), Some(&0), "{out}");
                    if !rootless() {
                        assert!(root_maps_to_the_range(&map), "root maps to host root: {out}");
                    }
                    // Another client's sandbox: neither its files nor its processes.
                    let (_, out, _, _) = exec_as(
                        &a,
                        id,
                        root.clone(),
                        "cat /tmp/mark /proc/*/root/tmp/mark 2>/dev/null; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '",
                    )
                    .await;
                    assert!(!out.contains(&mark), "another sandbox shows: {out}");
                    // Killing everything it sees ends only its own.
                    exec_as(&a, id, root.clone(), "kill -9 -1").await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    assert_eq!(a.get("/v1/health").await.status, 200);
                    let (s, out, _, _) = exec_as(&b, &theirs, Value::Null, "cat /tmp/mark").await;
                    assert_eq!((s, out.trim()), (200, mark.as_str()));
                }

                // Root or not, no token reaches another token's sandbox.
                for root in roots() {
                    assert_eq!(exec_as(&b, &root_task, root.clone(), "true").await.0, 404);
                    assert_eq!(exec_as(&a, &theirs, root, "true").await.0, 404);
                }
            });
            let (status, said) = served.stop();
            assert!(status.success(), "{said}");
        },
    );
}

#[test]
fn exec_as_users_the_sandbox_lacks_or_does_not_map_is_refused() {
    both(
        "sandbox_exec_users::exec_as_users_the_sandbox_lacks_or_does_not_map_is_refused",
        |_| {
            let (ws, task) = workspace();
            let served = Served::start(ws.path(), &[]);
            let a = served.client();
            runtime().block_on(async {
                let (root_task, _) = create(&a, json!({ "image": "debian:bookworm" })).await;
                let (user_task, user_view) = create(&a, json!({ "task_id": task })).await;
                let own = user_view["user"].clone();
                let (s, out, err, _) = exec_as(&a, &user_task, own.clone(), "id -un").await;
                assert_eq!((s, out.trim()), (200, own.as_str().unwrap()), "{err}");
                for id in [&root_task, &user_task] {
                    // Not in the sandbox's /etc/passwd (names and uids),
                    // and what is no user at all.
                    for user in [
                        json!("no-such-user"),
                        json!(4242),
                        json!("4242"),
                        json!(70_000),
                        json!(4_294_967_295u64),
                        json!(-1),
                        json!(""),
                        json!("root:x"),
                        json!(true),
                    ] {
                        let (s, _, _, last) = exec_as(&a, id, user.clone(), "touch /tmp/ran").await;
                        refused(s, &last);
                    }
                    let (_, _, _, last) = exec_as(&a, id, Value::Null, "test -e /tmp/ran").await;
                    assert_eq!(last["exit_code"], 1, "a refused exec ran");
                }
                // An account root adds to the sandbox's passwd with ids the
                // sandbox does not map: refused (and nothing runs).
                let (s, _, err, last) = exec_as(
                    &a,
                    &root_task,
                    json!("root"),
                    "echo 'far:x:70000:70000::/tmp:/bin/sh' >> /etc/passwd; \
                     echo 'fargroup:x:1001:70000::/tmp:/bin/sh' >> /etc/passwd",
                )
                .await;
                assert_eq!((s, &last["exit_code"]), (200, &json!(0)), "{err}");
                for user in [json!("far"), json!(70_000), json!("fargroup")] {
                    let (s, _, _, last) =
                        exec_as(&a, &root_task, user.clone(), "touch /tmp/ran").await;
                    refused(s, &last);
                    if !rootless() {
                        let e = last["error"].as_str().unwrap();
                        assert!(
                            e.contains("outside the ids the sandbox maps"),
                            "{user}: {e}"
                        );
                    }
                }
                let (_, _, _, last) =
                    exec_as(&a, &root_task, Value::Null, "test -e /tmp/ran").await;
                assert_eq!(last["exit_code"], 1, "a refused exec ran");
                // A real account of the passwd: as itself where the sandbox
                // maps it, refused where it is rootless.
                let (s, out, err, last) =
                    exec_as(&a, &root_task, json!("nobody"), "id -u; touch /etc/owned").await;
                if rootless() {
                    refused(s, &last);
                } else {
                    assert_eq!((s, out.lines().next()), (200, Some("65534")), "{err}");
                    assert!(err.contains("Permission denied"), "{err}");
                }
            });
            let (status, said) = served.stop();
            assert!(status.success(), "{said}");
        },
    );
}
