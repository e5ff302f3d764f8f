//! Issue 33, items 8 and 9, end to end: a cancelled evaluation's log is
//! still there after a restart and `R` resumes it (the same run, one id),
//! an episode opens from a finished Live strip and from its task's
//! Episodes tab, and two TUIs on one workspace see each other's curation.
//! Real binary, real sandbox.

use super::*;

/// Quit the TUI in `s` and wait until its tmux session is gone.
pub(super) fn quit_and_wait(s: &str) {
    tmux(&["send-keys", "-t", s, "q"]);
    let start = Instant::now();
    while tmux(&["list-sessions"]).contains(s) && start.elapsed() < Duration::from_secs(10) {
        sleep(Duration::from_millis(100));
    }
}

/// Cancel an evaluation, quit, start the TUI again: the job is shown by
/// its run's id with the log it wrote before the restart; `R` resumes the
/// run and the episode the cancel cut runs to its end.
#[test]
fn a_cancelled_evaluation_keeps_its_log_across_a_restart_and_resumes_in_tmux() {
    let script = "sleep 2\nsleep 2\nsleep 2\ntr a-z A-Z < ~/data/a.txt > ~/out.txt\n";
    let Some((dir, home, script)) = sandboxed_workspace("agent.txt", script) else {
        return;
    };
    let name = format!("endless-e2e-resume-{}", std::process::id());
    let session = start_tui(name.clone(), dir.path(), Some(home.path()), 160, 48);
    let s = &session.0;
    wait_for(s, "upper");
    evaluate_script(s, &script);
    wait_for_up_to(s, "turn 2", Duration::from_secs(120));
    tmux(&["send-keys", "-t", s, "F4"]);
    wait_for(s, "running");
    tmux(&["send-keys", "-t", s, "C"]);
    wait_for_up_to(s, "cancelled at", Duration::from_secs(30));
    quit_and_wait(s);
    drop(session);
    let ws = Workspace::open(dir.path()).unwrap();
    let first = ws.list_jobs().unwrap().remove(0);
    assert_eq!(first.status, "cancelled", "{first:?}");
    let run = first.params["run"].as_str().unwrap().to_string();
    assert!(run.starts_with("eval-"), "{first:?}");
    drop(ws);

    // A new TUI: the job, by its run's id, and its log from before.
    let session = start_tui(
        format!("{name}-again"),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "upper");
    tmux(&["send-keys", "-t", s, "F4"]);
    let screen = wait_for(s, "upper#0 turn 1: sleep 2");
    assert!(screen.contains(&format!("▶ {run}")), "{screen}");
    assert!(!screen.contains(&first.id), "one id per thing: {screen}");
    // R resumes it: the same run, run to its end this time.
    tmux(&["send-keys", "-t", s, "R"]);
    wait_for(s, &format!("resuming {run}"));
    let screen = wait_for_up_to(s, "1/1 episodes passed", Duration::from_secs(120));
    assert!(screen.contains("succeeded"), "{screen}");
    // One row for the run, in its latest state (issue 47, item 6: it was
    // listed twice, cancelled and succeeded).
    assert!(
        !screen
            .lines()
            .any(|l| l.contains(&run) && l.contains("cancelled")),
        "{screen}"
    );
    quit_and_wait(s);
    let ws = Workspace::open(dir.path()).unwrap();
    let jobs = ws.list_jobs().unwrap();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[0].status, "succeeded", "{jobs:?}");
    assert_eq!(
        jobs[0].params["run"],
        run.as_str(),
        "the same run: {jobs:?}"
    );
    let eps = ws.list_episodes(None).unwrap();
    assert_eq!(eps.len(), 1, "{eps:?}");
    assert!(eps[0].passed && eps[0].run_id == run, "{eps:?}");
}

/// Enter on a finished Live strip opens its episode (esc: back to Live);
/// Enter on a row of the task's Episodes tab opens it too (esc: back to
/// the task).
#[test]
fn an_episode_opens_from_a_live_strip_and_the_episodes_tab_in_tmux() {
    let Some((dir, home, script)) =
        sandboxed_workspace("agent.txt", "tr a-z A-Z < ~/data/a.txt > ~/out.txt\n")
    else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-links-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        120,
        40,
    );
    let s = &session.0;
    wait_for(s, "upper");
    evaluate_script(s, &script);
    wait_for_up_to(s, "✓ PASSED upper#0", Duration::from_secs(120));
    // The job finishes, so the episode is indexed.
    tmux(&["send-keys", "-t", s, "F4"]);
    wait_for_up_to(s, "1/1 episodes passed", Duration::from_secs(60));
    tmux(&["send-keys", "-t", s, "F2"]);
    wait_for(s, "✓ PASSED upper#0");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "Trajectory");
    assert!(screen.contains("tr a-z A-Z"), "{screen}");
    tmux(&["send-keys", "-t", s, "Escape"]);
    let screen = wait_for(s, "[Live]");
    assert!(screen.contains("✓ PASSED upper#0"), "{screen}");
    // Tasks: focus the detail pane, go to its Episodes tab, open the row.
    tmux(&["send-keys", "-t", s, "F1"]);
    wait_for(s, "[Tasks]");
    tmux(&["send-keys", "-t", s, "Enter"]);
    // Back from Instruction past Audit, the last tab.
    tmux(&["send-keys", "-t", s, "["]);
    wait_for(s, "[Audit]");
    tmux(&["send-keys", "-t", s, "["]);
    wait_for(s, "[Episodes]");
    wait_for(s, "▶ eval-");
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_for(s, "Trajectory");
    assert!(screen.contains("upper"), "{screen}");
    tmux(&["send-keys", "-t", s, "Escape"]);
    wait_for(s, "[Tasks]");
    wait_for(s, "[Episodes]");
    tmux(&["send-keys", "-t", s, "q"]);
}

/// Two TUIs on one workspace: what one curates, the other shows within
/// seconds, without Ctrl-R.
#[test]
fn two_tuis_see_each_others_curation_in_tmux() {
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
    let name = format!("endless-e2e-two-{}", std::process::id());
    let one = start_tui(format!("{name}-a"), dir.path(), None, 120, 40);
    let two = start_tui(format!("{name}-b"), dir.path(), None, 120, 40);
    let (a, b) = (&one.0, &two.0);
    wait_for(a, "alpha-task");
    let screen = wait_for(b, "alpha-task");
    assert!(!screen.contains("accepted"), "{screen}");
    // The first accepts alpha-task and rates it 3.
    tmux(&["send-keys", "-t", a, "a"]);
    tmux(&["send-keys", "-t", a, "3"]);
    wait_for(a, "★★★··");
    // The second shows it, with no key pressed.
    let start = Instant::now();
    let screen = wait_for_up_to(b, "★★★··", Duration::from_secs(10));
    assert!(screen.contains("accepted"), "{screen}");
    assert!(start.elapsed() < Duration::from_secs(5), "within seconds");
    tmux(&["send-keys", "-t", a, "q"]);
    tmux(&["send-keys", "-t", b, "q"]);
}
