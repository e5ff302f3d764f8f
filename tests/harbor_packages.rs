//! Issue 12's "done when", through the real `endless` binary: a directory
//! of Harbor tasks whose Dockerfiles install packages with `apt-get` and
//! `pip` imports, builds and passes its oracles (`endless tasks validate`),
//! both `FROM` an image that `skopeo` pushed to a loopback `docker-registry`
//! and `FROM ubuntu:24.04` aliased to a `build-base` Debian image; a second
//! validation finds the images built. Builds reach Debian's archive and
//! PyPI through `pasta`, as on a user's machine.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::cli::{endless, json};
use support::registry::{debian_base_tar, start_registry};

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Harbor's usual verifier boilerplate (mapped to the sandbox's pytest on import).
const TEST_SH: &str = "#!/bin/bash\n\
apt-get update\n\
apt-get install -y curl\n\
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n\
source $HOME/.local/bin/env\n\
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA\n\
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n";

/// One task: a Debian package and a pure-Python one the build installs,
/// the oracle's command (using the package), the answer it writes to
/// `/app/out.txt`, and the module the tests import.
struct Spec {
    id: &'static str,
    apt: &'static str,
    pip: &'static str,
    module: &'static str,
    solve: &'static str,
    answer: &'static str,
}

const SPECS: [Spec; 3] = [
    Spec {
        id: "jq-sum",
        apt: "jq",
        pip: "six==1.16.0",
        module: "six",
        solve: "jq '.n + 1' /app/in.json > /app/out.txt",
        answer: "42",
    },
    Spec {
        id: "bc-product",
        apt: "bc",
        pip: "toml==0.10.2",
        module: "toml",
        solve: "echo '6*7' | bc > /app/out.txt",
        answer: "42",
    },
    Spec {
        id: "xxd-hex",
        apt: "xxd",
        pip: "idna==3.7",
        module: "idna",
        solve: "printf hi | xxd -p > /app/out.txt",
        answer: "6869",
    },
];

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The three Harbor task directories under `dir`, each `FROM base`. Their
/// first steps are the same, so the step cache builds them once.
fn harbor_tasks(dir: &Path, base: &str) {
    for s in &SPECS {
        let t = dir.join(s.id);
        write(
            &t.join("task.toml"),
            "version = \"1.0\"\n\n[metadata]\ndifficulty = \"easy\"\ncategory = \"packages\"\n\n\
             [verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 300.0\n\n\
             [environment]\nbuild_timeout_sec = 900.0\n",
        );
        write(
            &t.join("instruction.md"),
            &format!("Use `{}` to write the answer to /app/out.txt.\n", s.apt),
        );
        write(
            &t.join("environment/Dockerfile"),
            &format!(
                "FROM {base}\n\
                 WORKDIR /app\n\
                 RUN apt-get update && apt-get install -y --no-install-recommends python3-pip\n\
                 RUN apt-get install -y --no-install-recommends {apt} \\\n    \
                 && pip install --break-system-packages --no-cache-dir {pip}\n\
                 RUN echo '{{\"n\": 41}}' > /app/in.json\n",
                apt = s.apt,
                pip = s.pip,
            ),
        );
        write(
            &t.join("solution/solve.sh"),
            &format!("#!/bin/bash\n{}\n", s.solve),
        );
        write(&t.join("tests/test.sh"), TEST_SH);
        write(
            &t.join("tests/test_outputs.py"),
            &format!(
                "import subprocess\nfrom pathlib import Path\n\n\n\
                 def test_answer():\n    assert Path('/app/out.txt').read_text().strip() == '{answer}'\n\n\n\
                 def test_the_build_installed_{module}():\n    \
                 subprocess.run(['python3', '-c', 'import {module}'], check=True)\n",
                answer = s.answer,
                module = s.module,
            ),
        );
    }
}

