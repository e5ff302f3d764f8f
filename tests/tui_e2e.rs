//! End-to-end: start the real `endless` binary in tmux on a fixture
//! workspace, drive it with `tmux send-keys` and check what the screen shows
//! with `tmux capture-pane -p`.
//! Needs tmux (installed by scripts/setup.sh).

use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use endless::store::{TaskStatus, Workspace};
use endless::task::{FileTree, Task, TaskMeta};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn add(ws: &Workspace, id: &str, category: &str) {
    let mut meta = TaskMeta::default();
    meta.task.id = id.into();
    meta.task.name = id.replace('-', " ");
    meta.task.category = category.into();
    meta.task.complexity = Some(2);
    let mut tests = FileTree::default();
    tests.insert_text("test_initial_state.py", "def test_ok():\n    assert True\n");
    tests.insert_text(
        "test_final_state.py",
        "def test_done():\n    assert False\n",
    );
    let task = Task {
        meta,
        instruction: format!("Instruction of {id}."),
        truth: format!("Secret truth of {id}."),
        environment: FileTree::default(),
        tests,
        solution: FileTree::default(),
    };
    ws.add_task(&task, TaskStatus::Candidate).unwrap();
}

/// Poll the pane until `needle` shows up (or fail with the screen).
fn wait_for(session: &str, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let screen = tmux(&["capture-pane", "-p", "-t", session]);
        if screen.contains(needle) {
            return screen;
        }
        if start.elapsed() > Duration::from_secs(15) {
            panic!("{needle:?} never appeared; screen:\n{screen}");
        }
        sleep(Duration::from_millis(100));
    }
}

struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

#[test]
fn browse_search_and_curate_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let ws = Workspace::open(dir.path()).unwrap();
        add(&ws, "alpha-task", "file-ops");
        add(&ws, "beta-task", "git");
    }
    let bin = env!("CARGO_BIN_EXE_endless");
    let session = Session(format!("endless-e2e-{}", std::process::id()));
    let cmd = format!(
        "{} --workspace {}",
        shell_quote(Path::new(bin)),
        shell_quote(dir.path())
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session.0,
        "-x",
        "120",
        "-y",
        "40",
        &cmd,
    ]);
    let s = &session.0;

    let screen = wait_for(s, "alpha-task");
    assert!(screen.contains("beta-task"), "{screen}");
    assert!(screen.contains("Tasks"), "{screen}");

    // Search narrows the table.
    tmux(&["send-keys", "-t", s, "/", "beta", "Enter"]);
    let screen = wait_for(s, "1/2");
    assert!(screen.contains("Instruction of beta-task"), "{screen}");

    // The truth tab is marked privileged.
    tmux(&["send-keys", "-t", s, "]"]);
    let screen = wait_for(s, "Secret truth of beta-task");
    assert!(screen.contains("PRIVILEGED"), "{screen}");

    // Accept it; the store sees it.
    tmux(&["send-keys", "-t", s, "a"]);
    wait_for(s, "accepted");

    // Help overlay, then other views.
    tmux(&["send-keys", "-t", s, "?"]);
    wait_for(s, "view_training");
    tmux(&["send-keys", "-t", s, "Escape"]);
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "No episodes yet");

    tmux(&["send-keys", "-t", s, "q"]);
    let start = Instant::now();
    while tmux(&["list-sessions"]).contains(s.as_str()) && start.elapsed() < Duration::from_secs(5)
    {
        sleep(Duration::from_millis(100));
    }
    let ws = Workspace::open(dir.path()).unwrap();
    assert_eq!(
        ws.task_row("beta-task").unwrap().status,
        TaskStatus::Accepted
    );
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}
