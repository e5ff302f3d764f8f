//! Integration tests of the local sandbox backend: exec protocol, isolation,
//! limits, cleanup. They skip (with the reason) where the local backend
//! cannot run, e.g. without bubblewrap or root.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use endless::sandbox::local::LocalBackend;
use endless::sandbox::{Backend, Image, SandboxError, Session, SessionOptions, MAX_OUTPUT_CHARS};
use endless::task::{FileTree, Task, TaskMeta};

const T: Duration = Duration::from_secs(10);

fn cache() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::Builder::new().prefix("endless-sbx-").tempdir_in("/var/tmp").unwrap())
        .path()
}

fn backend() -> Option<LocalBackend> {
    match LocalBackend::new(cache()) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIP: local backend unavailable here: {e}");
            None
        }
    }
}

fn task(id: &str, setup: &str) -> Task {
    let mut t = Task {
        meta: TaskMeta::default(),
        instruction: "do it".into(),
        truth: "secret truth".into(),
        environment: FileTree::default(),
        tests: FileTree::default(),
        solution: FileTree::default(),
    };
    t.meta.task.id = id.into();
    t.environment.insert_text("setup.sh", setup);
    t
}

fn basic_image(b: &LocalBackend) -> Image {
    b.prepare(&task(
        "basic",
        "mkdir -p /home/user/data\necho hello > /home/user/data/greeting.txt\necho sys > /etc/endless-test\n",
    ))
    .unwrap()
}

fn start(b: &LocalBackend) -> Session {
    let image = basic_image(b);
    b.start(&image, &SessionOptions::default()).unwrap()
}

#[test]
fn exec_basics_and_state_persist() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s.exec("echo hi; cat ~/data/greeting.txt", T).unwrap();
    assert_eq!(r.output.trim_end(), "hi\nhello");
    assert_eq!(r.exit_code, Some(0));
    assert!(!r.timed_out && !r.truncated);
    assert_eq!(s.exec("false", T).unwrap().exit_code, Some(1));
    assert_eq!(s.exec("exit_code_of() { return $1; }; exit_code_of 7", T).unwrap().exit_code, Some(7));
    s.exec("cd /tmp && export FOO=bar", T).unwrap();
    assert_eq!(s.exec("pwd; echo $FOO", T).unwrap().output.trim_end(), "/tmp\nbar");
    let who = s.exec("id -un; id -u; echo $HOME; cat /etc/endless-test", T).unwrap();
    assert_eq!(who.output.trim_end(), "user\n1000\n/home/user\nsys");
    s.close();
}

#[test]
fn exec_heredoc_multiline_stdin_binary_and_fake_markers() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s.exec("cat > /tmp/h.txt <<'EOF'\nline 1\n$HOME stays\nEOF\ncat /tmp/h.txt", T).unwrap();
    assert_eq!(r.output.trim_end(), "line 1\n$HOME stays");
    let r = s.exec("for i in 1 2 3; do\n  echo n$i\ndone", T).unwrap();
    assert_eq!(r.output.trim_end(), "n1\nn2\nn3");
    // Reads stdin: must not hang.
    let t0 = Instant::now();
    let r = s.exec("cat; read x; echo got:$x", T).unwrap();
    assert_eq!(r.output.trim_end(), "got:");
    assert!(t0.elapsed() < Duration::from_secs(3));
    // Marker-like text in the output.
    let r = s.exec("echo '__ENDLESS_deadbeef_1_0__'; printf '\\n__ENDLESS_x_2_5__\\n'; echo after", T).unwrap();
    assert!(r.output.contains("__ENDLESS_deadbeef_1_0__"));
    assert!(r.output.trim_end().ends_with("after"));
    assert_eq!(r.exit_code, Some(0));
    // Binary output and unbalanced quotes.
    let r = s.exec("head -c 3000 /dev/urandom; echo; echo done", T).unwrap();
    assert!(r.output.trim_end().ends_with("done"));
    let r = s.exec("echo 'unterminated", T).unwrap();
    assert_ne!(r.exit_code, Some(0));
    assert_eq!(s.exec("echo still-fine", T).unwrap().output.trim_end(), "still-fine");
    s.close();
}

#[test]
fn output_is_capped() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s.exec("yes abcdefghij | head -c 300000", T).unwrap();
    assert!(r.truncated);
    assert!(r.output.contains("[output truncated"));
    assert!(r.output.chars().count() < MAX_OUTPUT_CHARS + 200);
    assert_eq!(r.exit_code, Some(0));
    s.close();
}

#[test]
fn timeout_interrupts_then_kills_and_session_survives() {
    let Some(b) = backend() else { return };
    let mut s = start(&b);
    let r = s.exec("echo before; sleep 100", Duration::from_millis(500)).unwrap();
    assert!(r.timed_out);
    assert_eq!(r.exit_code, None);
    assert!(r.output.starts_with("before"));
    assert_eq!(s.exec("echo alive", T).unwrap().output.trim_end(), "alive");
    // A program that ignores SIGINT is killed.
    let r = s.exec("bash -c \"trap '' INT; sleep 100\"", Duration::from_millis(300)).unwrap();
    assert!(r.timed_out);
    assert_eq!(s.exec("echo alive2", T).unwrap().output.trim_end(), "alive2");
    s.close();
}

#[test]
fn wall_clock_ends_the_session() {
    let Some(b) = backend() else { return };
    let image = basic_image(&b);
    let opts = SessionOptions {
        wall_clock: Duration::from_secs(2),
        ..SessionOptions::default()
    };
    let mut s = b.start(&image, &opts).unwrap();
    let err = s.exec("sleep 30", Duration::from_secs(20)).unwrap_err();
    assert!(
        matches!(err, SandboxError::WallClock(_) | SandboxError::SessionEnded { .. }),
        "{err}"
    );
    assert!(s.exec("true", T).is_err());
}
