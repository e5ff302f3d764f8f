//! Integration tests of verification: per-test results from JUnit XML,
//! task validation, and attempts by the agent to forge the verdict.

#![allow(clippy::unwrap_used)] // tests and benches fail loudly

use std::path::Path;
use std::time::Duration;

use endless::sandbox::local::LocalBackend;
use endless::sandbox::VerifierPath;
use endless::sandbox::{Backend, Session, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};
use endless::verify::{
    validate_task, verify, verify_initial_and_final, verify_with, TestSet, VerifierMode,
};

mod support;
use support::verifier::{root, verify_both};

const T: Duration = Duration::from_secs(20);

fn backend() -> Option<LocalBackend> {
    if !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("SKIP: {} is missing", endless::verify::PYTHON);
        return None;
    }
    support::caches::backend("verify")
}

const INITIAL: &str = r#"
import os

def test_input_exists():
    assert open("/home/user/data/a.txt").read() == "hello\n"

def test_output_absent():
    assert not os.path.exists("/home/user/out.txt")
"#;

const FINAL: &str = r#"
def test_output_upper():
    assert open("/home/user/out.txt").read() == "HELLO\n", "out.txt must hold HELLO"

def test_input_kept():
    assert open("/home/user/data/a.txt").read() == "hello\n"
"#;

fn task(id: &str) -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "Upper-case ~/data/a.txt into ~/out.txt".into(),
        truth: "secret truth".into(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = id.into();
    t.environment.insert_text(
        "setup.sh",
        "mkdir -p /home/user/data\necho hello > /home/user/data/a.txt\n",
    );
    t.tests.insert_text("test_initial_state.py", INITIAL);
    t.tests.insert_text("test_final_state.py", FINAL);
    t.solution.insert(
        "solve.sh",
        b"tr a-z A-Z < ~/data/a.txt > ~/out.txt\n".to_vec(),
        true,
    );
    t
}

fn session(b: &LocalBackend, t: &Task) -> Session {
    let image = b.prepare(t).unwrap();
    b.start(&image, &SessionOptions::default()).unwrap()
}

#[test]
fn per_test_results_before_and_after_the_work() {
    let Some(b) = backend() else { return };
    let t = task("upper");
    let mut s = session(&b, &t);
    let init = verify(&mut s, &t, TestSet::Initial).unwrap();
    eprintln!("pytest run (initial tests) took {:?}", init.duration);
    assert!(init.passed, "{}", init.output);
    assert_eq!(init.tests.len(), 2);
    let fin = verify(&mut s, &t, TestSet::Final).unwrap();
    eprintln!("pytest run (final tests) took {:?}", fin.duration);
    assert!(!fin.passed);
    let failed: Vec<_> = fin.tests.iter().filter(|c| !c.passed).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].name, "test_final_state::test_output_upper");
    assert!(
        failed[0].message.contains("FileNotFoundError"),
        "{}",
        failed[0].message
    );
    assert!(fin.junit_xml.contains("<testsuite"));
    // The tests and truth are not reachable by the agent.
    let r = s
        .exec(
            "ls /run/endless-verifier; grep -rl --exclude-dir=endless-runtime 'secret truth' ~ /tmp /run 2>/dev/null; echo end",
            T,
        )
        .unwrap();
    // Root mode: not even listable; rootless: an empty read-only directory.
    assert!(!r.output.contains("test_final_state"), "{}", r.output);
    assert!(!r.output.contains("test_initial_state"), "{}", r.output);
    assert_eq!(
        r.output.trim_end().lines().last(),
        Some("end"),
        "{}",
        r.output
    );
    s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
    let fin = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(fin.passed, "{}", fin.output);
    assert!(fin.tests.iter().all(|c| c.passed && c.message.is_empty()));
    s.close();
}

