//! Rootless sandboxes for an operator who is not root: with a subordinate
//! id range (`/etc/subuid`, `/etc/subgid`), tasks build and validate as
//! they do for root (`chown`, task users, `useradd` inside); without one,
//! `sandbox doctor` and the build error say what is missing and how an
//! administrator grants a range. The offline families and the Harbor
//! fixture corpus validate as they do for root. Each test makes a throwaway account (see
//! `support::range_user`; it needs root and skips otherwise) and runs the
//! real `endless` binary as it.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

mod support;
use support::range_user::RangeUser;

/// `endless --workspace <home>/ws ARGS...` as `user`.
fn endless_as(user: &RangeUser, args: &[&str]) -> Output {
    let exe = user.readable_copy(Path::new(env!("CARGO_BIN_EXE_endless")));
    user.command(&exe)
        .arg("--workspace")
        .arg(user.home.join("ws"))
        .arg("--create")
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// Every verdict of `tasks validate --all --json` passed (oracle included).
fn assert_all_valid(verdicts: &serde_json::Value, expected: usize) {
    let verdicts = verdicts.as_array().unwrap();
    assert_eq!(verdicts.len(), expected, "{verdicts:#?}");
    let failed: Vec<String> = verdicts
        .iter()
        .filter(|v| {
            !(v["ok"] == true
                && v["validation"]["oracle_passes"] == true
                && v["validation"]["final_fails_initially"] == true)
        })
        .map(|v| format!("{v:#}"))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// Files under `dir` (links not followed) owned by host uid `uid`.
fn owned_by(dir: &Path, uid: u32) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| e.path().to_path_buf())
        .collect()
}

#[test]
fn every_offline_family_builds_and_validates_for_a_user_with_a_range() {
    let Some(user) = RangeUser::create(true) else {
        return;
    };
    let doctor = endless_as(&user, &["sandbox", "doctor"]);
    assert!(
        text(&doctor).contains("rootless with subordinate ids"),
        "{}",
        text(&doctor)
    );
    // One task per family: the batch cycles through them.
    let families = endless::procgen::usable_families().0.len();
    let count = families.to_string();
    let generated = json(&endless_as(
        &user,
        &["generate", "--offline", "--count", &count, "--json"],
    ));
    assert_eq!(generated["written"], families);
    let verdicts = json(&endless_as(
        &user,
        &["tasks", "validate", "--all", "--json"],
    ));
    assert_all_valid(&verdicts, families);
    // Every task chowns its home to the task user (inside uid 1000): on the
    // host, that is an id of the range, not the operator's; what inside
    // root made is the range's first id, not the operator's either.
    let cache = user.home.join(".cache");
    for inside in [1000, 0] {
        let through_range = owned_by(&cache, user.host_uid(inside));
        assert!(
            !through_range.is_empty(),
            "no file under {} is owned by host uid {} (inside {inside})",
            cache.display(),
            user.host_uid(inside)
        );
    }
    let steps = cache.join("endless/sandbox/local/steps");
    let homes: Vec<PathBuf> = owned_by(&steps, user.ids.0)
        .into_iter()
        .filter(|p| {
            let rel = p.strip_prefix(&steps).unwrap();
            rel.components().any(|c| c.as_os_str() == "home")
        })
        .take(5)
        .collect();
    assert!(
        homes.is_empty(),
        "the operator owns sandbox files: {homes:?}"
    );
    // Those files are not the operator's to remove outside `endless`;
    // `sandbox unshare` runs the removal where they are.
    let cache_dir = cache.to_str().unwrap();
    let plain = user
        .command(Path::new("/bin/rm"))
        .args(["-rf", cache_dir])
        .output()
        .unwrap();
    assert!(
        !plain.status.success(),
        "rm -rf as the operator removed range files"
    );
    let out = endless_as(&user, &["sandbox", "unshare", "--", "rm", "-rf", cache_dir]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !cache.exists(),
        "sandbox unshare rm -rf left {}",
        cache.display()
    );
}

