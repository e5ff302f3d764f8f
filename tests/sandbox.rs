//! Integration tests of the local sandbox backend: exec protocol, isolation,
//! limits, cleanup. They skip (with the reason) where the local backend
//! cannot run, e.g. without bubblewrap or root.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use endless::config::{BaseFallback, ImagesConfig, PullPolicy};
use endless::images::{register_rootfs, ImageRef, ImageStore};
use endless::sandbox::local::{image_store_dir, LocalBackend};
use endless::sandbox::{Backend, Image, SandboxError, Session, SessionOptions, MAX_OUTPUT_CHARS};
use endless::task::{FileTree, Task, TaskMeta};
use endless::verify::{verify, TestSet};

mod support;

const T: Duration = Duration::from_secs(10);

/// The kept test cache (see [`support::caches`]).
fn cache() -> &'static Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| support::caches::dir("sandbox"))
}

fn backend() -> Option<LocalBackend> {
    support::caches::backend("sandbox")
}

fn task(id: &str, setup: &str) -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "do it".into(),
        truth: "secret truth".into(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = id.into();
    t.environment.insert_text("setup.sh", setup);
    t
}

fn basic_image(b: &LocalBackend) -> Image {
    b.prepare(&task(
        "basic",
        "mkdir -p /home/user/data\necho hello > /home/user/data/greeting.txt\necho sys > /etc/endless-test\n",
    ))
    .unwrap()
}

fn start(b: &LocalBackend) -> Session {
    let image = basic_image(b);
    b.start(&image, &SessionOptions::default()).unwrap()
}

#[test]
fn exec_basics_and_state_persist() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s.exec("echo hi; cat ~/data/greeting.txt", T).unwrap();
    assert_eq!(r.output.trim_end(), "hi\nhello");
    assert_eq!(r.exit_code, Some(0));
    assert!(!r.timed_out && !r.truncated);
    assert_eq!(s.exec("false", T).unwrap().exit_code, Some(1));
    assert_eq!(
        s.exec("exit_code_of() { return $1; }; exit_code_of 7", T)
            .unwrap()
            .exit_code,
        Some(7)
    );
    s.exec("cd /tmp && export FOO=bar", T).unwrap();
    assert_eq!(
        s.exec("pwd; echo $FOO", T).unwrap().output.trim_end(),
        "/tmp\nbar"
    );
    let who = s
        .exec("id -un; id -u; echo $HOME; cat /etc/endless-test", T)
        .unwrap();
    assert_eq!(who.output.trim_end(), "user\n1000\n/home/user\nsys");
    s.close();
}

#[test]
fn exec_heredoc_multiline_stdin_binary_and_fake_markers() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s
        .exec(
            "cat > /tmp/h.txt <<'EOF'\nline 1\n$HOME stays\nEOF\ncat /tmp/h.txt",
            T,
        )
        .unwrap();
    assert_eq!(r.output.trim_end(), "line 1\n$HOME stays");
    let r = s.exec("for i in 1 2 3; do\n  echo n$i\ndone", T).unwrap();
    assert_eq!(r.output.trim_end(), "n1\nn2\nn3");
    // Reads stdin: must not hang.
    let t0 = Instant::now();
    let r = s.exec("cat; read x; echo got:$x", T).unwrap();
    assert_eq!(r.output.trim_end(), "got:");
    assert!(t0.elapsed() < Duration::from_secs(3));
    // Marker-like text in the output.
    let r = s
        .exec(
            "echo '__ENDLESS_deadbeef_1_0__'; printf '\\n__ENDLESS_x_2_5__\\n'; echo after",
            T,
        )
        .unwrap();
    assert!(r.output.contains("__ENDLESS_deadbeef_1_0__"));
    assert!(r.output.trim_end().ends_with("after"));
    assert_eq!(r.exit_code, Some(0));
    // Binary output and unbalanced quotes.
    let r = s
        .exec("head -c 3000 /dev/urandom; echo; echo done", T)
        .unwrap();
    assert!(r.output.trim_end().ends_with("done"));
    // The agent turning echo back on must not leak typed commands into output.
    s.exec("stty echo </dev/tty", T).unwrap();
    assert_eq!(s.exec("echo quiet", T).unwrap().output.trim_end(), "quiet");
    let r = s.exec("echo 'unterminated", T).unwrap();
    assert_ne!(r.exit_code, Some(0));
    assert_eq!(
        s.exec("echo still-fine", T).unwrap().output.trim_end(),
        "still-fine"
    );
    s.close();
}

