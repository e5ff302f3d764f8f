//! Container images end to end, without the internet: Debian's
//! `docker-registry` serves a registry on 127.0.0.1 (a random port), the
//! test builds a small image from host binaries (two layers, with a
//! whiteout, an opaque directory and a hard link) and pushes it with
//! `oci-client`; then `endless` pulls it, a task builds `FROM` it and runs,
//! and its tests pass through the host's verifier runtime. Tampered blobs
//! and unknown images are refused. Run as root, the rootless test runs
//! again as uid 65534.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use endless::images::{pull, pull_from, ImageError, ImageRef, ImageStore, Progress};
use endless::sandbox::local::{image_store_dir, LocalBackend};
use endless::sandbox::{Backend, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};
use endless::verify::{verify, TestSet};
use oci_client::client::{Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use sha2::{Digest, Sha256};

mod support;
use support::registry::{debian_base_tar, start_registry};

const T: Duration = Duration::from_secs(30);

/// The files `bins` need: (the path they are loaded by, with its directory
/// resolved; the file's canonical path). The two differ for versioned
/// shared libraries (`libtinfo.so.6 -> libtinfo.so.6.4`).
fn closure(bins: &[&str]) -> BTreeSet<(PathBuf, PathBuf)> {
    let mut files = BTreeSet::new();
    let mut add_path = |listed: &Path| {
        let Ok(canon) = std::fs::canonicalize(listed) else {
            return;
        };
        let dir = listed.parent().and_then(|d| std::fs::canonicalize(d).ok());
        let name = listed.file_name();
        let as_loaded = match (dir, name) {
            (Some(d), Some(n)) => d.join(n),
            _ => canon.clone(),
        };
        files.insert((as_loaded, canon));
    };
    for b in bins {
        add_path(Path::new(b));
        let out = Command::new("ldd").arg(b).output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let lib = line
                .split("=>")
                .last()
                .and_then(|s| s.split_whitespace().next())
                .filter(|s| s.starts_with('/'));
            if let Some(lib) = lib {
                add_path(Path::new(lib));
            }
        }
    }
    files
}

fn gz(tar: Vec<u8>) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&tar).unwrap();
    e.finish().unwrap()
}

fn add(b: &mut tar::Builder<Vec<u8>>, path: &str, body: &[u8], mode: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(mode);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, path, body).unwrap();
}

fn add_dir(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(mode);
    h.set_entry_type(tar::EntryType::Directory);
    b.append_data(&mut h, path, &[][..]).unwrap();
}

fn add_link(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o777);
    h.set_entry_type(kind);
    b.append_link(&mut h, path, target).unwrap();
}

