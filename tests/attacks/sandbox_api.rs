//! Attacks through the sandbox API of `endless serve` (`/v1/sandboxes`, the
//! Harbor environment's): a client that runs commands and moves files in
//! its sandbox tries to read and write the host, to escape with paths and
//! links in its archives, and to reach another token's sandbox. The server
//! runs as we are (root, then uid 65534), like an operator's.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::support::served::{Api, Served};
use super::*;

fn canary() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("API-CANARY-{}-{}", std::process::id(), t.as_nanos())
}

/// A workspace whose server builds on the host's system directories.
fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join(".config/endless");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "[images]\npull = \"never\"\n").unwrap();
    ws
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// stdout, stderr and the final line of an exec (or its error).
async fn exec(api: &Api, id: &str, command: &str) -> (u16, String, String, Value) {
    let a = api
        .post(
            &format!("/v1/sandboxes/{id}/exec"),
            json!({ "command": command, "timeout_sec": 30 }),
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

async fn put(api: &Api, id: &str, path: &str, archive: Vec<u8>) -> (u16, String) {
    let r = api
        .http
        .put(format!("{}/v1/sandboxes/{id}/files", api.url))
        .query(&[("path", path)])
        .bearer_auth(&api.token)
        .body(archive)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn get_files(api: &Api, id: &str, path: &str) -> (u16, Vec<u8>) {
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

/// A tar whose entries are written raw, as a hostile client would: files
/// (`Some(body)`) and symbolic or hard links (`Err(target)`).
/// One entry of [`hostile_tar`]: a name, and a file's body or a link's
/// kind and target.
type Entry<'a> = (&'a str, Result<&'a str, (tar::EntryType, &'a str)>);

fn hostile_tar(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, what) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        match what {
            Ok(body) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(body.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                b.append(&h, body.as_bytes()).unwrap();
            }
            Err((kind, target)) => {
                h.set_entry_type(*kind);
                h.set_size(0);
                h.set_mode(0o777);
                h.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

async fn create(api: &Api) -> String {
    let a = api
        .post("/v1/sandboxes", json!({ "image": "debian:bookworm" }), &[])
        .await;
    assert_eq!(a.status, 201, "{}", a.raw);
    a.body["sandbox_id"].as_str().unwrap().to_string()
}

fn host_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn sandbox_api_clients_stay_inside_their_sandbox() {
    both(
        "sandbox_api::sandbox_api_clients_stay_inside_their_sandbox",
        |_| {
            let ws = workspace();
            // A host directory with a secret, beside the server's own files.
            let host = tempfile::tempdir().unwrap();
            let secret = canary();
            std::fs::write(host.path().join("secret.txt"), &secret).unwrap();
            let hostdir = host.path().display().to_string();
            let usr_canary = format!("/usr/bin/{}", canary());
            let served = Served::start(ws.path(), &[]);
            let api = served.client();
            runtime().block_on(async {
            let id = create(&api).await;

            // Host files are invisible, the server's token too.
            let token_file = ws.path().join("serve.token").display().to_string();
            let (_, out, err, _) = exec(
                &api,
                &id,
                &format!("cat {hostdir}/secret.txt {token_file}; ls /proc/1/root{hostdir}; ls {hostdir}"),
            )
            .await;
            assert!(!out.contains(&secret) && !err.contains(&secret), "{out}{err}");
            assert!(!out.contains(&served.token), "{out}");

            // Writes land in the sandbox, never on the host.
            let (_, _, err, last) = exec(
                &api,
                &id,
                &format!(
                    "mkdir -p {hostdir} && echo pwned > {hostdir}/pwned; echo pwned > {usr_canary}; \
                     cat {hostdir}/pwned"
                ),
            )
            .await;
            assert_eq!(last["exit_code"], 0, "{err}");
            assert_eq!(host_files(host.path()), ["secret.txt"]);
            assert!(!Path::new(&usr_canary).exists());

            // The verifier's isolation: Docker's default capabilities
            // (inside the sandbox's user namespace) and no more, no new
            // privileges, the sandbox's seccomp filter, root inside mapped
            // outside.
            let (_, out, _, _) = exec(
                &api,
                &id,
                "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/self/uid_map",
            )
            .await;
            assert!(
                out.contains(&format!("CapEff:\t{}", root_inside_caps())),
                "{out}"
            );
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
            if rootless() {
                // Only our own id is mapped (seen from inside as the parent's 0).
                assert_eq!(map.get(2), Some(&1), "{out}");
            } else {
                assert!(root_maps_to_the_range(&map), "root maps to host root: {out}");
            }

            // Archives that climb out, are absolute, write through their
            // own link, or hard-link a file they did not bring: refused,
            // naming the entry.
            for (archive, says) in [
                (hostile_tar(&[("../escaped", Ok("x"))]), "../escaped"),
                (hostile_tar(&[("./a/../../escaped", Ok("x"))]), "escaped"),
                (hostile_tar(&[(&format!("{hostdir}/abs")[1..], Ok("x"))]), ""),
                (hostile_tar(&[("/etc/abs", Ok("x"))]), "absolute"),
                (
                    hostile_tar(&[
                        ("l", Err((tar::EntryType::Symlink, hostdir.as_str()))),
                        ("l/through", Ok("x")),
                    ]),
                    "symbolic link",
                ),
                (
                    hostile_tar(&[("h", Err((tar::EntryType::Link, "/etc/shadow")))]),
                    "hard link",
                ),
                (
                    hostile_tar(&[("h", Err((tar::EntryType::Link, "../../etc/shadow")))]),
                    "hard link",
                ),
            ] {
                let (status, body) = put(&api, &id, "/tmp/up", archive).await;
                if says.is_empty() {
                    // A relative name under the host's path: unpacked inside.
                    assert_eq!(status, 200, "{body}");
                    continue;
                }
                assert_eq!(status, 400, "{body}");
                assert!(body.contains(says), "{says}: {body}");
            }
            // A link the archive leaves, used by a later archive: the write
            // stays in the sandbox (the host's path does not exist there).
            let link = hostile_tar(&[("l2", Err((tar::EntryType::Symlink, hostdir.as_str())))]);
            assert_eq!(put(&api, &id, "/tmp/up", link).await.0, 200);
            let _ = put(&api, &id, "/tmp/up", hostile_tar(&[("l2/pwned-by-link", Ok("x"))])).await;
            let _ = put(&api, &id, &hostdir, hostile_tar(&[("pwned-by-path", Ok("x"))])).await;
            assert_eq!(host_files(host.path()), ["secret.txt"]);

            // Paths that climb are refused; host-only paths are not there.
            for path in ["/../etc", "/tmp/../../etc", "relative", "/a\nb"] {
                assert_eq!(get_files(&api, &id, path).await.0, 400, "{path:?}");
            }
            let (status, body) = get_files(&api, &id, &format!("{hostdir}/secret.txt")).await;
            assert!(
                !String::from_utf8_lossy(&body).contains(&secret),
                "the host's secret came down ({status})"
            );

            // Killing every process it can see ends only the sandbox's.
            exec(&api, &id, "kill -9 -1").await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let health = api.get("/v1/health").await;
            assert_eq!(health.status, 200, "the server died: {}", health.raw);
        });
            let (status, said) = served.stop();
            assert!(status.success(), "{said}");
        },
    );
}

#[test]
fn sandbox_api_clients_cannot_reach_another_tokens_sandbox() {
    both(
        "sandbox_api::sandbox_api_clients_cannot_reach_another_tokens_sandbox",
        |_| {
            let ws = workspace();
            let tokens = ws.path().join("serve.token");
            let (ta, tb) = (canary(), canary() + "-b");
            std::fs::write(&tokens, format!("{ta}\n{tb}\n")).unwrap();
            std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            let served = Served::start(ws.path(), &[]);
            let a = served.client();
            assert_eq!(a.token, ta);
            let b = Api {
                token: tb.clone(),
                ..a.clone()
            };
            let nobody = Api {
                token: String::new(),
                ..a.clone()
            };
            runtime().block_on(async {
                let id = create(&a).await;
                let (_, _, _, last) = exec(&a, &id, "echo mine > /tmp/mark").await;
                assert_eq!(last["exit_code"], 0);

                // Every route of A's sandbox is "not found" for B.
                assert_eq!(b.get(&format!("/v1/sandboxes/{id}")).await.status, 404);
                assert_eq!(exec(&b, &id, "rm /tmp/mark").await.0, 404);
                let archive = hostile_tar(&[("mark", Ok("theirs"))]);
                assert_eq!(put(&b, &id, "/tmp", archive).await.0, 404);
                assert_eq!(get_files(&b, &id, "/tmp/mark").await.0, 404);
                assert_eq!(b.delete(&format!("/v1/sandboxes/{id}")).await.status, 404);
                assert_eq!(b.get("/v1/sandboxes").await.body, json!([]));
                // No token, no answer; ids that are not ids are refused.
                assert_eq!(nobody.get(&format!("/v1/sandboxes/{id}")).await.status, 401);
                assert_eq!(exec(&nobody, &id, "true").await.0, 401);
                for bad in ["..%2F..%2Fsessions", "..", "x"] {
                    let status = a.get(&format!("/v1/sandboxes/{bad}")).await.status;
                    assert!(status == 400 || status == 404, "{bad}: {status}");
                }

                // B's own sandbox is B's; A's is untouched.
                let theirs = create(&b).await;
                assert_eq!(a.get(&format!("/v1/sandboxes/{theirs}")).await.status, 404);
                let (_, out, _, _) = exec(&a, &id, "cat /tmp/mark").await;
                assert_eq!(out, "mine\n");
                let (_, out, _, _) = exec(&b, &theirs, "cat /tmp/mark 2>&1").await;
                assert!(!out.contains("mine"), "sandboxes share files: {out}");
            });
            drop(served);
        },
    );
}
