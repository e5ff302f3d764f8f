//! Attacks through task bundles (`tasks import`), verifier reports and
//! `endless serve`.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use endless::agent::BackendProvider;
use endless::rl::RewardMode;
use endless::serve::{Auth, Server, Settings};
use endless::store::{import_paths, ImportOutcome, OnConflict, Workspace};
use endless::task::save_native_atomic;
use endless::verify::{verify_with, VerifierMode};

use super::*;

/// What a file outside the bundle holds: it must never reach the workspace.
const CANARY: &str = "CANARY-OUTSIDE-THE-BUNDLE-9c41";

/// Imports run while the racer swaps paths of the bundle.
const IMPORT_ROUNDS: usize = 300;

/// Swap `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`): both always exist.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = CString::new(b.as_os_str().as_bytes()).unwrap();
    // SAFETY: two valid NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A private directory holding a 0600 canary file, outside any bundle: a
/// root-only file in the run as root, uid 65534's own in the other.
fn private_canary(dir: &Path) -> (PathBuf, PathBuf) {
    let secret = dir.join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let canary = secret.join("canary");
    std::fs::write(&canary, CANARY).unwrap();
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
    (secret, canary)
}

/// Every file below `dir` that holds the canary.
fn files_with_canary(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| {
            std::fs::read(e.path())
                .is_ok_and(|b| b.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()))
        })
        .map(|e| e.path().to_path_buf())
        .collect()
}

/// Breach 5: `tasks import` checked a path, then opened it again. A local
/// user who can write the bundle swaps checked files (and a directory) for
/// symbolic links to a private file while imports run; its content must
/// never land in the workspace, and a refused import must name the path.
#[test]
fn a_bundle_swapped_while_it_is_imported_never_brings_in_outside_files() {
    both(
        "bundles_and_reports::a_bundle_swapped_while_it_is_imported_never_brings_in_outside_files",
        |_| {
            let dir = tempfile::tempdir().unwrap();
            let (secret, canary) = private_canary(dir.path());
            let bundle = dir.path().join("bundle");
            let mut t = task("atk-import-race", "root", "true\n");
            t.environment.insert_text("data.txt", "plain data\n");
            t.solution
                .insert_text("solve.sh", "echo HELLO > ~/out.txt\n");
            t.meta.verifier.initial_tests.clear();
            save_native_atomic(&t, &bundle).unwrap();
            // Each checked path and, beside the bundle, what is swapped in.
            let swaps: Vec<(PathBuf, PathBuf)> = [
                ("instruction.md", &canary),
                ("environment/data.txt", &canary),
                ("solution", &secret),
            ]
            .iter()
            .enumerate()
            .map(|(i, (rel, target))| {
                let alt = dir.path().join(format!("alt-{i}"));
                std::os::unix::fs::symlink(target, &alt).unwrap();
                (bundle.join(rel), alt)
            })
            .collect();

            let stop = Arc::new(AtomicBool::new(false));
            let swapped = Arc::new(AtomicUsize::new(0));
            let racer = {
                let (stop, swapped) = (stop.clone(), swapped.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        for (a, b) in &swaps {
                            exchange(a, b).unwrap();
                            swapped.fetch_add(1, Ordering::Relaxed);
                        }
                        // A pause in each state (all swapped, all as they
                        // were), so that on a loaded machine some imports
                        // still meet an intact bundle: the test needs both.
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                    // Leave the bundle as it was.
                    for (a, b) in &swaps {
                        if std::fs::symlink_metadata(a).unwrap().is_symlink() {
                            exchange(a, b).unwrap();
                        }
                    }
                })
            };

            let ws_dir = tempfile::tempdir().unwrap();
            let mut ws = Workspace::open(ws_dir.path()).unwrap();
            let (mut imported, mut refused) = (0, 0);
            for round in 0..IMPORT_ROUNDS {
                let report = import_paths(
                    &mut ws,
                    std::slice::from_ref(&bundle),
                    None,
                    OnConflict::Replace,
                )
                .unwrap();
                for outcome in &report.outcomes {
                    match outcome {
                        ImportOutcome::Failed { error, .. } => {
                            refused += 1;
                            assert!(
                                error.contains(&*bundle.to_string_lossy()),
                                "round {round}: the error names no path of the bundle: {error}"
                            );
                            assert!(!error.contains(CANARY), "round {round}: {error}");
                        }
                        ImportOutcome::Imported { .. } | ImportOutcome::Unchanged { .. } => {
                            imported += 1
                        }
                        other => panic!("round {round}: {other:?}"),
                    }
                }
                let leaked = files_with_canary(&ws_dir.path().join("tasks"));
                assert!(
                    leaked.is_empty(),
                    "round {round}: a file from outside the bundle reached the workspace: {leaked:?}"
                );
            }
            stop.store(true, Ordering::Relaxed);
            racer.join().unwrap();
            assert!(
                swapped.load(Ordering::Relaxed) > IMPORT_ROUNDS,
                "the racer hardly ran"
            );
            assert!(imported > 0, "no import got through ({refused} refused)");
            // The bundle as it is, unswapped, imports.
            let report = import_paths(
                &mut ws,
                std::slice::from_ref(&bundle),
                None,
                OnConflict::Replace,
            )
            .unwrap();
            assert_eq!(report.failed(), 0, "{:?}", report.outcomes);
            assert!(files_with_canary(ws_dir.path()).is_empty());
        },
    );
}

/// Pytest tests whose JUnit report would be over 16 MiB: one passes, then
/// one fails with a huge traceback (a chained exception: the `message`
/// attribute stays short, the text is long), then two fail.
const HUGE_REPORT: &str = r#"def test_a_passes():
    pass

