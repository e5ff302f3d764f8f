//! Issue 47: the view and the sort survive a restart (kept in the
//! workspace's `tui-state.json`), and a corrupt state file is a warning,
//! never a crash. Real binary, in tmux.

use super::jobs_and_links::quit_and_wait;
use super::*;

#[test]
fn the_sort_and_view_survive_a_restart_in_tmux() {
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
    let name = format!("endless-e2e-state-{}", std::process::id());
    let session = start_tui(name.clone(), dir.path(), None, 120, 40);
    let s = &session.0;
    wait_for(s, "alpha-task");
    // Sort by name, descending: beta first.
    tmux(&["send-keys", "-t", s, "o"]);
    wait_for(s, "sort name↑");
    tmux(&["send-keys", "-t", s, "O"]);
    wait_for(s, "sort name↓");
    tmux(&["send-keys", "-t", s, "F3"]);
    wait_for(s, "[Episodes]");
    quit_and_wait(s);
    drop(session);

    let session = start_tui(format!("{name}-again"), dir.path(), None, 120, 40);
    let s = &session.0;
    // It opens where the last session left.
    wait_for(s, "[Episodes]");
    tmux(&["send-keys", "-t", s, "F1"]);
    let screen = wait_for(s, "sort name↓");
    let (beta, alpha) = (
        screen.find("beta-task").unwrap(),
        screen.find("alpha-task").unwrap(),
    );
    assert!(beta < alpha, "still sorted by name, descending: {screen}");
    quit_and_wait(s);
    drop(session);

    // A corrupt state file: said, ignored, the defaults used.
    std::fs::write(dir.path().join("tui-state.json"), "{not json").unwrap();
    let session = start_tui(format!("{name}-corrupt"), dir.path(), None, 120, 40);
    let s = &session.0;
    let screen = wait_for(s, "tui-state.json");
    assert!(
        screen.contains("warning:") && screen.contains("ignored"),
        "{screen}"
    );
    let screen = wait_for(s, "sort id↑");
    assert!(screen.contains("[Tasks]"), "{screen}");
    // Moving on writes a good file again.
    tmux(&["send-keys", "-t", s, "o"]);
    wait_for(s, "sort name↑");
    quit_and_wait(s);
    let text = std::fs::read_to_string(dir.path().join("tui-state.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["tasks_sort"], "name", "{text}");
}
