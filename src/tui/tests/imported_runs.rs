//! A Harbor job directory (the checked-in `tests/fixtures/harbor-job`)
//! imported as a run: the Episodes view lists its trials, the inspector
//! shows the agent's turns, the verifier's tests and failure labels,
//! replays the transcript (there is no terminal recording), and ratings
//! and labels go to the index as for any run.

use super::*;

fn imported(dir: &Path) -> Workspace {
    let ws = Workspace::open(dir).unwrap();
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-job");
    crate::workbench::import_runs::import_harbor(&ws, &job, None).unwrap();
    ws
}

#[test]
fn an_imported_harbor_job_shows_inspects_replays_and_rates() {
    let dir = tempfile::tempdir().unwrap();
    let ws = imported(dir.path());
    let mut app = app_on(&ws);
    cmd(&mut app, &ws, Command::ViewEpisodes);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("3/3 shown, 1 passed"), "{screen}");
    snap!("imported_episodes_120x40", &mut app, 120, 40);

    // The looping trial: its turns, labels and the verifier's test.
    key(&mut app, &ws, KeyCode::Char('/'));
    typed(&mut app, "fix-perm");
    key(&mut app, &ws, KeyCode::Enter);
    assert_eq!(
        app.episodes.selected_row().unwrap().task_id,
        "fix-permissions"
    );
    cmd(&mut app, &ws, Command::Select);
    let insp = app.inspector.as_ref().expect("inspector open");
    assert!(insp.episode.result.is_ok(), "{:?}", insp.episode.result);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("ls -l /app/run.sh"), "{screen}");
    assert!(screen.contains("harbor:terminus-2"), "{screen}");
    snap!("imported_inspector_trajectory_120x40", &mut app, 120, 40);
    cmd(&mut app, &ws, Command::NextTab);
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("run.sh is not executable"), "{screen}");

    // Replay: the transcript, as no terminal was recorded.
    cmd(&mut app, &ws, Command::NextTab);
    let screen = render(&mut app, 80, 24);
    assert!(
        screen.contains("transcript (no terminal recording)"),
        "{screen}"
    );
    assert!(screen.contains("$ ls -l /app/run.sh"), "{screen}");
    snap!("imported_replay_80x24", &mut app, 80, 24);
    cmd(&mut app, &ws, Command::Left);
    cmd(&mut app, &ws, Command::Left);
    let r = app.inspector.as_ref().unwrap().replay.as_ref().unwrap();
    assert_eq!((r.position, r.cast.events.len()), (2, 4));

    // Rated and labelled like any episode.
    cmd(&mut app, &ws, Command::Rate2);
    cmd(&mut app, &ws, Command::Label);
    typed(&mut app, "agent");
    key(&mut app, &ws, KeyCode::Enter);
    let row = ws
        .list_episodes(Some("harbor-harbor-fixture-job"))
        .unwrap()
        .into_iter()
        .find(|r| r.task_id == "fix-permissions")
        .unwrap();
    assert_eq!(row.rating, Some(2));
    assert!(row.label.is_some(), "{row:?}");

    // Its task is not in this workspace: T goes nowhere, and says nothing false.
    cmd(&mut app, &ws, Command::Back);
    cmd(&mut app, &ws, Command::GotoTask);
    let screen = render(&mut app, 120, 40);
    assert!(!screen.contains("fix-permissions#0 PASS"), "{screen}");
}