def test_b_fails_with_a_huge_traceback():
    try:
        raise ValueError("\n".join("A" * 100 for _ in range(200_000)))
    except ValueError as e:
        raise AssertionError("short") from e

def test_c_fails():
    assert False

def test_d_fails():
    assert False
"#;

/// Gap 3 of issue 30, breach 4 of issue 46: a JUnit report over the
/// capture limit was cut and the partial XML scored (1 of 2), then refused
/// as an unscored error (which an agent could bring about to leave a
/// failure out of the pass rate). The verifier now bounds the failure text
/// the report carries: it is scored whole, 1 of 4, a failure, on the
/// fresh-interpreter path and on the pre-warmed one.
#[test]
fn a_junit_report_over_the_capture_limit_is_scored_whole_as_a_failure() {
    both(
        "bundles_and_reports::a_junit_report_over_the_capture_limit_is_scored_whole_as_a_failure",
        |b| {
            let mut t = task("atk-junit-cap", "user", "true\n");
            t.tests.insert_text("test_final_state.py", HUGE_REPORT);
            t.meta.verifier.timeout_sec = 120.0;
            let mut s = session(b, &t);
            for mode in [VerifierMode::Cold, VerifierMode::Warm] {
                let r = verify_with(&mut s, &t, TestSet::Final, mode)
                    .unwrap_or_else(|e| panic!("{mode:?}: not scored: {e}"));
                let verdicts: Vec<(&str, bool)> = r
                    .tests
                    .iter()
                    .map(|c| (c.name.as_str(), c.passed))
                    .collect();
                assert!(!r.passed, "{mode:?}: {verdicts:?}");
                assert_eq!(verdicts.len(), 4, "{mode:?}: {verdicts:?}");
                assert_eq!(r.fraction_passed(), 0.25, "{mode:?}: {verdicts:?}");
                assert!(
                    !verdicts[1].1
                        && verdicts[1]
                            .0
                            .ends_with("test_b_fails_with_a_huge_traceback"),
                    "{mode:?}: {verdicts:?}"
                );
            }
            s.close();
        },
    );
}

/// The status of `GET path` on `addr`, with `token` as bearer token if given.
fn status_of(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to GET {path}: {answer:?}"))
}

/// A server in this process on `bind` with `auth`.
fn server(ws: &Path, auth: Auth, bind: &str) -> Server {
    let backend = super::backend(Limits::default()).unwrap();
    Server {
        ws: Workspace::open(ws).unwrap(),
        provider: BackendProvider::new(Arc::new(backend)),
        auth,
        settings: Settings {
            reward: RewardMode::Binary,
            idle_timeout: Duration::from_secs(600),
            command_timeout: T,
            default_run: "serve-attacks".into(),
            read_timeout: T,
            protocol: endless::agent::protocol::Protocol::endless(),
            atif: false,
            sandbox: endless::serve::SandboxLimits::default(),
        },
        bind: bind.parse().unwrap(),
        max_sessions: 1,
        per_token: 1,
        queue: Default::default(),
        journal: None,
        lost: Vec::new(),
    }
}

/// How a server with `auth` on `bind` ends when it is stopped at once.
fn serve_result(auth: Auth, bind: &str) -> Result<(), endless::serve::ServeError> {
    let ws = tempfile::tempdir().unwrap();
    let server = server(ws.path(), auth, bind);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(server.run_until(|_| {}, async {}))
}

/// Run a server with `auth` on `bind` (port 0) in this process, `probe` it
/// at its address, then stop it.
fn with_server(auth: Auth, bind: &str, probe: impl FnOnce(std::net::SocketAddr)) {
    let ws = tempfile::tempdir().unwrap();
    let server = server(ws.path(), auth, bind);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = rt.spawn(server.run_until(
        move |addr| bound_tx.send(addr).unwrap(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let addr = bound_rx.recv_timeout(T).unwrap();
    probe(addr);
    let _ = stop_tx.send(());
    rt.block_on(serving).unwrap().unwrap();
}

/// A token file holding `token`, mode 0600.
fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("serve.token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Gap 4: `/v1/health` and `/metrics` answered without a token while
/// docs/serve.md says every request needs one. By default they need it; opened
/// (`[serve] open_metrics`), they answer without one on loopback, the rest
/// of the API still needs it, and no server opens them off loopback.
#[test]
fn serve_health_and_metrics_need_the_token_unless_opened_on_loopback() {
    both(
        "bundles_and_reports::serve_health_and_metrics_need_the_token_unless_opened_on_loopback",
        |_| {
            let dir = tempfile::tempdir().unwrap();
            let token = "attack-suite-token";
            let (auth, _) = Auth::from_file(&token_file(dir.path(), token)).unwrap();
            with_server(auth.clone(), "127.0.0.1:0", |addr| {
                for path in ["/v1/health", "/metrics", "/v1/tasks"] {
                    assert_eq!(
                        status_of(addr, path, None),
                        401,
                        "GET {path} without a token"
                    );
                    assert_eq!(
                        status_of(addr, path, Some("wrong")),
                        401,
                        "GET {path} with a wrong token"
                    );
                    assert_eq!(status_of(addr, path, Some(token)), 200, "GET {path}");
                }
            });
            let open = auth.with_open_metrics(true);
            with_server(open.clone(), "127.0.0.1:0", |addr| {
                assert_eq!(status_of(addr, "/v1/health", None), 200);
                assert_eq!(status_of(addr, "/metrics", None), 200);
                assert_eq!(status_of(addr, "/v1/tasks", None), 401);
            });
            let refused = serve_result(open, "0.0.0.0:0");
            assert!(
                matches!(
                    refused,
                    Err(endless::serve::ServeError::OpenMetricsOffLoopback(_))
                ),
                "open metrics started off loopback: {refused:?}"
            );
        },
    );
}