#[test]
fn validation_of_good_and_bad_tasks() {
    let Some(b) = backend() else { return };
    let v = validate_task(&b, &task("valid")).unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    assert!(v.initial_passes && v.final_fails_initially);
    assert_eq!(v.oracle_passes, Some(true));
    let mut bad = task("bad-oracle");
    bad.solution
        .insert("solve.sh", b"echo wrong > ~/out.txt\n".to_vec(), true);
    let v = validate_task(&b, &bad).unwrap();
    assert_eq!(v.oracle_passes, Some(false));
    assert!(
        v.problems.iter().any(|p| p.contains("oracle")),
        "{:?}",
        v.problems
    );
    let mut trivial = task("trivial");
    trivial.tests.insert_text(
        "test_final_state.py",
        "def test_nothing():\n    assert True\n",
    );
    let v = validate_task(&b, &trivial).unwrap();
    assert!(!v.final_fails_initially);
    assert!(
        v.problems.iter().any(|p| p.contains("already pass")),
        "{:?}",
        v.problems
    );
    let mut broken = task("broken-env");
    broken
        .environment
        .insert_text("setup.sh", "echo oops; exit 4\n");
    let v = validate_task(&b, &broken).unwrap();
    assert!(!v.initial_passes);
    assert!(v.problems[0].contains("oops"), "{:?}", v.problems);
}

/// Every forgery attempt leaves the verdict unchanged (failing) on both
/// verifier paths, and the honest work still passes afterwards.
fn forgery_fails(setup_by_agent: &str) {
    let Some(b) = backend() else { return };
    let t = task("forge");
    let mut s = session(&b, &t);
    let r = s.exec(setup_by_agent, T).unwrap();
    eprintln!("agent's forgery attempt printed: {}", r.output);
    let fin = verify_both(&mut s, &t, TestSet::Final);
    assert!(!fin.passed, "forged: {}", fin.output);
    assert!(fin
        .tests
        .iter()
        .any(|c| c.name.ends_with("test_output_upper") && !c.passed));
    s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
    assert!(verify_both(&mut s, &t, TestSet::Final).passed);
    s.close();
}

#[test]
fn pre_warmed_and_cold_verdicts_agree_and_warm_is_the_default() {
    let Some(b) = backend() else { return };
    let t = task("warm-cold");
    let mut s = session(&b, &t);
    assert!(verify_both(&mut s, &t, TestSet::Initial).passed);
    let fin = verify_both(&mut s, &t, TestSet::Final);
    assert!(!fin.passed);
    let failed = fin.tests.iter().find(|c| !c.passed).unwrap();
    assert!(
        failed.message.contains("FileNotFoundError"),
        "{}",
        failed.message
    );
    let default = verify(&mut s, &t, TestSet::Final).unwrap();
    if root() {
        assert_eq!(default.verifier, VerifierPath::Warm);
    } else {
        assert!(
            matches!(default.verifier, VerifierPath::Cold(Some(_))),
            "{:?}",
            default.verifier
        );
    }
    // The tests run as the task's user, with its home and working directory, on both paths.
    let mut probe = task("warm-cold-env");
    probe.tests.insert_text(
        "test_final_state.py",
        "import os, pathlib\ndef test_env():\n    assert str(pathlib.Path.home()) == '/home/user', os.environ\n    assert os.getuid() != 0\n    assert os.getcwd() == '/home/user'\n    assert 'PYTHONPATH' not in os.environ\n",
    );
    let mut s2 = session(&b, &probe);
    assert!(verify_both(&mut s2, &probe, TestSet::Final).passed);
    s2.close();
    s.close();
}

#[test]
fn a_service_the_agent_left_running_is_seen_by_the_tests() {
    let Some(b) = backend() else { return };
    let mut t = task("service");
    t.tests.insert_text(
        "test_final_state.py",
        "import socket\ndef test_service_answers():\n    with socket.create_connection(('127.0.0.1', 8765), timeout=5) as c:\n        c.sendall(b'ping\\n')\n        assert c.recv(64).startswith(b'pong')\n",
    );
    let mut s = session(&b, &t);
    assert!(!verify_both(&mut s, &t, TestSet::Final).passed);
    let r = s
        .exec(
            "cat > ~/srv.py <<'EOF'\nimport socketserver\nclass H(socketserver.StreamRequestHandler):\n    def handle(self):\n        self.rfile.readline(); self.wfile.write(b'pong\\n')\nsocketserver.TCPServer.allow_reuse_address = True\nsocketserver.TCPServer(('127.0.0.1', 8765), H).serve_forever()\nEOF\n(nohup python3 ~/srv.py >/dev/null 2>&1 &); for i in $(seq 50); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8765))\" 2>/dev/null && break; sleep 0.1; done; echo up",
            T,
        )
        .unwrap();
    assert!(r.output.contains("up"), "{}", r.output);
    assert!(verify_both(&mut s, &t, TestSet::Final).passed);
    // Still running after both verifications.
    assert!(verify(&mut s, &t, TestSet::Final).unwrap().passed);
    s.close();
}

