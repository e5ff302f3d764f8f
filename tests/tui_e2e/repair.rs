//! Issue 53, end to end: a repaired task's review in the real binary (the
//! diff per file beside the reasons, `D` in Tasks), then the repair
//! discarded with `r`: the version it was made from is current again and
//! the repair is kept.

use super::*;

/// beta-task repaired: version 2 checks the output's content, for a
/// weak-tests finding.
fn repair_beta(ws: &Workspace) {
    let mut v2 = ws.load_task("beta-task").unwrap();
    v2.tests.insert_text(
        "test_final_state.py",
        "def test_done():\n    assert open('/home/user/out.txt').read() == 'ok\\n'\n",
    );
    endless::store::set_version(&mut v2, 2, Some(1));
    v2.meta.provenance.extra.insert(
        "repair".into(),
        toml::Value::try_from(serde_json::json!({
            "model": "fixture-gen",
            "reasons": [{
                "source": "audit",
                "summary": "[weak-tests] out.txt emptied survives",
                "evidence": "-ok\n+",
            }],
        }))
        .unwrap(),
    );
    ws.commit_version(&v2, &[]).unwrap();
}

#[test]
fn a_repair_is_reviewed_as_a_diff_and_discarded_in_tmux() {
    if !have_tmux() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let ws = Workspace::open(dir.path()).unwrap();
        add(&ws, "alpha-task", "file-ops");
        add(&ws, "beta-task", "git");
        repair_beta(&ws);
    }
    let home = sandbox_home();
    let session = start_tui(
        format!("endless-e2e-repair-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "alpha-task");
    tmux(&["send-keys", "-t", s, "/", "beta", "Enter"]);
    wait_for(s, "Instruction of beta-task");
    tmux(&["send-keys", "-t", s, "D"]);
    let screen = wait_for(s, "Repair of beta-task: version 2 (from 1)");
    let screen = if screen.contains("(audit) [weak-tests]") {
        screen
    } else {
        wait_for(s, "(audit) [weak-tests]")
    };
    for want in [
        "── tests/test_final_state.py ──",
        "-    assert False",
        "+    assert open('/home/user/out.txt').read() == 'ok\\n'",
        "r discard (version 1 again)",
    ] {
        assert!(screen.contains(want), "{want:?} in:\n{screen}");
    }
    tmux(&["send-keys", "-t", s, "r"]);
    wait_for(s, "version 1 is current again");
    tmux(&["send-keys", "-t", s, "q"]);
    let start = Instant::now();
    while tmux(&["list-sessions"]).contains(s.as_str()) && start.elapsed() < Duration::from_secs(5)
    {
        sleep(Duration::from_millis(100));
    }
    let ws = Workspace::open(dir.path()).unwrap();
    assert_eq!(ws.current_version("beta-task").unwrap(), 1);
    let back = ws.load_task("beta-task").unwrap();
    assert!(back
        .tests
        .text("test_final_state.py")
        .unwrap()
        .contains("assert False"));
    assert_eq!(ws.task_versions("beta-task").unwrap().len(), 2);
}
