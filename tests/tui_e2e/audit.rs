//! Issue 34, end to end: the audit job launched from the TUI on the
//! planted-defect fixtures (`tests/fixtures/audit`), its findings in the
//! Tasks view (the header's "N flagged", a label filter showing exactly
//! the flagged tasks), and a `tasks audit` run by another process showing
//! up in an open TUI without a key pressed.

use super::*;

/// The fixture tasks with planted defects, by id.
fn fixture_ids() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit");
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

/// A workspace holding the fixtures and a sandbox home; `None` (the test
/// skips) without tmux or the verifier's Python.
fn audit_workspace() -> Option<(tempfile::TempDir, tempfile::TempDir)> {
    if !have_tmux() || !Path::new(endless::verify::PYTHON).exists() {
        eprintln!("skipping: tmux or {} is missing", endless::verify::PYTHON);
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit");
    for id in fixture_ids() {
        let task = endless::task::read_native(&fixtures.join(&id), &Default::default()).unwrap();
        ws.add_task(&task, TaskStatus::Candidate).unwrap();
    }
    Some((dir, sandbox_home()))
}

/// The tasks whose indexed audit has `label` (any label: `None`), sorted.
fn indexed_with(ws: &Path, label: Option<&str>) -> Vec<String> {
    let rows = Workspace::open(ws).unwrap().audit_rows().unwrap();
    rows.into_iter()
        .filter(|r| match label {
            Some(l) => r.labels.iter().any(|x| x == l),
            None => r.findings > 0,
        })
        .map(|r| r.task_id)
        .collect()
}

/// The task ids the Tasks table shows on `screen`.
fn shown_ids(screen: &str) -> Vec<String> {
    let mut ids: Vec<String> = fixture_ids()
        .into_iter()
        .filter(|id| {
            screen.lines().any(|l| {
                l.trim_start_matches(['▶', ' '])
                    .starts_with(&format!("{id} "))
            })
        })
        .collect();
    ids.sort();
    ids
}

#[test]
fn an_audit_job_flags_the_planted_defects_and_a_label_filters_them_in_tmux() {
    let Some((dir, home)) = audit_workspace() else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-audit-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    wait_for(s, "audit-unseeded-random");

    // The audit form from Tasks: every task, the two cheap checks.
    tmux(&["send-keys", "-t", s, "U"]);
    wait_for(s, "Audit tasks");
    tmux(&["send-keys", "-t", s, "C-u"]);
    tmux(&["send-keys", "-t", s, "-l", "all"]);
    tmux(&["send-keys", "-t", s, "Tab", "C-u"]);
    tmux(&[
        "send-keys",
        "-t",
        s,
        "-l",
        "passes-without-work,underspecified",
    ]);
    tmux(&["send-keys", "-t", s, "Enter"]);

    // The job finishes in Jobs with its summary.
    tmux(&["send-keys", "-t", s, "F4"]);
    let start = Instant::now();
    let screen = loop {
        let screen = tmux(&["capture-pane", "-p", "-t", s]);
        if screen.contains("succeeded") || screen.contains("failed") {
            break screen;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "{screen}");
        sleep(Duration::from_millis(250));
    };
    assert!(screen.contains("succeeded"), "{screen}");
    assert!(screen.contains("7 tasks audited"), "{screen}");

    // What the job stored: the planted defects these checks see.
    let flagged = indexed_with(dir.path(), None);
    assert_eq!(
        flagged,
        vec!["audit-hidden-name", "audit-passes-before-work"]
    );
    assert_eq!(
        indexed_with(dir.path(), Some("underspecified")),
        vec!["audit-hidden-name"]
    );

    // Tasks: the header counts them; the label filter shows exactly them.
    tmux(&["send-keys", "-t", s, "F1"]);
    let screen = wait_until(s, &format!("{} flagged", flagged.len()), |sc| {
        shown_ids(sc) == fixture_ids()
    });
    assert_eq!(shown_ids(&screen), fixture_ids(), "{screen}");
    tmux(&["send-keys", "-t", s, "f"]);
    wait_for(s, "flagged (any finding)");
    tmux(&["send-keys", "-t", s, "-l", "underspec"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_until(s, "1/7", |sc| shown_ids(sc) == ["audit-hidden-name"]);
    assert_eq!(shown_ids(&screen), vec!["audit-hidden-name"], "{screen}");
    // ... and the flagged filter, every task with a finding.
    tmux(&["send-keys", "-t", s, "f"]);
    wait_for(s, "flagged (any finding)");
    tmux(&["send-keys", "-t", s, "-l", "flagged"]);
    tmux(&["send-keys", "-t", s, "Enter"]);
    let screen = wait_until(s, &format!("{}/7", flagged.len()), |sc| {
        shown_ids(sc) == flagged
    });
    assert_eq!(shown_ids(&screen), flagged, "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}

#[test]
fn a_cli_audit_in_another_process_shows_in_the_open_tui_in_tmux() {
    let Some((dir, home)) = audit_workspace() else {
        return;
    };
    let session = start_tui(
        format!("endless-e2e-audit-cli-{}", std::process::id()),
        dir.path(),
        Some(home.path()),
        160,
        48,
    );
    let s = &session.0;
    let screen = wait_for(s, "audit-unseeded-random");
    assert!(!screen.contains("flagged"), "nothing audited yet: {screen}");

    // Another process audits one task; no key is pressed in the TUI.
    let h = home.path();
    let out = Command::new(endless_bin())
        .env("XDG_CACHE_HOME", h.join("cache"))
        .env("XDG_CONFIG_HOME", h.join("config"))
        .env("XDG_STATE_HOME", h.join("state"))
        .arg("--workspace")
        .arg(dir.path())
        .args([
            "tasks",
            "audit",
            "audit-hidden-name",
            "--checks",
            "underspecified",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 with findings"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |screen: &str| {
        screen
            .lines()
            .find(|l| l.contains("audit-hidden-name"))
            .unwrap_or_default()
            .to_string()
    };
    let screen = wait_until(s, "1 flagged", |sc| row(sc).contains("1 underspec"));
    assert!(row(&screen).contains("1 underspec"), "{screen}");
    tmux(&["send-keys", "-t", s, "q"]);
}
