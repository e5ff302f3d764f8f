//! The per-step build cache of the `local` backend, on the host base: a
//! rebuild after a change runs the changed step and those after it only,
//! tasks sharing a prefix build it once (also at the same time), a failing
//! or hanging step names its line and leaves nothing in the cache, a
//! setup script may write into its working directory, and multi-stage
//! builds copy from their earlier stages (which may start from stages
//! before them); what a build would take from the cache is said without
//! building; a cache moved elsewhere serves its images again.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use endless::images::Progress;
use endless::sandbox::local::{build_record, LocalBackend, StepOutcome};
use endless::sandbox::{Backend, Image, SandboxError, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};

const T: Duration = Duration::from_secs(30);

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn backend(cache: &Path) -> Option<LocalBackend> {
    if !root() {
        eprintln!("SKIP: these builds run in mapped user namespaces (root)");
        return None;
    }
    match LocalBackend::new(cache) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            None
        }
    }
}

fn docker_task(id: &str, dockerfile: &str) -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "nothing".into(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = id.into();
    t.environment.insert_text("Dockerfile", dockerfile);
    t
}

/// Ten steps on the host base (no `FROM`): files in the root overlay and
/// in a system directory, a deletion, ENV and WORKDIR, and a random token
/// in the first and the last step.
fn ten_steps(step9: &str) -> String {
    format!(
        "RUN head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /opt/s1\n\
         RUN mkdir -p /usr/local/share/endless && cp /opt/s1 /usr/local/share/endless/s2\n\
         RUN echo three > /opt/s3 && echo gone > /opt/s3-gone\n\
         ENV STEP4=four\n\
         RUN rm /opt/s3-gone && echo $STEP4 > /opt/s5\n\
         WORKDIR /opt/work\n\
         RUN echo six > here.txt\n\
         RUN mkdir -p /opt/dir && echo a > /opt/dir/a\n\
         RUN {step9}\n\
         RUN head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /opt/s10\n"
    )
}

fn outcomes(image: &Image) -> Vec<(usize, StepOutcome)> {
    build_record(image)
        .iter()
        .filter(|s| s.stage.is_none())
        .map(|s| (s.index, s.outcome))
        .collect()
}

fn run(b: &LocalBackend, image: &Image, cmd: &str) -> String {
    let mut s = b.start(image, &SessionOptions::default()).unwrap();
    let out = s.exec(cmd, T).unwrap().output;
    s.close();
    out
}

/// Complete layer directories in the step cache.
fn cached_layers(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("local/steps"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("step.json").is_file())
                .count()
        })
        .unwrap_or(0)
}

fn leftovers(cache: &Path) -> Vec<String> {
    ["local/steps", "local/images"]
        .iter()
        .flat_map(|d| {
            std::fs::read_dir(cache.join(d))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".build-"))
        .collect()
}