#[test]
fn a_test_file_with_a_syntax_error_fails_and_is_named() {
    let Some(b) = backend() else { return };
    let mut t = task("syntax");
    t.tests
        .insert_text("test_final_state.py", "def test_broken(:\n    pass\n");
    let mut s = session(&b, &t);
    s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
    let r = verify_both(&mut s, &t, TestSet::Final);
    assert!(!r.passed);
    assert_eq!(r.tests.len(), 1, "{:?}", r.tests);
    assert!(
        r.tests[0].name.contains("test_final_state"),
        "{:?}",
        r.tests
    );
    assert!(r.tests[0].message.contains("SyntaxError"), "{:?}", r.tests);
    s.close();
}

/// In the sandbox, a pre-warmed run uses what the zygote prepared: the
/// task's test module compiled ahead and pytest's configuration built
/// before the fork (a test can see both from inside); a cold run has
/// neither.
#[test]
fn pre_warmed_runs_use_the_prepared_configuration_and_modules() {
    if !root() {
        return; // rootless: no pre-warmed verifier
    }
    let Some(b) = backend() else { return };
    let mut t = task("prepared");
    t.tests.insert_text(
        "test_final_state.py",
        "import sys\nfrom _pytest.assertion import rewrite\n\n\
         def test_prepared():\n    main = sys.modules['__main__']\n    \
         assert 'adopt_prebuilt' in rewrite._rewrite_test.__qualname__\n    \
         assert main.PREBUILT == []  # taken by this run's get_config\n    \
         assert any(path.endswith('/tests/test_final_state.py') for path, _ in main.COMPILED)\n",
    );
    let mut s = session(&b, &t);
    for _ in 0..2 {
        let warm = verify_with(&mut s, &t, TestSet::Final, VerifierMode::Warm).unwrap();
        assert_eq!(warm.verifier, VerifierPath::Warm);
        assert!(warm.passed, "{}", warm.output);
    }
    let cold = verify_with(&mut s, &t, TestSet::Final, VerifierMode::Cold).unwrap();
    assert!(!cold.passed, "{}", cold.output);
    s.close();
}

/// Test modules too large to compile ahead (past one request, or with many
/// characters JSON escapes six-fold) are compiled by pytest: the same
/// verdicts, still pre-warmed, and the next small task is compiled ahead.
#[test]
fn test_modules_too_large_to_compile_ahead_still_verify_warm() {
    let Some(b) = backend() else { return };
    for (name, filler) in [
        ("big", "x".repeat(200_000)),
        ("escaped", "\u{1}".repeat(60_000)),
    ] {
        let mut t = task(name);
        let source = format!(
            "{FINAL}\nDATA = \"{filler}\"\n\ndef test_data():\n    assert len(DATA) > 1000\n"
        );
        t.tests.insert_text("test_final_state.py", &source);
        let mut s = session(&b, &t);
        s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
        let r = verify_both(&mut s, &t, TestSet::Final);
        assert!(r.passed, "{name}: {}", r.output);
        assert_eq!(r.tests.len(), 3, "{name}: {:?}", r.tests);
        s.close();
    }
    let t = task("small-after-big");
    let mut s = session(&b, &t);
    s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
    assert!(verify_both(&mut s, &t, TestSet::Final).passed);
    s.close();
}