/// The two uncompressed layers of the test image.
fn layers() -> (Vec<u8>, Vec<u8>) {
    let mut base = tar::Builder::new(Vec::new());
    for d in [
        "usr",
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "etc",
        "home",
        "root",
        "opt",
        "opt/stuff",
        "run",
        "var",
    ] {
        add_dir(&mut base, d, 0o755);
    }
    add_dir(&mut base, "tmp", 0o1777);
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        add_link(&mut base, tar::EntryType::Symlink, link, target);
    }
    let bins = [
        "/bin/bash",
        "/bin/sh",
        "/bin/ls",
        "/bin/cat",
        "/bin/mkdir",
        "/usr/bin/id",
        "/bin/rm",
        "/bin/cp",
        "/bin/grep",
        "/bin/sed",
        "/bin/chown",
        "/bin/chmod",
        "/usr/bin/env",
        "/usr/bin/setpriv",
        "/usr/sbin/runuser",
        "/usr/bin/wc",
        "/usr/bin/dirname",
        "/bin/sleep",
        "/usr/bin/tr",
    ];
    let mut made: BTreeSet<String> = ["usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64"]
        .iter()
        .map(|d| d.to_string())
        .collect();
    let needed = closure(&bins);
    let canonical: BTreeSet<PathBuf> = needed.iter().map(|(_, c)| c.clone()).collect();
    for file in &canonical {
        let rel = file.strip_prefix("/").unwrap().to_path_buf();
        let mut ancestors: Vec<PathBuf> = rel
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect();
        ancestors.reverse();
        for a in ancestors {
            let dir = a.to_string_lossy().into_owned();
            if made.insert(dir.clone()) {
                add_dir(&mut base, &dir, 0o755);
            }
        }
        add(
            &mut base,
            &rel.to_string_lossy(),
            &std::fs::read(file).unwrap(),
            0o755,
        );
    }
    for (as_loaded, canon) in &needed {
        if as_loaded != canon && !canonical.contains(as_loaded) {
            let rel = as_loaded.strip_prefix("/").unwrap();
            add_link(
                &mut base,
                tar::EntryType::Symlink,
                &rel.to_string_lossy(),
                &canon.to_string_lossy(),
            );
        }
    }
    // Binaries are found by the names scripts use.
    for b in bins {
        let canon = std::fs::canonicalize(b).unwrap();
        let want = Path::new("usr/bin").join(Path::new(b).file_name().unwrap());
        let have = canon.strip_prefix("/").unwrap();
        if want != have {
            add_link(
                &mut base,
                tar::EntryType::Symlink,
                &want.to_string_lossy(),
                &format!("/{}", have.display()),
            );
        }
    }
    let loader = std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2").unwrap();
    add_link(
        &mut base,
        tar::EntryType::Symlink,
        "usr/lib64/ld-linux-x86-64.so.2",
        &loader.to_string_lossy(),
    );
    add(
        &mut base,
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/bin/sh\n",
        0o644,
    );
    add(
        &mut base,
        "etc/group",
        b"root:x:0:\nnogroup:x:65534:\n",
        0o644,
    );
    add(&mut base, "etc/old.conf", b"whited out by layer 2\n", 0o644);
    add(
        &mut base,
        "opt/stuff/a.txt",
        b"hidden by the opaque dir\n",
        0o644,
    );
    let base = base.into_inner().unwrap();
    let mut top = tar::Builder::new(Vec::new());
    add_dir(&mut top, "etc", 0o755);
    add(&mut top, "etc/.wh.old.conf", b"", 0o644);
    add(&mut top, "etc/motd-endless", b"from layer two\n", 0o644);
    add_link(
        &mut top,
        tar::EntryType::Link,
        "etc/motd-link",
        "etc/motd-endless",
    );
    add_dir(&mut top, "opt", 0o755);
    add_dir(&mut top, "opt/stuff", 0o755);
    add(&mut top, "opt/stuff/.wh..wh..opq", b"", 0o644);
    add(&mut top, "opt/stuff/b.txt", b"kept\n", 0o644);
    (base, top.into_inner().unwrap())
}

