//! Links a hostile build step leaves for endless to follow on the host
//! (issue 46, breaches 1 and 2). Build steps run with the image's own
//! tools, so the step that makes a sealed verifier environment runs the
//! task's `cp` when the task put one first on `PATH`: it can leave the
//! environment's loader, or its `note`, as a link that climbs out of the
//! cache to any host file, and endless (host root, as CI and most users run
//! it) used to `chown`/`chmod` the loader and read the note through it. A
//! step can also make `/.endless` a link to a host directory; once step
//! layers are merged into an image's own directory (every derived image of
//! a sealed verifier environment), endless wrote `env.sh` through it.
//! Nothing of the host may change or be read through such links.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use endless::sandbox::local::env_note;
use endless::task::formats::VerifierEnvSpec;

#[allow(unused_imports)]
use super::*;

/// A link target that climbs from anywhere in the cache to `host`.
fn climbing(host: &Path) -> String {
    format!(
        "{}{}",
        "../".repeat(40),
        host.display().to_string().trim_start_matches('/')
    )
}

/// A task whose image puts a `cp` first on `PATH` (in `/opt`, which a
/// rootless build may write too) that, when asked to copy something to
/// `*/ld.so`, runs `action` with `$dest` set instead.
fn hostile_cp_task(id: &str, action: &str) -> Task {
    let cp = format!(
        "#!/bin/sh
for a in \"$@\"; do dest=\"$a\"; done
\
         case \"$dest\" in\n  */ld.so) {action} ;;\n  *) exec /bin/cp \"$@\" ;;\nesac\n"
    );
    let mut t = sealed_task(id, "true\n");
    t.environment = FileTree::default();
    t.environment.insert_text("hostile-cp", &cp);
    t.environment.insert_text(
        "Dockerfile",
        "COPY hostile-cp /opt/hostile/cp\nRUN chmod 755 /opt/hostile/cp\n\
         ENV PATH=/opt/hostile:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
    );
    t
}

fn sealed_task(id: &str, setup: &str) -> Task {
    let mut t = task(id, "root", setup);
    t.meta.verifier.python = Some(host_python());
    t
}

/// A host file of the test's user (mode 0640), made where the sandbox's
/// build cannot see it.
fn victim(dir: &Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("victim.txt");
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    p
}

