//! Container images end to end, without the internet: Debian's
//! `docker-registry` serves a registry on 127.0.0.1 (a random port), the
//! test builds a small image from host binaries (two layers, with a
//! whiteout, an opaque directory and a hard link) and pushes it with
//! `oci-client`; then `endless` pulls it, a task builds `FROM` it and runs,
//! and its tests pass through the host's verifier runtime. Tampered blobs
//! and unknown images are refused.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use endless::images::{pull, ImageError, ImageRef, ImageStore};
use endless::sandbox::local::{image_store_dir, LocalBackend};
use endless::sandbox::{Backend, SessionOptions};
use endless::task::{FileTree, Task, TaskMeta};
use endless::verify::{verify, TestSet};
use oci_client::client::{Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use sha2::{Digest, Sha256};

const T: Duration = Duration::from_secs(30);

/// A registry on 127.0.0.1, stopped on drop.
struct Registry {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry() -> Option<Registry> {
    let bin = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(bin) = bin else {
        eprintln!("SKIP: docker-registry is not installed (apt-get install docker-registry)");
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new(bin)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r = Registry { child, port, dir };
    let until = Instant::now() + T;
    while Instant::now() < until {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
            let mut head = String::new();
            let _ = s.read_to_string(&mut head);
            if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
                return Some(r);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the registry did not start on port {port}");
}

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
        &format!(
            "FROM 127.0.0.1:{}/endless/base:1\nRUN echo built > /etc/built-marker\n",
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
        out.contains("b.txt") && !out.contains("a.txt"),
        "opaque dir: {out}"
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
