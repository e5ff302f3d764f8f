//! The sealed verifier environment (`[verifier] python / packages / apt`,
//! issue 31) against a root agent that plants modules wherever Python
//! could look: `numpy.py`, `pytest.py`, `_pytest.py`, `sitecustomize.py`,
//! `usercustomize.py` and a `.pth` file in every `sys.path` and
//! site-packages directory it can see, its home's user site, and the
//! environment itself. The verdict must not be forged (a planted `pytest`
//! would report a pass on fd 3), none of the planted files may run in the
//! verifier, and the environment must stay read-only. The agent's session
//! must not see the environment at all (it is attached for the verifier
//! only): listing, opening or searching for it finds nothing. The environment is
//! built offline here (the host's Python, no PyPI package), from the
//! image's own interpreter, as it is for any task.

use endless::sandbox::VerifierPath;
use endless::verify::verify;

#[allow(unused_imports)]
use super::*;

/// What every planted module does when imported: leave a marker, and (as
/// `pytest`) write a passing JUnit report to the verifier's result pipe.
const PAYLOAD: &str = r#"import os, sys
open('/tmp/planted-' + __name__.replace('.', '_'), 'w').close()
if __name__ in ('pytest', '_pytest'):
    os.write(3, b'<testsuite tests="1"><testcase classname="test_final_state" name="test_done"/></testsuite>')
    os._exit(0)
"#;

#[test]
fn planted_modules_do_not_reach_the_sealed_verifier_environment() {
    both(
        "verifier_site_packages::planted_modules_do_not_reach_the_sealed_verifier_environment",
        |b| planted_modules(b, "root", false),
    );
}

#[test]
fn planted_modules_do_not_reach_the_sealed_verifier_environment_of_a_non_root_task() {
    both(
        "verifier_site_packages::planted_modules_do_not_reach_the_sealed_verifier_environment_of_a_non_root_task",
        |b| planted_modules(b, "user", false),
    );
}

/// With `[verifier] agent_packages` (Harbor's tests on the image's own
/// pytest) the tests import what the agent installed, as they would in
/// Harbor, so the agent's `numpy` runs; yet pytest, its plugins and its
/// report stay the sealed environment's: the planted `pytest` forges no
/// verdict, and no `sitecustomize`, `usercustomize` or `.pth` file runs.
#[test]
fn with_agent_packages_pytest_and_its_report_stay_the_environments() {
    both(
        "verifier_site_packages::with_agent_packages_pytest_and_its_report_stay_the_environments",
        |b| planted_modules(b, "root", true),
    );
}