fn owner_and_mode(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::metadata(p).unwrap();
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

#[test]
fn a_loader_link_in_a_verifier_environment_changes_no_host_file() {
    both(
        "build_output_links::a_loader_link_in_a_verifier_environment_changes_no_host_file",
        |b| {
            let dir = tempfile::tempdir().unwrap();
            let target = victim(dir.path(), "host data\n");
            let before = owner_and_mode(&target);
            let t = hostile_cp_task(
                &format!("atk-ldlink-{}", host_uid()),
                &format!("ln -sf '{}' \"$dest\"", climbing(&target)),
            );
            let result = b.prepare(&t);
            assert_eq!(
                owner_and_mode(&target),
                before,
                "the host file's owner or mode changed through the loader link"
            );
            let err = result.expect_err("an environment whose loader is a link is refused");
            assert!(
                err.to_string().contains("no complete environment"),
                "the error says what is wrong: {err}"
            );
        },
    );
}

#[test]
fn a_note_link_in_a_verifier_environment_reads_no_host_file() {
    both(
        "build_output_links::a_note_link_in_a_verifier_environment_reads_no_host_file",
        |b| {
            let dir = tempfile::tempdir().unwrap();
            let secret = victim(dir.path(), "CANARY-HOST-SECRET-51c2\n");
            let t = hostile_cp_task(
                &format!("atk-notelink-{}", host_uid()),
                &format!(
                    "/bin/cp \"$@\"; ln -sf '{}' \"$(dirname \"$dest\")/note\"",
                    climbing(&secret)
                ),
            );
            let image = b.prepare(&t).expect("the environment itself is whole");
            let spec =
                VerifierEnvSpec::from_section(&t.meta.verifier, Path::new("task.toml")).unwrap();
            let note = env_note(&image.path, &spec);
            assert!(
                !note.unwrap_or_default().contains("CANARY-HOST-SECRET"),
                "the note was read through a link to a host file"
            );
        },
    );
}

#[test]
fn an_endless_link_in_merged_layers_gets_no_env_file_written_through_it() {
    both(
        "build_output_links::an_endless_link_in_merged_layers_gets_no_env_file_written_through_it",
        |b| {
            let dir = tempfile::tempdir().unwrap();
            let host_dir = dir.path().join("profile.d");
            std::fs::create_dir(&host_dir).unwrap();
            std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            let setup = format!(
                "rm -rf /.endless\nln -s '{}' /.endless\n",
                climbing(&host_dir)
            );
            let t = sealed_task(&format!("atk-envlink-{}", host_uid()), &setup);
            let built = b.prepare(&t);
            let written: Vec<_> = std::fs::read_dir(&host_dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(
                written.is_empty(),
                "endless wrote {written:?} into a host directory through /.endless"
            );
            // The image works: `/.endless` is endless's own directory again.
            let image = built.unwrap();
            let mut s = b.start(&image, &SessionOptions::default()).unwrap();
            let out = run(
                &mut s,
                "test -L /.endless; echo link=$?; test -f /.endless/env.sh; echo env=$?",
            );
            assert!(out.contains("env=0"), "{out}");
            s.close();
        },
    );
}

/// Storing identical environments once (hard links between images'
/// environments) follows no link either way: an environment whose `share`
/// is a link to a host directory gets no host file replaced by a link into
/// the cache, and a later environment gets no host file linked in as the
/// twin of its own.
#[test]
fn sharing_identical_verifier_environments_links_no_host_file() {
    both(
        "build_output_links::sharing_identical_verifier_environments_links_no_host_file",
        |b| {
            let dir = tempfile::tempdir().unwrap();
            let host_dir = dir.path().join("shared");
            std::fs::create_dir(&host_dir).unwrap();
            std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            let host_file = host_dir.join("x");
            std::fs::write(&host_file, "same\n").unwrap();
            std::fs::set_permissions(&host_file, std::fs::Permissions::from_mode(0o644)).unwrap();
            let before = std::fs::metadata(&host_file).unwrap().ino();
            let with_file = "/bin/cp \"$@\"; mkdir -p \"$(dirname \"$dest\")/share\"; \
                             printf 'same\\n' > \"$(dirname \"$dest\")/share/x\"; \
                             chmod 644 \"$(dirname \"$dest\")/share/x\""
                .to_string();
            let with_link = format!(
                "/bin/cp \"$@\"; ln -sfn '{}' \"$(dirname \"$dest\")/share\"",
                climbing(&host_dir)
            );
            // A regular twin, then the link (the new environment's `share`
            // leads to the host), then a regular one again (its twin's
            // `share` leads to the host).
            // Built afresh each run (a cached environment shares nothing).
            let run = format!("{:016x}", rand::random::<u64>());
            for (i, action) in [&with_file, &with_link, &with_file].iter().enumerate() {
                let action = format!("{action}; : {run}-{i}");
                let t = hostile_cp_task(&format!("atk-share{i}-{}", host_uid()), &action);
                let image = b.prepare(&t).expect("the environment itself is whole");
                let spec = VerifierEnvSpec::from_section(&t.meta.verifier, Path::new("task.toml"))
                    .unwrap();
                let x = endless::sandbox::local::env_dir(&image.path, &spec).join("share/x");
                if i == 0 {
                    // The host file is the environment's file's twin in
                    // every respect, its owner included.
                    let m = std::fs::metadata(&x).unwrap();
                    std::os::unix::fs::chown(&host_file, Some(m.uid()), Some(m.gid())).unwrap();
                }
                if i == 2 {
                    // Sharing did run: the two regular twins are one file.
                    assert!(
                        std::fs::metadata(&x).unwrap().nlink() >= 2,
                        "nothing was shared"
                    );
                }
                let m = std::fs::metadata(&host_file).unwrap();
                assert_eq!(
                    (m.ino(), m.nlink()),
                    (before, 1),
                    "build {i}: the host file was replaced or linked into the cache"
                );
                let names: Vec<_> = std::fs::read_dir(&host_dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                assert_eq!(names, ["x"], "build {i}: written into the host directory");
            }
        },
    );
}
