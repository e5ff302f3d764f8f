//! Eviction under `[images] max_store_gb` while work runs (issue 52,
//! defect 2): however tiny the cap and however long ago things were last
//! used, a build keeps the stored images it builds on and copies from
//! (`COPY --from` an image: uv's, in Terminal-Bench 2), and a live session
//! keeps its image.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use endless::images::{register_rootfs, ImageStore};
use endless::sandbox::local::{enforce_cap, image_store_dir, LocalBackend};
use endless::sandbox::{Backend, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};

mod support;
use support::registry::debian_base_tar;

const T: Duration = Duration::from_secs(30);

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
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

/// A one-file image (`/tool`), as uv's is.
fn tools_tar(path: &Path) {
    let mut tar = tar::Builder::new(std::fs::File::create(path).unwrap());
    let mut header = tar::Header::new_gnu();
    header.set_size(5);
    header.set_mode(0o755);
    header.set_cksum();
    tar.append_data(&mut header, "tool", &b"tool\n"[..])
        .unwrap();
    tar.finish().unwrap();
}

/// Make every file directly in `dir` look last used three hours ago.
fn age(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_file() {
            let f = std::fs::File::options()
                .append(true)
                .open(e.path())
                .unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(3 * 3600))
                .unwrap();
        }
    }
}

/// Whether a process runs `sleep <arg>`.
fn sleeping(arg: &str) -> bool {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| c == want.as_bytes())
}

#[test]
fn eviction_with_a_tiny_cap_takes_nothing_a_build_or_a_session_uses() {
    if !root() {
        eprintln!("SKIP: these builds run in mapped user namespaces (root)");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(&image_store_dir(cache.path()));
    register_rootfs(&store, "local/debian:bookworm", &debian_base_tar()).unwrap();
    let tools = cache.path().join("tools.tar");
    tools_tar(&tools);
    register_rootfs(&store, "local/tools:1", &tools).unwrap();
    let settings = endless::config::ImagesConfig {
        pull: endless::config::PullPolicy::Never,
        fallback: endless::config::BaseFallback::Error,
        ..Default::default()
    };
    let b = LocalBackend::new(cache.path())
        .unwrap()
        .with_images(settings);
    let live = b
        .prepare(&docker_task(
            "live",
            "FROM local/debian:bookworm\nRUN echo live > /opt/live\n",
        ))
        .unwrap();
    let mut session = b.start(&live, &SessionOptions::default()).unwrap();
    let building = docker_task(
        "building",
        "FROM local/debian:bookworm\nRUN sleep 7.77\n\
         COPY --from=local/tools:1 /tool /opt/tool\n\
         RUN ls -d /var/lib/apt/lists/partial && cat /opt/tool\n",
    );
    // While the build runs (its `sleep`), everything is made last used
    // long ago, so that only holds keep anything, and the cache evicted.
    let evicting = std::thread::spawn({
        let cache = cache.path().to_path_buf();
        let live = live.path.clone();
        move || {
            let t0 = Instant::now();
            while !sleeping("7.77") {
                assert!(
                    t0.elapsed() < Duration::from_secs(120),
                    "the build never ran"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            age(&image_store_dir(&cache).join("refs"));
            age(&live);
            let store = ImageStore::new(&image_store_dir(&cache));
            enforce_cap(&cache, &store, 0, &[]).unwrap()
        }
    });
    let built = b.prepare(&building);
    let report = evicting.join().unwrap();
    eprintln!("evicted while building: {report:?}");
    let built = built.expect("the build keeps the images it builds on and copies from");
    assert_eq!(
        session.exec("cat /opt/live", T).unwrap().output.trim(),
        "live"
    );
    session.close();
    let mut s = b.start(&built, &SessionOptions::default()).unwrap();
    assert_eq!(s.exec("cat /opt/tool", T).unwrap().output.trim(), "tool");
    s.close();
}