fn push(port: u16, name: &str) {
    let (base, top) = layers();
    let diff = |t: &[u8]| format!("sha256:{}", hex::encode(Sha256::digest(t)));
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENDLESS_IMAGE_VAR=from-image"]},
        "rootfs": {"type": "layers", "diff_ids": [diff(&base), diff(&top)]},
    });
    let layers = vec![
        ImageLayer::new(
            gz(base),
            "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            None,
        ),
        ImageLayer::new(
            gz(top),
            "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            None,
        ),
    ];
    let config = Config::new(
        serde_json::to_vec(&config).unwrap(),
        "application/vnd.oci.image.config.v1+json".into(),
        None,
    );
    let reference = ImageRef::parse(&format!("127.0.0.1:{port}/{name}")).unwrap();
    let client = endless::images::client_for(&reference);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(client.push(
            reference.as_oci(),
            &layers,
            config,
            &RegistryAuth::Anonymous,
            None,
        ))
        .unwrap();
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_task_builds_from_a_pulled_image_and_its_tests_pass() {
    if !root() || cfg!(not(target_arch = "x86_64")) {
        eprintln!("SKIP: image layers with whiteouts need root (x86_64 test image)");
        return;
    }
    let Some(reg) = start_registry() else { return };
    push(reg.port, "endless/base:1");
    let cache = tempfile::tempdir().unwrap();
    let backend = LocalBackend::new(cache.path()).unwrap();
    let store = ImageStore::new(&image_store_dir(cache.path()));
    let reference = ImageRef::parse(&format!("127.0.0.1:{}/endless/base:1", reg.port)).unwrap();
    let first = pull(&store, &reference).unwrap();
    assert_eq!((first.layers, first.downloaded), (2, 2));
    let again = pull(&store, &reference).unwrap();
    assert_eq!(again.downloaded, 0, "a second pull is a cache hit");

    let mut task = Task {
        meta: TaskMeta::default(),
        instruction: "write HELLO to ~/out.txt".into(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    task.meta.task.id = "from-image".into();
    task.environment.insert_text(
        "Dockerfile",
        format!(
            "FROM 127.0.0.1:{}/endless/base:1\nRUN echo built > /etc/built-marker\n\
             RUN rm /opt/stuff/b.txt && echo c > /opt/stuff/c.txt\n",
            reg.port
        ),
    );
    task.tests.insert_text(
        "test_final_state.py",
        "def test_done():\n    assert open('/home/user/out.txt').read().strip() == 'HELLO'\n",
    );
    task.meta.verifier.final_tests = vec!["test_final_state.py".into()];
    let image = backend.prepare(&task).unwrap();
    assert_eq!(image.base.as_deref(), Some(reference.canonical().as_str()));
    let mut s = backend.start(&image, &SessionOptions::default()).unwrap();
    let r = s
        .exec(
            "cat /etc/motd-endless /etc/motd-link /etc/built-marker; ls /etc/old.conf 2>&1; ls /opt/stuff; \
             echo var=$ENDLESS_IMAGE_VAR; ls /usr/bin | wc -l; id -un",
            T,
        )
        .unwrap();
    let out = r.output;
    assert!(
        out.contains("from layer two\nfrom layer two\nbuilt\n"),
        "{out}"
    );
    assert!(
        out.contains("No such file"),
        "the whiteout did not hide old.conf: {out}"
    );
    assert!(
        out.contains("c.txt") && !out.contains("a.txt"),
        "opaque dir: {out}"
    );
    assert!(
        !out.contains("b.txt"),
        "a step's deletion of a base file: {out}"
    );
    assert!(out.contains("var=from-image"), "{out}");
    let count: usize = out
        .lines()
        .rev()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(
        count < 60,
        "/usr/bin has {count} entries: the host's, not the image's"
    );
    assert_eq!(out.lines().last(), Some("user"));
    let report = verify(&mut s, &task, TestSet::Final).unwrap();
    assert!(!report.passed);
    s.exec("echo HELLO > ~/out.txt", T).unwrap();
    let report = verify(&mut s, &task, TestSet::Final).unwrap();
    assert!(report.passed, "{}", report.output);
    s.close();
    drop(reg);
}

#[test]
fn a_pull_reports_its_layers_and_bytes() {
    let Some(reg) = start_registry() else { return };
    push(reg.port, "endless/progress:1");
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(cache.path());
    let reference = ImageRef::parse(&format!("127.0.0.1:{}/endless/progress:1", reg.port)).unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let record = |p: &Progress| seen.lock().unwrap().push(p.clone());
    let report = pull_from(&store, &reference, &reference, &record).unwrap();
    let seen = seen.into_inner().unwrap();
    let counts: Vec<(usize, usize, u64, u64)> = seen
        .iter()
        .map(|p| match p {
            Progress::Pull {
                reference: r,
                layers_done,
                layers,
                bytes_done,
                bytes,
            } => {
                assert_eq!(r, &reference.canonical());
                (*layers_done, *layers, *bytes_done, *bytes)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let total = counts[0].3;
    assert!(total > 0);
    assert_eq!(counts[0], (0, 2, 0, total), "{counts:?}");
    assert_eq!(counts.last(), Some(&(2, 2, total, total)), "{counts:?}");
    assert_eq!(report.bytes, total);
    // Bytes and layers only grow; bytes come during a download, not only
    // at its end (the base layer is over the 256 KiB reporting step).
    assert!(
        counts
            .windows(2)
            .all(|w| w[1].0 >= w[0].0 && w[1].2 >= w[0].2),
        "{counts:?}"
    );
    assert!(
        counts.iter().any(|c| c.0 == 0 && c.2 > 0),
        "no progress within the first layer: {counts:?}"
    );
    // A second pull finds every layer stored: one report, all done.
    let again = std::sync::Mutex::new(Vec::new());
    let record = |p: &Progress| again.lock().unwrap().push(p.clone());
    pull_from(&store, &reference, &reference, &record).unwrap();
    let again = again.into_inner().unwrap();
    assert!(
        matches!(&again[..], [Progress::Pull { layers_done: 2, bytes_done, .. }] if *bytes_done == total),
        "{again:?}"
    );
    drop(reg);
}

#[test]
fn tampered_blobs_and_unknown_images_are_refused() {
    let Some(reg) = start_registry() else { return };
    push(reg.port, "endless/tampered:1");
    // Corrupt the layers the registry stores (not the small manifest and config).
    for entry in walkdir::WalkDir::new(reg.dir.path().join("data"))
        .into_iter()
        .flatten()
    {
        if entry.file_name() == "data" && entry.path().to_string_lossy().contains("/blobs/") {
            let mut bytes = std::fs::read(entry.path()).unwrap();
            if bytes.len() > 10_000 {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0xff;
                std::fs::write(entry.path(), bytes).unwrap();
            }
        }
    }
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(cache.path());
    let reference = ImageRef::parse(&format!("127.0.0.1:{}/endless/tampered:1", reg.port)).unwrap();
    let e = pull(&store, &reference).unwrap_err();
    assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
    assert!(store.get(&reference).is_none(), "nothing half-registered");
    let unknown = ImageRef::parse(&format!("127.0.0.1:{}/endless/none:1", reg.port)).unwrap();
    let e = pull(&store, &unknown).unwrap_err();
    assert!(matches!(e, ImageError::Registry { .. }), "{e}");
    assert!(
        e.to_string().contains(&format!("127.0.0.1:{}", reg.port)),
        "{e}"
    );
    assert!(store.list().is_empty());
}

/// An OCI image layout of the test image, under an index with another
/// platform's entry first; gzipped layers.
fn oci_layout(dir: &Path, name: &str) {
    let (base, top) = layers();
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let hex = hex::encode(Sha256::digest(bytes));
        std::fs::write(blobs.join(&hex), bytes).unwrap();
        (format!("sha256:{hex}"), bytes.len())
    };
    let (base_gz, top_gz) = (gz(base), gz(top));
    let (l1, s1) = put(&base_gz);
    let (l2, s2) = put(&top_gz);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin", "ENDLESS_IMAGE_VAR=from-layout"]},
    });
    let (c, cs) = put(&serde_json::to_vec(&config).unwrap());
    let layer = |d: &str, s: usize| serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": s});
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": cs},
        "layers": [layer(&l1, s1), layer(&l2, s2)],
    });
    let (m, ms) = put(&serde_json::to_vec(&manifest).unwrap());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{}", "f".repeat(64)), "size": 1, "platform": {"os": "linux", "architecture": "s390x"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m, "size": ms, "platform": {"os": "linux", "architecture": "amd64"}},
        ],
    });
    let (i, is) = put(&serde_json::to_vec(&index).unwrap());
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let top_index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": i, "size": is,
                       "annotations": {"org.opencontainers.image.ref.name": name}}],
    });
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&top_index).unwrap(),
    )
    .unwrap();
}

