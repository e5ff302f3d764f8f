//! The attack suite of the `local` sandbox: one test per attack the
//! sandbox claims to stop (docs/security.md), each run as root (as CI
//! and most users run `endless`) and again as an unprivileged user (uid
//! 65534 through `setpriv`, where user namespaces allow it), with root
//! agents and hostile build steps.
//!
//! The unprivileged run re-executes this test binary (copied where uid 65534
//! can read it) with `ENDLESS_ATTACK_INNER` set, so both runs execute the
//! same scenario code.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use endless::sandbox::local::{Limits, LocalBackend};
use endless::sandbox::{Backend, Session, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};
use endless::verify::TestSet;

mod support;
use support::verifier::verify_both;

const T: Duration = Duration::from_secs(20);
const INNER: &str = "ENDLESS_ATTACK_INNER";

/// A scenario: what one attack does, and what must (not) happen.
type Scenario = fn(&LocalBackend);

/// Run `scenario` as we are, then (when we are host root) as uid 65534 and
/// as a throwaway user with a subordinate id range (see
/// [`support::range_user`]).
fn both(name: &str, scenario: Scenario) {
    let inner = std::env::var_os(INNER).is_some();
    match backend(Limits::default()) {
        Some(b) => {
            // The outer run checks the inner one ran in the mode it meant.
            eprintln!("sandbox identity: {}", b.identity().describe());
            scenario(&b)
        }
        None if inner => panic!("the local backend does not start as uid {}", uid()),
        None => return,
    }
    if !inner && host_root() {
        as_nobody(name);
        support::range_user::rerun(name, INNER);
    }
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// Our uid on the host (in an owner namespace of subordinate ids, where
/// `uid()` is 0, the operator's).
fn host_uid() -> u32 {
    endless::sandbox::subids::owner_namespace().map_or(uid(), |ns| ns.owner.0)
}

/// Whether a sandbox's `uid_map` line (inside, outside, count) maps root
/// to an unprivileged range: a host id past the real accounts as root; the
/// owner namespace's ids `1..` with subordinate ids (whose outside is that
/// namespace: 0 there is the operator).
fn root_maps_to_the_range(map: &[u64]) -> bool {
    match endless::sandbox::subids::owner_namespace() {
        Some(_) => map == [0, 1, 65_536],
        None => map.first() == Some(&0) && map.get(1).is_some_and(|host| *host >= 65_536),
    }
}

/// Whether we are host root (not the root of an owner namespace).
fn host_root() -> bool {
    host_uid() == 0
}

fn rootless() -> bool {
    uid() != 0
}

/// The capabilities root inside keeps, as `/proc/self/status` shows them:
/// Docker's default set without `mknod` and `net_raw` where the sandbox
/// has a user namespace of its own (a root operator; they hold only over
/// what that namespace owns), none in a rootless sandbox.
fn root_inside_caps() -> &'static str {
    if rootless() {
        "0000000000000000"
    } else {
        "00000000a00405fb"
    }
}

/// Re-run test `name` of this binary as uid 65534 (see [`support::nobody`]).
fn as_nobody(name: &str) {
    support::nobody::rerun(name, INNER);
}

fn backend(limits: Limits) -> Option<LocalBackend> {
    let cache = std::env::temp_dir().join(format!("endless-attacks-{}", host_uid()));
    std::fs::create_dir_all(&cache).ok()?;
    // Every run builds new hostile images (nonce-tagged): the shared cache
    // stays bounded by evicting, after each build, what earlier runs left
    // (never what was used in the last ten minutes).
    let bounded = endless::config::ImagesConfig {
        max_store_gb: Some(4.0),
        ..Default::default()
    };
    match LocalBackend::new(&cache) {
        Ok(b) => Some(b.with_limits(limits).with_images(bounded)),
        Err(e) => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            None
        }
    }
}

fn task(id: &str, user: &str, setup: &str) -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "write HELLO to ~/out.txt".into(),
        truth: "echo HELLO > ~/out.txt".into(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = id.into();
    t.meta.agent.user = user.into();
    t.meta.environment.workdir = if user == "root" {
        "/root"
    } else {
        "/home/user"
    }
    .into();
    t.environment.insert_text("setup.sh", setup);
    t.tests.insert_text(
        "test_final_state.py",
        "import os\n# CANARY-TEST-SOURCE-7f3a\ndef test_done():\n    with open(os.path.expanduser('~/out.txt')) as f:\n        assert f.read().strip() == 'HELLO'\n",
    );
    t.meta.verifier.final_tests = vec!["test_final_state.py".into()];
    t
}

/// `X.Y` of the host's python3: sealed verifier environments in these
/// tests are built offline, from the image's own interpreter.
fn host_python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn session(b: &LocalBackend, t: &Task) -> Session {
    let image = b.prepare(t).unwrap();
    b.start(&image, &SessionOptions::default()).unwrap()
}

fn run(s: &mut Session, cmd: &str) -> String {
    let r = s.exec(cmd, T).unwrap();
    r.output
}

