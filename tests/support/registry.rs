//! Images for the tests: Debian's `docker-registry` on a random loopback
//! port, and a Debian root filesystem built once with mmdebstrap.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

/// A registry on 127.0.0.1, stopped on drop.
pub struct Registry {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its configuration and storage (`data/`).
    pub dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start one on a free port (`None`, with a SKIP line, where Debian's
/// `docker-registry` is not installed).
pub fn start_registry() -> Option<Registry> {
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

/// The Debian base of the package-install test, built once with mmdebstrap
/// and cached under `target/tmp` between runs.
pub fn debian_base_tar() -> PathBuf {
    cached_debian_base("bookworm-minbase-ca.tar", &["ca-certificates"])
}

/// A Debian bookworm minbase with `packages`, built once with mmdebstrap
/// and cached as `target/tmp/<file>` between runs. Tests of one binary and
/// of several (run side by side) ask for it at once on a clean clone: the
/// first builds it under an exclusive lock, the others wait and reuse it.
pub fn cached_debian_base(file: &str, packages: &[&str]) -> PathBuf {
    use std::os::fd::AsRawFd;
    let cached = Path::new(env!("CARGO_TARGET_TMPDIR")).join(file);
    let lock = std::fs::File::create(cached.with_extension("lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    if !cached.is_file() {
        let spec = endless::images::BaseSpec {
            packages: packages.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        };
        let tmp = cached.with_extension("partial");
        endless::images::debian_rootfs_tar(&spec, &tmp).expect(
            "mmdebstrap (installed by scripts/setup.sh) builds a bookworm base from deb.debian.org",
        );
        std::fs::rename(&tmp, &cached).unwrap();
    }
    cached
}