#[test]
fn a_hanging_test_is_killed_at_the_verifier_timeout_on_both_paths() {
    let Some(b) = backend() else { return };
    let mut t = task("hang");
    t.meta.verifier.timeout_sec = 2.0;
    t.tests.insert_text(
        "test_final_state.py",
        "import subprocess, time\ndef test_hangs():\n    subprocess.Popen(['sleep', '300'])\n    time.sleep(300)\n",
    );
    let mut s = session(&b, &t);
    for mode in [VerifierMode::Cold, VerifierMode::Warm] {
        let start = std::time::Instant::now();
        let r = verify_with(&mut s, &t, TestSet::Final, mode).unwrap();
        assert!(!r.passed);
        assert!(r.output.contains("timed out"), "{mode:?}: {}", r.output);
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{mode:?}: {:?}",
            start.elapsed()
        );
    }
    // Nothing of either verification is left in the sandbox.
    let r = s.exec("pgrep -c sleep || true", T).unwrap();
    assert_eq!(r.output.trim(), "0", "{}", r.output);
    s.close();
}

/// Open descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Live children of process `pid`.
fn children(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                st.rfind(')')
                    .and_then(|i| st[i + 2..].split_whitespace().nth(1).map(str::to_string))
                    == Some(pid.to_string())
            })
        })
        .count()
}

#[test]
fn five_hundred_verifications_leak_no_process_or_descriptor() {
    let Some(b) = backend() else { return };
    let t = task("many");
    let mut s = session(&b, &t);
    s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
    assert!(verify(&mut s, &t, TestSet::Final).unwrap().passed);
    let inside = |s: &mut Session| {
        s.exec("ls /proc | grep -c '^[0-9]'", T)
            .unwrap()
            .output
            .trim()
            .to_string()
    };
    let procs_before = inside(&mut s);
    let ours_before = fd_count(std::process::id());
    let zygote = b.verifier_pid();
    assert_eq!(zygote.is_some(), root());
    let zygote_fds = zygote.map(fd_count);
    let start = std::time::Instant::now();
    for i in 0..500 {
        let r = verify(&mut s, &t, TestSet::Final).unwrap();
        assert!(r.passed, "run {i}: {}", r.output);
    }
    eprintln!("500 verifications in {:?}", start.elapsed());
    assert_eq!(
        inside(&mut s),
        procs_before,
        "processes left in the sandbox"
    );
    if let Some(z) = zygote {
        assert_eq!(
            b.verifier_pid(),
            Some(z),
            "the pre-warmed verifier was restarted"
        );
        // The last run's child may still be exiting (the report is in before
        // its process is reaped): what is left is what stays.
        let settled = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while (children(z) != 0 || Some(fd_count(z)) != zygote_fds)
            && std::time::Instant::now() < settled
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(
            Some(fd_count(z)),
            zygote_fds,
            "the pre-warmed verifier leaked descriptors"
        );
        assert_eq!(
            children(z),
            0,
            "children of the pre-warmed verifier are left"
        );
    }
    // Other tests of this binary open descriptors at the same time: a leak
    // of one per verification would show as hundreds.
    let ours_after = fd_count(std::process::id());
    assert!(
        ours_after < ours_before + 50,
        "descriptors: {ours_before} before, {ours_after} after"
    );
    s.close();
}

const ALL_PASS_JUNIT: &str = r#"<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="2" failures="0" errors="0"><testcase classname="test_final_state" name="test_output_upper"/><testcase classname="test_final_state" name="test_input_kept"/></testsuite></testsuites>"#;

#[test]
fn forgery_conftest() {
    forgery_fails(
        "for d in ~ /tmp . /run /; do cat > $d/conftest.py <<'EOF' 2>/dev/null\n\
import pytest\n\
@pytest.hookimpl(hookwrapper=True)\n\
def pytest_runtest_makereport(item, call):\n\
    outcome = yield\n\
    rep = outcome.get_result()\n\
    rep.outcome = 'passed'\n\
EOF\n\
done; cp ~/conftest.py ~/data/; echo placed",
    );
}