#[test]
fn a_rebuild_after_a_change_starts_at_the_changed_step() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let first = b
        .prepare(&docker_task("ten", &ten_steps("echo nine > /opt/s9")))
        .unwrap();
    use StepOutcome::{Built, Cached, Config};
    let cold: Vec<(usize, StepOutcome)> = (0..=11)
        .map(|i| (i, if i == 4 { Config } else { Built }))
        .collect();
    assert_eq!(outcomes(&first), cold);
    let second = b
        .prepare(&docker_task(
            "ten-changed",
            &ten_steps("echo NINE > /opt/s9"),
        ))
        .unwrap();
    assert_ne!(first.hash, second.hash);
    let warm: Vec<(usize, StepOutcome)> = (0..=11)
        .map(|i| match i {
            4 => (i, Config),
            9.. => (i, Built),
            _ => (i, Cached),
        })
        .collect();
    assert_eq!(
        outcomes(&second),
        warm,
        "only steps 9, 10 and the finish ran"
    );
    let show = "cat /opt/s1; echo; cat /usr/local/share/endless/s2; echo; cat /opt/s3 /opt/s5 \
                /opt/work/here.txt /opt/dir/a /opt/s9; cat /opt/s10; echo; \
                ls /opt/s3-gone 2>&1; echo $STEP4; id -un";
    let a = run(&b, &first, show);
    let c = run(&b, &second, show);
    let (a, c): (Vec<&str>, Vec<&str>) = (a.lines().collect(), c.lines().collect());
    assert_eq!(a[0].len(), 24, "{a:?}");
    assert_eq!(a[0], a[1], "a system directory's file: {a:?}");
    assert_eq!(a[0], c[0], "step 1 was not run again: {a:?} {c:?}");
    assert_eq!(&a[2..7], ["three", "four", "six", "a", "nine"], "{a:?}");
    assert_eq!(c[6], "NINE");
    assert_ne!(a[7], c[7], "step 10 ran again: {a:?} {c:?}");
    assert!(
        a[8].contains("No such file"),
        "a deletion in a later step: {a:?}"
    );
    assert_eq!(&a[9..], ["four", "user"]);
    // The images copy nothing: they stack the cached layers, shared by
    // both for the steps before 9, and a file shows with its own link
    // count (a count of 2 would change what gzip and tar do).
    for p in ["opt/s1", "opt/s9"] {
        assert!(!first.path.join("root").join(p).exists(), "{p} copied");
        for i in [&first, &second] {
            assert_eq!(run(&b, i, &format!("stat -c %h /{p}")).trim(), "1", "{p}");
        }
    }
    let steps_dir = cache.path().join("local/steps");
    let (l1, l2) = (first.step_lowers("root"), second.step_lowers("root"));
    assert!(l1.iter().all(|l| l.starts_with(&steps_dir)), "{l1:?}");
    assert!(first.step_lowers("sys/usr").len() == 1, "{first:?}");
    let shared: Vec<_> = l1.iter().filter(|l| l2.contains(l)).collect();
    assert!(
        shared.len() >= 5 && l1.len() > shared.len(),
        "{l1:?} {l2:?}"
    );
    // The same task again is the same image, built once.
    let again = b
        .prepare(&docker_task("ten", &ten_steps("echo nine > /opt/s9")))
        .unwrap();
    assert_eq!(again, first);
    assert!(leftovers(cache.path()).is_empty());
}

/// `n` steps on the host base: each adds a file and deletes the one two
/// steps back (a whiteout in its layer); every tenth replaces a directory
/// (an opaque directory in its layer).
fn deep_steps(n: usize) -> String {
    let mut s = String::from("RUN mkdir -p /opt/deep/sub && echo base > /opt/deep/sub/first\n");
    for i in 1..=n {
        s.push_str(&format!(
            "RUN echo {i} > /opt/deep/f{i} && rm -f /opt/deep/f{}\n",
            i.saturating_sub(2)
        ));
        if i % 10 == 0 {
            s.push_str(&format!(
                "RUN rm -rf /opt/deep/sub && mkdir /opt/deep/sub && echo {i} > /opt/deep/sub/at{i}\n"
            ));
        }
    }
    s
}

/// What a session on a [`deep_steps`] image shows: the last two files,
/// the replaced directory, and whether the deleted files are gone.
fn deep_show(n: usize) -> String {
    format!(
        "cd /opt/deep && echo $(cat f{} f{n}) / $(ls sub) / $(cat sub/*) / \
         $(for f in f1 f2 f{}; do test -e $f || echo no-$f; done)",
        n - 1,
        n - 2
    )
}

#[test]
fn a_moved_cache_builds_its_images_again_from_their_cached_steps() {
    let top = tempfile::tempdir().unwrap();
    let (old, new) = (top.path().join("old"), top.path().join("new"));
    std::fs::create_dir(&old).unwrap();
    let Some(b) = backend(&old) else {
        return;
    };
    let task = docker_task("moved", &ten_steps("echo nine > /opt/s9"));
    let first = b.prepare(&task).unwrap();
    assert_eq!(run(&b, &first, "cat /opt/s9").trim(), "nine");
    drop(b);
    // The image's record names its layers where they were.
    std::fs::rename(&old, &new).unwrap();
    let b = backend(&new).unwrap();
    let again = b.prepare(&task).unwrap();
    assert_eq!(again.hash, first.hash);
    let layers: Vec<_> = again.step_layers.values().flatten().collect();
    assert!(!layers.is_empty());
    assert!(
        layers.iter().all(|p| p.starts_with(&new)),
        "layers of the old place: {layers:?}"
    );
    assert!(
        outcomes(&again)
            .iter()
            .all(|(_, o)| *o != StepOutcome::Built),
        "{:?}",
        outcomes(&again)
    );
    assert_eq!(run(&b, &again, "cat /opt/s9").trim(), "nine");
}