/// Set in the inner run of [`images_work_for_a_rootless_endless`] (as uid 65534).
const ROOTLESS_INNER: &str = "ENDLESS_IMAGES_ROOTLESS_INNER";

#[test]
fn images_work_for_a_rootless_endless() {
    if cfg!(not(target_arch = "x86_64")) {
        eprintln!("SKIP: the test image is made of x86_64 host binaries");
        return;
    }
    if root() {
        // As root the backend maps a range of ids; the rootless path is
        // the one an unprivileged user gets.
        support::nobody::rerun("images_work_for_a_rootless_endless", ROOTLESS_INNER);
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let backend = match LocalBackend::new(cache.path()) {
        Ok(b) => b,
        Err(e) if std::env::var_os(ROOTLESS_INNER).is_none() => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            return;
        }
        Err(e) => panic!("the local backend does not start rootless: {e}"),
    };
    assert!(backend.is_rootless());
    let store = ImageStore::new(&image_store_dir(cache.path()));
    let layout = cache.path().join("layout");
    oci_layout(&layout, "example.org/rootless:1");
    endless::images::load(&store, &layout, None).unwrap();
    let mut task = a_task_from("example.org/rootless:1");
    task.meta.task.id = "rootless-image".into();
    task.environment.insert_text(
        "Dockerfile",
        "FROM example.org/rootless:1\n\
         RUN rm /opt/stuff/b.txt && echo c > /opt/stuff/c.txt && rm /etc/motd-link\n",
    );
    let image = backend.prepare(&task).unwrap();
    let mut s = backend.start(&image, &SessionOptions::default()).unwrap();
    let out = s
        .exec(
            "cat /etc/motd-endless; ls /etc/old.conf /etc/motd-link 2>&1; ls /opt/stuff; id -un",
            T,
        )
        .unwrap()
        .output;
    s.close();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"from layer two"), "{out}");
    // The layer's whiteout hides the base's file; the step's deletion too.
    assert!(
        lines[1].contains("old.conf") && lines[1].contains("No such file"),
        "{out}"
    );
    assert!(
        lines[2].contains("motd-link") && lines[2].contains("No such file"),
        "{out}"
    );
    // The opaque directory hides the base's a.txt; the step removed b.txt.
    assert_eq!(lines[3..], ["c.txt", "user"], "{out}");
}