/// The attack by an agent running as `user`, while the sealed
/// environment's verifier started with the session waits (as root: the
/// first verification runs in it; rootless: cold): the agent must not see
/// it in any process listing, and a root agent's `/etc/ld.so.preload`,
/// written after it started, must stay hidden from what the tests run.
fn planted_modules(b: &LocalBackend, user: &str, agent_packages: bool) {
    let mut t = task(&format!("atk-venv-{user}-{agent_packages}"), user, "true\n");
    t.meta.verifier.python = Some(host_python());
    t.meta.verifier.agent_packages = agent_packages;
    t.tests.insert_text(
        "test_final_state.py",
        "import os, subprocess, sys\ntry:\n    import numpy  # only the agent's could be found\nexcept ImportError:\n    pass\n\n\
         def test_env_read_only():\n    site = [p for p in sys.path if p.startswith('/run/endless-verifier/envs/') and p.endswith('/site')]\n    assert site, sys.path\n    try:\n        open(site[0] + '/planted_by_tests.py', 'w').close()\n    except OSError:\n        return\n    raise AssertionError('the verifier environment is writable')\n\n\
         def test_preload_hidden():\n    r = subprocess.run(['/bin/true'], capture_output=True)\n    assert b'preload' not in r.stderr, r.stderr\n\n\
         def test_done():\n    with open(os.path.expanduser('~/out.txt')) as f:\n        assert f.read().strip() == 'HELLO'\n",
    );
    let mut s = session(b, &t);
    endless::verify::prestart(&mut s, &t);
    // Time for it to start and import pytest before the agent acts.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let plant = format!(
        "cat > /tmp/payload.py <<'EOF'\n{PAYLOAD}EOF\n\
         ls -A /run/endless-verifier/envs /run/endless-verifier-envs 2>/dev/null | grep -q . ; echo env_listed=$?\n\
         ls -d /run/endless-verifier/envs/*/site /run/endless-verifier-envs/*/site >/dev/null 2>&1; echo env_visible=$?\n\
         found=$(find / \\( -path /proc -o -path /sys \\) -prune -o \\( -name endless-python3 -o -name endless-verifier-env.sh \\) -print 2>/dev/null | head -3); echo \"found=[$found]\"; test -n \"$found\"; echo env_found=$?\n\
         grep -q verifier-envs /proc/self/mountinfo; echo env_mounted=$?\n\
         cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -q -e 'prestarte[d]' -e 'endless-python[3]'; echo verifier_listed=$?\n\
         test -e /tests; echo tests_made=$?\n\
         dirs=\"$(python3 -c 'import site, sys; print(\" \".join([p for p in sys.path if p] + site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) \
         /usr/lib/python3/dist-packages /usr/local/lib/python3/dist-packages $HOME/.local/lib/python3/site-packages /tests /run/endless-verifier \
         /run/endless-verifier/envs\"\n\
         planted=0\n\
         for d in $dirs; do\n\
           mkdir -p \"$d\" 2>/dev/null || continue\n\
           for m in numpy pytest _pytest sitecustomize usercustomize; do cp /tmp/payload.py \"$d/$m.py\" 2>/dev/null && planted=$((planted+1)); done\n\
           echo 'import os; open(\"/tmp/planted-pth\", \"w\").close()' > \"$d/zz-endless.pth\" 2>/dev/null\n\
         done\n\
         echo planted=$planted\n\
         echo garbage > /tmp/planted.so; echo /tmp/planted.so > /etc/ld.so.preload 2>/dev/null\n\
         export PYTHONPATH=/tmp PYTHONSTARTUP=/tmp/payload.py"
    );
    let out = run(&mut s, &plant);
    let got = codes(&out);
    let planted = got.iter().find(|(k, _)| k == "planted").map(|(_, c)| *c);
    assert!(planted.is_some_and(|n| n >= 5), "{out}");
    // The environment is attached for the verifier only: the agent's
    // session neither lists, opens, finds nor mounts it; the verifier
    // waiting for the tests is in no process listing of the agent's, and
    // has made no mount point in the sandbox's file system yet.
    all_failed(
        &out,
        &[
            "env_listed",
            "env_visible",
            "env_found",
            "env_mounted",
            "verifier_listed",
            "tests_made",
        ],
    );

    // The task is not done: the verdict must say so.
    let report = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(!report.passed, "forged: {report:#?}");
    let case = |name: &str| {
        report
            .tests
            .iter()
            .find(|c| c.name.ends_with(name))
            .map(|c| c.passed)
    };
    assert_eq!(case("test_done"), Some(false), "{report:#?}");
    assert_eq!(case("test_env_read_only"), Some(true), "{report:#?}");
    assert_eq!(case("test_preload_hidden"), Some(true), "{report:#?}");
    if rootless() {
        assert!(
            matches!(report.verifier, VerifierPath::Cold(_)),
            "{:?}",
            report.verifier
        );
    } else {
        assert_eq!(report.verifier, VerifierPath::Prestarted, "{report:#?}");
    }
    // Done honestly: it passes, in the sealed environment (cold now: the
    // one started with the session ran once), and no planted file ran in
    // any verification.
    run(&mut s, "echo HELLO > ~/out.txt");
    let report = verify(&mut s, &t, TestSet::Final).unwrap();
    assert!(report.passed, "{report:#?}");
    assert!(
        format!("{:?}", report.verifier).contains("sealed verifier environment"),
        "{:?}",
        report.verifier
    );
    let markers = run(&mut s, "echo ran: /tmp/planted-*");
    // Only what the tests themselves import, and only when they trust the
    // agent's packages.
    let allowed: &[&str] = if agent_packages {
        &["/tmp/planted-numpy"]
    } else {
        &[]
    };
    let ran: Vec<&str> = markers
        .split_whitespace()
        .filter(|m| m.starts_with("/tmp/planted-") && !m.ends_with('*'))
        .collect();
    assert!(
        ran.iter().all(|m| allowed.contains(m)),
        "a planted module ran in the verifier: {markers}"
    );
    s.close();
}