#[test]
fn deep_stacks_mount_past_a_page_and_are_merged_past_the_cap() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    // 66 step layers: their paths take more than mount(2)'s one page.
    let image = b.prepare(&docker_task("deep", &deep_steps(60))).unwrap();
    let lowers = image.step_lowers("root");
    let bytes: usize = lowers.iter().map(|l| l.as_os_str().len() + 1).sum();
    assert!(
        lowers.len() > 60 && bytes > 4096,
        "{} layers, {bytes} bytes",
        lowers.len()
    );
    assert!(!image.path.join("root/opt/deep").exists(), "nothing copied");
    assert_eq!(
        run(&b, &image, "ls /opt/deep")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["f59", "f60", "sub"]
    );
    assert_eq!(
        run(&b, &image, &deep_show(60)).trim(),
        "59 60 / at60 / 60 / no-f1 no-f2 no-f58"
    );
    // Past the cap the layers are merged into the image (whiteouts and
    // opaque directories applied as overlayfs does); the first 60 steps
    // come from the cache.
    let n = 130;
    let deeper = b.prepare(&docker_task("deeper", &deep_steps(n))).unwrap();
    assert!(
        n + n / 10 > endless::sandbox::local::MAX_STEP_LAYERS,
        "the test passes the cap"
    );
    assert!(deeper.step_layers.is_empty(), "{:?}", deeper.step_layers);
    assert!(deeper.path.join("root/opt/deep/f130").is_file());
    // (f128 is a whiteout there.)
    assert!(!deeper.path.join("root/opt/deep/f128").is_file());
    assert_eq!(
        run(&b, &deeper, &deep_show(n)).trim(),
        "129 130 / at130 / 130 / no-f1 no-f2 no-f128"
    );
    let cached = outcomes(&deeper)
        .iter()
        .filter(|(_, o)| *o == StepOutcome::Cached)
        .count();
    assert!(cached >= 66, "{cached} steps from the cache");
}

#[test]
fn pruning_frees_an_evicted_images_own_layers_and_keeps_those_in_use() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let dockerfile =
        |own: &str| format!("RUN echo shared > /opt/shared\nRUN echo {own} > /opt/own\n");
    let keep = b
        .prepare(&docker_task("keep", &dockerfile("keep")))
        .unwrap();
    let old = b.prepare(&docker_task("old", &dockerfile("old"))).unwrap();
    // `old` was last used two hours ago.
    let ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    for f in ["last-use", "image.json"] {
        let file = std::fs::File::options()
            .append(true)
            .open(old.path.join(f))
            .unwrap();
        file.set_modified(ago).unwrap();
    }
    let kept: Vec<_> = keep.step_layers.values().flatten().cloned().collect();
    let own: Vec<_> = old
        .step_layers
        .values()
        .flatten()
        .filter(|l| !kept.contains(l))
        .cloned()
        .collect();
    assert!(
        !own.is_empty() && kept.len() > own.len(),
        "{kept:?} {own:?}"
    );
    let store = endless::images::ImageStore::new(&cache.path().join("images"));
    // A lock held for a moment (a forked helper of a parallel test shares
    // our descriptors until it execs or exits) makes prune skip the image:
    // try again.
    let mut removed = 0;
    for _ in 0..50 {
        let report = endless::sandbox::local::prune_keep_recent(cache.path(), &store, 1).unwrap();
        removed += report.built_images;
        if !old.path.exists() && own.iter().all(|l| !l.exists()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(removed, 1);
    assert!(!old.path.exists());
    assert!(own.iter().all(|l| !l.exists()), "{own:?}");
    assert!(kept.iter().all(|l| l.is_dir()), "{kept:?}");
    assert_eq!(
        run(&b, &keep, "cat /opt/shared /opt/own").trim(),
        "shared\nkeep"
    );
}

#[test]
fn a_live_session_keeps_its_image_and_layers_through_eviction() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let image = b
        .prepare(&docker_task(
            "live",
            "RUN echo one > /opt/one\nRUN echo two > /usr/local/two\n",
        ))
        .unwrap();
    let layers: Vec<_> = image.step_layers.values().flatten().cloned().collect();
    assert!(!layers.is_empty(), "{:?}", image.step_layers);
    let mut s = b.start(&image, &SessionOptions::default()).unwrap();
    // Last used two hours ago: only the session's hold keeps it now.
    let ago = std::time::SystemTime::now() - Duration::from_secs(7200);
    let age = |image: &Image| {
        for f in ["last-use", "image.json"] {
            let file = std::fs::File::options()
                .append(true)
                .open(image.path.join(f))
                .unwrap();
            file.set_modified(ago).unwrap();
        }
    };
    age(&image);
    let store = endless::images::ImageStore::new(&cache.path().join("images"));
    let evict = || endless::sandbox::local::enforce_cap(cache.path(), &store, 0, &[]).unwrap();
    let report = evict();
    assert_eq!(report.built_images, 0, "{report:?}");
    assert!(image.path.join("image.json").is_file());
    assert!(layers.iter().all(|l| l.is_dir()), "{layers:?}");
    assert_eq!(
        s.exec("cat /opt/one /usr/local/two", T)
            .unwrap()
            .output
            .trim(),
        "one\ntwo"
    );
    // Ended, it holds nothing: the next eviction takes the image (a lock
    // held for a moment by a forked helper of a parallel test: try again).
    s.close();
    for _ in 0..50 {
        if evict().built_images == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!image.path.exists());
}