/// Lines `name=CODE` in `out`, as (name, code).
fn codes(out: &str) -> Vec<(String, i32)> {
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn all_failed(out: &str, names: &[&str]) {
    let got = codes(out);
    for n in names {
        let code = got.iter().find(|(k, _)| k == n).map(|(_, c)| *c);
        assert!(
            matches!(code, Some(c) if c != 0),
            "`{n}` did not fail: {out}"
        );
    }
}

/// Python that tries the "shocker" escape: open the host filesystem's root
/// inode by handle, and make a handle for `/`. Prints both errnos.
fn handle_attack() -> String {
    let (open_nr, name_nr) = if cfg!(target_arch = "aarch64") {
        (265, 264)
    } else {
        (304, 303)
    };
    format!(
        r#"python3 - <<'EOF'
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/", os.O_RDONLY)
h = ctypes.create_string_buffer(struct.pack("Ii8s", 8, 1, struct.pack("II", 2, 0)), 16)
r = libc.syscall({open_nr}, fd, h, 0)
print("handle=%d" % (ctypes.get_errno() if r < 0 else 0))
m = ctypes.c_int()
h2 = ctypes.create_string_buffer(struct.pack("Ii", 128, 0) + bytes(128), 136)
r = libc.syscall({name_nr}, -100, b"/", h2, ctypes.byref(m), 0)
print("name_to_handle=%d" % (ctypes.get_errno() if r < 0 else 0))
EOF"#
    )
}

#[test]
fn root_agent_cannot_open_host_files_by_handle() {
    both("root_agent_cannot_open_host_files_by_handle", |b| {
        let mut s = session(b, &task("atk-handle", "root", "true\n"));
        let out = run(&mut s, &handle_attack());
        all_failed(&out, &["handle", "name_to_handle"]);
        s.close();
    });
}

#[test]
fn root_agent_cannot_mount_remount_or_nest_namespaces() {
    both("root_agent_cannot_mount_remount_or_nest_namespaces", |b| {
        let mut s = session(b, &task("atk-mount", "root", "true\n"));
        let tag = format!("pwned-{}", std::process::id());
        let out = run(
            &mut s,
            &format!(
                "mount -o remount,rw /run/endless-runtime/usr 2>/dev/null; echo remount=$?\n\
                 mount -t tmpfs none /mnt 2>/dev/null; echo mount=$?\n\
                 umount /run/endless-verifier 2>/dev/null; echo umount=$?\n\
                 touch /run/endless-runtime/usr/{tag} 2>/dev/null; echo write_runtime=$?\n\
                 unshare -U true 2>/dev/null; echo userns=$?\n\
                 unshare -m true 2>/dev/null; echo mountns=$?\n\
                 unshare -n true 2>/dev/null; echo netns=$?"
            ),
        );
        all_failed(
            &out,
            &[
                "remount",
                "mount",
                "umount",
                "write_runtime",
                "userns",
                "mountns",
                "netns",
            ],
        );
        assert!(!Path::new("/usr").join(&tag).exists());
        s.close();
    });
}

#[test]
fn root_agent_cannot_change_the_host_clock_or_kernel_settings() {
    both(
        "root_agent_cannot_change_the_host_clock_or_kernel_settings",
        |b| {
            let mut s = session(b, &task("atk-clock", "root", "true\n"));
            let before = std::time::SystemTime::now();
            let out = run(
                &mut s,
                "date -s '2001-01-01 00:00:00' >/dev/null 2>&1; echo date=$?\n\
             echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; echo drop_caches=$?\n\
             echo 1 > /proc/sys/kernel/sysrq 2>/dev/null; echo sysrq=$?",
            );
            all_failed(&out, &["date", "drop_caches", "sysrq"]);
            let drift = std::time::SystemTime::now().duration_since(before).unwrap();
            assert!(drift < Duration::from_secs(60), "the host clock moved");
            s.close();
        },
    );
}

#[test]
fn root_agent_sees_no_host_secrets_in_etc() {
    both("root_agent_sees_no_host_secrets_in_etc", |b| {
        let mut s = session(b, &task("atk-etc", "root", "true\n"));
        let out = run(
            &mut s,
            "cat /etc/shadow /etc/gshadow 2>&1; ls /etc/ssh /etc/ssl/private 2>&1; \
             cat /etc/subuid /etc/gitconfig 2>/dev/null; echo end",
        );
        assert!(out.contains("root:*:"), "{out}");
        for line in out.lines() {
            let hash = line.split(':').nth(1).unwrap_or("");
            assert!(
                !hash.starts_with('$'),
                "a password hash reached the sandbox: {line}"
            );
            assert!(
                !line.contains("ssh_host_"),
                "host keys reached the sandbox: {line}"
            );
        }
        if let Ok(host) = std::fs::read_to_string("/etc/shadow") {
            for line in host.lines().filter(|l| l.contains('$')) {
                assert!(!out.contains(line), "host shadow line inside: {line}");
            }
        }
        s.close();
    });
}

#[test]
fn root_agent_cannot_forge_the_verdict_or_read_the_tests() {
    both(
        "root_agent_cannot_forge_the_verdict_or_read_the_tests",
        |b| {
            let t = task("atk-forge", "root", "true\n");
            let mut s = session(b, &t);
            let out = run(
                &mut s,
                r#"STD=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$SITE"
echo 'open("/tmp/sitecustomize-ran", "w")' > "$STD/sitecustomize.py"
echo 'import os; open("/tmp/pth-ran", "w")' > "$SITE/zz-endless.pth"
cat > /tmp/fake <<'EOF'
#!/bin/sh
printf '<testsuite><testcase classname="test_final_state" name="test_done"/></testsuite>' >&3 2>/dev/null
printf '<testsuite><testcase classname="test_final_state" name="test_done"/></testsuite>' > /run/endless-verifier/junit.xml 2>/dev/null
exit 0
EOF
chmod +x /tmp/fake
for p in /usr/bin/python3 /usr/local/bin/python3 /usr/bin/pytest /usr/local/bin/pytest /usr/bin/env; do cp /tmp/fake "$p" 2>/dev/null; done
( while :; do
    cat /run/endless-verifier/*/* /run/endless-verifier/*/*/* 2>/dev/null
    for p in /proc/[0-9]*; do cat $p/root/run/endless-verifier/tests/* 2>/dev/null; cat $p/environ 2>/dev/null; done
  done > /tmp/stolen 2>/dev/null ) &
echo tampered"#,
            );
            assert!(out.contains("tampered"), "{out}");
            std::thread::sleep(Duration::from_millis(300));
            let r = verify_both(&mut s, &t, TestSet::Final);
            assert!(!r.passed, "a forged verdict passed: {:?}", r.tests);
            assert_eq!(r.tests.len(), 1, "{}", r.output);
            assert_eq!(r.tests[0].name, "test_final_state::test_done");
            // Doing the work still passes: the verifier did not use the fakes.
            run(&mut s, "echo HELLO > /root/out.txt");
            let r = verify_both(&mut s, &t, TestSet::Final);
            assert!(r.passed, "{}", r.output);
            let after = run(
            &mut s,
            "ls /tmp/sitecustomize-ran /tmp/pth-ran 2>&1; grep -c CANARY-TEST-SOURCE /tmp/stolen; echo end",
        );
            assert!(after.contains("No such file"), "{after}");
            assert!(!after.contains("/tmp/pth-ran\n"), "{after}");
            assert!(
                after.contains("\n0\n") || after.starts_with("0\n") || after.contains("0\nend"),
                "the tests leaked: {after}"
            );
            s.close();
        },
    );
}

#[test]
fn root_agent_cannot_hijack_the_verifier_through_ld_so_preload() {
    both(
        "root_agent_cannot_hijack_the_verifier_through_ld_so_preload",
        |b| {
            let t = task("atk-preload", "root", "true\n");
            let mut s = session(b, &t);
            // A regular file is hidden from the verifier; the agent's own tools
            // still load what it names.
            run(
                &mut s,
                "echo /nonexistent/evil.so > /etc/ld.so.preload; echo HELLO > /root/out.txt",
            );
            let r = verify_both(&mut s, &t, TestSet::Final);
            assert!(r.passed, "{}", r.output);
            // Something a bind cannot cover makes verification fail, never pass.
            run(
                &mut s,
                "rm -f /etc/ld.so.preload; mkfifo /etc/ld.so.preload",
            );
            let r = verify_both(&mut s, &t, TestSet::Final);
            assert!(!r.passed);
            assert!(r.tests[0].message.contains("tampered"), "{:?}", r.tests);
            s.close();
        },
    );
}

/// The verdict of tests whose `test_done` fails (`never passes`) was not
/// forged: the report fails, and `test_done` fails with its own message.
fn assert_not_forged(r: &endless::verify::TestReport, who: &str) {
    assert!(!r.passed, "{who}: a forged verdict passed: {:?}", r.tests);
    let done = r
        .tests
        .iter()
        .find(|c| c.name.ends_with("test_done"))
        .unwrap();
    assert!(
        !done.passed && done.message.contains("never passes"),
        "{who}: {:?}\n{}",
        r.tests,
        r.output
    );
}

#[test]
fn agent_code_run_by_a_test_cannot_rewrite_the_results() {
    both("agent_code_run_by_a_test_cannot_rewrite_the_results", |b| {
        let mut t = task("atk-tool", "user", "true\n");
        // The task: write a tool the tests run. The agent's tool tries to
        // forge a passing report for a test that fails.
        t.tests.insert_text(
            "test_final_state.py",
            "import subprocess\ndef test_tool_runs():\n    subprocess.run(['/home/user/tool'])\ndef test_done():\n    assert False, 'never passes'\n",
        );
        let mut s = session(b, &t);
        run(
            &mut s,
            r#"cat > ~/tool <<'EOF'
#!/bin/sh
R='<testsuite><testcase classname="test_final_state" name="test_done"/><testcase classname="test_final_state" name="test_tool_runs"/></testsuite>'
for f in /run/endless-verifier/junit.xml /proc/$PPID/fd/3 /proc/self/fd/3 /dev/fd/3; do printf '%s' "$R" > $f 2>/dev/null; done
for p in /proc/[0-9]*; do printf '%s' "$R" > $p/fd/3 2>/dev/null; done
# Keep rewriting wherever a report file could be, past the end of pytest.
( for i in $(seq 1 3000); do
    for f in /run/endless-verifier/junit.xml /run/endless-verifier/*.xml; do printf '%s' "$R" > $f 2>/dev/null; done
  done ) &
exit 0
EOF
chmod +x ~/tool"#,
        );
        let r = verify_both(&mut s, &t, TestSet::Final);
        assert_not_forged(&r, "");
        s.close();
    });
}

#[test]
fn agent_code_run_by_a_test_cannot_plant_modules_on_the_import_path() {
    both(
        "agent_code_run_by_a_test_cannot_plant_modules_on_the_import_path",
        |b| {
            for user in ["user", "root"] {
                let home = if user == "root" {
                    "/root"
                } else {
                    "/home/user"
                };
                let mut t = task(&format!("atk-plant-{user}"), user, "true\n");
                // One test runs the agent's tool; a later one imports a
                // module pytest has not loaded yet (stdlib `colorsys`).
                t.tests.insert_text(
                    "test_final_state.py",
                    format!(
                        "import subprocess\ndef test_tool_runs():\n    subprocess.run(['{home}/tool'])\n\
                         def test_done():\n    import colorsys\n    assert False, 'never passes'\n"
                    ),
                );
                t.tests.insert_text("helpers.py", "VALUE = 1\n");
                let mut s = session(b, &t);
                // The tool plants a `colorsys` that reports every test
                // passed wherever it could precede the standard library:
                // the tests' directory (pytest puts it first), the working
                // directory, home and PYTHONPATH's; it also tries to rewrite
                // the tests' own files.
                run(
                    &mut s,
                    &format!(
                        r#"cat > ~/evil.py <<'EOF'
import os
R = b'<testsuite><testcase classname="test_final_state" name="test_done"/><testcase classname="test_final_state" name="test_tool_runs"/></testsuite>'
os.write(3, R)
os._exit(0)
EOF
cat > ~/tool <<'EOF'
#!/bin/sh
for d in /run/endless-verifier/tests /run/endless-verifier "$PWD" {home} /tmp; do
  cp {home}/evil.py "$d/colorsys.py" 2>/dev/null && echo "planted in $d" >> /tmp/planted
done
for f in /run/endless-verifier/tests/*.py /run/endless-verifier/pytest.ini; do
  cp {home}/evil.py "$f" 2>/dev/null && echo "rewrote $f" >> /tmp/planted
  chmod u+w "$f" 2>/dev/null && cp {home}/evil.py "$f" 2>/dev/null && echo "rewrote $f" >> /tmp/planted
done
exit 0
EOF
chmod +x ~/tool; echo 'export PYTHONPATH=/tmp' >> ~/.profile"#
                    ),
                );
                let r = verify_both(&mut s, &t, TestSet::Final);
                assert_not_forged(&r, user);
                let planted = run(&mut s, "cat /tmp/planted 2>/dev/null; echo end");
                assert!(
                    !planted.contains("/run/endless-verifier"),
                    "{user}: the tests' directory was writable: {planted}"
                );
                s.close();
            }
        },
    );
}

/// Host files only host root may read, planted for the test and removed
/// after: a 0600 file and a 0700 directory under `/usr/local/share`.
struct HostSecrets;

impl HostSecrets {
    const SECRET: &'static str = "HOST-ROOT-ONLY-4d1c";
    const FILE: &'static str = "/usr/local/share/endless-attack-canary";
    const DIR: &'static str = "/usr/local/share/endless-attack-private";

    /// Plant them (as root; another user finds them planted by the run
    /// that started it).
    fn plant() -> HostSecrets {
        use std::os::unix::fs::PermissionsExt;
        let (file, dir) = (Path::new(Self::FILE), Path::new(Self::DIR));
        if host_root() {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(file, Self::SECRET).unwrap();
            std::fs::write(dir.join("inner"), Self::SECRET).unwrap();
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::set_permissions(dir.join("inner"), std::fs::Permissions::from_mode(0o644))
                .unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        HostSecrets
    }
}

impl Drop for HostSecrets {
    fn drop(&mut self) {
        if host_root() {
            let _ = std::fs::remove_file(Self::FILE);
            let _ = std::fs::remove_dir_all(Self::DIR);
        }
    }
}

#[test]
fn root_agents_and_build_steps_read_no_host_file_that_only_host_root_may_read() {
    let secrets = HostSecrets::plant();
    both(
        "root_agents_and_build_steps_read_no_host_file_that_only_host_root_may_read",
        |_| {
            let (file, dir) = (HostSecrets::FILE, HostSecrets::DIR);
            let inner = format!("{dir}/inner");
            // A hostile build step copies both into the image; the root
            // agent (the oracle) reads them; the final test, as root
            // inside, fails if any of it got the secret, or sees them.
            let mut t = task(
                "atk-host-secret",
                "root",
                &format!(
                    "cat {file} > /root/from-build 2>&1; cat {inner} >> /root/from-build 2>&1; \
                     cp -a {dir} /root/dir-from-build 2>/dev/null; true\n"
                ),
            );
            t.solution.insert_text(
                "solve.sh",
                format!(
                    "cat {file} {inner} > /root/from-agent 2>&1; ls -la /usr/local/share >> /root/from-agent 2>&1\n\
                     echo HELLO > /root/out.txt\n"
                ),
            );
            t.tests.insert_text(
                "test_final_state.py",
                format!(
                    "import os, subprocess\n\
                     def test_done():\n\
                     \x20   for f in ['/root/from-build', '/root/from-agent']:\n\
                     \x20       assert '{secret}' not in open(f).read(), f\n\
                     \x20   out = subprocess.run(['grep', '-r', '{secret}', '/root/dir-from-build'], capture_output=True, text=True)\n\
                     \x20   assert '{secret}' not in out.stdout\n\
                     \x20   if {masked}:\n\
                     \x20       assert not os.path.lexists('{file}')\n\
                     \x20       assert not os.path.lexists('{dir}')\n\
                     \x20   assert open('/root/out.txt').read().strip() == 'HELLO'\n",
                    secret = HostSecrets::SECRET,
                    // Run unprivileged (with or without subordinate ids),
                    // host directories show as they are to any user, who
                    // may see (not read) them: nothing is masked.
                    masked = if host_root() { "True" } else { "False" },
                ),
            );
            // A fresh `endless` process, which looks at the host as it is now.
            let ws_dir = tempfile::tempdir().unwrap();
            let ws = endless::store::Workspace::open(ws_dir.path()).unwrap();
            ws.add_task(&t, endless::store::TaskStatus::Candidate)
                .unwrap();
            let out = support::cli::endless(
                ws_dir.path(),
                &["run", "atk-host-secret", "--policy", "oracle", "--json"],
            );
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let result: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(
                result["passed"], true,
                "a host secret reached the sandbox: {text}"
            );
        },
    );
    drop(secrets);
}

/// Held by the two tests that look at who may make cgroups: one hands the
/// `endless` cgroups to uid 65534 for a while, which the other would see
/// half-way through its own uid 65534 run.
static CGROUP_OWNERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn what_the_limits_leave_out_is_said_and_memory_is_limited_as_a_whole_with_cgroups() {
    let _owners = CGROUP_OWNERS.lock().unwrap_or_else(|e| e.into_inner());
    both(
        "what_the_limits_leave_out_is_said_and_memory_is_limited_as_a_whole_with_cgroups",
        |_| {
            let b = backend(small_limits()).unwrap();
            let (survivors, gap) = survivors_of_two_hogs(&b);
            let cgroups = endless::sandbox::local::cgroups_available();
            match gap {
                None => {
                    assert!(cgroups, "no gap said, yet no cgroups");
                    assert!(survivors < 2, "both hogs survived a 200 MiB limit");
                }
                Some(gap) if gap.contains("rlimits") => {
                    assert!(!cgroups, "cgroups are usable, yet rlimits were used");
                    assert!(gap.contains("per process") && gap.contains("CPU"), "{gap}");
                }
                Some(gap) => assert!(gap.contains("CPU"), "{gap}"),
            }
        },
    );
}

/// Two processes of 150 MiB each in a session limited to 200 MiB; how many
/// of them lived to the end.
fn survivors_of_two_hogs(b: &LocalBackend) -> (usize, Option<String>) {
    let mut s = session(b, &task("atk-limits", "user", "true\n"));
    let hog =
        "python3 -c 'import time; x = b\"x\" * (150 << 20); time.sleep(3); print(\"survived\")'";
    let out = run(&mut s, &format!("({hog} & {hog} & wait) 2>&1; echo end"));
    let gap = s.info().limits.clone();
    s.close();
    (out.matches("survived").count(), gap)
}

/// A session budget (200 MiB of memory, a small writable layer) that two
/// 150 MiB processes cannot both fit in.
fn small_limits() -> Limits {
    Limits {
        memory_bytes: 200 << 20,
        disk_bytes: 16 << 20,
        ..Limits::default()
    }
}

#[test]
fn cgroups_given_to_an_unprivileged_user_limit_its_sessions_as_a_whole() {
    const NAME: &str = "cgroups_given_to_an_unprivileged_user_limit_its_sessions_as_a_whole";
    let _owners = CGROUP_OWNERS.lock().unwrap_or_else(|e| e.into_inner());
    if std::env::var_os(INNER).is_some() {
        assert!(endless::sandbox::local::cgroups_available());
        let b = backend(small_limits()).unwrap();
        let (survivors, gap) = survivors_of_two_hogs(&b);
        assert!(
            gap.as_deref().is_none_or(|g| !g.contains("rlimits")),
            "{gap:?}"
        );
        assert!(survivors < 2, "both hogs survived a 200 MiB limit");
        return;
    }
    if !host_root() || !endless::sandbox::local::cgroups_available() {
        eprintln!("SKIP: needs root and cgroup v1 to hand cgroups to uid 65534");
        return;
    }
    // What an administrator does: give the user the `endless` cgroups.
    let dirs: Vec<std::path::PathBuf> = ["pids", "memory", "cpu", "freezer"]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c).join("endless"))
        .filter(|d| d.is_dir())
        .collect();
    let chown = |id: u32| {
        for d in &dirs {
            std::os::unix::fs::chown(d, Some(id), Some(id)).unwrap();
            std::os::unix::fs::chown(d.join("cgroup.procs"), Some(id), Some(id)).unwrap();
        }
    };
    support::nobody::rerun_between(NAME, INNER, || chown(support::nobody::NOBODY), || chown(0));
}

/// Python that opens an `AF_VSOCK` socket and prints `vsock=ERRNO` (0: it
/// opened).
const VSOCK_PROBE: &str = r#"python3 -c '
import socket
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    print("vsock=0")
except OSError as e:
    print("vsock=%d" % e.errno)
'"#;

#[test]
fn no_sandboxed_process_opens_vsock_sockets() {
    both("no_sandboxed_process_opens_vsock_sockets", |b| {
        // No network namespace isolates vsock: it reaches the hypervisor
        // and the host's VM sockets. A build step and a session try.
        let t = task(
            "atk-vsock",
            "user",
            &format!("{VSOCK_PROBE} | sed 's/vsock/build_vsock/' > /home/user/probe\n"),
        );
        let mut s = session(b, &t);
        let out = run(&mut s, &format!("cat ~/probe; {VSOCK_PROBE}"));
        let got = codes(&out);
        for name in ["build_vsock", "vsock"] {
            let code = got.iter().find(|(k, _)| k == name).map(|(_, c)| *c);
            assert_eq!(code, Some(libc::EPERM), "`{name}` was not refused: {out}");
        }
        s.close();
    });
}

/// A ptrace and /proc probe in Python (ctypes): for each pid given, whether
/// `PTRACE_SEIZE`, reading `/proc/PID/mem` and following `/proc/PID/fd/0` work,
/// as `pid verifier=0|1 attach=OK|errno mem=... fd=...` lines (`verifier=1`:
/// the process runs the verifier's program, `python -I -S -B -c ...`).
const PROBE: &str = r#"import ctypes, os, sys
libc = ctypes.CDLL("libc.so.6", use_errno=True)
def attempt(f):
    try:
        f()
        return "OK"
    except OSError as e:
        return str(e.errno)
for pid in [int(p) for p in sys.argv[1:] if p.isdigit() and int(p) != os.getpid()]:
    def attach():
        # PTRACE_SEIZE (checked like PTRACE_ATTACH, but the tracee is not stopped)
        if libc.ptrace(0x4206, pid, None, None) != 0:
            raise OSError(ctypes.get_errno(), "ptrace")
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    def mem():
        with open("/proc/%d/mem" % pid, "rb") as f:
            f.seek(0x400000)
            f.read(1)
    try:
        cmd = open("/proc/%d/cmdline" % pid, "rb").read()
    except OSError:
        continue
    tag = "verifier=%d" % (b"\0-I\0-S\0-B\0-c\0" in cmd)
    print(pid, tag, "attach=" + attempt(attach), "mem=" + attempt(mem),
          "fd=" + attempt(lambda: os.stat("/proc/%d/fd/0" % pid)), flush=True)
"#;

#[test]
fn no_agent_process_can_trace_or_read_the_verifier() {
    both("no_agent_process_can_trace_or_read_the_verifier", |b| {
        // A root agent: a loop that probes every process it can see while the
        // tests run; and a tool the tests run (as the task's user, a child of
        // pytest) that probes its parent and every ancestor it can name.
        let mut t = task("atk-trace", "root", "true\n");
        t.tests.insert_text(
            "test_final_state.py",
            "import os, subprocess\ndef test_tool_runs():\n    subprocess.run(['/usr/bin/python3', '/opt/probe.py', str(os.getpid()), str(os.getppid())])\ndef test_done():\n    assert False, 'never passes'\n",
        );
        let mut s = session(b, &t);
        let probe = format!(
            "mkdir -p /opt && cat > /opt/probe.py <<'EOF'\n{PROBE}EOF\n\
             ( end=$((SECONDS + 4)); while [ $SECONDS -lt $end ] && [ ! -e /tmp/stop ]; do python3 /opt/probe.py $(ls /proc | grep '^[0-9]') 2>/dev/null; done > /tmp/agent-probe; touch /tmp/probe-done ) > /dev/null 2>&1 &\n\
             echo started"
        );
        assert!(run(&mut s, &probe).contains("started"));
        std::thread::sleep(Duration::from_millis(200));
        let r = verify_both(&mut s, &t, TestSet::Final);
        assert!(!r.passed, "{:?}", r.tests);
        // The tool's own probe went to the verifier's output.
        let tool: Vec<&str> = r.output.lines().filter(|l| l.contains("attach=")).collect();
        assert!(!tool.is_empty(), "the tool did not run: {}", r.output);
        for line in &tool {
            assert!(
                !line.contains("=OK"),
                "a test's tool reached the verifier: {line}\n{}",
                r.output
            );
        }
        // The agent's loop may trace its own processes, never the verifier's.
        let agent = run(&mut s, "touch /tmp/stop; for i in $(seq 100); do [ -e /tmp/probe-done ] && break; sleep 0.1; done; grep -c 'verifier=1' /tmp/agent-probe; grep 'verifier=1' /tmp/agent-probe | grep '=OK' | sort -u | head -5; echo end");
        eprintln!("agent probes of verifier processes (count, then any that worked): {agent}");
        assert!(
            !agent.contains("=OK"),
            "a root agent reached the verifier: {agent}"
        );
        assert!(agent.contains("end"), "{agent}");
        s.close();
    });
}

#[test]
fn hostile_build_steps_gain_nothing() {
    both("hostile_build_steps_gain_nothing", |b| {
        let setup = format!(
            "exec > /build-report.txt 2>&1\n{}\n\
             mount -t tmpfs none /mnt; echo mount=$?\n\
             date -s '2001-01-01' >/dev/null; echo date=$?\n\
             unshare -U true; echo userns=$?\n\
             echo x > /run/endless-build/ctx/ctx-copy-canary; echo write_ctx_copy=$?\n\
             echo x > /run/endless-build/steps/pwned; echo write_steps=$?\n\
             grep -c '[$]' /etc/shadow; echo shadow_hashes_counted=1\n\
             true\n",
            handle_attack()
        );
        let t = task("atk-build", "root", &setup);
        let mut s = session(b, &t);
        let out = run(&mut s, "cat /build-report.txt");
        all_failed(
            &out,
            &[
                "handle",
                "name_to_handle",
                "mount",
                "date",
                "userns",
                "write_steps",
            ],
        );
        assert!(out.contains("0\nshadow_hashes_counted=1"), "{out}");
        // A setup script may write into its context, as in Docker: into a
        // copy made for its step, thrown away after it; nothing reaches the
        // host's files, the cache or the image.
        assert!(out.contains("write_ctx_copy=0"), "{out}");
        let inside = run(&mut s, "ls /run/endless-build/ctx/ctx-copy-canary 2>&1");
        assert!(inside.contains("No such file"), "{inside}");
        let cache = std::env::temp_dir().join(format!("endless-attacks-{}", host_uid()));
        let leaked: Vec<_> = walkdir::WalkDir::new(&cache)
            .into_iter()
            .flatten()
            .filter(|e| e.file_name() == "ctx-copy-canary")
            .map(|e| e.path().to_path_buf())
            .collect();
        assert!(leaked.is_empty(), "{leaked:?}");
        s.close();
    });
}

#[test]
fn inherited_descriptors_are_invisible_inside() {
    both("inherited_descriptors_are_invisible_inside", |b| {
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("canary.txt"), "HOST-FD-CANARY").unwrap();
        let dir = std::fs::File::open(secret.path()).unwrap();
        // SAFETY: dup2/fcntl on descriptors we own; fd 77 is ours from here on.
        unsafe {
            use std::os::fd::AsRawFd;
            assert_eq!(libc::dup2(dir.as_raw_fd(), 77), 77);
            libc::fcntl(77, libc::F_SETFD, 0);
        }
        let mut s = session(b, &task("atk-fd", "root", "true\n"));
        let out = run(
            &mut s,
            "ls /proc/self/fd /proc/$$/fd; cat /proc/$$/fd/77/canary.txt /proc/self/fd/77/canary.txt 2>&1; echo end",
        );
        assert!(!out.contains("HOST-FD-CANARY"), "{out}");
        assert!(!out.lines().any(|l| l.trim() == "77"), "{out}");
        s.close();
        // SAFETY: closing our own descriptor.
        unsafe {
            libc::close(77);
        }
    });
}

#[test]
fn filling_the_writable_layer_gives_enospc_and_the_shell_survives() {
    both(
        "filling_the_writable_layer_gives_enospc_and_the_shell_survives",
        |_| {
            let Some(b) = backend(Limits {
                disk_bytes: 32 << 20,
                memory_bytes: 512 << 20,
                ..Limits::default()
            }) else {
                return;
            };
            let mut s = session(&b, &task("atk-disk", "root", "true\n"));
            let out = run(
                &mut s,
                "dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>&1; echo dd=$?",
            );
            assert!(out.contains("No space left on device"), "{out}");
            assert_eq!(run(&mut s, "rm -f /tmp/fill; echo alive").trim(), "alive");
            s.close();
        },
    );
}

#[test]
fn a_fork_bomb_leaves_no_process_after_the_episode() {
    both("a_fork_bomb_leaves_no_process_after_the_episode", |b| {
        let tag = format!("endless_bomb_{}_{}", std::process::id(), host_uid());
        let mut s = session(b, &task("atk-bomb", "user", "true\n"));
        run(
            &mut s,
            &format!("printf 'b() {{ b | b & }}; b; sleep 100\\n' > /tmp/{tag}.sh"),
        );
        let r = s
            .exec(&format!("bash /tmp/{tag}.sh"), Duration::from_secs(3))
            .unwrap();
        assert!(r.timed_out);
        s.close();
        let left = host_processes_with(&tag);
        assert!(
            left.is_empty(),
            "{} processes left: {:?}",
            left.len(),
            &left[..left.len().min(3)]
        );
    });
}

/// Host processes whose command line contains `needle`.
fn host_processes_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                    cmd.contains(needle)
                        .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_network_session_cannot_reach_host_loopback() {
    both("a_network_session_cannot_reach_host_loopback", |b| {
        if endless::sandbox::local::pasta_path().is_none() {
            eprintln!("SKIP: pasta (passt) is not installed");
            return;
        }
        // SAFETY: access(2) on a constant path.
        let tun = unsafe { libc::access(c"/dev/net/tun".as_ptr(), libc::R_OK | libc::W_OK) } == 0;
        if !host_root() && !tun {
            eprintln!("SKIP: /dev/net/tun is not open to this user, so pasta cannot run rootless");
            return;
        }
        let mut t = task("atk-net", "user", "true\n");
        t.meta.environment.network = true;
        no_way_to_the_host(session(b, &t));
        // A Harbor task that says nothing about the network has it (Harbor's
        // default, `public`): the same namespace, the same walls.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("atk-harbor-net");
        std::fs::create_dir_all(root.join("environment")).unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(
            root.join("task.toml"),
            "version = \"1.0\"\n\n[agent]\ntimeout_sec = 60.0\n",
        )
        .unwrap();
        std::fs::write(root.join("instruction.md"), "Do nothing.\n").unwrap();
        std::fs::write(
            root.join("environment/Dockerfile"),
            "FROM host\nWORKDIR /app\n",
        )
        .unwrap();
        std::fs::write(
            root.join("tests/test_outputs.py"),
            "def test_x():\n    pass\n",
        )
        .unwrap();
        let harbor = endless::task::formats::Format::Harbor
            .read(&root, &Default::default())
            .unwrap();
        assert!(
            harbor.meta.environment.network,
            "a Harbor task gets the network by default"
        );
        no_way_to_the_host(session(b, &harbor));
    });
}

/// In a session with network: the host's loopback, the gateway and the
/// host's own address lead nowhere, while pasta gave it an interface.
fn no_way_to_the_host(mut s: Session) {
    let lo = TcpListener::bind("127.0.0.1:0").unwrap();
    lo.set_nonblocking(true).unwrap();
    let port = lo.local_addr().unwrap().port();
    let out = run(
        &mut s,
        &format!(
            "ip -o -4 addr show | grep -v ' lo ' | wc -l | sed 's/^/ifaces=/'\n\
             timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null; echo loopback=$?\n\
             GW=$(ip -4 route | awk '/default/ {{print $3; exit}}')\n\
             timeout 3 bash -c \"echo hi > /dev/tcp/$GW/{port}\" 2>/dev/null; echo gateway=$?"
        ),
    );
    all_failed(&out, &["loopback", "gateway"]);
    assert!(
        lo.accept().is_err(),
        "the host's loopback listener was reached"
    );
    // The host's CA bundle (as builds get it), read-only, when the host has one.
    if Path::new("/etc/ssl/certs/ca-certificates.crt").is_file() {
        let out = run(
            &mut s,
            "test \"$SSL_CERT_FILE\" = /run/endless-ca/ca.crt && test -s \"$PIP_CERT\"; echo ca=$?\n\
             touch /run/endless-ca/ca.crt /run/endless-ca/x 2>/dev/null; echo cawrite=$?",
        );
        assert!(out.contains("ca=0"), "{out}");
        all_failed(&out, &["cawrite"]);
    }
    let ifaces = codes(&out)
        .into_iter()
        .find(|(k, _)| k == "ifaces")
        .map(|(_, v)| v);
    assert!(
        matches!(ifaces, Some(n) if n >= 1),
        "pasta set up no interface: {out}"
    );
    // pasta gives the namespace a copy of the host's address: even the
    // host's external address leads back into the sandbox.
    if let Some(ip) = host_address() {
        let open = TcpListener::bind("0.0.0.0:0").unwrap();
        open.set_nonblocking(true).unwrap();
        let port = open.local_addr().unwrap().port();
        let out = run(
            &mut s,
            &format!(
                "timeout 3 bash -c 'echo hi > /dev/tcp/{ip}/{port}' 2>/dev/null; echo host=$?"
            ),
        );
        all_failed(&out, &["host"]);
        assert!(
            open.accept().is_err(),
            "a host listener was reached through {ip}"
        );
    }
    s.close();
}

/// The host's first non-loopback IPv4 address, if it has one.
fn host_address() -> Option<String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains(" lo "))
        .find_map(|l| {
            let addr = l.split_whitespace().skip_while(|w| *w != "inet").nth(1)?;
            Some(addr.split('/').next()?.to_string())
        })
}

#[test]
fn sessions_get_a_cpu_limit() {
    both("sessions_get_a_cpu_limit", |_| {
        let Some(b) = backend(Limits {
            cpus: 0.2,
            ..Limits::default()
        }) else {
            return;
        };
        if !b.uses_cgroups() {
            eprintln!("SKIP: no writable cgroups here (rootless): no CPU limit to check");
            return;
        }
        let mut s = session(&b, &task("atk-cpu", "user", "true\n"));
        let out = run(
            &mut s,
            "timeout 2 sh -c 'while :; do :; done'; times | tail -1",
        );
        let secs: f64 = out
            .split_whitespace()
            .take(2)
            .filter_map(|w| {
                let (m, rest) = w.split_once('m')?;
                Some(
                    m.parse::<f64>().ok()? * 60.0
                        + rest.trim_end_matches('s').parse::<f64>().ok()?,
                )
            })
            .sum();
        assert!(
            secs < 1.0,
            "a 0.2-CPU session used {secs} s of CPU in 2 s: {out}"
        );
        s.close();
    });
}

#[test]
fn the_verifier_runs_as_the_task_user_and_symlinks_stay_inside() {
    both(
        "the_verifier_runs_as_the_task_user_and_symlinks_stay_inside",
        |b| {
            let mut t = task("atk-link", "user", "true\n");
            t.tests.insert_text(
            "test_who.py",
            "import os, pathlib\ndef test_who():\n    assert os.getuid() == 1000 and str(pathlib.Path.home()) == '/home/user' and os.getcwd() == '/home/user'\n",
        );
            t.meta.verifier.final_tests.push("test_who.py".into());
            let mut s = session(b, &t);
            run(&mut s, "ln -s /etc/shadow ~/out.txt");
            let r = verify_both(&mut s, &t, TestSet::Final);
            assert!(!r.passed);
            let who = r
                .tests
                .iter()
                .find(|c| c.name.ends_with("test_who"))
                .expect(&r.output);
            assert!(who.passed, "{}", who.message);
            let done = r
                .tests
                .iter()
                .find(|c| c.name.ends_with("test_done"))
                .unwrap();
            for line in std::fs::read_to_string("/etc/shadow")
                .unwrap_or_default()
                .lines()
            {
                if line.contains('$') {
                    assert!(
                        !done.message.contains(line),
                        "host shadow in a test message"
                    );
                }
            }
            s.close();
        },
    );
}

#[test]
fn the_uid_map_puts_root_outside_the_host_ids() {
    both("the_uid_map_puts_root_outside_the_host_ids", |b| {
        let mut s = session(b, &task("atk-ids", "root", "true\n"));
        let out = run(&mut s, "cat /proc/self/uid_map; id -u");
        let fields: Vec<u64> = out
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(fields.first(), Some(&0), "{out}");
        if rootless() {
            // Only our own id is mapped (seen from inside as the parent's 0).
            assert_eq!(fields.get(2), Some(&1), "{out}");
        } else {
            assert!(
                root_maps_to_the_range(&fields),
                "root maps to host root: {out}"
            );
        }
        assert!(out.trim_end().ends_with('0'), "{out}");
        s.close();
    });
}

#[test]
fn a_build_with_network_cannot_reach_host_loopback_and_its_session_stays_offline() {
    both(
        "a_build_with_network_cannot_reach_host_loopback_and_its_session_stays_offline",
        |b| {
            if !b.build_network() {
                eprintln!("SKIP: builds get no network here (rootless, or no pasta)");
                return;
            }
            let lo = TcpListener::bind("127.0.0.1:0").unwrap();
            lo.set_nonblocking(true).unwrap();
            let port = lo.local_addr().unwrap().port();
            // A hostile build step: probe the host's loopback, leave the
            // verdict in the image.
            let t = task(
                "atk-build-net",
                "user",
                &format!(
                    "timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null; \
                     echo loopback=$? > /home/user/probe\n\
                     ip -o -4 addr show | grep -v ' lo ' | wc -l | sed 's/^/build_ifaces=/' >> /home/user/probe\n"
                ),
            );
            let mut s = session(b, &t);
            let out = run(
                &mut s,
                "cat ~/probe; ip -o -4 addr show | grep -v ' lo ' | wc -l | sed 's/^/session_ifaces=/'",
            );
            all_failed(&out, &["loopback"]);
            assert!(
                lo.accept().is_err(),
                "the build reached the host's loopback"
            );
            let code = |name: &str| {
                codes(&out)
                    .into_iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v)
            };
            assert!(
                matches!(code("build_ifaces"), Some(n) if n >= 1),
                "the build had no network: {out}"
            );
            assert_eq!(
                code("session_ifaces"),
                Some(0),
                "the session has a network: {out}"
            );
        },
    );
}

// Keystrokes into the operator's terminal.
#[path = "attacks/operator_terminal.rs"]
mod operator_terminal;
// Attacks on what `endless` reads and keeps on the host (image archives and
// layers, the image and step caches), apart from the sessions above.
#[path = "attacks/image_store.rs"]
mod image_store;
// Attacks through task bundles, verifier reports and the server.
#[path = "attacks/bundles_and_reports.rs"]
mod bundles_and_reports;
// Attacks through the sandbox API of `endless serve` (the Harbor environment's).
#[path = "attacks/sandbox_api.rs"]
mod sandbox_api;
// Attacks through `user` in the sandbox API's exec (root and other accounts).
#[path = "attacks/sandbox_exec_users.rs"]
mod sandbox_exec_users;
// Modules planted for the sealed verifier environment (`[verifier] packages`).
#[path = "attacks/verifier_site_packages.rs"]
mod verifier_site_packages;
// Links a hostile build step leaves for endless to follow on the host.
#[path = "attacks/build_output_links.rs"]
mod build_output_links;
// Directories another user shapes: Harbor job directories (`episodes
// import`) and other workspaces (`workspace merge`).
#[path = "attacks/untrusted_dirs.rs"]
mod untrusted_dirs;
// Verdicts an agent cannot dodge: cut reports, Harbor-style test scripts.
#[path = "attacks/verdicts.rs"]
mod verdicts;
// Limits of the sandbox API: quota slots, CPUs and memory, registries.
#[path = "attacks/served_limits.rs"]
mod served_limits;
// The pre-started verifier's code, confined to the session's cgroups.
#[path = "attacks/verifier_cgroups.rs"]
mod verifier_cgroups;
// A sandbox handed out from the pool of pre-started sandboxes.
#[path = "attacks/pooled.rs"]
mod pooled;
// Who owns on the host what build steps leave (root, range ids).
#[path = "attacks/range_owners.rs"]
mod range_owners;