/// Import the tasks of `dir` into the workspace `ws` and validate them all
/// twice; returns the two wall times and the verdicts of the first run,
/// after checking that both passed, oracles included, on the same images.
fn import_and_validate(ws: &Path, dir: &Path) -> (Duration, Duration, serde_json::Value) {
    let t = Instant::now();
    let out = endless(ws, &["tasks", "import", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("import: {:.1?}", t.elapsed());
    let t0 = Instant::now();
    let first = json(&endless(ws, &["tasks", "validate", "--all", "--json"]));
    let cold = t0.elapsed();
    let t1 = Instant::now();
    let second = json(&endless(ws, &["tasks", "validate", "--all", "--json"]));
    let warm = t1.elapsed();
    for verdicts in [&first, &second] {
        let verdicts = verdicts.as_array().unwrap();
        assert_eq!(verdicts.len(), SPECS.len(), "{verdicts:?}");
        for v in verdicts {
            assert_eq!(v["ok"], true, "{v:#}");
            assert_eq!(v["validation"]["oracle_passes"], true, "{v:#}");
            assert_eq!(v["validation"]["final_fails_initially"], true, "{v:#}");
        }
    }
    let images = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|v| v["validation"]["image"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        images(&first),
        images(&second),
        "the same images, from the cache"
    );
    // The three tasks share their first steps: the package install ran
    // once, the other two builds took it from the step cache.
    let outcomes: Vec<String> = images(&first)
        .iter()
        .map(|hash| {
            let record = ws
                .join(".cache/endless/sandbox/local/images")
                .join(hash)
                .join("build.json");
            let steps: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
            let shared = steps
                .as_array()
                .unwrap()
                .iter()
                .find(|s| {
                    s["step"]
                        .as_str()
                        .unwrap()
                        .contains("install -y --no-install-recommends python3-pip")
                })
                .unwrap_or_else(|| panic!("{steps:#}"));
            shared["outcome"].as_str().unwrap().to_string()
        })
        .collect();
    let mut sorted = outcomes.clone();
    sorted.sort();
    assert_eq!(sorted, ["built", "cached", "cached"], "{outcomes:?}");
    (cold, warm, first)
}

#[test]
fn harbor_tasks_installing_packages_build_from_a_registry_and_on_an_aliased_base() {
    if !root() {
        eprintln!("SKIP: image builds with apt-get need root (a mapped user namespace)");
        return;
    }
    if Command::new("skopeo").arg("--version").output().is_err() {
        eprintln!("SKIP: skopeo is not installed (scripts/setup.sh installs it)");
        return;
    }
    let Some(reg) = start_registry() else { return };
    let work = tempfile::tempdir().unwrap();

    // (a) FROM the registry: the root filesystem pushed as a one-layer image.
    let t0 = Instant::now();
    let rootfs = debian_base_tar();
    eprintln!(
        "mmdebstrap base (cached under target/tmp after the first run): {:.1?}",
        t0.elapsed()
    );
    let t0 = Instant::now();
    let image = format!("127.0.0.1:{}/test/debian:bookworm", reg.port);
    let pushed = Command::new("skopeo")
        .args(["copy", "--quiet", "--dest-tls-verify=false"])
        .arg(format!("tarball:{}", rootfs.display()))
        .arg(format!("docker://{image}"))
        .output()
        .unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let push_time = t0.elapsed();
    let ws = work.path().join("ws-registry");
    std::fs::create_dir_all(&ws).unwrap();
    harbor_tasks(&work.path().join("harbor-registry"), &image);
    let (cold, warm, _) = import_and_validate(&ws, &work.path().join("harbor-registry"));
    eprintln!("registry: push {push_time:.1?}, first validation {cold:.1?}, second {warm:.1?}");
    assert!(
        warm * 3 < cold,
        "the second validation builds nothing: {warm:?} vs {cold:?}"
    );
    drop(reg);

    // (b) FROM ubuntu:24.04, aliased to a Debian base registered as
    // `endless images build-base` does (from the same cached mmdebstrap tar).
    let ws = work.path().join("ws-alias");
    write(
        &ws.join("endless.toml"),
        "[images]\npull = \"never\"\nfallback = \"error\"\n\n\
         [images.aliases]\n\"ubuntu:24.04\" = \"local/debian:bookworm\"\n",
    );
    let store = endless::images::ImageStore::new(&endless::sandbox::local::image_store_dir(
        &ws.join(".cache/endless/sandbox"),
    ));
    let t0 = Instant::now();
    endless::images::register_rootfs(&store, "local/debian:bookworm", &rootfs).unwrap();
    eprintln!("alias: base registered in {:.1?}", t0.elapsed());
    let listed = json(&endless(&ws, &["images", "list", "--json"]));
    assert_eq!(
        listed[0]["reference"], "docker.io/local/debian:bookworm",
        "the CLI sees the registered base: {listed:#}"
    );
    harbor_tasks(&work.path().join("harbor-ubuntu"), "ubuntu:24.04");
    let (cold, warm, verdicts) = import_and_validate(&ws, &work.path().join("harbor-ubuntu"));
    eprintln!("alias: first validation {cold:.1?}, second {warm:.1?}");
    for v in verdicts.as_array().unwrap() {
        let notes = v["validation"]["notes"].to_string();
        assert!(
            notes.contains("ubuntu:24.04 is aliased to local/debian:bookworm"),
            "the substitution is said: {v:#}"
        );
    }
    assert!(
        warm * 3 < cold,
        "the second validation builds nothing: {warm:?} vs {cold:?}"
    );
    let t = Instant::now();
    drop(work);
    eprintln!("clean-up: {:.1?}", t.elapsed());
}