#[test]
fn a_failing_step_names_its_line_and_output_and_caches_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let bad = "RUN echo first > /opt/first\n\
               ENV A=1\n\
               # a comment line\n\
               RUN echo boom-output && exit 3\n\
               RUN echo never\n";
    match b.prepare(&docker_task("bad", bad)).unwrap_err() {
        SandboxError::SetupStep {
            index,
            step,
            code,
            output,
            ..
        } => {
            assert_eq!((index, code), (3, Some(3)));
            assert!(
                step.contains("environment/Dockerfile line 4: RUN echo boom-output"),
                "{step}"
            );
            assert_eq!(output, "boom-output", "the step's output alone");
        }
        e => panic!("unexpected {e}"),
    }
    assert_eq!(
        cached_layers(cache.path()),
        2,
        "the account and step 1, not step 3"
    );
    assert!(
        leftovers(cache.path()).is_empty(),
        "{:?}",
        leftovers(cache.path())
    );
    // Fixed, the build starts at the fixed step.
    let good = bad.replace("exit 3", "true");
    let image = b.prepare(&docker_task("bad", &good)).unwrap();
    let record = outcomes(&image);
    assert_eq!(record[1], (1, StepOutcome::Cached));
    assert_eq!(record[3], (3, StepOutcome::Built));
    // A USER that does not exist is named when a step switches to it.
    let ghost = "RUN true\nUSER ghost\nRUN echo x\n";
    let msg = b
        .prepare(&docker_task("ghost", ghost))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("line 2: USER ghost") && msg.contains("ghost"),
        "{msg}"
    );
}

#[test]
fn a_hanging_step_is_killed_and_leaves_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let b = b.with_build_timeout(Duration::from_secs(4));
    let t0 = Instant::now();
    let err = b
        .prepare(&docker_task(
            "hangs",
            "RUN echo before\nRUN echo started && sleep 600\n",
        ))
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let msg = err.to_string();
    assert!(
        msg.contains("line 2: RUN echo started") && msg.contains("timed out after 4s"),
        "{msg}"
    );
    assert!(msg.contains("started"), "the step's output: {msg}");
    assert_eq!(cached_layers(cache.path()), 2);
    assert!(
        leftovers(cache.path()).is_empty(),
        "{:?}",
        leftovers(cache.path())
    );
}