#[test]
fn output_is_capped() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s.exec("yes abcdefghij | head -c 300000", T).unwrap();
    assert!(r.truncated);
    assert!(r.output.contains("[output truncated"));
    assert!(r.output.chars().count() < MAX_OUTPUT_CHARS + 200);
    assert_eq!(r.exit_code, Some(0));
    s.close();
}

#[test]
fn timeout_interrupts_then_kills_and_session_survives() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s
        .exec("echo before; sleep 100", Duration::from_millis(500))
        .unwrap();
    assert!(r.timed_out);
    assert_eq!(r.exit_code, None);
    assert!(r.output.starts_with("before"));
    assert!(!r.output.contains("__ENDLESS_"), "{}", r.output);
    // Marker-like output of a command that times out is kept.
    let r = s
        .exec(
            "echo __ENDLESS_lookalike__; sleep 100",
            Duration::from_millis(300),
        )
        .unwrap();
    assert!(r.timed_out);
    // (Under heavy load the interrupt may not land within its grace period
    // and the command is killed: bash then adds "Killed".)
    assert_eq!(
        r.output.lines().next(),
        Some("__ENDLESS_lookalike__"),
        "{}",
        r.output
    );
    assert_eq!(s.exec("echo alive", T).unwrap().output.trim_end(), "alive");
    // A program that ignores SIGINT is killed.
    let r = s
        .exec(
            "bash -c \"trap '' INT; sleep 100\"",
            Duration::from_millis(300),
        )
        .unwrap();
    assert!(r.timed_out);
    assert_eq!(
        s.exec("echo alive2", T).unwrap().output.trim_end(),
        "alive2"
    );
    s.close();
}

#[test]
fn wall_clock_ends_the_session() {
    let Some(b) = backend() else { return };
    let image = basic_image(&b);
    let opts = SessionOptions {
        wall_clock: Duration::from_secs(2),
        ..SessionOptions::default()
    };
    let mut s = b.start(&image, &opts).unwrap();
    let err = s.exec("sleep 30", Duration::from_secs(20)).unwrap_err();
    assert!(
        matches!(
            err,
            SandboxError::WallClock(_) | SandboxError::SessionEnded { .. }
        ),
        "{err}"
    );
    assert!(s.exec("true", T).is_err());
}

fn visible(s: &mut Session, path: &str) -> bool {
    let r = s
        .exec(
            &format!("test -e '{path}' && echo VISIBLE || echo hidden"),
            T,
        )
        .unwrap();
    r.output.trim() == "VISIBLE"
}

#[test]
fn isolation_no_host_paths_outside_system_dirs() {
    let Some(b) = backend() else { return };
    let probe = tempfile::Builder::new()
        .prefix("endless-probe-")
        .tempfile_in("/tmp")
        .unwrap();
    let mut s = start(&b);
    let repo = env!("CARGO_MANIFEST_DIR");
    for p in [
        probe.path().to_str().unwrap(),
        repo,
        "/work",
        "/root/.cargo",
        cache().to_str().unwrap(),
        "/opt/skills",
        "/sys/fs/cgroup",
    ] {
        if Path::new(p).exists() {
            assert!(
                !visible(&mut s, p),
                "host path {p} is visible in the sandbox"
            );
        }
    }
    assert_eq!(s.exec("ls /home", T).unwrap().output.trim_end(), "user");
    assert!(visible(&mut s, "/usr/bin/python3"));
    // Privileged info is not reachable either.
    assert_ne!(s.exec("cat /etc/shadow", T).unwrap().exit_code, Some(0));
    s.close();
}

