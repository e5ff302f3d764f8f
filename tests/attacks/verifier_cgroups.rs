//! A sealed verifier environment whose code runs at interpreter start (a
//! `.pth` file in its site directory, put there by a hostile `cp` of the
//! image while the environment was built) forks a process that stays. The
//! verifier started with the session runs it while the agent works: it
//! must run within the session's cgroups (its process, memory and CPU
//! limits) from the start, and die with the session.

use endless::sandbox::VerifierPath;
use endless::verify::verify;

#[allow(unused_imports)]
use super::*;

/// What the environment's code leaves running.
const STAYER: &str = "sleep 86413";

/// A `cp` earlier on PATH that adds a `.pth` to the environment being built.
const HOSTILE_CP: &str = r#"#!/bin/sh
/bin/cp "$@" || exit $?
site=/opt/endless-verifier-env/site
if [ -d "$site" ] && [ ! -e "$site/zz-stay.pth" ]; then
  echo "import os; os.fork() or (os.setsid(), [os.dup2(os.open('/dev/null', os.O_RDWR), f) for f in (0, 1, 2)], os.closerange(3, 4096), os.execv('/bin/sleep', ['sleep', '86413']))" > "$site/zz-stay.pth"
fi
"#;

/// The image: that `cp` first on PATH (in a directory a rootless build
/// may write too).
const DOCKERFILE: &str = "COPY hostile-cp /opt/hostile/cp\n\
     RUN chmod 755 /opt/hostile/cp\n\
     ENV PATH=/opt/hostile:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n";

/// Host pids of the processes the environment's code left running.
fn stayers() -> Vec<i32> {
    host_processes_with(STAYER)
        .iter()
        .filter_map(|p| p.split_once(": "))
        .filter(|(_, cmd)| cmd.starts_with("sleep "))
        .filter_map(|(pid, _)| pid.parse().ok())
        .collect()
}

/// Wait (a while) for at least one stayer.
fn wait_for_stayers() -> Vec<i32> {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let found = stayers();
        if !found.is_empty() || std::time::Instant::now() >= until {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_pre_started_verifiers_code_runs_in_the_sessions_cgroups_and_dies_with_it() {
    both(
        "verifier_cgroups::the_pre_started_verifiers_code_runs_in_the_sessions_cgroups_and_dies_with_it",
        |b| verifier_code_confined(b, "user"),
    );
}

fn verifier_code_confined(b: &LocalBackend, user: &str) {
    let mut t = task(&format!("atk-vcg-{user}"), user, "true\n");
    t.environment = FileTree::default();
    t.environment.insert_text("hostile-cp", HOSTILE_CP);
    t.environment.insert_text("Dockerfile", DOCKERFILE);
    t.meta.verifier.python = Some(host_python());
    assert!(stayers().is_empty(), "left over: {:?}", stayers());
    let mut s = session(b, &t);
    endless::verify::prestart(&mut s, &t);
    // The agent works; the verifier started with the session (as root)
    // runs the environment's code meanwhile. Rootless verifies cold: the
    // code runs in the verification.
    assert_eq!(run(&mut s, "sleep 1; echo working").trim(), "working");
    if rootless() {
        let report = verify(&mut s, &t, TestSet::Final).unwrap();
        assert!(!report.passed, "{report:#?}");
    }
    let found = wait_for_stayers();
    assert!(!found.is_empty(), "the environment's code did not run");
    if b.uses_cgroups() {
        for pid in &found {
            let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
            for controller in ["pids", "memory"] {
                let inside = cgroups.lines().any(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, names, path) = (f.next(), f.next(), f.next());
                    names.is_some_and(|n| n.split(',').any(|c| c == controller))
                        && path.is_some_and(|p| p.starts_with("/endless/"))
                });
                assert!(
                    inside,
                    "pid {pid} runs outside the session's {controller} cgroup:\n{cgroups}"
                );
            }
        }
    }
    if !rootless() {
        // Confined, it still verifies: the honest agent passes through it.
        run(&mut s, "echo HELLO > ~/out.txt");
        let report = verify(&mut s, &t, TestSet::Final).unwrap();
        assert!(report.passed, "{report:#?}");
        assert_eq!(report.verifier, VerifierPath::Prestarted, "{report:#?}");
    }
    s.close();
    let left = stayers();
    assert!(left.is_empty(), "left after the session: {left:?}");
}