#[test]
fn shared_prefixes_build_once_even_at_the_same_time() {
    let cache = tempfile::tempdir().unwrap();
    if backend(cache.path()).is_none() {
        return;
    }
    let prefix =
        "RUN sleep 1 && head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /opt/token\n";
    let tasks = [
        docker_task("left", &format!("{prefix}RUN echo left > /opt/side\n")),
        docker_task("right", &format!("{prefix}RUN echo right > /opt/side\n")),
        docker_task("left", &format!("{prefix}RUN echo left > /opt/side\n")),
    ];
    // Separate backends on one cache, as separate processes would be.
    let images: Vec<Image> = std::thread::scope(|s| {
        let handles: Vec<_> = tasks
            .iter()
            .map(|t| {
                let dir = cache.path().to_path_buf();
                s.spawn(move || LocalBackend::new(&dir).unwrap().prepare(t).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(images[0], images[2], "one image for one task");
    let built_step_1 = images[..2]
        .iter()
        .filter(|i| outcomes(i)[1] == (1, StepOutcome::Built))
        .count();
    assert_eq!(built_step_1, 1, "the shared step ran once");
    let b = backend(cache.path()).unwrap();
    let l = run(&b, &images[0], "cat /opt/token; echo; cat /opt/side");
    let r = run(&b, &images[1], "cat /opt/token; echo; cat /opt/side");
    assert_eq!(l.lines().next(), r.lines().next());
    assert!(
        l.trim_end().ends_with("left") && r.trim_end().ends_with("right"),
        "{l} {r}"
    );
    assert!(leftovers(cache.path()).is_empty());
}

#[test]
fn a_setup_script_may_write_into_its_working_directory() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let mut t = docker_task("writes", "");
    t.environment = FileTree::default();
    t.environment.insert_text("data/input.txt", "input\n");
    t.environment.insert_text(
        "setup.sh",
        "set -e\necho made-here > generated.txt\necho more >> data/input.txt\n\
         mkdir -p /opt/app && cp generated.txt data/input.txt /opt/app/\n",
    );
    let image = b.prepare(&t).unwrap();
    let out = run(
        &b,
        &image,
        "cat /opt/app/generated.txt /opt/app/input.txt; ls /run/endless-build 2>&1",
    );
    assert!(out.starts_with("made-here\ninput\nmore\n"), "{out}");
    assert!(
        out.contains("No such file"),
        "the context is not in the image: {out}"
    );
    // The task's own files are untouched.
    assert_eq!(t.environment.0["data/input.txt"].bytes, b"input\n");
}

#[test]
fn multi_stage_builds_copy_from_earlier_stages() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let dockerfile = |tool: &str, last: &str| {
        format!(
            "FROM host AS build\n\
             RUN mkdir -p /out && echo {tool} > /out/tool && chmod 755 /out/tool && echo junk > /out/junk\n\
             FROM host AS unused\n\
             RUN echo this stage is not needed && exit 1\n\
             FROM host\n\
             COPY --from=build /out/tool /usr/local/bin/\n\
             RUN cat /usr/local/bin/tool > /opt/copied && echo {last} > /opt/last\n"
        )
    };
    let image = b
        .prepare(&docker_task("stages", &dockerfile("compiled", "one")))
        .unwrap();
    let out = run(
        &b,
        &image,
        "cat /opt/copied /opt/last; ls -l /usr/local/bin/tool | cut -c1-10; ls /out 2>&1",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..3], ["compiled", "one", "-rwxr-xr-x"], "{out}");
    assert!(
        lines[3].contains("No such file"),
        "the stage's own files stay out: {out}"
    );
    let record = build_record(&image);
    let stage_steps: Vec<(Option<usize>, usize)> = record
        .iter()
        .filter(|s| s.stage.is_some())
        .map(|s| (s.stage, s.index))
        .collect();
    assert_eq!(
        stage_steps,
        vec![(Some(0), 1)],
        "only the stage copied from is built"
    );
    // A change after the COPY keeps the stage and the copy cached ...
    let later = b
        .prepare(&docker_task("stages", &dockerfile("compiled", "two")))
        .unwrap();
    let r = build_record(&later);
    assert!(
        r.iter()
            .filter(|s| s.index <= 1)
            .all(|s| s.outcome == StepOutcome::Cached),
        "{r:?}"
    );
    // ... a change in the stage runs it and the copy again.
    let changed = b
        .prepare(&docker_task("stages", &dockerfile("rebuilt", "two")))
        .unwrap();
    let r = build_record(&changed);
    assert!(
        r.iter()
            .all(|s| s.index == 0 || s.outcome != StepOutcome::Cached),
        "{r:?}"
    );
    assert!(run(&b, &changed, "cat /opt/copied").starts_with("rebuilt"));
    // A stage that does not exist is named with its line.
    let msg = b
        .prepare(&docker_task(
            "stages",
            "FROM host\nCOPY --from=nowhere /a /b\n",
        ))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("line 2") && msg.contains("nowhere"), "{msg}");
}

#[test]
fn a_stage_may_start_from_an_earlier_stage() {
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let dockerfile = "FROM host AS base\n\
                      RUN echo base > /opt/base-file\n\
                      ENV FROM_BASE=yes\n\
                      FROM base AS tools\n\
                      RUN echo tool-$FROM_BASE > /opt/tool\n\
                      FROM base AS docs\n\
                      RUN echo docs > /opt/docs\n\
                      FROM base\n\
                      COPY --from=tools /opt/tool /opt/tool-copy\n\
                      COPY --from=docs /opt/docs /opt/docs-copy\n\
                      RUN echo $FROM_BASE > /opt/env\n";
    let reported = std::sync::Mutex::new(Vec::new());
    let record = |p: &Progress| reported.lock().unwrap().push(p.clone());
    let image = b
        .prepare_reporting(&docker_task("from-stage", dockerfile), &record)
        .unwrap();
    // Every step is reported, numbered through the whole build: the two
    // stages (3 steps each), then the image (its account, 5 steps, finish).
    let steps: Vec<(usize, usize, bool)> = reported
        .into_inner()
        .unwrap()
        .iter()
        .map(|p| match p {
            Progress::Step {
                index,
                steps,
                cached,
                ..
            } => (*index, *steps, *cached),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        steps.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
        (1..=13).map(|i| (i, 13)).collect::<Vec<_>>()
    );
    assert!(
        steps[3].2,
        "the second stage's first step is cached: {steps:?}"
    );
    let out = run(
        &b,
        &image,
        "cat /opt/base-file /opt/tool-copy /opt/docs-copy /opt/env; ls /opt/tool /opt/docs 2>&1 | wc -l",
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["base", "tool-yes", "docs", "yes", "2"],
        "{out}"
    );
    // Both stages go on from `base`: its steps are built once, in the
    // first, and taken from the cache in the second.
    let record = build_record(&image);
    let of_stage = |i: usize| -> Vec<(usize, StepOutcome)> {
        record
            .iter()
            .filter(|s| s.stage == Some(i))
            .map(|s| (s.index, s.outcome))
            .collect()
    };
    assert_eq!(
        of_stage(1),
        [
            (1, StepOutcome::Built),
            (2, StepOutcome::Config),
            (3, StepOutcome::Built)
        ],
        "{record:?}"
    );
    assert_eq!(
        of_stage(2),
        [
            (1, StepOutcome::Cached),
            (2, StepOutcome::Config),
            (3, StepOutcome::Built)
        ],
        "{record:?}"
    );
    assert!(of_stage(0).is_empty(), "`base` itself is not built apart");
}

#[test]
fn the_build_state_says_which_steps_a_build_would_run() {
    use endless::sandbox::local::StepCacheState::{Cached, Config, Runs};
    let cache = tempfile::tempdir().unwrap();
    let Some(b) = backend(cache.path()) else {
        return;
    };
    let dockerfile =
        |last: &str| format!("RUN echo one > /opt/one\nENV X=1\nRUN echo {last} > /opt/last\n");
    let state = |t: &Task| {
        let env = endless::workbench::task_env(&b, t);
        assert_eq!(env.task_id, "state");
        let s = env.build.unwrap();
        assert_eq!((s.base, s.note), (None, None), "the host base");
        (
            s.built.is_some(),
            s.steps.iter().map(|s| s.cache).collect::<Vec<_>>(),
        )
    };
    // The account, RUN, ENV, RUN, the finish.
    let task = docker_task("state", &dockerfile("two"));
    assert_eq!(state(&task), (false, vec![Runs, Runs, Config, Runs, Runs]));
    b.prepare(&task).unwrap();
    let (built, after) = state(&task);
    assert!(built);
    assert!(
        after.iter().all(|s| matches!(s, Cached(_) | Config)),
        "{after:?}"
    );
    assert!(
        matches!(after[1], Cached(n) if n >= 4),
        "/opt/one: {after:?}"
    );
    // A change in the last RUN: it and the finish would run again.
    let changed = docker_task("state", &dockerfile("three"));
    let (built, steps) = state(&changed);
    assert!(!built);
    assert!(
        matches!(steps[..], [Cached(_), Cached(_), Config, Runs, Runs]),
        "{steps:?}"
    );
    // A base that is not stored is named, and nothing is pulled.
    let elsewhere = docker_task("state", "FROM 127.0.0.1:9/none:1\nRUN true\n");
    let env = endless::workbench::task_env(&b, &elsewhere);
    assert_eq!(env.written.as_deref(), Some("127.0.0.1:9/none:1"));
    let why = env.build.unwrap_err();
    assert!(
        why.contains("127.0.0.1:9/none:1") && why.contains("not stored yet"),
        "{why}"
    );
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs on {}", dir.path().display());
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn a_full_disk_fails_the_step_or_the_unpack_and_leaves_nothing() {
    if !root() {
        eprintln!("SKIP: mounting a small tmpfs needs root");
        return;
    }
    // A build step that fills the disk.
    let disk = Tmpfs::mount("48m");
    let Some(b) = backend(disk.0.path()) else {
        return;
    };
    let err = b
        .prepare(&docker_task(
            "fills",
            "RUN echo small > /opt/small\nRUN head -c 100000000 /dev/zero > /opt/big\n",
        ))
        .unwrap_err();
    // The run's infrastructure error, named, never the task's failure.
    assert!(matches!(err, SandboxError::DiskFull { .. }), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("line 2: RUN head -c")
            && err.contains("the disk is full")
            && err.contains("not the task's failure"),
        "{err}"
    );
    assert_eq!(
        cached_layers(disk.0.path()),
        2,
        "the account and step 1 only"
    );
    assert!(
        leftovers(disk.0.path()).is_empty(),
        "{:?}",
        leftovers(disk.0.path())
    );
    let images: Vec<_> = std::fs::read_dir(disk.0.path().join("local/images"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(images.is_empty(), "no image registered");
    // The space is back: a build that fits succeeds, from the cached step.
    let image = b
        .prepare(&docker_task(
            "fits",
            "RUN echo small > /opt/small\nRUN echo ok > /opt/ok\n",
        ))
        .unwrap();
    assert_eq!(outcomes(&image)[1], (1, StepOutcome::Cached));
    drop(b);

    // A step that takes more than half the disk: its image used to copy
    // it (and ran out of space); it stacks the cached layer now.
    let disk = Tmpfs::mount("48m");
    let Some(b) = backend(disk.0.path()) else {
        return;
    };
    let image = b
        .prepare(&docker_task(
            "stacked",
            "RUN head -c 30000000 /dev/zero > /opt/thirty\n",
        ))
        .unwrap();
    let own = endless::sandbox::local::disk_bytes(&image.path);
    assert!(own < 1_000_000, "the image's own layer takes {own} bytes");
    assert_eq!(run(&b, &image, "stat -c %s /opt/thirty").trim(), "30000000");
    assert!(
        leftovers(disk.0.path()).is_empty(),
        "{:?}",
        leftovers(disk.0.path())
    );
    drop(b);

    // An image whose layer unpacks to more than the disk holds.
    let disk = Tmpfs::mount("24m");
    let store = endless::images::ImageStore::new(&disk.0.path().join("store"));
    let mut tar = tar::Builder::new(Vec::new());
    for i in 0..4 {
        let mut h = tar::Header::new_gnu();
        h.set_size(10 << 20);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(
            &mut h,
            format!("opt/zeros{i}"),
            std::io::repeat(0).take(10 << 20),
        )
        .unwrap();
    }
    let layer = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&tar.into_inner().unwrap()).unwrap();
        e.finish().unwrap()
    };
    let layout = tempfile::tempdir().unwrap();
    write_layout(layout.path(), "example.org/zeros:1", &layer);
    endless::images::load(&store, layout.path(), None).unwrap();
    let reference = endless::images::ImageRef::parse("example.org/zeros:1").unwrap();
    let stored = store.get(&reference).unwrap();
    let e = store
        .layer_dirs(&stored, endless::images::LayerOwners::OURS)
        .unwrap_err()
        .to_string();
    assert!(e.contains("No space left on device"), "{e}");
    let count = |d: &str| {
        std::fs::read_dir(disk.0.path().join("store").join(d))
            .map(|rd| rd.count())
            .unwrap_or(0)
    };
    assert_eq!(
        (count("layers"), count("tmp")),
        (0, 0),
        "nothing half-unpacked"
    );
}

/// An OCI layout of one image with one gzipped layer.
fn write_layout(dir: &Path, name: &str, layer: &[u8]) {
    use sha2::Digest;
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let hex = hex::encode(sha2::Sha256::digest(bytes));
        std::fs::write(blobs.join(&hex), bytes).unwrap();
        (format!("sha256:{hex}"), bytes.len())
    };
    let (l, ls) = put(layer);
    let (c, cs) = put(br#"{"architecture":"amd64","os":"linux","config":{}}"#);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": cs},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l, "size": ls}],
    });
    let (m, ms) = put(&serde_json::to_vec(&manifest).unwrap());
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m, "size": ms,
                       "annotations": {"org.opencontainers.image.ref.name": name}}],
    });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}