#[test]
fn isolation_writes_never_reach_the_host_and_episodes_are_fresh() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    assert_ne!(
        s.exec("touch /usr/bin/endless-probe", T).unwrap().exit_code,
        Some(0)
    );
    s.exec(
        "echo changed > ~/data/greeting.txt; echo new > ~/new.txt; rm -f /tmp/*",
        T,
    )
    .unwrap();
    s.close();
    assert!(
        !Path::new("/etc/endless-test").exists(),
        "setup wrote into the host's /etc"
    );
    let mut s = start(&b);
    assert_eq!(
        s.exec("cat ~/data/greeting.txt", T)
            .unwrap()
            .output
            .trim_end(),
        "hello"
    );
    assert!(!visible(&mut s, "/home/user/new.txt"));
    s.close();
    // Even root (Harbor-style tasks) writes only into the episode layer.
    let mut t = task("rooted", "mkdir -p /app && echo app > /app/a\n");
    t.meta.agent.user = "root".into();
    t.meta.environment.workdir = "/app".into();
    let image = b.prepare(&t).unwrap();
    let mut s = b.start(&image, &SessionOptions::default()).unwrap();
    assert_eq!(
        s.exec("id -u; pwd; cat a", T).unwrap().output.trim_end(),
        "0\n/app\napp"
    );
    let r = s.exec("echo x > /usr/bin/endless-root-probe && echo y > /etc/endless-root-probe && echo wrote", T).unwrap();
    if !b.is_rootless() {
        // Rootless, host-owned files are not root's inside either.
        assert_eq!(r.output.trim_end(), "wrote");
    }
    s.close();
    assert!(!Path::new("/usr/bin/endless-root-probe").exists());
    assert!(!Path::new("/etc/endless-root-probe").exists());
}