#[test]
fn forgery_sitecustomize_and_pythonpath() {
    forgery_fails(
        "mkdir -p ~/evil ~/.local/lib/python3.11/site-packages ~/.local/lib/python3.12/site-packages\n\
printf 'import os\\nos._exit(0)\\n' > ~/evil/sitecustomize.py\n\
cp ~/evil/sitecustomize.py ~/sitecustomize.py\n\
for d in ~/.local/lib/python3.*/site-packages; do cp ~/evil/sitecustomize.py $d/usercustomize.py; done\n\
printf 'def test_x():\\n    pass\\n' > ~/evil/pytest.py\n\
echo 'export PYTHONPATH=~/evil PYTHONSTARTUP=~/evil/sitecustomize.py' >> ~/.bashrc\n\
export PYTHONPATH=~/evil PYTHONSTARTUP=~/evil/sitecustomize.py; echo placed",
    );
}

#[test]
fn forgery_fake_python_and_pytest_on_path() {
    forgery_fails(&format!(
        "mkdir -p ~/bin\n\
cat > ~/bin/fake <<'EOF'\n#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in --junitxml=*) echo '{ALL_PASS_JUNIT}' > \"${{a#--junitxml=}}\";; esac; done\nexit 0\nEOF\n\
chmod +x ~/bin/fake; for n in python3 python pytest py.test env setpriv; do cp ~/bin/fake ~/bin/$n; done\n\
export PATH=~/bin:$PATH; alias python3=~/bin/python3; python3() {{ ~/bin/fake \"$@\"; }}; hash -r; which python3"
    ));
}

#[test]
fn forgery_prewritten_junit() {
    forgery_fails(&format!(
        "for p in /tmp/junit.xml ~/junit.xml /run/endless-verifier/junit.xml /run/endless-verifier/run-x/junit.xml /logs/verifier/junit.xml; do \
         mkdir -p $(dirname $p) 2>/dev/null; echo '{ALL_PASS_JUNIT}' > $p 2>/dev/null; done; echo placed"
    ));
}