/// A classic `docker save` archive of the test image.
fn docker_save(name: &str, layer_path: &str) -> Vec<u8> {
    let (base, top) = layers();
    let config = serde_json::json!({"architecture": "amd64", "os": "linux", "config": {"WorkingDir": "/opt"}});
    let manifest = serde_json::json!([{
        "Config": "cfg.json", "RepoTags": [name], "Layers": ["l1/layer.tar", layer_path],
    }]);
    let mut b = tar::Builder::new(Vec::new());
    add(
        &mut b,
        "manifest.json",
        &serde_json::to_vec(&manifest).unwrap(),
        0o644,
    );
    add(
        &mut b,
        "cfg.json",
        &serde_json::to_vec(&config).unwrap(),
        0o644,
    );
    add(&mut b, "l1/layer.tar", &base, 0o644);
    add(&mut b, "l2/layer.tar", &top, 0o644);
    b.into_inner().unwrap()
}

fn a_task_from(base: &str) -> Task {
    let mut task = Task {
        meta: TaskMeta::default(),
        instruction: "nothing".into(),
        truth: String::new(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    task.meta.task.id = "aliased".into();
    task.environment.insert_text(
        "Dockerfile",
        format!("FROM {base}\nRUN echo built > /etc/built-marker\n"),
    );
    task
}

#[test]
fn archives_load_and_bad_ones_register_nothing() {
    let d = tempfile::tempdir().unwrap();
    let store = ImageStore::new(&d.path().join("store"));
    // An OCI layout directory, and the same as a tar.
    let layout = d.path().join("layout");
    oci_layout(&layout, "example.org/team/env:2");
    let r = endless::images::load(&store, &layout, None).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].reference, "example.org/team/env:2");
    assert_eq!(r[0].layers, 2);
    let img = store
        .get(&ImageRef::parse("example.org/team/env:2").unwrap())
        .unwrap();
    assert!(img
        .config
        .env
        .iter()
        .any(|e| e == "ENDLESS_IMAGE_VAR=from-layout"));
    let layout_tar = d.path().join("layout.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&layout_tar).unwrap());
    b.append_dir_all(".", &layout).unwrap();
    b.finish().unwrap();
    drop(b);
    let r = endless::images::load(&store, &layout_tar, Some("loaded:tar")).unwrap();
    assert_eq!(r[0].reference, "docker.io/library/loaded:tar");
    // A classic docker save.
    let save = d.path().join("save.tar");
    std::fs::write(&save, docker_save("saved:1", "l2/layer.tar")).unwrap();
    let r = endless::images::load(&store, &save, None).unwrap();
    assert_eq!(r[0].reference, "docker.io/library/saved:1");
    let saved = store.get(&ImageRef::parse("saved:1").unwrap()).unwrap();
    assert_eq!(saved.config.workdir.as_deref(), Some("/opt"));
    assert_eq!(saved.layers.len(), 2);

    // Hostile and broken archives: clear errors, nothing registered.
    let before = store.list().len();
    let escape = d.path().join("escape.tar");
    std::fs::write(&escape, docker_save("evil:1", "../../etc/passwd")).unwrap();
    let e = endless::images::load(&store, &escape, None).unwrap_err();
    assert!(matches!(e, ImageError::HostileEntry { .. }), "{e}");
    let tampered = d.path().join("tampered");
    oci_layout(&tampered, "example.org/team/tampered:1");
    for blob in std::fs::read_dir(tampered.join("blobs/sha256")).unwrap() {
        let p = blob.unwrap().path();
        let mut bytes = std::fs::read(&p).unwrap();
        if bytes.len() > 10_000 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            std::fs::write(&p, bytes).unwrap();
        }
    }
    let e = endless::images::load(&store, &tampered, None).unwrap_err();
    assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
    let nothing = d.path().join("nothing");
    std::fs::create_dir_all(&nothing).unwrap();
    let e = endless::images::load(&store, &nothing, None).unwrap_err();
    assert!(e.to_string().contains("neither"), "{e}");
    let unnamed = d.path().join("unnamed");
    oci_layout(&unnamed, "2");
    let e = endless::images::load(&store, &unnamed, None).unwrap_err();
    assert!(e.to_string().contains("--tag"), "{e}");
    assert_eq!(store.list().len(), before, "nothing half-registered");
    assert!(store.get(&ImageRef::parse("evil:1").unwrap()).is_none());
}