#[test]
fn isolation_no_network_by_default() {
    let Some(b) = backend() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut s = start(&b);
    let r = s
        .exec(
            &format!("echo leak > /dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
            T,
        )
        .unwrap();
    assert!(!r.output.contains("CONNECTED"), "{}", r.output);
    let ifaces = s
        .exec(
            "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1",
            T,
        )
        .unwrap();
    assert!(!ifaces.output.contains("eth"), "{}", ifaces.output);
    s.close();
    assert!(
        listener.accept().is_err(),
        "the host listener received a connection"
    );
}

#[test]
fn isolation_own_pid_namespace() {
    let Some(b) = backend() else { return };
    let mut host_child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let hp = host_child.id();
    let mut s = start(&b);
    let r = s
        .exec(
            &format!("kill -9 {hp}; kill -9 1; ls /proc | grep -c '^[0-9]'"),
            T,
        )
        .unwrap();
    let count: u32 = r
        .output
        .lines()
        .last()
        .unwrap_or("999")
        .trim()
        .parse()
        .unwrap_or(999);
    assert!(count < 10, "sandbox sees {count} processes");
    assert!(!visible(&mut s, &format!("/proc/{}", std::process::id())));
    assert!(
        host_child.try_wait().unwrap().is_none(),
        "a host process was killed from inside"
    );
    assert_eq!(s.exec("echo ok", T).unwrap().output.trim_end(), "ok");
    s.close();
    host_child.kill().unwrap();
    let _ = host_child.wait();
}

fn host_processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

fn leaves_no_process(b: &LocalBackend, tag: &str) {
    let mut s = start(b);
    s.exec(
        &format!("sleep {tag}1 & nohup sleep {tag}2 >/dev/null 2>&1 & setsid sleep {tag}3 & disown -a; echo started"),
        T,
    )
    .unwrap();
    // The three background processes take a moment to appear on a busy machine. Only
    // processes that already exec'd `sleep` count: `setsid` forks when it leads its
    // process group, and for a moment both it and its child carry the same command line.
    let sleepers = || {
        host_processes_with(&format!("sleep {tag}"))
            .iter()
            .filter(|p| {
                p.split_once(": ")
                    .is_some_and(|(_, cmd)| cmd.starts_with("sleep "))
            })
            .count()
    };
    let t0 = Instant::now();
    while sleepers() < 3 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sleepers(), 3);
    s.close();
    let left = host_processes_with(&format!("sleep {tag}"));
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn closing_leaves_no_process_behind() {
    let Some(b) = backend() else { return };
    leaves_no_process(&b, "4242.");
    leaves_no_process(&b.without_cgroups(), "4343.");
}

#[test]
fn limits_fork_bomb_is_contained() {
    let Some(b) = backend() else { return };
    let b = b.with_limits(endless::sandbox::local::Limits {
        pids: 64,
        ..Default::default()
    });
    let mut s = start(&b);
    let r = s.exec(
        // Subshells keep the script's command line, so leftovers are findable on the host.
        "printf 'b() { b | b & }; b; sleep 5\\n' > /tmp/endless_fb_7731.sh; bash /tmp/endless_fb_7731.sh",
        Duration::from_secs(2),
    );
    match r {
        Ok(r) => {
            // Recovered: the shell answers again.
            let _ = r;
            let again = s.exec("echo recovered", T);
            eprintln!("fork bomb: timed out = {}, then {again:?}", r.timed_out);
            if let Ok(a) = again {
                assert_eq!(a.output.trim_end(), "recovered");
            }
        }
        Err(e) => assert!(
            matches!(
                e,
                SandboxError::Unresponsive | SandboxError::SessionEnded { .. }
            ),
            "{e}"
        ),
    }
    s.close();
    let left = host_processes_with("endless_fb_7731.sh");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn limits_memory() {
    let Some(b) = backend() else { return };
    let b = b.with_limits(endless::sandbox::local::Limits {
        memory_bytes: 256 << 20,
        disk_bytes: 64 << 20,
        ..Default::default()
    });
    let mut s = start(&b);
    let r = s
        .exec("/usr/bin/python3 -c 'x = bytearray(1 << 30); x[::4096] = b\"a\" * len(x[::4096]); print(\"ALLOCATED\")'", T)
        .unwrap();
    assert!(!r.output.contains("ALLOCATED"), "{}", r.output);
    assert_ne!(r.exit_code, Some(0));
    assert_eq!(s.exec("echo alive", T).unwrap().output.trim_end(), "alive");
    s.close();
}

#[test]
fn a_shell_killed_for_memory_reports_the_limit() {
    let Some(b) = backend() else { return };
    if !b.uses_cgroups() {
        eprintln!("SKIP: no writable cgroups: the OOM killer is not per session here");
        return;
    }
    let b = b.with_limits(endless::sandbox::local::Limits {
        memory_bytes: 128 << 20,
        disk_bytes: 16 << 20,
        ..Default::default()
    });
    let mut s = start(&b);
    // The shell itself grows until the OOM killer takes it.
    let err = s
        .exec(
            "x=$(head -c 600000000 /dev/zero | tr '\\0' x); echo survived",
            T,
        )
        .unwrap_err();
    assert!(
        matches!(err, SandboxError::LimitReached { .. }),
        "expected the memory limit, got: {err}"
    );
}

#[test]
fn live_stream_recording_input_and_resize() {
    let Some(b) = backend() else { return };
    let image = basic_image(&b);
    let dir = tempfile::tempdir().unwrap();
    let cast = dir.path().join("ep.cast");
    let opts = SessionOptions {
        record: Some(cast.clone()),
        ..SessionOptions::default()
    };
    let mut s = b.start(&image, &opts).unwrap();
    let mut rx1 = s.subscribe();
    let mut rx2 = s.subscribe();
    s.exec("echo live-xyz", T).unwrap();
    for rx in [&mut rx1, &mut rx2] {
        let mut seen = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            seen.extend_from_slice(&chunk);
        }
        assert!(String::from_utf8_lossy(&seen).contains("live-xyz"));
    }
    s.resize(100, 40).unwrap();
    assert_eq!(
        s.exec("stty size </dev/tty", T).unwrap().output.trim_end(),
        "40 100"
    );
    s.write_input(b"echo typed-by-human > /tmp/typed\n")
        .unwrap();
    assert_eq!(
        s.exec("cat /tmp/typed", T).unwrap().output.trim_end(),
        "typed-by-human"
    );
    s.close();
    let text = std::fs::read_to_string(&cast).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["version"], 2);
    assert!(text.contains("live-xyz"));
    assert!(lines.all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
}

#[test]
fn shell_death_is_reported_and_nothing_hangs() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let t0 = Instant::now();
    let err = s.exec("echo bye; kill -9 $$", T).unwrap_err();
    assert!(matches!(err, SandboxError::SessionEnded { .. }), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(s.exec("true", T).is_err());
    let mut s = start(&b);
    assert!(matches!(
        s.exec("exit 3", T),
        Err(SandboxError::SessionEnded { .. })
    ));
}

/// The parent of `pid`, from `/proc/PID/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn a_sandbox_killed_from_outside_is_not_the_agents_doing() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let tag = format!("{}", 400_000 + std::process::id() % 100_000);
    s.exec(&format!("sleep {tag} & echo started"), T).unwrap();
    // Our child that holds the sandbox: the sleeper's ancestor whose parent we are.
    let deadline = Instant::now() + Duration::from_secs(10);
    let sleeper = loop {
        let found = host_processes_with(&format!("sleep {tag}"))
            .iter()
            .filter_map(|p| p.split_once(": "))
            .find(|(_, cmd)| cmd.starts_with("sleep "))
            .and_then(|(pid, _)| pid.parse::<i32>().ok());
        if let Some(pid) = found {
            break pid;
        }
        assert!(Instant::now() < deadline, "the sleeper never appeared");
        std::thread::sleep(Duration::from_millis(20));
    };
    let me = std::process::id() as i32;
    let mut outer = sleeper;
    while let Some(parent) = parent_of(outer).filter(|p| *p != me) {
        assert!(parent > 1, "the sandbox is not our child");
        outer = parent;
    }
    // SAFETY: SIGKILL to our own child, the sandbox's process.
    unsafe { libc::kill(outer, libc::SIGKILL) };
    // The sandbox's processes die with it, soon.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{sleeper}")).exists() {
        assert!(
            Instant::now() < deadline,
            "the sandbox outlived its process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Infrastructure, not the shell's ending (which is the agent's doing).
    let err = s.exec("echo still here", T).unwrap_err();
    assert!(
        !matches!(err, SandboxError::SessionEnded { .. })
            && err.to_string().contains("killed from outside by signal 9"),
        "{err}"
    );
}

#[test]
fn bad_setup_steps_are_named_with_their_output() {
    let Some(b) = backend() else { return };
    let mut t = task("bad-docker", "");
    t.environment = FileTree::default();
    t.environment.insert_text(
        "Dockerfile",
        "FROM ubuntu:24.04\nRUN echo fine\nRUN echo boom-output && false\nRUN echo never\n",
    );
    match b.prepare(&t).unwrap_err() {
        SandboxError::SetupStep {
            index,
            step,
            output,
            ..
        } => {
            assert_eq!(index, 2);
            assert!(step.contains("RUN echo boom-output"), "{step}");
            assert!(
                output.contains("boom-output") && !output.contains("never"),
                "{output}"
            );
        }
        e => panic!("unexpected {e}"),
    }
    let err = b
        .prepare(&task("bad-setup", "echo partial\nexit 3\n"))
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("environment/setup.sh") && msg.contains("partial") && msg.contains("3"),
        "{msg}"
    );
    let mut t = task("bad-instr", "");
    t.environment = FileTree::default();
    t.environment
        .insert_text("Dockerfile", "FROM x\nONBUILD RUN true\n");
    let msg = b.prepare(&t).unwrap_err().to_string();
    assert!(msg.contains("line 2") && msg.contains("ONBUILD"), "{msg}");
    let mut t = task("bad-def", "");
    t.environment = FileTree::default();
    t.environment
        .insert_text("container.def", "Bootstrap: docker\nFrom: ubuntu\n%bogus\n");
    let msg = b.prepare(&t).unwrap_err().to_string();
    assert!(msg.contains("line 3") && msg.contains("%bogus"), "{msg}");
}