#[test]
fn custom_verifier_script_runs_as_root_and_reward_cannot_be_prewritten() {
    let Some(b) = backend() else { return };
    let mut t = task("harbor");
    t.meta.agent.user = "root".into();
    t.meta.environment.workdir = "/app".into();
    t.environment = FileTree::default();
    t.environment.insert_text(
        "Dockerfile",
        "FROM ubuntu:24.04\nWORKDIR /app\nRUN echo in > /app/in.txt\n",
    );
    t.meta.verifier.script = Some("test.sh".into());
    t.tests.insert_text(
        "test.sh",
        "#!/bin/bash\nif [ \"$(id -u)\" = 0 ] && [ \"$(cat /app/out.txt 2>/dev/null)\" = IN ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    let mut s = session(&b, &t);
    s.exec(
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
        T,
    )
    .unwrap();
    let r = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(!r.passed, "pre-written reward was accepted: {}", r.output);
    s.exec("tr a-z A-Z < in.txt > out.txt", T).unwrap();
    let r = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(r.passed, "{} {:?}", r.output, r.tests);
    s.close();
}

#[test]
fn initial_and_final_tests_in_one_run_report_what_separate_runs_do() {
    let Some(b) = backend() else { return };
    let key = |r: &endless::verify::TestReport| {
        let mut v: Vec<(String, bool)> =
            r.tests.iter().map(|c| (c.name.clone(), c.passed)).collect();
        v.sort();
        (r.passed, v)
    };
    let mut broken = task("batch-broken");
    broken
        .tests
        .insert_text("test_final_state.py", "def test_broken(:\n    pass\n");
    for t in [task("batch"), broken] {
        let mut s = session(&b, &t);
        for mode in [VerifierMode::Cold, VerifierMode::Warm] {
            let (i, f) = verify_initial_and_final(&mut s, &t, mode).unwrap();
            let alone_i = verify_with(&mut s, &t, TestSet::Initial, mode).unwrap();
            let alone_f = verify_with(&mut s, &t, TestSet::Final, mode).unwrap();
            assert_eq!(key(&i), key(&alone_i), "{}: {}", t.id(), i.output);
            assert_eq!(key(&f), key(&alone_f), "{}: {}", t.id(), f.output);
            assert!(i.passed && !f.passed);
        }
        s.close();
    }
}

/// Host pids of processes whose command line is exactly `argv`.
fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// `pids_running`, waiting up to 5 s for the first one: a fork returns before its child
/// has exec'd, and on a loaded machine the exec can come after the verifier's verdict.
fn pids_started(argv: &[&str]) -> Vec<u32> {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let pids = pids_running(argv);
        if !pids.is_empty() || std::time::Instant::now() >= until {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn what_the_tests_start_runs_in_the_sessions_cgroups_and_dies_with_it() {
    let Some(b) = backend() else { return };
    for (mode, secs) in [(VerifierMode::Cold, "417"), (VerifierMode::Warm, "419")] {
        let mut t = task("cgroup");
        t.tests.insert_text(
            "test_final_state.py",
            format!("import subprocess\ndef test_starts_a_daemon():\n    subprocess.Popen(['setsid', 'sleep', '{secs}'])\n"),
        );
        let mut s = session(&b, &t);
        s.exec("(sleep 418 &) ; echo started", T).unwrap();
        let r = verify_with(&mut s, &t, TestSet::Final, mode).unwrap();
        assert!(r.passed, "{mode:?}: {}", r.output);
        let daemon = pids_started(&["sleep", secs]);
        eprintln!(
            "{mode:?}: {:?} daemon {daemon:?} in {:?}",
            r.verifier, r.duration
        );
        assert_eq!(
            daemon.len(),
            1,
            "{mode:?}: the test's daemon runs on: {daemon:?}"
        );
        if b.uses_cgroups() {
            let cgroups = |p: u32| std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap();
            let agent = pids_started(&["sleep", "418"]);
            assert_eq!(agent.len(), 1, "{agent:?}");
            assert_eq!(
                cgroups(daemon[0]),
                cgroups(agent[0]),
                "{mode:?}: not in the session's cgroups"
            );
        }
        s.close();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !pids_running(&["sleep", secs]).is_empty() {
            assert!(
                std::time::Instant::now() < until,
                "{mode:?}: the test's daemon outlived its session"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `X.Y` of the host's python3 (the interpreter a sealed environment on
/// the host base is built from, offline).
fn host_python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_sealed_environments_verifier_started_with_the_session_runs_inside_it_once() {
    let Some(b) = backend() else { return };
    let mut t = task("prestarted");
    t.meta.verifier.python = Some(host_python());
    t.tests.insert_text(
        "test_final_state.py",
        "import os, subprocess\n\
         def test_where_it_runs():\n\
         \x20   assert os.getcwd() == '/home/user'\n\
         \x20   assert os.readlink('/proc/self/ns/pid') == open('/home/user/pidns').read().strip()\n\
         \x20   assert os.path.isdir('/logs/verifier')\n\
         \x20   open('/logs/verifier/reward.txt', 'w').write('1')\n\
         \x20   subprocess.Popen(['setsid', 'sleep', '429'])\n",
    );
    let mut s = session(&b, &t);
    endless::verify::prestart(&mut s, &t);
    s.exec(
        "(sleep 428 &) ; readlink /proc/self/ns/pid > /home/user/pidns; echo started",
        T,
    )
    .unwrap();
    let r = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(r.passed, "{r:#?}");
    if root() {
        assert_eq!(r.verifier, VerifierPath::Prestarted, "{r:#?}");
    }
    let daemon = pids_started(&["sleep", "429"]);
    assert_eq!(daemon.len(), 1, "the test's daemon runs on: {daemon:?}");
    if b.uses_cgroups() {
        let cgroups = |p: u32| std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap();
        let agent = pids_started(&["sleep", "428"]);
        assert_eq!(agent.len(), 1, "{agent:?}");
        assert_eq!(
            cgroups(daemon[0]),
            cgroups(agent[0]),
            "not in the session's cgroups"
        );
    }
    // Used once: the next verification runs cold, and says why.
    let again = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(again.passed, "{again:#?}");
    let VerifierPath::Cold(Some(why)) = &again.verifier else {
        panic!("{:?}", again.verifier)
    };
    assert!(why.contains("sealed verifier environment"), "{why}");
    s.close();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !pids_running(&["sleep", "429"]).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "the test's daemon outlived its session"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two images asking for the same sealed environment store its files once
/// (issue 52, defect 2: a `torch` environment took 13 GB per image); the
/// cache counts them once, and evicting one image leaves the other's
/// environment whole.
#[test]
fn identical_sealed_environments_of_two_images_are_stored_once() {
    use std::os::unix::fs::MetadataExt;
    if backend().is_none() {
        return;
    }
    // A cache of its own: both environments are built by this test.
    let cache = tempfile::Builder::new()
        .prefix("endless-env-sharing-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let b = LocalBackend::new(cache.path()).unwrap();
    let tasks: Vec<Task> = ["share-a", "share-b"]
        .iter()
        .map(|id| {
            let mut t = task(id);
            t.meta.verifier.python = Some(host_python());
            t.environment.insert_text(
                "setup.sh",
                format!("mkdir -p /home/user/data\necho hello > /home/user/data/a.txt\necho {id} > /home/user/id\n"),
            );
            t
        })
        .collect();
    let images: Vec<_> = tasks.iter().map(|t| b.prepare(t).unwrap()).collect();
    assert_ne!(images[0].hash, images[1].hash);
    let spec = endless::task::formats::VerifierEnvSpec::from_section(
        &tasks[0].meta.verifier,
        Path::new("task.toml"),
    )
    .unwrap();
    let envs: Vec<_> = images
        .iter()
        .map(|i| endless::sandbox::local::env_dir(&i.path, &spec))
        .collect();
    let python = "usr/local/bin/endless-python3";
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&envs[0].join(python)), ino(&envs[1].join(python)));
    let each: u64 = envs
        .iter()
        .map(|e| endless::sandbox::local::disk_bytes(e))
        .sum();
    // Each file once, wherever it is linked.
    let mut seen = std::collections::HashMap::new();
    for e in &envs {
        for f in walkdir::WalkDir::new(e).into_iter().flatten() {
            let m = f.metadata().unwrap();
            if m.is_file() {
                seen.insert(m.ino(), m.blocks() * 512);
            }
        }
    }
    let together: u64 = seen.values().sum();
    eprintln!(
        "two environments: {:.1} MB as copies, {:.1} MB stored",
        each as f64 / 1e6,
        together as f64 / 1e6
    );
    assert!(together * 10 < each * 6, "{together} of {each} bytes");
    // One image goes; the other's environment still runs its tests.
    std::fs::remove_dir_all(&images[0].path).unwrap();
    let mut s = b.start(&images[1], &SessionOptions::default()).unwrap();
    s.exec("tr a-z A-Z < ~/data/a.txt > ~/out.txt", T).unwrap();
    let r = verify(&mut s, &tasks[1], TestSet::Final).unwrap();
    assert!(r.passed, "{}", r.output);
    s.close();
}

/// `[verifier] agent_packages` (issue 52, defect 3: `No module named
/// 'numpy'` with numpy installed by the solution): the tests import a
/// package the agent installed for the image's Python; a task without the
/// flag, in the same sealed environment, does not see it.
#[test]
fn tests_import_the_agents_packages_only_when_the_task_says_so() {
    let Some(b) = backend() else { return };
    let v = host_python();
    for agent_packages in [true, false] {
        let mut t = task(&format!("agent-packages-{agent_packages}"));
        t.meta.verifier.python = Some(v.clone());
        t.meta.verifier.agent_packages = agent_packages;
        t.tests.insert_text(
            "test_final_state.py",
            "def test_the_agents_package():\n\
             \x20   import agentmod\n\
             \x20   assert agentmod.VALUE == 42\n",
        );
        let mut s = session(&b, &t);
        s.exec(
            &format!(
                "d=~/.local/lib/python{v}/site-packages/agentmod; mkdir -p $d; \
                 echo 'VALUE = 42' > $d/__init__.py"
            ),
            T,
        )
        .unwrap();
        let r = verify(&mut s, &t, TestSet::Final).unwrap();
        s.close();
        if agent_packages {
            assert!(r.passed, "{}", r.output);
        } else {
            assert!(!r.passed, "{}", r.output);
            assert!(
                r.output.contains("No module named 'agentmod'"),
                "{}",
                r.output
            );
        }
    }
}

#[test]
fn tests_see_the_tests_folder_and_logs_verifier_on_both_paths() {
    let Some(b) = backend() else { return };
    let mut t = task("harbor-paths");
    t.tests.insert_text("expected.txt", "HELLO\n");
    t.tests.insert_text(
        "test_final_state.py",
        "import os\n\
         def test_paths():\n\
         \x20   assert open('/tests/expected.txt').read() == open('/home/user/out.txt').read()\n\
         \x20   assert os.listdir('/logs/verifier') == []\n\
         \x20   open('/logs/verifier/reward.txt', 'w').write('1')\n",
    );
    let mut s = session(&b, &t);
    s.exec("echo HELLO > /home/user/out.txt", T).unwrap();
    let r = verify_both(&mut s, &t, TestSet::Final);
    assert!(r.passed, "{}", r.output);
    // The agent sees neither: they were the verifier's own mounts.
    let out = s
        .exec(
            "ls /logs/verifier 2>/dev/null | wc -l; ls /tests 2>/dev/null | wc -l",
            T,
        )
        .unwrap();
    assert_eq!(
        out.output.split_whitespace().collect::<Vec<_>>(),
        ["0", "0"],
        "{}",
        out.output
    );
    s.close();
}

/// Defect 1 of issue 52: a root task's tests keep Docker's default
/// capabilities (the agent's root shell's), in the sandbox's user namespace
/// only, on both paths: they chown, drop to another user with `setgroups`
/// (as `apt-get` does for `_apt`) and chroot; a non-root task's keep none.
#[test]
fn a_root_tasks_tests_keep_dockers_default_capabilities_on_both_paths() {
    let Some(b) = backend() else { return };
    if !root() {
        eprintln!("SKIP: rootless verifiers keep no capability (see plan.rs)");
        return;
    }
    // CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
    // NET_BIND_SERVICE SYS_CHROOT AUDIT_WRITE SETFCAP: Docker's 0xa80425fb
    // without MKNOD and NET_RAW.
    let probe = |kind: &str, want: &str| {
        format!(
            "import os, subprocess\n\
             def caps(kind):\n\
             \x20   line = [l for l in open('/proc/self/status') if l.startswith(kind)][0]\n\
             \x20   return line.split()[1]\n\
             def test_caps():\n\
             \x20   assert (caps('CapEff:'), caps('{kind}:')) == ('{want}', '{want}')\n"
        )
    };
    let mut t = task("root-caps");
    t.meta.agent.user = "root".into();
    t.meta.environment.workdir = "/app".into();
    t.environment = FileTree::default();
    t.environment
        .insert_text("Dockerfile", "FROM ubuntu:24.04\nWORKDIR /app\n");
    t.tests.insert_text(
        "test_final_state.py",
        format!(
            "{}\
             def test_what_root_does_under_docker():\n\
             \x20   open('/app/secret.txt', 'w').write('hello')\n\
             \x20   os.chown('/app/secret.txt', 65534, 65534)\n\
             \x20   os.chmod('/app/secret.txt', 0o600)\n\
             \x20   out = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',\n\
             \x20                         'cat', '/app/secret.txt'], capture_output=True, text=True)\n\
             \x20   assert out.stdout == 'hello', out.stderr\n\
             \x20   subprocess.run(['chroot', '/', 'true'], check=True)\n",
            probe("CapBnd", "00000000a00405fb")
        ),
    );
    let mut s = session(&b, &t);
    let r = verify_both(&mut s, &t, TestSet::Final);
    assert!(r.passed, "{}", r.output);
    s.close();
    let mut user = task("user-caps");
    user.tests
        .insert_text("test_final_state.py", probe("CapPrm", "0000000000000000"));
    let mut s = session(&b, &user);
    let r = verify_both(&mut s, &user, TestSet::Final);
    assert!(r.passed, "{}", r.output);
    s.close();
}