#[test]
fn aliases_and_mirrors_give_a_task_its_base() {
    if !root() || cfg!(not(target_arch = "x86_64")) {
        eprintln!("SKIP: image layers with whiteouts need root (x86_64 test image)");
        return;
    }
    let Some(reg) = start_registry() else { return };
    // The registry plays Docker Hub's mirror: `ubuntu:24.04` is pulled from it.
    push(reg.port, "library/ubuntu:24.04");
    let cache = tempfile::tempdir().unwrap();
    let mut settings = endless::config::ImagesConfig::default();
    settings
        .mirrors
        .insert("docker.io".into(), format!("127.0.0.1:{}", reg.port));
    let backend = LocalBackend::new(cache.path())
        .unwrap()
        .with_images(settings.clone());
    let image = backend.prepare(&a_task_from("ubuntu:24.04")).unwrap();
    assert_eq!(
        image.base.as_deref(),
        Some("docker.io/library/ubuntu:24.04")
    );
    assert_eq!(image.base_note, None, "a mirror is no substitute");
    let mut s = backend.start(&image, &SessionOptions::default()).unwrap();
    let out = s
        .exec("cat /etc/motd-endless /etc/built-marker", T)
        .unwrap()
        .output;
    assert!(out.contains("from layer two\nbuilt"), "{out}");
    s.close();

    // An alias to a loaded image: the task says what it got.
    let layout = cache.path().join("layout");
    oci_layout(&layout, "example.org/debian-base:1");
    let store = ImageStore::new(&image_store_dir(cache.path()));
    endless::images::load(&store, &layout, None).unwrap();
    settings.mirrors.clear();
    settings.aliases.insert(
        "python:3.13-slim".into(),
        "example.org/debian-base:1".into(),
    );
    settings.fallback = endless::config::BaseFallback::Error;
    let backend = LocalBackend::new(cache.path())
        .unwrap()
        .with_images(settings);
    let image = backend.prepare(&a_task_from("python:3.13-slim")).unwrap();
    assert_eq!(image.base.as_deref(), Some("example.org/debian-base:1"));
    assert_eq!(
        image.base_note.as_deref(),
        Some("python:3.13-slim is aliased to example.org/debian-base:1")
    );
    // COPY --from an image: its files in a task on another base.
    let mut copy = a_task_from("host");
    copy.meta.task.id = "copies-from-an-image".into();
    copy.environment.insert_text(
        "Dockerfile",
        "FROM host\nCOPY --from=example.org/debian-base:1 /etc/motd-endless /opt/motd\n",
    );
    let image = backend.prepare(&copy).unwrap();
    assert_eq!(image.base, None, "built on the host base");
    let mut s = backend.start(&image, &SessionOptions::default()).unwrap();
    let out = s
        .exec("cat /opt/motd; ls /etc/motd-endless 2>&1", T)
        .unwrap()
        .output;
    assert!(
        out.starts_with("from layer two\n") && out.contains("No such file"),
        "{out}"
    );
    s.close();
    // With fallback = "error", an unavailable base fails the build, naming it.
    let e = backend
        .prepare(&a_task_from(&format!(
            "127.0.0.1:{}/endless/none:1",
            reg.port
        )))
        .unwrap_err()
        .to_string();
    assert!(e.contains("endless/none:1") && e.contains("[images"), "{e}");
    drop(reg);
}