#[test]
fn network_requests_can_be_denied() {
    let Some(b) = backend() else { return };
    let mut t = task("wants-net", "true\n");
    t.meta.environment.network = true;
    let err = b.with_network_allowed(false).prepare(&t).unwrap_err();
    assert!(
        matches!(err, SandboxError::NetworkNotAllowed { .. }),
        "{err}"
    );
}

#[test]
fn dockerfile_steps_env_workdir_copy() {
    let Some(b) = backend() else { return };
    let mut t = task("docker", "");
    t.environment = FileTree::default();
    t.environment.insert_text(
        "Dockerfile",
        "FROM ubuntu:24.04\nENV GREETING=hey\nWORKDIR /srv/app\nCOPY files/ /srv/app/\nRUN echo \"$GREETING\" > made.txt\n",
    );
    t.environment.insert_text("files/conf.ini", "k=v\n");
    let image = b.prepare(&t).unwrap();
    let mut s = b.start(&image, &SessionOptions::default()).unwrap();
    let r = s
        .exec("echo $GREETING; cat /srv/app/conf.ini /srv/app/made.txt", T)
        .unwrap();
    assert_eq!(r.output.trim_end(), "hey\nk=v\nhey");
    s.close();
}

#[test]
fn doctor_and_backend_lookup() {
    let report = endless::sandbox::doctor(endless::verify::PYTHON);
    let text = report.to_string();
    eprintln!("{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["backends"].as_array().unwrap().len(), 3);
    let local = &report.backends[0];
    if backend().is_some() {
        assert!(local.works, "{text}");
    } else {
        assert!(
            local.checks.iter().any(|c| !c.ok && c.fix.is_some()),
            "{text}"
        );
    }
    let apptainer = &report.backends[1];
    if !apptainer.works {
        assert!(text.contains("apptainer.org"), "{text}");
    }
    assert!(matches!(
        endless::sandbox::backend_by_name("nope", cache()),
        Err(SandboxError::UnknownBackend(_))
    ));
    for name in ["apptainer", "oci"] {
        match endless::sandbox::backend_by_name(name, cache()) {
            Ok(b) => assert_eq!(b.name(), name),
            Err(e) => eprintln!("SKIP {name}: {e}"),
        }
    }
}

#[test]
fn container_backends_run_when_present() {
    match endless::sandbox::backend_by_name("apptainer", cache()) {
        Ok(b) => {
            let t = task(
                "apptainer-smoke",
                "mkdir -p /home/user && echo hi > /home/user/f\n",
            );
            let image = b.prepare(&t).unwrap();
            let mut s = b.start(&image, &SessionOptions::default()).unwrap();
            assert_eq!(s.exec("cat ~/f", T).unwrap().output.trim_end(), "hi");
            s.close();
        }
        Err(e) => eprintln!("SKIP apptainer: {e}"),
    }
    oci_builds_offline_on_a_local_base();
}

/// A Debian base with python3 and pytest (the verifier's, in the container),
/// built once with mmdebstrap and cached under `target/tmp` between runs.
fn pytest_base_tar() -> std::path::PathBuf {
    support::registry::cached_debian_base("bookworm-minbase-pytest.tar", &["python3-pytest"])
}

/// podman (or docker) builds a task written `FROM ubuntu:24.04` on a Debian
/// base from endless's image store (an `[images]` alias, as the local
/// backend takes it), without a registry, and runs a session in it.
fn oci_builds_offline_on_a_local_base() {
    let t0 = Instant::now();
    let store = ImageStore::new(&image_store_dir(cache()));
    let base = ImageRef::parse("local/debian:bookworm-pytest").unwrap();
    if store.get(&base).is_none() {
        register_rootfs(&store, "local/debian:bookworm-pytest", &pytest_base_tar()).unwrap();
    }
    let mut images = ImagesConfig {
        pull: PullPolicy::Never,
        fallback: BaseFallback::Error,
        ..Default::default()
    };
    images
        .aliases
        .insert("ubuntu:24.04".into(), "local/debian:bookworm-pytest".into());
    let b = match endless::sandbox::configured_backend("oci", cache(), &images, Default::default())
    {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIP oci: {e}");
            return;
        }
    };
    let mut t = task("oci-smoke", "");
    t.environment = FileTree::default();
    t.tests.insert_text(
        "test_final_state.py",
        "from pathlib import Path\n\ndef test_out():\n    assert Path('/home/user/out.txt').read_text() == 'HELLO\\n'\n",
    );
    t.meta.verifier.final_tests = vec!["test_final_state.py".into()];
    t.environment.insert_text(
        "Dockerfile",
        "FROM ubuntu:24.04\nRUN useradd -m -u 1000 -s /bin/bash user \\\n && echo hi > /home/user/f\nUSER user\n",
    );
    let image = b.prepare(&t).unwrap();
    let note = image.base_note.clone().unwrap_or_default();
    assert!(
        note.contains("ubuntu:24.04 is aliased to"),
        "the base note says what served the base: {note:?}"
    );
    let mut s = b.start(&image, &SessionOptions::default()).unwrap();
    let out = s
        .exec("cat ~/f; id -un; grep -c . /etc/debian_version", T)
        .unwrap();
    assert_eq!(out.output.trim_end(), "hi\nuser\n1");
    // An episode's end: the verifier, failing, then passing once the work is done.
    let report = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(!report.passed, "{}", report.output);
    s.exec("echo HELLO > ~/out.txt", T).unwrap();
    let report = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(report.passed, "{}", report.output);
    s.close();
    eprintln!("oci: base, build and session in {:.1?}", t0.elapsed());
}