#[test]
fn the_harbor_corpus_validates_for_a_user_with_a_range_as_for_root() {
    let Some(user) = RangeUser::create(true) else {
        return;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor");
    let corpus = user.home.join("corpus");
    copy_tree(&fixtures, &corpus);
    // And a task with a service account, its files given to it, and a
    // task user other than root: what fails where a sandbox maps one id.
    let task = corpus.join("count-words-owned");
    copy_tree(&fixtures.join("count-words"), &task);
    let dockerfile = task.join("environment/Dockerfile");
    let mut text_of = std::fs::read_to_string(&dockerfile).unwrap();
    text_of.push_str(
        "RUN useradd -m -u 1234 worker && chown -R worker:worker /app \
         && test \"$(stat -c %u:%g /app/data/poem.txt)\" = 1234:1234\n",
    );
    std::fs::write(&dockerfile, text_of).unwrap();
    // Offline: `FROM ubuntu:24.04` becomes the host's directories.
    let config = user.home.join(".config/endless/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "[images]\npull = \"never\"\n").unwrap();
    for entry in walkdir::WalkDir::new(&user.home) {
        let p = entry.unwrap().into_path();
        std::os::unix::fs::lchown(&p, Some(user.ids.0), Some(user.ids.1)).unwrap();
    }
    // The same corpus as root, with a cache and the configuration of its own.
    let root_home = tempfile::tempdir().unwrap();
    let root_config = root_home.path().join("config/endless/config.toml");
    std::fs::create_dir_all(root_config.parent().unwrap()).unwrap();
    std::fs::copy(&config, &root_config).unwrap();
    let as_root = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_endless"))
            .arg("--workspace")
            .arg(root_home.path().join("ws"))
            .arg("--create")
            .args(args)
            .env("XDG_CACHE_HOME", root_home.path().join("cache"))
            .env("XDG_CONFIG_HOME", root_home.path().join("config"))
            .output()
            .unwrap()
    };
    let corpus_arg = corpus.to_str().unwrap();
    let by_user = endless_as(&user, &["tasks", "import", corpus_arg]);
    let by_root = as_root(&["tasks", "import", corpus_arg]);
    assert_eq!(
        text(&by_user).replace(&*user.home.to_string_lossy(), "~"),
        text(&by_root).replace(&*user.home.to_string_lossy(), "~"),
        "the import differs"
    );
    let validate = ["tasks", "validate", "--all", "--json"];
    let user_verdicts = outcomes(&endless_as(&user, &validate));
    let root_verdicts = outcomes(&as_root(&validate));
    assert_eq!(
        user_verdicts, root_verdicts,
        "the verdicts differ from root's"
    );
    for want in ["count-words", "count-words-owned", "drop-dir"] {
        assert!(
            user_verdicts.contains(&(want.to_string(), true, None)),
            "{want} is not valid: {user_verdicts:?}"
        );
    }
    assert!(
        user_verdicts.contains(&("wrong-oracle".into(), false, Some("oracle-fails".into()))),
        "{user_verdicts:?}"
    );
    let owned = owned_by(&user.home.join(".cache"), user.host_uid(1234));
    assert!(
        !owned.is_empty(),
        "the chowned files are not owned by host uid {} (inside 1234)",
        user.host_uid(1234)
    );
}

/// `(id, ok, first blocker's class)` of each verdict of `tasks validate
/// --json` (whose exit status says whether all are valid), sorted.
fn outcomes(out: &Output) -> Vec<(String, bool, Option<String>)> {
    let verdicts: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    let mut v: Vec<_> = verdicts
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                v["ok"] == true,
                v["validation"]["blocker"]["class"]
                    .as_str()
                    .map(str::to_string),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn without_a_range_doctor_and_build_errors_say_what_is_missing() {
    let Some(user) = RangeUser::create(false) else {
        return;
    };
    let doctor = text(&endless_as(&user, &["sandbox", "doctor"]));
    for want in [
        "subordinate ids",
        "maps only your own id",
        "apt-get",
        &format!(
            "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {}",
            user.name
        ),
    ] {
        assert!(doctor.contains(want), "doctor lacks `{want}`:\n{doctor}");
    }
    // An offline task's setup chowns its home to the task user.
    json(&endless_as(
        &user,
        &["generate", "--offline", "--count", "1", "--json"],
    ));
    let out = endless_as(&user, &["tasks", "validate", "--all", "--json"]);
    let all = text(&out);
    for want in [
        "Invalid argument",
        "maps only your own id",
        "usermod --add-subuids",
    ] {
        assert!(all.contains(want), "the build error lacks `{want}`:\n{all}");
    }
}

/// Copy the regular files and directories of `from` into `to`.
fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let dest = to.join(entry.path().strip_prefix(from).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}