#[test]
fn a_task_for_ubuntu_installs_packages_on_a_built_debian_base() {
    if !root() {
        eprintln!("SKIP: image builds with apt-get need root (a mapped user namespace)");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(&image_store_dir(cache.path()));
    endless::images::register_rootfs(&store, "local/debian:bookworm", &debian_base_tar()).unwrap();
    let mut settings = endless::config::ImagesConfig::default();
    settings
        .aliases
        .insert("ubuntu:24.04".into(), "local/debian:bookworm".into());
    settings.pull = endless::config::PullPolicy::Never;
    settings.fallback = endless::config::BaseFallback::Error;
    let backend = LocalBackend::new(cache.path())
        .unwrap()
        .with_images(settings);
    assert!(
        backend.build_network(),
        "builds get the network as root with pasta"
    );
    let mut task = a_task_from("ubuntu:24.04");
    task.meta.task.id = "installs".into();
    task.environment.insert_text(
        "Dockerfile",
        "FROM ubuntu:24.04\n\
         RUN apt-get update && apt-get install -y --no-install-recommends jq python3-pip\n\
         RUN pip install --break-system-packages --no-cache-dir six==1.16.0\n\
         RUN mkdir -p /home/user && echo '{\"n\": 41}' > /home/user/in.json && chown -R user:user /home/user\n",
    );
    task.tests.insert_text(
        "test_final_state.py",
        "import subprocess\n\
         def test_answer():\n    assert open('/home/user/out.txt').read().strip() == '42'\n\
         def test_six_is_installed():\n    subprocess.run(['python3', '-c', 'import six'], check=True)\n",
    );
    task.meta.verifier.final_tests = vec!["test_final_state.py".into()];
    let image = backend
        .prepare(&task)
        .expect("the build installs jq and six");
    assert_eq!(
        image.base.as_deref(),
        Some("docker.io/local/debian:bookworm")
    );
    assert!(
        image.base_note.as_deref().unwrap_or("").contains("aliased"),
        "{:?}",
        image.base_note
    );
    let again = backend.prepare(&task).unwrap();
    assert_eq!(again.hash, image.hash, "the second build is a cache hit");
    let mut s = backend.start(&image, &SessionOptions::default()).unwrap();
    let report = verify(&mut s, &task, TestSet::Final).unwrap();
    assert!(!report.passed);
    // The oracle: jq, installed by the build, in the agent's offline session.
    let out = s
        .exec(
            "jq '.n + 1' ~/in.json > ~/out.txt && cat ~/out.txt; cat /etc/debian_version",
            T,
        )
        .unwrap()
        .output;
    assert!(out.starts_with("42\n12."), "{out}");
    let report = verify(&mut s, &task, TestSet::Final).unwrap();
    assert!(report.passed, "{}", report.output);
    s.close();
}

/// An OCI layout holding one image of one gzipped layer (`layer` as given,
/// its digest computed over those bytes).
fn one_layer_layout(dir: &Path, name: &str, layer: &[u8]) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let hex = hex::encode(Sha256::digest(bytes));
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

fn device(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, path: &str, major: u32, minor: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o666);
    h.set_entry_type(kind);
    h.set_device_major(major).unwrap();
    h.set_device_minor(minor).unwrap();
    b.append_data(&mut h, path, &[][..]).unwrap();
}