#[test]
fn leftovers_of_dead_processes_are_removed() {
    if backend().is_none() {
        return;
    }
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    let session = cache().join(format!("local/sessions/{pid}-deadbeef"));
    let build = cache().join(format!("local/images/.build-{pid}-abc-def"));
    let mine = cache().join(format!("local/sessions/{}-alive", std::process::id()));
    for d in [&session, &build, &mine] {
        std::fs::create_dir_all(d.join("x")).unwrap();
    }
    let _ = LocalBackend::new(cache()).unwrap();
    assert!(!session.exists() && !build.exists());
    assert!(mine.exists(), "a live process's directory was removed");
    std::fs::remove_dir_all(&mine).unwrap();
}

#[test]
fn runaway_setup_is_limited_and_cleaned_up() {
    let Some(b) = backend() else { return };
    let b = b
        .with_limits(endless::sandbox::local::Limits {
            pids: 64,
            ..Default::default()
        })
        .with_build_timeout(Duration::from_secs(3));
    let mut t = task("runaway", "");
    t.environment = FileTree::default();
    t.environment
        .insert_text("endless_rs_5521.sh", "b() { b | b & }; b\nsleep 1000\n");
    t.environment
        .insert_text("setup.sh", "bash ./endless_rs_5521.sh\n");
    let t0 = Instant::now();
    let err = b.prepare(&t).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(err.to_string().contains("timed out"), "{err}");
    let left = host_processes_with("endless_rs_5521.sh");
    assert!(left.is_empty(), "{left:?}");
}