#[test]
fn hostile_layers_devices_sparse_claims_and_truncated_blobs() {
    let d = tempfile::tempdir().unwrap();
    let store = ImageStore::new(&d.path().join("store"));
    let unpacked = |name: &str| -> Result<Vec<PathBuf>, ImageError> {
        let img = store.get(&ImageRef::parse(name).unwrap()).unwrap();
        store.layer_dirs(&img, endless::images::LayerOwners::OURS)
    };
    let layer_entries = || {
        std::fs::read_dir(d.path().join("store/layers"))
            .map(|rd| rd.count())
            .unwrap_or(0)
    };
    let tmp_entries = || {
        std::fs::read_dir(d.path().join("store/tmp"))
            .map(|rd| rd.count())
            .unwrap_or(0)
    };
    // Device nodes (a disk, /dev/mem) are skipped; the rest of the layer lands.
    let mut b = tar::Builder::new(Vec::new());
    add_dir(&mut b, "dev", 0o755);
    device(&mut b, tar::EntryType::Block, "dev/sda", 8, 0);
    device(&mut b, tar::EntryType::Char, "dev/mem", 1, 1);
    add(&mut b, "etc/ok.txt", b"fine\n", 0o644);
    let layout = d.path().join("devices");
    one_layer_layout(
        &layout,
        "example.org/devices:1",
        &gz(b.into_inner().unwrap()),
    );
    endless::images::load(&store, &layout, None).unwrap();
    let dirs = unpacked("example.org/devices:1").unwrap();
    assert_eq!(
        std::fs::read(dirs[0].join("etc/ok.txt")).unwrap(),
        b"fine\n"
    );
    for dev in ["dev/sda", "dev/mem"] {
        assert!(
            std::fs::symlink_metadata(dirs[0].join(dev)).is_err(),
            "{dev} was created"
        );
    }
    let before = layer_entries();

    // A sparse file claiming 10 GB in 512 bytes of data: refused, nothing unpacked.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNUSparse);
    h.set_mode(0o644);
    h.set_size(512);
    h.set_path("var/log/huge").unwrap();
    let real = 10u64 << 30;
    let gnu = h.as_gnu_mut().unwrap();
    gnu.set_real_size(real);
    gnu.sparse[0].set_offset(real - 512);
    gnu.sparse[0].set_length(512);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &[1u8; 512][..]).unwrap();
    let layout = d.path().join("sparse");
    one_layer_layout(
        &layout,
        "example.org/sparse:1",
        &gz(b.into_inner().unwrap()),
    );
    endless::images::load(&store, &layout, None).unwrap();
    let e = unpacked("example.org/sparse:1").unwrap_err();
    assert!(
        matches!(e, ImageError::HostileEntry { .. }) && e.to_string().contains("var/log/huge"),
        "{e}"
    );
    assert!(e.to_string().contains("sparse"), "{e}");
    assert_eq!(
        layer_entries(),
        before,
        "no layer directory for a refused layer"
    );

    // A truncated blob (stored under the digest of what is left of it):
    // the unpack fails, naming the layer, and leaves no layer behind.
    let mut b = tar::Builder::new(Vec::new());
    let noise: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    add(&mut b, "opt/big.bin", &noise, 0o644);
    add(&mut b, "opt/after.txt", b"after\n", 0o644);
    let whole = gz(b.into_inner().unwrap());
    let layout = d.path().join("truncated");
    one_layer_layout(
        &layout,
        "example.org/truncated:1",
        &whole[..whole.len() / 2],
    );
    endless::images::load(&store, &layout, None).unwrap();
    let e = unpacked("example.org/truncated:1").unwrap_err();
    assert!(matches!(e, ImageError::HostileEntry { .. }), "{e}");
    assert!(e.to_string().starts_with("layer sha256:"), "{e}");
    assert_eq!(layer_entries(), before);
    assert_eq!(tmp_entries(), 0, "no half-unpacked temporaries");
}

#[test]
fn a_prebuilt_docker_image_is_used_when_it_can_be_had_else_the_dockerfile_is_built() {
    let cache = tempfile::tempdir().unwrap();
    let store = ImageStore::new(&image_store_dir(cache.path()));
    let settings = endless::config::ImagesConfig {
        pull: endless::config::PullPolicy::Never,
        ..Default::default()
    };
    let backend = LocalBackend::new(cache.path())
        .unwrap()
        .with_images(settings);
    let mut task = a_task_from("host");
    task.meta.task.id = "prebuilt".into();
    task.meta
        .environment
        .extra
        .insert("docker_image".into(), "local/prebuilt:1".into());
    // Not stored, no pulls: the Dockerfile is built, and the result says so.
    let built = backend.prepare(&task).unwrap();
    let note = built.base_note.clone().unwrap_or_default();
    assert!(
        note.contains("prebuilt image local/prebuilt:1")
            && note.contains("unavailable")
            && note.contains("environment/Dockerfile is built instead"),
        "{note}"
    );
    let mut s = backend.start(&built, &SessionOptions::default()).unwrap();
    let out = s.exec("cat /etc/built-marker", T).unwrap().output;
    assert_eq!(out.trim(), "built");
    s.close();
    // Loaded: the prebuilt image is the environment; nothing is built.
    endless::images::register_rootfs(&store, "local/prebuilt:1", &debian_base_tar()).unwrap();
    let prebuilt = backend.prepare(&task).unwrap();
    assert_ne!(prebuilt.hash, built.hash);
    assert_eq!(prebuilt.base.as_deref(), Some("docker.io/local/prebuilt:1"));
    let note = prebuilt.base_note.clone().unwrap_or_default();
    assert!(
        note.contains("the prebuilt image local/prebuilt:1")
            && note.contains("is used; environment/Dockerfile is not built"),
        "{note}"
    );
    let mut s = backend
        .start(&prebuilt, &SessionOptions::default())
        .unwrap();
    let out = s
        .exec(
            "test -e /etc/built-marker && echo built; cat /etc/debian_version",
            T,
        )
        .unwrap()
        .output;
    assert!(out.starts_with("12."), "{out}");
    s.close();
}
